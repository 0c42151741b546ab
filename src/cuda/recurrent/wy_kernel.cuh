// The "wy" recurrent kernel family: multi-token decode and speculative verify on K-major states through the
// chunked (WY) form over a row's tokens (gdn-math §5 with C = kChunk = 8 tokens per chunk, two chunks staged per
// round), same semantics and arguments (RecurrentArgs) as recurrent_kernel.cuh / direct_kernel.cuh.
//
// Why: the token-serial kernels pay a latency chain per token (reduction over K -> shuffles -> barrier -> u ->
// update, ~1600 cycles). Here one pass over the register-resident state tile computes S0^T k_t and S0^T q'_t
// for all tokens of the chunk (2C reductions batched: one cross-thread reduction, one barrier), every (token,
// column) then gives u_t and o_t as two independent sums, and the state is advanced without any reduction:
//
//   gamma_t = g_0 + ... + g_t (within the chunk, fp32), decays only as exp(gamma_t - gamma_s), t >= s (§5.8)
//   A[t][s] = beta_t e^{gamma_t - gamma_s} (k_t.k_s) (s < t),  B[t][s] = e^{gamma_t - gamma_s} (q'_t.k_s) (s <= t)
//   r_t = beta_t v_t - beta_t e^{gamma_t} S0^T k_t,   T = (I + A)^{-1}   (q' = scale q^)
//   u_t = r_t - sum_{s<t} A[t][s] u_s = (T r)_t                                               (§5.3)
//   o_t = e^{gamma_t} S0^T q'_t + sum_{s<=t} B[t][s] u_s = e^{gamma_t} S0^T q'_t + (B T r)_t
//   S_t = alpha_t S_{t-1} + k_t u_t^T                         (walk: per-token states are stored)
//   S_C = e^{gamma_C} S0 + sum_s k_s (e^{gamma_C - gamma_s} u_s)^T   (closed form: final state only)
// T and B T depend on the tokens only: they are formed once per staging round (and row: the V-tiles of a grouped
// row share them) off the state's critical path, T by forward substitution (the row recurrence of §5.7, never the
// doubling inverse; unit lower triangular, |T| <= max beta for C = 8). u_t is the token-serial
// u_t = beta_t (v_t - alpha_t S_{t-1}^T k_t) (to fp32 rounding), so the walk reproduces the recurrence (2a)/(2b).
//
// Work split: grid = N x Hv x (V / BV) CTAs of 128 threads, one (row, head, V-tile) tile per CTA, the K x BV
// tile in fp32 registers. Thread (row group rg, column group c) holds P contiguous rows i0 = rg P .. + P - 1 and
// 4 columns j0 + 4c .. + 3 (16-byte fp32 / 8-byte 16-bit vectors; 4 threads x 128 B rows per warp load).
// BV = 16, 32 (4 CTAs per SM) or 64 (3 CTAs per SM, P = 16 at K = 128): the plan takes 64 for per-token 16-bit
// state stores, whose 128-byte tile rows are whole L2 lines (a 32-column tile writes 64-byte halves of lines).
//   1. stage (per warp, tokens t = warp, warp + 4, ..): q', k^ (l2norm in fp32) into s_tok, g, beta, v slice,
//      protocol-A write slots; every load of the superchunk (both chunks) in one round, and a tile's first
//      superchunk's before its state is waited for. Barrier. Token dots (per warp, its tokens): k_t.k_s and
//      q'_t.k_s for all s (lane slices, one 32-value reduce-scatter), scaled branch-free into A[t][s] (stored
//      transposed), B[t][s]; per-token decay scalars. Barrier. T (forward substitution in column order) and B T by
//      warp 0 (lane = a column of a chunk's T) while the other warps go on.
//   2. state reduction: sum over the thread's rows of S0 k_t, S0 q'_t, GR tokens at a time, reduce-scatter over
//      the NL lanes that share the columns, per-warp partials to shared memory. Barrier. Both reduce-scatters are
//      presorted (wy::rs_sum: operands loaded permuted, no selects).
//   3. columns (every thread, C BV / 128 (token, column) pairs): sum the 4 warp partials into r_t and
//      e^{gamma_t} S0^T q'_t. Barrier. u_t = (T r)_t and o_t; the state weights (u, or the closed-form
//      e^{gamma_C - gamma_t} u) to shared memory. Barrier.
//   4. state (every thread, its own rows): walk or closed form from k_t and the weights (shared); the walk's
//      per-token states go out as 16-byte stores (8-byte 16-bit ones at 64 columns: wy::store_rows), or, 16-bit at
//      64 columns, as one TMA box per warp and token from a ring of shared-memory boxes (wy::kInterRing).
// Three barriers per chunk of 8 tokens, each after a phase that every warp shares (plus two per staging round);
// sums in a fixed order: bitwise reproducible. A tile is owned by one CTA and read whole before its first store
// (protocol A is safe, §8.2). V-major states are not covered (the reduction over K would be across lanes):
// recurrent.cu / wy_launch.cu send them to the persistent kernel.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <type_traits>

#include "cuda/common/cuda_check.cuh"
#include "cuda/common/device_util.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/recurrent/recurrent_args.hpp"

