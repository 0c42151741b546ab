// The chunk passes of the CUDA backward (gdn-math §7.2-7.3), fp32 on the CUDA cores: prep, state, dstate and
// grads (chunk_bwd.hpp has the overview, docs/chunk_bwd.md the design). Templated on the 16-bit input type E
// and the head dims K, V in {64, 128}; instantiated per dtype in chunk_bwd_{bf16,f16}.cu.
//
// Notation (one chunk of n <= 64 rows, one value head; rows past n are zero-filled, with g = 0 and beta = 0, so
// they contribute exactly nothing): q^, k^ the l2-normalized rows (rho_q q, rho_k k), gamma = cumsum(g),
// D_rs = e^{gamma_r - gamma_s} (s <= r), e_n = e^{gamma_{n-1}}, kb_r = e^{gamma_{n-1} - gamma_r},
// Kbar = diag(kb) K^, L = StrictLower(diag(b) (K^ K^T (.) D)), A = (I + L)^-1, P = Q^ K^T (.) D (diagonal in).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cuda/chunk_bwd/chunk_bwd.hpp"
#include "cuda/chunk_bwd/chunk_bwd_mma.cuh"
#include "cuda/chunk_fwd/chunk_split.cuh"
#include "cuda/common/cuda_check.cuh"
#include "cuda/common/device_util.cuh"

namespace flashgdn::cuda::bwd_detail {

constexpr int kC = 64;         // chunk size
constexpr int kBV = 32;        // state columns per CTA of the chain passes (N Hv V / 32 CTAs)
constexpr int kThreads = 256;  // every chunk pass
constexpr int kRowRec = 4 * kC;

__device__ __forceinline__ float tof(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ float tof(__half x) {
  return __half2float(x);
}
template <class E>
__device__ __forceinline__ E zero_elem() {
  return E(0.f);
}

// Sequences and workspace slots as in the forward (chunk_fwd_common.cuh): the same clamped cu_seqlens and the same
// slot map, so a slot names the same chunk in both.
using chunk_detail::chunk_slot;
using chunk_detail::seq_bounds;
using chunk_detail::slot_chunk;

// A chunk: batch entry, first token, valid rows.
struct ChunkPos {
  int64_t b, t0, rec;
  int nv;
};

// Element (i, j) (key i, value j) of a state tensor entry: p[i * sr + j] (K-major) or p[j * sr + i] (V-major).
__device__ __forceinline__ int64_t state_off(bool vmajor, int64_t sr, int i, int j) {
  return vmajor ? int64_t(j) * sr + i : int64_t(i) * sr + j;
}

// g and beta as the core sees them (gdn-math §4): g = -exp(A_log) softplus(a + dt_bias) with gate_in_kernel, beta =
// c sigmoid(b) with beta_sigmoid; absent g is 0, absent beta is 1. The four loads go out as bits before any is
// widened (a widening beside its load waits for it, and the loads went one round trip after another).
__device__ __forceinline__ void resolve_gate(const ChunkBwdArgs& a, int h, int64_t b, int64_t t, float* g,
                                             float* beta) {
  const bool gik = a.g && a.gate_in_kernel;
  const uint32_t gw = a.g ? load1_bits(a.g, DType(a.g_dtype), b * a.g_sb + t * a.g_st + h * a.g_sh) : 0u;
  const uint32_t bw = a.beta ? load1_bits(a.beta, DType(a.b_dtype), b * a.b_sb + t * a.b_st + h * a.b_sh) : 0u;
  const uint32_t aw = gik && a.A_log ? load1_bits(a.A_log, DType(a.alog_dtype), h * a.alog_s) : 0u;
  const uint32_t dw = gik && a.dt_bias ? load1_bits(a.dt_bias, DType(a.dtb_dtype), h * a.dtb_s) : 0u;
  float gv = 0.f, bv = 1.f;
  if (a.g) {
    gv = from_bits1(DType(a.g_dtype), gw);
    if (a.gate_in_kernel) {
      const float alog = a.A_log ? from_bits1(DType(a.alog_dtype), aw) : 0.f;
      const float dtb = a.dt_bias ? from_bits1(DType(a.dtb_dtype), dw) : 0.f;
      gv = gate_from_raw(gv, alog, dtb, a.sp_beta, a.sp_threshold);
    }
  }
  if (a.beta) {
    bv = from_bits1(DType(a.b_dtype), bw);
    if (a.beta_sigmoid) bv = a.beta_mult / (1.f + expf(-bv));
  }
  *g = gv, *beta = bv;
}

// A warp's accumulator tiles (warp_mma at rows m0, columns n0 ..) times f into the row-major fp32 dst[.][ld] in
// global memory, 16 bytes a lane: lanes t and t ^ 1 of a quad trade half rows, so that of each tile the even lane
// stores row g, columns 2t .. 2t + 3 and the odd lane row g + 8, columns 2t - 2 .. 2t + 1 (g = lane / 4, t = lane % 4;
// a warp's store is 16 rows of 32 contiguous bytes, whole sectors). Every lane of the warp calls it.
template <int NT>
__device__ __forceinline__ void store_frags(float* dst, int ld, const float (&d)[NT][4], int m0, int n0, int lane,
                                            float f) {
  const bool odd = lane & 1;
  float* p = dst + frag_row(m0, lane, odd ? 2 : 0) * ld + n0 + 2 * (lane & 2);
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const float x0 = f * d[nt][0], x1 = f * d[nt][1], x2 = f * d[nt][2], x3 = f * d[nt][3];
    const float y0 = __shfl_xor_sync(0xffffffffu, odd ? x0 : x2, 1);  // the partner's half row
    const float y1 = __shfl_xor_sync(0xffffffffu, odd ? x1 : x3, 1);
    st_global_v4(p + 8 * nt, __float_as_uint(odd ? y0 : x0), __float_as_uint(odd ? y1 : x1),
                 __float_as_uint(odd ? x2 : y0), __float_as_uint(odd ? x3 : y1));
  }
}

// The 4 x 4 transpose of 32-bit words within each lane quad: afterwards x[j] of lane t is what was x[t] of lane j
// (two butterfly stages, lane distance 2 then 1, two shuffles each). Every lane of the warp calls it.
__device__ __forceinline__ void quad_transpose(uint32_t (&x)[4], int lane) {
  const bool h = lane & 2, o = lane & 1;
  const uint32_t a = __shfl_xor_sync(0xffffffffu, h ? x[0] : x[2], 2);
  const uint32_t b = __shfl_xor_sync(0xffffffffu, h ? x[1] : x[3], 2);
  const uint32_t z0 = h ? a : x[0], z1 = h ? b : x[1], z2 = h ? x[2] : a, z3 = h ? x[3] : b;
  const uint32_t c = __shfl_xor_sync(0xffffffffu, o ? z0 : z1, 1);
  const uint32_t e = __shfl_xor_sync(0xffffffffu, o ? z2 : z3, 1);
  x[0] = o ? c : z0, x[1] = o ? z1 : c, x[2] = o ? e : z2, x[3] = o ? z3 : e;
}

// A warp's accumulator tiles (rows m0, columns n0 .., NT even) split into bf16 hi + lo (lo = the rounding error,
// rounded) into the row-major tiles x (hi) and x + lo_off (lo; only where `lo`, a warp-uniform flag) [.][ld] in
// global memory, 16 bytes a lane: of the
// tiles (2p, 2p + 1), a quad's four 16-byte row segments (row g + 8 (s / 2), tile 2p + s % 2; each lane holds one
// 32-bit word of each) are transposed within the quad (quad_transpose), so that lane t stores segment t whole (a
// warp's store: 16 rows of 32 contiguous bytes).
template <int NT>
__device__ __forceinline__ void store_split_frags(__nv_bfloat16* x, int64_t lo_off, int ld, const float (&d)[NT][4],
                                                  int m0, int n0, int lane, bool lo) {
  static_assert(NT % 2 == 0, "tile pairs");
  const int o = frag_row(m0, lane, lane & 2) * ld + n0 + 8 * (lane & 1);
#pragma unroll
  for (int p = 0; p < NT / 2; ++p) {
    uint32_t xh[4], xl[4];
#pragma unroll
    for (int sg = 0; sg < 4; ++sg) {
      const float(&t)[4] = d[2 * p + (sg & 1)];
      const Split2 v = split_pair<false>(t[sg & 2], t[(sg & 2) + 1]);
      xh[sg] = v.hi, xl[sg] = v.lo;
    }
    quad_transpose(xh, lane);
    quad_transpose(xl, lane);
    st_global_v4(x + o + 16 * p, xh[0], xh[1], xh[2], xh[3]);
    if (lo) st_global_v4(x + lo_off + o + 16 * p, xl[0], xl[1], xl[2], xl[3]);
  }
}

// cp.async copies of a chunk's tiles (16 bytes a copy; rows and sources 16-byte aligned: dense inputs, gdn-math
// workspace records): the fp32 tile src[r][0..COLS) (row stride ld) into dst, and COLS columns from col0 of the
// 16-bit rows t0 .. t0 + 63 of an input (row stride st), zeros past row nv (nothing read there). Thread tid of NTH
// copies the pieces tid + NTH j: NTH is a multiple of the pieces per row, so its pieces keep their columns and step
// NTH / (pieces per row) rows at a time (a fixed trip count, one offset step a piece, no per-piece index math).
template <int PER, int NTH>
struct CopyPlan {
  static constexpr int kRows = NTH / PER, kIters = kC * PER / NTH;
  static_assert(NTH % PER == 0 && (kC * PER) % NTH == 0, "whole rows per pass");
  int r0, i;  // the thread's first row; its column piece (x PER elements of 16 bytes)
  __device__ __forceinline__ explicit CopyPlan(int tid) : r0(unsigned(tid) / PER), i(unsigned(tid) % PER) {}
};
template <int COLS, int NTH = kThreads, int LD>
__device__ __forceinline__ void copy_f32_tile(float (*dst)[LD], const float* src, int64_t ld, int tid) {
  using Pl = CopyPlan<COLS / 4, NTH>;
  const Pl pl(tid);
  int64_t o = int64_t(pl.r0) * ld + 4 * pl.i;
#pragma unroll
  for (int j = 0; j < Pl::kIters; ++j, o += Pl::kRows * ld)
    cp_async<16>(&dst[pl.r0 + j * Pl::kRows][4 * pl.i], src + o);
}
template <class E, int COLS, int NTH = kThreads, int LD>
__device__ __forceinline__ void copy_rows(E (*dst)[LD], const E* src, int64_t st, int64_t t0, int nv, int col0,
                                          int tid) {
  using Pl = CopyPlan<COLS / 8, NTH>;
  const Pl pl(tid);
  int64_t o = (t0 + pl.r0) * st + col0 + 8 * pl.i;
#pragma unroll
  for (int j = 0; j < Pl::kIters; ++j, o += Pl::kRows * st) {
    const int r = pl.r0 + j * Pl::kRows;
    const bool ok = r < nv;
    cp_async16_zfill(&dst[r][8 * pl.i], ok ? src + o : src, ok);
  }
}
// The four rows of chunk record rec (gamma, rho_q, rho_k, beta: 64 floats each) into dst.
__device__ __forceinline__ void copy_record_rows(float (*dst)[kC], const float* rows, int64_t rec, int tid) {
  if (tid < 4 * kC / 4) cp_async<16>(&dst[tid / (kC / 4)][4 * (tid % (kC / 4))], rows + rec * kRowRec + 4 * tid);
}

// Whether the fused gradients pass runs (a.fused_walk, and no chunk's beta above 1: prep's flag, read by every later
// pass; a beta up to 2 takes the wgmma pass 4 and the split operands it needs there, docs/chunk_bwd.md).
__device__ __forceinline__ bool fused_on(const ChunkBwdArgs& a) {
  return a.fused_walk > 0 && !(a.beta_big && *a.beta_big);
}

// Whether a chunk's largest beta (the record's row 3; rows past the chunk end hold 0) exceeds 1: prep then forms W
// from a three-part split of its left operand, and the wgmma chains add W's lo terms (docs/chunk_bwd.md "Passes").
// The same value in every lane of every warp.
__device__ __forceinline__ bool beta_above_one(const float (&rows)[4][kC], int lane) {
  float b = fmaxf(rows[3][lane], rows[3][lane + 32]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) b = fmaxf(b, __shfl_xor_sync(0xffffffffu, b, o));
  return b > 1.f;
}

// Whether every transition of a chunk is a contraction times e^g (gdn-math §1.3): unit keys (the in-kernel l2norm)
// and every beta of the chunk (b0, b1: the lane's two rows; rows past the chunk end hold 0) in [0, 2]; a NaN beta
// fails. The same value in every lane of the warp.
__device__ __forceinline__ bool chunk_bounded(const ChunkBwdArgs& a, float b0, float b1) {
  return __all_sync(0xffffffffu, b0 >= 0.f && b0 <= 2.f && b1 >= 0.f && b1 <= 2.f) && a.l2norm;
}

// Where a chunk slot sits in its walk of the fused pass (walks of a.fused_walk consecutive slots). Slots fit 32 bits
// (B T Hv < 2^31 is validated), and a 32-bit remainder is a few instructions where a 64-bit one is a call.
__device__ __forceinline__ int fused_in_walk(const ChunkBwdArgs& a, int64_t slot) {
  return int(uint32_t(slot) % uint32_t(a.fused_walk));
}

// The decay window of the reverse chain (docs/chunk_bwd.md "Decay window of the reverse chain"): the chunk the
// dstate chain walks next from dS(x), the gradient w.r.t. the end of chunk x, in a walk over chunks [c_begin, ..) of
// a sequence whose chunk 0 sits at slot0. With the fused pass only the gradients at the ends of its walks (the last
// slot of a walk) and dh0 are read: from dS(x) the next one read is dS(y), y < x the last slot of the walk before
// x's (or the walk's start, for dh0: first_dh0). Where the chunks y + 1 .. e (e < x) decay by e^-21 with contractive
// transitions, dS(y) = Phi^T dS(e) + the terms of those chunks, and ||Phi^T dS(e)||_F <= e^-21 ||dS(e)||_F is
// dropped: the walk goes on at chunk e from dS(e) = 0 instead of at x. Returns x, e, or c_begin - 1 (nothing left
// that is read). The chain (chunk_bwd_dstate_wg.cuh) and prep (which forms dU0 only for the chunks the chain visits)
// take it from here, so that the two agree.
__device__ __forceinline__ int64_t dstate_next_from(const ChunkBwdArgs& a, int h, int64_t slot0, int64_t c_begin,
                                                    bool first_dh0, int64_t x) {
  const int64_t y = x - fused_in_walk(a, slot0 + x) - 1;
  if (y < c_begin && !first_dh0) return c_begin - 1;
  const int64_t e =
      decay_window_end(a.dec + h * a.slots + slot0, y < c_begin ? c_begin : y + 1, x + 1, kDecayWindowLogTau);
  return e >= 0 ? e : x;
}

// The last chunk that the reverse summary of a segment [c_begin, c_end) walks (from there down to c_begin): the end
// of its decay window, or c_end - 1. The summary (chain_work) and prep (dstate_reads_du0) take it from here.
__device__ __forceinline__ int64_t reverse_summary_end(const ChunkBwdArgs& a, int h, int64_t slot0, int64_t c_begin,
                                                       int64_t c_end) {
  const int64_t e = decay_window_end(a.dec + h * a.slots + slot0, c_begin, c_end, kDecayWindowLogTau);
  return e >= 0 ? e : c_end - 1;
}

// Whether the dstate chain reads chunk c's dU0 (sequence n from token st, len tokens; value head h): every chunk but
// where it walks only decay windows (the wgmma chain under the fused pass with the decay table). There it walks, from
// the last chunk x of each walk of the fused pass (or of c's segment of the split), the chunks dstate_next_from(x)
// down to the walk's first, and a segment's reverse summary walks the chunks of its own window (chain_work); prep
// forms dU0 for those chunks alone. Reads pass 0's decay table and beta flag (complete: an earlier launch).
__device__ __forceinline__ bool dstate_reads_du0(const ChunkBwdArgs& a, int64_t n, int64_t st, int64_t len, int h,
                                                 int64_t c) {
  if (!a.dec || !a.dstate_wg || !fused_on(a)) return true;
  const int64_t nch = (len + kC - 1) / kC, slot0 = chunk_slot(a, n, st, 0);
  int64_t cb = 0, ce = nch;  // the walk's chunks: the sequence, or c's segment (chunk_index_kernel's)
  bool first_dh0 = a.dh0 != nullptr;
  if (a.items) {
    const int64_t j = c / a.seg_chunks;
    cb = j * a.seg_chunks, ce = cb + a.seg_chunks < nch ? cb + a.seg_chunks : nch, first_dh0 = first_dh0 && j == 0;
    if (j > 0 && c <= reverse_summary_end(a, h, slot0, cb, ce)) return true;  // segment j's reverse summary
  }
  const int64_t last = c + (a.fused_walk - 1 - fused_in_walk(a, slot0 + c));  // the last slot of c's walk
  return c <= dstate_next_from(a, h, slot0, cb, first_dh0, last < ce ? last : ce - 1);
}

// ---- pass 0: the decay table and the beta flag (grid (slots, Hv / 8 rounded up) x 256, a warp per (chunk slot,
// value head)), ahead of prep, which reads both (dstate_reads_du0): gamma_n where the chunk's transitions are
// contractions times e^g (unit keys, every beta in [0, 2]; else kDecayUnbounded), and a.beta_big where a beta
// exceeds 1. The rows as prep resolves them (resolve_gate, the shuffle scan of gamma). A template (on the io type,
// which it does not read) so that each type's translation unit has its own.
template <class E>
__global__ void __launch_bounds__(256) chunk_bwd_decay_kernel(const ChunkBwdArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];  // gamma, beta: [8 warps][64] each
  float(*gam)[kC] = reinterpret_cast<float(*)[kC]>(smem_raw);
  float(*bet)[kC] = gam + 8;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, h = int(blockIdx.y) * 8 + warp;
  const int64_t slot = blockIdx.x;
  int64_t n, c, sb, st, len;
  if (h >= a.Hv || !slot_chunk(a, slot, &n, &c)) return;  // per warp: no CTA barrier follows
  seq_bounds(a, n, &sb, &st, &len);
  const int nv = int(len - kC * c < kC ? len - kC * c : kC);
  float gv[2] = {0.f, 0.f}, bv[2] = {0.f, 0.f};
#pragma unroll
  for (int u = 0; u < 2; ++u)
    if (2 * lane + u < nv) resolve_gate(a, h, sb, st + kC * c + 2 * lane + u, &gv[u], &bv[u]);
  chunk_detail::store_gamma_beta(gv, bv, lane, gam[warp], bet[warp]);
  __syncwarp();
  const float b0 = bet[warp][lane], b1 = bet[warp][lane + 32];
  if (a.beta_big && __any_sync(0xffffffffu, b0 > 1.f || b1 > 1.f) && lane == 0) *a.beta_big = 1;
  if (a.dec) {
    const bool bounded = chunk_bounded(a, b0, b1);  // every lane (a vote)
    if (lane == 0) a.dec[h * a.slots + slot] = bounded ? gam[warp][nv - 1] : kDecayUnbounded;
  }
}

