#!/usr/bin/env python3
"""flashgdn next to its peers, on the same inputs in the same process (see bench/README.md).

    python3 bench/side_by_side.py --out DIR [--quick] [--budget SECONDS] [--peers fla,flashqla,flashinfer]
                                  [--only SUBSTRING]

For every case: build one set of inputs, run flashgdn and each importable peer once from the same state, check
that they agree (relative Frobenius error of o and of the state), then time each with CUDA events, eagerly and as
a CUDA-graph replay whose calls rotate over input copies larger than L2 together. Reports ms, TB/s, TFLOP/s, the
ratio to each peer and to the ceilings measured in the same run (device copy bandwidth, bf16 GEMM 8192^3).
Also: training fwd+bwd, first-call latency in a fresh process, host time per eager decode call.
Writes DIR/results.md, DIR/results.json, DIR/results.png after every case, so a cut-short run still reports.
A flashgdn op without a CUDA kernel yet shows as "n/a"; a failing peer or case is reported, never fatal.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
import traceback

from graph_timing import capture, replay_ms

os.environ.setdefault("TRITON_CACHE_AUTOTUNING", "1")  # FLA's Triton autotune: reuse across processes

L2_BYTES = 60 * 2**20  # H200 L2 (about 60 MB): graph replays rotate over inputs at least twice that
C = 64  # chunk size for the FLOP model (gdn-math §9.2)
DEV = "cuda"  # --device cpu runs the harness on the CPU backend (smoke test; no graphs)
GRAPH_ROUNDS = 3  # graph timings per implementation and case, alternating the implementations
PEER_COMPILE_S = 60  # budget a peer needs left to start a new shape family (Triton compile + autotune)


# ---- cost model (gdn-math §9) ------------------------------------------------------------------------------
def f_fwd(K, V):
    return 6 * K * V + 2 * C * (3 * K + 2 * V) + C * C / 3  # per token per value head


def f_bwd(K, V):
    return 16 * K * V + 2 * C * (9 * K + 5 * V) + 4 * C * C


def esize(dtype):
    return 2 if dtype in ("bf16", "fp16") else 4


# ---- cases -------------------------------------------------------------------------------------------------
def build_cases(quick):
    H = dict(Hqk=16, Hv=32, K=128, V=128)
    cases = []
    for n in ((1, 256) if quick else (1, 8, 32, 128, 256)):
        cases.append(dict(name=f"decode N={n} fp32 pool", kind="decode", N=n, T=1, pool="fp32", **H))
    cases.append(dict(name="decode N=256 bf16 pool", kind="decode", N=256, T=1, pool="bf16", **H))
    for n in ((32,) if quick else (1, 32, 256)):
        cases.append(dict(name=f"multi-token T=12 N={n}", kind="decode", N=n, T=12, pool="fp32", **H))
    for n in ((256,) if quick else (1, 256)):
        cases.append(dict(name=f"verify T=12 N={n} bf16 inter", kind="verify", N=n, T=12, pool="fp32",
                          inter="bf16", **H))
    P = dict(K=128, V=128)
    pre = [("prefill bf16 1x32768 H=16", "bf16", [32768], 16, 16),
           ("prefill bf16 1x32768 Hqk=16 Hv=32", "bf16", [32768], 16, 32),
           ("prefill varlen bf16 4x8192 Hqk=16 Hv=64", "bf16", [8192] * 4, 16, 64)]
    if not quick:
        pre += [("prefill bf16 1x131072 H=32", "bf16", [131072], 32, 32),
                ("prefill varlen bf16 64x512 Hqk=16 Hv=32", "bf16", [512] * 64, 16, 32),
                ("prefill fp16 1x32768 H=16", "fp16", [32768], 16, 16),
                ("prefill fp16 1x131072 H=32", "fp16", [131072], 32, 32)]
    for name, dt, lens, hqk, hv in pre:
        cases.append(dict(name=name, kind="prefill", dtype=dt, lens=lens, Hqk=hqk, Hv=hv, **P))
    cases.append(dict(name="train fwd+bwd bf16 1x8192 Hqk=16 Hv=32", kind="train", dtype="bf16", lens=[8192],
                      Hqk=16, Hv=32, **P))
    return cases


def case_cost(c):
    """(bytes, flops) of one call under the compulsory-traffic model."""
    K, V, Hqk, Hv = c["K"], c["V"], c["Hqk"], c["Hv"]
    if c["kind"] in ("decode", "verify"):
        N, T = c["N"], c["T"]
        sb = esize(c["pool"])
        io = N * T * (2 * Hqk * K * 2 + 2 * Hv * V * 2 + 2 * Hv * 4)
        state = N * Hv * K * V * sb
        if c["kind"] == "verify":  # read once; every token's state to the intermediate buffer; no pool write
            nbytes = state + N * T * Hv * K * V * esize(c["inter"]) + io
        else:
            nbytes = 2 * state + io
        return nbytes, N * T * Hv * 6 * K * V
    tokens, N = sum(c["lens"]), len(c["lens"])
    es = esize(c["dtype"])
    io = tokens * (2 * Hqk * K * es + 2 * Hv * V * es + 2 * Hv * 4) + N * Hv * K * V * 4
    flops = tokens * Hv * f_fwd(K, V)
    if c["kind"] == "train":  # backward reads q, k, v, g, beta, dO; writes dq, dk, dv, dg, dbeta
        io += tokens * (4 * Hqk * K * es + 3 * Hv * V * es + 4 * Hv * 4)
        flops += tokens * Hv * f_bwd(K, V)
    return io, flops


# ---- harness -----------------------------------------------------------------------------------------------
class Bench:
    def __init__(self, args):
        import torch

        self.torch = torch
        self.args = args
        self.t_start = time.perf_counter()
        self.deadline = self.t_start + args.budget
        self.rows = []
        self.meta = {"argv": sys.argv, "quick": args.quick, "budget_s": args.budget, "peers": {}, "notes": []}
        self.ceilings = {}
        self.target_s = 0.05 if args.quick else 0.15
        self.families = set()  # (impl, kind, dtype, ...) already compiled in this process

    def left(self):
        return self.deadline - time.perf_counter()

    # timing ---------------------------------------------------------------------------------------------------
    def sync(self):
        if DEV == "cuda":
            self.torch.cuda.synchronize()

    def events(self):
        if DEV == "cuda":
            return self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
        return _HostEvent(), _HostEvent()

    def time_eager(self, call):
        call()
        self.sync()
        t0 = time.perf_counter()
        call()
        self.sync()
        one = time.perf_counter() - t0
        reps = int(min(200, max(3, self.target_s / max(one, 1e-6))))
        s, e = self.events()
        s.record()
        for _ in range(reps):
            call()
        e.record()
        e.synchronize()
        return s.elapsed_time(e) / reps

    def profile(self, call):
        """One eager call's kernel split (torch.profiler: device time per kernel, the costliest --kernels of them)
        and the memory it allocates (peak during the call less what was allocated before: its outputs, workspace
        and temporaries)."""
        torch = self.torch
        self.sync()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            out = call()
            self.sync()
        peak = torch.cuda.max_memory_allocated() - before
        del out
        ks = sorted(((e.key, e.device_time_total / 1e3, e.count) for e in prof.key_averages()
                     if e.device_time_total > 0), key=lambda k: -k[1])
        return dict(kernels=[dict(name=n[:120], ms=ms, count=cnt) for n, ms, cnt in ks[:self.args.kernels]],
                    kernel_ms=sum(k[1] for k in ks), call_MB=peak / 2**20)

    def time_graph(self, calls):
        """Per-call ms of a CUDA graph that runs every call of `calls` (each on its own input copy) once."""
        torch = self.torch
        if DEV != "cuda":
            raise RuntimeError("CUDA graphs need a GPU")
        try:
            graph = capture(torch, calls)
        except Exception:
            try:
                self.sync()
            except Exception:
                pass
            raise
        graph.replay()
        self.sync()
        t0 = time.perf_counter()
        graph.replay()
        self.sync()
        one = time.perf_counter() - t0
        reps = int(min(100, max(5, self.target_s / max(one, 1e-6))))
        # Each replay timed on its own and the median taken (as `flashgdn bench` does): a mean over back-to-back
        # replays also counts whatever one slow replay costs. All are enqueued before the first is waited for, so a
        # replay's events hold no host launch gap (which otherwise counts whole where one replay is one call).
        times = replay_ms(torch, graph, reps)
        del graph
        return statistics.median(t / len(calls) for t in times)

    # ceilings -------------------------------------------------------------------------------------------------
    def measure_ceilings(self):
        torch = self.torch
        n = (2**30 if not self.args.quick else 2**29) if DEV == "cuda" else 2**24
        a = torch.empty(n, dtype=torch.uint8, device=DEV)
        b = torch.empty_like(a)
        ms = self.time_eager(lambda: b.copy_(a))
        self.ceilings["copy_TBps"] = 2 * n / (ms * 1e-3) / 1e12
        a = b = None
        m = 8192 if DEV == "cuda" else 256
        x = torch.randn(m, m, device=DEV, dtype=torch.bfloat16)
        y = torch.randn(m, m, device=DEV, dtype=torch.bfloat16)
        for _ in range(3):
            x @ y
        ms = self.time_eager(lambda: x @ y)
        self.ceilings["gemm_bf16_TFLOPs"] = 2 * m**3 / (ms * 1e-3) / 1e12
        x = y = None
        torch.cuda.empty_cache()

    # inputs ---------------------------------------------------------------------------------------------------
    def inputs(self, c, seed):
        torch = self.torch
        gen = torch.Generator(device=DEV).manual_seed(seed)
        dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
        K, V, Hqk, Hv = c["K"], c["V"], c["Hqk"], c["Hv"]
        if c["kind"] in ("decode", "verify"):
            B, T, io = c["N"], c["T"], torch.bfloat16
        else:
            B, T, io = 1, sum(c["lens"]), dt[c["dtype"]]
        r = lambda *s: torch.randn(*s, device=DEV, generator=gen)  # noqa: E731
        g = torch.nn.functional.logsigmoid(r(B, T, Hv))
        if self.args.gates == "flashqla":  # FlashQLA's benchmark gates: logsigmoid(N(0, 1)) / 16, a quarter at 0
            g = g / 16
            g[:, :, ::4] = 0
        d = dict(q=r(B, T, Hqk, K).to(io), k=r(B, T, Hqk, K).to(io), v=r(B, T, Hv, V).to(io),
                 g=g, beta=torch.sigmoid(r(B, T, Hv)))
        if c["kind"] in ("decode", "verify"):
            d["h0"] = (r(c["N"], Hv, K, V) * 0.1).to(dt[c["pool"]])
        else:
            lens = c["lens"]
            d["cu"] = torch.tensor([0] + list(_cumsum(lens)), dtype=torch.int32, device=DEV) \
                if len(lens) > 1 else None
        return d

    # one case -------------------------------------------------------------------------------------------------
    def run_case(self, c, impls):
        torch = self.torch
        nbytes, flops = case_cost(c)
        per_call = nbytes
        copies = 1 if c["kind"] == "train" else max(1, min(64, math.ceil(2 * L2_BYTES / max(per_call, 1))))
        base = self.inputs(c, seed=1)
        ref_name, ref_out = None, None
        graphed = []  # (row, the calls on their input copies) of every implementation that ran
        for name, builder in impls:
            row = dict(case=c["name"], kind=c["kind"], impl=name, bytes=nbytes, flops=flops, status="ok")
            self.rows.append(row)
            if name != "flashgdn" and self.left() < 5:  # flashgdn itself is quick: it always runs
                row.update(status="skipped", note="time budget")
                continue
            family = (name, c["kind"], c.get("dtype"), c.get("pool"), c["Hqk"], c["Hv"], len(c.get("lens", [])) > 1)
            if (name != "flashgdn" and family not in self.families and self.left() < PEER_COMPILE_S
                    and not self.args.peers_compiled):
                # a peer's first call of a new shape family compiles and autotunes (FLA: 40-55 s)
                row.update(status="skipped", note=f"time budget (first call of a new shape family may take "
                                                  f"~{PEER_COMPILE_S} s)")
                continue
            self.families.add(family)
            try:
                call = builder(c, base)
                if call is None:
                    row.update(status="n/a", note="peer has no such op")
                    continue
                out = call()  # from the initial state: the agreement check
                self.sync()
                if ref_out is None:
                    ref_name, ref_out = name, [x.detach().float().clone() if x is not None else None for x in out]
                else:
                    row["vs"] = ref_name
                    row["err_o"] = _rel(out[0], ref_out[0])
                    if len(out) > 1 and out[1] is not None and ref_out[1] is not None and \
                            out[1].shape == ref_out[1].shape:
                        row["err_state"] = _rel(out[1], ref_out[1])
                row["eager_ms"] = self.time_eager(call)
                if self.args.kernels and DEV == "cuda":
                    try:  # a profiler failure costs the row its kernel split, not its timings
                        row.update(self.profile(call))
                    except Exception as e:  # noqa: BLE001
                        row["kernels_note"] = _short(e)
            except Exception as e:  # noqa: BLE001 - a failing implementation is a result, not a crash
                row.update(status=_status_of(e), note=_short(e))
                _recover(torch)
                continue
            if c["kind"] == "train" or self.args.no_graph:
                continue
            try:
                graphed.append((row, [call] + [builder(c, self.inputs(c, seed=100 + i)) for i in range(copies - 1)]))
            except Exception as e:  # noqa: BLE001
                row["graph_note"] = _short(e)
                _recover(torch)
        # Graph timings in GRAPH_ROUNDS rounds that alternate the implementations, each round a fresh capture (its
        # own output and workspace addresses): the median of the rounds' medians, and their spread, so that drift
        # over the run and the placement of one capture's buffers fall on every implementation alike.
        for _ in range(GRAPH_ROUNDS):
            for row, calls in graphed:
                if "graph_note" in row:
                    continue
                try:
                    row.setdefault("graph_rounds", []).append(self.time_graph(calls))
                except Exception as e:  # noqa: BLE001
                    row["graph_note"] = _short(e)
                    row.pop("graph_rounds", None)
                    _recover(torch)
        for row, _ in graphed:
            if "graph_rounds" in row:
                row.update(graph_ms=statistics.median(row["graph_rounds"]), graph_copies=copies)
        del graphed
        del base
        torch.cuda.empty_cache()
        self.finish_rows(c)

    def finish_rows(self, c):
        rows = [r for r in self.rows if r["case"] == c["name"]]
        for r in rows:
            t = r.get("graph_ms") or r.get("eager_ms")
            if not t:
                continue
            r["TBps"] = r["bytes"] / (t * 1e-3) / 1e12
            r["TFLOPs"] = r["flops"] / (t * 1e-3) / 1e12
            if self.ceilings.get("copy_TBps"):
                r["pct_copy"] = 100 * r["TBps"] / self.ceilings["copy_TBps"]
            if self.ceilings.get("gemm_bf16_TFLOPs"):
                r["pct_gemm"] = 100 * r["TFLOPs"] / self.ceilings["gemm_bf16_TFLOPs"]
        ours = next((r for r in rows if r["impl"] == "flashgdn"), None)
        t_ours = ours and (ours.get("graph_ms") or ours.get("eager_ms"))
        if t_ours:
            ours["speedup"] = {}
            for r in rows:
                t = r.get("graph_ms") or r.get("eager_ms")
                if r is not ours and t:
                    ours["speedup"][r["impl"]] = t / t_ours  # > 1: flashgdn is faster

    # extra measurements ---------------------------------------------------------------------------------------
    def host_overhead(self, impls):
        """Host time per eager decode call (N=1), and the share of it spent reading tensors in C++."""
        torch = self.torch
        c = dict(name="host overhead: eager decode N=1", kind="decode", N=1, T=1, pool="fp32", Hqk=16, Hv=32,
                 K=128, V=128)
        base = self.inputs(c, seed=3)
        for name, builder in impls:
            row = dict(case=c["name"], kind="overhead", impl=name, status="ok")
            self.rows.append(row)
            try:
                call = builder(c, base)
                if call is None:
                    row.update(status="n/a")
                    continue
                for _ in range(20):
                    call()
                self.sync()
                reps = 300 if self.args.quick else 1000
                t0 = time.perf_counter()
                for _ in range(reps):
                    call()
                host = (time.perf_counter() - t0) / reps
                self.sync()
                row["host_us_per_call"] = host * 1e6
                if name == "flashgdn":
                    import flashgdn

                    ts = [base[k] for k in ("q", "k", "v", "g", "beta", "h0")] + [base["q"], base["v"]]
                    t0 = time.perf_counter()
                    for _ in range(reps):
                        flashgdn._C.probe_views(*ts)
                    row["tensor_read_us_per_call"] = (time.perf_counter() - t0) / reps * 1e6
            except Exception as e:  # noqa: BLE001
                row.update(status=_status_of(e), note=_short(e))
                _recover(torch)

    def first_call(self, which):
        """Import + first call in a fresh process (compile / autotune / module load included)."""
        row = dict(case=f"first call, fresh process ({which})", kind="first_call", impl=which.split()[0],
                   status="ok")
        self.rows.append(row)
        timeout = min(120, self.left() - 20)
        if timeout < 15:
            row.update(status="skipped", note="time budget")
            return
        script = FIRST_CALL_SCRIPT.replace("@WHICH@", which)
        try:
            p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)
            line = [x for x in p.stdout.splitlines() if x.startswith("{")]
            if p.returncode != 0 or not line:
                row.update(status="error", note=_short_text(p.stderr or p.stdout))
                return
            row.update(json.loads(line[-1]))
        except subprocess.TimeoutExpired:
            row.update(status="timeout", note=f"over {timeout:.0f} s")

    # output ---------------------------------------------------------------------------------------------------
    def write(self):
        out = self.args.out
        self.meta["elapsed_s"] = time.perf_counter() - self.t_start
        with open(os.path.join(out, "results.json"), "w") as f:
            json.dump({"meta": self.meta, "ceilings": self.ceilings, "rows": self.rows}, f, indent=1, default=str)
        with open(os.path.join(out, "results.md"), "w") as f:
            f.write(render_markdown(self.meta, self.ceilings, self.rows))
        try:
            render_plot(self.rows, os.path.join(out, "results.png"))
        except Exception as e:  # noqa: BLE001 - no matplotlib: tables only
            self.meta["plot"] = _short(e)


FIRST_CALL_SCRIPT = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
which = "@WHICH@"
impl, op = which.split()
if impl == "flashgdn":
    import flashgdn as lib
else:
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_chunk
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as fla_rec
t2 = time.perf_counter()
DEV = "cuda"
g = torch.Generator(device=DEV).manual_seed(0)
r = lambda *s: torch.randn(*s, device=DEV, generator=g)
if op == "decode":
    q, k, v = r(8, 1, 16, 128).bfloat16(), r(8, 1, 16, 128).bfloat16(), r(8, 1, 32, 128).bfloat16()
else:
    q, k, v = r(1, 8192, 16, 128).bfloat16(), r(1, 8192, 16, 128).bfloat16(), r(1, 8192, 32, 128).bfloat16()
gg = torch.nn.functional.logsigmoid(r(*v.shape[:3])); beta = torch.sigmoid(r(*v.shape[:3]))
h0 = r(8, 32, 128, 128) * 0.1
torch.cuda.synchronize()
t3 = time.perf_counter()
if impl == "flashgdn" and op == "decode":
    lib.recurrent_gated_delta_rule_pool(q, k, v, gg, beta, h0, None, use_qk_l2norm_in_kernel=True)
elif impl == "flashgdn":
    lib.chunk_gated_delta_rule(q, k, v, gg, beta, output_final_state=True, use_qk_l2norm_in_kernel=True)
elif op == "decode":
    fla_rec(q, k, v, g=gg, beta=beta, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True)
else:
    fla_chunk(q, k, v, gg, beta, output_final_state=True, use_qk_l2norm_in_kernel=True)
torch.cuda.synchronize()
t4 = time.perf_counter()
print(json.dumps({"import_torch_s": t1 - t0, "import_lib_s": t2 - t1, "first_call_s": t4 - t3,
                  "total_s": t4 - t0}))
"""


