"""Shared fixtures for the flashgdn Python tests.

The package is imported as installed (`pip install .`); when it is not installed, the in-tree build
(python/flashgdn/_C*.so, from `ninja -C build-py _C`) is used. The fp64 oracle is docs/gdn_check.py.
"""

import importlib.util
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if importlib.util.find_spec("flashgdn") is None:
    sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "docs"))

import gdn_check  # noqa: E402  (fp64 numpy reference of gdn-math.md)

try:
    import torch
except ImportError:
    torch = None


def rel(x, ref):
    """Relative Frobenius error (gdn-math §10.3)."""
    x = np.asarray(x, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    n = np.linalg.norm(ref.ravel())
    d = np.linalg.norm((x - ref).ravel())
    return d / n if n > 0 else d


def to_np(x):
    if torch is not None and isinstance(x, torch.Tensor):
        return x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


class Problem:
    """A varlen GDN problem in fp64 numpy with its oracle; flat token axis, cu = [0, l0, l0 + l1, ...]."""

    def __init__(self, seed, lens, Hqk, Hv, K, V, gscale=1.0, raw_gates=False):
        rng = np.random.default_rng(seed)
        self.lens = list(lens)
        self.cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        TT = int(self.cu[-1])
        self.Hqk, self.Hv, self.K, self.V = Hqk, Hv, K, V
        # l2-normalized-scale keys keep the recurrence contractive; q/k raw when the kernel normalizes
        self.q = rng.standard_normal((TT, Hqk, K))
        self.k = rng.standard_normal((TT, Hqk, K))
        self.v = rng.standard_normal((TT, Hv, V))
        self.a = rng.standard_normal((TT, Hv))
        self.b_raw = rng.standard_normal((TT, Hv))
        self.A_log = np.log(rng.uniform(1, 16, Hv)) * gscale
        self.dt_bias = rng.standard_normal(Hv) * 0.5 - 2.0
        self.g, self.beta = gdn_check.gate_fwd(self.a, self.A_log, self.dt_bias, self.b_raw)
        # non-symmetric random h0 (catches transposed-state bugs)
        self.h0 = rng.standard_normal((len(lens), Hv, K, V)) * 0.5
        self.scale = K ** -0.5

    def oracle(self, l2norm=True, h0=True, scale=None):
        q = gdn_check.l2n(self.q) if l2norm else self.q
        k = gdn_check.l2n(self.k) if l2norm else self.k
        h = self.h0 if h0 else np.zeros_like(self.h0)
        return gdn_check.gdn_core(q, k, self.v, self.g, self.beta, h, self.cu,
                                  self.scale if scale is None else scale)


@pytest.fixture
def problem():
    return Problem


def cuda_ok():
    import flashgdn

    return torch is not None and torch.cuda.is_available() and flashgdn.cuda_available()


OPCHECK_OPS = ["chunk_fwd", "recurrent_fwd", "chunk_bwd", "recurrent_pool", "recurrent_commit", "gating"]


def opcheck_case(name, device="cpu", dtype=None, dim=8, grad=True):
    """(op, args) for torch.library.opcheck of a registered op: two varlen sequences (12 + 8 tokens), GQA."""
    rng = np.random.default_rng(48)
    dtype = dtype or torch.float32
    r = lambda *s: torch.from_numpy(rng.standard_normal(s)).float().to(device)  # noqa: E731
    T, HV, K, V = 20, 2, dim, dim
    qn = lambda: torch.nn.functional.normalize(r(1, T, 1, K), dim=-1).to(dtype)  # noqa: E731
    seq = lambda g: [x.requires_grad_(g) for x in  # noqa: E731
                     (qn(), qn(), r(1, T, HV, V).to(dtype), -torch.rand(1, T, HV, device=device),
                      torch.rand(1, T, HV, device=device))]
    h0 = lambda g: r(2, HV, K, V).requires_grad_(g)  # noqa: E731
    i32 = lambda *x: torch.tensor(x, dtype=torch.int32, device=device)  # noqa: E731
    cu = torch.tensor([0, 12, 20], device=device)
    flags = (0.0, True, False, False, False, False, False)
    ops = torch.ops.flashgdn
    cases = {
        "chunk_fwd": lambda: (ops.chunk_fwd.default, (*seq(grad), None, None, h0(grad), cu, *flags, 64, 1.0, 20.0)),
        "recurrent_fwd": lambda: (ops.recurrent_fwd.default, (*seq(grad), None, None, h0(grad), cu, *flags, 1.0,
                                                              20.0)),
        "chunk_bwd": lambda: (ops.chunk_bwd.default, (*seq(False), None, None, h0(False), cu, r(1, T, HV, V).to(dtype),
                                                      r(2, HV, K, V), 0.0, False, False, False, False, False, 64, 1.0,
                                                      20.0)),
        "recurrent_pool": lambda: (ops.recurrent_pool.default, (*seq(False), None, None, r(3, HV, K, V), i32(2, 0),
                                                                None, None, None, cu, True, False, 0.0, False, False,
                                                                False, False, 1.0, 20.0, False)),
        "recurrent_commit": lambda: (ops.recurrent_commit.default, (r(3, HV, K, V), i32(1, 2), r(2, 4, HV, K, V),
                                                                    i32(2, 4), None, False)),
        "gating": lambda: (ops.gating.default, (r(HV), r(5, HV), r(5, HV), r(HV), 1.0, 20.0, False)),
    }
    return cases[name]()
