"""CPU backend through the Python package, numpy and torch-CPU inputs, against the fp64 oracle (gdn_check.py).

Every output is pre-filled with NaN where the caller provides it (out=, pools) so a missed write shows.
"""

import numpy as np
import pytest

import flashgdn
from conftest import Problem, gdn_check, rel, to_np, torch

FRAMEWORKS = ["numpy"] + (["torch"] if torch is not None else [])
# fp64: params carry scale as float32, so the fp64 backend agrees to ~1e-8, not 1e-15
TOL = {"float64": 1e-7, "float32": 1e-5}


def mk(x, fw, dtype="float64"):
    """numpy fp64 -> the framework's array of `dtype` (ints keep their integer dtype)."""
    if x is None:
        return None
    x = np.ascontiguousarray(x)
    if np.issubdtype(x.dtype, np.integer):
        return torch.from_numpy(x.copy()) if fw == "torch" else x.copy()
    if fw == "torch":
        return torch.from_numpy(x.copy()).to(getattr(torch, dtype))
    return x.astype(dtype)


def flat(p, x, fw, dtype):
    """flat varlen [TT, ...] -> [1, TT, ...]"""
    return mk(x[None], fw, dtype)


@pytest.fixture(params=FRAMEWORKS)
def fw(request):
    return request.param


@pytest.fixture(params=["float64", "float32"])
def dtype(request):
    return request.param


# ---- chunked forward ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("algo", ["recurrent", "chunked"])
def test_chunk_varlen_matches_oracle(fw, dtype, algo):
    # lengths around the chunk size, with empty sequences at the start, middle and end (gdn-math §10.4)
    p = Problem(1, [0, 1, 63, 0, 65, 130, 0], Hqk=2, Hv=4, K=32, V=16)
    o_ref, ht_ref = p.oracle()
    h0 = mk(p.h0, fw, "float64" if dtype == "float64" else "float32")
    with flashgdn.exec_options(cpu_fp64=dtype == "float64", cpu_algo=algo):
        o, ht = flashgdn.chunk_gated_delta_rule(
            flat(p, p.q, fw, dtype), flat(p, p.k, fw, dtype), flat(p, p.v, fw, dtype), flat(p, p.g, fw, dtype),
            flat(p, p.beta, fw, dtype), initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True,
            cu_seqlens=mk(p.cu, fw))
    assert type(o) is type(flat(p, p.v, fw, dtype))
    assert tuple(o.shape) == (1, p.cu[-1], p.Hv, p.V)
    assert tuple(ht.shape) == (len(p.lens), p.Hv, p.K, p.V)
    assert rel(to_np(o)[0], o_ref) < TOL[dtype]
    assert rel(to_np(ht), ht_ref) < TOL[dtype]
    # zero-length sequences: final state equals the initial state exactly (in the state dtype)
    for n, L in enumerate(p.lens):
        if L == 0:
            np.testing.assert_array_equal(to_np(ht)[n], to_np(h0)[n])


def test_chunk_fixed_length_no_h0_gqa_scale(fw):
    p = Problem(2, [70, 70], Hqk=2, Hv=8, K=16, V=32)
    scale = 0.37
    o_ref, ht_ref = p.oracle(l2norm=True, h0=False, scale=scale)
    B, T = 2, 70
    rs = lambda x: x.reshape((B, T) + x.shape[1:])  # noqa: E731
    with flashgdn.exec_options(cpu_fp64=True):
        o, ht = flashgdn.chunk_gated_delta_rule(mk(rs(p.q), fw), mk(rs(p.k), fw), mk(rs(p.v), fw), mk(rs(p.g), fw),
                                                mk(rs(p.beta), fw), scale=scale, output_final_state=True,
                                                use_qk_l2norm_in_kernel=True)
    assert rel(to_np(o).reshape(o_ref.shape), o_ref) < TOL["float64"]
    assert rel(to_np(ht), ht_ref) < TOL["float64"]
    o2, ht2 = flashgdn.chunk_gated_delta_rule(mk(rs(p.q), fw), mk(rs(p.k), fw), mk(rs(p.v), fw), mk(rs(p.g), fw),
                                              mk(rs(p.beta), fw), scale=scale, use_qk_l2norm_in_kernel=True)
    assert ht2 is None


