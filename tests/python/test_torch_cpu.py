"""torch on the CPU backend: autograd through chunk_bwd against the fp64 oracle's backward, custom-op checks,
torch.compile(fullgraph=True) tracing, foreign DLPack inputs."""

import numpy as np
import pytest

import flashgdn
from conftest import Problem, gdn_check, rel, to_np, torch

pytestmark = pytest.mark.skipif(torch is None, reason="torch not installed")


def t64(x, grad=False):
    return torch.from_numpy(np.ascontiguousarray(x)).double().requires_grad_(grad)


@pytest.mark.parametrize("raw_gates", [False, True])
def test_autograd_matches_oracle_backward(raw_gates):
    # lengths not multiples of the chunk, an empty sequence, GQA (Hqk=2, Hv=4), K != V
    p = Problem(21, [19, 0, 40], Hqk=2, Hv=4, K=16, V=8)
    rng = np.random.default_rng(22)
    dO = rng.standard_normal((p.cu[-1], p.Hv, p.V))
    dhT = rng.standard_normal((len(p.lens), p.Hv, p.K, p.V))
    P = (p.q, p.k, p.v, p.a, p.b_raw, p.A_log, p.dt_bias, p.h0)
    ref, dg_ref, db_ref = gdn_check.full_backward(P, p.cu, p.Hqk, p.Hv, p.scale, dO, dhT)
    dq_r, dk_r, dv_r, da_r, dbraw_r, dA_r, ddt_r, dh0_r = ref

    q, k, v = t64(p.q[None], True), t64(p.k[None], True), t64(p.v[None], True)
    h0 = t64(p.h0, True)
    cu = torch.from_numpy(p.cu)
    with flashgdn.exec_options(cpu_fp64=True):
        if raw_gates:
            a, b = t64(p.a[None], True), t64(p.b_raw[None], True)
            A_log, dt_bias = t64(p.A_log, True), t64(p.dt_bias, True)
            o, ht = flashgdn.chunk_gated_delta_rule(q, k, v, a, b, initial_state=h0, output_final_state=True,
                                                    use_qk_l2norm_in_kernel=True, cu_seqlens=cu,
                                                    use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias,
                                                    use_beta_sigmoid_in_kernel=True)
        else:
            g, beta = t64(p.g[None], True), t64(p.beta[None], True)
            o, ht = flashgdn.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                                    use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
        loss = (o * t64(dO[None])).sum() + (ht * t64(dhT)).sum()
        loss.backward()
    tol = 1e-7  # scale is a float32 param
    assert rel(to_np(q.grad)[0], dq_r) < tol
    assert rel(to_np(k.grad)[0], dk_r) < tol
    assert rel(to_np(v.grad)[0], dv_r) < tol
    assert rel(to_np(h0.grad), dh0_r) < tol
    if raw_gates:
        assert rel(to_np(a.grad)[0], da_r) < tol
        assert rel(to_np(b.grad)[0], dbraw_r) < tol
        assert rel(to_np(A_log.grad), dA_r) < tol
        assert rel(to_np(dt_bias.grad), ddt_r) < tol
    else:
        assert rel(to_np(g.grad)[0], dg_ref) < tol
        assert rel(to_np(beta.grad)[0], db_ref) < tol


def test_autograd_fp32_tolerance():
    p = Problem(23, [64, 33], Hqk=1, Hv=2, K=16, V=16)
    rng = np.random.default_rng(24)
    dO = rng.standard_normal((p.cu[-1], p.Hv, p.V))
    q_n, k_n = gdn_check.l2n(p.q), gdn_check.l2n(p.k)
    ref = gdn_check.gdn_core_bwd(q_n, k_n, p.v, p.g, p.beta, np.zeros_like(p.h0), p.cu, p.scale, dO,
                                 np.zeros_like(p.h0))
    f32 = lambda x: torch.from_numpy(np.ascontiguousarray(x[None])).float().requires_grad_(True)  # noqa: E731
    q, k, v, g, beta = f32(q_n), f32(k_n), f32(p.v), f32(p.g), f32(p.beta)
    o, _ = flashgdn.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=torch.from_numpy(p.cu))
    o.backward(torch.from_numpy(dO[None]).float())
    for x, r in zip((q, k, v, g, beta), ref[:5]):
        assert x.grad.dtype == torch.float32
        assert rel(to_np(x.grad)[0], r) < 1e-4


