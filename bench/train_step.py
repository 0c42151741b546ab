#!/usr/bin/env python3
"""Training forward + backward of chunk_gated_delta_rule (bf16, K = V = 128, l2norm in kernel, final state in the
loss) for flashgdn and, when importable in this process, FlashQLA: eager step time (median of 10 after warm-up,
CUDA events) and the kernel time of one step (torch.profiler, CUDA kernels summed), gradients checked against
each other. FLA 0.6 routes its chunk ops to FlashQLA when flash_qla is importable: run FLA in another process.

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


def time_step(step, top=0):
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    ts = []
    for _ in range(10):
        s, e = torch.cuda.Event(True), torch.cuda.Event(True)
        s.record()
        step()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    avgs = prof.key_averages()
    kern = sum(e.device_time_total for e in avgs) / 1e3
    for e in sorted(avgs, key=lambda e: -e.device_time_total)[:top]:  # where the step's kernel time goes
        print(f"    {e.device_time_total / 1e3:8.3f} ms  {e.count:3d}x  {e.key[:110]}")
    return statistics.median(ts), kern


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
    print("| shape | impl | step ms (eager) | kernels ms | grad rel err vs flashgdn |")
    print("|---|---|---|---|---|")
    for name in args.shapes.split(","):
        lens, hqk, hv = SHAPES[name]
        xs, cu = inputs(lens, hqk, hv)
        do = torch.randn(1, sum(lens), hv, 128, dtype=torch.bfloat16, device="cuda")
        ref = None
        for impl, fn in impls.items():
            try:
                grads = step_fn(fn, xs, cu, do)()
                if ref is None:
                    ref, err = grads, 0.0
                else:
                    err = max(((a.float() - b.float()).norm() / b.float().norm()).item() for a, b in zip(grads, ref))
                ms, kern = time_step(step_fn(fn, xs, cu, do), args.kernels)
                rows.append(dict(shape=name, impl=impl, step_ms=ms, kernel_ms=kern, rel_err=err))
                print(f"| {name} | {impl} | {ms:.3f} | {kern:.3f} | {err:.1e} |")
            except Exception as e:  # noqa: BLE001 - a failing peer is reported, never fatal
                print(f"| {name} | {impl} | failed: {type(e).__name__}: {str(e)[:120]} | | |")
            torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
