// The plans of the CUDA ops (plan.hpp): plain C++, built in every configuration so the CPU tests cover them.
#include "api/plan.hpp"

#include <algorithm>
#include <cmath>

#include "cuda/chunk_bwd/chunk_bwd.hpp"
#include "cuda/chunk_fwd/chunk_fwd.hpp"

namespace flashgdn {
namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
size_t align_up(size_t x) {
  return (x + 255) & ~size_t(255);
}

const char* state_pass_name(ChunkStatePass s) {
  return s == ChunkStatePass::wgmma ? "wgmma" : "mma.sync";
}

// The split's cost model, shared by both ops. Per segment `walk` CTAs walk its chunks (one CTA per SM) and, but for
// a sequence's last, `sum` summary CTAs run ~`f` of a walking CTA's time per chunk, a fraction `full` of them over
// the whole segment (the rest, cut short by a decay window, cost ~nothing). In chunk-steps of a reference kernel,
// whose step the walking kernel's takes `step` of,
//   cost(P) = step (Ls w + 20 (w - 1) + f Ls waves(full x summary CTAs)) + 0.3 (P - 1) + 3,   Ls = ceil(chunks / P),
// w the waves of walking CTAs (the scan and the extra launches, 0.3 (P - 1) + 3, do not scale with the step); the
// cheapest P of 1..64 wins. A second wave of walking CTAs costs ~20 chunk-steps
// beyond its chunks (~0.1 ms on the H200 prefill at every shape, bench/results: the segment sweep). Unsplit when
// the unsplit CTAs (N walk) fill the SMs or the sequences are short (< 16 chunks). `what`: the unsplit CTAs' count
// as a formula, `unit`: what they are.
int64_t cheapest_segments(int64_t N, int64_t avg, int64_t walk, int64_t sum, double f, double full, double step,
                          int32_t sms, const char* what, const char* unit, std::string* why, int per_sm = 1) {
  const int64_t base = N * walk;
  const char* at = per_sm > 1 ? " SMs at two CTAs per SM" : " SMs";
  const int32_t real_sms = sms;
  sms *= per_sm;  // CTA slots
  if (base >= sms) {
    *why = detail::str_cat(what, " = ", base, " CTAs fill the ", real_sms, at, ": no split");
    return 1;
  }
  if (avg < 16) {
    *why = detail::str_cat("sequences of ~", avg, " chunks (< 16): no split");
    return 1;
  }
  double best = 1e30;
  int64_t P = 1;
  for (int cand = 1; cand <= 64; ++cand) {
    const int64_t ls = ceil_div(avg, cand), nseg = ceil_div(avg, ls);
    const int64_t waves = ceil_div(N * nseg * walk, sms);
    double cost = step * (double(ls) * double(waves) + 20.0 * double(waves - 1));
    if (nseg > 1) {
      const auto full_ctas = int64_t(std::ceil(full * double(N * (nseg - 1) * sum)));
      cost += step * double(ls) * f * double(ceil_div(full_ctas, sms)) + 0.3 * double(nseg - 1) + 3.0;
    }
    if (cost < best - 1e-9) best = cost, P = nseg;
  }
  *why = detail::str_cat("cost model: ", base, " ", unit, " on ", real_sms, at, ", ~", avg, " chunks each: P = ", P,
                         " (", best, " chunk-steps)", P == 1 ? ": no split" : "");
  return P;
}

// The segment count of the automatic split: a state-pass CTA (one per SM) walks the chunks of one (work item, value
// head) with all V / 64 value tiles; the summary mode has (K + V) / 64 tiles, so ceil((K + V) / V) CTAs per (item,
// head), each ~0.8 of a forward CTA's time per chunk (no q, no P U). A summary runs its whole segment only where the
// gates do not decay (its decay window, docs/chunk_fwd.md, covers the rest in a chunk or two). The gates are device
// data that a plan never reads, so the model assumes half of the summaries run full length. Fitted to the H200
// sweep under two gate distributions (bench/results, `flashgdn bench --gates G --chunk-segments P`): the chosen P is
// the fastest at T = 32K H = 16 and Hqk = 16 / Hv = 32 under both logsigmoid gates and FlashQLA's (a quarter of the
// heads at g = 0); at T = 128K H = 32 under FlashQLA's gates it is 10% behind P = 8; where no head decays it can be
// up to ~10% behind the best (P = 3 at Hv = 32, which prices every summary at full length).
int64_t auto_segments(const ChunkDims& d, int64_t avg, int32_t sms, std::string* why) {
  const int64_t vt = d.V / kChunkFwdTile, kt = d.K / kChunkFwdTile;
  return cheapest_segments(d.N, avg, d.Hv, d.Hv * ceil_div(kt + vt, vt), 0.8, 0.5, 1.0, sms, "N Hv",
                           "(sequence, head) chains", why);
}

// What the chunk kernels of both directions take: chunk size 64, 16-bit q, k, v, K and V of 64 or 128, and a
// segment override (exec.<op>_segments) of 0, 1 or P > 1.
Status check_chunk_call(const char* op, int64_t chunk_size, DType dt, const SeqDims& d, int32_t segments) {
  if (chunk_size != kChunkFwdChunk)
    return FGDN_ERROR(unsupported, op, ": chunk_size: the CUDA kernels use 64, got ", chunk_size);
  if (dt != DType::bf16 && dt != DType::f16)
    return FGDN_ERROR(unsupported, op, ": q: the CUDA kernels take bf16 or f16 q, k, v, got ", dtype_name(dt));
  if ((d.K != 64 && d.K != 128) || (d.V != 64 && d.V != 128))
    return FGDN_ERROR(unsupported, op, ": K and V must be 64 or 128 on CUDA, got K=", d.K, " V=", d.V);
  if (segments < 0)
    return FGDN_INVALID(op, ": exec.", op, "_segments: expected 0 (auto), 1 (off) or P > 1, got ", segments);
  return Status::OK();
}

// The split of a plan (ChunkFwdPlan, ChunkBwdPlan), shared by both ops: `forced` is exec.<op>_segments (0 auto, 1
// off, P > 1), `avg` the chunks of a typical sequence, `autop()` the automatic choice. A split has segments of
// seg_chunks = ceil(avg / P) chunks and `cap`, an upper bound of the work items over all sequences (the device
// builds the list, chunk_split.cuh).
template <class Plan, class Auto>
void plan_segments(Plan* pl, int32_t forced, const char* option, const SeqDims& d, int64_t avg, int64_t nch_total,
                   Auto autop) {
  pl->forced = forced > 0;
  int64_t P = forced;
  if (forced == 1) {
    pl->why = detail::str_cat(option, " = 1: no split");
  } else if (d.N == 0 || avg < 2) {
    P = 1;
    pl->why = "one chunk per sequence: no split";
  } else if (forced > 1) {
    pl->why = detail::str_cat(option, " = ", forced);
  } else {
    P = autop();
  }
  if (P <= 1) return;
  pl->split = true;
  pl->seg_chunks = ceil_div(avg, P);
  pl->segments = ceil_div(avg, pl->seg_chunks);
  if (d.varlen) {
    // sum_n max(1, ceil(nch_n / Ls)) <= N + (sum_n nch_n) / Ls and sum_n nch_n <= ceil(T / C) + min(N, T).
    pl->cap = d.N + (nch_total + std::min(d.N, d.T)) / pl->seg_chunks;
  } else {
    pl->cap = d.N * std::max<int64_t>(1, ceil_div(nch_total, pl->seg_chunks));
  }
}

}  // namespace