def test_cuda_overrides_pass_through_and_leave_the_cpu_backward_alone():
    # exec_options' CUDA kernel overrides (the chains' launch form and segment split) reach the op and the CPU backend
    # ignores them: the same gradients, bit for bit
    p = Problem(25, [70, 0, 129], Hqk=1, Hv=2, K=16, V=16)
    rng = np.random.default_rng(26)
    dO = torch.from_numpy(rng.standard_normal((1, p.cu[-1], p.Hv, p.V))).float()

    def grads():
        xs = [torch.from_numpy(np.ascontiguousarray(x[None])).float().requires_grad_(True)
              for x in (p.q, p.k, p.v, p.g, p.beta)]
        o, _ = flashgdn.chunk_gated_delta_rule(*xs, cu_seqlens=torch.from_numpy(p.cu), use_qk_l2norm_in_kernel=True)
        o.backward(dO)
        return [x.grad for x in xs]

    base = grads()
    for opts in (dict(chunk_bwd_chains=1), dict(chunk_bwd_chains=2, chunk_bwd_segments=3), dict(chunk_bwd_grads=1),
                 dict(chunk_bwd_state=2)):
        with flashgdn.exec_options(**opts):
            for a, b in zip(base, grads()):
                assert torch.equal(a, b), opts


@pytest.mark.parametrize("registered", [False, True])
def test_backward_keeps_the_forwards_exec_options(registered, monkeypatch):
    # Autograd runs a CUDA graph's backward on a device thread of its own, where the caller's exec_options block (a
    # context variable) is not visible: the forward's options must reach its backward wherever that runs. Here the
    # backward runs in a fresh thread (empty context) after the block: its gradients must be those of a step run
    # wholly inside the block (the chunked CPU algorithm), which differ from the default algorithm's.
    import threading

    from flashgdn import _torch_ops

    if registered:  # the registered op's autograd (torch.compile's path) instead of the eager one
        monkeypatch.setattr(_torch_ops, "differentiable", lambda name, *a: getattr(_torch_ops, name)(*a))
    p = Problem(27, [70, 0, 129], Hqk=1, Hv=2, K=16, V=16)
    rng = np.random.default_rng(28)
    dO = torch.from_numpy(rng.standard_normal((1, p.cu[-1], p.Hv, p.V))).float()
    cu = torch.from_numpy(p.cu)

    def forward():
        xs = [torch.from_numpy(np.ascontiguousarray(x[None])).float().requires_grad_(True)
              for x in (p.q, p.k, p.v, p.g, p.beta)]
        o, _ = flashgdn.chunk_gated_delta_rule(*xs, cu_seqlens=cu, use_qk_l2norm_in_kernel=True)
        return xs, o

    xs, o = forward()
    o.backward(dO)
    default = [x.grad for x in xs]
    with flashgdn.exec_options(cpu_algo="chunked"):
        xs, o = forward()
        o.backward(dO)
    inside = [x.grad for x in xs]
    assert any(not torch.equal(a, b) for a, b in zip(default, inside)), "the option must change the gradients"
    with flashgdn.exec_options(cpu_algo="chunked"):
        xs, o = forward()
    t = threading.Thread(target=o.backward, args=(dO,))
    t.start()
    t.join()
    for a, b in zip(inside, (x.grad for x in xs)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("entry", ["chunk", "fused_recurrent"])
def test_eager_autograd_path_equals_the_registered_op(entry, monkeypatch):
    # A plain eager differentiable call skips torch.library's autograd kernel (_torch_ops._Eager); its outputs and
    # gradients must be the registered op's (what torch.compile and direct torch.ops callers get), bit for bit, with
    # raw gates, h0, varlen and GQA.
    from flashgdn import _torch_ops

    p = Problem(23, [19, 0, 40], Hqk=2, Hv=4, K=16, V=8)
    cu = torch.from_numpy(p.cu)
    xs = [t64(x, True) for x in (p.q[None], p.k[None], p.v[None], p.a[None], p.b_raw[None], p.A_log, p.dt_bias,
                                  p.h0)]
    fn = flashgdn.chunk_gated_delta_rule if entry == "chunk" else flashgdn.fused_recurrent_gated_delta_rule
    taken = []
    eager_apply = _torch_ops._Eager.apply
    monkeypatch.setattr(_torch_ops._Eager, "apply", lambda *a: taken.append(1) or eager_apply(*a))

    def run():
        q, k, v, a, b, A_log, dt_bias, h0 = xs
        o, ht = fn(q, k, v, a, b, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True,
                   cu_seqlens=cu, use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias,
                   use_beta_sigmoid_in_kernel=True)
        grads = torch.autograd.grad((o * o).sum() + ht.sum(), xs)
        return [o, ht, *grads]

    with flashgdn.exec_options(cpu_fp64=True):
        fast = run()
        assert len(taken) == 1
        monkeypatch.setattr(_torch_ops, "differentiable",
                            lambda name, *a: getattr(_torch_ops, name)(*a))  # force the registered op
        registered = run()
    assert len(taken) == 1
    for x, y in zip(fast, registered):
        assert torch.equal(x, y)


def test_torch_compile_fullgraph():
    p = Problem(26, [16, 16], Hqk=2, Hv=4, K=8, V=8)
    B, T = 2, 16
    f = lambda x: torch.from_numpy(np.ascontiguousarray(x.reshape((B, T) + x.shape[1:]))).float()  # noqa: E731
    q, k, v, g, beta = f(p.q), f(p.k), f(p.v), f(p.g), f(p.beta)
    h0 = torch.from_numpy(p.h0).float()

    def step(q, k, v, g, beta, h0, pool, idx):
        o, ht = flashgdn.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                                use_qk_l2norm_in_kernel=True)
        o2, _ = flashgdn.fused_recurrent_gated_delta_rule(q[:, :1], k[:, :1], v[:, :1], g[:, :1], beta[:, :1],
                                                          initial_state=ht, use_qk_l2norm_in_kernel=True)
        o3 = flashgdn.recurrent_gated_delta_rule_pool(q[:, :1], k[:, :1], v[:, :1], g[:, :1], beta[:, :1], pool,
                                                      idx, use_qk_l2norm_in_kernel=True)
        gg, bb = flashgdn.fused_gdn_gating(torch.zeros(4), g[0], beta[0], torch.zeros(4))
        return o * 2, ht, o2, o3, gg

    pool_e = torch.randn(4, p.Hv, p.K, p.V)
    pool_c = pool_e.clone()
    idx = torch.tensor([2, 0], dtype=torch.int32)
    ref = step(q, k, v, g, beta, h0, pool_e, idx)
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    out = compiled(q, k, v, g, beta, h0, pool_c, idx)
    for a, b in zip(ref, out):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(pool_e, pool_c, rtol=0, atol=0)