def test_chunk_gate_in_kernel_and_v_major(fw):
    p = Problem(3, [37, 80], Hqk=1, Hv=2, K=16, V=16)
    o_ref, ht_ref = p.oracle()
    h0_v = np.ascontiguousarray(p.h0.transpose(0, 1, 3, 2))
    with flashgdn.exec_options(cpu_fp64=True):
        o, ht = flashgdn.chunk_gated_delta_rule(
            flat(p, p.q, fw, "float64"), flat(p, p.k, fw, "float64"), flat(p, p.v, fw, "float64"),
            flat(p, p.a, fw, "float64"), flat(p, p.b_raw, fw, "float64"), initial_state=mk(h0_v, fw),
            output_final_state=True, use_qk_l2norm_in_kernel=True, cu_seqlens=mk(p.cu, fw),
            use_gate_in_kernel=True, A_log=mk(p.A_log, fw), dt_bias=mk(p.dt_bias, fw),
            use_beta_sigmoid_in_kernel=True, state_v_first=True, chunk_size=16)
    assert rel(to_np(o)[0], o_ref) < TOL["float64"]
    assert rel(to_np(ht).transpose(0, 1, 3, 2), ht_ref) < TOL["float64"]


# ---- fused recurrent (FLA contract) ------------------------------------------------------------------------
def test_fused_recurrent_matches_oracle(fw, dtype):
    p = Problem(4, [1, 9, 0, 33], Hqk=2, Hv=4, K=16, V=32)
    o_ref, ht_ref = p.oracle()
    with flashgdn.exec_options(cpu_fp64=dtype == "float64"):
        o, ht = flashgdn.fused_recurrent_gated_delta_rule(
            flat(p, p.q, fw, dtype), flat(p, p.k, fw, dtype), flat(p, p.v, fw, dtype), flat(p, p.g, fw, dtype),
            flat(p, p.beta, fw, dtype), initial_state=mk(p.h0, fw, "float64" if dtype == "float64" else "float32"),
            output_final_state=True, use_qk_l2norm_in_kernel=True, cu_seqlens=mk(p.cu, fw))
    assert rel(to_np(o)[0], o_ref) < TOL[dtype]
    assert rel(to_np(ht), ht_ref) < TOL[dtype]


@pytest.mark.skipif(torch is None, reason="torch not installed")
def test_transformers_positional_call():
    # Qwen3-Next in transformers calls `recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=...,
    # output_final_state=True, use_qk_l2norm_in_kernel=True)` with g and beta positional: beta must stay 5th.
    p = Problem(5, [1, 1, 1], Hqk=2, Hv=4, K=16, V=16)
    o_ref, ht_ref = p.oracle()
    B = 3
    rs = lambda x: torch.from_numpy(x.reshape((B, 1) + x.shape[1:])).float()  # noqa: E731
    o, ht = flashgdn.fused_recurrent_gated_delta_rule(rs(p.q), rs(p.k), rs(p.v), rs(p.g), rs(p.beta),
                                                      initial_state=torch.from_numpy(p.h0).float(),
                                                      output_final_state=True, use_qk_l2norm_in_kernel=True)
    assert rel(to_np(o).reshape(o_ref.shape), o_ref) < 1e-5
    assert rel(to_np(ht), ht_ref) < 1e-5