// ---- pass 1: prep (grid (slots, Hv)) -------------------------------------------------------------------------
// Dead tiles are reused so that two CTAs fit an SM (<= 113 KiB at K = V = 128): q is dead after Q K^T, P after dU
// (formed by warps 4-7 while warps 0-3 invert), L after the inversion. P is one bf16 tile (a GEMM operand that gdn-math
// §10.2 allows in bf16; dU = P^T dO sums it against dO, no cancellation to amplify its rounding); the scaled A tiles
// stay split (U0 feeds the chains and pass 4, where its rounding would grow in the cancelling sums when keys are
// nearly parallel; W, formed to fp32 accuracy (its left operand in three parts where beta > 1), is stored split as
// well: docs/chunk_bwd.md "Passes").
template <class E, int K, int V>
struct alignas(16) PrepSmem {
  static constexpr int LK = tile_ld(K), LV = tile_ld(V), LC = tile_ld(kC);
  static constexpr int kLT = 24;  // 16 x 16 scratch blocks: conflict-free as the B operand of mma16_f32
  union {
    E q[kC][LK];  // raw rows, zero past the chunk end (ldmatrix tiles)
    struct {
      __nv_bfloat16 P[kC][LC];  // P, bf16
      float T[4][16][kLT];      // the blocked inverse's scratch blocks (W_21, W_31, W_20, W_30)
    } pt;
    __nv_bfloat16 Abl[kC][LC];  // A diag(b), lo
  } u1;
  union {
    float L[kC][kC + 1];
    struct {
      __nv_bfloat16 Awh[kC][LC];  // A diag(b e^gamma rho_k), hi
      __nv_bfloat16 Abh[kC][LC];  // A diag(b), hi
    } ab;
  } u2;
  __nv_bfloat16 Awl[kC][LC];  // A diag(b e^gamma rho_k), lo
  E k[kC][LK], v[kC][LV];
  union {
    E dO[kC][LV];
    __nv_bfloat16 Awr[kC][LC];  // A diag(b e^gamma rho_k) - hi - lo (chunks with beta > 1; dO is consumed by then)
  };
  float A[kC][kC + 1];
  float gam[kC], rq[kC], rk[kC], b[kC], wk[kC];  // adjacent, 16-byte aligned (read as float4: the record rows)
};
// Two CTAs of 256 threads per SM: 2 (smem + 1 KiB reserved) <= 228 KiB, <= 128 registers (__launch_bounds__).
static_assert(sizeof(PrepSmem<__nv_bfloat16, 128, 128>) + 1024 <= 228 * 1024 / 2, "prep: two CTAs per SM");

// The operand views of shared-memory tiles: a split pair [2][rows][LD] (hi, lo), a 16-bit input tile [rows][LD].
template <int R, int LD>
__device__ __forceinline__ SplitTile split_tile(const __nv_bfloat16 (&t)[2][R][LD]) {
  return SplitTile{&t[0][0][0], &t[1][0][0], LD};
}
template <class E, int N, int LD>
__device__ __forceinline__ InTile<E> in_tile(const E (&t)[N][LD]) {
  return InTile<E>{&t[0][0], LD};
}

