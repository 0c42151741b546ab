#!/usr/bin/env python3
"""Training forward + backward of chunk_gated_delta_rule (bf16, K = V = 128, l2norm in kernel, final state in the
loss) for flashgdn and, when importable in this process, FlashQLA: eager step time (median of 10 after warm-up,
CUDA events), the step replayed as one CUDA graph (median of 10; "n/a" where an implementation cannot be
captured), the kernel time of one step (torch.profiler: the union of its kernels' spans, so that kernels that
overlap count once), TFLOP/s of the graph (or eager) time by gdn-math §9.2 / §9.3 (forward + backward count), the
floor max(compulsory bytes / copy rate, FLOPs / bf16 GEMM rate) with both rates measured in this run, and gradients
checked against each other. Host overhead of an eager step = eager - graph. FLA 0.6 routes its chunk ops to
FlashQLA when flash_qla is importable: run FLA in another process.

    python3 bench/train_step.py [--out FILE.json] [--peer flashqla|fla|none] [--shapes 8k,32k,4x8k] [--kernels N]
"""

import argparse
import json
import statistics

import torch

import flashgdn

SHAPES = {"8k": ([8192], 16, 32), "32k": ([32768], 16, 32), "4x8k": ([8192] * 4, 16, 64), "128k": ([131072], 32, 32)}


def inputs(lens, hqk, hv, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    T = sum(lens)
    d = dict(device="cuda", generator=g)
    q = torch.randn(1, T, hqk, 128, dtype=torch.bfloat16, **d)
    k = torch.randn(1, T, hqk, 128, dtype=torch.bfloat16, **d)
    v = torch.randn(1, T, hv, 128, dtype=torch.bfloat16, **d)
    gate = -torch.rand(1, T, hv, dtype=torch.float32, **d)  # g ~ U(-1, 0)
    beta = torch.rand(1, T, hv, dtype=torch.float32, **d)
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device="cuda")
    return [t.requires_grad_() for t in (q, k, v, gate, beta)], cu


def step_fn(fn, xs, cu, do):
    def step():
        o, ht = fn(*xs, cu)
        return torch.autograd.grad((o * do).sum() + ht.sum(), xs)
    return step


