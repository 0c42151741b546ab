"""CUDA kernels through the Python package (torch CUDA tensors): results against the fp64 oracle (the CPU backend
in fp64 on the same rounded inputs, itself checked against gdn_check.py in test_cpu.py), CUDA-graph capture and
replay, stream correctness, no host synchronization, interop. Skips visibly without a GPU; an op that has no
CUDA kernel yet skips with the library's `unsupported` message.
"""

import os
import time

import numpy as np
import pytest

import flashgdn
from conftest import OPCHECK_OPS, cuda_ok, opcheck_case, rel

torch = pytest.importorskip("torch", reason="GPU tests need torch")
pytestmark = pytest.mark.skipif(not cuda_ok(), reason="needs a CUDA GPU and flashgdn built with CUDA")

BF16_TOL = 5e-3


def call(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except flashgdn.UnsupportedError as e:
        pytest.skip(f"no CUDA kernel: {e}")


def oracle(fn, *args, **kw):
    """The same call on the CPU backend in fp64: tensors -> CPU float64 (ints kept), results -> CUDA float64."""
    def cpu(x):
        if isinstance(x, torch.Tensor):
            return x.detach().cpu().double() if x.is_floating_point() else x.detach().cpu()
        return x
    with flashgdn.exec_options(cpu_fp64=True):
        return fn(*[cpu(a) for a in args], **{k: cpu(v) for k, v in kw.items()})


def inputs(B, T, Hqk, Hv, K, V, dtype, seed=0, device="cuda"):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    q, k, v = r(B, T, Hqk, K), r(B, T, Hqk, K), r(B, T, Hv, V)
    g = torch.nn.functional.logsigmoid(r(B, T, Hv) + 3.0)  # decay close to 1, as in trained models
    beta = torch.sigmoid(r(B, T, Hv))
    cast = lambda x: x.to(dtype).to(device)  # noqa: E731
    return cast(q), cast(k), cast(v), g.float().to(device), beta.float().to(device)


# ---- decode / multi-token / verify on a pool -------------------------------------------------------------
@pytest.mark.parametrize("pool_dtype,state_v_first", [(torch.float32, False), (torch.float32, True),
                                                      (torch.bfloat16, True)])
@pytest.mark.parametrize("T", [1, 4])
def test_pool_decode_vs_oracle(pool_dtype, state_v_first, T):
    N, slots, Hqk, Hv, K, V = 8, 12, 2, 4, 128, 128
    q, k, v, g, beta = inputs(N, T, Hqk, Hv, K, V, torch.bfloat16, seed=1)
    pool0 = (torch.randn(slots, Hv, K, V) * 0.3).to(pool_dtype).cuda()
    idx = torch.tensor([3, -1, 0, 7, 5, 11, 2, 9], dtype=torch.int32, device="cuda")
    pool = pool0.clone()
    o = call(flashgdn.recurrent_gated_delta_rule_pool, q, k, v, g, beta, pool, idx, use_qk_l2norm_in_kernel=True,
             null_slot_is_invalid=True, state_v_first=state_v_first)
    pool_ref = pool0.double().cpu()
    o_ref = oracle(flashgdn.recurrent_gated_delta_rule_pool, q, k, v, g, beta, pool_ref, idx,
                   use_qk_l2norm_in_kernel=True, null_slot_is_invalid=True, state_v_first=state_v_first)
    torch.cuda.synchronize()
    tol = BF16_TOL if pool_dtype == torch.float32 else 2e-2
    assert rel(o.double().cpu().numpy(), o_ref.numpy()) < tol
    assert torch.all(o[1] == 0) and torch.all(o[2] == 0)  # invalid rows: zeros
    assert rel(pool.double().cpu().numpy(), pool_ref.numpy()) < tol
    assert torch.equal(pool[[1, 4, 6, 8, 10]], pool0[[1, 4, 6, 8, 10]])  # untouched slots bit-identical
    # decode without atomics is bitwise reproducible run to run
    pool2 = pool0.clone()
    o2 = flashgdn.recurrent_gated_delta_rule_pool(q, k, v, g, beta, pool2, idx, use_qk_l2norm_in_kernel=True,
                                                  null_slot_is_invalid=True, state_v_first=state_v_first)
    assert torch.equal(o, o2) and torch.equal(pool, pool2)


@pytest.mark.parametrize("inter_dtype", [torch.float32, torch.bfloat16])
def test_verify_intermediate_and_commit(inter_dtype):
    N, T, slots, Hqk, Hv, K, V = 4, 12, 6, 2, 4, 128, 128
    q, k, v, g, beta = inputs(N, T, Hqk, Hv, K, V, torch.bfloat16, seed=2)
    pool0 = (torch.randn(slots, Hv, V, K) * 0.3).cuda()
    idx = torch.tensor([2, 4, 1, 5], dtype=torch.int64, device="cuda")
    pool = pool0.clone()
    inter = torch.full((N, T, Hv, V, K), float("nan"), dtype=inter_dtype, device="cuda")
    o = call(flashgdn.recurrent_gated_delta_rule_pool, q, k, v, g, beta, pool, idx, intermediate_states=inter,
             commit=False, use_qk_l2norm_in_kernel=True, state_v_first=True)
    assert torch.equal(pool, pool0)
    acc = torch.tensor([1, T, 5, 0], dtype=torch.int32, device="cuda")
    call(flashgdn.commit_intermediate_states, pool, idx, inter, acc)
    pool_ref, inter_ref = pool0.double().cpu(), torch.zeros(inter.shape, dtype=torch.float64)
    o_ref = oracle(flashgdn.recurrent_gated_delta_rule_pool, q, k, v, g, beta, pool_ref, idx,
                   intermediate_states=inter_ref, commit=False, use_qk_l2norm_in_kernel=True, state_v_first=True)
    oracle(flashgdn.commit_intermediate_states, pool_ref, idx, inter_ref, acc)
    tol = BF16_TOL if inter_dtype == torch.float32 else 2e-2
    assert rel(o.double().cpu().numpy(), o_ref.numpy()) < BF16_TOL
    assert rel(inter.double().cpu().numpy(), inter_ref.numpy()) < tol
    assert rel(pool.double().cpu().numpy(), pool_ref.numpy()) < tol
    assert torch.equal(pool[3], pool0[3])  # acc = 0: skipped


# ---- chunked prefill ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_chunk_prefill_varlen_vs_oracle(dtype):
    lens = [1, 63, 0, 64, 65, 300]
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32, device="cuda")
    T = int(cu[-1])
    q, k, v, g, beta = inputs(1, T, 2, 4, 128, 128, dtype, seed=3)
    h0 = (torch.randn(len(lens), 4, 128, 128) * 0.3).cuda()
    o, ht = call(flashgdn.chunk_gated_delta_rule, q, k, v, g, beta, initial_state=h0, output_final_state=True,
                 use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    o_ref, ht_ref = oracle(flashgdn.chunk_gated_delta_rule, q, k, v, g, beta, initial_state=h0,
                           output_final_state=True, use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    assert o.dtype == dtype and ht.dtype == torch.float32
    assert rel(o.double().cpu().numpy(), o_ref.numpy()) < BF16_TOL
    assert rel(ht.double().cpu().numpy(), ht_ref.numpy()) < BF16_TOL
    assert torch.equal(ht[2], h0[2])  # empty sequence: final state is the initial state


def test_chunk_prefill_checkpoints_vs_oracle():
    # prefix-caching checkpoints through the engine entry point, against the same call on the CPU backend in fp64
    lens = [300, 0, 128, 70]
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32, device="cuda")
    T = int(cu[-1])
    q, k, v, g, beta = inputs(1, T, 2, 4, 128, 128, torch.bfloat16, seed=5)
    h0 = (torch.randn(len(lens), 4, 128, 128) * 0.3).cuda()
    ck = torch.full((len(lens), 2, 4, 128, 128), float("nan"), device="cuda")
    o, ht = call(flashgdn.chunk_gated_delta_rule_prefill, q, k, v, g, beta, initial_state=h0, cu_seqlens=cu,
                 use_qk_l2norm_in_kernel=True, state_checkpoints=ck, checkpoint_interval=128)
    ck_ref = torch.full((len(lens), 2, 4, 128, 128), float("nan"), dtype=torch.float64)
    o_ref, ht_ref = oracle(flashgdn.chunk_gated_delta_rule_prefill, q, k, v, g, beta, initial_state=h0,
                           cu_seqlens=cu, use_qk_l2norm_in_kernel=True, state_checkpoints=ck_ref,
                           checkpoint_interval=128)
    assert rel(o.double().cpu().numpy(), o_ref.numpy()) < BF16_TOL
    assert rel(ht.double().cpu().numpy(), ht_ref.numpy()) < BF16_TOL
    for n, c in [(0, 0), (0, 1), (2, 0)]:  # the entries the sequences reach
        assert rel(ck[n, c].double().cpu().numpy(), ck_ref[n, c].numpy()) < BF16_TOL, (n, c)
    for n, c in [(1, 0), (1, 1), (2, 1), (3, 0), (3, 1)]:  # the others are untouched
        assert torch.isnan(ck[n, c]).all(), (n, c)


def test_chunk_backward_vs_oracle():
    q, k, v, g, beta = inputs(2, 130, 1, 2, 128, 128, torch.bfloat16, seed=4)
    xs = [x.clone().requires_grad_(True) for x in (q, k, v, g, beta)]
    o, _ = call(flashgdn.chunk_gated_delta_rule, *xs, use_qk_l2norm_in_kernel=True)
    do = torch.randn_like(o)
    call(o.backward, do)
    ref = [x.detach().cpu().double().requires_grad_(True) for x in (q, k, v, g, beta)]
    with flashgdn.exec_options(cpu_fp64=True):
        o_ref, _ = flashgdn.chunk_gated_delta_rule(*ref, use_qk_l2norm_in_kernel=True)
        o_ref.backward(do.cpu().double())
    for x, r, tol in zip(xs, ref, (8e-3, 8e-3, 8e-3, 2e-2, 2e-2)):
        assert rel(x.grad.double().cpu().numpy(), r.grad.numpy()) < tol


def test_chunk_backward_chains_at_once_equal_one_after_the_other():
    # exec_options(chunk_bwd_chains=...): both state chains in one launch (the default at K = V = 128; a CTA per
    # chain or one CTA of both) or one after the other give the same gradients bit for bit; K = 64 cannot run them at
    # once and says so
    q, k, v, g, beta = inputs(1, 300, 1, 2, 128, 128, torch.bfloat16, seed=5)
    do = torch.randn(1, 300, 2, 128, device="cuda", dtype=torch.bfloat16)

    def grads(chains, K=128):
        xs = [x[..., :K].clone().requires_grad_(True) if x.dim() == 4 and x is not v else
              x.clone().requires_grad_(True) for x in (q, k, v, g, beta)]
        with flashgdn.exec_options(chunk_bwd_chains=chains):
            o, _ = call(flashgdn.chunk_gated_delta_rule, *xs, use_qk_l2norm_in_kernel=True)
            o.backward(do)
        return [x.grad for x in xs]

    for a, b in zip(grads(0), grads(1)):
        assert torch.equal(a, b)
    for chains in (2, 3):  # a CTA per chain, one CTA of both
        for a, b in zip(grads(0), grads(chains)):
            assert torch.equal(a, b)
    with pytest.raises(Exception, match="chunk_bwd_chains"):
        grads(2, K=64)


def test_chunk_backward_gradients_passes_near_oracle():
    # exec_options(chunk_bwd_grads=...): 0 the plan's choice (at K = V = 128 bf16 the fused pass, here a GQA pair in
    # one cluster), 1 mma.sync, 2 wgmma, 3 fused, 4 fused with pass 5a's GQA sum. The default is the explicit 3 bit for
    # bit; every pass is near the fp64 oracle (the C++ suite's bounds); wgmma and mma.sync sum in other orders (within
    # 2e-3 of each other); f16 cannot take the wgmma or fused passes and says so
    q, k, v, g, beta = inputs(1, 300, 1, 2, 128, 128, torch.bfloat16, seed=6)
    do = torch.randn(1, 300, 2, 128, device="cuda", dtype=torch.bfloat16)

    def grads(sel, dtype=torch.bfloat16):
        xs = [(x.to(dtype) if x.dim() == 4 else x).clone().requires_grad_(True) for x in (q, k, v, g, beta)]
        with flashgdn.exec_options(chunk_bwd_grads=sel):
            o, _ = call(flashgdn.chunk_gated_delta_rule, *xs, use_qk_l2norm_in_kernel=True)
            o.backward(do.to(dtype))
        return [x.grad.double() for x in xs]

    ref = [x.detach().cpu().double().requires_grad_(True) for x in (q, k, v, g, beta)]
    with flashgdn.exec_options(cpu_fp64=True):
        o_ref, _ = flashgdn.chunk_gated_delta_rule(*ref, use_qk_l2norm_in_kernel=True)
        o_ref.backward(do.cpu().double())
    by_sel = {sel: grads(sel) for sel in range(5)}
    for a, b in zip(by_sel[0], by_sel[3]):
        assert torch.equal(a, b)
    for sel, gs in by_sel.items():
        for x, r, tol in zip(gs, ref, (8e-3, 8e-3, 8e-3, 2e-2, 2e-2)):
            assert rel(x.cpu().numpy(), r.grad.numpy()) < tol, sel
    for a, b in zip(by_sel[2], by_sel[1]):
        assert (a - b).norm() <= 2e-3 * b.norm()
    for sel in (2, 3, 4):
        with pytest.raises(Exception, match="chunk_bwd_grads"):
            grads(sel, dtype=torch.float16)


def test_chunk_backward_decay_window_option():
    # exec_options(chunk_bwd_window=1) runs the backward's dstate chain over every chunk instead of the decay windows
    # of the gradients the fused pass reads (docs/chunk_bwd.md). g ~ U(-1, 0): windows of one chunk, 40 chunks (walks
    # of 16): the two agree to fp32 rounding; 2 is rejected, naming the option
    T = 2560
    q, k, v, _, beta = inputs(1, T, 2, 2, 128, 128, torch.bfloat16, seed=7)
    gen = torch.Generator(device="cpu").manual_seed(8)
    g = (-torch.rand(1, T, 2, generator=gen)).cuda()
    do = torch.randn(1, T, 2, 128, generator=gen).to(torch.bfloat16).cuda()

    def grads(window):
        xs = [x.clone().requires_grad_(True) for x in (q, k, v, g, beta)]
        with flashgdn.exec_options(chunk_bwd_window=window):
            o, _ = call(flashgdn.chunk_gated_delta_rule, *xs, use_qk_l2norm_in_kernel=True)
            o.backward(do)
        return [x.grad.double() for x in xs]

    for a, b in zip(grads(0), grads(1)):
        assert torch.isfinite(a).all()
        assert (a - b).norm() <= 1e-4 * b.norm()
    with pytest.raises(Exception, match="chunk_bwd_window"):
        grads(2)


def test_chunk_backward_states_from_forward_option():
    # exec_options(chunk_bwd_state=2) takes the chunk start states from chunk_fwd's state pass instead of the
    # backward's state chain (docs/chunk_bwd.md); both near the fp64 oracle and within bf16 operand rounding of each
    # other (the two chains round S0 at different points); a split of the backward's chains is refused, naming it
    T = 1500
    q, k, v, g, beta = inputs(1, T, 1, 2, 128, 128, torch.bfloat16, seed=9)
    do = torch.randn(1, T, 2, 128, device="cuda", dtype=torch.bfloat16)

    def grads(state, segments=0):
        xs = [x.clone().requires_grad_(True) for x in (q, k, v, g, beta)]
        with flashgdn.exec_options(chunk_bwd_state=state, chunk_bwd_segments=segments):
            o, _ = call(flashgdn.chunk_gated_delta_rule, *xs, use_qk_l2norm_in_kernel=True)
            o.backward(do)
        return [x.grad.double() for x in xs]

    ref = [x.detach().cpu().double().requires_grad_(True) for x in (q, k, v, g, beta)]
    with flashgdn.exec_options(cpu_fp64=True):
        o_ref, _ = flashgdn.chunk_gated_delta_rule(*ref, use_qk_l2norm_in_kernel=True)
        o_ref.backward(do.cpu().double())
    fwd, chain = grads(2, segments=1), grads(1, segments=1)
    for a, b, r, tol in zip(fwd, chain, ref, (8e-3, 8e-3, 8e-3, 2e-2, 2e-2)):
        assert rel(a.cpu().numpy(), r.grad.numpy()) < tol
        assert (a - b).norm() <= tol * b.norm()
    with pytest.raises(Exception, match="chunk_bwd_state"):
        grads(2, segments=4)


def test_fused_recurrent_vs_oracle():
    lens = [1, 7, 0, 12]
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int64, device="cuda")
    q, k, v, g, beta = inputs(1, int(cu[-1]), 2, 4, 128, 128, torch.bfloat16, seed=12)
    h0 = (torch.randn(len(lens), 4, 128, 128) * 0.3).cuda()
    o, ht = call(flashgdn.fused_recurrent_gated_delta_rule, q, k, v, g, beta, initial_state=h0,
                 output_final_state=True, use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    o_ref, ht_ref = oracle(flashgdn.fused_recurrent_gated_delta_rule, q, k, v, g, beta, initial_state=h0,
                           output_final_state=True, use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    assert rel(o.double().cpu().numpy(), o_ref.numpy()) < BF16_TOL
    assert rel(ht.double().cpu().numpy(), ht_ref.numpy()) < 1e-5
    assert torch.equal(ht[2], h0[2])


@pytest.mark.skipif(os.environ.get("FLASHGDN_TEST_FLA") != "1",
                    reason="set FLASHGDN_TEST_FLA=1 (FLA's first call compiles and autotunes for ~45 s); "
                           "bench/side_by_side.py checks agreement with FLA on every case")
def test_agrees_with_fla_when_installed():
    fla = pytest.importorskip("fla.ops.gated_delta_rule", reason="FLA not installed")
    q, k, v, g, beta = inputs(1, 1000, 2, 4, 128, 128, torch.bfloat16, seed=13)
    h0 = (torch.randn(1, 4, 128, 128) * 0.3).cuda()
    o, ht = call(flashgdn.chunk_gated_delta_rule, q, k, v, g, beta, initial_state=h0, output_final_state=True,
                 use_qk_l2norm_in_kernel=True)
    o_f, ht_f = fla.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                           use_qk_l2norm_in_kernel=True)
    assert rel(o.double().cpu().numpy(), o_f.double().cpu().numpy()) < 2 * BF16_TOL
    assert rel(ht.double().cpu().numpy(), ht_f.double().cpu().numpy()) < 2 * BF16_TOL


def test_gating_vs_oracle():
    a, b = torch.randn(64, 32, device="cuda") * 8, torch.randn(64, 32, device="cuda", dtype=torch.bfloat16)
    A_log, dt_bias = torch.rand(32, device="cuda") * 2, torch.randn(32, device="cuda")
    g, bo = call(flashgdn.fused_gdn_gating, A_log, a, b, dt_bias)
    g_ref, b_ref = oracle(flashgdn.fused_gdn_gating, A_log, a, b, dt_bias)
    assert g.shape == (1, 64, 32) and g.dtype == torch.float32 and bo.dtype == torch.bfloat16
    assert rel(g.double().cpu().numpy(), g_ref.numpy()) < 1e-5
    assert rel(bo.double().cpu().numpy(), b_ref.numpy()) < BF16_TOL


# ---- CUDA graphs, streams, host cost ----------------------------------------------------------------------
def test_cuda_graph_capture_replay_equals_eager():
    N, slots, Hqk, Hv, K, V = 16, 32, 16, 32, 128, 128
    q, k, v, g, beta = inputs(N, 1, Hqk, Hv, K, V, torch.bfloat16, seed=5)
    pool0 = (torch.randn(slots, Hv, V, K) * 0.3).cuda()
    idx = torch.randperm(slots, device="cuda")[:N].to(torch.int32)
    static = [x.clone() for x in (q, k, v, g, beta)]
    pool = pool0.clone()
    call(flashgdn.recurrent_gated_delta_rule_pool, *static, pool, idx, use_qk_l2norm_in_kernel=True,
         state_v_first=True)  # warm-up (also checks that a kernel exists)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        o_static = flashgdn.recurrent_gated_delta_rule_pool(*static, pool, idx, use_qk_l2norm_in_kernel=True,
                                                            state_v_first=True)
    for seed in (6, 7):
        new = inputs(N, 1, Hqk, Hv, K, V, torch.bfloat16, seed=seed)
        for dst, src in zip(static, new):
            dst.copy_(src)
        pool.copy_(pool0)
        graph.replay()
        pool_e = pool0.clone()
        o_e = flashgdn.recurrent_gated_delta_rule_pool(*new, pool_e, idx, use_qk_l2norm_in_kernel=True,
                                                       state_v_first=True)
        torch.cuda.synchronize()
        assert torch.equal(o_static, o_e) and torch.equal(pool, pool_e)


