"""The call forms real clients use (issue: the package in real clients), on the CPU backend against the fp64
oracle: any strides (views, transposes, slices, expanded zero-stride tensors), in-place tensors that the kernels
cannot take, broadcast upstream gradients, fused_recurrent's autograd, bf16 / fp16 initial states, every keyword
of FLA 0.6's and vLLM's signatures, meta and fake tensors, torch.library.opcheck of every registered op."""

import numpy as np
import pytest

import flashgdn
from conftest import OPCHECK_OPS, Problem, gdn_check, opcheck_case, rel, to_np, torch

pytestmark = pytest.mark.skipif(torch is None, reason="torch not installed (scripts/setup.sh installs it)")


def t64(x, grad=False):
    return torch.from_numpy(np.ascontiguousarray(x)).double().requires_grad_(grad)


def f32(x):
    return torch.from_numpy(np.ascontiguousarray(x)).float()


def inputs(p, grad=False):
    q, k, v = t64(p.q[None], grad), t64(p.k[None], grad), t64(p.v[None], grad)
    g, beta, h0 = t64(p.g[None], grad), t64(p.beta[None], grad), t64(p.h0, grad)
    return q, k, v, g, beta, h0


def strided_like(x, kind):
    """The same values as x under other strides."""
    if kind == "transposed":  # transformers' conv1d output: [B, C, T] transposed to [B, T, C], then split
        return x.transpose(1, -1).contiguous().transpose(1, -1)
    if kind == "sliced":  # a slice of a wider buffer: a storage offset and a larger head stride
        big = torch.zeros(x.shape[:-1] + (x.shape[-1] * 2 + 3,), dtype=x.dtype)
        big[..., 3:3 + x.shape[-1]] = x
        return big[..., 3:3 + x.shape[-1]]
    if kind == "expanded":  # one token's values broadcast along T (zero stride)
        return x[:, :1].expand(x.shape)
    raise ValueError(kind)


# ---- strides ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["transposed", "sliced", "expanded"])
@pytest.mark.parametrize("entry", ["chunk", "recurrent", "pool"])
def test_any_strides_match_the_oracle(kind, entry):
    p = Problem(41, [37], Hqk=2, Hv=4, K=16, V=8)
    q, k, v, g, beta, h0 = inputs(p)
    views = [strided_like(x, kind) for x in (q, k, v, g, beta)]
    assert all(not x.is_contiguous() for x in views[:3])
    p.q, p.k, p.v, p.g, p.beta = (x[0].numpy() for x in views)  # the oracle sees the same values
    o_ref, ht_ref = p.oracle()
    h0_t = h0.transpose(2, 3).contiguous().transpose(2, 3)  # a transposed initial state
    with flashgdn.exec_options(cpu_fp64=True):
        if entry == "chunk":
            o, ht = flashgdn.chunk_gated_delta_rule(*views, initial_state=h0_t, output_final_state=True,
                                                    use_qk_l2norm_in_kernel=True)
        elif entry == "recurrent":
            o, ht = flashgdn.fused_recurrent_gated_delta_rule(*views, initial_state=h0_t, output_final_state=True,
                                                              use_qk_l2norm_in_kernel=True)
        else:
            pool = torch.full((3,) + tuple(h0.shape[1:]), float("nan"), dtype=torch.float64)
            pool[2] = h0[0]
            o = flashgdn.recurrent_gated_delta_rule_pool(*views, pool, torch.tensor([2]),
                                                         use_qk_l2norm_in_kernel=True)
            ht = pool[2:3]
    assert rel(to_np(o)[0], o_ref) < 1e-7
    assert rel(to_np(ht), ht_ref) < 1e-7


def test_numpy_negative_strides_are_copied():
    p = Problem(42, [20], Hqk=1, Hv=2, K=8, V=8)
    o_ref, _ = p.oracle()
    rev = lambda x: np.ascontiguousarray(x[None, ::-1])[:, ::-1]  # noqa: E731  (negative token stride)
    with flashgdn.exec_options(cpu_fp64=True):
        o, _ = flashgdn.chunk_gated_delta_rule(rev(p.q), rev(p.k), rev(p.v), rev(p.g), rev(p.beta),
                                               initial_state=p.h0, use_qk_l2norm_in_kernel=True)
    assert rel(o[0], o_ref) < 1e-7