namespace flashgdn::cuda {
namespace wy {

inline constexpr int kThreads = 128;
inline constexpr int kWarps = kThreads / 32;
inline constexpr int kChunk = 8;  // tokens per pass (C); longer rows take several passes
// CTAs per SM (__launch_bounds__): 4 (128 registers per thread) for tiles of 16 and 32 columns; 3 (168 registers,
// 3 x ~74 KB of shared memory at most) for 64 columns, whose 64 fp32 state values a thread do not fit 128.
template <int BV>
inline constexpr int kMinBlocks = BV == 64 ? 3 : 4;

template <int K, int BV>
struct Geo {
  static constexpr int TPR = BV / 4;          // threads per state row (4 columns each)
  static constexpr int NL = 32 / TPR;         // lanes of a warp that share a column group
  static constexpr int RPP = kThreads / TPR;  // row groups per CTA
  static constexpr int P = K / RPP;           // contiguous rows per thread
  // Tokens per batch of reduction accumulators (2 x 4 x GR registers); the reduce-scatter over the NL lanes
  // then leaves each lane KEEP = 2 x 4 x GR / NL consecutive flat indices [kind][token][column]: 2 or 4 columns of
  // one (kind, token), or at 64 columns (NL = 2) the 4 columns of both tokens of one kind.
  static constexpr int GR = 2;
  static constexpr int KEEP = 2 * 4 * GR / NL;
  static_assert(KEEP == 2 || KEEP == 4 || (KEEP == 8 && GR == 2),
                "a lane keeps a 2- or 4-column vector, or two 4-column ones");
  static_assert(P % 4 == 0, "rows per thread: a multiple of 4 (16-byte shared loads)");
  static_assert(K / 4 <= 32, "one warp stages a token (4 elements per lane)");
};
// The next tile's state stage (dynamic shared memory): P vectors of 4 elements per thread.
template <class ST, int K, int BV>
inline constexpr size_t kStageBytes = size_t(Geo<K, BV>::P) * kThreads * 4 * sizeof(ST);
// The per-warp reduction partials (s_red, [kWarps][2][kChunk][BV] fp32), in dynamic shared memory after the stage.
template <int BV>
inline constexpr size_t kRedBytes = size_t(kWarps) * 2 * kChunk* BV * 4;

// The walk's per-token 16-bit states at 64 columns (K = 128) by TMA: a warp's piece of a token's state, its 32 rows x
// 64 columns, is written to a shared-memory box (4 KB, row-major) and lane 0 stores the box with one
// cp.async.bulk.tensor, so that the 4 KB leave through the TMA unit instead of 16 st.global per lane in the LSU queue
// that the other warps' shared loads and shuffles wait in. A ring of kInterRing boxes per warp: the box of ring
// position q is rewritten only after the store that read it is kInterRing groups old (wait_group.read
// kInterRing - 1), so a store has kInterRing - 1 tokens of the walk to read its box. Position 0 is the warp's
// reduction partials s_red[warp] (4 KB at 64 columns, dead during the walk), positions 1 .. kInterRing - 1 follow s_red
// in dynamic shared memory. Shared memory at 64 columns, K = 128, ring 2 (static 24.6 KB, stage 16 KB for 16-bit
// pools and 32 KB for fp32 ones, s_red 16 KB, the ring 16 KB; 1 KB reserved per CTA, 228 KB per SM): 16-bit pools
// 73.6 KB (3 CTAs per SM), fp32 pools 89.6 KB (2 CTAs per SM; the launcher's grid follows). Verify T = 12 N = 256
// (fp32 pool, bf16 states) on the H200: 1.240-1.242 ms against 1.262-1.272 with store_rows; a ring of 3 measured the
// same as 2.
inline constexpr int kInterRing = 2;
static_assert(kInterRing >= 2, "a ring of at least 2 boxes per warp (ring position 0 is the warp's partials)");
inline constexpr size_t kBoxBytes = 32 * 64 * 2;  // a warp's 32 rows x 64 columns of 16-bit elements
static_assert(kRedBytes<64> == kWarps * kBoxBytes, "a warp's reduction partials hold one box");
inline constexpr size_t kRingBytes = size_t(kInterRing - 1) * kWarps * kBoxBytes;  // positions 1 .. kInterRing - 1
// The tensor map of the intermediate states for the TMA stores ([N_buf, T_buf, Hv, K, V] as a 5-d map, box 64 x 32
// x 1 x 1 x 1, no swizzle), a __grid_constant__ kernel parameter; on = 0: store_rows.
struct InterMap {
  alignas(128) unsigned char map[128];
  int32_t on;
};
static_assert(sizeof(CUtensorMap) == sizeof(InterMap::map) && alignof(CUtensorMap) == 128);

// Register pressure (128 per thread): what is derived from an opaque copy is recomputed where it is used instead of
// being hoisted out of the tile loop and kept live (or spilled) through the staging, the kernel's register peak.
__device__ __forceinline__ int opaque(int x) {
  asm volatile("mov.b32 %0, %0;" : "+r"(x));
  return x;
}
__device__ __forceinline__ int32_t grid_ctas() {  // gridDim.x, read where it is used
  int32_t g;
  asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(g));
  return g;
}

// P contiguous floats of shared memory (16-byte aligned).
template <int P>
__device__ __forceinline__ void ld_rows(const float* p, float (&x)[P]) {
#pragma unroll
  for (int m = 0; m < P; m += 4) {
    const float4 v = *reinterpret_cast<const float4*>(p + m);
    x[m] = v.x, x[m + 1] = v.y, x[m + 2] = v.z, x[m + 3] = v.w;
  }
}

// Reduce-scatter over the lanes that differ in the lane bits [LO, 32): on entry x[0, H) are a lane's partial
// sums; on exit lane l holds in x[0, M / NL) the full sums of the flat indices (l / LO) M / NL + m (NL = 32 / LO).
// Each step halves the vector: the lane with the step bit set keeps the upper half, H / 2 shuffles per step.
// Presorted flat bits (PRE): the caller loaded its operands so that the lane's x[f] holds the flat index
// f ^ (its own kept index & PRE); at a step on such a bit every lane keeps x[0, H / 2) and sends x[H / 2, H), with
// the same operands in the same order as the selecting step (bitwise equal) and no selects.
template <int H, int MASK, int LO, int PRE, int M>
__device__ __forceinline__ void rs_sum(float (&x)[M], int lane) {
  if constexpr (MASK >= LO && H >= 2) {
    if constexpr ((PRE & (H / 2)) != 0) {
#pragma unroll
      for (int m = 0; m < H / 2; ++m) x[m] = x[m] + __shfl_xor_sync(0xffffffffu, x[m + H / 2], MASK);
    } else {
      const bool up = (lane & MASK) != 0;
#pragma unroll
      for (int m = 0; m < H / 2; ++m) {
        const float send = up ? x[m] : x[m + H / 2];
        const float keep = up ? x[m + H / 2] : x[m];
        x[m] = keep + __shfl_xor_sync(0xffffffffu, send, MASK);
      }
    }
    rs_sum<H / 2, MASK / 2, LO, PRE>(x, lane);
  }
}

// The thread's state (rows i0 .. i0 + P - 1, columns 4c .. 4c + 3 of the tile, fp32) to a K-major state of storage
// type T in 16-byte stores, each element rounded once from fp32 (the cvt of store4). fp32: one store per row.
// 16-bit: the lanes c and c ^ 1 (same rows, adjacent 4-column groups) trade half rows so that each stores 8
// contiguous elements of one row: of the rows (m, m + 1) the even lane stores row m, the odd lane row m + 1, both at
// columns 8 (c / 2) .. + 7; one shuffle per 32-bit word, the lane sends the half row its partner stores:
//   even lane: row m     = {own x_m, partner's x_m}              sends its x_{m + 1}
//   odd lane:  row m + 1 = {partner's x_{m + 1}, own x_{m + 1}}  sends its x_m
// 16-bit at 64 columns (TPR = 16 threads per row): no trade; each lane stores its own 4 elements (8 bytes) of each
// row, so the 16 lanes of a row group write the row's 128 bytes, a whole line, in one instruction (a warp's store:
// 2 lines), per row 2 F2FP + 1 STG.64 instead of 2 F2FP + 3 SEL + 1 SHFL + half an STG.128; the same bits.
// dst: the thread's element (i0, 4c); rs: the row stride in elements. Every lane of the warp calls it.
template <class T, int P, int TPR>
__device__ __forceinline__ void store_rows(T* dst, int64_t rs, const float (&s)[P][4], bool odd) {
  if constexpr (std::is_same_v<T, float>) {
#pragma unroll
    for (int p = 0; p < P; ++p)
      st_global_v4(dst + p * rs, __float_as_uint(s[p][0]), __float_as_uint(s[p][1]), __float_as_uint(s[p][2]),
                   __float_as_uint(s[p][3]));
  } else if constexpr (TPR == 16) {
#pragma unroll
    for (int p = 0; p < P; ++p)
      st_global_v2(dst + p * rs, Storage<T>::from2(s[p][0], s[p][1]), Storage<T>::from2(s[p][2], s[p][3]));
  } else {
    dst += odd ? rs - 4 : 0;  // the odd lane's element (i0 + 1, 4c - 4)
#pragma unroll
    for (int m = 0; m < P; m += 2) {
      const uint32_t x0 = Storage<T>::from2(s[m][0], s[m][1]), x1 = Storage<T>::from2(s[m][2], s[m][3]);
      const uint32_t y0 = Storage<T>::from2(s[m + 1][0], s[m + 1][1]), y1 = Storage<T>::from2(s[m + 1][2], s[m + 1][3]);
      const uint32_t z0 = __shfl_xor_sync(0xffffffffu, odd ? x0 : y0, 1);
      const uint32_t z1 = __shfl_xor_sync(0xffffffffu, odd ? x1 : y1, 1);
      st_global_v4(dst + m * rs, odd ? z0 : x0, odd ? z1 : x1, odd ? y0 : z0, odd ? y1 : z1);
    }
  }
}
// One token's raw activations for the staging warp (lane slice of q and k, scalars).
// A token's loads as bits (load4_bits / load1_bits): every token's loads of a staging round are issued before the
// first is widened (a widening inside a load's dtype branch makes the next load wait a round trip).
struct TokRaw {
  uint4 q, k;
  uint32_t g, be;
};
// A superchunk's loads as bits (NT tokens of the staging warp, NV v vectors of the thread, the head's gate
// parameters, a protocol-A write slot).
template <int NT, int NV>
struct Loads {
  TokRaw tok[NT];
  uint4 v[NV];
  uint32_t alog, dtb;
  int64_t ws;
};

}  // namespace wy