# ---- implementations ---------------------------------------------------------------------------------------
def flashgdn_impl(torch):
    import flashgdn

    def build(c, d):
        if c["kind"] in ("decode", "verify"):
            pool = d["h0"].clone()
            idx = torch.arange(c["N"], dtype=torch.int32, device=DEV)
            out = torch.empty_like(d["v"])
            inter = None
            if c["kind"] == "verify":
                inter = torch.empty((c["N"], c["T"], c["Hv"], c["K"], c["V"]), device=DEV,
                                    dtype=torch.bfloat16 if c["inter"] == "bf16" else torch.float32)

            def call():
                o = flashgdn.recurrent_gated_delta_rule_pool(d["q"], d["k"], d["v"], d["g"], d["beta"], pool, idx,
                                                             intermediate_states=inter, commit=inter is None,
                                                             use_qk_l2norm_in_kernel=True, out=out)
                return (o, pool if inter is None else inter[:, -1])
            return call
        if c["kind"] == "prefill":
            return lambda: flashgdn.chunk_gated_delta_rule(d["q"], d["k"], d["v"], d["g"], d["beta"],
                                                           output_final_state=True, use_qk_l2norm_in_kernel=True,
                                                           cu_seqlens=d["cu"])
        return _train_call(torch, d, lambda q, k, v, g, b: flashgdn.chunk_gated_delta_rule(
            q, k, v, g, b, use_qk_l2norm_in_kernel=True, cu_seqlens=d["cu"])[0])
    return build