Status plan_chunk_fwd(const ChunkFwdParams& p, const ChunkDims& d, const DeviceFacts& dev, ChunkFwdPlan* out) {
  FGDN_RETURN_IF_ERROR(check_chunk_call("chunk_fwd", p.chunk_size, p.q.dtype, d, p.exec.chunk_fwd_segments));
  ChunkFwdPlan pl;
  pl.sms = std::max(dev.sms, 1);
  pl.state_pass = d.K == 128 && d.V == 128 ? ChunkStatePass::wgmma : ChunkStatePass::mma_sync;
  const int64_t nch_total = ceil_div(d.T, kChunkFwdChunk);  // per batch entry (fixed) or over all sequences (varlen)
  pl.rec_slots = d.varlen ? d.N + nch_total : d.B * nch_total;
  const int64_t N = std::max<int64_t>(d.N, 1);
  const int64_t avg = d.varlen ? ceil_div(nch_total, N) : nch_total;  // chunks of a typical sequence

  plan_segments(&pl, p.exec.chunk_fwd_segments, "exec.chunk_fwd_segments", d, avg, nch_total,
                [&] { return auto_segments(d, avg, pl.sms, &pl.why); });

  size_t off = align_up(size_t(pl.rec_slots) * size_t(d.Hv) * size_t(cuda::kRecBytes));
  pl.ws_rec = 0;
  pl.workspace_bytes = off;
  if (pl.split) {
    pl.ws_items = off;
    pl.ws_seq_first = pl.ws_items + align_up(size_t(pl.cap) * sizeof(cuda::ChunkWorkItem));
    pl.ws_dec = pl.ws_seq_first + align_up(size_t(d.N) * sizeof(int32_t));
    pl.ws_mn = pl.ws_dec + align_up(size_t(d.Hv) * size_t(pl.rec_slots) * sizeof(float));
    pl.workspace_bytes = pl.ws_mn + size_t(pl.cap) * size_t(d.Hv) * size_t(d.K) * size_t(d.K + d.V) * sizeof(float);
  }
  *out = std::move(pl);
  return Status::OK();
}

namespace {
// chunk_fwd's plan in words; for_bwd: the passes of chunk_bwd's states_from_fwd, whose intra pass writes chunk_bwd's
// A and rows records too
std::string describe_fwd(const ChunkFwdPlan& pl, const ChunkDims& d, bool for_bwd) {
  using detail::str_cat;
  const int64_t vt = d.V / kChunkFwdTile, kt = d.K / kChunkFwdTile;
  std::string s = str_cat("chunk_fwd on CUDA, ", pl.sms, " SMs: N = ", d.N, " sequences, T = ", d.T, ", Hqk = ", d.Hqk,
                          ", Hv = ", d.Hv, ", K = ", d.K, ", V = ", d.V, d.varlen ? " (varlen)" : "", "\n");
  s += str_cat("  intra-chunk pass: ", pl.rec_slots * d.Hqk, " CTAs (chunk slot, q/k head), each its GQA group of ",
               d.Hv / d.Hqk, " value heads; one record of ", cuda::kRecBytes, " bytes per (chunk slot, value head)",
               for_bwd ? ", and chunk_bwd's A (its bf16 split) and rows" : "", "\n");
  const char* pass = state_pass_name(pl.state_pass);
  const char* pass_why = pl.state_pass == ChunkStatePass::wgmma ? "K = V = 128" : "K or V = 64";
  if (!pl.split) {
    s += str_cat("  state pass: ", pass, " (", pass_why, "), grid (", d.N, ", ", d.Hv,
                 ", 1), every chunk of a sequence\n");
  } else {
    s += str_cat("  segment split: ", pl.segments, " segments of ", pl.seg_chunks, " chunks per sequence, ", pl.cap,
                 " work items\n");
    s += str_cat("  state pass (", pass, ", ", pass_why, ") summaries: grid (", pl.cap, ", ", d.Hv, ", ",
                 ceil_div(kt + vt, vt), "); a segment whose last chunks decay by e^", cuda::kDecayWindowLogTau,
                 " (unit keys, beta in [0, 2]) runs only those, without M\n");
    s += str_cat("  scan of start states: grid (", d.N, ", ", d.Hv, ", ", d.V / 16, ")\n");
    s += str_cat("  state pass forward from the start states: grid (", pl.cap, ", ", d.Hv, ", 1)\n");
  }
  s += str_cat("  split: ", pl.why, "\n");
  s += str_cat("  workspace: ", pl.workspace_bytes, " bytes");
  if (pl.split)
    s += str_cat(" (records ", pl.ws_items, ", items and sequence table ", pl.ws_dec - pl.ws_items, ", decay table ",
                 pl.ws_mn - pl.ws_dec, ", summaries ", pl.workspace_bytes - pl.ws_mn, ")");
  s += "\n";
  return s;
}
}  // namespace

std::string describe(const ChunkFwdPlan& pl, const ChunkDims& d) {
  return describe_fwd(pl, d, false);
}

