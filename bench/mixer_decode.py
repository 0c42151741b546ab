#!/usr/bin/env python3
"""Per-layer GDN mixer decode latency: flashgdn's fused mixer_decode (one launch) against the unfused chains an
engine runs today, in the same process on the same inputs (Qwen3-Next: Hqk = 16, Hv = 32, K = V = 128, Kc = 4,
C = 8192, bf16 activations):

  fused     flashgdn.mixer_decode
  flashgdn  torch conv1d update + SiLU, flashgdn.fused_gdn_gating, flashgdn.recurrent_gated_delta_rule_pool
            (l2norm in kernel), torch gated RMSNorm
  fla       torch conv1d update + SiLU, torch gating, FLA fused_recurrent_gated_delta_rule on the gathered states
            (scattered back), torch gated RMSNorm (FLA has no pool op)

Every variant is checked against the fused output first. Timing: CUDA graphs of R calls, each on its own slots
and inputs (R * N * state bytes > 2 x L2, so the states come from HBM), median of 30 replays per call, CUDA events.
Reports us per layer, the fused op's TB/s against the copy bandwidth measured in the run, and its byte floor.

    python3 bench/mixer_decode.py [--out FILE.json] [--ns 1,8,64,256] [--pool fp32,bf16]
"""

import argparse
import json
import statistics

import torch
import torch.nn.functional as F

import flashgdn

HQK, HV, K, V, KC = 16, 32, 128, 128, 4
C = 2 * HQK * K + HV * V
L2 = 60 * 2**20


def copy_tbps():
    a = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    s.record()
    for _ in range(20):
        b.copy_(a)
    e.record()
    e.synchronize()
    return 2 * a.numel() * 20 / (s.elapsed_time(e) * 1e-3) / 1e12