def fla_impl(torch):
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule as chunk
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as rec

    try:
        from fla.ops.utils import prepare_chunk_indices
    except ImportError:
        prepare_chunk_indices = None

    def varlen_kw(d):
        if d.get("cu") is None:
            return {}
        cu = d["cu"].long()
        kw = dict(cu_seqlens=cu, cu_seqlens_cpu=cu.cpu())
        if prepare_chunk_indices is not None:
            try:
                kw["chunk_indices"] = prepare_chunk_indices(cu, 64)
            except Exception:  # noqa: BLE001 - signature drift: let FLA compute it
                pass
        return kw

    def build(c, d):
        if c["kind"] == "verify":
            return None  # FLA has no per-token intermediate states
        if c["kind"] == "decode":
            h0 = d["h0"]
            return lambda: rec(d["q"], d["k"], d["v"], g=d["g"], beta=d["beta"], initial_state=h0,
                               output_final_state=True, use_qk_l2norm_in_kernel=True)
        kw = varlen_kw(d)
        if c["kind"] == "prefill":
            return lambda: chunk(d["q"], d["k"], d["v"], d["g"], d["beta"], output_final_state=True,
                                 use_qk_l2norm_in_kernel=True, **kw)
        return _train_call(torch, d, lambda q, k, v, g, b: chunk(q, k, v, g, b, use_qk_l2norm_in_kernel=True,
                                                                   **kw)[0])
    return build