def test_in_place_tensors_the_kernels_cannot_take_are_errors():
    p = Problem(43, [4], Hqk=1, Hv=2, K=8, V=8)
    q, k, v, g, beta, h0 = inputs(p)
    pool = torch.zeros(1, 2, 8, 8, dtype=torch.float64).expand(3, 2, 8, 8)  # every slot one memory: no copy
    with flashgdn.exec_options(cpu_fp64=True):
        with pytest.raises(flashgdn.InvalidArgumentError, match="state_pool: expected no zero stride"):
            flashgdn.recurrent_gated_delta_rule_pool(q, k, v, g, beta, pool, torch.tensor([1]))
        out = torch.zeros(1, 1, 2, 8, dtype=torch.float64).expand(1, 4, 2, 8)
        with pytest.raises(flashgdn.InvalidArgumentError, match="o: expected no zero stride"):
            flashgdn.recurrent_gated_delta_rule_pool(q, k, v, g, beta, torch.zeros(3, 2, 8, 8, dtype=torch.float64),
                                                     torch.tensor([1]), out=out)
        ck = torch.zeros(1, 1, 1, 2, 8, 8, dtype=torch.float64).expand(1, 2, 1, 2, 8, 8)[:, :, 0]
        with pytest.raises(flashgdn.InvalidArgumentError, match="state_checkpoints"):
            flashgdn.chunk_gated_delta_rule_prefill(q, k, v, g, beta, state_checkpoints=ck, checkpoint_interval=64)
        buf = torch.zeros(200, dtype=torch.float64)[::2]
        with pytest.raises(ValueError, match="core_attn_out: expected a contiguous buffer"):
            flashgdn.chunk_gated_delta_rule(q, k, v, g, beta, core_attn_out=buf)


# ---- autograd --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("entry", ["chunk", "recurrent"])
def test_broadcast_upstream_gradients(entry):
    # (o.sum() + ht.sum()).backward(): both upstream gradients arrive expanded (zero strides)
    p = Problem(44, [19, 0, 40], Hqk=2, Hv=4, K=16, V=8)
    q, k, v, g, beta, h0 = inputs(p, grad=True)
    cu = torch.from_numpy(p.cu)
    fn = flashgdn.chunk_gated_delta_rule if entry == "chunk" else flashgdn.fused_recurrent_gated_delta_rule
    with flashgdn.exec_options(cpu_fp64=True):
        o, ht = fn(q, k, v, g, beta, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True,
                   cu_seqlens=cu)
        assert o.grad_fn is not None and ht.grad_fn is not None
        (o.sum() + ht.sum()).backward()
    q_n, k_n = gdn_check.l2n(p.q), gdn_check.l2n(p.k)
    dO, dhT = np.ones((p.cu[-1], p.Hv, p.V)), np.ones(p.h0.shape)
    ref = gdn_check.gdn_core_bwd(q_n, k_n, p.v, p.g, p.beta, p.h0, p.cu, p.scale, dO, dhT)
    dq_n, dk_n = ref[0], ref[1]
    dq_ref, dk_ref = gdn_check.l2n_bwd(p.q, dq_n), gdn_check.l2n_bwd(p.k, dk_n)
    for x, r in zip((q, k, v, g, beta, h0), (dq_ref, dk_ref) + tuple(ref[2:6])):
        got = to_np(x.grad)
        assert rel(got[0] if got.shape != r.shape else got, r) < 1e-7


def test_fused_recurrent_gradients_match_the_chunk_op():
    p = Problem(45, [30], Hqk=1, Hv=2, K=16, V=16)
    rng = np.random.default_rng(46)
    dO = t64(rng.standard_normal((1, 30, 2, 16)))
    res = []
    for fn in (flashgdn.chunk_gated_delta_rule, flashgdn.fused_recurrent_gated_delta_rule):
        q, k, v, g, beta, h0 = inputs(p, grad=True)
        A_log, dt_bias = t64(p.A_log, True), t64(p.dt_bias, True)
        a, b = t64(p.a[None], True), t64(p.b_raw[None], True)
        with flashgdn.exec_options(cpu_fp64=True):
            o, ht = fn(q, k, v, a, b, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True,
                       use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias, use_beta_sigmoid_in_kernel=True)
            ((o * dO).sum() + (ht * ht).sum()).backward()
        res.append([x.grad for x in (q, k, v, a, b, h0, A_log, dt_bias)])
    for x, r in zip(*res):
        assert x is not None and rel(to_np(x), to_np(r)) < 1e-9


