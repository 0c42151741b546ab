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