template <class E, int K, int V>
__global__ void __launch_bounds__(kThreads, 2) chunk_bwd_prep_kernel(const ChunkBwdArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  using Sm = PrepSmem<E, K, V>;
  constexpr bool kBf16 = std::is_same_v<E, __nv_bfloat16>;
  static_assert(offsetof(Sm, gam) % 16 == 0 && offsetof(Sm, b) % 16 == 0 && offsetof(Sm, wk) % 16 == 0 &&
                    offsetof(Sm, rq) == offsetof(Sm, gam) + 4 * kC && offsetof(Sm, rk) == offsetof(Sm, rq) + 4 * kC &&
                    offsetof(Sm, b) == offsetof(Sm, rk) + 4 * kC,
                "gam, rq, rk, b: adjacent, float4 reads");
  auto& s = *reinterpret_cast<Sm*>(smem_raw);
  const int64_t slot = blockIdx.x;
  const int h = blockIdx.y, hk = h / a.group, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  int64_t n, c, sb, st, len;
  if (!slot_chunk(a, slot, &n, &c)) return;
  seq_bounds(a, n, &sb, &st, &len);
  ChunkPos cp{sb, st + kC * c, slot * a.Hv + h, int(len - kC * c < kC ? len - kC * c : kC)};

  const E* qg = static_cast<const E*>(a.q) + cp.b * a.q_sb + hk * a.q_sh;
  const E* kg = static_cast<const E*>(a.k) + cp.b * a.k_sb + hk * a.k_sh;
  const E* vg = static_cast<const E*>(a.v) + cp.b * a.v_sb + h * a.v_sh;
  const E* dog = static_cast<const E*>(a.d_o) + cp.b * a.do_sb + h * a.do_sh;
  // dU0 = scale P^T dO only where the dstate chain reads it (its decay windows, or every chunk): elsewhere no dO, no
  // Q K^T, no P
  const bool du0 = dstate_reads_du0(a, n, st, len, h, c);
  // U0 = A diag(b) V only where pass 2 reads it: with the chunk start states from chunk_fwd's state pass it runs only
  // where a beta exceeds 1 (then the fused pass does not); elsewhere no v, no A diag(b)
  const bool u0 = !(a.s0_from_fwd && fused_on(a));
  // W, an operand of the chains only: where pass 2 walks (u0) or the dstate chain reads this chunk (with dU0)
  const bool wrec = u0 || du0;
  // With S0 from chunk_fwd's passes its intra pass writes the A and rows records (ChunkKernelArgs::bwd_A): prep runs
  // only where a chain reads W (the CTA's values alike in every thread: no barrier has run)
  if (a.s0_from_fwd && !wrec) return;
  // Two copy groups: q, k (the first products' operands), then v, dO, which land during rho, Q K^T, K K^T and P
  copy_rows<E, K>(s.u1.q, qg, a.q_st, cp.t0, cp.nv, 0, tid);
  copy_rows<E, K>(s.k, kg, a.k_st, cp.t0, cp.nv, 0, tid);
  cp_async_commit();
  if (u0) copy_rows<E, V>(s.v, vg, a.v_st, cp.t0, cp.nv, 0, tid);
  if (du0) copy_rows<E, V>(s.dO, dog, a.do_st, cp.t0, cp.nv, 0, tid);
  cp_async_commit();
  // gamma = cumsum(g) by the forward's shuffle scan (warp 0), and beta, while the rows land; g = beta = 0 past nv
  if (warp == 0) {
    float gv[2] = {0.f, 0.f}, bv[2] = {0.f, 0.f};
#pragma unroll
    for (int u = 0; u < 2; ++u)
      if (2 * lane + u < cp.nv) resolve_gate(a, h, cp.b, cp.t0 + 2 * lane + u, &gv[u], &bv[u]);
    chunk_detail::store_gamma_beta(gv, bv, lane, s.gam, s.b);
  }
  cp_async_wait<1>();  // q, k
  __syncthreads();
  {  // rho = 1 / sqrt(|x|^2 + 1e-6) per row (gdn-math §1.4), four threads per row (thread p: the 16-byte pieces
     // p + 4 j of the row); 0 on padding rows
    const int r = tid >> 2, p = tid & 3;
    float sq = 0.f, sk = 0.f;
#pragma unroll
    for (int j = 0; j < K / 32; ++j) {
      const uint4 xq = *reinterpret_cast<const uint4*>(&s.u1.q[r][8 * (p + 4 * j)]);
      const uint4 xk = *reinterpret_cast<const uint4*>(&s.k[r][8 * (p + 4 * j)]);
      const uint32_t wq[4] = {xq.x, xq.y, xq.z, xq.w}, wk[4] = {xk.x, xk.y, xk.z, xk.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 x = chunk_detail::Elem<kBf16>::unpack(wq[i]), y = chunk_detail::Elem<kBf16>::unpack(wk[i]);
        sq = fmaf(x.x, x.x, sq), sk = fmaf(y.x, y.x, sk);
        sq = fmaf(x.y, x.y, sq), sk = fmaf(y.y, y.y, sk);
      }
    }
    sq = lane_sum<1, 4>(sq);
    sk = lane_sum<1, 4>(sk);
    if (p == 0) {
      const bool valid = r < cp.nv;
      s.rq[r] = valid ? (a.l2norm ? rsqrtf(sq + 1e-6f) : 1.f) : 0.f;
      s.rk[r] = valid ? (a.l2norm ? rsqrtf(sk + 1e-6f) : 1.f) : 0.f;
    }
  }
  // L_rs = b_r (k^_r . k^_s) D_rs (s < r) and P_rs = (q^_r . k^_s) D_rs (s <= r); D by select, never factored (§5.8).
  // Q K^T and K K^T on the tensor cores (of the raw rows, so they need no barrier after rho): warp w, rows 16 (w % 4),
  // columns 32 (w / 4) .. + 32. The masks are selects on the thread's two rows' factors (registers), so a tile
  // straddling the diagonal runs without branches; a tile wholly above it (warp-uniform) skips its exponentials.
  {
    float qk[4][4] = {}, kk[4][4] = {};
    const int m0 = 16 * (warp & 3), n0 = 32 * (warp >> 2);
    if (n0 <= m0 + 15) {  // warps 4, 5 hold only tiles above the diagonal (all masked): no products
      if (du0) warp_mma_t<false, false, K, 2, 16>(qk, in_tile(s.u1.q), in_tile(s.k), m0, n0, lane);
      warp_mma_t<false, false, K, 2, 16>(kk, in_tile(s.k), in_tile(s.k), m0, n0, lane);
    }
    __syncthreads();  // q is consumed: P takes its place; rho complete
    if (tid < kC && wrec)
      s.wk[tid] = s.b[tid] * expf(s.gam[tid]) * s.rk[tid];  // W = A diag(b e^gamma) K^ (read after 2 barriers)
    float gr[2], rqr[2], brk[2];  // gamma_r, rho_q,r, b_r rho_k,r of rows r = m0 + lane / 4 (+ 8)
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const int r = frag_row(m0, lane, 2 * q);
      gr[q] = s.gam[r], rqr[q] = s.rq[r], brk[q] = s.b[r] * s.rk[r];
    }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const bool above = n0 + 8 * nt > m0 + 15;  // every column past every row of the tile
#pragma unroll
      for (int e = 0; e < 4; e += 2) {  // (e, e + 1): adjacent columns
        const int r = frag_row(m0, lane, e);
        float pv[2] = {0.f, 0.f}, l[2] = {0.f, 0.f};
        if (!above) {
#pragma unroll
          for (int u = 0; u < 2; ++u) {
            const int c2 = frag_col(n0, nt, lane, e + u);
            const float D = expf(c2 <= r ? gr[e / 2] - s.gam[c2] : 0.f), rkc = s.rk[c2];
            pv[u] = c2 <= r ? rqr[e / 2] * rkc * qk[nt][e + u] * D : 0.f;
            l[u] = c2 < r ? brk[e / 2] * rkc * kk[nt][e + u] * D : 0.f;
          }
        }
        float* lr = &s.u2.L[r][frag_col(n0, nt, lane, e)];  // row stride kC + 1: no pair stores
        lr[0] = l[0], lr[1] = l[1];
        if (du0) store_bf2(&s.u1.pt.P[0][0], r * Sm::LC + frag_col(n0, nt, lane, e), pv[0], pv[1]);
      }
    }
  }
  cp_async_wait_all();  // v, dO (each thread its own copies; the barrier makes them visible)
  __syncthreads();
  const int m0 = 16 * (warp & 3);
  if (warp < 4) {
    // A = (I + L)^-1 (gdn-math §5.7) on warps 0-3, ordered by named barrier 1 among them, while warps 4-7 form dU:
    // blocked, the 16 x 16 diagonal blocks by substitution (warp w: block w), then the blocks below in two levels,
    // A_ij = -A_ii sum_{m=j}^{i-1} L_im A_mj (16 x 16 products in 3xTF32: fp32-accurate): the 32 x 32 diagonal halves
    // first, then the lower-left half as A_(23),(01) = -A_(23) W with W = L_(23),(01) A_(01), six products on the
    // longest warp's path instead of nine by block distance (2 + 3 + 4), in three rounds (the prefill's intra pass
    // runs the same scheme):
    //   round 1: A_10 = -A_11 (L_10 A_00) (warp 0), A_32 = -A_33 (L_32 A_22) (warp 1), W_21 = L_21 A_11 (warp 2),
    //            W_31 = L_31 A_11 (warp 3)
    //   round 2: A_21 = -A_22 W_21 (warp 0), A_31 = -(A_32 W_21 + A_33 W_31) (warp 1),
    //            W_20 = L_20 A_00 + L_21 A_10 (warp 2), W_30 = L_30 A_00 + L_31 A_10 (warp 3)
    //   round 3: A_20 = -A_22 W_20 (warp 2), A_30 = -(A_32 W_20 + A_33 W_30) (warp 3)
    // Scratch T[0], T[1]: W_21, W_31; T[2 + w]: warp w's L_ij A_jj in round 1 (w < 2), then W_20, W_30 (warps 2, 3).
    chunk_detail::diag_inverse16(&s.u2.L[0][0], &s.A[0][0], kC + 1, 16 * warp, lane);
    constexpr int LA = kC + 1, LT = Sm::kLT;
    const int g = lane >> 2, t = lane & 3;
    const auto Lb = [&](int bi, int bj) { return &s.u2.L[16 * bi][16 * bj]; };
    const auto Ab = [&](int bi, int bj) { return &s.A[16 * bi][16 * bj]; };
    const auto Tb = [&](int i) { return &s.u1.pt.T[i][0][0]; };
    const auto put = [&](float* dst, int ld, const float(&c)[2][4], float sgn) {
      chunk_detail::put_block16<false>(dst, ld, c, sgn, g, t);  // 4-byte stores: LA = 65 is odd
    };
    float acc[2][4] = {}, o[2][4] = {};
    named_barrier<128>(1);  // the diagonal blocks complete
    if (warp < 2) {         // round 1: A_(2w+1),(2w) = -A_ii (L_ij A_jj)
      const int bi = 2 * warp + 1, bj = 2 * warp;
      chunk_detail::mma16_f32(acc, Lb(bi, bj), LA, Ab(bj, bj), LA, g, t);
      put(Tb(2 + warp), LT, acc, 1.f);
      __syncwarp();
      chunk_detail::mma16_f32(o, Ab(bi, bi), LA, Tb(2 + warp), LT, g, t);
      put(Ab(bi, bj), LA, o, -1.f);
    } else {  // W_21 (warp 2), W_31 (warp 3)
      chunk_detail::mma16_f32(acc, Lb(warp, 1), LA, Ab(1, 1), LA, g, t);
      put(Tb(warp - 2), LT, acc, 1.f);
    }
    named_barrier<128>(1);  // round 1 complete
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[nt][e] = 0.f;
    if (warp == 0) {  // round 2
      chunk_detail::mma16_f32(acc, Ab(2, 2), LA, Tb(0), LT, g, t);
      put(Ab(2, 1), LA, acc, -1.f);
    } else if (warp == 1) {
      chunk_detail::mma16_f32(acc, Ab(3, 2), LA, Tb(0), LT, g, t);
      chunk_detail::mma16_f32(acc, Ab(3, 3), LA, Tb(1), LT, g, t);
      put(Ab(3, 1), LA, acc, -1.f);
    } else {
      chunk_detail::mma16_f32(acc, Lb(warp, 0), LA, Ab(0, 0), LA, g, t);
      chunk_detail::mma16_f32(acc, Lb(warp, 1), LA, Ab(1, 0), LA, g, t);
      put(Tb(warp), LT, acc, 1.f);
    }
    named_barrier<128>(1);  // round 2 complete (round 3 reads W_20, W_30)
    if (warp >= 2) {        // round 3: A_20 = -A_22 W_20, A_30 = -(A_32 W_20 + A_33 W_30)
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[nt][e] = 0.f;
      if (warp == 3) chunk_detail::mma16_f32(o, Ab(3, 2), LA, Tb(2), LT, g, t);
      chunk_detail::mma16_f32(o, Ab(warp, warp), LA, Tb(warp), LT, g, t);
      put(Ab(warp, 0), LA, o, -1.f);
    }
  } else {
    // dU = scale P^T dO where the dstate chain reads it (tensor cores; warp w: rows 16 (w % 4), the two column
    // halves in turn), then the blocks of A above its diagonal zero
    constexpr int NT = V / 16;
#pragma unroll 1
    for (int half = 0; half < 2 * du0; ++half) {
      float du[NT][4] = {};
      const int n0 = (V / 2) * half;
      warp_mma_t<true, true, kC, NT / 2, 16>(du, in_tile(s.u1.pt.P), in_tile(s.dO), m0, n0, lane);
      store_frags(a.dU + cp.rec * (kC * V), V, du, m0, n0, lane, a.scale);
    }
    for (int e = tid - 128; e < 6 * 256; e += kThreads - 128) {  // the 6 blocks (bi, bj), bi < bj, in row order
      const int blk = e >> 8, bi = blk < 3 ? 0 : blk < 5 ? 1 : 2, bj = blk - (bi == 0 ? -1 : bi == 1 ? 1 : 2);
      s.A[16 * bi + ((e >> 4) & 15)][16 * bj + (e & 15)] = 0.f;
    }
  }
  __syncthreads();                            // A complete; P, L, T consumed
  if (tid < kRowRec / 4 && !a.s0_from_fwd) {  // the record rows gamma, rho_q, rho_k, beta: the four adjacent arrays
    const float4 x = reinterpret_cast<const float4*>(s.gam)[tid];
    st_global_v4(a.rows + cp.rec * kRowRec + 4 * tid, __float_as_uint(x.x), __float_as_uint(x.y), __float_as_uint(x.z),
                 __float_as_uint(x.w));
  }
  // A is only a GEMM operand of pass 4: stored as its bf16 split, hi [64][64] then lo. The scaled left operands,
  // split once (into the places of L, P and T, all consumed): A diag(b e^gamma rho_k) and, for U0, A diag(b). The warps
  // w and w + 4, which take rows 16 (w % 4) .. + 16 of W and U0, split those rows (8 columns a thread, 16-byte stores)
  // and meet at a named barrier of their own, so the four row blocks go on to their products independently. beta > 1:
  // W's left operand in three parts, hi + lo + rest (the W product below says why)
  const bool w_rest = beta_above_one(*reinterpret_cast<const float(*)[4][kC]>(s.gam), lane);
  {
    auto* Ag = reinterpret_cast<__nv_bfloat16*>(a.A + cp.rec * (kC * kC));
    const auto put16 = [](__nv_bfloat16* p, const uint32_t(&x)[4]) {
      *reinterpret_cast<uint4*>(p) = make_uint4(x[0], x[1], x[2], x[3]);
    };
    const int i0 = 32 * (warp >> 2) + lane;  // the thread's index among the pair's 64
#pragma unroll
    for (int e = i0; e < 16 * kC / 8; e += 64) {
      const int r = m0 + (e >> 3), c0 = 8 * (e & 7);
      float x[8];  // A's row r, columns c0 .. c0 + 7
#pragma unroll
      for (int i = 0; i < 8; ++i) x[i] = s.A[r][c0 + i];
      if (!a.s0_from_fwd) {  // else the intra pass's record: no split here
        uint32_t ah[4], al[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const Split2 v = split_pair<false>(x[2 * i], x[2 * i + 1]);
          ah[i] = v.hi, al[i] = v.lo;
        }
        st_global_v4(Ag + r * kC + c0, ah[0], ah[1], ah[2], ah[3]);
        st_global_v4(Ag + kC * kC + r * kC + c0, al[0], al[1], al[2], al[3]);
      }
      if (wrec) {  // the scaled operands only where their products run (the split is ALU work on prep's path)
        uint32_t wh[4], wl[4], wr[4];
        float wk[8];
        *reinterpret_cast<float4*>(&wk[0]) = *reinterpret_cast<const float4*>(&s.wk[c0]);
        *reinterpret_cast<float4*>(&wk[4]) = *reinterpret_cast<const float4*>(&s.wk[c0 + 4]);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float y0 = x[2 * i] * wk[2 * i], y1 = x[2 * i + 1] * wk[2 * i + 1];
          const Split2 v = split_pair<false>(y0, y1);
          wh[i] = v.hi, wl[i] = v.lo;
          if (w_rest) {  // the rest y - hi - lo (exact in fp32), rounded: hi + lo + rest holds y to ~2^-26
            const float2 h = chunk_detail::Elem<true>::unpack(v.hi), l = chunk_detail::Elem<true>::unpack(v.lo);
            wr[i] = chunk_detail::Elem<true>::pack((y0 - h.x) - l.x, (y1 - h.y) - l.y);
          }
        }
        put16(&s.u2.ab.Awh[r][c0], wh);
        put16(&s.Awl[r][c0], wl);
        if (w_rest) put16(&s.Awr[r][c0], wr);
      }
      if (u0) {
        uint32_t bh[4], bl[4];
        float bc[8];
        *reinterpret_cast<float4*>(&bc[0]) = *reinterpret_cast<const float4*>(&s.b[c0]);
        *reinterpret_cast<float4*>(&bc[4]) = *reinterpret_cast<const float4*>(&s.b[c0 + 4]);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const Split2 v = split_pair<false>(x[2 * i] * bc[2 * i], x[2 * i + 1] * bc[2 * i + 1]);
          bh[i] = v.hi, bl[i] = v.lo;
        }
        put16(&s.u2.ab.Abh[r][c0], bh);
        put16(&s.u1.Abl[r][c0], bl);
      }
    }
  }
  switch (warp & 3) {  // rows m0 .. m0 + 15 of both scaled operands split; ids as constants: ptxas reserves 6 barriers
    case 0:
      named_barrier<64>(2);
      break;
    case 1:
      named_barrier<64>(3);
      break;
    case 2:
      named_barrier<64>(4);
      break;
    default:
      named_barrier<64>(5);
  }
  // On the tensor cores (warp w: rows 16 (w % 4), the column half w / 4):
  //   W = (A diag(b e^gamma rho_k)) K,  U0 = (A diag(b)) V
  // Where beta nears 2 the chunk transition e_n I - Kbar^T W is the identity on the keys' span only by cancellation.
  // With n identical keys k (g = 0, beta = 2): A_ts = +-2 (s < t), W_t = x_t rho_k k with x = 2 A 1 = (2, -2, 2, ..),
  // and the transition along k is 1 - lambda sum_t sum_s A_ts = (1 - lambda)^n, lambda = beta rho_k^2 |k|^2 ~ 2: each
  // row W_t = sum_s y_ts k_s (y = A diag(b e^gamma rho_k), entries ~2 rho_k) cancels t terms down to one, and the
  // transition cancels the rows again. A two-part split of y errs by up to 2^-17 of each entry, errors that do not
  // cancel: the transition is then 1 + 1.1e-3 on emulation case 22's inputs, an error that both chains add up chunk
  // after chunk (pass 2 along k in S0, pass 3 along k in dS: dv 9.7e-3 at T = 1024, 1.6e-2 at 2048, growing linearly
  // from the last chunk). The rest y - hi - lo is exact in fp32 and its bf16 rounding leaves ~2^-26, so with it W is
  // as good as fp32 products: the transition within 1.1e-4 of 1 (the fp32 rounding of lambda, amplified 2n times:
  // (1 - lambda)^n ~ 1 + n (lambda - 2); W in fp32 gives the same). At beta <= 1 the transition contracts along the
  // keys (|1 - lambda|^n) and nothing accumulates: two parts, no MMA more.
  if (wrec) {
    constexpr int NT = K / 16;
    float acc[NT][4] = {};
    const int n0 = (K / 2) * (warp >> 2);
    const SplitTile Aw{&s.u2.ab.Awh[0][0], &s.Awl[0][0], Sm::LC};
    warp_mma_t<false, true, kC, NT / 2, 16>(acc, Aw, in_tile(s.k), m0, n0, lane);
    if (w_rest) warp_mma_t<false, true, kC, NT / 2, 16>(acc, in_tile(s.Awr), in_tile(s.k), m0, n0, lane);
    // W, a GEMM operand of the chains only, as bf16 hi [64][K] then lo [64][K]: one rounding is not enough where
    // beta nears 2 (docs/chunk_bwd.md "Passes": rows of W that should cancel round apart). The wgmma chains read lo
    // only where beta exceeds 1, so with both chains on wgmma lo is stored only there (16 KiB less per record).
    store_split_frags(reinterpret_cast<__nv_bfloat16*>(a.W + cp.rec * (2 * kC * K)), kC * K, K, acc, m0, n0, lane,
                      w_rest || !(a.state_wg && a.dstate_wg));
  }
  if (u0) {
    constexpr int NT = V / 16;
    float u0[NT][4] = {};
    const int n0 = (V / 2) * (warp >> 2);
    const SplitTile Ab{&s.u2.ab.Abh[0][0], &s.u1.Abl[0][0], Sm::LC};
    warp_mma_t<false, true, kC, NT / 2, 16>(u0, Ab, in_tile(s.v), m0, n0, lane);
    store_frags(a.U + cp.rec * (kC * V), V, u0, m0, n0, lane, 1.f);
  }
}