def test_inference_only_ops_raise_when_asked_for_gradients():
    p = Problem(47, [4], Hqk=1, Hv=2, K=8, V=8)
    q, k, v, g, beta, h0 = inputs(p, grad=True)
    pool = torch.zeros(2, 2, 8, 8, dtype=torch.float64)
    with flashgdn.exec_options(cpu_fp64=True):
        with pytest.raises(RuntimeError, match="no autograd"):
            flashgdn.recurrent_gated_delta_rule_pool(q, k, v, g, beta, pool)
        with pytest.raises(RuntimeError, match="no autograd"):
            flashgdn.chunk_gated_delta_rule_prefill(q, k, v, g, beta)
        with pytest.raises(RuntimeError, match="no autograd"):
            flashgdn.fused_gdn_gating(t64(p.A_log, True), t64(p.a), t64(p.b_raw), t64(p.dt_bias))
        with torch.no_grad():  # asked for no gradients: runs
            flashgdn.recurrent_gated_delta_rule_pool(q, k, v, g, beta, pool)


@pytest.mark.parametrize("name", OPCHECK_OPS)
def test_opcheck_every_registered_op(name):
    op, args = opcheck_case(name)
    torch.library.opcheck(op, args)  # schema, autograd registration, fake tensor, aot dispatch


# ---- FLA / vLLM call forms ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fla_docstring_example_with_a_half_precision_initial_state(dtype):
    # FLA's docstring example (smaller, on the CPU): bf16 / fp16 q, k, v, g, beta and initial state
    import torch.nn.functional as F

    torch.manual_seed(49)
    B, T, H, HV, K, V = 2, 70, 2, 4, 32, 32
    q = torch.randn(B, T, H, K, dtype=dtype)
    k = F.normalize(torch.randn(B, T, H, K, dtype=dtype), p=2, dim=-1)
    v = torch.randn(B, T, HV, V, dtype=dtype)
    beta = torch.rand(B, T, HV, dtype=dtype).sigmoid()
    g = F.logsigmoid(torch.rand(B, T, HV, dtype=dtype))
    h0 = torch.randn(B, HV, K, V, dtype=dtype, requires_grad=True)
    o, ht = flashgdn.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    assert o.dtype == dtype and ht.dtype == torch.float32
    p_ref = [x.double().numpy() for x in (q, k, v, g, beta)]
    cu = np.arange(0, B * T + 1, T)
    flat = lambda x: x.reshape((B * T,) + x.shape[2:])  # noqa: E731
    o_ref, ht_ref = gdn_check.gdn_core(*(flat(x) for x in p_ref), h0.detach().double().numpy(), cu, K ** -0.5)
    assert rel(to_np(o).reshape(o_ref.shape), o_ref) < 2e-2
    assert rel(to_np(ht), ht_ref) < 1e-2
    ht.sum().backward()  # the state's gradient comes back through the widening, in the state's dtype
    assert h0.grad is not None and h0.grad.dtype == dtype