def test_runs_on_current_and_explicit_stream():
    N, Hqk, Hv, K, V = 64, 16, 32, 128, 128
    q, k, v, g, beta = inputs(N, 1, Hqk, Hv, K, V, torch.bfloat16, seed=8)
    new_v = torch.randn_like(v)
    pool0 = (torch.randn(N, Hv, V, K) * 0.3).cuda()
    pool_ref = pool0.clone()
    o_ref = call(flashgdn.recurrent_gated_delta_rule_pool, q, k, new_v, g, beta, pool_ref, None, state_v_first=True)
    for explicit in (False, True):
        s = torch.cuda.Stream()
        vv = v.clone()
        pool = pool0.clone()
        torch.cuda.synchronize()
        with torch.cuda.stream(s):
            torch.cuda._sleep(20_000_000)  # the input update below lands late on s: a launch elsewhere reads stale v
            vv.copy_(new_v)
        if explicit:
            o = flashgdn.recurrent_gated_delta_rule_pool(q, k, vv, g, beta, pool, None, state_v_first=True, stream=s)
        else:
            with torch.cuda.stream(s):
                o = flashgdn.recurrent_gated_delta_rule_pool(q, k, vv, g, beta, pool, None, state_v_first=True)
        s.synchronize()
        assert torch.equal(o, o_ref) and torch.equal(pool, pool_ref), f"explicit={explicit}"


