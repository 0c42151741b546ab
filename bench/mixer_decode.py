#!/usr/bin/env python3
"""Per-layer GDN mixer decode latency: flashgdn's fused mixer_decode (one launch) against the unfused chains an
engine runs today, in the same process on the same inputs (Qwen3-Next: Hqk = 16, Hv = 32, K = V = 128, Kc = 4,
C = 8192, bf16 activations, conv state pool [slots, C, Kc - 1], K-major state pool [slots, Hv, K, V]):

  fused     flashgdn.mixer_decode
  flashgdn  torch conv1d update + SiLU, flashgdn.fused_gdn_gating, flashgdn.recurrent_gated_delta_rule_pool
            (l2norm in kernel), torch gated RMSNorm
  fla       FLA's kernels as an engine chains them: causal_conv1d_update (SiLU) on the gathered conv windows,
            fused_recurrent_gated_delta_rule (gating, l2norm and sigmoid(b) in kernel, as SGLang's
            fused_sigmoid_gating_delta_rule_update) on the gathered states, rms_norm_gated; the windows and states
            are scattered back (FLA has no pool op)

Check first, on every row: each chain runs one step on rotation 0 from the same start states, with its output
poisoned (NaN), and is compared with a float64 torch reference of the step (docs/mixer_decode.md, Semantics: conv,
SiLU, split, gates, l2norm, Dk^-1/2, GQA h // r, decay-retrieve-update-read, gated RMSNorm; y and o rounded to
bf16 as the engines do): relative Frobenius error of out, of the new states and of the new conv windows of the
step's slots, and the null slot 0 bit-unchanged. A chain over a tolerance is marked MISMATCH in its row.
Timing: CUDA graphs of R calls, each on its own slots and inputs (R * N * state bytes > 2 x L2, so the states come
from HBM), median of 30 replays per call, CUDA events. Reports us per layer, the fused op's TB/s against the copy
bandwidth measured in the run, and its byte floor.

    python3 bench/mixer_decode.py [--out FILE.json] [--ns 1,8,64,256] [--pool fp32,bf16] [--check-only]
                                  [--splits 1,2,4]   # also the fused op with exec.mixer_split forced (fused_sS)
    python3 bench/mixer_decode.py --device cpu   # the check alone on the CPU backend (fused, flashgdn chains)
"""

import argparse
import json
import statistics

import torch
import torch.nn.functional as F

import flashgdn
from graph_timing import capture, replay_ms

HQK, HV, K, V, KC = 16, 32, 128, 128, 4
C = 2 * HQK * K + HV * V
L2 = 60 * 2**20
EPS = 1e-6
# Relative Frobenius tolerances of the check: out in bf16 (1.6e-2, as the mixer tests); a state after one step to
# the rounding of fp32 math and of beta (the flashgdn chain's fused_gdn_gating returns beta in b's dtype, as vLLM's:
# ~5e-4) or of bf16 storage; the conv window is a copy of the raw x (exact). The harness bugs this catches (beta
# passed positionally as FLA's gk, a transposed state, h mod Hqk for the GQA map) are at 0.3-1.3.
TOL_OUT = 1.6e-2
TOL_STATE = {torch.float32: 3e-3, torch.bfloat16: 1e-2}
TOL_CONV = 0.0


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
    g = capture(torch, calls)
    g.replay()
    torch.cuda.synchronize()
    return statistics.median(t * 1e3 / len(calls) for t in replay_ms(torch, g, reps))


class Fla:
    """FLA's decode kernels (None where FLA is not importable)."""

    def __init__(self):
        from fla.modules.causal_conv1d import causal_conv1d_update
        from fla.modules.norm.fused_norm_gate import rms_norm_gated
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule
        self.conv_update, self.recurrent, self.norm = causal_conv1d_update, fused_recurrent_gated_delta_rule, \
            rms_norm_gated


def load_fla(device):
    if device != "cuda":
        print("fla: not run (its Triton kernels need CUDA)")
        return None
    try:
        return Fla()
    except Exception as e:  # noqa: BLE001 - any import failure means "not available"
        print(f"fla: not available ({type(e).__name__}: {e})")
        return None


