// Internal interface of the CUDA chunked prefill (src/cuda/chunk_fwd/). Plain C++: the GPU tests include it.
//
// The kernel launchers take one POD argument block (ChunkKernelArgs) so that the host dispatcher
// (chunk_fwd.cu) and the per-dtype kernel instantiations (chunk_fwd_{intra,state,state_wg}_{bf16,f16}.cu) share it.
#pragma once

#include <cstdint>
#include <limits>

#if defined(__CUDACC__)
#define FLASHGDN_HOST_DEVICE __host__ __device__
#else
#define FLASHGDN_HOST_DEVICE
#endif

namespace flashgdn::cuda {

// One record per (chunk slot, value head), written by the intra-chunk pass and read by the state pass (26 KB):
//   float hdr[256]   [0, 64) ek_r = rho_k,r e^{gamma_r}; [64, 128) eq_r = scale rho_q,r e^{gamma_r};
//                    [128, 192) dk_s = rho_k,s e^{gamma_n - gamma_s}; [192] en = e^{gamma_n}; [193], [194] the
//                    largest beta of rows 0-31, 32-63
//                    (rho: the l2-norm factors of the q and k rows, 1 without l2norm; gamma_n at row 63)
//   uint4 a[10][2][32]   A diag(beta) as 16-bit m16n8k16 A fragments, hi ([0]) and lo ([1]) parts, one uint4 per
//                        lane, of the ten causal 16x16 blocks (i, j), i >= j, block index i (i + 1) / 2 + j
//   uint4 p[10][2][32]   P = scale diag(rho_q) (QK^T (.) D) diag(rho_k) (diagonal included), the same way (not
//                        written where the state pass stores S0 instead of o: chunk_bwd's start states)
//   uint4 r[10][32]      A diag(beta) - hi - lo rounded to 16 bits (its rest, the third part), the same way; written
//                        and read only where the chunk's largest beta exceeds 1 (docs/chunk_fwd.md "Numerics")
// The state passes copy the first kRecCopyBytes (header, A, P) and read the rest from global memory where needed.
inline constexpr int64_t kRecHdrBytes = 1024;
inline constexpr int64_t kRecBlockBytes = 1024;
inline constexpr int64_t kRecABytes = 10 * kRecBlockBytes;
inline constexpr int64_t kRecCopyBytes = kRecHdrBytes + 2 * kRecABytes;
inline constexpr int64_t kRecRestBlockBytes = 512;
inline constexpr int64_t kRecBytes = kRecCopyBytes + 10 * kRecRestBlockBytes;

// ---- the decay window of a segment summary (gdn-math §6.1; docs/chunk_fwd.md "Decay window") ----------------
// Segment j covers chunks [a, b). For any chunk c in [a, b], S(b) = Phi(c -> b) S(c) + N(c -> b), with N(c -> b)
// the state after chunks [c, b) from a zero state. With unit keys (in-kernel l2norm) and beta in [0, 2] every
// transition e^g (I - beta k k^T) has spectral norm <= e^g, so ||Phi(c -> b) S(c)||_F <= e^Gamma ||S(c)||_F, Gamma the
// sum of g over [c, b). Where e^Gamma <= tau the summary is [0 | N(c -> b)]: what it drops is at most
// tau ||S(c)||_F, 2^-6 of the fp32 rounding (2^-24) of S(c) itself. tau = e^-21 (2^-30.3): the margin to 2^-30 covers
// the fp32 rounding of the gate sums.
inline constexpr float kDecayWindowLogTau = -21.f;
// The per-chunk entry of the decay table for a chunk whose transitions are not known to be contractive (a beta
// outside [0, 2], or keys without the in-kernel l2norm): no window reaches past it.
inline constexpr float kDecayUnbounded = std::numeric_limits<float>::infinity();

// The walk of a decay window: d[first], d[first + step], ... (count entries, d[n] the log decay gamma_n of chunk n,
// kDecayUnbounded where unknown) summed in that order in fp32 until the sum is <= log_tau: that entry's index; -1 when
// the sum never gets there or an unbounded (or NaN) entry comes first. Eight loads at a time, so that they are in
// flight together on the device.
FLASHGDN_HOST_DEVICE inline int64_t decay_window_walk(const float* d, int64_t first, int64_t count, int step,
                                                      float log_tau) {
  constexpr int R = 8;
  float s = 0.f;
  for (int64_t i = 0; i < count; i += R) {
    float x[R];
    for (int r = 0; r < R; ++r) x[r] = i + r < count ? d[first + step * (i + r)] : 0.f;
    for (int r = 0; r < R && i + r < count; ++r) {
      s += x[r];
      if (s <= log_tau) return first + step * (i + r);
      if (!(s <= 3.40282347e38f)) return -1;  // +inf (an unbounded chunk) or NaN: no entry further on qualifies
    }
  }
  return -1;
}

// The start of the decay window of a segment of chunks [a, b): the latest c in [a, b) with
// d[b - 1] + d[b - 2] + ... + d[c] <= log_tau; -1 when there is none (the full [M | N] summary).
FLASHGDN_HOST_DEVICE inline int64_t decay_window_start(const float* d, int64_t a, int64_t b, float log_tau) {
  return decay_window_walk(d, b - 1, b - a, -1, log_tau);
}

// The mirror image, for the reverse chain of the backward (docs/chunk_bwd.md "Decay window of the reverse chain"): the
// earliest e in [a, b) with d[a] + d[a + 1] + ... + d[e] <= log_tau; -1 when there is none. The gradient w.r.t. the
// state after chunk a - 1 then takes the chunks [a, e] from a zero gradient at e's end: what it drops is
// Phi(a -> e + 1)^T dS(e), at most e^Gamma ||dS(e)||_F.
FLASHGDN_HOST_DEVICE inline int64_t decay_window_end(const float* d, int64_t a, int64_t b, float log_tau) {
  return decay_window_walk(d, a, b - a, 1, log_tau);
}

// One unit of work of the split path: chunks [c_begin, c_end) of sequence n, segment seg of nseg.
struct ChunkWorkItem {
  int32_t n;  // sequence; -1: no work (grid slack)
  int32_t seg;
  int32_t nseg;
  int32_t c_begin;
  int32_t c_end;
  int32_t pad[3];
};

enum ChunkKernelMode : int32_t {
  kModeForward = 0,       // one CTA per (sequence, value head, V-tile), all chunks
  kModeForwardSplit = 1,  // one CTA per (work item, value head, V-tile), start state from the scan
  kModeSummary = 2,       // segment summary [M | N] via the augmented state [I | 0] (gdn-math §6.1)
};

struct ChunkKernelArgs {
  const void* q;  // [B, T, Hqk, K]
  const void* k;  // [B, T, Hqk, K]
  const void* v;  // [B, T, Hv, V]
  int64_t q_sb, q_st, q_sh;
  int64_t k_sb, k_st, k_sh;
  int64_t v_sb, v_st, v_sh;
  const void* g;  // [B, T, Hv] may be null (g = 0)
  int64_t g_sb, g_st, g_sh;
  int32_t g_dtype;
  const void* beta;  // [B, T, Hv] may be null (beta = 1)
  int64_t b_sb, b_st, b_sh;
  int32_t b_dtype;
  const void* A_log;  // [Hv] may be null
  int64_t alog_s;
  int32_t alog_dtype;
  const void* dt_bias;  // [Hv] may be null
  int64_t dtb_s;
  int32_t dtb_dtype;
  const float* h0;  // [N, Hv, K, V] / [N, Hv, V, K] may be null (zeros)
  int64_t h0_sn, h0_sh, h0_sr;
  void* o;  // [B, T, Hv, V]
  int64_t o_sb, o_st, o_sh;
  float* ht;  // [N, Hv, K, V] / [N, Hv, V, K] may be null
  int64_t ht_sn, ht_sh, ht_sr;
  float* ckpt;  // [N, C_max, Hv, K, V] / [N, C_max, Hv, V, K] may be null
  int64_t ck_sn, ck_sc, ck_sh, ck_sr;
  int64_t ckpt_interval;
  int64_t num_ckpt;
  // [rec_slots, Hv, K, V] may be null: every chunk's start state in bf16, K-major (chunk_bwd's S0 record, chunk c of
  // sequence n at slot chunk_slot(n, c)); where set, the wgmma state pass (K = V = 128, bf16) stores it instead of o
  uint16_t* s0;
  const void* cu_seqlens;  // [N + 1] may be null (fixed length)
  int32_t cu_i64;
  int64_t B, T, N, Hqk, Hv, V;
  int32_t group;  // Hv / Hqk
  float scale;
  int32_t l2norm;
  int32_t gate_in_kernel;
  int32_t beta_sigmoid;
  float beta_mult;  // 1, or 2 with allow_neg_eigval
  float sp_beta, sp_threshold;
  int32_t state_vmajor;
  // segment split (workspace)
  int32_t mode;                // ChunkKernelMode
  const ChunkWorkItem* items;  // [items_cap] (split modes)
  int64_t items_cap;
  float* mn;  // [items_cap, Hv, K, K + V] segment summaries, then start states
  // the reverse scan (chunk_bwd) with M_j taken as the transpose of this buffer's M_j (the forward summaries over the
  // same chunks: the reverse step's homogeneous map is the forward one's transpose); null: M_j from mn
  const float* mt;
  // the log decay gamma_n of every chunk (kDecayUnbounded where the window bound does not hold), written by the
  // intra pass and read by the summaries; null: no decay windows (unsplit)
  float* dec;  // [Hv, rec_slots] may be null
  // the intra-chunk pass writes one record per (chunk slot, value head), the state pass reads it
  unsigned char* rec;  // [rec_slots, Hv, kRecBytes] (workspace); chunk c of sequence n is slot chunk_slot(n, c)
  int64_t rec_slots;   // B * ceil(T / 64) (fixed length) or N + ceil(T / 64) (varlen)
  int64_t nchunk_b;    // ceil(T / 64): chunks per batch entry (fixed length)
  // chunk_bwd's records of the same (chunk slot, value head), written beside the record where chunk_bwd takes its
  // chunk start states from these passes (chunk_fwd_states), so that its prep runs only where a chain reads W:
  float* bwd_A;     // [rec_slots, Hv, 64 x 64 words] may be null: A = (I + L)^-1 as bf16 hi [64][64] then lo, zero
                    // above the diagonal
  float* bwd_rows;  // [rec_slots, Hv, 4, 64] may be null: gamma, rho_q, rho_k, beta (rho 0 past the chunk end)
};

// The fields the chunk kernels of both directions read alike (ChunkKernelArgs, ChunkBwdArgs): shapes, scale,
// the in-kernel l2norm, the fused gate and the state layout, from the op's params and dims.
template <class Args, class Params, class Dims>
void set_chunk_common(Args& a, const Params& p, const Dims& d) {
  a.B = d.B, a.T = d.T, a.N = d.N, a.Hqk = d.Hqk, a.Hv = d.Hv;
  a.group = int32_t(d.group());
  a.scale = d.scale;
  a.l2norm = p.use_qk_l2norm_in_kernel;
  a.gate_in_kernel = p.gate.use_gate_in_kernel;
  a.beta_sigmoid = p.gate.use_beta_sigmoid_in_kernel;
  a.beta_mult = p.gate.allow_neg_eigval ? 2.f : 1.f;
  a.sp_beta = p.gate.softplus_beta;
  a.sp_threshold = p.gate.softplus_threshold;
  a.state_vmajor = p.state_layout == decltype(p.state_layout)::v_major;
}

// The kernels (chunk_fwd_intra.cuh, chunk_fwd_state.cuh), defined per dtype; each returns a cudaError_t as int.
// The intra pass: grid (rec_slots, Hv). The mma.sync state pass (K or V = 64): grid (items, Hv, ceil(tiles / (V /
// 64))), V / 64 value tiles per CTA; tiles = V / 64 (forward) or (K + V) / 64 (summary).
int launch_chunk_intra_bf16(const ChunkKernelArgs& a, int64_t K, void* stream);
int launch_chunk_intra_f16(const ChunkKernelArgs& a, int64_t K, void* stream);
int launch_chunk_state_bf16(const ChunkKernelArgs& a, int64_t K, int64_t items, int64_t tiles, void* stream);
int launch_chunk_state_f16(const ChunkKernelArgs& a, int64_t K, int64_t items, int64_t tiles, void* stream);
// The TMA tensor maps of the wgmma state pass: boxes of 64 tokens x 64 elements of one head of q, k, v (loads) and o
// (stores), [B][T][H][K or V], 128-byte swizzle. Each is a CUtensorMap (128 bytes, 128-byte aligned), opaque here
// (this header is plain C++). Encoded on the host once per op call (chunk_fwd.cu) and passed by value to each
// state-pass launch of the call (a CUDA graph captures them). on = 0 where the q, k, v encode failed (every chunk then
// copies by cp.async), o_on = 0 where o's did (every thread then stores its own o rows).
struct ChunkStateMaps {
  alignas(128) unsigned char q[128];
  alignas(128) unsigned char k[128];
  alignas(128) unsigned char v[128];
  alignas(128) unsigned char o[128];
  int32_t on, o_on;
};

// The state pass on wgmma (chunk_fwd_state_wg.cuh), K = V = 128 only: grid (items, Hv, ceil(tiles / 2)).
int launch_chunk_state_wg_bf16(const ChunkKernelArgs& a, const ChunkStateMaps& maps, int64_t items, int64_t tiles,
                               void* stream);
int launch_chunk_state_wg_f16(const ChunkKernelArgs& a, const ChunkStateMaps& maps, int64_t items, int64_t tiles,
                              void* stream);

}  // namespace flashgdn::cuda