// ---- passes 2 and 3: the chains (grid (N, Hv, V / 32)) -------------------------------------------------------
// The chunk products run on the tensor cores from ldmatrix tiles (warp_mma_terms): the raw k, q, dO rows as stored,
// W split as prep stores it, and per step the running state (or its gradient) and U (dU) split once.
// The running state (its gradient) is fp32 in the accumulator registers of its owning warps for the whole walk
// (ChainFrag); every update accumulates in fp32 (gdn-math §10.1). Per step two barriers: the first product reads
// the whole state (all keys), the second the whole U (dU: all rows), each written by every warp.
constexpr int kLS = kBV + 4;       // row stride of the fp32 state-column tiles
constexpr int kLB = tile_ld(kBV);  // row stride of the 16-bit state-column tiles

// The K x kBV state of a chain CTA in registers: K / 16 key tiles (MT) of 16 keys, 128 / K warps each, NT column
// tiles (8 wide) apiece; warp w holds keys m0 = 16 (w % MT) .., columns n0 = 8 NT (w / MT) .., fragment element e
// of tile nt at key frag_row(m0, lane, e), column frag_col(n0, nt, lane, e). The same warp is the second product's
// owner of those elements (S <- e_n S + K^T U), so the update never leaves the registers.
template <int K>
struct ChainFrag {
  static constexpr int MT = K / 16, NT = kBV * MT / 64;
  static_assert(kThreads == 256 && MT * (8 / MT) == 8 && 8 * NT * (8 / MT) == kBV && NT % 2 == 0,
                "8 warps cover the state");
  int m0, n0;
  __device__ __forceinline__ explicit ChainFrag(int warp) : m0(16 * (warp % MT)), n0(8 * NT * (warp / MT)) {}
};

// f(nt, e, i, j) for each adjacent pair (elements e, e + 1, e even) of a warp's NT accumulator tiles at rows m0,
// columns n0: row i, columns j and j + 1.
template <int NT, class F>
__device__ __forceinline__ void for_pairs(int m0, int n0, int lane, F&& f) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; e += 2) f(nt, e, frag_row(m0, lane, e), frag_col(n0, nt, lane, e));
}

// W's record as prep stores it, bf16 hi [64][K] then lo [64][K], into the tiles [hi, lo][64][K + 8].
template <int K>
__device__ __forceinline__ void copy_w(__nv_bfloat16 (&dst)[2][kC][tile_ld(K)], const uint16_t* rec, int tid) {
  copy_rows<__nv_bfloat16, K>(dst[0], reinterpret_cast<const __nv_bfloat16*>(rec), K, 0, kC, 0, tid);
  copy_rows<__nv_bfloat16, K>(dst[1], reinterpret_cast<const __nv_bfloat16*>(rec) + kC * K, K, 0, kC, 0, tid);
}

// The chunk range of one chain CTA (ChainMode): a sequence's chunks [c_begin, c_end) and the CTA's kBV state
// columns, j0 within V, or within the M part of a state chain summary (`hom`: the columns of I_K, no inhomogeneous
// terms; the dstate chain's summaries hold N columns alone). A summary over its decay window walks only the window's
// chunks, from zero (`drop_m`: its M is 0).
struct ChainWork {
  int64_t item = 0, n = 0, sb = 0, st = 0, len = 0, c_begin = 0, c_end = 0;
  int seg = 0, nseg = 1, j0 = 0;
  bool hom = false, reverse = false;  // reverse: the dstate chain (its summaries in a.mn_rev)
  bool drop_m = false;
};

// false: no work (grid slack past the last segment, or the reverse chain's first segment's summary, which no scan
// reads).
// z: the CTA's column tile within its chain's grid (blockIdx.z, or its part of a grid that holds both chains).
template <int K>
__device__ __forceinline__ bool chain_work(const ChunkBwdArgs& a, bool reverse, ChainWork* w, int z = blockIdx.z) {
  w->item = blockIdx.x;
  w->j0 = z * kBV;
  w->reverse = reverse;
  if (a.chain_mode == kChainWhole) {
    w->n = blockIdx.x;
    seq_bounds(a, w->n, &w->sb, &w->st, &w->len);
    w->c_end = (w->len + kC - 1) / kC;
    return true;
  }
  const ChunkWorkItem it = a.items[blockIdx.x];
  if (it.n < 0) return false;
  if (a.chain_mode == kChainSummary && reverse) {  // N columns alone (M is the forward one's, transposed)
    if (it.seg == 0) return false;                 // the reverse scan never reads segment 0's summary
  } else if (a.chain_mode == kChainSummary) {      // every segment: the last one's M is the reverse scan's
    w->hom = w->j0 < K;
    if (!w->hom) w->j0 -= K;
  }
  w->n = it.n, w->seg = it.seg, w->nseg = it.nseg, w->c_begin = it.c_begin, w->c_end = it.c_end;
  seq_bounds(a, w->n, &w->sb, &w->st, &w->len);
  if (a.chain_mode == kChainSummary && a.dec) {
    // The summaries' decay windows (pass 0's table; docs/chunk_bwd.md "Segment split of the chains"), as the
    // prefill's: where the chunks [c, c_end) decay by e^-21 with contractive transitions, the forward summary is
    // [0 | N(c -> c_end)]; where [c_begin, e] do, the reverse one walks chunks e .. c_begin from a zero gradient
    // (what it drops, Phi^T of the gradient at the end of chunk e, is <= e^-21 of it). The reverse scan reads M
    // transposed, 0 as well (the same bound on Phi^T).
    const int h = blockIdx.y;
    const int64_t slot0 = chunk_slot(a, w->n, w->st, 0);
    if (reverse) {
      w->c_end = reverse_summary_end(a, h, slot0, w->c_begin, w->c_end) + 1;
    } else {
      const int64_t c = decay_window_start(a.dec + h * a.slots + slot0, w->c_begin, w->c_end, kDecayWindowLogTau);
      if (c >= 0) w->drop_m = w->hom, w->c_begin = w->hom ? w->c_end : c;
    }
  }
  return true;
}

// Item `item`'s [M | N] (row stride K + V) of the forward or the reverse chain (the same buffer unless both chains
// run at once).
template <int K, int V>
__device__ __forceinline__ float* chain_mn(const ChunkBwdArgs& a, bool reverse, int64_t item, int h) {
  return (reverse ? a.mn_rev : a.mn) + (item * a.Hv + h) * int64_t(K) * (K + V);
}

// The start of a chain CTA's walk, element (i, jj) of its columns: the summary's [I | 0]; the scan's state in the N
// part of the neighbouring item (split, not the sequence's first segment in walk order); else `edge` (h0 or dht,
// null: zeros).
template <int K, int V>
__device__ __forceinline__ float chain_start(const ChunkBwdArgs& a, const ChainWork& w, bool reverse, int h,
                                             const float* edge, int64_t sn, int64_t sh, int64_t sr, int i, int jj) {
  if (a.chain_mode == kChainSummary) return w.hom && !w.drop_m && i == w.j0 + jj ? 1.f : 0.f;
  if (a.chain_mode == kChainSplit && w.seg != (reverse ? w.nseg - 1 : 0))
    return chain_mn<K, V>(a, reverse, reverse ? w.item + 1 : w.item - 1, h)[i * (K + V) + K + w.j0 + jj];
  return edge ? edge[w.n * sn + h * sh + state_off(a.state_vmajor, sr, i, w.j0 + jj)] : 0.f;
}

// A warp's state fragments x at the start of the walk (chain_start).
template <int K, int V>
__device__ __forceinline__ void chain_start_frags(float (&x)[ChainFrag<K>::NT][4], const ChunkBwdArgs& a,
                                                  const ChainWork& w, bool reverse, int h, const float* edge,
                                                  int64_t sn, int64_t sh, int64_t sr, ChainFrag<K> f, int lane) {
  for_pairs<ChainFrag<K>::NT>(f.m0, f.n0, lane, [&](int nt, int e, int i, int j) {
    x[nt][e] = chain_start<K, V>(a, w, reverse, h, edge, sn, sh, sr, i, j);
    x[nt][e + 1] = chain_start<K, V>(a, w, reverse, h, edge, sn, sh, sr, i, j + 1);
  });
}

// A summary CTA's result: its warps' state fragments into the item's [M | N].
template <int K, int V>
__device__ __forceinline__ void store_summary(const ChunkBwdArgs& a, const ChainWork& w, int h,
                                              const float (&x)[ChainFrag<K>::NT][4], ChainFrag<K> f, int lane) {
  float* dst = chain_mn<K, V>(a, w.reverse, w.item, h) + (w.hom ? 0 : K) + w.j0;
  for_pairs<ChainFrag<K>::NT>(f.m0, f.n0, lane, [&](int nt, int e, int i, int j) {
    *reinterpret_cast<float2*>(dst + i * (K + V) + j) = make_float2(x[nt][e], x[nt][e + 1]);
  });
}

// The first product's warp layout (both chains): 64 rows x kBV columns, warp w rows 16 (w % 4), columns kBV / 2
// (w / 4) ..; and the row factor kb_r = rho_k,r e^{gamma_{n-1} - gamma_r} (0 past the chunk end) of its two rows
// r = m0 + lane / 4 (+ 8), computed in registers from the record rows of the stage.
struct RowFrag {
  int m0, n0;
  __device__ __forceinline__ explicit RowFrag(int warp) : m0(16 * (warp & 3)), n0((kBV / 2) * (warp >> 2)) {}
};
__device__ __forceinline__ void row_kb(float (&kb)[2], const float (&rows)[4][kC], float gl, int nv, int m0, int lane) {
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const int r = frag_row(m0, lane, 2 * q);
    kb[q] = r < nv ? rows[2][r] * expf(gl - rows[0][r]) : 0.f;
  }
}

// The first product of a chain step (both chains): acc = A B over K (tensor cores; the three split terms as
// independent chains), its inhomogeneous term x0 (U0, dU0: an fp32 [64][kLS] stage tile; zeros for the M columns of
// a summary, hom) read into registers ahead of it, and the step's factors e_n and kb (row_kb).
struct FirstProduct {
  float en, kb[2], acc[kBV / 16][4];
  float2 x0[kBV / 16][2];
};
template <int K, class OA, class OB>
__device__ __forceinline__ void first_product(FirstProduct& p, const OA& A, const OB& B, const float (&x0)[kC][kLS],
                                              bool hom, const float (&rows)[4][kC], int nv, RowFrag f, int lane) {
  const float gl = rows[0][nv - 1];
  p.en = expf(gl);
  row_kb(p.kb, rows, gl, nv, f.m0, lane);
  for_pairs<kBV / 16>(f.m0, f.n0, lane, [&](int nt, int e, int r, int j) {
    p.x0[nt][e / 2] = hom ? make_float2(0.f, 0.f) : *reinterpret_cast<const float2*>(&x0[r][j]);
  });
  float t[3][kBV / 16][4] = {};
  warp_mma_terms<false, true, K, kBV / 32, 16, kMmaPipelined>(t[0], t[1], t[2], A, B, f.m0, f.n0, lane);
  sum_terms(p.acc, t);
}

// The state pass keeps two stages of chunk inputs: chunk c + 1's land by cp.async while chunk c is computed, so the
// serial step waits on no global load.
template <class E, int K>
struct alignas(16) StateSmem {
  __nv_bfloat16 Sb[2][K][kLB];   // the running state's kBV columns, split (hi, lo): its warps' registers, per step
  __nv_bfloat16 Ub[2][kC][kLB];  // diag(kb) U of the chunk, these columns, split
  struct Stage {
    __nv_bfloat16 W[2][kC][tile_ld(K)];  // W of the chunk, split (hi, lo)
    float U0[kC][kLS];                   // U0, these columns
    E k[kC][tile_ld(K)];                 // raw key rows, zero past the chunk end
    float rows[4][kC];                   // the record's gamma, rho_q, rho_k, beta
  } st[2];
};

// Issue the cp.async copies of chunk c's inputs (sequence n: batch sb, first token t0s, length len) into stage g.
template <class E, int K, int V>
__device__ __forceinline__ void state_prefetch(const ChunkBwdArgs& a, typename StateSmem<E, K>::Stage& g, int64_t n,
                                               int64_t sb, int64_t t0s, int64_t len, int64_t c, int h, int j0, bool hom,
                                               int tid) {
  const int64_t t0 = t0s + kC * c, rec = chunk_slot(a, n, t0s, c) * a.Hv + h;
  const int nv = int(len - kC * c < kC ? len - kC * c : kC);
  copy_w<K>(g.W, a.W + rec * (2 * kC * K), tid);
  if (!hom) copy_f32_tile<kBV>(g.U0, a.U + rec * (kC * V) + j0, V, tid);  // M columns: U0 = 0
  copy_rows<E, K>(g.k, static_cast<const E*>(a.k) + sb * a.k_sb + (h / a.group) * a.k_sh, a.k_st, t0, nv, 0, tid);
  copy_record_rows(g.rows, a.rows, rec, tid);
  cp_async_commit();
}