def flashqla_impl(torch):
    import flash_qla

    def build(c, d):
        if c["kind"] in ("decode", "verify"):
            return None
        cu = None if d.get("cu") is None else d["cu"].long()
        if c["kind"] == "prefill":
            return lambda: flash_qla.chunk_gated_delta_rule(d["q"], d["k"], d["v"], d["g"], d["beta"],
                                                            output_final_state=True, use_qk_l2norm_in_kernel=True,
                                                            cu_seqlens=cu)
        return _train_call(torch, d, lambda q, k, v, g, b: flash_qla.chunk_gated_delta_rule(
            q, k, v, g, b, use_qk_l2norm_in_kernel=True, cu_seqlens=cu)[0])
    return build


def flashinfer_impl(torch):
    from flashinfer.gdn_prefill import chunk_gated_delta_rule as fi_chunk

    def build(c, d):
        if c["kind"] != "prefill" or c["Hqk"] > c["Hv"]:
            return None  # decode entry points take raw a / b gating: not wired here
        T = d["q"].shape[1]
        cu = d["cu"] if d.get("cu") is not None else torch.tensor([0, T], dtype=torch.int32, device=DEV)
        alpha = d["g"][0].exp().contiguous()  # FlashInfer takes the linear decay alpha = exp(g)
        beta = d["beta"][0].contiguous()
        q, k, v = d["q"][0], d["k"][0], d["v"][0]

        def call():
            o, ht = fi_chunk(q, k, v, g=alpha, beta=beta, output_final_state=True, cu_seqlens=cu,
                             use_qk_l2norm_in_kernel=True)
            return o.unsqueeze(0), None  # state layout differs: compare o only
        return call
    return build