def test_no_host_sync_and_host_overhead():
    N, Hqk, Hv, K, V = 256, 16, 32, 128, 128
    q, k, v, g, beta = inputs(N, 1, Hqk, Hv, K, V, torch.bfloat16, seed=9)
    pool = torch.zeros(N + 1, Hv, V, K, device="cuda")
    idx = torch.arange(1, N + 1, dtype=torch.int32, device="cuda")
    out = torch.empty_like(v)
    f = lambda: flashgdn.recurrent_gated_delta_rule_pool(q, k, v, g, beta, pool, idx, state_v_first=True,  # noqa
                                                         use_qk_l2norm_in_kernel=True, out=out)
    call(f)
    torch.cuda.set_sync_debug_mode("error")
    try:
        f()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    reps = 200
    t0 = time.perf_counter()
    for _ in range(reps):
        f()
    per_call = (time.perf_counter() - t0) / reps * 1e6
    torch.cuda.synchronize()
    print(f"\nhost time per eager decode call: {per_call:.1f} us")
    assert per_call < 100, per_call  # target 15 us; a generous bound that still catches a hidden sync


# ---- interop -----------------------------------------------------------------------------------------------
def test_cupy_inputs_give_cupy_outputs():
    cp = pytest.importorskip("cupy")
    q, k, v, g, beta = inputs(2, 70, 1, 2, 128, 128, torch.bfloat16, seed=10)
    f32 = [x.float() for x in (q, k, v)]
    o_t, _ = call(flashgdn.chunk_gated_delta_rule, *f32, g, beta, use_qk_l2norm_in_kernel=True)
    o_c, ht_c = flashgdn.chunk_gated_delta_rule(*(cp.from_dlpack(x) for x in (*f32, g, beta)),
                                                use_qk_l2norm_in_kernel=True, output_final_state=True)
    cp.cuda.get_current_stream().synchronize()
    assert isinstance(o_c, cp.ndarray) and isinstance(ht_c, cp.ndarray)
    assert rel(cp.asnumpy(o_c), o_t.cpu().double().numpy()) < 1e-6