def test_torch_compile_training_step():
    p = Problem(27, [32], Hqk=1, Hv=2, K=8, V=8)
    f = lambda x: torch.from_numpy(np.ascontiguousarray(x[None])).float().requires_grad_(True)  # noqa: E731
    q, k, v, g, beta = f(p.q), f(p.k), f(p.v), f(p.g), f(p.beta)

    def loss_fn(q, k, v, g, beta):
        o, _ = flashgdn.chunk_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)
        return (o * o).sum()

    loss_fn(q, k, v, g, beta).backward()
    ref = [x.grad.clone() for x in (q, k, v, g, beta)]
    for x in (q, k, v, g, beta):
        x.grad = None
    torch.compile(loss_fn, fullgraph=True, backend="aot_eager")(q, k, v, g, beta).backward()
    for x, r in zip((q, k, v, g, beta), ref):
        torch.testing.assert_close(x.grad, r, rtol=1e-6, atol=1e-6)


def test_foreign_dlpack_roundtrip():
    # any DLPack producer is borrowed and handed back in its own framework (numpy stands in for JAX here)
    p = Problem(28, [10], Hqk=1, Hv=2, K=8, V=8)
    o_ref, _ = p.oracle()

    class Foreign:  # a minimal DLPack producer that is neither torch nor numpy
        def __init__(self, a):
            self.a = np.ascontiguousarray(a)

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    o, _ = flashgdn.chunk_gated_delta_rule(*(Foreign(x[None].astype(np.float32)) for x in
                                             (p.q, p.k, p.v, p.g, p.beta)),
                                           initial_state=Foreign(p.h0.astype(np.float32)),
                                           use_qk_l2norm_in_kernel=True)
    assert rel(to_np(o)[0], o_ref) < 1e-5