// ---- chunk_bwd ------------------------------------------------------------------------------------------------
namespace {

// The chain kernels' time per chunk step, in steps of the mma.sync state kernel (2.8 us on the H200 at T = 32K,
// Hv = 32: 1.44 ms / 512 steps), all measured by ncu at that shape: the mma.sync dstate kernel's 3.85 us
// (1.97 ms / 512), the wgmma state kernel's 2.02 us (1.03 ms / 512) and the wgmma dstate kernel's 2.70 us
// (1.38 ms / 512).
constexpr double kStepStateMma = 1.0, kStepStateWg = 0.72, kStepDstateMma = 1.37, kStepDstateWg = 0.96;

// Both chains at once (ChunkBwdPlan::chains_concurrent, K = V = 128): the one-stage wgmma state and dstate chains
// (106 and 111 KiB) run in one launch per phase, so an SM runs a state step beside a dstate step: a CTA per chain,
// two per SM, or one CTA of both (a warpgroup each) where the unsplit chains fit one wave (every SM then holds one
// step of each; as two CTAs an SM may get two of one chain. Where the grid runs in waves, or the split's summaries
// leave the dstate warpgroup idle, a CTA per chain lets the next one take the slot a chain frees).
// kStepShared: the step of such a pair against the slower chain's step alone, measured
// (ncu, T = 32K, Hv = 32): 2.27 ms / 512 = 4.44 us against the dstate kernel's 2.70 us alone. The two CTAs of an SM
// mostly take turns (their steps are bound by the SM's shared-memory and L2 traffic more than by latency), so both
// chains at once take 2.27 ms against 1.03 + 1.38 one after the other: 6 % of the chains, and the default.
constexpr double kStepShared = 1.65;
constexpr bool kChainsConcurrentByDefault = true;
// Pass 4 on wgmma wherever it can run (K = V = 128, bf16): docs/chunk_bwd.md "Pass 4 on wgmma".
constexpr bool kGradsWgByDefault = true;
// Chunk slots per CTA walk of the fused gradients pass (cuda::bwd_detail::kFusedMaxWalk at most): its CTAs walk
// independently from pass 3's records, so the walk length trades the reverse chain's steps against the CTAs' count.
constexpr int32_t kChunkBwdFusedWalk = 16;
// The fused pass's pairs (exec.chunk_bwd_grads 3, the default): a GQA group of 2 value heads per q/k head. Groups
// of 4 (as clusters) measured 7% slower than pass 5a's sum at varlen 4 x 8K Hv = 64 (rank 0 reads three partial sums
// per exchange, and a cluster waits for four free SMs at once).
constexpr int64_t kChunkBwdFusedCluster = 2;
constexpr bool kFusedGradsByDefault = true;
// The chunk start states from chunk_fwd's state pass (ChunkBwdPlan::states_from_fwd) where it can take them and the
// unsplit chains do not fit one wave (N Hv V / 32 > SMs: a CTA per chain, in waves); where they fit, one CTA of both
// chains hides the state chain's steps beside the reverse chain's, and the forward's passes measured +10 .. +12%
// under FlashQLA's gates (-3 .. -5% under U(-1, 0)), +10% with the fused pass following the reverse chain alone; past
// one wave -9% under both (docs/chunk_bwd.md "Chunk start states from the forward's state pass").
constexpr bool kStatesFromFwdByDefault = true;

// The segment count of the backward's chains. A chain CTA (the mma.sync state kernel's 8 warps and 152 KiB, the wgmma
// one's warpgroup and 140 KiB, the mma.sync dstate kernel's 206 KiB, the wgmma one's 190 KiB with two stages: one per
// SM) walks the chunks of one (item, value
// head, 32 state columns); its summaries are priced at (K + V) / 32 column CTAs per (item, head), each at 0.9 of a
// walking CTA per chunk (no stores), in cheapest_segments' model with
// the two chains' mean step (both chains take the same P, and their grids are alike). At one CTA per SM a split pays
// only where the unsplit CTAs leave SMs idle: N Hv V / 32 >= SMs is never split. Concurrent chains: one grid of both
// chains' CTAs at two per SM (2 SMs slots), each phase as long as the slower chain's step at kStepShared, and the
// summaries priced as they run now: a summary walks its whole segment only where its head does not decay (its decay
// window covers the rest in a chunk or a few, docs/chunk_bwd.md "Segment split of the chains"), so a quarter of them
// (FlashQLA's benchmark gates hold a quarter of the heads at g = 0), each at half a walking step (the reverse chain's
// summaries run only their V / 32 columns, and a windowed summary's M CTAs walk nothing). Fitted to the H200 sweep
// (bench/results/2026-12-06-h200-session49.md, `--chunk-bwd-segments P` at T = 32K, U(-1, 0) and FlashQLA's gates):
// P = 8 / 8 / 4 / 1 at Hv = 4 / 8 / 16 / 32, the fastest measured over both gate sets (Hv = 4: P = 4 ties under
// U(-1, 0) and is 24% slower under FlashQLA's gates; Hv = 32: P = 2 is 3% faster under U(-1, 0) and 13% slower under
// FlashQLA's); the whole-segment pricing chose P = 8 / 3 / 2 / 1, 16-22% (Hv = 8) and 13% (Hv = 16) slower.
int64_t auto_bwd_segments(const SeqDims& d, int64_t avg, int32_t sms, const ChunkBwdPlan& pl, std::string* why) {
  const int64_t cols = d.V / kChunkBwdChainCols, sum_cols = (d.K + d.V) / kChunkBwdChainCols;
  const double s_state = pl.state_pass == ChunkStatePass::wgmma ? kStepStateWg : kStepStateMma;
  const double s_dstate = pl.dstate_pass == ChunkStatePass::wgmma ? kStepDstateWg : kStepDstateMma;
  if (pl.chains_concurrent)
    return cheapest_segments(d.N, avg, 2 * d.Hv * cols, 2 * d.Hv * sum_cols, 0.5, 0.25,
                             kStepShared * std::max(s_state, s_dstate), sms, "2 N Hv V / 32",
                             "chain CTAs of both chains", why, 2);
  return cheapest_segments(d.N, avg, d.Hv * cols, d.Hv * sum_cols, 0.9, 1.0, 0.5 * (s_state + s_dstate), sms,
                           "N Hv V / 32", "chain CTAs", why);
}

}  // namespace