def test_jax_inputs_give_jax_outputs():
    jax = pytest.importorskip("jax")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees no GPU")
    import jax.numpy as jnp

    q, k, v, g, beta = inputs(2, 70, 1, 2, 128, 128, torch.float32, seed=11)
    o_t, _ = call(flashgdn.chunk_gated_delta_rule, q, k, v, g, beta, use_qk_l2norm_in_kernel=True)
    torch.cuda.synchronize()
    o_j, _ = flashgdn.chunk_gated_delta_rule(*(jnp.from_dlpack(x) for x in (q, k, v, g, beta)),
                                             use_qk_l2norm_in_kernel=True)
    assert isinstance(o_j, jax.Array)
    assert rel(np.asarray(o_j), o_t.cpu().double().numpy()) < 1e-6


# ---- strides the kernels cannot take: read through a compact copy -------------------------------------------
@pytest.mark.parametrize("kind", ["transposed", "unaligned", "expanded"])
@pytest.mark.parametrize("entry", ["chunk", "recurrent"])
def test_any_strides_on_cuda(kind, entry):
    # transformers' Qwen3-Next passes q, k, v split out of a transposed conv1d output (last-dim stride T); a slice
    # at an odd element offset is not 16-byte aligned; an expanded tensor has zero strides
    q, k, v, g, beta = inputs(1, 80 if entry == "chunk" else 3, 2, 4, 128, 128, torch.bfloat16, seed=7)
    h0 = torch.randn(1, 4, 128, 128, device="cuda")

    def restride(x):
        if kind == "transposed":
            return x.transpose(1, -1).contiguous().transpose(1, -1)
        if kind == "unaligned":
            flat = torch.empty(x.numel() + 1, device="cuda", dtype=x.dtype)
            y = flat[1:].view(x.shape)
            y.copy_(x)
            return y
        return x[:, :1].expand(x.shape)

    views = [restride(x) for x in (q, k, v, g, beta)]
    dense = [x.contiguous() for x in views]
    fn = flashgdn.chunk_gated_delta_rule if entry == "chunk" else flashgdn.fused_recurrent_gated_delta_rule
    o, ht = call(fn, *views, initial_state=h0.transpose(2, 3).contiguous().transpose(2, 3), output_final_state=True,
                 use_qk_l2norm_in_kernel=True)
    o_ref, ht_ref = call(fn, *dense, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True)
    # the same values: equal up to the kernels' own run-to-run rounding (a misread stride is an O(1) error)
    assert rel(o.float().cpu().numpy(), o_ref.float().cpu().numpy()) < 1e-3
    assert rel(ht.float().cpu().numpy(), ht_ref.float().cpu().numpy()) < 1e-3