def median_ms(fn, reps=10):
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(True), torch.cuda.Event(True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    return statistics.median(ts)


def graph_ms(step):
    """The whole fwd + bwd step captured once and replayed (None where capture fails)."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            step()  # warm-up on the capture stream (allocator pools, lazy init)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        graph.replay()
        torch.cuda.synchronize()
        return median_ms(graph.replay)
    except Exception as e:  # noqa: BLE001 - a peer that cannot be captured is reported, never fatal
        print(f"    graph capture failed: {type(e).__name__}: {str(e)[:100]}")
        torch.cuda.synchronize()
        return None


def ceilings():
    """Device copy (read + write) TB/s and bf16 GEMM 8192^3 TFLOP/s, measured here."""
    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    copy = 2 * a.numel() / (median_ms(lambda: b.copy_(a)) * 1e-3) / 1e12
    x = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    x @ x
    gemm = 2 * 8192 ** 3 / (median_ms(lambda: x @ x) * 1e-3) / 1e12
    del a, b, x
    torch.cuda.empty_cache()
    return copy, gemm


def cost(lens, hqk, hv, K=128, V=128, C=64):
    """fwd + bwd FLOPs (gdn-math §9.2, §9.3) and compulsory bytes (bf16 q, k, v, o, do, dq, dk, dv; fp32 g, beta,
    dg, dbeta; each read once per pass that needs it; the fp32 final state and its gradient)."""
    T = sum(lens)
    f_fwd = 6 * K * V + 2 * C * (3 * K + 2 * V) + C * C / 3
    f_bwd = 16 * K * V + 2 * C * (9 * K + 5 * V) + 4 * C * C
    flops = T * hv * (f_fwd + f_bwd)
    qk = 2 * hqk * K * 2  # q, k in bf16
    byts = T * (qk + hv * V * 2 + hv * 8 + hv * V * 2)  # forward: q, k, v, g, beta in; o out
    byts += T * (qk + 2 * hv * V * 2 + hv * 8 + qk + hv * V * 2 + hv * 8)  # backward: q, k, v, do, g, beta; dq..dbeta
    byts += 2 * len(lens) * hv * K * V * 4  # final state out, its gradient in
    return flops, byts


def busy_ms(spans_us):
    """The GPU's busy time in ms: the union of the kernels' [start, end) spans (us), so that kernels that overlap (a
    programmatic dependent waiting inside its kernel for the one before it) count once."""
    busy, end = 0.0, float("-inf")
    for a, b in sorted(spans_us):
        if b > end:
            busy += b - max(a, end)
            end = b
    return busy / 1e3


def time_step(step, top=0):
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    eager = median_ms(step)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    avgs = prof.key_averages()
    kern = busy_ms([(e.time_range.start, e.time_range.end) for e in prof.events()
                    if e.device_type == torch.autograd.DeviceType.CUDA])
    for e in sorted(avgs, key=lambda e: -e.device_time_total)[:top]:  # where the step's kernel time goes
        print(f"    {e.device_time_total / 1e3:8.3f} ms  {e.count:3d}x  {e.key[:110]}")
    return eager, graph_ms(step), kern


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    ap.add_argument("--peer", default="flashqla")
    ap.add_argument("--shapes", default="8k,32k,4x8k")
    ap.add_argument("--kernels", type=int, default=0, metavar="N", help="print the N costliest kernels of a step")
    args = ap.parse_args()
    impls = {"flashgdn": lambda q, k, v, g, b, cu: flashgdn.chunk_gated_delta_rule(
        q, k, v, g, b, cu_seqlens=cu, output_final_state=True, use_qk_l2norm_in_kernel=True)}
    if args.peer == "flashqla":
        try:
            import flash_qla
            impls["flashqla"] = lambda q, k, v, g, b, cu: flash_qla.chunk_gated_delta_rule(
                q, k, v, g, b, cu_seqlens=cu.long(), output_final_state=True, use_qk_l2norm_in_kernel=True)
        except Exception as e:  # noqa: BLE001
            print(f"flashqla: not available ({type(e).__name__}: {e})")
    elif args.peer == "fla":
        try:
            from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_chunk
            impls["fla"] = lambda q, k, v, g, b, cu: fla_chunk(q, k, v, g, b, cu_seqlens=cu.long(),
                                                               output_final_state=True, use_qk_l2norm_in_kernel=True)
        except Exception as e:  # noqa: BLE001
            print(f"fla: not available ({type(e).__name__}: {e})")
    rows = []
    copy, gemm = ceilings()
    print(f"ceilings: copy {copy:.2f} TB/s, bf16 GEMM {gemm:.0f} TFLOP/s")
    print("| shape | impl | step ms (eager) | graph ms | kernels ms | host overhead ms | TFLOP/s | x floor "
          "| flashgdn speedup vs this | grad rel err vs flashgdn |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.shapes.split(","):
        lens, hqk, hv = SHAPES[name]
        xs, cu = inputs(lens, hqk, hv)
        do = torch.randn(1, sum(lens), hv, 128, dtype=torch.bfloat16, device="cuda")
        ref, base = None, None
        flops, byts = cost(lens, hqk, hv)
        floor = max(byts / (copy * 1e12), flops / (gemm * 1e12)) * 1e3
        for impl, fn in impls.items():
            try:
                grads = step_fn(fn, xs, cu, do)()
                if ref is None:
                    ref, err = grads, 0.0
                else:
                    err = max(((a.float() - b.float()).norm() / b.float().norm()).item() for a, b in zip(grads, ref))
                ms, gms, kern = time_step(step_fn(fn, xs, cu, do), args.kernels)
                t = gms if gms is not None else ms
                base = t if base is None else base
                rows.append(dict(shape=name, impl=impl, step_ms=ms, graph_ms=gms, kernel_ms=kern, rel_err=err,
                                 tflops=flops / (t * 1e-3) / 1e12, floor_ms=floor, copy_tbps=copy, gemm_tflops=gemm))
                g_txt = f"{gms:.3f}" if gms is not None else "n/a"
                h_txt = f"{ms - gms:.3f}" if gms is not None else "n/a"
                print(f"| {name} | {impl} | {ms:.3f} | {g_txt} | {kern:.3f} | {h_txt} | {flops / (t * 1e-3) / 1e12:.1f} "
                      f"| {t / floor:.2f} | {t / base:.2f}x | {err:.1e} |")
            except Exception as e:  # noqa: BLE001 - a failing peer is reported, never fatal
                print(f"| {name} | {impl} | failed: {type(e).__name__}: {str(e)[:120]} | | |")
            torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