// Per step c: [barrier: stage c, Sb] U = U0 - W S0 -> Ub [barrier: Ub] S <- e_n S + K^T Ub in registers, then
// S0 of chunk c + 1 split into Sb and stored (bf16, the hi part) from the same registers.
template <class E, int K, int V>
__global__ void __launch_bounds__(kThreads, 1) chunk_bwd_state_kernel(const ChunkBwdArgs a) {
  constexpr int NT = ChainFrag<K>::NT;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto& s = *reinterpret_cast<StateSmem<E, K>*>(smem_raw);
  const int h = blockIdx.y, tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  ChainWork w;
  if (!chain_work<K>(a, false, &w)) return;
  const int64_t n = w.n, sb = w.sb, st = w.st, len = w.len;
  const int j0 = w.j0;
  const bool sum = a.chain_mode == kChainSummary;  // a summary stores only its end state
  const SplitTile Sv = split_tile(s.Sb), Uv = split_tile(s.Ub);
  const ChainFrag<K> sf(warp);
  const RowFrag uf(warp);
  float S[NT][4];  // S = h0 (or 0), the scan's start state, or [I | 0]
  chain_start_frags<K, V>(S, a, w, false, h, a.h0, a.h0_sn, a.h0_sh, a.h0_sr, sf, lane);
  // S as the next product's operand (Sb) and, but for a summary, as S0 of chunk c in bf16 (pass 4 uses it only as
  // a GEMM operand, gdn-math §10.2): the hi part of the split, from the registers
  const auto put_state = [&](int64_t c) {
    __nv_bfloat16* S0g = reinterpret_cast<__nv_bfloat16*>(a.S0) + (chunk_slot(a, n, st, c) * a.Hv + h) * (K * V) + j0;
    for_pairs<NT>(sf.m0, sf.n0, lane, [&](int nt, int e, int i, int j) {
      const Split2 x = split_pair<false>(S[nt][e], S[nt][e + 1]);
      *reinterpret_cast<uint32_t*>(&s.Sb[0][i][j]) = x.hi;
      *reinterpret_cast<uint32_t*>(&s.Sb[1][i][j]) = x.lo;
      if (!sum) *reinterpret_cast<uint32_t*>(S0g + i * V + j) = x.hi;
    });
  };
  if (w.c_begin < w.c_end) {
    state_prefetch<E, K, V>(a, s.st[w.c_begin & 1], n, sb, st, len, w.c_begin, h, j0, w.hom, tid);
    put_state(w.c_begin);
  }
  for (int64_t c = w.c_begin; c < w.c_end; ++c) {
    const int64_t rec = chunk_slot(a, n, st, c) * a.Hv + h;
    const int nv = int(len - kC * c < kC ? len - kC * c : kC);
    const auto& g = s.st[c & 1];
    cp_async_wait_all();
    __syncthreads();  // stage c & 1 landed (every thread's copies); Sb complete; the other stage and Ub free
    if (c + 1 < w.c_end) state_prefetch<E, K, V>(a, s.st[(c + 1) & 1], n, sb, st, len, c + 1, h, j0, w.hom, tid);
    FirstProduct p;  // U = U0 - W S0
    first_product<K>(p, split_tile(g.W), Sv, g.U0, w.hom, g.rows, nv, uf, lane);
    {
      float* Ug = a.U + rec * (kC * V) + j0;
      for_pairs<kBV / 16>(uf.m0, uf.n0, lane, [&](int nt, int e, int r, int j) {
        const float2 u0 = p.x0[nt][e / 2], uv = make_float2(u0.x - p.acc[nt][e], u0.y - p.acc[nt][e + 1]);
        store_split2(&s.Ub[0][0][0], &s.Ub[1][0][0], r * kLB + j, p.kb[e / 2] * uv.x, p.kb[e / 2] * uv.y);
        if (!sum) *reinterpret_cast<float2*>(Ug + r * V + j) = uv;
      });
    }
    __syncthreads();  // Ub complete; every warp's reads of Sb done
    {                 // S <- e_n S + K^T (diag(kb) U) (tensor cores, fp32 accumulation), in the registers
      float t[3][NT][4] = {}, acc[NT][4];
      warp_mma_terms<true, true, kC, NT / 2, 16, kMmaPipelined>(t[0], t[1], t[2], in_tile(g.k), Uv, sf.m0, sf.n0, lane);
      sum_terms(acc, t);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) S[nt][e] = fmaf(p.en, S[nt][e], acc[nt][e]);
    }
    if (c + 1 < w.c_end) put_state(c + 1);
  }
  if (sum) store_summary<K, V>(a, w, h, S, sf, lane);
}

// The dstate pass: chunk c - 1's inputs (W, k, q, dO, dU0, the record; two stages) land by cp.async while chunk c is
// computed.
template <class E, int K>
struct alignas(16) DStateSmem {
  __nv_bfloat16 dSb[2][K][kLB];   // the chunk-end gradient dS, kBV columns, split: its warps' registers, per step
  __nv_bfloat16 dUb[2][kC][kLB];  // -dU of the chunk, these columns, split
  __nv_bfloat16 Ob[2][kC][kLB];   // diag(qg) dO, these columns, split
  struct Stage {
    __nv_bfloat16 W[2][kC][tile_ld(K)];      // W of the chunk, split (hi, lo)
    float dU0[kC][kLS];                      // scale P^T dO, these columns
    E k[kC][tile_ld(K)], q[kC][tile_ld(K)];  // raw rows, zero past the chunk end
    E dO[kC][kLB];                           // dO, these columns
    float rows[4][kC];                       // the record's gamma, rho_q, rho_k, beta
  } st[2];
};
static_assert(sizeof(DStateSmem<__nv_bfloat16, 128>) <= 227 * 1024, "dstate: one CTA's shared memory");

template <class E, int K, int V>
__device__ __forceinline__ void dstate_prefetch(const ChunkBwdArgs& a, typename DStateSmem<E, K>::Stage& g, int64_t n,
                                                int64_t sb, int64_t t0s, int64_t len, int64_t c, int h, int j0,
                                                int tid) {
  const int64_t t0 = t0s + kC * c, rec = chunk_slot(a, n, t0s, c) * a.Hv + h;
  const int nv = int(len - kC * c < kC ? len - kC * c : kC), hk = h / a.group;
  copy_w<K>(g.W, a.W + rec * (2 * kC * K), tid);
  copy_rows<E, K>(g.k, static_cast<const E*>(a.k) + sb * a.k_sb + hk * a.k_sh, a.k_st, t0, nv, 0, tid);
  copy_f32_tile<kBV>(g.dU0, a.dU + rec * (kC * V) + j0, V, tid);
  copy_rows<E, K>(g.q, static_cast<const E*>(a.q) + sb * a.q_sb + hk * a.q_sh, a.q_st, t0, nv, 0, tid);
  copy_rows<E, kBV>(g.dO, static_cast<const E*>(a.d_o) + sb * a.do_sb + h * a.do_sh, a.do_st, t0, nv, j0, tid);
  copy_record_rows(g.rows, a.rows, rec, tid);
  cp_async_commit();
}

// Per step c (reverse): [barrier: stage c, dSb] dU = dU0 + diag(kb) K dS -> dUb, diag(qg) dO -> Ob [barrier]
// dS <- e_n dS + Q^T Ob - W^T dUb in registers, then dS of chunk c - 1 split into dSb and stored from them.
template <class E, int K, int V>
__global__ void __launch_bounds__(kThreads, 1) chunk_bwd_dstate_kernel(const ChunkBwdArgs a) {
  constexpr int NT = ChainFrag<K>::NT;
  constexpr bool kBf16 = std::is_same_v<E, __nv_bfloat16>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto& s = *reinterpret_cast<DStateSmem<E, K>*>(smem_raw);
  const int h = blockIdx.y, tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  ChainWork w;
  if (!chain_work<K>(a, true, &w)) return;
  const int64_t n = w.n, sb = w.sb, st = w.st, len = w.len;
  const int j0 = w.j0;
  const bool sum = a.chain_mode == kChainSummary;  // a summary stores only its end state
  const SplitTile dSv = split_tile(s.dSb), dUv = split_tile(s.dUb), Ov = split_tile(s.Ob);
  const ChainFrag<K> sf(warp);
  const RowFrag uf(warp);
  float dS[NT][4];  // dS = dht (or 0), the scan's end gradient, or [I | 0]
  chain_start_frags<K, V>(dS, a, w, true, h, a.dht, a.dht_sn, a.dht_sh, a.dht_sr, sf, lane);
  // dS, the gradient w.r.t. chunk c's end state, as the next product's operand (dSb) and, but for a summary, into
  // its record (fp32: it enters dg through <S0, dS>), from the registers
  const auto put_grad = [&](int64_t c) {
    float* dSg = a.dS + (chunk_slot(a, n, st, c) * a.Hv + h) * (K * V) + j0;
    for_pairs<NT>(sf.m0, sf.n0, lane, [&](int nt, int e, int i, int j) {
      store_split2(&s.dSb[0][0][0], &s.dSb[1][0][0], i * kLB + j, dS[nt][e], dS[nt][e + 1]);
      if (!sum) *reinterpret_cast<float2*>(dSg + i * V + j) = make_float2(dS[nt][e], dS[nt][e + 1]);
    });
  };
  if (w.c_begin < w.c_end) {
    dstate_prefetch<E, K, V>(a, s.st[(w.c_end - 1) & 1], n, sb, st, len, w.c_end - 1, h, j0, tid);
    put_grad(w.c_end - 1);
  }
  for (int64_t c = w.c_end - 1; c >= w.c_begin; --c) {
    const int64_t rec = chunk_slot(a, n, st, c) * a.Hv + h;
    const int nv = int(len - kC * c < kC ? len - kC * c : kC);
    const auto& g = s.st[c & 1];
    cp_async_wait_all();
    __syncthreads();  // stage c & 1 landed (every thread's copies); dSb complete; dUb, Ob, the other stage free
    if (c > w.c_begin) dstate_prefetch<E, K, V>(a, s.st[(c - 1) & 1], n, sb, st, len, c - 1, h, j0, tid);
    FirstProduct p;  // dU = scale P^T dO + diag(kb) K dS
    first_product<K>(p, in_tile(g.k), dSv, g.dU0, false, g.rows, nv, uf, lane);
    {
      float* dUg = a.dU + rec * (kC * V) + j0;
      for_pairs<kBV / 16>(uf.m0, uf.n0, lane, [&](int nt, int e, int r, int j) {
        const float2 d0 = p.x0[nt][e / 2];
        const float kb = p.kb[e / 2];
        const float2 uv = make_float2(fmaf(kb, p.acc[nt][e], d0.x), fmaf(kb, p.acc[nt][e + 1], d0.y));
        store_split2(&s.dUb[0][0][0], &s.dUb[1][0][0], r * kLB + j, -uv.x, -uv.y);
        if (!sum) *reinterpret_cast<float2*>(dUg + r * V + j) = uv;
      });
    }
    {  // diag(qg) dO, split: thread tid, row tid / 4, columns 8 (tid % 4) .. + 8
      static_assert(kThreads * 8 == kC * kBV, "one 16-byte row piece per thread");
      const int r = tid >> 2, j = 8 * (tid & 3);
      const float qg = r < nv ? a.scale * g.rows[1][r] * expf(g.rows[0][r]) : 0.f;  // scale Gamma Q^ = diag(qg) Q
      const uint4 x = *reinterpret_cast<const uint4*>(&g.dO[r][j]);
      const uint32_t xs[4] = {x.x, x.y, x.z, x.w};
      uint32_t hi[4], lo[4];
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        const float2 d = chunk_detail::Elem<kBf16>::unpack(xs[p]);
        const Split2 y = split_pair<false>(qg * d.x, qg * d.y);
        hi[p] = y.hi, lo[p] = y.lo;
      }
      *reinterpret_cast<uint4*>(&s.Ob[0][r][j]) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
      *reinterpret_cast<uint4*>(&s.Ob[1][r][j]) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    }
    __syncthreads();  // dUb, Ob complete; every warp's reads of dSb done
    {  // dS_start = e_n dS + Q^T (diag(qg) dO) - W^T dU (tensor cores, fp32 accumulation), in the registers
      float t[3][NT][4] = {}, acc[NT][4];
      warp_mma_terms<true, true, kC, NT / 2, 16, kMmaPipelined>(t[0], t[1], t[2], in_tile(g.q), Ov, sf.m0, sf.n0, lane);
      warp_mma_terms<true, true, kC, NT / 2, 16, kMmaPipelined>(t[0], t[1], t[2], split_tile(g.W), dUv, sf.m0, sf.n0,
                                                                lane);
      sum_terms(acc, t);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) dS[nt][e] = fmaf(p.en, dS[nt][e], acc[nt][e]);
    }
    if (c > w.c_begin) put_grad(c - 1);
  }
  if (sum) {
    store_summary<K, V>(a, w, h, dS, sf, lane);
  } else if (a.dh0 && w.seg == 0) {  // dh0 = dS_start of the first chunk (dht, or 0, for an empty sequence)
    for_pairs<NT>(sf.m0, sf.n0, lane, [&](int nt, int e, int i, int j) {
      float* d = a.dh0 + n * a.dh0_sn + h * a.dh0_sh;
      d[state_off(a.state_vmajor, a.dh0_sr, i, j0 + j)] = dS[nt][e];
      d[state_off(a.state_vmajor, a.dh0_sr, i, j0 + j + 1)] = dS[nt][e + 1];
    });
  }
}

// ---- pass 4: grads (persistent: one CTA per SM walks the (chunk slot, value head) items): gdn-math §7.3 --------
// kGradThreads / 32 warps in NQ = kGradThreads / 128 column groups: 16 warps (NQ = 4) spread a chunk thin, so that
// the warps' load and MMA latencies overlap; 8 warps (NQ = 2, 256 threads) reuse each A fragment over twice the
// columns (less shared-memory traffic) at 247 registers. Warp w owns rows m0 = 16 (w % 4) and, of every KS = 16 NQ
// keys, the 16 at 16 (w / 4): dq and dk stay in its accumulator fragments (tile 2 j + u: keys KS j + 16 (w / 4) +
// 8 u ..) from the first product to the store; a 64-column product gives it the 64 / NQ columns at (64 / NQ)(w / 4),
// a V-column one the V / NQ at (V / NQ)(w / 4). Every GEMM operand is a 16-bit
// shared-memory tile read by ldmatrix: the inputs as stored, the fp32 ones split once into bf16 hi / lo with their
// scale factors applied (SplitTile). Row sums reduce over the 4 lanes of a row by shuffles, then
// over the NQ column groups in order through part[][NQ][]: every sum has a fixed order.
//
// A CTA walks items i = blockIdx.x, + gridDim.x, ... (item i: slot i % slots, value head i / slots) and keeps the
// next item's inputs in flight while the current one computes: its k (a second k tile) during the whole item; its
// q, dO and record rows once the key loop is done with q and dO; its v, U and dU (raw fp32, landing in F1 / F2 and
// split there when the item starts) once the dA products are done with them; its A once Y A^T is. The S0 / dS
// tiles (48 KiB, no room for a second stage) go to registers at the item's start, in flight during the first
// products, and the second key tile during the first tile's products.
constexpr int kGradThreads = 512;  // 256 or 512
constexpr int kGradNQ = kGradThreads / 128;
// Item i of the walk: slot i % slots, value head h = i / slots; its chunk. Item indices fit 32 bits (a record takes
// >= 70 KB of workspace: 2^31 of them cannot be allocated), so the walk divides in 32 bits (no 64-bit division
// calls in the kernel).
struct GradItem {
  ChunkPos cp;
  int i, h;
};

// The first of items x->i, x->i + stride, .. (below slots Hv) that holds a chunk (a varlen slack slot holds none),
// into x; false when there is none.
__device__ __forceinline__ bool next_grad_item(const ChunkBwdArgs& a, GradItem* x, int stride) {
  const int slots = int(a.slots), items = int(a.slots * a.Hv), nb = int(a.nchunk_b);
  for (; x->i < items; x->i += stride) {
    const int slot = x->i % slots;
    int64_t n, c, sb, st, len;
    if (a.cu_seqlens == nullptr) {  // slot_chunk's fixed-length map, in 32 bits
      n = slot / nb, c = slot % nb;
    } else if (!slot_chunk(a, slot, &n, &c)) {
      continue;
    }
    seq_bounds(a, n, &sb, &st, &len);
    x->h = x->i / slots;
    x->cp = ChunkPos{sb, st + kC * c, int64_t(slot) * a.Hv + x->h, int(len - kC * c < kC ? len - kC * c : kC)};
    return true;
  }
  return false;
}