def test_in_place_pool_with_a_strided_last_dim_is_an_error_on_cuda():
    q, k, v, g, beta = inputs(2, 1, 2, 4, 128, 128, torch.bfloat16)
    pool = torch.zeros(3, 4, 128, 128, device="cuda").transpose(2, 3)  # last-dim stride 128: no silent copy
    with pytest.raises(flashgdn.InvalidArgumentError, match="state_pool: expected a contiguous last dim"):
        flashgdn.recurrent_gated_delta_rule_pool(q, k, v, g, beta, pool)


def test_strided_inputs_on_an_explicit_stream():
    # the compact copy is made on the launch's stream, so the kernel reads it after it is written
    q, k, v, g, beta = inputs(4, 1, 2, 4, 128, 128, torch.bfloat16, seed=9)
    qt = q.transpose(1, -1).contiguous().transpose(1, -1)
    pool = torch.randn(5, 4, 128, 128, device="cuda")
    pool_ref = pool.clone()
    idx = torch.tensor([3, 0, 4, 1], device="cuda", dtype=torch.int32)
    o_ref = call(flashgdn.recurrent_gated_delta_rule_pool, q, k, v, g, beta, pool_ref, idx)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    o = call(flashgdn.recurrent_gated_delta_rule_pool, qt, k, v, g, beta, pool, idx, stream=side)
    side.synchronize()
    assert rel(o.float().cpu().numpy(), o_ref.float().cpu().numpy()) < 1e-3
    assert rel(pool.cpu().numpy(), pool_ref.cpu().numpy()) < 1e-3