def graph_us(calls, reps=30):
    """Median per-call microseconds of a CUDA graph running every call once."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for c in calls:
            c()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for c in calls:
            c()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(True), torch.cuda.Event(True)
        s.record()
        g.replay()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3 / len(calls))
    return statistics.median(times)


class Layer:
    def __init__(self, N, pool_dtype, R):
        d = dict(device="cuda")
        self.N, self.R = N, R
        self.w = 0.3 * torch.randn(C, KC, dtype=torch.bfloat16, **d)
        self.A_log = torch.empty(HV, **d).uniform_(-1, 1)
        self.dt_bias = 0.5 * torch.randn(HV, **d)
        self.norm_w = torch.empty(V, dtype=torch.bfloat16, **d).uniform_(0.5, 1.5)
        slots = R * N + 1
        self.conv = torch.randn(slots, C, KC - 1, dtype=torch.bfloat16, **d)
        self.pool = (0.1 * torch.randn(slots, HV, K, V, **d)).to(pool_dtype)
        self.x = torch.randn(R, N, 1, C, dtype=torch.bfloat16, **d)
        self.z = torch.randn(R, N, 1, HV, V, dtype=torch.bfloat16, **d)
        self.a = torch.randn(R, N, 1, HV, dtype=torch.bfloat16, **d)
        self.b = torch.randn(R, N, 1, HV, dtype=torch.bfloat16, **d)
        self.idx = [torch.arange(1 + r * N, 1 + (r + 1) * N, dtype=torch.int32, **d) for r in range(R)]
        self.idx64 = [i.long() for i in self.idx]
        self.out = torch.empty(R, N, 1, HV, V, dtype=torch.bfloat16, **d)

    def fused(self, r):
        flashgdn.mixer_decode(self.x[r], self.z[r], self.a[r], self.b[r], conv_weight=self.w, conv_state=self.conv,
                              state_pool=self.pool, A_log=self.A_log, dt_bias=self.dt_bias, norm_weight=self.norm_w,
                              num_k_heads=HQK, head_k_dim=K, state_indices=self.idx[r], null_slot_is_invalid=True,
                              out=self.out[r])

    def conv_torch(self, r):  # what causal_conv1d_update does, in torch
        i = self.idx64[r]
        xs = self.x[r][:, 0]  # [N, C]
        win = torch.cat([self.conv[i], xs[:, :, None]], dim=-1)  # [N, C, KC]
        self.conv[i] = win[:, :, 1:]
        return F.silu((win.float() * self.w.float()).sum(-1)).to(torch.bfloat16)  # [N, C]

    def norm_torch(self, o, r):
        of = o.float()
        of = of * torch.rsqrt(of.pow(2).mean(-1, keepdim=True) + 1e-6)
        self.out[r] = (of * self.norm_w.float() * F.silu(self.z[r].float())).to(torch.bfloat16)

    def split(self, y):
        N = y.shape[0]
        q = y[:, : HQK * K].view(N, 1, HQK, K)
        k = y[:, HQK * K: 2 * HQK * K].view(N, 1, HQK, K)
        v = y[:, 2 * HQK * K:].view(N, 1, HV, V)
        return q, k, v

    def unfused_flashgdn(self, r):
        q, k, v = self.split(self.conv_torch(r))
        g, beta = flashgdn.fused_gdn_gating(self.A_log, self.a[r][:, 0], self.b[r][:, 0], self.dt_bias)
        g, beta = g.view(self.N, 1, HV), beta.view(self.N, 1, HV)
        o = flashgdn.recurrent_gated_delta_rule_pool(q, k, v, g, beta, self.pool, self.idx[r],
                                                     use_qk_l2norm_in_kernel=True, null_slot_is_invalid=True)
        self.norm_torch(o, r)

    def unfused_fla(self, r, fla_rec):
        q, k, v = self.split(self.conv_torch(r))
        g = -self.A_log.exp() * F.softplus(self.a[r].float() + self.dt_bias)
        beta = self.b[r].float().sigmoid()
        # FLA takes contiguous q, k, v with one q/k head per value head
        q, k = q.repeat_interleave(HV // HQK, dim=2), k.repeat_interleave(HV // HQK, dim=2)
        v = v.contiguous()
        i = self.idx64[r]
        h0 = self.pool[i].float()
        o, ht = fla_rec(q, k, v, g, beta, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True)
        self.pool[i] = ht.to(self.pool.dtype)
        self.norm_torch(o, r)


def fla_fused_recurrent():
    try:
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule
        return fused_recurrent_gated_delta_rule
    except Exception as e:  # noqa: BLE001 - any import failure means "not available"
        print(f"fla: not available ({type(e).__name__}: {e})")
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None)
    ap.add_argument("--ns", default="1,8,64,256")
    ap.add_argument("--pool", default="fp32,bf16")
    args = ap.parse_args()
    torch.manual_seed(0)
    bw = copy_tbps()
    fla_rec = fla_fused_recurrent()
    rows = []
    print(f"copy {bw:.2f} TB/s; flashgdn {flashgdn.__version__}")
    print("| N | pool | fused us | TB/s | % copy | floor us | flashgdn unfused us | FLA unfused us | fused vs unfused |")
    print("|---|---|---|---|---|---|---|---|---|")
    for pool_name in args.pool.split(","):
        pdt = {"fp32": torch.float32, "bf16": torch.bfloat16}[pool_name]
        for N in (int(n) for n in args.ns.split(",")):
            sb = HV * K * V * pdt.itemsize
            R = max(1, -(-2 * L2 // (N * sb)))
            lay = Layer(N, pdt, R)
            # agreement first: the unfused chains against the fused op on the same start states
            pool0, conv0 = lay.pool.clone(), lay.conv.clone()
            lay.fused(0)
            ref = lay.out[0].clone()
            errs = {}
            lay.pool.copy_(pool0), lay.conv.copy_(conv0)
            lay.unfused_flashgdn(0)
            errs["flashgdn"] = ((lay.out[0].float() - ref.float()).norm() / ref.float().norm()).item()
            if fla_rec is not None:
                lay.pool.copy_(pool0), lay.conv.copy_(conv0)
                lay.unfused_fla(0, fla_rec)
                errs["fla"] = ((lay.out[0].float() - ref.float()).norm() / ref.float().norm()).item()
            t = {"fused": graph_us([lambda r=r: lay.fused(r) for r in range(R)])}
            t["flashgdn"] = graph_us([lambda r=r: lay.unfused_flashgdn(r) for r in range(R)])
            if fla_rec is not None:
                t["fla"] = graph_us([lambda r=r: lay.unfused_fla(r, fla_rec) for r in range(R)])
            # bytes: the state read + written, the conv window read + written, x, z, a, b in, out
            by = N * (2 * sb + 2 * C * (KC - 1) * 2 + C * 2 + 2 * HV * V * 2 + 2 * HV * 2)
            tbps = by / (t["fused"] * 1e-6) / 1e12
            row = dict(N=N, pool=pool_name, us=t, bytes=by, TBps=tbps, copy_TBps=bw, floor_us=by / (bw * 1e12) * 1e6,
                       rel_err_vs_fused=errs, rotations=R)
            rows.append(row)
            best = min(v for k, v in t.items() if k != "fused")
            print(f"| {N} | {pool_name} | {t['fused']:.2f} | {tbps:.2f} | {100 * tbps / bw:.0f}% | "
                  f"{row['floor_us']:.2f} | {t['flashgdn']:.2f} | {t.get('fla', float('nan')):.2f} | "
                  f"{best / t['fused']:.2f}x |  (errors vs fused: {', '.join(f'{k} {v:.1e}' for k, v in errs.items())})")
            del lay
            torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(copy_TBps=bw, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