def test_strided_views_read_correctly():
    # non-contiguous inputs (a head slice with a storage offset, a transposed pool) must read through their strides
    p = Problem(29, [23], Hqk=2, Hv=4, K=16, V=16)
    f = lambda x: torch.from_numpy(np.ascontiguousarray(x[None])).float()  # noqa: E731
    q, k, v, g, beta = f(p.q), f(p.k), f(p.v), f(p.g), f(p.beta)
    big = torch.randn(1, 23, 5, 16)
    big[:, :, 3:5] = q
    q_view = big[:, :, 3:5]  # storage offset 48, head stride 16, token stride 80
    assert not q_view.is_contiguous() and q_view.storage_offset() > 0
    h0 = torch.from_numpy(p.h0).float()
    h0_t = h0.transpose(2, 3).contiguous().transpose(2, 3)  # same values, K/V strides swapped
    o_ref, ht_ref = flashgdn.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                                    use_qk_l2norm_in_kernel=True)
    o, ht = flashgdn.chunk_gated_delta_rule(q_view, k, v, g, beta, initial_state=h0_t, output_final_state=True,
                                            use_qk_l2norm_in_kernel=True)
    torch.testing.assert_close(o, o_ref, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ht, ht_ref, rtol=1e-6, atol=1e-6)


def test_attribute_path_reads_like_the_exchange_api():
    # A torch without the DLPack C exchange API is read through the tensors' attributes: that path must read the same
    # tensors (strided views with a storage offset, int32 cu_seqlens, h0) bit for bit as the exchange API does.
    from flashgdn import _frameworks

    p = Problem(30, [23, 0, 9], Hqk=2, Hv=4, K=16, V=16)
    f = lambda x: torch.from_numpy(np.ascontiguousarray(x[None])).float()  # noqa: E731
    big = torch.randn(1, 32, 5, 16)
    big[:, :, 3:5] = f(p.q)
    args = (big[:, :, 3:5], f(p.k), f(p.v), f(p.g), f(p.beta))
    kw = dict(initial_state=torch.from_numpy(p.h0).float(), output_final_state=True, use_qk_l2norm_in_kernel=True,
              cu_seqlens=torch.from_numpy(p.cu).int())
    fast = flashgdn.chunk_gated_delta_rule(*args, **kw)
    try:
        flashgdn._register_torch(use_exchange_api=False)
        assert not _frameworks.TORCH_FAST
        attrs = flashgdn.chunk_gated_delta_rule(*args, **kw)
    finally:
        flashgdn._register_torch()
    for a, b in zip(fast, attrs):
        assert torch.equal(a, b)