def test_every_fla_and_vllm_chunk_keyword():
    p = Problem(50, [40, 30], Hqk=1, Hv=2, K=16, V=8)
    q, k, v, g, beta, h0 = inputs(p)
    cu = torch.from_numpy(p.cu)
    o_ref, ht_ref = p.oracle()
    with flashgdn.exec_options(cpu_fp64=True):
        # FLA 0.6, every keyword by name
        o, ht = flashgdn.chunk_gated_delta_rule(
            q=q, k=k, v=v, g=g, beta=beta, scale=None, initial_state=h0, output_final_state=True,
            use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
            state_v_first=False, cu_seqlens=cu, cu_seqlens_cpu=cu, chunk_indices=torch.zeros(3, 2, dtype=torch.long),
            cp_context=None, use_gate_in_kernel=False, A_log=None, dt_bias=None, chunk_size=64,
            transpose_state_layout=False)
        assert rel(to_np(o)[0], o_ref) < 1e-7 and rel(to_np(ht), ht_ref) < 1e-7
        # vLLM's in-tree copy: core_attn_out is the output buffer (o goes to its first elements), chunk_offsets and
        # prebuilt_meta are its precomputed metadata (ignored), head_first=False
        buf = torch.full((p.cu[-1] * 2 * 8 + 11,), float("nan"), dtype=torch.float64)
        o2, _ = flashgdn.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                                cu_seqlens=cu, head_first=False, use_qk_l2norm_in_kernel=True,
                                                chunk_indices=None, chunk_offsets=torch.zeros(3), prebuilt_meta=None,
                                                core_attn_out=buf)
        assert o2.data_ptr() == buf.data_ptr()
        assert rel(to_np(buf[:o2.numel()]).reshape(o_ref.shape), o_ref) < 1e-7
        assert torch.isnan(buf[o2.numel():]).all()
        # FLA's deprecated name for the V-major state layout
        o3, ht3 = flashgdn.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0.transpose(2, 3).contiguous(),
                                                  output_final_state=True, use_qk_l2norm_in_kernel=True,
                                                  cu_seqlens=cu, transpose_state_layout=True)
        assert rel(to_np(o3)[0], o_ref) < 1e-7 and rel(to_np(ht3.transpose(2, 3)), ht_ref) < 1e-7
        with pytest.raises(ValueError, match="disagree"):
            flashgdn.chunk_gated_delta_rule(q, k, v, g, beta, state_v_first=True, transpose_state_layout=False)
        with pytest.raises(ValueError, match="head_first"):
            flashgdn.chunk_gated_delta_rule(q, k, v, g, beta, head_first=True)
        with pytest.raises(NotImplementedError, match="cp_context"):
            flashgdn.chunk_gated_delta_rule(q, k, v, g, beta, cp_context=object())
        with pytest.raises(TypeError, match="bogus"):
            flashgdn.chunk_gated_delta_rule(q, k, v, g, beta, bogus=1)
        with pytest.raises(ValueError, match="core_attn_out"):  # not under autograd
            flashgdn.chunk_gated_delta_rule(q.requires_grad_(True), k, v, g, beta, core_attn_out=buf)


def test_every_fla_and_vllm_recurrent_keyword():
    p = Problem(51, [3, 1], Hqk=1, Hv=2, K=16, V=8)
    q, k, v, g, beta, h0 = inputs(p)
    cu = torch.from_numpy(p.cu)
    o_ref, ht_ref = p.oracle()
    with flashgdn.exec_options(cpu_fp64=True):
        # FLA 0.6 by name (gk / gv None)
        o, ht = flashgdn.fused_recurrent_gated_delta_rule(
            q=q, k=k, v=v, g=g, gk=None, gv=None, beta=beta, scale=None, initial_state=h0, output_final_state=True,
            use_qk_l2norm_in_kernel=True, use_gate_in_kernel=False, A_log=None, dt_bias=None,
            use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, state_v_first=False, cu_seqlens=cu)
        assert rel(to_np(o)[0], o_ref) < 1e-7 and rel(to_np(ht), ht_ref) < 1e-7
        # vLLM's decode call: initial_state is the pool, updated in place at ssm_state_indices
        pool = torch.full((5,) + p.h0.shape[1:], float("nan"), dtype=torch.float64)
        pool[4], pool[1] = h0[0], h0[1]
        out = torch.full_like(v, float("nan"))
        o2, st = flashgdn.fused_recurrent_gated_delta_rule(
            q=q, k=k, v=v, g=g, beta=beta, scale=None, initial_state=pool, inplace_final_state=True, cu_seqlens=cu,
            ssm_state_indices=torch.tensor([4, 1], dtype=torch.int32), num_accepted_tokens=None,
            use_qk_l2norm_in_kernel=True, out=out)
        assert st is pool and o2 is out
        assert rel(to_np(o2)[0], o_ref) < 1e-7
        assert rel(to_np(pool[[4, 1]]), ht_ref) < 1e-7 and torch.isnan(pool[[0, 2, 3]]).all()
        with pytest.raises(NotImplementedError, match="inplace_final_state=False"):
            flashgdn.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool, inplace_final_state=False)
        with pytest.raises(NotImplementedError, match="gk"):
            flashgdn.fused_recurrent_gated_delta_rule(q, k, v, g, beta, gk=g)
        with pytest.raises(TypeError, match="bogus"):
            flashgdn.fused_recurrent_gated_delta_rule(q, k, v, g, beta, bogus=1)