// A tile's row: coordinates, token range, slot, validity (gdn-math §8.1, §8.2). The first-level index loads
// (issue) are separated from their use (resolve) so that the next tile's loads fly during this tile's math.
// 32-bit fields (registers: two rows are live at once): token positions are < 2^31 and a valid slot or buffer
// index is below a tensor extent of >= 8 KB entries; out-of-range index values are mapped to -1 (invalid) in
// 64-bit arithmetic before the narrowing, so the semantics are those of the 64-bit values.
struct WyRow {
  int32_t tile = 0, n = 0, h = 0, hq = 0, b = 0, bos = 0, len = 0, slot = -1, ibuf = -1, j0 = 0;
  bool valid = true, load = false, walk = false;
};
struct WyIdx {
  int32_t bos = 0, eos = 0, idx = 0, ib = 0;
};

// The state reductions (S0^T k_t, S0^T q'_t) and the update are CUDA-core FMAs over the thread's P rows x 4 columns.
template <class ST, int K, int BV>
__global__ void __launch_bounds__(wy::kThreads, wy::kMinBlocks<BV>)
    recurrent_wy_kernel(const RecurrentArgs a, const __grid_constant__ wy::InterMap im) {
  using G = wy::Geo<K, BV>;
  constexpr int TPR = G::TPR, P = G::P;
  constexpr int C = wy::kChunk, GR = G::GR, NW = wy::kWarps;
  constexpr int SC = 2 * C, NCH = SC / C;  // tokens staged at once (a superchunk) and its chunks
  constexpr int TPW = C / NW;              // tokens per warp in one staging half (C tokens)
  constexpr int M = 2 * GR * 4;            // reduction accumulators: [kind (k, q')][token of the group][4 columns]
  static_assert(C % GR == 0 && C <= 32, "whole reduction batches per chunk");
  constexpr int NV = (SC * TPR + wy::kThreads - 1) / wy::kThreads;  // v 4-vectors per thread and superchunk
  static_assert(C * BV % wy::kThreads == 0 && 2 * C <= 32,
                "whole (token, column) pairs per thread; a lane per T column");
  // the walk's 16-bit per-token states by TMA (wy::kInterRing; im.on where the launcher encoded the map)
  constexpr bool kTma = BV == 64 && K == 128;
  constexpr int RING = wy::kInterRing;
  static_assert(!kTma || (32 / TPR) * P == 32, "a warp's rows: one 32-row box");

  // Token data are indexed by the token's position in the superchunk (chunk ch = t / C); gamma restarts at
  // every chunk.
  // next tile's state, each thread's own vectors (P of 4 elements): dynamic shared memory (wy::kStageBytes; at 64
  // columns the static arrays below and a 32 KB fp32 stage exceed the 48 KB of static shared memory); then s_red and
  // the TMA boxes of the ring (wy::kInterRing; 128-byte aligned boxes)
  extern __shared__ __align__(128) unsigned char s_dyn[];
  auto s_stage = reinterpret_cast<ST(*)[wy::kThreads][4]>(s_dyn);
  // per-warp partials of S0^T k_t, S0^T q'_t; then (columns phase) [0][0] r_t, [0][1] e^{gamma_t} S0^T q'_t
  auto s_red = reinterpret_cast<float(*)[2][C][BV]>(s_dyn + wy::kStageBytes<ST, K, BV>);
  __shared__ __align__(16) float s_tok[2][SC][K];  // [0] q' = scale q^, [1] k^; zeros past the end
  __shared__ __align__(16) float s_u[C][BV];       // u_t (walk) or e^{gamma_C - gamma_t} u_t (closed form)
  __shared__ __align__(16) float s_v[SC][BV];      // v_t of the tile's columns
  __shared__ __align__(16) float s_A[NCH][C][C];  // A^T [s][t], A[t][s] = beta_t e^{gamma_t - gamma_s} (k_t.k_s), s < t
  __shared__ __align__(16) float s_B[NCH][C][C];  // e^{gamma_t - gamma_s} (q'_t.k_s), s <= t
  __shared__ __align__(16) float s_T[NCH][C][C];  // T = (I + A)^{-1} (unit lower triangular)
  __shared__ __align__(16) float s_BT[NCH][C][C];  // B T (lower triangular)
  __shared__ float s_g[SC], s_be[SC];
  __shared__ float s_cu[SC];    // beta_t e^{gamma_t}
  __shared__ float s_d[SC];     // e^{gamma_t}
  __shared__ float s_e[SC];     // e^{gamma_last - gamma_t}
  __shared__ float s_al[SC];    // alpha_t = e^{g_t}
  __shared__ int64_t s_ws[SC];  // protocol A: slot the state after token t goes to (-1: none)
  __shared__ WyRow s_row[2];    // this tile's and the next tile's row (uniform: kept here, not in registers)

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int c = tid % TPR;  // column group: columns j0 + 4c .. + 3
  const int i0 = (tid / TPR) * P;
  const int rk = lane / TPR;  // rank among the NL lanes that share c (reduce-scatter)
  // store_rows' lane parity (c & 1 = tid & 1): derived where it is used (registers)
  auto odd = [&] { return (wy::opaque(tid) & 1) != 0; };
  const int nvt = a.V / BV;
  const int32_t ntiles = int32_t(a.N * a.Hv * nvt);  // < 2^31 (the launcher checks)

  // ---- first-level index loads of a tile: cu_seqlens, 1-D slot or accepted count, buffer index ----
  auto issue = [&](int32_t tile) {
    const int64_t n = uint32_t(tile) / uint32_t(nvt) / uint32_t(a.Hv);  // unsigned 32-bit divisions (0 <= tile < 2^31)
    int64_t cu0 = 0, cu1 = a.T, idx = n, ib = n;
    if (a.varlen) cu0 = load_index(a.cu_seqlens, a.cu_i64, n), cu1 = load_index(a.cu_seqlens, a.cu_i64, n + 1);
    if (a.T_max > 0)
      idx = a.num_accepted ? load_index(a.num_accepted, a.na_i64, n * a.na_s) : 1;
    else if (a.state_indices)
      idx = load_index(a.state_indices, a.si_i64, n * a.si_s[0]);
    if (a.inter && a.inter_indices) ib = load_index(a.inter_indices, a.ii_i64, n * a.ii_s);
    // clamp cu_seqlens into [0, T], monotone (a garbage table stays in bounds); invalid indices -> -1
    WyIdx x;
    const int64_t bos = cu0 < 0 ? 0 : (cu0 > a.T ? a.T : cu0);
    x.bos = int32_t(bos), x.eos = int32_t(cu1 < bos ? bos : (cu1 > a.T ? a.T : cu1));
    const int64_t lim = a.T_max > 0 ? a.T_max + 1 : a.slots;  // accepted count <= T_max, or a slot
    x.idx = int32_t(idx >= 0 && idx < lim ? idx : -1);
    x.ib = int32_t(ib >= 0 && ib < a.n_buf ? ib : -1);
    return x;
  };
  // ---- the tile's row from its index loads (the 2-D start slot is one more dependent load) ----
  auto resolve = [&](int32_t tile, const WyIdx& x) {
    WyRow r;
    r.tile = tile;
    // unsigned 32-bit divisions (0 <= tile < 2^31, the extents are positive)
    const uint32_t nh = uint32_t(tile) / uint32_t(nvt), hv = uint32_t(a.Hv);
    r.j0 = int32_t(uint32_t(tile) % uint32_t(nvt)) * BV;
    r.h = int32_t(nh % hv), r.n = int32_t(nh / hv);
    r.hq = int32_t(uint32_t(r.h) / (hv / uint32_t(a.Hqk)));  // GQA (gdn-math §2)
    r.b = a.varlen ? 0 : r.n;
    r.bos = x.bos, r.len = x.eos - x.bos;
    {
      int64_t slot = -1;
      if (a.T_max > 0) {  // idx is the accepted count a (-1: out of range): start slot [n, a - 1]
        if (x.idx >= 1) slot = load_index(a.state_indices, a.si_i64, r.n * a.si_s[0] + (x.idx - 1) * a.si_s[1]);
      } else {
        slot = x.idx;
      }
      r.valid = slot_ok(slot, a.slots, a.null_slot_is_invalid);
      r.slot = r.valid ? int32_t(slot) : -1;
      r.load = r.valid && r.len > 0;
    }
    r.ibuf = a.inter && r.valid && r.len > 0 ? x.ib : -1;
    // Walk (per-token states needed) or closed form (final state only).
    r.walk = r.ibuf >= 0 || (a.commit && a.T_max > 0);
    return r;
  };
  auto tile_off = [&](const WyRow& r, int p, int64_t rs) -> int64_t { return int64_t(i0 + p) * rs + r.j0 + 4 * c; };
  // ---- the tile's state into this thread's stage vectors (cp.async: no registers, no barrier) ----
  auto prefetch = [&](const WyRow& r) {
    if (!r.load) return;
    const ST* src =
        static_cast<const ST*>(a.pool) + r.slot * a.pool_s[0] + r.h * a.pool_s[1] + tile_off(r, 0, a.pool_s[2]);
#pragma unroll 1  // asynchronous copies: a loop keeps one address live instead of P
    for (int p = 0; p < P; ++p) cp_async<4 * int(sizeof(ST))>(&s_stage[p][tid][0], src + p * a.pool_s[2]);
  };

  // ---- a superchunk's global loads (tokens sc0 .. sc0 + tsc - 1), as bits: the tile's v slice (SC x BV / 4
  // 4-vectors, one per thread, two at 64 columns) and, when the tokens are staged, the warp's tokens of both chunks
  // (warp w: w, w + NW, ..), the head's gate parameters and the protocol-A write slots. All of them are issued before
  // the first is used, and a tile's first superchunk's before its state is waited for: they need the row, not the
  // state (issued behind the state's arrival, behind the v stores and behind the other chunk's stores, they waited a
  // round trip each) ----
  auto load_superchunk = [&](const WyRow& r, int32_t sc0, int tsc, bool tokens) {
    wy::Loads<NCH * TPW, NV> l;
#pragma unroll
    for (int m = 0; m < NV; ++m) {
      const int x = wy::opaque(tid) + m * wy::kThreads;
      l.v[m] = make_uint4(0u, 0u, 0u, 0u);
      if (x < tsc * TPR) {
        const int64_t tok = r.bos + sc0 + x / TPR;
        l.v[m] = load4_bits(a.v, a.v_dtype, r.b * a.v_s[0] + tok * a.v_s[1] + r.h * a.v_s[2] + r.j0 + 4 * (x % TPR));
      }
    }
    l.alog = l.dtb = 0u;
    l.ws = -1;
#pragma unroll
    for (int m = 0; m < NCH * TPW; ++m) {
      const int t = (m / TPW) * C + warp + (m % TPW) * NW;
      wy::TokRaw& x = l.tok[m];
      x.q = x.k = make_uint4(0u, 0u, 0u, 0u);  // +0 in every dtype
      x.g = x.be = 0u;
      if (tokens && t < tsc) {
        const int64_t tok = r.bos + sc0 + t;
        if (4 * lane < K) {
          x.q = load4_bits(a.q, a.qk_dtype, r.b * a.q_s[0] + tok * a.q_s[1] + r.hq * a.q_s[2] + 4 * lane);
          x.k = load4_bits(a.k, a.qk_dtype, r.b * a.k_s[0] + tok * a.k_s[1] + r.hq * a.k_s[2] + 4 * lane);
        }
        if (a.g) x.g = load1_bits(a.g, a.g_dtype, r.b * a.g_s[0] + tok * a.g_s[1] + r.h * a.g_s[2]);
        if (a.beta) x.be = load1_bits(a.beta, a.beta_dtype, r.b * a.beta_s[0] + tok * a.beta_s[1] + r.h * a.beta_s[2]);
      }
    }
    if (tokens && a.gate_in_kernel) {
      l.alog = load1_bits(a.A_log, a.A_log_dtype, r.h * a.A_log_s);
      if (a.dt_bias) l.dtb = load1_bits(a.dt_bias, a.dt_bias_dtype, r.h * a.dt_bias_s);
    }
    // protocol A: the state after row token sc0 + tid goes to slot [n, sc0 + tid] (checked where it is staged)
    if (tokens && tid < tsc && a.commit && a.T_max > 0 && sc0 + tid < a.T_max)
      l.ws = load_index(a.state_indices, a.si_i64, r.n * a.si_s[0] + (sc0 + tid) * a.si_s[1]);
    return l;
  };
  // v_t of the superchunk for this tile's columns, from the loads
  auto stage_v = [&](const wy::Loads<NCH * TPW, NV>& l, int tsc) {
#pragma unroll
    for (int m = 0; m < NV; ++m) {
      const int x = wy::opaque(tid) + m * wy::kThreads;
      if (x < tsc * TPR) {
        float vv[4];
        from_bits4(a.v_dtype, l.v[m], vv);
        *reinterpret_cast<float4*>(&s_v[x / TPR][4 * (x % TPR)]) = make_float4(vv[0], vv[1], vv[2], vv[3]);
      }
    }
  };
  // q', k^ (l2norm in fp32), g, beta and the protocol-A write slots, from the loads
  auto stage_chunks = [&](const wy::Loads<NCH * TPW, NV>& l, int tsc) {
#pragma unroll
    for (int m = 0; m < NCH * TPW; ++m) {
      const int t = (m / TPW) * C + warp + (m % TPW) * NW;
      const wy::TokRaw& x = l.tok[m];
      float q[4], k[4];
      from_bits4(a.qk_dtype, x.q, q);
      from_bits4(a.qk_dtype, x.k, k);
      float rq, rk2;
      qk_norm_factors(q, k, a.scale, a.l2norm, &rq, &rk2);
      if (4 * lane < K) {
        *reinterpret_cast<float4*>(&s_tok[0][t][4 * lane]) = make_float4(q[0] * rq, q[1] * rq, q[2] * rq, q[3] * rq);
        *reinterpret_cast<float4*>(&s_tok[1][t][4 * lane]) =
            make_float4(k[0] * rk2, k[1] * rk2, k[2] * rk2, k[3] * rk2);
      }
      if (lane == 0 && t < tsc) {
        float g = a.g ? from_bits1(a.g_dtype, x.g) : 0.f;
        const float be = a.beta ? from_bits1(a.beta_dtype, x.be) : 1.f;
        if (a.gate_in_kernel)  // g = -exp(A_log) softplus(a + dt_bias) (gdn-math §4)
          g = gate_from_raw(g, from_bits1(a.A_log_dtype, l.alog), a.dt_bias ? from_bits1(a.dt_bias_dtype, l.dtb) : 0.f,
                            a.softplus_beta, a.softplus_threshold);
        s_g[t] = g;
        s_be[t] = a.beta_sigmoid ? beta_from_raw(be, a.allow_neg_eigval) : be;
      }
    }
    if (tid < tsc) s_ws[tid] = slot_ok(l.ws, a.slots, a.null_slot_is_invalid) ? l.ws : -1;  // -1: none
  };

  // ---- the token matrices of a staged superchunk: the per-chunk decay scalars, the token dots, T and B T. Shared by
  // the V-tiles of the row (grouped walk below). ----
  auto stage_dots = [&](int tsc) {
    __syncthreads();  // the staged tokens

    // gamma_t = g_0 + .. + g_t within each chunk (fp32): a segmented inclusive scan over lanes t < SC
    float gam = lane < tsc ? s_g[lane] : 0.f;
#pragma unroll
    for (int m = 1; m < C; m <<= 1) {
      const float y = __shfl_up_sync(0xffffffffu, gam, m);
      if (lane % C >= m) gam += y;
    }
    {
      const int ch = (lane / C) % NCH;  // this lane's chunk; its last token
      const int last = ch * C + (tsc - ch * C < C ? tsc - ch * C : C) - 1;
      const float gam_last = __shfl_sync(0xffffffffu, gam, last < 0 ? 0 : last);
      if (warp == 0 && lane < tsc) {  // per-token decay scalars
        const float d = expf(gam);
        s_d[lane] = d;
        s_cu[lane] = s_be[lane] * d;
        s_e[lane] = expf(gam_last - gam);  // e^{gamma_last - gamma_t}
        s_al[lane] = expf(s_g[lane]);
      }
    }
    // token dots, per chunk: lane slices of k_t, q'_t against every k_s of the chunk, one reduce-scatter
    for (int t = warp; t < tsc; t += NW) {
      const int ch = t / C, tl = t % C;
      // Lane l ends with flat index f = l / (16 / C) = [kind = f / C][s = f % C]; the 16 / C lanes holding the
      // same f finish their sum with a butterfly over the low lane bits. Presorted (wy::rs_sum): x[kind][s] of
      // the lane holds [kind ^ (f / C)][s ^ (f % C)], loaded from the permuted rows of s_tok.
      constexpr int LO = 16 / C;
      const int fx = lane / LO, sx = fx % C;
      // The lane's element's factor, for every lane: beta_t e^{gamma_t - gamma_s} (A, fx < C) or e^{gamma_t -
      // gamma_s} (B), gamma_t - gamma_s within the chunk; the triangle is selected at the store (§5.8: above the
      // diagonal the exponential may be inf; a select, never a multiplied mask). Without a branch, the shuffles, the
      // exponential and the load of beta_t issue beside the dots and the reduce-scatter (in a branch per kind after
      // the reduce-scatter they were its tail).
      const float eg = expf(__shfl_sync(0xffffffffu, gam, t) - __shfl_sync(0xffffffffu, gam, ch * C + sx));
      const float fac = fx < C ? s_be[t] * eg : eg;
      float x[2 * C];
      const char* tk = reinterpret_cast<const char*>(&s_tok[0][0][0]);
      const uint32_t ko = uint32_t((SC + ch * C) * K + 4 * lane) * 4u;  // byte offset of s_tok[1][ch C][4 lane]
      float4 kt = make_float4(0.f, 0.f, 0.f, 0.f), qt = kt;
      if (4 * lane < K) {
        kt = *reinterpret_cast<const float4*>(&s_tok[1 ^ (fx / C)][t][4 * lane]);  // k_t (q'_t where fx / C = 1)
        qt = *reinterpret_cast<const float4*>(&s_tok[fx / C][t][4 * lane]);
      }
#pragma unroll
      for (int sx = 0; sx < C; ++sx) {
        float4 ks = make_float4(0.f, 0.f, 0.f, 0.f);
        if (4 * lane < K)  // &s_tok[1][ch C + (sx ^ fx % C)][4 lane]: the row's low bits are bits of the offset
          ks = *reinterpret_cast<const float4*>(tk + ((ko | uint32_t(sx * K * 4)) ^ uint32_t(fx % C * K * 4)));
        x[sx] = fmaf(kt.x, ks.x, fmaf(kt.y, ks.y, fmaf(kt.z, ks.z, kt.w * ks.w)));
        x[C + sx] = fmaf(qt.x, ks.x, fmaf(qt.y, ks.y, fmaf(qt.z, ks.z, qt.w * ks.w)));
      }
      wy::rs_sum<2 * C, 16, LO, 2 * C - 1>(x, lane);
      if constexpr (LO > 1) x[0] = lane_sum<1, LO>(x[0]);
      if (lane % LO == 0)  // A transposed (A^T [s][t]: the substitution reads A's columns), B as it is
        *(fx < C ? &s_A[ch][sx][tl] : &s_B[ch][tl][sx]) = (fx < C ? sx < tl : sx <= tl) ? fac * x[0] : 0.f;
    }
    __syncthreads();  // s_A, s_B complete

    // T = (I + A)^{-1} of each chunk (column m of T per lane: T[t][m] = [t = m] - sum_{s<t} A[t][s] T[s][m], by the
    // substitution in the column order, chunk_inverse_column) and B T, by warp 0 (lane = ch C + m) while the other
    // warps start the state reduction: both depend on the tokens only, and are first read in the columns phase
    // (after the reduction's barrier). B's rows are loaded after T's stores.
    if (warp == 0 && lane < SC) {
      const int tch = lane / C, m = lane % C, rem = tsc - tch * C;
      const int tcc = rem < 0 ? 0 : (rem < C ? rem : C);  // valid tokens of the lane's chunk
      float x[C];
      chunk_inverse_column<C>(s_A[tch], m, x);
      // rows past the chunk's tokens read stale A (finite or not, they enter no valid row): selected to zero
#pragma unroll
      for (int t = 0; t < C; ++t) x[t] = t < tcc ? x[t] : 0.f;
#pragma unroll
      for (int t = 0; t < C; ++t) s_T[tch][t][m] = x[t];
      float y[C];
#pragma unroll
      for (int t = 0; t < C; ++t) {
        y[t] = 0.f;
#pragma unroll
        for (int sx = 0; sx <= t; ++sx) y[t] = fmaf(s_B[tch][t][sx], x[sx], y[t]);
      }
#pragma unroll
      for (int t = 0; t < C; ++t) s_BT[tch][t][m] = t < tcc ? y[t] : 0.f;
    }
  };
  // ---- a superchunk's loads and staging (tokens: not a later V-tile of a row already staged) ----
  auto stage_superchunk = [&](const WyRow& r, int32_t sc0, int tsc, bool tokens) {
    const auto l = load_superchunk(r, sc0, tsc, tokens);
    stage_v(l, tsc);
    if (tokens) {
      stage_chunks(l, tsc);
      stage_dots(tsc);  // ends with a barrier
    }
  };

  // ---- persistent walk: tile i+1's index loads are issued when tile i starts and its state streams into the
  // stage (cp.async) after tile i's first barrier, so the next state's bytes are in flight during this tile's
  // math. Grouped walk (enough rows for every CTA): a CTA takes whole rows (n, h) and runs their V-tiles back to
  // back; a row of <= SC tokens is staged once (q', k^, gates, dots, decay scalars) for all its V-tiles. ----
  const int32_t nrows = int32_t(a.N * a.Hv);
  // Only without per-token state stores: grouped, a row's V-tiles run at different times, so the 64-byte (bf16,
  // 32 columns) pieces of each intermediate-state row are written far apart in time, and the H200 measured verify
  // at N = 256 slower grouped (2.23 ms) than ungrouped (1.55 ms), where neighbouring V-tiles run side by side.
  // 64-column tiles write whole 128-byte lines, but grouped the two lines of a 256-byte row are written a tile apart
  // and the shared staging does not make up for it (H200, verify T = 12 N = 256: 1.29 ms grouped against 1.28):
  // they walk single tiles too.
  const bool grouped = nvt > 1 && nrows >= int32_t(gridDim.x) && a.inter == nullptr && !(a.commit && a.T_max > 0);
  auto next_tile = [&](int32_t t) -> int32_t {  // no overflow: ntiles + grid nvt < 2^31 (launcher)
    if (!grouped) return t + wy::grid_ctas();
    return t % nvt != nvt - 1 ? t + 1 : (t / nvt + wy::grid_ctas()) * nvt;
  };
  int cur = 0;  // s_row[cur]: this tile's row (with its tile index)
  {
    const int32_t tile = grouped ? int32_t(blockIdx.x) * nvt : int32_t(blockIdx.x);
    if (tile >= ntiles) return;
    pdl_start();  // every global access below follows the previous kernel in the stream
    const WyRow r0 = resolve(tile, issue(tile));
    prefetch(r0);
    cp_async_commit();
    if (tid == 0) s_row[0] = r0;
    __syncthreads();
  }

#pragma unroll 1
  for (;;) {
    const WyRow& r = s_row[cur];
    const int32_t nxt = next_tile(r.tile);
    const bool has_next = nxt < ntiles;
    // The next tile's index loads: issued once this tile's tokens are staged (not live through the staging, the
    // register peak), used after the first chunk's barrier.
    WyIdx xn;
    const bool run = r.valid && r.len > 0;
    // The row's token data are already staged when this is a later V-tile of a row of <= SC tokens.
    const bool reuse = grouped && r.tile % nvt != 0 && r.len <= SC;

    auto prefetch_next = [&]() {  // after s[] is consumed from the stage (same thread, same vectors)
      if (has_next) {
        const WyRow rn = resolve(nxt, xn);
        prefetch(rn);
        if (tid == 0) s_row[cur ^ 1] = rn;  // read after the end-of-tile barrier
      }
      cp_async_commit();
    };

    if (!run) {  // an empty row touches nothing
      cp_async_wait<0>();
      if (has_next) xn = issue(nxt);
      prefetch_next();
      if (r.len > 0) {  // invalid row: exact zeros to its outputs, nothing else written
        const float z[4] = {0.f, 0.f, 0.f, 0.f};
        for (int64_t x = tid; x < r.len * (BV / 4); x += wy::kThreads) {
          const int64_t t = r.bos + x / (BV / 4);
          store4(a.o, a.v_dtype, r.b * a.o_s[0] + t * a.o_s[1] + r.h * a.o_s[2] + r.j0 + 4 * (x % (BV / 4)), z);
        }
      }
    } else {
      int32_t sc0 = 0;
      int tsc = int(r.len < SC ? r.len : SC);
      stage_superchunk(r, 0, tsc, !reuse);
      // ---- this tile's state: stage -> registers (each thread reads back only its own vectors), waited for after the
      // first superchunk's loads are issued ----
      cp_async_wait<0>();
      float s[P][4];
#pragma unroll
      for (int p = 0; p < P; ++p) load4(&s_stage[p][tid][0], s[p]);
      if (has_next) xn = issue(nxt);
#pragma unroll 1
      for (;;) {
#pragma unroll 1
        for (int ch = 0; ch < NCH && ch * C < tsc; ++ch) {
          const int tc = tsc - ch * C < C ? tsc - ch * C : C;
          const int tb = ch * C;  // the chunk's first token in the superchunk

          // ---- S0^T k_t and S0^T q'_t over the thread's rows, GR tokens at a time ----
          // The kind (k, q') and token of the flat index rk KEEP ([kind][g][e] of 2 x GR x 4 accumulators) this
          // lane keeps in the reduce-scatter: the presorted bits of wy::rs_sum, as a byte offset into s_tok. The kind
          // and the token's low bits are bits of the offset of [kind][tok][i0] (tok = tb + t0 + g, tb + t0 a
          // multiple of GR), so (offset | slot) ^ sw is one LOP3 per slot.
          if constexpr (kTma) {  // s_red[warp] is ring position 0: its store has read it (the newest RING - 1
            // stores, positions 1 .. RING - 1, may still be reading theirs)
            if (im.on) {
              if (lane == 0) tma::wait_stores_read_but<RING - 1>();
              __syncwarp();
            }
          }
          const int rkx = wy::opaque(rk);
          const uint32_t sw = uint32_t((rkx * G::KEEP) / (4 * GR) * SC * K + (rkx * G::KEEP / 4) % GR * K) * 4u;
#pragma unroll 1
          for (int t0 = 0; t0 < tc; t0 += GR) {
            float acc[M];
#pragma unroll
            for (int m = 0; m < M; ++m) acc[m] = 0.f;
#pragma unroll
            for (int g = 0; g < GR; ++g) {  // presorted: slot [kind][g] holds [kind][g] ^ (rk KEEP)
              float kr[P], qr[P];
              const uint32_t o = uint32_t((tb + t0) * K + i0) * 4u;  // [0][tb + t0][i0]
              const char* tk = reinterpret_cast<const char*>(&s_tok[0][0][0]);
              wy::ld_rows<P>(reinterpret_cast<const float*>(tk + ((o | uint32_t((SC + g) * K * 4)) ^ sw)), kr);
              wy::ld_rows<P>(reinterpret_cast<const float*>(tk + ((o | uint32_t(g * K * 4)) ^ sw)), qr);
#pragma unroll
              for (int p = 0; p < P; ++p)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                  acc[g * 4 + e] = fmaf(s[p][e], kr[p], acc[g * 4 + e]);
                  acc[(GR + g) * 4 + e] = fmaf(s[p][e], qr[p], acc[(GR + g) * 4 + e]);
                }
            }
            wy::rs_sum<M, 16, TPR, (M - 1) & ~3>(acc, lane);  // over the NL lanes with this column group
            const int f = rk * G::KEEP;                       // flat index [kind][g][e] of acc[0]
            float* dst = &s_red[warp][f / (GR * 4)][t0 + (f / 4) % GR][4 * c + f % 4];
            if constexpr (G::KEEP == 8) {  // [kind][0][0 .. 3] and [kind][1][0 .. 3]: tokens t0 and t0 + 1
              *reinterpret_cast<float4*>(dst) = make_float4(acc[0], acc[1], acc[2], acc[3]);
              *reinterpret_cast<float4*>(dst + BV) = make_float4(acc[4], acc[5], acc[6], acc[7]);
            } else if constexpr (G::KEEP == 4) {
              *reinterpret_cast<float4*>(dst) = make_float4(acc[0], acc[1], acc[2], acc[3]);
            } else {
              *reinterpret_cast<float2*>(dst) = make_float2(acc[0], acc[1]);
            }
          }

          __syncthreads();
          if (sc0 == 0 && ch == 0) prefetch_next();  // s[] was read from the stage before the barrier

          // ---- columns: every thread, NPT (token, column) pairs. With r_t = beta_t v_t - beta_t e^{gamma_t}
          // S0^T k_t, the substitution u_t = r_t - sum_{s<t} A[t][s] u_s (§5.3) is u = T r, and
          // o_t = e^{gamma_t} S0^T q'_t + sum_{s<=t} B[t][s] u_s = e^{gamma_t} S0^T q'_t + (B T r)_t: two
          // independent sums per pair once every r_s is in shared memory (instead of a serial substitution per
          // column after the reduction) ----
          {
            constexpr int NPT = C * BV / wy::kThreads;  // pairs per thread
            const int j = tid % BV;
#pragma unroll
            for (int p = 0; p < NPT; ++p) {  // r_t and e^{gamma_t} S0^T q'_t, in place of the pair's partials
              const int t = tid / BV + p * (wy::kThreads / BV);
              if (t < tc) {
                float ks = s_red[0][0][t][j], qs = s_red[0][1][t][j];
#pragma unroll
                for (int w = 1; w < NW; ++w) ks += s_red[w][0][t][j], qs += s_red[w][1][t][j];
                s_red[0][0][t][j] = fmaf(s_be[tb + t], s_v[tb + t][j], -s_cu[tb + t] * ks);
                s_red[0][1][t][j] = s_d[tb + t] * qs;
              }
            }
            __syncthreads();  // every r_t
#pragma unroll
            for (int p = 0; p < NPT; ++p) {  // u_t = sum_{s<=t} T[t][s] r_s, o_t
              const int t = tid / BV + p * (wy::kThreads / BV);
              if (t < tc) {
                float u = 0.f, o = s_red[0][1][t][j];
#pragma unroll
                for (int sx = 0; sx < C; ++sx)
                  if (sx <= t) {
                    const float rs = s_red[0][0][sx][j];
                    u = fmaf(s_T[ch][t][sx], rs, u), o = fmaf(s_BT[ch][t][sx], rs, o);
                  }
                s_u[t][j] = r.walk ? u : s_e[tb + t] * u;
                store1(a.o, a.v_dtype, r.b * a.o_s[0] + (r.bos + sc0 + tb + t) * a.o_s[1] + r.h * a.o_s[2] + r.j0 + j,
                       o);
              }
            }
          }
          __syncthreads();  // s_u complete; every read of s_red done (the next chunk's reduction writes it)

          // ---- state: walk (per-token stores) or closed form ----
          if (r.walk) {
            // the thread's element of the row's intermediate entry, token 0
            const int64_t ib = r.ibuf * a.inter_s[0] + r.h * a.inter_s[2] + tile_off(r, 0, a.inter_s[3]);
            // the chunk's tokens whose states the buffer holds: a prefix (none for a skipped buffer, none past T_buf)
            int ns = 0;
            if constexpr (kTma) {
              const int64_t held = r.ibuf >= 0 ? a.T_buf - (sc0 + tb) : 0;
              ns = held < 0 ? 0 : (held < tc ? int(held) : tc);
            }
            // Token t < ns to the ring position q = (ns - t) % RING: the chunk's last stored token to position 1 (RING
            // >= 2), position 0 (s_red[warp], rewritten by the next chunk's reduction) only RING tokens before the
            // last, so the reduction's wait leaves the newest RING - 1 stores reading. Before its box is written,
            // token t >= 1 waits for all but the newest RING - 1 stores (tokens t - RING + 1 .. t - 1, the other
            // positions); token 0 at position 0 for none (the reduction's wait freed it), elsewhere for all (the
            // previous chunk's last token may have had its position).
            auto store_box = [&](int t, int64_t tr) {
              if constexpr (kTma) {
                if (t >= ns) return;
                const int q = (ns - t) % RING;
                // (the read waits share their counter with the next tile's state copy, cp.async, issued after this
                // tile's first reduction: a full wait would wait for that copy too)
                if (lane == 0) {
                  if (t > 0)
                    tma::wait_stores_read_but<RING - 1>();
                  else if (q != 0)
                    tma::wait_stores_read();
                }
                __syncwarp();  // lane 0's wait before every lane's writes
                unsigned char* box = s_dyn + wy::kStageBytes<ST, K, BV> + (q * NW + warp) * wy::kBoxBytes;
                // the thread's rows (lane / TPR) P .. + P - 1 of the box, its columns 4c .. 4c + 3 (8 bytes of a
                // 128-byte row): the values and rounding of store_rows
                unsigned char* dst = box + (lane / TPR) * P * 128 + 8 * c;
                with_storage(a.inter_dtype, [&](auto it) {
                  using IT = typename decltype(it)::type;
                  if constexpr (sizeof(IT) == 2) {
#pragma unroll
                    for (int p = 0; p < P; ++p)
                      *reinterpret_cast<uint2*>(dst + p * 128) =
                          make_uint2(Storage<IT>::from2(s[p][0], s[p][1]), Storage<IT>::from2(s[p][2], s[p][3]));
                  }
                });
                wg::fence_async_smem();  // the writes, visible to the store's (async proxy) read
                __syncwarp();
                if (lane == 0) {
                  tma::store_5d(reinterpret_cast<const CUtensorMap*>(im.map), r.j0, 32 * warp, r.h, int(tr), r.ibuf,
                                box);
                  tma::commit_stores();
                }
              }
            };
#pragma unroll 1
            for (int t = 0; t < tc; ++t) {
              float kr[P];
              wy::ld_rows<P>(&s_tok[1][tb + t][i0], kr);
              const float4 u4 = *reinterpret_cast<const float4*>(&s_u[t][4 * c]);
              const float uu[4] = {u4.x, u4.y, u4.z, u4.w};
              const float al = s_al[tb + t];
#pragma unroll
              for (int p = 0; p < P; ++p)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[p][e] = fmaf(kr[p], uu[e], al * s[p][e]);  // S = alpha S + k u^T
              const int64_t tr = sc0 + tb + t;                                           // row-relative token
              if (kTma && im.on) {
                store_box(t, tr);
              } else if (r.ibuf >= 0 && tr < a.T_buf) {
                with_storage(a.inter_dtype, [&](auto it) {  // typed 16-byte stores
                  using IT = typename decltype(it)::type;
                  wy::store_rows<IT, P, TPR>(static_cast<IT*>(a.inter) + ib + tr * a.inter_s[1], a.inter_s[3], s,
                                             odd());
                });
              }
              if (a.commit && a.T_max > 0) {  // protocol A (a uniform test: no slot load per token otherwise)
                const int64_t ws = s_ws[tb + t];
                if (ws >= 0)
                  wy::store_rows<ST, P, TPR>(
                      static_cast<ST*>(a.pool) + ws * a.pool_s[0] + r.h * a.pool_s[1] + tile_off(r, 0, a.pool_s[2]),
                      a.pool_s[2], s, odd());
              }
            }
          } else {
            const float dl = s_d[tb + tc - 1];  // e^{gamma_last}
#pragma unroll
            for (int p = 0; p < P; ++p)
#pragma unroll
              for (int e = 0; e < 4; ++e) s[p][e] *= dl;
#pragma unroll 2
            for (int t = 0; t < tc; ++t) {  // S += k_t w_t^T, w_t = e^{gamma_last - gamma_t} u_t
              float kr[P];
              wy::ld_rows<P>(&s_tok[1][tb + t][i0], kr);
              const float4 w4 = *reinterpret_cast<const float4*>(&s_u[t][4 * c]);
              const float ww[4] = {w4.x, w4.y, w4.z, w4.w};
#pragma unroll
              for (int p = 0; p < P; ++p)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[p][e] = fmaf(kr[p], ww[e], s[p][e]);
            }
          }
        }
        sc0 += SC;
        if (sc0 >= r.len) break;
        tsc = int(r.len - sc0 < SC ? r.len - sc0 : SC);
        __syncthreads();  // every warp is done with the previous superchunk's shared data
        stage_superchunk(r, sc0, tsc, true);
      }

      // ---- final state: pool[slot] (1-D slots, commit) ----
      if (a.commit && a.T_max == 0)
        wy::store_rows<ST, P, TPR>(
            static_cast<ST*>(a.pool) + r.slot * a.pool_s[0] + r.h * a.pool_s[1] + tile_off(r, 0, a.pool_s[2]),
            a.pool_s[2], s, odd());
    }
    if (!has_next) break;
    __syncthreads();  // the next tile re-stages the shared token data and reads its row
    cur ^= 1;
  }
  if constexpr (kTma)
    if (im.on && lane == 0) tma::wait_stores();  // no bulk store in flight at the exit
}