Status plan_chunk_bwd(const ChunkBwdParams& p, const SeqDims& d, const DeviceFacts& dev, ChunkBwdPlan* out) {
  FGDN_RETURN_IF_ERROR(check_chunk_call("chunk_bwd", p.chunk_size, p.q.dtype, d, p.exec.chunk_bwd_segments));
  ChunkBwdPlan pl;
  pl.sms = std::max(dev.sms, 1);
  pl.state_pass = d.K == 128 && d.V == 128 ? ChunkStatePass::wgmma : ChunkStatePass::mma_sync;
  pl.dstate_pass = pl.state_pass;  // both chains on wgmma at K = V = 128
  const int32_t chains = p.exec.chunk_bwd_chains;
  if (chains < 0 || chains > 3)
    return FGDN_INVALID(
        "chunk_bwd: exec.chunk_bwd_chains: expected 0 (auto), 1 (one after the other), 2 (at once, a CTA per chain) "
        "or 3 (at once, one CTA of both), got ",
        chains);
  const bool wg = pl.state_pass == ChunkStatePass::wgmma;
  if (chains >= 2 && !wg)
    return FGDN_ERROR(unsupported, "chunk_bwd: exec.chunk_bwd_chains = ", chains,
                      ": both chains at once need K = V = 128, got K=", d.K, " V=", d.V);
  // the form is settled below, once the split is
  pl.chains_concurrent =
      chains >= 2 || (chains == 0 && wg && kChainsConcurrentByDefault) ? cuda::kChainsTwoCtas : cuda::kChainsSerial;
  pl.state_stages = pl.dstate_stages = pl.chains_concurrent ? 1 : 2;
  const int32_t grads = p.exec.chunk_bwd_grads;
  if (grads < 0 || grads > 4)
    return FGDN_INVALID(
        "chunk_bwd: exec.chunk_bwd_grads: expected 0 (auto), 1 (mma.sync), 2 (wgmma), 3 (fused with the reverse "
        "chain) or 4 (fused, the value heads' dq / dk summed by pass 5a), got ",
        grads);
  const bool grads_wg_ok = wg && p.q.dtype == DType::bf16;
  if (grads >= 2 && !grads_wg_ok)
    return FGDN_ERROR(unsupported, "chunk_bwd: exec.chunk_bwd_grads = ", grads,
                      ": this gradients pass needs K = V = 128 and bf16 inputs, got K=", d.K, " V=", d.V, " ",
                      dtype_name(p.q.dtype));
  // The fused pass by default where it runs, but for allow_neg_eigval: with beta up to 2 the chunk transition has an
  // eigenvalue near -1 along nearly parallel keys, where its single bf16 operands leave the bounds and the wgmma
  // pass's splits do not (docs/chunk_bwd.md "Fused gradients pass").
  const bool fused = grads >= 3 || (grads == 0 && grads_wg_ok && !p.gate.allow_neg_eigval && kFusedGradsByDefault);
  pl.fused_walk = fused ? kChunkBwdFusedWalk : 0;
  // With two value heads per q/k head their CTAs pair up and rank 0 sums their dq, dk: no pass 5a,
  // whose scratch round trip costs more than the exchange in the pass (docs/chunk_bwd.md "Fused gradients pass")
  const int64_t group = d.Hv / std::max<int64_t>(d.Hqk, 1);
  pl.fused_cluster = fused && grads != 4 && group == kChunkBwdFusedCluster ? int32_t(group) : 0;
  const int32_t window = p.exec.chunk_bwd_window;
  if (window < 0 || window > 1)
    return FGDN_INVALID("chunk_bwd: exec.chunk_bwd_window: expected 0 (auto) or 1 (off), got ", window);
  pl.decay_window = fused && window == 0 && pl.dstate_pass == ChunkStatePass::wgmma;
  pl.grads_pass = !fused && (grads == 2 || (grads == 0 && grads_wg_ok && kGradsWgByDefault)) ? ChunkStatePass::wgmma
                                                                                             : ChunkStatePass::mma_sync;
  const int64_t nch_total = ceil_div(d.T, kChunkFwdChunk);
  const int64_t avg = d.varlen ? ceil_div(nch_total, std::max<int64_t>(d.N, 1)) : nch_total;
  plan_segments(&pl, p.exec.chunk_bwd_segments, "exec.chunk_bwd_segments", d, avg, nch_total,
                [&] { return auto_bwd_segments(d, avg, pl.sms, pl, &pl.why); });
  // one CTA of both chains where the unsplit chains fit one wave (above kStepShared)
  const bool one_wave = d.N * d.Hv * (d.V / kChunkBwdChainCols) <= pl.sms;
  if (chains == 3 || (chains == 0 && pl.chains_concurrent && !pl.split && one_wave))
    pl.chains_concurrent = cuda::kChainsOneCta;
  const int32_t state = p.exec.chunk_bwd_state;
  if (state < 0 || state > 2)
    return FGDN_INVALID(
        "chunk_bwd: exec.chunk_bwd_state: expected 0 (auto), 1 (the backward's state chain) or 2 (chunk_fwd's state "
        "pass), got ",
        state);
  // chunk_fwd's state pass stores S0 where the fused pass reads it; the reverse chain's split would need the state
  // chain's summaries (their M, transposed), so only unsplit chains; they run one after the other
  const bool from_fwd_ok = fused && !pl.split && chains < 2;
  if (state == 2 && !from_fwd_ok)
    return FGDN_ERROR(
        unsupported,
        "chunk_bwd: exec.chunk_bwd_state = 2: the chunk start states from chunk_fwd's state pass need the "
        "fused gradients pass (K = V = 128, bf16, no allow_neg_eigval), the chains unsplit and not "
        "forced at once, got K=",
        d.K, " V=", d.V, " ", dtype_name(p.q.dtype), fused ? ", fused" : ", not fused", pl.split ? ", split" : "",
        chains >= 2 ? ", exec.chunk_bwd_chains >= 2" : "");
  pl.states_from_fwd = state == 2 || (state == 0 && from_fwd_ok && !one_wave && kStatesFromFwdByDefault);
  if (pl.states_from_fwd) {
    FGDN_RETURN_IF_ERROR(plan_chunk_fwd(fwd_params_of(p), ChunkDims{d}, dev, &pl.fwd));
    pl.chains_concurrent = cuda::kChainsSerial;
    // the reverse chain in its one-stage form, two CTAs per SM: past one wave its steps are latency-bound, and the
    // second CTA's step covers the first's (pass 2 only runs where a beta exceeds 1)
    pl.state_stages = 2;
    pl.dstate_stages = 1;
  }
  // The fused pass as a programmatic dependent of one CTA of both chains, or of the reverse chain alone on wgmma (with
  // the start states from chunk_fwd's passes): it starts on the SMs whose chain CTAs have ended, on the value heads
  // whose chains are complete (docs/chunk_bwd.md "The fused pass after the chains")
  pl.fused_follows = fused && (pl.chains_concurrent == cuda::kChainsOneCta ||
                               (pl.states_from_fwd && pl.dstate_pass == ChunkStatePass::wgmma));
  if (pl.split) {
    pl.ws_items = 0;
    pl.ws_seq_first = align_up(size_t(pl.cap) * sizeof(cuda::ChunkWorkItem));
    pl.ws_mn = pl.ws_seq_first + align_up(size_t(d.N) * sizeof(int32_t));
    // one [M | N] buffer per chain when they run at once; else the reverse chain reuses the forward one's
    const size_t mn = size_t(pl.cap) * size_t(d.Hv) * size_t(d.K) * size_t(d.K + d.V) * sizeof(float);
    pl.ws_mn_rev = pl.chains_concurrent ? pl.ws_mn + align_up(mn) : pl.ws_mn;
    pl.split_bytes = pl.ws_mn_rev + mn;
  }
  *out = std::move(pl);
  return Status::OK();
}