def test_fla_signatures_name_every_keyword():
    import inspect

    fla_chunk = ["q", "k", "v", "g", "beta", "scale", "initial_state", "output_final_state",
                 "use_qk_l2norm_in_kernel", "use_beta_sigmoid_in_kernel", "allow_neg_eigval", "state_v_first",
                 "cu_seqlens", "cu_seqlens_cpu", "chunk_indices", "cp_context"]
    fla_recurrent = ["q", "k", "v", "g", "gk", "gv", "beta", "scale", "initial_state", "output_final_state",
                     "use_qk_l2norm_in_kernel", "use_gate_in_kernel", "A_log", "dt_bias", "use_beta_sigmoid_in_kernel",
                     "allow_neg_eigval", "state_v_first", "cu_seqlens"]
    chunk = inspect.signature(flashgdn.chunk_gated_delta_rule).parameters
    rec = inspect.signature(flashgdn.fused_recurrent_gated_delta_rule).parameters
    assert [n for n, x in chunk.items() if x.kind == x.POSITIONAL_OR_KEYWORD] == fla_chunk
    assert set(fla_recurrent) <= set(rec)
    assert {"use_gate_in_kernel", "A_log", "dt_bias", "chunk_size"} <= set(chunk)
    assert flashgdn.chunk_gdn is flashgdn.chunk_gated_delta_rule
    assert flashgdn.fused_recurrent_gdn is flashgdn.fused_recurrent_gated_delta_rule


# ---- meta and fake tensors -------------------------------------------------------------------------------------
def test_meta_tensors_give_shapes():
    m = lambda *s: torch.empty(*s, device="meta")  # noqa: E731
    q, k, v, g, beta = m(1, 9, 2, 16), m(1, 9, 2, 16), m(1, 9, 4, 8), m(1, 9, 4), m(1, 9, 4)
    o, ht = flashgdn.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=m(1, 4, 16, 8), output_final_state=True)
    assert o.device.type == "meta" and tuple(ht.shape) == (1, 4, 16, 8)
    o, ht = flashgdn.fused_recurrent_gated_delta_rule(q, k, v, g, beta, output_final_state=True)
    assert o.device.type == "meta" and tuple(o.shape) == (1, 9, 4, 8)
    o = flashgdn.recurrent_gated_delta_rule_pool(q, k, v, g, beta, m(3, 4, 16, 8))
    assert tuple(o.shape) == (1, 9, 4, 8)
    gg, bb = flashgdn.fused_gdn_gating(m(4), m(9, 4), m(9, 4), m(4))
    assert tuple(gg.shape) == (1, 9, 4)
    with pytest.raises(RuntimeError, match="eager-only"):
        flashgdn.chunk_gated_delta_rule_prefill(q, k, v, g, beta)
    # a meta tensor among CPU ones reaches the extension: a flashgdn error naming it
    c = lambda *s: torch.randn(*s)  # noqa: E731
    with pytest.raises(flashgdn.InvalidArgumentError, match="chunk_fwd: k: expected a tensor with CPU or CUDA"):
        flashgdn.chunk_gated_delta_rule(c(1, 9, 2, 16), k, c(1, 9, 4, 8), c(1, 9, 4), c(1, 9, 4))


def test_fake_tensor_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q, v = torch.empty(1, 9, 2, 16), torch.empty(1, 9, 4, 8)
        g = torch.empty(1, 9, 4)
        o, ht = flashgdn.chunk_gated_delta_rule(q, q, v, g, g, output_final_state=True)
        assert tuple(o.shape) == (1, 9, 4, 8) and tuple(ht.shape) == (1, 4, 16, 8)
        o, _ = flashgdn.fused_recurrent_gated_delta_rule(q, q, v, g, g)
        assert tuple(o.shape) == (1, 9, 4, 8)