def self_impl(torch):
    """flashgdn again with the CPU backend's chunked form: a stand-in peer for the --device cpu smoke test."""
    import flashgdn

    inner = flashgdn_impl(torch)

    def build(c, d):
        call = inner(c, d)

        def wrapped():
            with flashgdn.exec_options(cpu_algo="chunked"):
                return call()
        return wrapped
    return build


PEERS = {"fla": fla_impl, "flashqla": flashqla_impl, "flashinfer": flashinfer_impl, "self": self_impl}
PEER_MODULES = {"fla": "fla", "flashqla": "flash_qla", "flashinfer": "flashinfer", "self": "flashgdn"}


def _train_call(torch, d, fwd):
    xs = [d[n].detach().clone().requires_grad_(True) for n in ("q", "k", "v", "g", "beta")]
    do = torch.randn_like(d["v"])

    def call():
        for x in xs:
            x.grad = None
        o = fwd(*xs)
        o.backward(do)
        return (o, xs[0].grad)
    return call


# ---- helpers -----------------------------------------------------------------------------------------------
class _HostEvent:
    """CUDA-event stand-in for --device cpu (a smoke test of the harness itself)."""

    def record(self):
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3


def _tiny(c):
    """The CPU smoke test's version of a case: same kind and structure, small sizes."""
    c = dict(c)
    r = c["Hv"] // c["Hqk"]
    c.update(Hqk=2, Hv=2 * r, K=32, V=32)
    if "N" in c:
        c["N"] = min(c["N"], 4)
    if "lens" in c:
        c["lens"] = [min(x, 70) for x in c["lens"][:3]]
    return c


