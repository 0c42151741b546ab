"""The runners of flashgdn._ops pass every argument where the extension reads it.

The extension reads each op's arguments in the order of the op table (include/flashgdn/flashgdn_ops.h) and says
that order in _C.signature(op). Each runner is called here with distinct objects for every argument it forwards,
through a recorder in front of the extension, and every argument must arrive at the position of its name.
"""

import numpy as np
import pytest

from flashgdn import _C, _ops


class Recorder:
    """Stands in for flashgdn._C inside _ops: records the positional arguments of one op call."""

    def __init__(self):
        self.calls = {}

    def __getattr__(self, op):
        def record(*args):
            self.calls[op] = args
        return record


@pytest.fixture
def recorded(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(_ops, "_C", rec)
    return rec


def arr(*shape):
    return np.zeros(shape, dtype=np.float32)


def check(rec, op, expected):
    names = _C.signature(op)
    args = rec.calls[op]
    assert len(args) == len(names), (op, names)
    got = dict(zip(names, args))
    for name, want in expected.items():
        if isinstance(want, np.ndarray):
            assert got[name] is want, f"{op}: {name} arrived at the position of another argument"
        else:
            assert got[name] == want, f"{op}: {name}: {got[name]!r} != {want!r}"


def test_every_op_has_a_signature():
    for op in ["chunk_fwd", "chunk_bwd", "gating", "recurrent", "recurrent_commit", "mixer_decode"]:
        names = _C.signature(op)
        assert len(names) == len(set(names)), op
        assert names[-1] in ("stream", "alloc")
    with pytest.raises(ValueError):
        _C.signature("bogus")


def test_chunk_fwd_and_bwd_argument_order(recorded):
    q, k, v, g, beta, A_log, dt_bias, h0, cu, ckpt, d_o, d_ht = (arr(1, 4, 2, 8) for _ in range(12))
    o = arr(1, 4, 2, 8)
    _ops.chunk_fwd(q, k, v, g, beta, 0.5, h0, False, True, cu, True, A_log, dt_bias, False, False, True, 32,
                   state_checkpoints=ckpt, checkpoint_interval=64, out=o)
    check(recorded, "chunk_fwd", dict(q=q, k=k, v=v, g=g, beta=beta, A_log=A_log, dt_bias=dt_bias,
                                       initial_state=h0, cu_seqlens=cu, o=o, final_state=None,
                                       state_checkpoints=ckpt, checkpoint_interval=64, scale=0.5,
                                       use_qk_l2norm_in_kernel=True, state_v_first=True, chunk_size=32))
    _ops.chunk_bwd(q, k, v, g, beta, 0.25, h0, True, cu, True, A_log, dt_bias, False, False, False, 16, d_o, d_ht)
    check(recorded, "chunk_bwd", dict(q=q, k=k, v=v, g=g, beta=beta, A_log=A_log, dt_bias=dt_bias,
                                       initial_state=h0, cu_seqlens=cu, d_o=d_o, d_ht=d_ht, scale=0.25,
                                       use_qk_l2norm_in_kernel=True, state_v_first=False, chunk_size=16))


def test_recurrent_argument_order(recorded):
    q, k, v, g, beta, A_log, dt_bias, h0, cu = (arr(1, 4, 2, 8) for _ in range(9))
    _ops.recurrent(q, k, v, g, beta, 0.5, h0, False, True, cu, False, A_log, dt_bias, False, False, True)
    check(recorded, "recurrent", dict(q=q, k=k, v=v, g=g, beta=beta, A_log=A_log, dt_bias=dt_bias, cu_seqlens=cu,
                                       initial_state=h0, state_pool=None, final_state=None, commit=True,
                                       null_slot_is_invalid=False, scale=0.5, use_qk_l2norm_in_kernel=True,
                                       state_v_first=True))
    pool, si, na, inter, ii, o = (arr(2, 2) for _ in range(6))
    _ops.recurrent_pool(q, k, v, g, beta, pool, si, na, inter, ii, cu, False, True, 0.75, False, None, True, out=o,
                        A_log=A_log, dt_bias=dt_bias)
    check(recorded, "recurrent", dict(q=q, k=k, v=v, g=g, beta=beta, A_log=A_log, dt_bias=dt_bias, cu_seqlens=cu,
                                       o=o, state_pool=pool, state_indices=si, num_accepted_tokens=na,
                                       intermediate_states=inter, intermediate_indices=ii, initial_state=None,
                                       final_state=None, commit=False, null_slot_is_invalid=True, scale=0.75,
                                       use_qk_l2norm_in_kernel=False, state_v_first=True))


def test_commit_gating_mixer_argument_order(recorded):
    pool, si, inter, na, ii = (arr(2, 2) for _ in range(5))
    _ops.recurrent_commit(pool, si, inter, na, ii, True)
    check(recorded, "recurrent_commit", dict(state_pool=pool, state_indices=si, intermediate_states=inter,
                                              intermediate_indices=ii, num_accepted_tokens=na,
                                              null_slot_is_invalid=True))
    A_log, a, b, dt_bias = arr(2), arr(3, 2), arr(3, 2), arr(2)
    _ops.gating(A_log, a, b, dt_bias, 1.0, 20.0, False)
    check(recorded, "gating", dict(A_log=A_log, a=a, dt_bias=dt_bias, b=b))
    t = [arr(2, 2) for _ in range(18)]
    names = ["x", "z", "a", "b", "A_log", "dt_bias", "conv_weight", "conv_bias", "norm_weight", "cu_seqlens",
             "conv_state", "state_pool", "state_indices", "num_accepted_tokens", "intermediate_states",
             "intermediate_conv_windows", "intermediate_indices"]
    _ops.mixer_decode(*t[:17], 2, 8, False, True, 0.5, 1e-5, None, True, out=t[17])
    check(recorded, "mixer_decode", dict(zip(names, t[:17]), out=t[17], num_k_heads=2, head_k_dim=8, commit=False,
                                          null_slot_is_invalid=True, scale=0.5, state_v_first=True))


def test_exec_options_tuple_follows_the_table():
    """exec_options builds the ExecOptions tuple the extension reads in FLASHGDN_EXEC_OPTIONS order: each keyword
    lands at its field's position (the table is read from the header, so a new field shows up here)."""
    import inspect
    import pathlib
    import re

    header = pathlib.Path(__file__).resolve().parents[2] / "include" / "flashgdn" / "flashgdn_ops.h"
    text = header.read_text()
    block = text[text.index("#define FLASHGDN_EXEC_OPTIONS"):text.index("#define FLASHGDN_GATE_OPTIONS")]
    fields = re.findall(r"S\(\s*\w+,\s*\w+,\s*(\w+),", block)
    assert fields[:4] == ["check_indices", "cpu_fp64", "cpu_algo", "cpu_threads"], fields
    params = [p for p in inspect.signature(_ops.exec_options.__wrapped__).parameters]
    ints = {name: 10 + i for i, name in enumerate(params) if name not in ("check_indices", "cpu_fp64", "cpu_algo")}
    with _ops.exec_options(**ints):
        got = _ops._EXEC.get()
    assert len(got) == len(fields), (got, fields)
    for name, value in ints.items():
        assert got[fields.index(name)] == value, (name, got, fields)
