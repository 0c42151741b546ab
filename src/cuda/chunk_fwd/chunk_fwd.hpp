// Internal interface of the CUDA chunked prefill (src/cuda/chunk_fwd/). Plain C++: the GPU tests include it.
//
// The kernel launchers take one POD argument block (ChunkKernelArgs) so that the host dispatcher
// (chunk_fwd.cu) and the per-dtype kernel instantiations (chunk_fwd_{intra,state,wide}_{bf16,f16}.cu) share it.
#pragma once

#include <cstdint>

namespace flashgdn::cuda {

// Force the segment split of gdn-math §6 (testing and benchmarking): 0 = automatic (the default),
// 1 = never split, P > 1 = split every sequence into about P segments. Thread-safe; affects
// chunk_fwd_workspace_size and chunk_fwd calls made after it. The environment variable
// FLASHGDN_CHUNK_SEGMENTS (read once, at the first call) sets the initial value.
void chunk_fwd_set_segments(int segments);
int chunk_fwd_get_segments();

// Which kernels run (benchmarking, A/B checks and memory): both are exact implementations of gdn-math §5.
//   kChunkImplTwoPass the default: an intra-chunk pass (every chunk and head in parallel: the inverse A and
//                     P = QK^T (.) D into workspace records, 21 KB per chunk and value head) and a state pass that
//                     runs only the state-dependent chain: on wgmma where K = V = 128 (chunk_fwd_state_wg.cuh),
//                     on mma.sync otherwise (chunk_fwd_intra.cuh, chunk_fwd_state.cuh);
//   kChunkImplTwoPassMma  the same with the mma.sync state pass for every K, V (H200: 2-6% slower at K = V = 128,
//                     docs/chunk_fwd.md);
//   kChunkImplWide    one fused kernel, 8 warps per CTA, 2 CTAs per SM, all of a chunk's work on the chain
//                     (chunk_fwd_kernel_wide.cuh): 1.4-2x slower, but no workspace unless the segment split runs.
// Thread-safe; affects chunk_fwd_workspace_size and chunk_fwd calls made after it. The environment variable
// FLASHGDN_CHUNK_IMPL (read once, at the first call: "twopass", "mma" or "wide"; anything else is the default) sets the
// initial value.
enum ChunkImpl : int { kChunkImplWide = 0, kChunkImplTwoPassMma = 1, kChunkImplTwoPass = 2 };
inline constexpr int kChunkImplDefault = kChunkImplTwoPass;
void chunk_fwd_set_impl(int impl);
int chunk_fwd_get_impl();

// One record per (chunk slot, value head), written by the intra-chunk pass and read by the state pass (21 KB):
//   float hdr[256]   [0, 64) ek_r = rho_k,r e^{gamma_r}; [64, 128) eq_r = scale rho_q,r e^{gamma_r};
//                    [128, 192) dk_s = rho_k,s e^{gamma_n - gamma_s}; [192] en = e^{gamma_n}
//                    (rho: the l2-norm factors of the q and k rows, 1 without l2norm; gamma_n at row 63)
//   uint4 a[10][2][32]   A diag(beta) as 16-bit m16n8k16 A fragments, hi ([0]) and lo ([1]) parts, one uint4 per
//                        lane, of the ten causal 16x16 blocks (i, j), i >= j, block index i (i + 1) / 2 + j
//   uint4 p[10][2][32]   P = scale diag(rho_q) (QK^T (.) D) diag(rho_k) (diagonal included), the same way
inline constexpr int64_t kRecHdrBytes = 1024;
inline constexpr int64_t kRecBlockBytes = 1024;
inline constexpr int64_t kRecABytes = 10 * kRecBlockBytes;
inline constexpr int64_t kRecBytes = kRecHdrBytes + 2 * kRecABytes;

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
  // two-pass kernels (kChunkImplTwoPass): the intra-chunk pass writes one record per (chunk slot, value head)
  unsigned char* rec;        // [rec_slots, Hv, kRecBytes] (workspace); chunk c of sequence n is slot chunk_slot(n, c)
  int64_t rec_slots;         // B * ceil(T / 64) (fixed length) or N + ceil(T / 64) (varlen)
  int64_t nchunk_b;          // ceil(T / 64): chunks per batch entry (fixed length)
  unsigned long long* prof;  // [9] phase cycle counters of CTA (0, 0, 0); may be null (profiling builds)
};

// Profiling builds (-DFGDN_CHUNK_PROFILE): device buffer of 9 counters filled by the next launches.
void chunk_fwd_set_profile_buffer(unsigned long long* dev_counters);

// Launch the fused kernel of chunk_fwd_kernel_wide.cuh (defined per dtype). grid = (items, Hv, tiles); tiles =
// V/64 (forward) or (K+V)/64 (summary). Returns a cudaError_t as int.
int launch_chunk_kernel_wide_bf16(const ChunkKernelArgs& a, int64_t K, int64_t items, int64_t tiles, void* stream);
int launch_chunk_kernel_wide_f16(const ChunkKernelArgs& a, int64_t K, int64_t items, int64_t tiles, void* stream);

// Two-pass kernels (chunk_fwd_intra.cuh, chunk_fwd_state.cuh), defined per dtype. The intra pass: grid
// (rec_slots, Hv). The state pass: grid (items, Hv, ceil(tiles / (V / 64))), V / 64 value tiles per CTA.
int launch_chunk_intra_bf16(const ChunkKernelArgs& a, int64_t K, void* stream);
int launch_chunk_intra_f16(const ChunkKernelArgs& a, int64_t K, void* stream);
int launch_chunk_state_bf16(const ChunkKernelArgs& a, int64_t K, int64_t items, int64_t tiles, void* stream);
int launch_chunk_state_f16(const ChunkKernelArgs& a, int64_t K, int64_t items, int64_t tiles, void* stream);
// The state pass on wgmma (chunk_fwd_state_wg.cuh), K = V = 128 only: grid (items, Hv, ceil(tiles / 2)).
int launch_chunk_state_wg_bf16(const ChunkKernelArgs& a, int64_t items, int64_t tiles, void* stream);
int launch_chunk_state_wg_f16(const ChunkKernelArgs& a, int64_t items, int64_t tiles, void* stream);

}  // namespace flashgdn::cuda