# ---- state pool: decode, verify, commit --------------------------------------------------------------------
def _states_after(p, n, h0):
    """States after each token of sequence n for every head, [L, Hv, K, V] (fp64 oracle)."""
    s, e = p.cu[n], p.cu[n + 1]
    q, k = gdn_check.l2n(p.q), gdn_check.l2n(p.k)
    out = []
    outs = []
    r = p.Hv // p.Hqk
    for h in range(p.Hv):
        o, _, Ss = gdn_check.rec_fwd_head(q[s:e, h // r], k[s:e, h // r], p.v[s:e, h], p.g[s:e, h],
                                          p.beta[s:e, h], h0[h], p.scale, keep=True)
        out.append(np.stack(Ss[1:]))
        outs.append(o)
    return np.stack(out, 1), np.stack(outs, 1)


@pytest.mark.parametrize("null_slot_is_invalid", [False, True])
def test_pool_decode_invalid_slots(fw, null_slot_is_invalid):
    N, slots = 5, 8
    p = Problem(6, [1] * N, Hqk=2, Hv=4, K=16, V=16)
    rng = np.random.default_rng(7)
    pool0 = rng.standard_normal((slots, p.Hv, p.K, p.V)).astype(np.float32)
    idx = np.array([3, -1, 0, 7, 5], dtype=np.int32)
    pool = mk(pool0, fw, "float32")
    rs = lambda x: mk(x.reshape((N, 1) + x.shape[1:]), fw, "float32")  # noqa: E731
    out = rs(np.full(p.v.shape, np.nan))
    o = flashgdn.recurrent_gated_delta_rule_pool(rs(p.q), rs(p.k), rs(p.v), rs(p.g), rs(p.beta), pool,
                                                 mk(idx, fw), use_qk_l2norm_in_kernel=True,
                                                 null_slot_is_invalid=null_slot_is_invalid, out=out)
    o = to_np(o)[:, 0]
    pool_after = to_np(pool)
    for n in range(N):
        s = idx[n]
        invalid = s < 0 or (null_slot_is_invalid and s == 0)
        if invalid:
            assert np.all(o[n] == 0), f"row {n}: invalid slot must give zero output"
            continue
        S, on = _states_after(p, n, pool0[s].astype(np.float64))
        assert rel(o[n], on[0]) < 1e-5
        assert rel(pool_after[s], S[-1]) < 1e-5
    untouched = [s for s in range(slots) if s not in [i for i in idx if i > (0 if null_slot_is_invalid else -1)]]
    np.testing.assert_array_equal(pool_after[untouched], pool0[untouched])


def test_verify_then_commit(fw):
    N, T, slots = 4, 3, 6
    p = Problem(8, [T] * N, Hqk=1, Hv=2, K=16, V=16)
    rng = np.random.default_rng(9)
    pool0 = rng.standard_normal((slots, p.Hv, p.K, p.V)).astype(np.float32)
    idx = np.array([2, 4, 1, 5], dtype=np.int64)
    pool = mk(pool0, fw, "float32")
    inter = mk(np.full((N, T, p.Hv, p.K, p.V), np.nan), fw, "float32")
    rs = lambda x: mk(x.reshape((N, T) + x.shape[1:]), fw, "float32")  # noqa: E731
    o = flashgdn.recurrent_gated_delta_rule_pool(rs(p.q), rs(p.k), rs(p.v), rs(p.g), rs(p.beta), pool, mk(idx, fw),
                                                 intermediate_states=inter, commit=False,
                                                 use_qk_l2norm_in_kernel=True)
    np.testing.assert_array_equal(to_np(pool), pool0)  # commit=False never writes the pool
    accepted = np.array([1, 3, 2, 0], dtype=np.int32)  # 0: out of range -> row skipped
    flashgdn.commit_intermediate_states(pool, mk(idx, fw), inter, mk(accepted, fw))
    pool_after = to_np(pool)
    for n in range(N):
        S, on = _states_after(p, n, pool0[idx[n]].astype(np.float64))
        assert rel(to_np(o)[n], on) < 1e-5
        assert rel(to_np(inter)[n], S) < 1e-5
        if accepted[n] >= 1:
            assert rel(pool_after[idx[n]], S[accepted[n] - 1]) < 1e-5
        else:
            np.testing.assert_array_equal(pool_after[idx[n]], pool0[idx[n]])


def test_vllm_slot_table(fw):
    # state_indices [N, T_max]: start from column a_prev - 1, state after token t to column t
    N, T = 3, 3
    p = Problem(10, [T] * N, Hqk=1, Hv=2, K=16, V=16)
    rng = np.random.default_rng(11)
    slots = 1 + N * T
    pool0 = rng.standard_normal((slots, p.Hv, p.K, p.V)).astype(np.float32)
    table = (1 + np.arange(N * T, dtype=np.int32)).reshape(N, T)
    a_prev = np.array([1, 3, 2], dtype=np.int32)
    pool = mk(pool0, fw, "float32")
    rs = lambda x: mk(x.reshape((N, T) + x.shape[1:]), fw, "float32")  # noqa: E731
    o = flashgdn.recurrent_gated_delta_rule_pool(rs(p.q), rs(p.k), rs(p.v), rs(p.g), rs(p.beta), pool,
                                                 mk(table, fw), num_accepted_tokens=mk(a_prev, fw),
                                                 use_qk_l2norm_in_kernel=True, null_slot_is_invalid=True)
    pool_after = to_np(pool)
    for n in range(N):
        S, on = _states_after(p, n, pool0[table[n, a_prev[n] - 1]].astype(np.float64))
        assert rel(to_np(o)[n], on) < 1e-5
        for t in range(T):
            assert rel(pool_after[table[n, t]], S[t]) < 1e-5


def test_pool_sglang_style_gating_in_kernel(fw):
    # SGLang's decode: raw a, b with A_log, dt_bias, softplus params, V-major pool; here also allow_neg_eigval
    N, slots = 3, 5
    p = Problem(14, [2] * N, Hqk=1, Hv=2, K=16, V=16)
    sp_beta, sp_thr = 1.5, 3.0
    g, beta = gdn_check.gate_fwd(p.a, p.A_log, p.dt_bias, p.b_raw, neg_eig=True, sp_beta=sp_beta, sp_thr=sp_thr)
    rng = np.random.default_rng(15)
    pool0 = rng.standard_normal((slots, p.Hv, p.V, p.K)) * 0.5  # V-major
    idx = np.array([4, 0, 2], dtype=np.int32)
    pool = mk(pool0, fw)
    rs = lambda x: mk(x.reshape((N, 2) + x.shape[1:]), fw)  # noqa: E731
    with flashgdn.exec_options(cpu_fp64=True, check_indices=True):
        o = flashgdn.recurrent_gated_delta_rule_pool(
            rs(p.q), rs(p.k), rs(p.v), rs(p.a), rs(p.b_raw), pool, mk(idx, fw), use_qk_l2norm_in_kernel=True,
            use_gate_in_kernel=True, A_log=mk(p.A_log, fw), dt_bias=mk(p.dt_bias, fw),
            use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True, softplus_beta=sp_beta,
            softplus_threshold=sp_thr, state_v_first=True)
    q, k = gdn_check.l2n(p.q), gdn_check.l2n(p.k)
    for n in range(N):
        s_, e_ = p.cu[n], p.cu[n + 1]
        for h in range(p.Hv):
            on, S, _ = gdn_check.rec_fwd_head(q[s_:e_, 0], k[s_:e_, 0], p.v[s_:e_, h], g[s_:e_, h], beta[s_:e_, h],
                                              pool0[idx[n], h].T, p.scale)
            assert rel(to_np(o)[n, :, h], on) < TOL["float64"]
            assert rel(to_np(pool)[idx[n], h].T, S) < TOL["float64"]
    assert np.any(beta > 1)  # allow_neg_eigval exercised


def test_check_indices_rejects_out_of_range_slot(fw):
    p = Problem(16, [1, 1], Hqk=1, Hv=1, K=8, V=8)
    rs = lambda x: mk(x.reshape((2, 1) + x.shape[1:]), fw, "float32")  # noqa: E731
    pool = mk(np.zeros((2, 1, 8, 8)), fw, "float32")
    idx = mk(np.array([0, 7], dtype=np.int32), fw)
    with flashgdn.exec_options(check_indices=True):
        with pytest.raises(flashgdn.InvalidArgumentError, match="state_indices"):
            flashgdn.recurrent_gated_delta_rule_pool(rs(p.q), rs(p.k), rs(p.v), rs(p.g), rs(p.beta), pool, idx)
    # without the check an out-of-range slot is an invalid row: zero output, nothing written
    o = flashgdn.recurrent_gated_delta_rule_pool(rs(p.q), rs(p.k), rs(p.v), rs(p.g), rs(p.beta), pool, idx,
                                                 use_qk_l2norm_in_kernel=True)
    assert np.all(to_np(o)[1] == 0)


def test_exec_options_are_per_thread(fw):
    # one thread holds exec_options(check_indices=True) open while another calls without it: the other call must not
    # see the option (the out-of-range slot is an invalid row there, not an error), and the holder's call must
    import threading

    p = Problem(16, [1, 1], Hqk=1, Hv=1, K=8, V=8)
    rs = lambda x: mk(x.reshape((2, 1) + x.shape[1:]), fw, "float32")  # noqa: E731
    pool = mk(np.zeros((2, 1, 8, 8)), fw, "float32")
    idx = mk(np.array([0, 7], dtype=np.int32), fw)
    call = lambda: flashgdn.recurrent_gated_delta_rule_pool(rs(p.q), rs(p.k), rs(p.v), rs(p.g), rs(p.beta),  # noqa
                                                            pool, idx)
    inside, done, seen = threading.Event(), threading.Event(), {}

    def holder():
        with flashgdn.exec_options(check_indices=True):
            inside.set()
            done.wait(30)
            try:
                call()
                seen["holder"] = "no error"
            except flashgdn.InvalidArgumentError:
                seen["holder"] = "rejected"

    t = threading.Thread(target=holder)
    t.start()
    assert inside.wait(30)
    try:
        o = call()  # outside any exec_options block in this thread
    finally:
        done.set()
        t.join(30)
    assert np.all(to_np(o)[1] == 0)
    assert seen["holder"] == "rejected"


# ---- gating ------------------------------------------------------------------------------------------------
def test_fused_gdn_gating(fw):
    p = Problem(12, [50], Hqk=1, Hv=6, K=8, V=8)
    a = p.a * 12  # reach the softplus threshold
    g_ref, b_ref = gdn_check.gate_fwd(a, p.A_log, p.dt_bias, p.b_raw, sp_beta=1.5, sp_thr=10.0)
    g, b = flashgdn.fused_gdn_gating(mk(p.A_log, fw, "float32"), mk(a, fw, "float32"), mk(p.b_raw, fw, "float32"),
                                     mk(p.dt_bias, fw, "float32"), beta=1.5, threshold=10.0)
    assert tuple(g.shape) == (1, 50, 6) and tuple(b.shape) == (1, 50, 6)
    assert str(g.dtype).endswith("float32")
    assert rel(to_np(g)[0], g_ref) < 1e-5
    assert rel(to_np(b)[0], b_ref) < 1e-5


# ---- errors carry the library's message --------------------------------------------------------------------
def test_bad_input_raises_with_cpp_message(fw):
    p = Problem(13, [8], Hqk=1, Hv=2, K=8, V=8)
    with pytest.raises(ValueError) as ei:
        flashgdn.chunk_gated_delta_rule(flat(p, p.q, fw, "float32"), flat(p, p.k, fw, "float32"),
                                        mk(p.v, fw, "float32"),  # 3 dims: should be [B, T, Hv, V]
                                        flat(p, p.g, fw, "float32"), flat(p, p.beta, fw, "float32"))
    msg = str(ei.value)
    assert isinstance(ei.value, flashgdn.InvalidArgumentError)
    assert "chunk_fwd" in msg and "v" in msg and "src/" in msg, msg