// Persistent CTAs (kMinBlocks per SM, the register budget's residency) walking the (row, head, V-tile) tiles;
// a small launch gets one CTA per tile. K-major states only (the plan checks).
template <class ST, int K, int BV>
cudaError_t launch_recurrent_wy(const RecurrentArgs& a, int sms, cudaStream_t stream) {
  const int64_t ntiles = a.N * a.Hv * (a.V / BV);
  if (ntiles == 0) return cudaSuccess;
  constexpr size_t smem = wy::kStageBytes<ST, K, BV> + wy::kRedBytes<BV>;
  constexpr bool tma_able = BV == 64 && K == 128;
  constexpr size_t smem_max = smem + (tma_able ? wy::kRingBytes : 0);
  // The walk's 16-bit per-token states by TMA (wy::kInterRing): a 5-d map over the intermediate states as the kernel
  // sees them (T_buf of the arguments), encoded here by value (a CUDA graph captures the parameter); where the driver
  // cannot take the tensor (strides not multiples of 16 bytes, base not 16-byte aligned) the kernel uses store_rows.
  wy::InterMap im{};
  size_t dyn = smem;
  int per_sm = wy::kMinBlocks<BV>;
  static std::atomic<uint64_t> done{0};
  if (const int e = prepare_launch(recurrent_wy_kernel<ST, K, BV>, smem_max, done)) return static_cast<cudaError_t>(e);
  if constexpr (tma_able) {
    if (a.inter && (a.inter_dtype == DType::bf16 || a.inter_dtype == DType::f16)) {
      const int64_t dims[5] = {a.V, a.K, a.Hv, a.T_buf, a.n_buf};
      const int64_t strides[4] = {a.inter_s[3], a.inter_s[2], a.inter_s[1], a.inter_s[0]};
      const uint32_t box[5] = {64, 32, 1, 1, 1};  // a warp's 32 rows x 64 columns of one (entry, token, head)
      im.on = tma::encode_b16(reinterpret_cast<CUtensorMap*>(im.map), a.inter, 5, dims, strides, box,
                              CU_TENSOR_MAP_SWIZZLE_NONE);
      if (im.on) {  // the ring's shared memory leaves 2 CTAs per SM with an fp32 pool: the occupancy API, once a device
        static std::atomic<int> per_sm_of[64];  // [device] resident CTAs per SM at smem_max
        int dev = 0;
        cudaError_t e = cudaGetDevice(&dev);
        if (e == cudaSuccess)
          e = resident_ctas_per_sm(recurrent_wy_kernel<ST, K, BV>, wy::kThreads, smem_max, dev, per_sm_of, &per_sm);
        if (e != cudaSuccess) return e;
        dyn = smem_max;
      }
    }
  }
  int64_t grid = ntiles;
  if (grid > int64_t(per_sm) * sms) grid = int64_t(per_sm) * sms;
  if (ntiles + grid * (a.V / BV) > 0x7fffffff) return cudaErrorInvalidConfiguration;  // 32-bit tile indices
  return launch_pdl(recurrent_wy_kernel<ST, K, BV>, dim3(unsigned(grid)), dim3(wy::kThreads), dyn, stream, a, im);
}

// One translation unit per storage type instantiates every (K, BV): they compile in parallel.
#define FGDN_INSTANTIATE_RECURRENT_WY(ST)                                                         \
  template cudaError_t launch_recurrent_wy<ST, 64, 32>(const RecurrentArgs&, int, cudaStream_t);  \
  template cudaError_t launch_recurrent_wy<ST, 128, 16>(const RecurrentArgs&, int, cudaStream_t); \
  template cudaError_t launch_recurrent_wy<ST, 128, 32>(const RecurrentArgs&, int, cudaStream_t); \
  template cudaError_t launch_recurrent_wy<ST, 128, 64>(const RecurrentArgs&, int, cudaStream_t);

}  // namespace flashgdn::cuda