@pytest.mark.parametrize("name", OPCHECK_OPS)
def test_opcheck_every_registered_op_on_cuda(name):
    # bf16 q, k, v with K = V = 64 (the CUDA kernels' shapes); gradients once the CUDA backward exists
    probe = opcheck_case("chunk_bwd", "cuda", torch.bfloat16, 64)
    try:
        probe[0](*probe[1])
        grad = True
    except flashgdn.UnsupportedError as e:
        if name == "chunk_bwd":
            pytest.skip(f"no CUDA kernel: {e}")
        grad = False  # the forward ops without their autograd test
    op, args = opcheck_case(name, "cuda", torch.bfloat16, 64, grad=grad)
    torch.library.opcheck(op, args)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_training_step_on_cuda(backend):
    # fullgraph fwd + bwd through the CUDA chunk_fwd / chunk_bwd: the compiled step's gradients are the eager
    # step's bit for bit (both run the same deterministic kernels; inductor only fuses the loss around them)
    q, k, v, g, beta = (x.requires_grad_() for x in inputs(2, 130, 2, 4, 64, 64, torch.bfloat16, seed=21))
    h0 = torch.randn(2, 4, 64, 64, device="cuda", requires_grad=True)
    xs = (q, k, v, g, beta, h0)

    def loss_fn(q, k, v, g, beta, h0):
        o, ht = flashgdn.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                                use_qk_l2norm_in_kernel=True)
        return (o.float() * o.float()).sum() + ht.sum()

    ref = torch.autograd.grad(call(loss_fn, *xs), xs)
    out = torch.autograd.grad(torch.compile(loss_fn, fullgraph=True, backend=backend)(*xs), xs)
    for a, b in zip(out, ref):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=0, atol=0)