ChunkFwdParams fwd_params_of(const ChunkBwdParams& p) {
  ChunkFwdParams f;
#define FGDN_COPY_TENSOR(name, role, dtypes, layout, doc) f.name = p.name;
#define FGDN_COPY_SCALAR(type, c_type, name, init, doc) f.name = p.name;
  FLASHGDN_SEQ_INPUT_TENSORS(FGDN_COPY_TENSOR)
  FLASHGDN_SEQ_SCALARS(FGDN_COPY_SCALAR)
#undef FGDN_COPY_TENSOR
#undef FGDN_COPY_SCALAR
  f.chunk_size = p.chunk_size;
  f.exec = p.exec;
  return f;
}

std::string describe(const ChunkBwdPlan& pl, const SeqDims& d) {
  using detail::str_cat;
  const int64_t cols = d.V / kChunkBwdChainCols, sum_cols = (d.K + d.V) / kChunkBwdChainCols;
  const int64_t slots = d.varlen ? d.N + ceil_div(d.T, kChunkFwdChunk) : d.B * ceil_div(d.T, kChunkFwdChunk);
  std::string s = str_cat("chunk_bwd on CUDA, ", pl.sms, " SMs: N = ", d.N, " sequences, T = ", d.T, ", Hqk = ", d.Hqk,
                          ", Hv = ", d.Hv, ", K = ", d.K, ", V = ", d.V, d.varlen ? " (varlen)" : "", "\n");
  s += str_cat("  prep pass: grid (", slots, ", ", d.Hv, "), one record per (chunk slot, value head); grads pass: ");
  if (pl.fused_walk > 0)
    s += str_cat("fused with the reverse chain, grid (", ceil_div(slots, pl.fused_walk), ", ", d.Hv,
                 "), 256 threads per CTA, each a walk of ", pl.fused_walk,
                 " chunk slots of a value head in reverse (dS carried; pass 3's record where a walk or sequence "
                 "ends)",
                 pl.fused_cluster > 0
                     ? str_cat("; the CTAs of the ", pl.fused_cluster,
                               " value heads of a q/k head in pairs, the later started summing their dq, dk from the "
                               "others' rows (flags; no dq / dk pass), each CTA taking the next ticket as it starts")
                     : "",
                 pl.fused_follows
                     ? "; launched as a programmatic dependent of the chains (both, or the reverse one alone), the "
                       "first CTAs to run taking the walks of the value heads whose chain CTAs ended first"
                     : "",
                 "\n");
  else if (pl.grads_pass == ChunkStatePass::wgmma)
    s += str_cat(
        "wgmma, grid (", slots, ", ", d.Hqk, "), 256 threads per CTA, each the ", d.Hv / std::max<int64_t>(d.Hqk, 1),
        " value head(s) of its q/k head in order (dq, dk summed and their l2norm chain there: no dq / dk pass)\n");
  else
    s += str_cat("mma.sync, ", std::min<int64_t>(slots * d.Hv, pl.sms), " persistent CTAs over the ", slots * d.Hv,
                 " records\n");
  const bool wg = pl.state_pass == ChunkStatePass::wgmma, dwg = pl.dstate_pass == ChunkStatePass::wgmma;
  const bool one_cta = pl.chains_concurrent == cuda::kChainsOneCta;
  const auto stages = [&](int32_t n) {
    return n == 2    ? ", 2 input stages (one CTA per SM)"
           : one_cta ? ", 1 input stage (a warpgroup of a CTA of both chains)"
                     : ", 1 input stage (two CTAs per SM)";
  };
  const char* per = one_cta ? " threads" : " threads per CTA";
  s += str_cat("  state pass: ", state_pass_name(pl.state_pass), wg ? " (K = V = 128), 128" : " (K or V = 64), 256",
               per, wg ? stages(pl.state_stages) : "", "; dstate pass: ", state_pass_name(pl.dstate_pass),
               dwg ? " (K = V = 128), 128" : " (K or V = 64), 256", per, dwg ? stages(pl.dstate_stages) : "", "\n");
  s += str_cat("  chains: ",
               one_cta                ? "both at once (one launch per phase, each CTA a dstate and a state warpgroup)"
               : pl.chains_concurrent ? "both at once (one launch per phase, a state and a dstate CTA per SM)"
                                      : "one after the other",
               "\n");
  if (!pl.split) {
    s += str_cat("  state and dstate chains: grid (", d.N, ", ", d.Hv, ", ", cols, "), every chunk of a sequence\n");
  } else {
    s += str_cat("  segment split: ", pl.segments, " segments of ", pl.seg_chunks, " chunks per sequence, ", pl.cap,
                 " work items\n");
    s += str_cat("  summaries: state chain grid (", pl.cap, ", ", d.Hv, ", ", sum_cols, "), dstate chain grid (",
                 pl.cap, ", ", d.Hv, ", ", cols, ") (its M is the state chain's, transposed)\n");
    s += str_cat("  per chain (state forward, dstate reverse): scan grid (", d.N, ", ", d.Hv, ", ", d.V / 16,
                 "), segments from their boundary states grid (", pl.cap, ", ", d.Hv, ", ", cols, ")\n");
  }
  if (pl.decay_window)
    s += str_cat(
        "  dstate chain: each gradient the fused pass reads (a walk's end) and dh0 from the chunks of its "
        "decay window only (e^",
        cuda::kDecayWindowLogTau, ", unit keys, beta in [0, 2]), where the gates allow",
        pl.split ? ", and each summary of either chain over its own window" : "", "; the table by pass 0, grid (",
        slots, ", ", ceil_div(d.Hv, 8),
        "), a warp per (chunk slot, value head); prep forms dU0 for the chunks walked\n");
  if (pl.states_from_fwd) {
    std::string f = describe_fwd(pl.fwd, ChunkDims{d}, true);
    for (size_t at = 0; (at = f.find('\n', at)) != std::string::npos && at + 1 < f.size(); at += 3)
      f.replace(at, 1, "\n  ");
    s += str_cat(
        "  chunk start states (S0): chunk_fwd's passes, the state pass storing S0 instead of o, the intra pass "
        "writing the A and rows records (prep forms only W, dU0 where a chain reads them, and its CTAs elsewhere "
        "return at once); the state chain runs only where a beta exceeds 1. ",
        f);
  }
  s += str_cat("  split: ", pl.why, "\n");
  s += str_cat("  workspace: the records and scratch (chunk_bwd_workspace_size)");
  if (pl.split)
    s += str_cat(" + ", pl.split_bytes, " bytes of the split (items and sequence table ", pl.ws_mn, ", summaries ",
                 pl.split_bytes - pl.ws_mn, ")");
  s += "\n";
  return s;
}