class Layer:
    def __init__(self, N, pool_dtype, R, device):
        d = dict(device=device)
        self.N, self.R = N, R
        self.w = 0.3 * torch.randn(C, KC, dtype=torch.bfloat16, **d)
        self.A_log = torch.empty(HV, **d).uniform_(-1, 1)
        self.dt_bias = 0.5 * torch.randn(HV, **d)
        self.norm_w = torch.empty(V, dtype=torch.bfloat16, **d).uniform_(0.5, 1.5)
        slots = R * N + 1  # slot 0 is the null slot (never named by idx)
        self.conv = torch.randn(slots, C, KC - 1, dtype=torch.bfloat16, **d)  # [slots, C, Kc - 1], oldest first
        self.pool = (0.1 * torch.randn(slots, HV, K, V, **d)).to(pool_dtype)  # [slots, HV, K, V]
        self.x = torch.randn(R, N, 1, C, dtype=torch.bfloat16, **d)
        self.z = torch.randn(R, N, 1, HV, V, dtype=torch.bfloat16, **d)
        self.a = torch.randn(R, N, 1, HV, dtype=torch.bfloat16, **d)
        self.b = torch.randn(R, N, 1, HV, dtype=torch.bfloat16, **d)
        self.idx = [torch.arange(1 + r * N, 1 + (r + 1) * N, dtype=torch.int32, **d) for r in range(R)]
        self.idx64 = [i.long() for i in self.idx]
        self.out = torch.empty(R, N, 1, HV, V, dtype=torch.bfloat16, **d)
        # FLA's causal_conv1d_update keeps the window transformers' way, [N, C, Kc] with column 0 unread
        self.fla_window = torch.zeros(N, C, KC, dtype=torch.bfloat16, **d)

    def fused(self, r, split=0):
        with flashgdn.exec_options(mixer_split=split):
            self.fused_call(r)

    def fused_call(self, r):
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
        of = of * torch.rsqrt(of.pow(2).mean(-1, keepdim=True) + EPS)
        self.out[r] = (of * self.norm_w.float() * F.silu(self.z[r].float())).to(torch.bfloat16)

    def split(self, y):  # [q | k | v], head-major inside each block
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

    def unfused_fla(self, r, fla):
        i = self.idx64[r]
        # conv: columns 1..Kc-1 of FLA's window are the slot's Kc - 1 previous inputs; the kernel shifts in x and
        # returns silu(conv) [N, C] and the window (the one passed, made contiguous)
        self.fla_window[:, :, 1:] = self.conv[i]
        y, win = fla.conv_update(x=self.x[r][:, 0], cache=self.fla_window, weight=self.w, bias=None,
                                 activation="silu")
        self.conv[i] = win[:, :, 1:]
        q, k, v = self.split(y)
        # recurrence: q, k [N, 1, Hqk, K] (value head h reads key head h // (HV // Hqk) in the kernel),
        # v [N, 1, HV, V]; g = raw a and beta = raw b, gated in kernel (-exp(A_log) softplus(a + dt_bias),
        # sigmoid(b)); scale K^-1/2 by default; states [N, HV, K, V] (state_v_first=False), any dtype in, fp32 out.
        # Every tensor argument by keyword: FLA's positional order is q, k, v, g, gk, gv, beta.
        o, ht = fla.recurrent(q=q, k=k, v=v, g=self.a[r], beta=self.b[r], initial_state=self.pool[i],
                              output_final_state=True, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                              A_log=self.A_log, dt_bias=self.dt_bias, use_beta_sigmoid_in_kernel=True,
                              state_v_first=False)
        self.pool[i] = ht.to(self.pool.dtype)
        # norm before gate, per (token, value head) over V: o rsqrt(mean o^2 + eps) w silu(z), fp32, one rounding
        self.out[r] = fla.norm(x=o, g=self.z[r], weight=self.norm_w, bias=None, activation="silu", eps=EPS)

    def reference(self, r, conv0, pool0):
        """One step of rotation r from the slot contents conv0 [N, C, Kc - 1], pool0 [N, HV, K, V], in float64
        with the engines' rounding points: y and o in bf16, the state in the pool's dtype.
        Returns (out [N, 1, HV, V] bf16, the new states [N, HV, K, V], the new conv windows [N, C, Kc - 1])."""
        f8, bf = torch.float64, torch.bfloat16
        N = self.N
        win = torch.cat([conv0.to(f8), self.x[r][:, 0, :, None].to(f8)], dim=-1)  # [N, C, Kc], oldest first
        y = F.silu((win * self.w.to(f8)).sum(-1)).to(bf).to(f8)  # taps W[c, 0] oldest .. W[c, Kc-1] current
        q = y[:, : HQK * K].view(N, HQK, K)
        k = y[:, HQK * K: 2 * HQK * K].view(N, HQK, K)
        v = y[:, 2 * HQK * K:].view(N, HV, V)
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + EPS) * K**-0.5  # l2norm (eps on the sum), then scale
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + EPS)
        q, k = q.repeat_interleave(HV // HQK, dim=1), k.repeat_interleave(HV // HQK, dim=1)  # head h -> h // r
        u = self.a[r][:, 0].to(f8) + self.dt_bias.to(f8)
        g = -self.A_log.to(f8).exp() * torch.where(u > 20, u, torch.log1p(torch.exp(u)))  # [N, HV]
        beta = torch.sigmoid(self.b[r][:, 0].to(f8))
        S = pool0.to(f8) * torch.exp(g)[:, :, None, None]  # decay first
        e = torch.einsum("nhkv,nhk->nhv", S, k)  # retrieve with the decayed state
        S = S + k[:, :, :, None] * (beta[:, :, None] * (v - e))[:, :, None, :]
        o = torch.einsum("nhkv,nhk->nhv", S, q).to(bf).to(f8)  # read with the updated state
        o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + EPS)
        out = o * self.norm_w.to(f8) * F.silu(self.z[r][:, 0].to(f8))
        return out.to(bf).view(N, 1, HV, V), S.to(self.pool.dtype), win[:, :, 1:].to(self.conv.dtype)