template <class E, int K, int V>
struct alignas(16) GradSmem {
  static constexpr int LK = tile_ld(K), LV = tile_ld(V), LC = tile_ld(kC), LF = tile_ld(K > V ? K : V);
  static constexpr int KT = 16 * kGradNQ;                     // keys per S0 / dS tile of the state-term loop
  static constexpr int kRR = 4 * kC * LC, kKS = 3 * KT * LV;  // R0 + R1; the S0 and dS key tiles
  static constexpr int kPart = 2 * 5 * kGradNQ * kC;          // part (fp32 [5][NQ][64]) in bf16 elements
  static constexpr int kTail = kPart + 2 * 3 * kC;            // part, then dgam, dbeta, tau (fp32)
  static constexpr int kR = kKS > kRR + kTail ? kKS : kRR + kTail;
  E q[kC][LK];
  E k[kC][LK];   // raw rows, zero past the chunk end
  E kn[kC][LK];  // the next item's k (copied to k when that item starts)
  E v[kC][LV], dO[kC][LV];
  __nv_bfloat16 F1[2][kC][LF];  // U (64 x V), then dW = -dU S0^T (64 x K); the next item's U as fp32 [64][V]
  __nv_bfloat16 F2[2][kC][LF];  // dU (complete: scale P^T dO + Kbar dS); the next item's dU as fp32 [64][V]
  __nv_bfloat16 A[2][kC][LC];   // A, split as its record holds it
  // R: the tile pairs R0, R1 ([2][64][LC] each): X diag(rk), diag(rq) X; then the S0 and dS key tiles (S0 [KT][LV],
  // dS [2][KT][LV]); then dA (R0), A^T dA (R1); then dL_b (.) D as fp32 [64][65] (R0), (dL_b (.) D + its
  // transpose) diag(rk) (R1). Past R0, R1, written after the key loop: part[5][NQ][64], the per-row partial sums of
  // the column groups (gq, tau, kd, v.(A^T dU), dL.E), then dgam, dbeta, tau [64] each.
  __nv_bfloat16 R[kR];
  float nrows[4][kC];  // the next item's record rows (gamma, rho_q, rho_k, beta)
  float gam[kC], rq[kC], rk[kC], b[kC], eg[kC], kb[kC];
  // Z = dD (.) D without its diagonal (which cancels in rowsum(Z) - colsum(Z)): the row sums over each column group
  // and the column sums over each row group (warp w: rows 16 (w % 4) .., columns 16 (w / 4) ..)
  float zrow[kGradNQ][kC], zcol[4][kC];
  float red[kGradThreads / 32];  // <S0, dS>_F per warp
  GradItem item[3];              // this item, the next one and the one after (found at the end of this item)
  int more;                      // whether item[2] holds an item
  static_assert(kC * V * 4 <= int(sizeof(F1)), "the raw fp32 U, dU fit F1, F2");
};

// 230 KiB at K = V = 128: one CTA per SM, so the persistent grid is the SM count.
static_assert(sizeof(GradSmem<__nv_bfloat16, 128, 128>) <= 227 * 1024, "grads: one CTA's shared memory");
static_assert(sizeof(GradSmem<__nv_bfloat16, 64, 64>) > 114 * 1024, "grads: one CTA per SM");

template <class E, int K, int V>
__global__ void __launch_bounds__(kGradThreads, 1) chunk_bwd_grads_kernel(const ChunkBwdArgs a) {
  using Sm = GradSmem<E, K, V>;
  constexpr bool kBf16 = std::is_same_v<E, __nv_bfloat16>;
  constexpr int LV = Sm::LV, LC = Sm::LC, LF = Sm::LF, NTH = kGradThreads, NQ = kGradNQ;
  // KS: the key stride of a warp's dq / dk tiles (and the keys per S0 / dS tile); NK: its tiles; CW, NW: the columns
  // and the column-tile pairs of a 64-column product per warp; NU: the float4 groups of a 64 x V tile per thread
  constexpr int KS = Sm::KT, KT = Sm::KT, NK = 2 * K / KS, CW = kC / NQ, NW = CW / 16, NU = kC * V / 4 / NTH;
  static_assert(NTH == 256 || NTH == 512, "8 or 16 warps");
  static_assert(kC * (kC + 1) * 4 <= 2 * kC * LC * 2 && K % KT == 0, "R0 holds an fp32 64 x 64 tile");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto& s = *reinterpret_cast<Sm*>(smem_raw);
  int tid = threadIdx.x;
  const float lam = a.scale;
  using Pair = __nv_bfloat16[2][kC][LC];
  Pair& sR0 = *reinterpret_cast<Pair*>(&s.R[0]);
  Pair& sR1 = *reinterpret_cast<Pair*>(&s.R[2 * kC * LC]);
  __nv_bfloat16(&S0t)[KT][LV] = *reinterpret_cast<__nv_bfloat16(*)[KT][LV]>(&s.R[0]);
  __nv_bfloat16(&dSt)[2][KT][LV] = *reinterpret_cast<__nv_bfloat16(*)[2][KT][LV]>(&S0t[KT][0]);
  float(&Xf)[kC][kC + 1] = *reinterpret_cast<float(*)[kC][kC + 1]>(&s.R[0]);  // dL_b (.) D
  float(&part)[5][NQ][kC] = *reinterpret_cast<float(*)[5][NQ][kC]>(&s.R[Sm::kRR]);
  float(&dgam)[kC] = *reinterpret_cast<float(*)[kC]>(&s.R[Sm::kRR + Sm::kPart]);
  float(&dbeta)[kC] = *reinterpret_cast<float(*)[kC]>(&s.R[Sm::kRR + Sm::kPart + 2 * kC]);
  float(&tau)[kC] = *reinterpret_cast<float(*)[kC]>(&s.R[Sm::kRR + Sm::kPart + 4 * kC]);
  float4* const Uraw = reinterpret_cast<float4*>(&s.F1[0][0][0]);
  float4* const dUraw = reinterpret_cast<float4*>(&s.F2[0][0][0]);
  const SplitTile F1 = split_tile(s.F1), F2 = split_tile(s.F2), At = split_tile(s.A), R0 = split_tile(sR0),
                  R1 = split_tile(sR1);

  // An item's inputs by cp.async, in the groups that the walk issues as their tiles fall dead
  const auto load_k = [&](const GradItem& it) {
    const ChunkPos& x = it.cp;
    copy_rows<E, K, NTH>(s.kn, static_cast<const E*>(a.k) + x.b * a.k_sb + (it.h / a.group) * a.k_sh, a.k_st, x.t0,
                         x.nv, 0, tid);
  };
  const auto load_q_do = [&](const GradItem& it) {
    const ChunkPos& x = it.cp;
    const int hx = it.h;
    copy_rows<E, K, NTH>(s.q, static_cast<const E*>(a.q) + x.b * a.q_sb + (hx / a.group) * a.q_sh, a.q_st, x.t0, x.nv,
                         0, tid);
    copy_rows<E, V, NTH>(s.dO, static_cast<const E*>(a.d_o) + x.b * a.do_sb + hx * a.do_sh, a.do_st, x.t0, x.nv, 0,
                         tid);
    copy_record_rows(s.nrows, a.rows, x.rec, tid);
  };
  const auto load_v_u = [&](const GradItem& it) {
    const ChunkPos& x = it.cp;
    const int hx = it.h;
    copy_rows<E, V, NTH>(s.v, static_cast<const E*>(a.v) + x.b * a.v_sb + hx * a.v_sh, a.v_st, x.t0, x.nv, 0, tid);
    const float4* Ug = reinterpret_cast<const float4*>(a.U + x.rec * (kC * V));
    const float4* dUg = reinterpret_cast<const float4*>(a.dU + x.rec * (kC * V));
#pragma unroll
    for (int l = 0; l < NU; ++l) cp_async<16>(&Uraw[tid + l * NTH], &Ug[tid + l * NTH]);
#pragma unroll
    for (int l = 0; l < NU; ++l) cp_async<16>(&dUraw[tid + l * NTH], &dUg[tid + l * NTH]);
  };
  const auto load_a = [&](const GradItem& it) {  // A as its record holds it: bf16 hi [64][64], then lo
    const auto* Ag = reinterpret_cast<const __nv_bfloat16*>(a.A + it.cp.rec * (kC * kC));
    copy_rows<__nv_bfloat16, kC, NTH>(s.A[0], Ag, kC, 0, kC, 0, tid);
    copy_rows<__nv_bfloat16, kC, NTH>(s.A[1], Ag + kC * kC, kC, 0, kC, 0, tid);
  };

  // The walk's state lives in shared memory (s.item, fixed addresses), not in registers: the products need all 128.
  {
    GradItem x;
    x.i = int(blockIdx.x);
    if (!next_grad_item(a, &x, int(gridDim.x))) return;
    load_k(x);
    load_q_do(x);
    load_v_u(x);
    load_a(x);
    cp_async_commit();
    if (tid == 0) {  // read after the walk's first barrier
      s.item[1] = x;
      s.item[2].i = x.i + int(gridDim.x);
      s.more = next_grad_item(a, &s.item[2], int(gridDim.x));
    }
  }
  for (;;) {
    cp_async_wait_all();
    // This item's inputs are in (every thread's copies waited for, then visible to all); the last item is done with
    // every tile and with s.item[0], s.item[1].
    __syncthreads();
    const bool more = s.more;
    if (tid == 0) {  // read after the next barrier
      s.item[0] = s.item[1];
      s.item[1] = s.item[2];
    }
    // Opaque per item: the index math below is redone per item instead of being hoisted out of the walk and held in
    // registers through it (the products need all 128).
    asm volatile("" : "+r"(tid));
    const int warp = tid >> 5, lane = tid & 31, m0 = 16 * (warp & 3), qd = warp >> 2, g = lane >> 2, t = lane & 3;
    for (int e = tid; e < int(sizeof(s.k) / 16); e += NTH)  // k of this item from the next-k tile
      reinterpret_cast<uint4*>(&s.k[0][0])[e] = reinterpret_cast<const uint4*>(&s.kn[0][0])[e];
    const GradItem& cur = s.item[0];      // from the next barrier on
    const GradItem& next = s.item[1];     // when more, from the next barrier on
    constexpr int NL = KT * V / 4 / NTH;  // 4-element groups per thread and key tile
    float4 pd[NL];
    uint2 ps[NL];
    const auto fetch = [&](int it) {  // S0 / dS key tile it into registers
      const float* dSg = a.dS + cur.cp.rec * (K * V);
      const __nv_bfloat16* S0g = reinterpret_cast<const __nv_bfloat16*>(a.S0) + cur.cp.rec * (K * V);
#pragma unroll
      for (int l = 0; l < NL; ++l) {
        const int e = tid + l * NTH, o = (it * KT + e / (V / 4)) * V + 4 * (e % (V / 4));
        pd[l] = *reinterpret_cast<const float4*>(dSg + o);
        ps[l] = *reinterpret_cast<const uint2*>(S0g + o);
      }
    };
    {  // U and dU (raw fp32 in F1 / F2), split there once; the record rows
      float4 u[NU], du[NU];
#pragma unroll
      for (int l = 0; l < NU; ++l) u[l] = Uraw[tid + l * NTH], du[l] = dUraw[tid + l * NTH];
      if (tid < kC) s.gam[tid] = s.nrows[0][tid], s.rq[tid] = s.nrows[1][tid], s.rk[tid] = s.nrows[2][tid];
      if (tid < kC) s.b[tid] = s.nrows[3][tid];
      __syncthreads();  // every raw element and the next-k tile read before they are overwritten
      if (more) {       // the next item's k: in flight during the whole item
        load_k(next);
        cp_async_commit();
      }
#pragma unroll
      for (int l = 0; l < NU; ++l) {
        const int e = tid + l * NTH, o = (e / (V / 4)) * LF + 4 * (e % (V / 4));
        store_split2(&s.F1[0][0][0], &s.F1[1][0][0], o, u[l].x, u[l].y);
        store_split2(&s.F1[0][0][0], &s.F1[1][0][0], o + 2, u[l].z, u[l].w);
        store_split2(&s.F2[0][0][0], &s.F2[1][0][0], o, du[l].x, du[l].y);
        store_split2(&s.F2[0][0][0], &s.F2[1][0][0], o + 2, du[l].z, du[l].w);
      }
    }
    __syncthreads();
    if (tid < kC) {  // (nv and the item's other fields are read from s.item where used, not held in registers)
      const int nv = cur.cp.nv;
      s.eg[tid] = tid < nv ? expf(s.gam[tid]) : 0.f;
      s.kb[tid] = tid < nv ? expf(s.gam[nv - 1] - s.gam[tid]) : 0.f;
    }
    // The warp's row and column sums of its Z tile (rows r, r + 8 of lane g: zr[0], zr[1]; columns 2t, 2t + 1 of tile
    // nt: zc[nt][0], zc[nt][1]) over its lanes, into zrow[w / 4][] and zcol[w % 4][] (or added there: the same lanes
    // own the same rows and columns every time).
    const auto put_z = [&](float(&zr)[2], float(&zc)[2 * NW][2], bool add) {
      zr[0] = lane_sum<1, 4>(zr[0]);
      zr[1] = lane_sum<1, 4>(zr[1]);
      if (t == 0) {
        float* p = &s.zrow[qd][m0 + g];
        p[0] = add ? p[0] + zr[0] : zr[0];
        p[8] = add ? p[8] + zr[1] : zr[1];
      }
#pragma unroll
      for (int nt = 0; nt < 2 * NW; ++nt)
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const float x = lane_sum<4, 32>(zc[nt][u]);
          float* p = &s.zcol[warp & 3][frag_col(CW * qd, nt, lane, u)];
          if (g == 0) *p = add ? *p + x : x;
        }
    };
    // (2) dP = scale Lower(dO U^T); X = dP (.) D; Z = dP (.) P (its row and column sums: zrow, zcol). X enters the
    // products below as X diag(rk) (R0) and diag(rq) X (R1).
    fetch(0);  // S0 / dS key tile 0: in flight during the products before the key loop
    {
      float dp[2 * NW][4] = {}, qk[2 * NW][4] = {}, zr[2] = {0.f, 0.f}, zc[2 * NW][2] = {};
      const int n0 = CW * qd;
      warp_mma_t<false, false, V, NW, 16, kMmaPipelined>(dp, in_tile(s.dO), F1, m0, n0, lane);
      warp_mma_t<false, false, K, NW, 16, kMmaPipelined>(qk, in_tile(s.q), in_tile(s.k), m0, n0, lane);
#pragma unroll
      for (int nt = 0; nt < 2 * NW; ++nt)
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
          const int r2 = frag_row(m0, lane, e), c0 = frag_col(n0, nt, lane, e);
          float xk[2], xq[2];
#pragma unroll
          for (int u = 0; u < 2; ++u) {
            const int c2 = c0 + u;
            float x = 0.f, zz = 0.f;
            if (c2 <= r2) {
              const float D = expf(s.gam[r2] - s.gam[c2]), d = lam * dp[nt][e + u];
              x = d * D;
              zz = d * s.rq[r2] * s.rk[c2] * qk[nt][e + u] * D;
            }
            if (c2 < r2) zr[e >> 1] += zz, zc[nt][u] += zz;
            xk[u] = x * s.rk[c2], xq[u] = x * s.rq[r2];
          }
          store_split2(&sR0[0][0][0], &sR0[1][0][0], r2 * LC + c0, xk[0], xk[1]);
          store_split2(&sR1[0][0][0], &sR1[1][0][0], r2 * LC + c0, xq[0], xq[1]);
        }
      put_z(zr, zc, false);
    }
    __syncthreads();
    // (1) dQ = (dP (.) D) K^ + scale Gamma dO S0^T, dK = (dP (.) D)^T Q^ + diag(kb) U dS^T + ...: the first terms here
    float dq[NK][4] = {}, dk[NK][4] = {}, dw[NK][4];
    warp_mma_t<false, true, kC, K / KS, KS>(dq, R0, in_tile(s.k), m0, 16 * qd, lane);
    warp_mma_t<true, true, kC, K / KS, KS>(dk, R1, in_tile(s.q), m0, 16 * qd, lane);
    __syncthreads();  // R0, R1 are free for the key tiles
    // KT keys at a time (S0 and dS tiles: the first in flight since the item's start, the next during the products):
    //   dQ += scale Gamma dO S0^T, dgamma_r += q^_r . (that term);  dK += diag(kb) dKbar, dKbar = U dS^T,
    //   tau_r = Kbar_r . dKbar_r;  dW = -dU S0^T;  <S0, dS>_F   ((1), (3), (4))
    float gq[2] = {0.f, 0.f}, tp[2] = {0.f, 0.f}, s0ds = 0.f;
    {
#pragma unroll
      for (int it = 0; it < K / KT; ++it) {
#pragma unroll
        for (int l = 0; l < NL; ++l) {  // the tile into shared memory: S0 as is, dS split
          const int e = tid + l * NTH, r = e / (V / 4), j = 4 * (e % (V / 4));
          const float2 s01 = chunk_detail::Elem<true>::unpack(ps[l].x), s23 = chunk_detail::Elem<true>::unpack(ps[l].y);
          s0ds = fmaf(s01.x, pd[l].x, s0ds), s0ds = fmaf(s01.y, pd[l].y, s0ds);
          s0ds = fmaf(s23.x, pd[l].z, s0ds), s0ds = fmaf(s23.y, pd[l].w, s0ds);
          *reinterpret_cast<uint2*>(&S0t[r][j]) = ps[l];
          store_split2(&dSt[0][0][0], &dSt[1][0][0], r * LV + j, pd[l].x, pd[l].y);
          store_split2(&dSt[0][0][0], &dSt[1][0][0], r * LV + j + 2, pd[l].z, pd[l].w);
        }
        __syncthreads();
        if (it + 1 < K / KT) fetch(it + 1);
        float pq[2][4] = {}, pk[2][4] = {}, pw[2][4] = {};
        const InTile<__nv_bfloat16> S0v{&S0t[0][0], LV};
        const SplitTile dSv{&dSt[0][0][0], &dSt[1][0][0], LV};
        // Only pq pipelined (and not for f16, whose dO fragments split in registers): the 48 registers of dq, dk,
        // dw and the next tile's fetch are live here; pipelining pk or pw as well spills.
        warp_mma_t<false, false, V, 1, 16, kBf16 ? kMmaPipelined : kMmaLoop>(pq, in_tile(s.dO), S0v, m0, 16 * qd, lane);
        warp_mma_t<false, false, V, 1, 16>(pk, F1, dSv, m0, 16 * qd, lane);
        warp_mma_t<false, false, V, 1, 16>(pw, F2, S0v, m0, 16 * qd, lane);
#pragma unroll
        for (int u = 0; u < 2; ++u)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = frag_row(m0, lane, e), i = frag_col(KT * it + 16 * qd, u, lane, e), ti = 2 * it + u;
            const float qi = lam * s.eg[row] * pq[u][e];
            dq[ti][e] += qi;
            gq[e >> 1] = fmaf(s.rq[row] * tof(s.q[row][i]), qi, gq[e >> 1]);
            dk[ti][e] = fmaf(s.kb[row], pk[u][e], dk[ti][e]);
            tp[e >> 1] = fmaf(s.kb[row] * s.rk[row] * tof(s.k[row][i]), pk[u][e], tp[e >> 1]);
            dw[ti][e] = -pw[u][e];
          }
        __syncthreads();  // the tiles are consumed
      }
    }
    if (more) {  // q and dO are consumed
      load_q_do(next);
      cp_async_commit();
    }
    // A row's partial sum (rows g, g + 8 of the warp's tile: x[0], x[1]) over its 4 lanes, into part[q][half].
    const auto put_rows = [&](int q, int half, float(&x)[2]) {
      x[0] = lane_sum<1, 4>(x[0]);
      x[1] = lane_sum<1, 4>(x[1]);
      if (t == 0) part[q][half][m0 + g] = x[0], part[q][half][m0 + g + 8] = x[1];
    };
    put_rows(0, qd, gq);
    put_rows(1, qd, tp);
    s0ds = lane_sum<1, 32>(s0ds);
    if (lane == 0) s.red[warp] = s0ds;