// ---- recurrent ------------------------------------------------------------------------------------------------
namespace {

// The facts of a recurrent call the plan reads.
struct RecShape {
  bool pool = false, pool16 = false, kmajor = true, varlen = false, inter = false, verify = false;
  bool store16 = false;  // per-token 16-bit state stores: 16-bit intermediate states, or protocol A on a 16-bit pool
  int64_t T_max = 0, heads = 0;  // heads: N Hv (sequence, value head) pairs
};

RecShape rec_shape(const RecurrentParams& p, const RecurrentDims& d) {
  RecShape r;
  r.pool = p.state_pool.defined();
  r.pool16 = r.pool && p.state_pool.dtype != DType::f32;
  r.kmajor = p.state_layout == StateLayout::k_major;
  r.varlen = d.varlen || p.cu_seqlens.defined();
  r.inter = p.intermediate_states.defined();
  r.T_max = p.state_indices.defined() && p.state_indices.ndim == 2 ? p.state_indices.shape[1] : 0;
  r.verify = r.inter || (p.commit && r.T_max > 0);
  r.store16 = (r.inter && p.intermediate_states.dtype != DType::f32) || (p.commit && r.T_max > 0 && r.pool16);
  r.heads = d.N * d.Hv;
  return r;
}

// The persistent kernel's tile width: wide tiles amortize the per-tile staging, lookups and barriers over more
// state; narrow ones spread a small batch (N = 1: 32 heads) over more SMs. 32 columns once that gives two tiles
// per SM. The wy kernel uses the same rule (K = 64 always takes 32: 16 columns would spill there), except for
// per-token 16-bit state stores on a batch that fills every SM with a wave of its 3 CTAs of 64 columns (N >= 7 at
// Hv = 32, V = 128, 132 SMs): a 64-column tile writes each 256-byte key row of a state in two whole 128-byte lines,
// a 32-column one in 64-byte halves of lines that another CTA completes, and the staging, index loads and T are
// shared by twice the columns (H200, verify T=12 N=256 with bf16 states: 1.29 ms against 1.52 on 32 columns;
// docs/recurrent.md, Next steps 2).
int32_t persistent_bv(const RecurrentDims& d, const RecShape& r, int32_t sms) {
  return d.V % 32 == 0 && r.heads * (d.V / 32) >= 2 * int64_t(sms) ? 32 : 16;
}
int32_t wy_bv(const RecurrentDims& d, const RecShape& r, int32_t sms) {
  if (d.K == 64) return 32;
  if (r.store16 && d.V % 64 == 0 && r.heads * (d.V / 64) >= 3 * int64_t(sms)) return 64;
  return persistent_bv(d, r, sms);
}

// The direct kernel's tile width (one CTA per tile, no persistence). Single-token, large batches (>= 2 waves of 4
// CTAs per SM): 128 columns on a K-major 16-bit pool (the packed state, 4 CTAs/SM x 32 KB in flight), else 64 (twice
// the state bytes in flight per CTA); then 32 once that gives >= 4 CTAs per SM; 16 spreads a small batch over more
// SMs. (The 128- and 64-column tiles exist for one token only: T is the total token count.)
int32_t direct_bv(const RecurrentDims& d, const RecShape& r, int32_t sms) {
  const bool one = d.T <= 1;
  if (one && r.pool16 && r.kmajor && d.V % 128 == 0 && r.heads * (d.V / 128) >= 8 * int64_t(sms)) return 128;
  if (one && d.V % 64 == 0 && r.heads * (d.V / 64) >= 8 * int64_t(sms)) return 64;
  if (d.V % 32 == 0 && r.heads * (d.V / 32) >= 4 * int64_t(sms)) return 32;
  return 16;
}

// direct_pipe: 16-bit pools, 128-column tiles (256-byte rows; fp32 pools measured slower than the direct kernel
// and have no direct_pipe instantiation).
constexpr int32_t kPipeBv = 128;
bool pipe_supported(const RecurrentDims& d, const RecShape& r) {
  return r.pool16 && r.kmajor && !r.varlen && d.T == 1 && r.T_max == 0 && !r.inter && d.V % kPipeBv == 0;
}

// wy_mma: the WY form on the tensor cores (one CTA per 64 state columns), final state only: a K-major pool, 16-bit q,
// k (bf16 operands: exact, or f16 split into two) and v, no per-token states (intermediate_states, or the per-token
// commit of 2-D state_indices).
constexpr int32_t kWyMmaBv = 64;
bool is16(DType t) {
  return t == DType::bf16 || t == DType::f16;
}
bool wy_mma_supported(const RecurrentParams& p, const RecShape& r) {
  return r.pool && r.kmajor && !r.verify && is16(p.q.dtype) && is16(p.k.dtype) && p.q.dtype == p.k.dtype &&
         is16(p.v.dtype);
}

}  // namespace

// Indexed by RecurrentKernel.
constexpr const char* kRecurrentKernelNames[] = {"auto", "persistent", "direct", "direct_pipe", "wy", "wy_mma"};
static_assert(sizeof(kRecurrentKernelNames) / sizeof(kRecurrentKernelNames[0]) == size_t(RecurrentKernel::wy_mma) + 1,
              "one name per RecurrentKernel");

const char* recurrent_kernel_name(RecurrentKernel k) {
  const auto i = static_cast<uint32_t>(k);
  return i < sizeof(kRecurrentKernelNames) / sizeof(kRecurrentKernelNames[0]) ? kRecurrentKernelNames[i] : "unknown";
}

bool recurrent_kernel_from_name(const char* name, RecurrentKernel* k) {
  for (int32_t i = 0; name && k && i <= int32_t(RecurrentKernel::wy_mma); ++i)
    if (std::string(name) == recurrent_kernel_name(RecurrentKernel(i))) {
      *k = RecurrentKernel(i);
      return true;
    }
  return false;
}