def rel(x, ref):
    x, ref = x.double(), ref.double()
    den = ref.norm().item()
    return (x - ref).norm().item() / (den if den > 0 else 1.0)


def check(lay, chains):
    """Every chain, one step on rotation 0 from the same start states, against the float64 reference.
    Returns {chain: dict(out=, state=, conv=, untouched=, ok=)} (or dict(error=, ok=False))."""
    i = lay.idx64[0]
    conv0, pool0 = lay.conv[i], lay.pool[i]  # (advanced indexing copies)
    others = [0] + ([1 + lay.N] if lay.R > 1 else [])  # slot 0 (null) and the first slot of rotation 1
    conv_o, pool_o = lay.conv[others], lay.pool[others]
    ref_out, ref_state, ref_conv = lay.reference(0, conv0, pool0)
    tol_state = TOL_STATE[lay.pool.dtype]
    res = {}
    for name, fn in chains.items():
        lay.conv[i], lay.pool[i] = conv0, pool0
        lay.out[0].fill_(float("nan"))
        try:
            fn(0)
            if lay.out.is_cuda:
                torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - a chain that cannot run is reported, the others still run
            res[name] = dict(error=f"{type(e).__name__}: {e}", ok=False)
            continue
        m = dict(out=rel(lay.out[0], ref_out), state=rel(lay.pool[i], ref_state), conv=rel(lay.conv[i], ref_conv),
                 untouched=bool(torch.equal(lay.conv[others], conv_o) and torch.equal(lay.pool[others], pool_o)))
        # a NaN error compares False, so it fails
        m["ok"] = m["untouched"] and m["out"] <= TOL_OUT and m["state"] <= tol_state and m["conv"] <= TOL_CONV
        res[name] = m
    lay.conv[i], lay.pool[i] = conv0, pool0
    return res