def test_signature_matches_fla():
    import inspect

    fla_chunk = ["q", "k", "v", "g", "beta", "scale", "initial_state", "output_final_state",
                 "use_qk_l2norm_in_kernel", "use_beta_sigmoid_in_kernel", "allow_neg_eigval", "state_v_first",
                 "cu_seqlens", "cu_seqlens_cpu", "chunk_indices", "cp_context"]
    params = list(inspect.signature(flashgdn.chunk_gated_delta_rule).parameters.values())
    positional = [x.name for x in params if x.kind == x.POSITIONAL_OR_KEYWORD]
    assert positional == fla_chunk
    try:  # against the real FLA when it is installed
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla

        ref = [x.name for x in inspect.signature(fla).parameters.values() if x.kind == x.POSITIONAL_OR_KEYWORD]
        assert positional == ref
    except ImportError:
        pass
    rec = list(inspect.signature(flashgdn.fused_recurrent_gated_delta_rule).parameters)
    assert rec[:10] == ["q", "k", "v", "g", "beta", "scale", "initial_state", "output_final_state",
                        "use_qk_l2norm_in_kernel", "cu_seqlens"]
    gating = list(inspect.signature(flashgdn.fused_gdn_gating).parameters)
    assert gating == ["A_log", "a", "b", "dt_bias", "beta", "threshold"]


def test_unsupported_options_raise():
    p = Problem(30, [4], Hqk=1, Hv=1, K=8, V=8)
    f = lambda x: torch.from_numpy(np.ascontiguousarray(x[None])).float()  # noqa: E731
    with pytest.raises(NotImplementedError):
        flashgdn.fused_recurrent_gated_delta_rule(f(p.q), f(p.k), f(p.v), gk=f(p.g))
    with pytest.raises(TypeError):
        flashgdn.chunk_gated_delta_rule(f(p.q), f(p.k), f(p.v), f(p.g), f(p.beta), bogus=1)


def test_prefill_checkpoints_match_truncated_oracle():
    # the engine prefill with prefix-caching checkpoints: entry c of sequence n is the state after (c + 1) * 64
    # tokens (the oracle's final state of the truncated sequence); entries past a sequence's length stay untouched
    p = Problem(31, [200, 0, 64, 130], Hqk=2, Hv=4, K=16, V=8)
    N, C_max, interval = len(p.lens), 3, 64
    q, k, v = t64(p.q[None]), t64(p.k[None]), t64(p.v[None])
    g, beta, h0 = t64(p.g[None]), t64(p.beta[None]), t64(p.h0)
    cu = torch.from_numpy(p.cu)
    ck = torch.full((N, C_max, p.Hv, p.K, p.V), float("nan"), dtype=torch.float64)
    with flashgdn.exec_options(cpu_fp64=True):
        o, ht = flashgdn.chunk_gated_delta_rule_prefill(q, k, v, g, beta, initial_state=h0, cu_seqlens=cu,
                                                        use_qk_l2norm_in_kernel=True, state_checkpoints=ck,
                                                        checkpoint_interval=interval)
    o_ref, ht_ref = p.oracle()
    tol = 1e-7  # scale is a float32 param
    assert rel(to_np(o)[0], o_ref) < tol
    assert rel(to_np(ht), ht_ref) < tol
    qn, kn = gdn_check.l2n(p.q), gdn_check.l2n(p.k)
    written = 0
    for n, length in enumerate(p.lens):
        for c in range(C_max):
            e = (c + 1) * interval
            got = to_np(ck[n, c])
            if e > length:
                assert np.isnan(got).all(), (n, c)
                continue
            sl = slice(int(p.cu[n]), int(p.cu[n]) + e)
            _, hT = gdn_check.gdn_core(qn[sl], kn[sl], p.v[sl], p.g[sl], p.beta[sl], p.h0[n:n + 1],
                                       np.array([0, e]), p.scale)
            assert rel(got, hT[0]) < tol, (n, c)
            written += 1
    assert written == 6  # 200 tokens: 3 entries, 0: none, 64: 1, 130: 2


def test_prefill_checkpoint_interval_must_be_a_chunk_multiple():
    p = Problem(32, [100], Hqk=1, Hv=1, K=16, V=16)
    ck = torch.zeros((1, 2, 1, 16, 16), dtype=torch.float64)
    args = (t64(p.q[None]), t64(p.k[None]), t64(p.v[None]), t64(p.g[None]), t64(p.beta[None]))
    with flashgdn.exec_options(cpu_fp64=True):
        with pytest.raises(flashgdn.InvalidArgumentError, match="checkpoint_interval"):
            flashgdn.chunk_gated_delta_rule_prefill(*args, state_checkpoints=ck, checkpoint_interval=48)