Status plan_recurrent(const RecurrentParams& p, const RecurrentDims& d, const DeviceFacts& dev, RecurrentPlan* out) {
  if (d.K != 64 && d.K != 128) return FGDN_ERROR(unsupported, "recurrent: K = ", d.K, " on CUDA; expected 64 or 128");
  if (d.V != 64 && d.V != 128) return FGDN_ERROR(unsupported, "recurrent: V = ", d.V, " on CUDA; expected 64 or 128");
  const RecurrentKernel force = p.exec.recurrent_kernel;
  if (int32_t(force) < 0 || int32_t(force) > int32_t(RecurrentKernel::wy_mma))
    return FGDN_INVALID("recurrent: exec.recurrent_kernel: expected 0 (auto) .. 5 (wy_mma), got ", int32_t(force));
  RecurrentPlan pl;
  pl.sms = std::max(dev.sms, 1);
  const RecShape r = rec_shape(p, d);
  pl.single_token = r.varlen ? d.T <= d.N : d.T <= 1;
  using detail::str_cat;
  if (force != RecurrentKernel::auto_) {
    pl.forced = true;
    pl.kernel = force;
    pl.why = str_cat("exec.recurrent_kernel = ", recurrent_kernel_name(force));
    if (force == RecurrentKernel::direct_pipe && !pipe_supported(d, r))
      return FGDN_ERROR(
          unsupported, "recurrent: exec.recurrent_kernel: direct_pipe takes fixed-length T = 1 on a K-major bf16 or ",
          "f16 state_pool with 1-D (or absent) state_indices, no intermediate_states and V = 128; got T = ", d.T,
          r.varlen ? " (varlen)" : "",
          !r.pool    ? ", no pool"
          : r.pool16 ? ""
                     : ", an f32 pool",
          r.kmajor ? "" : ", V-major", r.T_max > 0 ? ", 2-D state_indices" : "", r.inter ? ", intermediate_states" : "",
          ", V = ", d.V);
    if (force == RecurrentKernel::wy && !(r.pool && r.kmajor))
      return FGDN_ERROR(unsupported, "recurrent: exec.recurrent_kernel: wy takes K-major states in a state_pool; got ",
                        r.pool ? "a V-major pool" : "no pool (initial_state / final_state)");
    if (force == RecurrentKernel::wy_mma && !wy_mma_supported(p, r))
      return FGDN_ERROR(unsupported,
                        "recurrent: exec.recurrent_kernel: wy_mma takes a K-major state_pool, 16-bit q, k and v, no "
                        "intermediate_states and no per-token commit (2-D state_indices with commit); got ",
                        !r.pool    ? "no pool"
                        : r.kmajor ? "a K-major pool"
                                   : "a V-major pool",
                        ", q ", dtype_name(p.q.dtype), ", v ", dtype_name(p.v.dtype),
                        r.inter ? ", intermediate_states" : "",
                        r.T_max > 0 && p.commit ? ", 2-D state_indices with commit" : "");
  } else if (pl.single_token) {
    // One token per row: the direct kernel (every load in flight) is fastest, except large batches on a K-major
    // 16-bit pool (>= 8 tiles of 128 columns per SM), where direct_pipe streams the tiles through shared memory
    // (H200, bf16 N = 256: 158 vs 165 us; fp32 pools measured slower there and stay direct).
    const bool pipe = pipe_supported(d, r) && r.heads * (d.V / kPipeBv) >= 8 * int64_t(pl.sms);
    pl.kernel = pipe ? RecurrentKernel::direct_pipe : RecurrentKernel::direct;
    pl.why = pipe ? "one token per row, a large batch on a K-major 16-bit pool" : "one token per row";
  } else {
    // Multi-token rows: the wy kernel (chunked WY form) on K-major pools, every batch size and a verify's
    // per-token state stores included (H200, verify T = 12 N = 1: wy 14.2 vs persistent 15.8 us); the persistent
    // kernel for V-major or pool-less rows.
    if (wy_mma_supported(p, r)) {
      pl.kernel = RecurrentKernel::wy_mma;
      pl.why = "multi-token rows on a K-major pool, final state only, 16-bit activations";
    } else if (r.pool && r.kmajor) {
      pl.kernel = RecurrentKernel::wy;
      pl.why = "multi-token rows on a K-major pool";
    } else {
      pl.kernel = RecurrentKernel::persistent;
      pl.why = !r.pool ? "multi-token rows without a pool" : "multi-token rows on a V-major pool";
    }
  }
  switch (pl.kernel) {
    case RecurrentKernel::persistent:
      pl.bv = persistent_bv(d, r, pl.sms);
      break;
    case RecurrentKernel::wy:
      pl.bv = wy_bv(d, r, pl.sms);
      if (pl.bv == 64) pl.why += "; 64-column tiles: the per-token 16-bit state stores write whole 128-byte lines";
      break;
    case RecurrentKernel::direct_pipe:
      pl.bv = kPipeBv;
      break;
    case RecurrentKernel::wy_mma:
      pl.bv = kWyMmaBv;
      break;
    default:
      pl.bv = direct_bv(d, r, pl.sms);
      break;
  }
  *out = std::move(pl);
  return Status::OK();
}

std::string describe(const RecurrentPlan& pl, const RecurrentDims& d) {
  using detail::str_cat;
  std::string s =
      str_cat("recurrent on CUDA, ", pl.sms, " SMs: N = ", d.N, " rows, T = ", d.T, d.varlen ? " (varlen)" : "",
              ", Hqk = ", d.Hqk, ", Hv = ", d.Hv, ", K = ", d.K, ", V = ", d.V, "\n");
  s += str_cat("  kernel: ", recurrent_kernel_name(pl.kernel), ", ", pl.bv, " state columns per tile, ",
               d.N * d.Hv * (d.V / pl.bv), " tiles");
  if (pl.kernel == RecurrentKernel::direct_pipe)
    s += str_cat(" (", kPipeStages, "-stage ring, ", kPipeThreads, " threads per CTA)");
  s += str_cat("\n  why: ", pl.why, "\n  workspace: 0 bytes\n");
  return s;
}

// ---- mixer_decode ---------------------------------------------------------------------------------------------
// The V split: the state of a (row, value head) over `split` CTAs of 128 / split columns, all in one cluster with
// the key head's other value heads, so group * split <= 8. CTA shapes (docs/mixer_decode.md): a quarter head holds
// 32 state values a thread (80 registers, 6 CTAs of 128 threads per SM: 96 KB of fp32 state per SM), a half 64
// (128 registers, 4 CTAs: 128 KB), the whole head one 256-thread CTA per SM (64 KB). Large batches (>= 2 waves of
// 4 half-head CTAs per SM) are memory-bound: halves, for the most state bytes in flight per SM and half the
// q/k conv and l2norm that every CTA recomputes. Smaller ones are latency-bound: one CTA per head, which skips the
// per-token cluster exchange (H200, Hqk = 16, Hv = 32, fp32 pool: N = 1 10.3 us against 12.0 / 11.9 for halves /
// quarters, N = 8 23.2 against 28.4 / 28.8, N = 16 43.0 against 44.6 / 45.4; N = 32 and up halves win). Quarters
// never win; they stay for exec.mixer_split.
//
// The pipe kernel takes single-token rows on a K-major pool once there is a (row, value head) state for every SM
// (N Hv >= SMs): there the clustered kernel keeps no state bytes in flight while it computes and recomputes the q / k
// conv per CTA. Measured (H100, Hqk = 16, Hv = 32, graph replay; clustered -> pipe): bf16 pool N = 8 18.2 -> 14.0 us,
// N = 32 68.1 -> 37.1 us, N = 64 125 -> 65 us, N = 256 0.465 -> 0.233 ms; fp32 pool N = 8 24.7 -> 18.5 us, N = 64 147
// -> 120 us, N = 256 0.528 -> 0.459 ms. Below one state per SM the clustered kernel wins or levels: bf16 pool N = 1,
// 2, 4 8.1 / 8.7 / 10.0 against 10.6 / 10.9 / 12.0 us, fp32 pool 9.4 / 10.3 / 13.5 against 10.6 / 11.5 / 13.3 us.
namespace {
// What the pipe kernel needs that a call lacks (null when it can take the call): a constant, so that planning a
// call formats no text unless the pipe is forced onto a call it cannot take.
const char* mixer_pipe_misfit(const MixerDecodeParams& p, const MixerDims& d) {
  if (d.varlen || d.T != 1) return "one token per row (fixed T = 1, no cu_seqlens)";
  if (p.state_pool.dtype != DType::bf16 && p.state_pool.dtype != DType::f32) return "a bf16 or fp32 state pool";
  if (p.state_layout != StateLayout::k_major) return "a K-major state pool";
  if (p.state_indices.defined() && p.state_indices.ndim != 1) return "1-D state_indices";
  if (p.intermediate_states.defined() || p.intermediate_conv_windows.defined()) return "no intermediate states";
  if (d.Kc > 4) return "Kc <= 4";
  return nullptr;
}
}  // namespace