def _cumsum(xs):
    s = 0
    for x in xs:
        s += x
        yield s


def _rel(x, ref):
    x, ref = x.detach().float(), ref.detach().float()
    n = ref.norm().item()
    d = (x - ref).norm().item()
    return d / n if n > 0 else d


def _status_of(e):
    unsupported = getattr(sys.modules.get("flashgdn"), "UnsupportedError", None)
    return "n/a" if unsupported is not None and isinstance(e, unsupported) else "error"


def _short(e):
    return _short_text(f"{type(e).__name__}: {e}")


def _short_text(s):
    s = " ".join(str(s).split())
    return s if len(s) <= 300 else s[:297] + "..."


def _recover(torch):
    try:
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001
        pass
    torch.cuda.empty_cache()


def _fmt(x, spec="{:.3f}"):
    return "—" if x is None else spec.format(x)


def render_markdown(meta, ceilings, rows):
    L = ["# flashgdn side by side", ""]
    L.append(f"Device: {meta.get('device', '?')}; torch {meta.get('torch', '?')}; flashgdn "
             f"{meta.get('flashgdn', '?')}; run {meta.get('elapsed_s', 0):.0f} s"
             f"{' (--quick)' if meta.get('quick') else ''}.")
    L.append("")
    L.append("Peers: " + ", ".join(f"{k} {v}" for k, v in meta.get("peers", {}).items()))
    L.append("")
    L.append(f"Ceilings measured in this run: device copy {_fmt(ceilings.get('copy_TBps'), '{:.2f}')} TB/s "
             f"(read + write), bf16 GEMM 8192^3 {_fmt(ceilings.get('gemm_bf16_TFLOPs'), '{:.0f}')} TFLOP/s.")
    L.append("")
    L.append("Times are per call: `graph` = CUDA-graph replay rotating over input copies beyond L2 (what a "
             f"serving engine sees): the median of {GRAPH_ROUNDS} rounds that alternate the implementations, each a "
             "fresh capture timed by the median of its replays (the rounds' range in brackets), `eager` = back-to-back eager calls (host overhead included). TB/s and TFLOP/s "
             "use the graph time (eager when no graph) and the compulsory-traffic / FLOP model of gdn-math §9. "
             "`speedup` = peer time / flashgdn time (> 1: flashgdn faster). `err` = relative Frobenius error "
             "against the first implementation that ran (o; state).")
    L.append("")
    L.append("| case | impl | status | graph ms | eager ms | TB/s | % copy | TFLOP/s | % GEMM | speedup | err o; "
             "state | note |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["kind"] in ("overhead", "first_call"):
            continue
        sp = "; ".join(f"{v:.2f}x vs {k}" for k, v in (r.get("speedup") or {}).items())
        err = ""
        if "err_o" in r:
            err = f"{r['err_o']:.1e}" + (f"; {r['err_state']:.1e}" if "err_state" in r else "")
        note = r.get("note", "") or r.get("graph_note", "")
        gms = _fmt(r.get("graph_ms"), "{:.4f}")
        if len(r.get("graph_rounds") or ()) > 1:  # the rounds' range
            gms += f" ({min(r['graph_rounds']):.4f}-{max(r['graph_rounds']):.4f})"
        L.append(f"| {r['case']} | {r['impl']} | {r['status']} | {gms} | "
                 f"{_fmt(r.get('eager_ms'), '{:.4f}')} | {_fmt(r.get('TBps'), '{:.2f}')} | "
                 f"{_fmt(r.get('pct_copy'), '{:.0f}')} | {_fmt(r.get('TFLOPs'), '{:.1f}')} | "
                 f"{_fmt(r.get('pct_gemm'), '{:.0f}')} | {sp} | {err} | {note} |")
    prof = [r for r in rows if r.get("kernels")]
    if prof:
        L.append("")
        L.append("## Kernel split of one eager call (torch.profiler; --kernels)")
        L.append("")
        L.append("`call MB`: memory the call allocates (its outputs, workspace and temporaries: the peak during the "
                 "call less what was allocated before). `kernels ms`: the device time of every kernel of the call.")
        L.append("")
        L.append("| case | impl | call MB | kernels ms | costliest kernels (ms, launches) |")
        L.append("|---|---|---|---|---|")
        for r in prof:
            ks = "; ".join(f"{k['name']} {k['ms']:.4f} ({k['count']}x)" for k in r["kernels"])
            L.append(f"| {r['case']} | {r['impl']} | {_fmt(r.get('call_MB'), '{:.1f}')} | "
                     f"{_fmt(r.get('kernel_ms'), '{:.4f}')} | {ks.replace('|', '/')} |")
    L.append("")
    L.append("## Host overhead per eager decode call (N=1, Hqk=16, Hv=32, K=V=128)")
    L.append("")
    L.append("| impl | status | us per call (wall, loop without sync) | of which reading tensors in C++ | note |")
    L.append("|---|---|---|---|---|")
    for r in rows:
        if r["kind"] == "overhead":
            L.append(f"| {r['impl']} | {r['status']} | {_fmt(r.get('host_us_per_call'), '{:.1f}')} | "
                     f"{_fmt(r.get('tensor_read_us_per_call'), '{:.1f}')} | {r.get('note', '')} |")
    L.append("")
    L.append("## First call in a fresh process")
    L.append("")
    L.append("| what | status | import torch s | import lib s | first call s | note |")
    L.append("|---|---|---|---|---|---|")
    for r in rows:
        if r["kind"] == "first_call":
            L.append(f"| {r['case']} | {r['status']} | {_fmt(r.get('import_torch_s'), '{:.2f}')} | "
                     f"{_fmt(r.get('import_lib_s'), '{:.2f}')} | {_fmt(r.get('first_call_s'), '{:.3f}')} | "
                     f"{r.get('note', '')} |")
    for n in meta.get("notes", []):
        L.append("")
        L.append(f"Note: {n}")
    return "\n".join(L) + "\n"


def render_plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases, impls = [], []
    for r in rows:
        if r["kind"] in ("overhead", "first_call"):
            continue
        if r["case"] not in cases:
            cases.append(r["case"])
        if r["impl"] not in impls:
            impls.append(r["impl"])
    if not cases:
        return
    fig, ax = plt.subplots(figsize=(max(8, 0.9 * len(cases) + 3), 6))
    w = 0.8 / max(1, len(impls))
    for j, impl in enumerate(impls):
        xs, ys = [], []
        for i, c in enumerate(cases):
            r = next((r for r in rows if r["case"] == c and r["impl"] == impl), None)
            t = r and (r.get("graph_ms") or r.get("eager_ms"))
            if t:
                xs.append(i + j * w)
                ys.append(t)
        ax.bar(xs, ys, width=w, label=impl)
    ax.set_yscale("log")
    ax.set_ylabel("ms per call (graph replay; eager where no graph)")
    ax.set_xticks([i + 0.4 - w / 2 for i in range(len(cases))])
    ax.set_xticklabels(cases, rotation=60, ha="right", fontsize=7)
    ax.legend()
    ax.set_title("flashgdn side by side (lower is better)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- main --------------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output directory (results.md, results.json, results.png)")
    ap.add_argument("--quick", action="store_true", help="fewer cases and repetitions (about two minutes)")
    ap.add_argument("--budget", type=float, default=None, help="wall-clock budget in seconds (default 220; 120 "
                    "with --quick); cases past it are reported as skipped")
    ap.add_argument("--peers", default="fla,flashqla,flashinfer", help="comma-separated peers to try (\"self\": "
                    "flashgdn's chunked CPU form, for the --device cpu smoke test)")
    ap.add_argument("--only", default="", help="run only cases whose name contains one of these comma-separated "
                    "substrings (\"overhead\" and \"first\" select the host-overhead and first-call runs)")
    ap.add_argument("--no-graph", action="store_true", help="eager timing only")
    ap.add_argument("--gates", default="logsigmoid", choices=["logsigmoid", "flashqla"],
                    help="g per token: logsigmoid(N(0, 1)) (fast decay), or FlashQLA's own benchmark gates "
                         "(that divided by 16, every fourth value head at g = 0)")
    ap.add_argument("--no-first-call", action="store_true", help="skip the fresh-process first-call runs")
    ap.add_argument("--kernels", type=int, default=0, metavar="N",
                    help="profile one eager call of every case and implementation: the N costliest kernels and the "
                         "memory the call allocates (CUDA only)")
    ap.add_argument("--peers-compiled", action="store_true",
                    help="the peers' kernels are compiled already (their JIT caches warmed by another process): "
                         "start every case whatever budget is left, instead of reserving time for a compile")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: smoke-test the harness on the CPU backend with tiny shapes")
    args = ap.parse_args()
    global DEV
    DEV = args.device
    if args.budget is None:
        args.budget = 120.0 if args.quick else 220.0
    os.makedirs(args.out, exist_ok=True)

    try:
        import torch
    except ImportError:
        _write_stub(args.out, "torch is not installed")
        return 0
    if DEV == "cuda" and not torch.cuda.is_available():
        _write_stub(args.out, "no CUDA device visible")
        return 0
    bench = Bench(args)
    bench.meta["device"] = torch.cuda.get_device_name() if DEV == "cuda" else "cpu (harness smoke test)"
    bench.meta["torch"] = torch.__version__
    impls = []
    try:
        import flashgdn

        bench.meta["flashgdn"] = f"{flashgdn.__version__} (CUDA kernels built: {flashgdn.built_with_cuda()})"
        impls.append(("flashgdn", flashgdn_impl(torch)))
    except Exception as e:  # noqa: BLE001
        bench.meta["flashgdn"] = f"import failed: {_short(e)}"
    for p in [p for p in args.peers.split(",") if p]:
        try:
            impls.append((p, PEERS[p](torch)))
            mod = sys.modules.get(PEER_MODULES[p])
            bench.meta["peers"][p] = getattr(mod, "__version__", "importable")
        except Exception as e:  # noqa: BLE001
            bench.meta["peers"][p] = f"not importable ({_short(e)[:120]})"
    bench.write()

    try:
        bench.measure_ceilings()
    except Exception as e:  # noqa: BLE001
        bench.meta["notes"].append(f"ceilings failed: {_short(e)}")
    bench.write()

    wanted = [w for w in args.only.split(",")] if args.only else [""]
    cases = [c for c in build_cases(args.quick) if any(w in c["name"] for w in wanted)]
    if DEV == "cpu":
        cases = [_tiny(c) for c in cases]
    for c in cases:
        if bench.left() < -60:  # past the budget only flashgdn runs (see run_case); this is the hard stop
            bench.rows.append(dict(case=c["name"], kind=c["kind"], impl="*", status="skipped", note="time budget"))
            continue
        t0 = time.perf_counter()
        try:
            bench.run_case(c, impls)
        except Exception as e:  # noqa: BLE001
            bench.rows.append(dict(case=c["name"], kind=c["kind"], impl="*", status="error", note=_short(e)))
            traceback.print_exc()
            _recover(torch)
        print(f"[{time.perf_counter() - bench.t_start:6.1f} s] {c['name']}: {time.perf_counter() - t0:.1f} s",
              flush=True)
        bench.write()

    if not args.only or "overhead" in args.only:
        bench.host_overhead(impls)
        bench.write()
    if not args.no_first_call and DEV == "cuda" and (not args.only or "first" in args.only):
        names = [n for n, _ in impls]
        if "flashgdn" in names:
            bench.first_call("flashgdn decode")
            bench.first_call("flashgdn prefill")
        if "fla" in names and not args.quick:
            bench.first_call("fla prefill")  # Triton compile + autotune: tens of seconds
        bench.write()
    print(open(os.path.join(args.out, "results.md")).read())
    return 0


def _write_stub(out, why):
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(f"# flashgdn side by side\n\nNot run: {why}.\n")
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"meta": {"not_run": why}, "rows": []}, f)
    print(f"side_by_side: not run: {why}")


if __name__ == "__main__":
    sys.exit(main())