def check_text(res):
    parts = []
    for name, m in res.items():
        if "error" in m and "out" not in m:
            parts.append(f"{name} ERROR ({m['error'][:120]})")
        else:
            parts.append(f"{name} {'ok' if m['ok'] else 'MISMATCH'} out {m['out']:.1e} state {m['state']:.1e} "
                         f"conv {m['conv']:.0e}{'' if m['untouched'] else ' other slots written'}"
                         f"{' ERROR (' + m['error'][:120] + ')' if 'error' in m else ''}")
    return "; ".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None)
    ap.add_argument("--ns", default=None, help="batch sizes (default 1,8,64,256 on cuda, 1,8 on cpu)")
    ap.add_argument("--pool", default="fp32,bf16")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--check-only", action="store_true", help="the check alone, no timing (always so on cpu)")
    ap.add_argument("--splits", default="", help="exec.mixer_split values (1, 2, 4) to run besides the plan's choice")
    args = ap.parse_args()
    splits = [int(v) for v in args.splits.split(",") if v]
    dev = args.device
    timing = dev == "cuda" and not args.check_only
    ns = [int(n) for n in (args.ns or ("1,8,64,256" if dev == "cuda" else "1,8")).split(",")]
    torch.manual_seed(0)
    bw = copy_tbps() if timing else float("nan")
    fla = load_fla(dev)
    rows = []
    print(f"copy {bw:.2f} TB/s; flashgdn {flashgdn.__version__}; device {dev}; check tolerances: out {TOL_OUT}, "
          f"state {TOL_STATE[torch.float32]} (fp32) / {TOL_STATE[torch.bfloat16]} (bf16), conv {TOL_CONV}")
    print("| N | pool | fused us | TB/s | % copy | floor us | flashgdn unfused us | FLA unfused us | fused vs unfused "
          "| check vs the float64 reference |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for pool_name in args.pool.split(","):
        pdt = {"fp32": torch.float32, "bf16": torch.bfloat16}[pool_name]
        for N in ns:
            sb = HV * K * V * pdt.itemsize
            R = max(1, -(-2 * L2 // (N * sb))) if timing else 1
            lay = Layer(N, pdt, R, dev)
            chains = {"fused": lay.fused, "flashgdn": lay.unfused_flashgdn}
            for sp in splits:
                chains[f"fused_s{sp}"] = lambda r, lay=lay, sp=sp: lay.fused(r, sp)
            if fla is not None:
                chains["fla"] = lambda r, lay=lay: lay.unfused_fla(r, fla)
            res = check(lay, chains)
            t = {}
            if timing:  # a chain that raised is not timed (its error is in the row)
                for name, fn in chains.items():
                    if "error" in res[name]:
                        continue
                    try:
                        t[name] = graph_us([lambda r=r, fn=fn: fn(r) for r in range(R)])
                    except Exception as e:  # noqa: BLE001 - reported in the row (a CUDA fault ends the run after it)
                        res[name].update(error=f"timing: {type(e).__name__}: {e}", ok=False)
            # bytes: the state read + written, the conv window read + written, x, z, a, b in, out
            by = N * (2 * sb + 2 * C * (KC - 1) * 2 + C * 2 + 2 * HV * V * 2 + 2 * HV * 2)
            nan = float("nan")
            tf = t.get("fused", nan)
            tbps = by / (tf * 1e-6) / 1e12
            row = dict(N=N, pool=pool_name, us=t, bytes=by, TBps=tbps, copy_TBps=bw, floor_us=by / (bw * 1e12) * 1e6,
                       check=res, rotations=R)
            rows.append(row)
            best = min((v for k, v in t.items() if not k.startswith("fused")), default=nan)
            print(f"| {N} | {pool_name} | {tf:.2f} | {tbps:.2f} | {100 * tbps / bw:.0f}% | {row['floor_us']:.2f} | "
                  f"{t.get('flashgdn', nan):.2f} | {t.get('fla', nan):.2f} | {best / tf:.2f}x | {check_text(res)} |")
            for sp in splits if timing else []:
                ts = t.get(f"fused_s{sp}", nan)
                print(f"|   | split {sp} | {ts:.2f} | {by / (ts * 1e-6) / 1e12:.2f} | | | | | {best / ts:.2f}x | |")
            del lay
            if dev == "cuda":
                torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(copy_TBps=bw, device=dev, rows=rows), f, indent=1)
    bad = [f"N={r['N']} {r['pool']} {k}" for r in rows for k, m in r["check"].items() if not m["ok"]]
    if bad:
        print("check failed: " + ", ".join(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