Status plan_mixer_decode(const MixerDecodeParams& p, const MixerDims& d, const DeviceFacts& dev, MixerDecodePlan* out) {
  const int64_t group = d.Hqk > 0 ? d.Hv / d.Hqk : 1;
  const int32_t kern = p.exec.mixer_kernel;
  if (kern < 0 || kern > 2)
    return FGDN_INVALID("mixer_decode: exec.mixer_kernel: expected 0 (auto), 1 (clustered) or 2 (pipe), got ", kern);
  const char* misfit = mixer_pipe_misfit(p, d);
  if (kern == 2 && misfit)
    return FGDN_ERROR(unsupported, "mixer_decode: exec.mixer_kernel = 2: the pipe kernel needs ", misfit, " (T = ", d.T,
                      ", Kc = ", d.Kc, ")");
  if (kern == 2 && p.exec.mixer_split != 0)
    return FGDN_INVALID("mixer_decode: exec.mixer_split applies to the clustered kernel, not exec.mixer_kernel = 2");
  const int32_t s = p.exec.mixer_split;
  if (s != 0 && s != 1 && s != 2 && s != 4)
    return FGDN_INVALID("mixer_decode: exec.mixer_split: expected 0 (auto), 1, 2 or 4, got ", s);
  if (s > 0 && group * s > kMixerMaxCluster)
    return FGDN_ERROR(unsupported, "mixer_decode: exec.mixer_split: expected (Hv / Hqk) * split <= ", kMixerMaxCluster,
                      " (one thread block cluster), got Hv / Hqk = ", group, ", split = ", s);
  MixerDecodePlan pl;
  pl.sms = std::max(dev.sms, 1);
  const int64_t tiles = d.N * d.Hv;  // (row, value head) states of 128 columns
  using Why = MixerDecodePlan::Why;
  if (kern == 2 || (kern == 0 && s == 0 && !misfit && tiles >= int64_t(pl.sms))) {
    pl.pipe = true, pl.forced = kern == 2;
    pl.why = pl.forced ? Why::pipe_forced : Why::pipe_batch;
  } else if (s > 0) {
    pl.forced = true, pl.split = s, pl.why = Why::split_forced;
  } else {
    pl.forced = kern == 1;
    const bool fits = group * 2 <= kMixerMaxCluster;
    pl.split = fits && d.N * d.Hv * 2 >= 2 * 4 * int64_t(pl.sms) ? 2 : 1;
    pl.why = !fits ? Why::cluster : pl.split == 2 ? Why::halves : Why::latency;
  }
  *out = pl;
  return Status::OK();
}

namespace {
std::string mixer_why(const MixerDecodePlan& pl, const MixerDims& d) {
  using detail::str_cat;
  using Why = MixerDecodePlan::Why;
  const int64_t group = d.Hqk > 0 ? d.Hv / d.Hqk : 1, halves = d.N * d.Hv * 2;
  switch (pl.why) {
    case Why::pipe_forced:
      return "exec.mixer_kernel = 2";
    case Why::pipe_batch:
      return str_cat("N Hv = ", d.N * d.Hv, " states >= one per SM, one token per row on a K-major pool: the pipe ",
                     "kernel");
    case Why::split_forced:
      return str_cat("exec.mixer_split = ", pl.split);
    case Why::halves:
      return str_cat("N Hv 2 = ", halves, " half-head CTAs >= 2 waves of 4 per SM: memory-bound, halves");
    case Why::latency:
      return str_cat("N Hv 2 = ", halves, " half-head CTAs < 2 waves of 4 per SM: latency-bound, one CTA per head");
    case Why::cluster:
      return str_cat("(Hv / Hqk) * 2 = ", group * 2, " CTAs would exceed a cluster of ", kMixerMaxCluster,
                     ": one CTA per head");
  }
  return "";
}
}  // namespace

std::string describe(const MixerDecodePlan& pl, const MixerDims& d) {
  using detail::str_cat;
  const int64_t group = d.Hqk > 0 ? d.Hv / d.Hqk : 1;
  const int threads = pl.split == 1 ? 256 : 128;
  std::string s = str_cat("mixer_decode on CUDA, ", pl.sms, " SMs: N = ", d.N, " rows, T = ", d.T, ", Hqk = ", d.Hqk,
                          ", Hv = ", d.Hv, ", K = ", d.K, ", V = ", d.V, ", Kc = ", d.Kc, "\n");
  if (pl.pipe) {
    s += str_cat("  pipe kernel: persistent CTAs of ", kMixerPipeThreads, " threads, each a key head's rows (its ",
                 group, " value heads in turn), ", kMixerPipeStages,
                 "-stage ring of 128 x 128 states (bf16: 2 CTAs per SM, fp32: 1)\n");
    s += str_cat("  why: ", mixer_why(pl, d), "\n");
    return s;
  }
  s += str_cat("  fused kernel: grid (", d.Hv * pl.split, ", ", d.N, "), ", threads, " threads, clusters of ",
               group * pl.split, " CTAs (", group, " value heads x ", pl.split, ")\n");
  s += str_cat("  V split: ", pl.split, " CTAs per (row, value head), ", d.V / pl.split, " state columns each (",
               mixer_why(pl, d), ")\n");
  return s;
}

}  // namespace flashgdn