#pragma unroll
    for (int ti = 0; ti < NK; ++ti)  // dW into F1 (U is consumed)
#pragma unroll
      for (int e = 0; e < 4; e += 2)
        store_split2(&s.F1[0][0][0], &s.F1[1][0][0],
                     frag_row(m0, lane, e) * LF + frag_col(16 * qd, 0, lane, e) + KS * (ti / 2) + 8 * (ti % 2),
                     dw[ti][e], dw[ti][e + 1]);
    __syncthreads();
    // (5) A^T dW:  dK += diag(b Gamma) A^T dW;  dbeta_r, dgamma_r += (b_r) e^{gamma_r} k^_r . (A^T dW)_r
    {
      float at[NK][4] = {}, kd[2] = {0.f, 0.f};
      warp_mma_t<true, true, kC, K / KS, KS>(at, At, F1, m0, 16 * qd, lane);
#pragma unroll
      for (int ti = 0; ti < NK; ++ti)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = frag_row(m0, lane, e), i = frag_col(KS * (ti / 2) + 16 * qd, ti % 2, lane, e);
          dk[ti][e] = fmaf(s.b[row] * s.eg[row], at[ti][e], dk[ti][e]);
          kd[e >> 1] = fmaf(s.rk[row] * tof(s.k[row][i]), at[ti][e], kd[e >> 1]);
        }
      put_rows(2, qd, kd);
    }
    {  // A^T dU:  dV = diag(b) A^T dU;  dbeta_r += v_r . (A^T dU)_r (warp w: the value columns of group w / 4)
      constexpr int NT = V / (8 * NQ);
      float acc[NT][4] = {}, vp[2] = {0.f, 0.f};
      const int n0v = (V / NQ) * qd;
      warp_mma_t<true, true, kC, NT / 2, 16>(acc, At, F2, m0, n0v, lane);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; e += 2) {  // (e, e + 1): adjacent columns, one 32-bit store (dv is dense, of type E)
          const int row = frag_row(m0, lane, e), j = frag_col(n0v, nt, lane, e);
          vp[e >> 1] = fmaf(tof(s.v[row][j]), acc[nt][e], vp[e >> 1]);
          vp[e >> 1] = fmaf(tof(s.v[row][j + 1]), acc[nt][e + 1], vp[e >> 1]);
          if (row < cur.cp.nv) {
            E* const o = static_cast<E*>(a.dv) + cur.cp.b * a.dv_sb + (cur.cp.t0 + row) * a.dv_st + cur.h * a.dv_sh + j;
            *reinterpret_cast<uint32_t*>(o) = Storage<E>::from2(s.b[row] * acc[nt][e], s.b[row] * acc[nt][e + 1]);
          }
        }
      put_rows(3, qd, vp);
    }
    // dA_rs = b_s (dU_r . v_s) + b_s e^{gamma_s} (dW_r . k^_s), strictly lower (only that part reaches L), into R0
    {
      float uv[2 * NW][4] = {}, wk[2 * NW][4] = {};
      const int n0 = CW * qd;
      warp_mma_t<false, false, V, NW, 16, kMmaPipelined>(uv, F2, in_tile(s.v), m0, n0, lane);
      warp_mma_t<false, false, K, NW, 16, kMmaPipelined>(wk, F1, in_tile(s.k), m0, n0, lane);
#pragma unroll
      for (int nt = 0; nt < 2 * NW; ++nt)
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
          const int r2 = frag_row(m0, lane, e), c0 = frag_col(n0, nt, lane, e);
          float x[2];
#pragma unroll
          for (int u = 0; u < 2; ++u) {
            const int c2 = c0 + u;
            x[u] = c2 < r2 ? s.b[c2] * (uv[nt][e + u] + s.eg[c2] * s.rk[c2] * wk[nt][e + u]) : 0.f;
          }
          store_split2(&sR0[0][0][0], &sR0[1][0][0], r2 * LC + c0, x[0], x[1]);
        }
    }
    __syncthreads();
    if (more) {  // v, U (F1: dW) and dU (F2) are consumed
      load_v_u(next);
      cp_async_commit();
    }
    {  // (6) Y = A^T dA (A^T is upper, dA strictly lower: the full product is the triangular sum), into R1
      float y[2 * NW][4] = {};
      const int n0 = CW * qd;
      warp_mma_t<true, true, kC, NW, 16, kMmaPipelined>(y, At, R0, m0, n0, lane);
#pragma unroll
      for (int nt = 0; nt < 2 * NW; ++nt)
#pragma unroll
        for (int e = 0; e < 4; e += 2)
          store_split2(&sR1[0][0][0], &sR1[1][0][0], frag_row(m0, lane, e) * LC + frag_col(n0, nt, lane, e), y[nt][e],
                       y[nt][e + 1]);
    }
    __syncthreads();
    // dL = StrictLower(-(A^T dA) A^T) (A^T upper: the full product Y A^T is the sum over c3 <= c2);
    // (7) dbeta_r += sum_s dL_rs E_rs, dL_b = diag(b) dL; (8) Z += dL_b (.) E
    {
      float ya[2 * NW][4] = {}, kk[2 * NW][4] = {}, tb[2] = {0.f, 0.f}, zr[2] = {0.f, 0.f}, zc[2 * NW][2] = {};
      const int n0 = CW * qd;
      warp_mma_t<false, false, kC, NW, 16, kMmaPipelined>(ya, R1, At, m0, n0, lane);
      warp_mma_t<false, false, K, NW, 16, kMmaPipelined>(kk, in_tile(s.k), in_tile(s.k), m0, n0, lane);
#pragma unroll
      for (int nt = 0; nt < 2 * NW; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r2 = frag_row(m0, lane, e), c2 = frag_col(n0, nt, lane, e);
          float x = 0.f;
          if (c2 < r2) {
            const float dl = -ya[nt][e], D = expf(s.gam[r2] - s.gam[c2]);
            const float Ev = s.rk[r2] * s.rk[c2] * kk[nt][e] * D;
            const float tt = dl * Ev;
            x = s.b[r2] * dl * D;
            zr[e >> 1] += s.b[r2] * tt, zc[nt][e & 1] += s.b[r2] * tt;
            tb[e >> 1] += tt;
          }
          Xf[r2][c2] = x;  // R0: dA is consumed
        }
      put_rows(4, qd, tb);
      put_z(zr, zc, true);
    }
    __syncthreads();
    if (more) {  // A is consumed
      load_a(next);
      cp_async_commit();
    }
    for (int e = tid; e < kC * kC / 2; e += NTH) {  // (dL_b (.) D + its transpose) diag(rk), into R1
      const int r2 = e / (kC / 2), c2 = 2 * (e % (kC / 2));
      store_split2(&sR1[0][0][0], &sR1[1][0][0], r2 * LC + c2, (Xf[r2][c2] + Xf[c2][r2]) * s.rk[c2],
                   (Xf[r2][c2 + 1] + Xf[c2 + 1][r2]) * s.rk[c2 + 1]);
    }
    __syncthreads();
    // (7) dK += (dL_b (.) D + (dL_b (.) D)^T) K^
    {
      float acc[NK][4] = {};
      warp_mma_t<false, true, kC, K / KS, KS>(acc, R1, in_tile(s.k), m0, 16 * qd, lane);
#pragma unroll
      for (int ti = 0; ti < NK; ++ti)
#pragma unroll
        for (int e = 0; e < 4; ++e) dk[ti][e] += acc[ti][e];
    }
#pragma unroll
    for (int ti = 0; ti < NK; ++ti)
#pragma unroll
      for (int e = 0; e < 4; e += 2) {
        const int row = frag_row(m0, lane, e), i = frag_col(KS * (ti / 2) + 16 * qd, ti % 2, lane, e);
        if (row < cur.cp.nv) {
          const int64_t o = ((cur.cp.b * a.T + cur.cp.t0 + row) * a.Hv + cur.h) * K + i;
          *reinterpret_cast<float2*>(a.dqh + o) = make_float2(dq[ti][e], dq[ti][e + 1]);
          *reinterpret_cast<float2*>(a.dkh + o) = make_float2(dk[ti][e], dk[ti][e + 1]);
        }
      }
    __syncthreads();
    if (tid < kC) {  // per row r: the row sums of the products and (8) rowsum(Z) - colsum(Z), each group in order
      const int r = tid;
      const auto sum = [&](int q) {  // over the column groups, in order
        float x = part[q][0][r];
        for (int j = 1; j < NQ; ++j) x += part[q][j][r];
        return x;
      };
      float zr = s.zrow[0][r], zc = s.zcol[0][r];
      for (int j = 1; j < NQ; ++j) zr += s.zrow[j][r];
      for (int j = 1; j < 4; ++j) zc += s.zcol[j][r];
      const float kd = sum(2);
      dgam[r] = (sum(0) + s.b[r] * s.eg[r] * kd) + (zr - zc);
      dbeta[r] = (s.eg[r] * kd + sum(3)) + sum(4);
      tau[r] = sum(1);
    } else if (tid == kC && more) {  // the item after the next, into s.item[2] (read after the next item's barrier)
      s.item[2].i = next.i + int(gridDim.x);
      s.more = next_grad_item(a, &s.item[2], int(gridDim.x));
    }
    __syncthreads();
    if (tid == 0) {
      // dgamma_{n-1} += e_n <S0, dS>_F, then (9) dg_r = sum_{j >= r} dgamma_j. The tau terms (dgamma_r -= tau_r,
      // dgamma_{n-1} += sum tau) enter dg_r as the exclusive prefix sum_{j < r} tau_j: the same sum without the O(1)
      // cancellation of tau_{n-1} (which would swamp a tiny dg under a strong decay, g = -30).
      const int nv = cur.cp.nv;
      float sd = 0.f, pre = 0.f;
      for (int i = 0; i < NTH / 32; ++i) sd += s.red[i];
      for (int i = 0; i < nv; ++i) {
        const float tv = tau[i];
        tau[i] = pre;
        pre += tv;
      }
      dgam[nv - 1] += expf(s.gam[nv - 1]) * sd;
      float acc = 0.f;
      for (int i = nv - 1; i >= 0; --i) {
        acc += dgam[i];
        const int64_t row = (cur.cp.b * a.T + cur.cp.t0 + i) * a.Hv + cur.h;
        a.dgh[row] = acc + tau[i];
        a.dbh[row] = dbeta[i];
      }
    }
    if (!more) break;
  }
}

}  // namespace flashgdn::cuda::bwd_detail

// Passes 2 and 3 on wgmma (K = V = 128): built on the chain helpers above (the dstate file includes the state one).
#include "cuda/chunk_bwd/chunk_bwd_dstate_wg.cuh"
// Pass 4 on wgmma (K = V = 128, bf16): pass 4's helpers above.
#include "cuda/chunk_bwd/chunk_bwd_fused.cuh"
#include "cuda/chunk_bwd/chunk_bwd_grads_wg.cuh"

namespace flashgdn::cuda::bwd_detail {

// ---- launch ----------------------------------------------------------------------------------------------------
// Which kernels have had their launch attributes set (prepare_launch), one flag each.
enum : int {
  kDoneDecay,
  kDonePrep,
  kDoneState,
  kDoneStateWg2,
  kDoneStateWg1,
  kDoneDState,
  kDoneDStateWg2,
  kDoneDStateWg1,
  kDoneGrads,
  kDoneGradsWg,
  kDoneGradsWgWalk,
  kDoneFused,
  kDoneChains,
  kDoneChainsPair,
  kDoneCount
};

// pdl: a programmatic dependent launch (cuda_check.cuh) of the kernel before it in the stream
template <class Kernel>
int launch_one(Kernel kernel, dim3 grid, size_t smem, std::atomic<uint64_t>& done, cudaStream_t st,
               const ChunkBwdArgs& a, int threads = kThreads, bool pdl = false) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return 0;
  const int e = prepare_launch(kernel, smem, done);
  if (e != 0) return e;
  if (pdl) return static_cast<int>(launch_pdl(kernel, grid, dim3(unsigned(threads)), smem, st, a));
  kernel<<<grid, threads, smem, st>>>(a);
  return static_cast<int>(cudaGetLastError());
}

// Passes 2 and 3. Unsplit: one CTA per (sequence, value head, kBV columns) walks every chunk. Split (gdn-math §6,
// a.items set): the work list of segments; per chain the summaries [M | N] (augmented columns, (K + V) / kBV CTAs per
// item and head), the scan of the segment boundary states (forward: start states from h0; reverse: end gradients
// from dht), then every segment from its boundary state, all in parallel.
// Pass 2 in the ChainMode set in `a`: on wgmma where the plan chose it (a.state_wg; K = V = 128 only: one warpgroup
// per CTA, the same grid) with the plan's input stages (a.state_stages: 1, two CTAs per SM, or 2), else on mma.sync.
template <class E, int K, int V>
int launch_state(const ChunkBwdArgs& a, dim3 grid, std::atomic<uint64_t>* done, cudaStream_t st) {
  if constexpr (K == 128 && V == 128) {
    if (a.state_wg && a.state_stages == 1)
      return launch_one(chunk_bwd_state_wg_kernel<E, V, 1>, grid, sizeof(StateWgSmem<1>) + 1024, done[kDoneStateWg1],
                        st, a, kStateWgThreads);
    if (a.state_wg)
      return launch_one(chunk_bwd_state_wg_kernel<E, V, 2>, grid, sizeof(StateWgSmem<2>) + 1024, done[kDoneStateWg2],
                        st, a, kStateWgThreads);
  }
  return launch_one(chunk_bwd_state_kernel<E, K, V>, grid, sizeof(StateSmem<E, K>), done[kDoneState], st, a);
}

// Resident CTAs per SM of the wgmma pass 2 with Stages input stages, at the shared memory launch_state gives it.
template <class E, int Stages>
int state_wg_ctas_per_sm(int* ctas) {
  const auto kernel = chunk_bwd_state_wg_kernel<E, 128, Stages>;
  const int smem = int(sizeof(StateWgSmem<Stages>) + 1024);
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e == cudaSuccess) e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas, kernel, kStateWgThreads, smem);
  return static_cast<int>(e);
}

// Pass 3 in the ChainMode set in `a`: on wgmma where the plan chose it (a.dstate_wg = its input stages, 2 or 1;
// K = V = 128 only: one warpgroup per CTA, the same grid), else on mma.sync. Two stages: one CTA per SM (190 KiB),
// the next chunk's inputs land under the whole step; one stage: two CTAs per SM (111 KiB), the inputs land under
// product 2 and the other CTA's work (chunk_bwd_dstate_wg.cuh).
template <class E, int K, int V>
int launch_dstate(const ChunkBwdArgs& a, dim3 grid, std::atomic<uint64_t>* done, cudaStream_t st) {
  if constexpr (K == 128 && V == 128) {
    if (a.dstate_wg == 1)
      return launch_one(chunk_bwd_dstate_wg_kernel<E, V, 1>, grid, sizeof(DStateWgSmem<1>) + 1024, done[kDoneDStateWg1],
                        st, a, kDStateWgThreads);
    if (a.dstate_wg == 2)
      return launch_one(chunk_bwd_dstate_wg_kernel<E, V, 2>, grid, sizeof(DStateWgSmem<2>) + 1024, done[kDoneDStateWg2],
                        st, a, kDStateWgThreads);
  }
  return launch_one(chunk_bwd_dstate_kernel<E, K, V>, grid, sizeof(DStateSmem<E, K>), done[kDoneDState], st, a);
}

// Both chains in one launch (a.chains_concurrent, K = V = 128; chunk_bwd_chains_wg_kernel says why), `g` the state
// chain's grid: kChainsTwoCtas adds the dstate chain's V / 32 column tiles (its summaries too: N columns alone) in z
// before it, kChainsOneCta runs the dstate chain's tile z beside the state chain's in each CTA.
template <class E, int K, int V>
int launch_both(const ChunkBwdArgs& a, dim3 g, std::atomic<uint64_t>* done, cudaStream_t st) {
  if constexpr (K == 128 && V == 128) {
    constexpr size_t s1 = sizeof(StateWgSmem<1>), d1 = sizeof(DStateWgSmem<1>);
    if (a.chains_concurrent == kChainsOneCta)
      return launch_one(chunk_bwd_chains_pair_kernel<E, V>, g, d1 + s1 + 1024, done[kDoneChainsPair], st, a,
                        kChainsThreads);
    return launch_one(chunk_bwd_chains_wg_kernel<E, V>, dim3(g.x, g.y, g.z + V / kBV), (s1 > d1 ? s1 : d1) + 1024,
                      done[kDoneChains], st, a, kDStateWgThreads);
  }
  return static_cast<int>(cudaErrorInvalidValue);  // the plan sets chains_concurrent at K = V = 128 only
}

template <class E, int K, int V>
int launch_chains(const ChunkBwdArgs& a0, std::atomic<uint64_t>* done, cudaStream_t st) {
  ChunkBwdArgs a = a0;
  const bool both = a.chains_concurrent != 0;
  if (a.items == nullptr) {
    a.chain_mode = kChainWhole;
    const dim3 seqs(unsigned(a.N), unsigned(a.Hv), unsigned(V / kBV));
    if (both) return launch_both<E, K, V>(a, seqs, done, st);
    int e = launch_state<E, K, V>(a, seqs, done, st);
    return e == 0 ? launch_dstate<E, K, V>(a, seqs, done, st) : e;
  }
  ChunkKernelArgs sc{};  // the scan's fields
  sc.items = a.items, sc.items_cap = a.items_cap, sc.N = a.N, sc.Hv = a.Hv, sc.V = V;
  sc.state_vmajor = a.state_vmajor;
  int e = static_cast<int>(launch_chunk_index(a.cu_seqlens, a.cu_i64, a.N, a.T, a.seg_chunks,
                                              const_cast<ChunkWorkItem*>(a.items), a.items_cap, a.seq_first, st));
  const dim3 items(unsigned(a.items_cap), unsigned(a.Hv), unsigned(V / kBV));
  const dim3 sums(unsigned(a.items_cap), unsigned(a.Hv), unsigned((K + V) / kBV));
  // the scan of one chain: forward start states from h0 over a.mn, reverse end gradients from dht over a.mn_rev
  const auto scan = [&](int dir) {
    sc.mn = dir == 0 ? a.mn : a.mn_rev;
    sc.mt = dir == 1 ? a.mn : nullptr;  // the forward summaries' M, transposed
    if (dir == 0)
      sc.h0 = a.h0, sc.h0_sn = a.h0_sn, sc.h0_sh = a.h0_sh, sc.h0_sr = a.h0_sr;
    else
      sc.h0 = a.dht, sc.h0_sn = a.dht_sn, sc.h0_sh = a.dht_sh, sc.h0_sr = a.dht_sr;
    return static_cast<int>(launch_chunk_scan(sc, a.seq_first, K, dir == 1, st));
  };
  if (both) {  // summaries of both chains, both scans, every segment of both chains
    a.chain_mode = kChainSummary;
    if (e == 0) e = launch_both<E, K, V>(a, sums, done, st);
    if (e == 0) e = scan(0);
    if (e == 0) e = scan(1);
    a.chain_mode = kChainSplit;
    if (e == 0) e = launch_both<E, K, V>(a, items, done, st);
    return e;
  }
  for (int dir = 0; dir < 2 && e == 0; ++dir) {
    a.chain_mode = kChainSummary;
    e = dir == 0 ? launch_state<E, K, V>(a, sums, done, st) : launch_dstate<E, K, V>(a, items, done, st);
    if (e == 0) e = scan(dir);
    a.chain_mode = kChainSplit;
    if (e == 0) e = dir == 0 ? launch_state<E, K, V>(a, items, done, st) : launch_dstate<E, K, V>(a, items, done, st);
  }
  return e;
}

template <class E, int K, int V>
int launch_passes(const ChunkBwdArgs& a, PassRange range, void* stream) {
  static std::atomic<uint64_t> done[kDoneCount];  // per kernel: its launch attributes are set
  const auto st = static_cast<cudaStream_t>(stream);
  const dim3 chunks(unsigned(a.slots), unsigned(a.Hv)), seqs(unsigned(a.N), unsigned(a.Hv), unsigned(V / kBV));
  int e = 0;
  if (range & kPassesFront) {
    if (a.dec || a.beta_big)  // pass 0: the decay table and the beta flag, which prep reads
      e = launch_one(chunk_bwd_decay_kernel<E>, dim3(unsigned(a.slots), unsigned((a.Hv + 7) / 8)), 2 * 8 * kC * 4,
                     done[kDoneDecay], st, a, 256);
    if (e == 0)
      e = launch_one(chunk_bwd_prep_kernel<E, K, V>, chunks, sizeof(PrepSmem<E, K, V>), done[kDonePrep], st, a);
  }
  if (e != 0 || !(range & kPassesBack)) return e;
  if (a.slots > 0) e = launch_chains<E, K, V>(a, done, st);
  if (e == 0 && a.slots == 0)  // no chunk at all: only dh0 = dht (or 0), from the unsplit reverse chain
    e = launch_one(chunk_bwd_dstate_kernel<E, K, V>, seqs, sizeof(DStateSmem<E, K>), done[kDoneDState], st, a);
  if constexpr (K == 128 && V == 128 && std::is_same_v<E, __nv_bfloat16>) {
    if (e == 0 && a.fused_walk > kFusedMaxWalk) return static_cast<int>(cudaErrorInvalidValue);  // the walk table
    // Pass 4 fused with the reverse chain: one CTA per (walk, value head), in pairs of a q/k head's value heads
    // where a.fused_cluster says so; a programmatic dependent of the chains where it follows them (a.follow: right
    // after one CTA of both chains)
    if (e == 0 && a.fused_walk > 0)
      e = launch_one(chunk_bwd_fused_kernel<E>,
                     dim3(unsigned((a.slots + a.fused_walk - 1) / a.fused_walk), unsigned(a.Hv)),
                     sizeof(FusedSmem) + 1024, done[kDoneFused], st, a, kFusedThreads, a.follow);
    // Pass 4 on wgmma: one CTA per (chunk slot, q/k head), its value heads in turn. Beside the fused pass it runs
    // instead where a beta exceeds 1 (prep's flag: each returns at once when it is not its turn), with its own dq / dk
    // scratch heads (the wgmma pass's own args otherwise: the same fields).
    if (e == 0 && (a.grads_wg || a.fused_walk > 0)) {
      ChunkBwdArgs ag = a;
      ag.grads_wg = 1;
      ag.dqk_heads = int32_t(a.Hqk);
      const dim3 grid(unsigned(a.slots), unsigned(a.Hqk));
      if (a.group > 1)
        return launch_one(chunk_bwd_grads_wg_kernel<E, true>, grid, sizeof(GradWgSmem) + 1024, done[kDoneGradsWgWalk],
                          st, ag, kGradWgThreads);
      return launch_one(chunk_bwd_grads_wg_kernel<E, false>, grid, sizeof(GradWgSmem) + 1024, done[kDoneGradsWg], st,
                        ag, kGradWgThreads);
    }
  }
  if (e == 0) {  // pass 4: persistent, one CTA per SM (and none without an item)
    int dev = 0;
    e = static_cast<int>(cudaGetDevice(&dev));
    const int64_t items = a.slots * a.Hv, sms = device_sm_count(dev);
    if (e == 0)
      e = launch_one(chunk_bwd_grads_kernel<E, K, V>, dim3(unsigned(items < sms ? items : sms)),
                     sizeof(GradSmem<E, K, V>), done[kDoneGrads], st, a, kGradThreads);
  }
  return e;
}

template <class E>
int launch_passes_for(const ChunkBwdArgs& a, int64_t K, int64_t V, PassRange r, void* stream) {
  if (K == 64 && V == 64) return launch_passes<E, 64, 64>(a, r, stream);
  if (K == 64 && V == 128) return launch_passes<E, 64, 128>(a, r, stream);
  if (K == 128 && V == 64) return launch_passes<E, 128, 64>(a, r, stream);
  if (K == 128 && V == 128) return launch_passes<E, 128, 128>(a, r, stream);
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace flashgdn::cuda::bwd_detail
