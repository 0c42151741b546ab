// The "wy_mma" recurrent kernel: multi-token rows with the final state only (multi-token decode on 1-D slots, a
// verify without per-token states) on K-major pools, the chunked (WY) form of wy_kernel.cuh over C = 16 tokens with
// every product on the tensor cores (mma.sync m16n8k16, bf16 operands, fp32 accumulation). Same semantics and
// arguments (RecurrentArgs) as the other recurrent kernels. Per chunk of a row's tokens (gdn-math §5, §5.3):
//
//   gamma_t = g_0 + .. + g_t (fp32, restarts at every chunk), decays only as exp(gamma_t - gamma_s), t >= s (§5.8)
//   A[t][s] = beta_t e^{gamma_t - gamma_s} (k^_t.k^_s) (s < t),  B[t][s] = e^{gamma_t - gamma_s} (q'_t.k^_s) (s <= t)
//   T = (I + A)^{-1} (forward substitution, §5.7),  r_t = beta_t (v_t - e^{gamma_t} S0^T k^_t)
//   u = T r,  o_t = e^{gamma_t} S0^T q'_t + (B u)_t,  S = e^{gamma_C} S0 + sum_t k^_t (e^{gamma_C - gamma_t} u_t)^T
//
// Why: the wy kernel forms S0^T k_t and S0^T q'_t on the CUDA cores (a reduce-scatter over lanes and a barrier per
// chunk) and is latency-bound at ~0.4 IPC per scheduler (ncu: mtp T = 12, N = 256, 0.67 ms against a 0.27 ms byte
// floor). Here a warp owns 16 state columns x K keys in the accumulator layout of m16n8k16 (the state transposed,
// S^T [column][key], 4 x K / 8 fp32 registers a thread), so that every product of the chunk stays inside the warp:
//
//   S0^T [k | q]  M = 16 columns, N = 32 tokens, K = keys: A = S0^T from the state's own accumulators (two n8 tiles
//                 are one k16 A fragment, as FlashAttention-2 reuses P), hi + lo bf16; B = raw k, q (bf16, exact)
//   u^T = r^T T^T, o^T += u^T B^T   M = 16, N = 16, K = 16 tokens: A = r^T, u^T from accumulators (hi + lo),
//                 B = T, B (hi + lo bf16 tiles; T's rest a third where a chunk's beta exceeds 1)
//   S^T += w^T K  M = 16, N = K keys, K = 16 tokens: A = w^T (hi + lo), B = raw k: the state's accumulators
//
// The l2norm factors and decays are fp32 row / column scalings beside the products (k and q enter the tensor cores as
// stored, so bf16 inputs are exact operands; f16 inputs split exactly into bf16 hi + lo). An fp32 operand x = hi + lo
// (two bf16, |x - hi - lo| <= 2^-17 |x|) keeps the products fp32-accurate at the bounds of gdn-math §10.3 (the
// state is carried in fp32 and only its products are split). No reduction crosses a warp: the CTA's barriers are
// the staging's (the chunk's tokens, the gated token dots and T are shared by the 4 warps).
//
// Keys are permuted inside the accumulator layout: the n8 tile j of a warp's state holds, at column 2 t4 + e of the
// tile (lane t4 = lane % 4), physical key (K / 4) t4 + 2 j + e, so that a thread owns K / 4 consecutive keys of two
// adjacent state columns (2 g, 2 g + 1 of the warp's 16, g = lane / 4): 8-byte (fp32) or 4-byte (16-bit) pool
// loads and stores of whole 32-byte sectors. The staged k and q tiles store key i at its logical position (8 j + 2 t4
// + e), which is all the products need (a contraction index may be permuted on both sides alike).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>

#include "cuda/common/cuda_check.cuh"
#include "cuda/common/device_util.cuh"
#include "cuda/recurrent/recurrent_args.hpp"

namespace flashgdn::cuda {
namespace wymma {

inline constexpr int kThreads = 128;  // 4 warps, 16 state columns each
inline constexpr int kMinBlocks = 2;  // CTAs per SM (__launch_bounds__: <= 255 registers, no spills)
inline constexpr int kCols = 64;      // state columns per CTA
inline constexpr int kChunk = 16;     // tokens per chunk (one k16 step of the token products)
inline constexpr int kLd = 24;        // 16-bit elements per staged row: 16 tokens + 8 (48-byte rows:
                                      // the 8 rows of an ldmatrix read fall in distinct banks)
using Bf = Storage<__nv_bfloat16>;

// x = hi + lo, two bf16 pairs (low half: the first value): |x - hi - lo| <= 2^-17 |x|.
__device__ __forceinline__ void split2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  hi = Bf::from2(x0, x1);
  const float2 f = Bf::to2(hi);
  lo = Bf::from2(x0 - f.x, x1 - f.y);
}
// An empty volatile asm that "writes" x: the values are formed where it stands among the other volatile asms
// (ldmatrix, mma), not hoisted ahead of them.
__device__ __forceinline__ void pin(uint32_t (&x)[4]) {
  asm volatile("" : "+r"(x[0]), "+r"(x[1]), "+r"(x[2]), "+r"(x[3]));
}
// The m16n8k16 A fragment (hi, lo) of the accumulator tiles c0 (k 0-7) and c1 (k 8-15) of one m16 row block.
__device__ __forceinline__ void afrag(const float (&c0)[4], const float (&c1)[4], uint32_t (&hi)[4],
                                      uint32_t (&lo)[4]) {
  split2(c0[0], c0[1], hi[0], lo[0]);
  split2(c0[2], c0[3], hi[1], lo[1]);
  split2(c1[0], c1[1], hi[2], lo[2]);
  split2(c1[2], c1[3], hi[3], lo[3]);
}
// m16n8k16, bf16 operands, fp32 accumulation. volatile: each product keeps its program-order place among the
// ldmatrix loads (also volatile), so one k-step's operand fragments are live at a time.
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// d += (ah + al) (bh + bl) without al bl; bl only where the operand has a lo part (NP = 2).
template <int NP>
__device__ __forceinline__ void mma_split(float (&d)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4],
                                          const uint32_t* bh, const uint32_t* bl) {
  mma(d, ah, bh[0], bh[1]);
  mma(d, al, bh[0], bh[1]);
  if constexpr (NP == 2) mma(d, ah, bl[0], bl[1]);
}

// The logical position (8 j + 2 t4 + e) of physical key i: the thread with lane t4 owns keys (K / 4) t4 .. + K / 4 - 1.
template <int K>
__device__ __forceinline__ int key_pos(int i) {
  return 8 * ((i % (K / 4)) >> 1) + 2 * (i / (K / 4)) + (i & 1);
}

// Dynamic shared memory: the start state as it lands, K / 4 pairs of columns (K / 2 elements) per thread.
template <class ST, int K>
constexpr size_t state_stage_bytes() {
  return size_t(K / 2) * kThreads * sizeof(ST);
}

// A tile's row: coordinates, token range, start slot (-1: invalid), the head's gate parameters.
struct Row {
  int32_t h = 0, hq = 0, j0 = 0;
  int64_t n = 0, b = 0, bos = 0, len = 0, slot = -1;
  float alog = 0.f, dtb = 0.f;
};

// Two adjacent state elements (columns c, c + 1 of one key row) of storage type ST, as fp32.
template <class ST>
__device__ __forceinline__ float2 load_pair(const ST* p) {
  if constexpr (std::is_same_v<ST, float>)
    return *reinterpret_cast<const float2*>(p);
  else
    return Storage<ST>::to2(*reinterpret_cast<const uint32_t*>(p));
}
template <class ST>
__device__ __forceinline__ void store_pair(ST* p, float x, float y) {
  if constexpr (std::is_same_v<ST, float>)
    *reinterpret_cast<float2*>(p) = make_float2(x, y);
  else
    *reinterpret_cast<uint32_t*>(p) = Storage<ST>::from2(x, y);
}
// Two adjacent 16-bit activations (bf16 or f16, v and o) as fp32, and back.
__device__ __forceinline__ float2 act_pair(uint32_t w, bool bf16) {
  return bf16 ? Storage<__nv_bfloat16>::to2(w) : Storage<__half>::to2(w);
}
__device__ __forceinline__ uint32_t act_bits(float x, float y, bool bf16) {
  return bf16 ? Storage<__nv_bfloat16>::from2(x, y) : Storage<__half>::from2(x, y);
}

}  // namespace wymma

// Persistent CTAs of 4 warps walk the tiles (row, value head, 64 state columns), a warp 16 columns; the next tile's
// index loads, state copy and first chunk are in flight during this tile's products. With a row for every CTA the
// walk is grouped: a CTA runs a row's V-tiles back to back, and a row of <= 16 tokens is staged once (q, k, the
// factors, T, B) for all of them. QK_BF16: q and k are bf16 (exact bf16 operands); else f16, split into bf16 hi + lo
// (exact). v and o are 16-bit (bf16 or f16, runtime).
// H200 (docs/recurrent.md): T = 12 at N = 1 / 256 in 7.7 us / 0.477 ms against the wy kernel's 12.3 us / 0.672 ms.
template <class ST, int K, bool QK_BF16>
__global__ void __launch_bounds__(wymma::kThreads, wymma::kMinBlocks) recurrent_wy_mma_kernel(const RecurrentArgs a) {
  using namespace wymma;
  constexpr int NJ = K / 8;            // n8 tiles of a warp's state (keys)
  constexpr int NP = QK_BF16 ? 1 : 2;  // parts of a staged k / q element
  constexpr int C = kChunk;
  using QK = std::conditional_t<QK_BF16, __nv_bfloat16, __half>;
  __shared__ __align__(16) uint16_t s_k[NP][K][kLd];   // raw k [logical key][token] (hi, lo)
  __shared__ __align__(16) uint16_t s_q[NP][K][kLd];   // raw q
  __shared__ __align__(16) uint16_t s_t[3][C][kLd];    // T^T [s][t], T = (I + A)^{-1}, hi, lo, rest (beta > 1)
  __shared__ __align__(16) uint16_t s_b[2][C][kLd];    // B [t][s], hi and lo
  __shared__ __align__(16) float s_a[C][C];            // A^T [s][t] (fp32, for the substitution)
  __shared__ float s_g[C], s_be[C], s_rk[C], s_rq[C];  // gate, beta, 1 / |k|, scale / |q| per token
  __shared__ float s_d[C], s_e[C];                     // e^{gamma_t}, e^{gamma_last - gamma_t}
  // the start state as it lands (cp.async: each thread its own pairs, read back by itself; no registers held while
  // the loads fly): [pair 2 j + e][thread] in dynamic shared memory (up to 32 KB: the static arrays above and it
  // exceed the 48 KB of static shared memory with f16 q, k)
  extern __shared__ __align__(16) unsigned char s_dyn[];
  auto s_st = reinterpret_cast<ST(*)[kThreads][2]>(s_dyn);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
  const int mi = lane >> 3, mr = lane & 7;  // ldmatrix: the matrix and row this lane addresses

  // ---- a tile's row: coordinates and token range (row_of), then start slot and gate parameters (row_slot). Index
  // loads, issued there; the slot's check waits for its load at once, so row_slot follows the loads that need no slot
  // ----
  auto row_of = [&](uint32_t tile) {
    Row r;
    const uint32_t nh = udiv(tile, a.vt), n = udiv(nh, a.hv);
    r.n = n, r.h = int(nh - n * uint32_t(a.Hv)), r.hq = int(udiv(uint32_t(r.h), a.gqa));
    r.j0 = int(tile - nh * uint32_t(a.V / kCols)) * kCols;
    r.b = a.varlen ? 0 : n, r.bos = 0, r.len = a.T;
    if (a.varlen) {
      const int64_t cu0 = load_index(a.cu_seqlens, a.cu_i64, n), cu1 = load_index(a.cu_seqlens, a.cu_i64, n + 1);
      r.bos = cu0 < 0 ? 0 : (cu0 > a.T ? a.T : cu0);
      r.len = (cu1 < r.bos ? r.bos : (cu1 > a.T ? a.T : cu1)) - r.bos;
    }
    return r;
  };
  auto row_slot = [&](Row& r) {
    const int64_t n = r.n;
    // The head's gate parameters (gate in kernel) as bits beside the slot's index loads, widened after them.
    const uint32_t alog = a.gate_in_kernel ? load1_bits(a.A_log, a.A_log_dtype, r.h * a.A_log_s) : 0u;
    const uint32_t dtb = a.gate_in_kernel && a.dt_bias ? load1_bits(a.dt_bias, a.dt_bias_dtype, r.h * a.dt_bias_s) : 0u;
    int64_t slot = n;
    if (a.T_max > 0) {  // start slot [n, a - 1], a = num_accepted_tokens[n] (1 when absent)
      const int64_t acc = a.num_accepted ? load_index(a.num_accepted, a.na_i64, n * a.na_s) : 1;
      slot = acc >= 1 && acc <= a.T_max ? load_index(a.state_indices, a.si_i64, n * a.si_s[0] + (acc - 1) * a.si_s[1])
                                        : -1;
    } else if (a.state_indices) {
      slot = load_index(a.state_indices, a.si_i64, n * a.si_s[0]);
    }
    r.slot = slot_ok(slot, a.slots, a.null_slot_is_invalid) ? slot : -1;
    r.alog = a.gate_in_kernel ? from_bits1(a.A_log_dtype, alog) : 0.f;
    r.dtb = a.gate_in_kernel && a.dt_bias ? from_bits1(a.dt_bias_dtype, dtb) : 0.f;
  };
  const int kb = (K / 4) * t4;  // this thread's first key
  const bool v_bf16 = a.v_dtype == DType::bf16;
  const int64_t rs = a.pool_s[2];
  auto pool_at = [&](const Row& r) {  // this thread's element (key kb, column c0) of the row's start slot
    return static_cast<ST*>(a.pool) + r.slot * a.pool_s[0] + r.h * a.pool_s[1] + r.j0 + 16 * warp + 2 * g + kb * rs;
  };
  // The state: S^T in accumulator tiles, s[j][e]: column c0 + e / 2, physical key kb + 2 j + e % 2. Copied to s_st
  // (one commit group per tile), read into registers before the tile's first product; the next tile's copy is issued
  // as soon as this thread has read its pairs (each thread copies and reads only its own).
  auto issue_state = [&](const Row& r) {
    if (r.slot >= 0 && r.len > 0) {
      const ST* src = pool_at(r);
#pragma unroll
      for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) cp_async<2 * sizeof(ST)>(&s_st[2 * j + e][tid][0], src + (2 * j + e) * rs);
    }
    cp_async_commit();
  };

  // ---- a chunk's activations as bits (warp w: tokens 4 w .. 4 w + 3; this thread's v pairs: tokens nt 8 + 2 t4 + ee,
  // columns c0, c0 + 1). Every load of a chunk is issued before the first is used (one round trip, not one per
  // token), and a tile's first chunk is loaded during the previous tile; tokens = false: v only (a tile that reuses the
  // row's staged tokens) ----
  uint2 rq4[C / 4], rk4[C / 4];  // 4 16-bit elements each (bf16 or f16: the plan checks)
  uint32_t rg[C / 4], rb[C / 4], vb[2][2];
  auto load_chunk = [&](const Row& r, int64_t t0, bool tokens) {
    const int tc = int(r.len - t0 < C ? r.len - t0 : C);
    const int64_t b = r.b, bos = r.bos;
    // zeros where not loaded, also for tokens = false: no earlier chunk's values stay live through a tile
#pragma unroll
    for (int m = 0; m < C / 4; ++m) rq4[m] = rk4[m] = make_uint2(0u, 0u), rg[m] = rb[m] = 0u;
    if (tokens) {
#pragma unroll
      for (int m = 0; m < C / 4; ++m) {
        const int t = 4 * warp + m;
        if (t < tc) {
          const int64_t tok = bos + t0 + t;
          if (4 * lane < K) {
            rq4[m] = *reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(a.q) + b * a.q_s[0] + tok * a.q_s[1] +
                                                     r.hq * a.q_s[2] + 4 * lane);
            rk4[m] = *reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(a.k) + b * a.k_s[0] + tok * a.k_s[1] +
                                                     r.hq * a.k_s[2] + 4 * lane);
          }
          if (a.g) rg[m] = load1_bits(a.g, a.g_dtype, b * a.g_s[0] + tok * a.g_s[1] + r.h * a.g_s[2]);
          if (a.beta) rb[m] = load1_bits(a.beta, a.beta_dtype, b * a.beta_s[0] + tok * a.beta_s[1] + r.h * a.beta_s[2]);
        }
      }
    }
    const int c0 = r.j0 + 16 * warp + 2 * g;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int ee = 0; ee < 2; ++ee) {
        const int t = nt * 8 + 2 * t4 + ee;
        vb[nt][ee] = t < tc ? *reinterpret_cast<const uint32_t*>(static_cast<const uint16_t*>(a.v) + b * a.v_s[0] +
                                                                 (bos + t0 + t) * a.v_s[1] + r.h * a.v_s[2] + c0)
                            : 0u;
      }
  };

  // ---- persistent walk; the next tile's index loads, state copy and first chunk fly during this tile's products.
  // Ungrouped (fewer rows than CTAs: N = 1 spreads its tiles over as many CTAs): tiles t = blockIdx.x + i gridDim.x.
  // Grouped (a row (n, h) for every CTA): rows blockIdx.x + i gridDim.x, each row's V / 64 tiles back to back; a later
  // V-tile of a row of <= C tokens reuses the staged chunk (s_k, s_q, the token scalars, s_d, s_e, T, B: token-only,
  // written before the row's first tile's second barrier and not written after it), so it runs no staging, no token
  // dots and neither chunk barrier: its own work is S0^T [k | q], r, u, o, w and the update. The barrier at a tile's
  // end orders its reads before the next tile's staging: dropped where the next tile reuses (it writes no shared
  // memory; the state stage is each thread's own). ----
  const uint32_t ntiles = uint32_t(a.N * a.Hv * (a.V / kCols));  // < 2^31 with the grid's reach (the launcher checks)
  const uint32_t nvt = uint32_t(a.V / kCols);
  const bool grouped = nvt > 1 && uint32_t(a.N * a.Hv) >= gridDim.x;
  pdl_start();  // every global access below follows the previous kernel in the stream
  uint32_t tile = grouped ? blockIdx.x * nvt : blockIdx.x;
  Row r = row_of(tile);
  // the first chunk's loads ahead of the start slot: they need the row's token range only, so they fly with the slot's
  // index load (issued behind it, they waited for it: the slot's check and the state copy's addresses use it)
  if (r.len > 0) load_chunk(r, 0, true);
  row_slot(r);
  issue_state(r);
  float s[NJ][4];
#pragma unroll 1
  for (;;) {
    // grouped: the row's next V-tile (its coordinates, slot and gate as this tile's: no index loads), else the first
    // tile of the row gridDim.x on
    const bool same_row = grouped && r.j0 + kCols < a.V;
    const uint32_t nxt = !grouped   ? tile + gridDim.x
                         : same_row ? tile + 1
                                    : (uint32_t(r.n) * uint32_t(a.Hv) + uint32_t(r.h) + gridDim.x) * nvt;
    const bool has_next = nxt < ntiles;
    const bool reuse = grouped && r.j0 != 0 && r.len <= C;  // this tile: the row's chunk is staged
    const bool reuse_next = same_row && r.len <= C;         // the next tile: this row's chunk stays staged
    Row rn;
    if (has_next) {
      if (same_row)
        rn = r, rn.j0 += kCols;
      else
        rn = row_of(nxt), row_slot(rn);
    }
    const int64_t len = r.len, bos = r.bos, b = r.b;
    const int h = r.h, j0 = r.j0, c0 = j0 + 16 * warp + 2 * g;
    if (len > 0 && r.slot < 0) {  // invalid row: exact zeros to its o, nothing else
      for (int64_t x = tid; x < len * (kCols / 2); x += kThreads) {
        const int64_t t = bos + x / (kCols / 2);
        *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(a.o) + b * a.o_s[0] + t * a.o_s[1] + h * a.o_s[2] + j0 +
                                     2 * (x % (kCols / 2))) = 0u;
      }
    }
    if (len <= 0 || r.slot < 0) {  // an empty or invalid row touches nothing else: on to the next tile
      if (has_next) {
        issue_state(rn);
        if (rn.len > 0) load_chunk(rn, 0, !reuse_next);
      }
    } else {
      const float alog = r.alog, dtb = r.dtb;
#pragma unroll 1
      for (int64_t t0 = 0; t0 < len; t0 += C) {
        const int tc = int(len - t0 < C ? len - t0 : C);
        if (t0 > 0) {
          __syncthreads();  // every warp is done with the previous chunk's staged data
          load_chunk(r, t0, true);
        }

        if (!reuse) {
          // ---- staging: raw q, k into the tiles at their keys' logical positions (the warp's 4 tokens as one 8-byte
          // row piece per key), the row factors, gate and beta (zeros past the row's end) ----
          // the row factors (qk_norm_factors' sums in its order): the warp's 4 tokens' sums reduced together
          float sq[C / 4], sk[C / 4];
#pragma unroll
          for (int m = 0; m < C / 4; ++m) {
            float q[4], k[4];
            from_bits4<QK>(make_uint4(rq4[m].x, rq4[m].y, 0u, 0u), q);
            from_bits4<QK>(make_uint4(rk4[m].x, rk4[m].y, 0u, 0u), k);
            sq[m] = sk[m] = 0.f;
#pragma unroll
            for (int e = 0; e < 4; ++e) sq[m] = fmaf(q[e], q[e], sq[m]), sk[m] = fmaf(k[e], k[e], sk[m]);
          }
#pragma unroll
          for (int m = 0; m < C / 4; ++m) sq[m] = lane_sum<1, 32>(sq[m]), sk[m] = lane_sum<1, 32>(sk[m]);
          if (lane < C / 4) {  // lane m: token 4 warp + m
            const int m = lane, t = 4 * warp + m;
            float gg = 0.f, be = 0.f, rq = a.scale, rk = 1.f;
#pragma unroll
            for (int x = 0; x < C / 4; ++x)
              if (x == m)
                gg = from_bits1(a.g_dtype, rg[x]), be = from_bits1(a.beta_dtype, rb[x]), rq = sq[x], rk = sk[x];
            if (a.l2norm)
              rq = a.scale * l2_rnorm(rq), rk = l2_rnorm(rk);
            else
              rq = a.scale, rk = 1.f;
            if (t < tc) {
              if (!a.g) gg = 0.f;
              if (!a.beta) be = 1.f;
              if (a.gate_in_kernel)  // g = -exp(A_log) softplus(a + dt_bias) (gdn-math §4)
                gg = gate_from_raw(gg, alog, dtb, a.softplus_beta, a.softplus_threshold);
              if (a.beta_sigmoid) be = beta_from_raw(be, a.allow_neg_eigval);
            } else {
              gg = be = rq = rk = 0.f;
            }
            s_g[t] = gg, s_be[t] = be, s_rk[t] = rk, s_rq[t] = rq;
          }
          if (4 * lane < K) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int p = key_pos<K>(4 * lane + e);
              if constexpr (QK_BF16) {  // the raw bits: element e of each token's 4-vector
                auto bits = [&](const uint2(&x)[C / 4], int m) {
                  return (e < 2 ? x[m].x : x[m].y) >> (16 * (e & 1)) & 0xffffu;
                };
                *reinterpret_cast<uint2*>(&s_k[0][p][4 * warp]) =
                    make_uint2(bits(rk4, 0) | bits(rk4, 1) << 16, bits(rk4, 2) | bits(rk4, 3) << 16);
                *reinterpret_cast<uint2*>(&s_q[0][p][4 * warp]) =
                    make_uint2(bits(rq4, 0) | bits(rq4, 1) << 16, bits(rq4, 2) | bits(rq4, 3) << 16);
              } else {  // f16 = bf16 hi + lo, exactly
                auto val = [&](const uint2(&x)[C / 4], int m) { return Storage<__half>::to2(e < 2 ? x[m].x : x[m].y); };
                uint32_t kh[2], kl[2], qh[2], ql[2];
#pragma unroll
                for (int m2 = 0; m2 < 2; ++m2) {
                  const float2 k0 = val(rk4, 2 * m2), k1 = val(rk4, 2 * m2 + 1);
                  const float2 q0 = val(rq4, 2 * m2), q1 = val(rq4, 2 * m2 + 1);
                  split2(e & 1 ? k0.y : k0.x, e & 1 ? k1.y : k1.x, kh[m2], kl[m2]);
                  split2(e & 1 ? q0.y : q0.x, e & 1 ? q1.y : q1.x, qh[m2], ql[m2]);
                }
                *reinterpret_cast<uint2*>(&s_k[0][p][4 * warp]) = make_uint2(kh[0], kh[1]);
                *reinterpret_cast<uint2*>(&s_k[1][p][4 * warp]) = make_uint2(kl[0], kl[1]);
                *reinterpret_cast<uint2*>(&s_q[0][p][4 * warp]) = make_uint2(qh[0], qh[1]);
                *reinterpret_cast<uint2*>(&s_q[1][p][4 * warp]) = make_uint2(ql[0], ql[1]);
              }
            }
          }
          __syncthreads();

          // gamma_t (inclusive scan over the chunk's tokens, lanes 0-15), e^{gamma_t}, e^{gamma_last - gamma_t}
          float gam = lane < C ? s_g[lane] : 0.f;
#pragma unroll
          for (int m = 1; m < C; m <<= 1) {
            const float y = __shfl_up_sync(0xffffffffu, gam, m);
            if (lane >= m) gam += y;
          }
          const float gam_last = __shfl_sync(0xffffffffu, gam, tc - 1);
          if (warp == 0 && lane < C) s_d[lane] = expf(gam), s_e[lane] = lane < tc ? expf(gam_last - gam) : 0.f;

          // ---- token dots (warp 0: K K^T -> A -> T; warp 1: Q K^T -> B) by the tensor cores, raw rows, the factors
          // after: k^_t.k^_s = rk_t rk_s (k_t.k_s), q'_t.k^_s = rq_t rk_s (q_t.k_s) ----
          if (warp < 2) {
            const uint16_t(*xs)[K][kLd] = warp == 0 ? s_k : s_q;
            float acc[2][2][4] = {};  // [ks % 2][nt]: two dependent chains a tile, each half as long
#pragma unroll
            for (int ks = 0; ks < K / 16; ++ks) {
              float(&ac)[2][4] = acc[ks & 1];
              // matrices (key half, token half) in the order (0,0), (1,0), (0,1), (1,1): B fragments of k as they are,
              // A fragments of x [token][key] as {0, 2, 1, 3}
              const int row = 16 * ks + (mi & 1) * 8 + mr, col = (mi >> 1) * 8;
              uint32_t bh[4], xh[4];
              ldsm_x4_t(bh, &s_k[0][row][col]);
              ldsm_x4_t(xh, &xs[0][row][col]);
              const uint32_t ah[4] = {xh[0], xh[2], xh[1], xh[3]};
              if constexpr (NP == 1) {
                mma(ac[0], ah, bh[0], bh[1]);
                mma(ac[1], ah, bh[2], bh[3]);
              } else {  // all four parts: the f16 dots stay exact to fp32 accumulation
                uint32_t bl[4], xl[4];
                ldsm_x4_t(bl, &s_k[1][row][col]);
                ldsm_x4_t(xl, &xs[1][row][col]);
                const uint32_t al[4] = {xl[0], xl[2], xl[1], xl[3]};
#pragma unroll
                for (int nt = 0; nt < 2; ++nt) {
                  mma(ac[nt], ah, bh[2 * nt], bh[2 * nt + 1]);
                  mma(ac[nt], al, bh[2 * nt], bh[2 * nt + 1]);
                  mma(ac[nt], ah, bl[2 * nt], bl[2 * nt + 1]);
                  mma(ac[nt], al, bl[2 * nt], bl[2 * nt + 1]);
                }
              }
            }
            // element (t, s) of the two chains' sum: t = g + 8 (e / 2), s = 8 nt + 2 t4 + e % 2, times e^{gamma_t -
            // gamma_s} rt_t rk_s (rt: A beta_t rk_t, B rq_t) for every element; the triangle and the chunk's end select
            // after (§5.8: above the diagonal the exponential may be inf; a select, never a multiplied mask).
            // Branch-free, the 8 elements' shuffles, loads and exponentials overlap (a conditional factor made a branch
            // per element, each waiting on its own)
            float gt[2], rt[2], gs[2][2], ks[2][2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int t = g + 8 * h;
              gt[h] = __shfl_sync(0xffffffffu, gam, t);
              const float be = s_be[t], rk = s_rk[t], rq = s_rq[t];
              rt[h] = warp == 0 ? be * rk : rq;
            }
#pragma unroll
            for (int nt = 0; nt < 2; ++nt)
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int sx = 8 * nt + 2 * t4 + e;
                gs[nt][e] = __shfl_sync(0xffffffffu, gam, sx);
                ks[nt][e] = s_rk[sx];
              }
#pragma unroll
            for (int nt = 0; nt < 2; ++nt)
#pragma unroll
              for (int e = 0; e < 4; ++e)
                acc[0][nt][e] =
                    (acc[0][nt][e] + acc[1][nt][e]) * expf(gt[e >> 1] - gs[nt][e & 1]) * rt[e >> 1] * ks[nt][e & 1];
            if (warp == 0) {  // A^T [s][t]: the substitution reads A's columns
#pragma unroll
              for (int nt = 0; nt < 2; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                  const int t = g + 8 * (e >> 1), sx = 8 * nt + 2 * t4 + (e & 1);
                  s_a[sx][t] = sx < t && t < tc ? acc[0][nt][e] : 0.f;
                }
            } else {
#pragma unroll
              for (int nt = 0; nt < 2; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                  const int t = g + 8 * (e >> 1), sx = 8 * nt + 2 * t4 + (e & 1);
                  uint32_t hi, lo;
                  split2(sx <= t && t < tc ? acc[0][nt][e] : 0.f, 0.f, hi, lo);
                  s_b[0][t][sx] = uint16_t(hi), s_b[1][t][sx] = uint16_t(lo);
                }
            }
            if (warp == 0) {
              __syncwarp();
              const bool big = __ballot_sync(0xffffffffu, lane < C && s_be[lane] > 1.f) != 0u;  // max beta > 1
              // T = (I + A)^{-1}, column m per lane, by the substitution in the column order (chunk_inverse_column).
              // Rows past the chunk's tokens: A is zero there (x_t = [t = m] stays finite and enters nothing), and T
              // selects them to zero.
              if (lane < C) {
                float x[C];
                chunk_inverse_column<C>(s_a, lane, x);
                // T^T [m][t] = T[t][m]: this lane's column is a row of s_t, hi and lo, two 16-byte stores each; in a
                // chunk whose largest beta exceeds 1 also T's rest x - hi - lo (exact in fp32) as a third part, each
                // pair stored as it is formed (a repeated key's drift over many calls: docs/recurrent.md "Numerics")
                if (big) {
#pragma unroll
                  for (int p = 0; p < C / 2; ++p) {
                    const float x0 = 2 * p < tc ? x[2 * p] : 0.f, x1 = 2 * p + 1 < tc ? x[2 * p + 1] : 0.f;
                    uint32_t hi, lo;
                    split2(x0, x1, hi, lo);
                    const float2 fh = Bf::to2(hi), fl = Bf::to2(lo);
                    *reinterpret_cast<uint32_t*>(&s_t[0][lane][2 * p]) = hi;
                    *reinterpret_cast<uint32_t*>(&s_t[1][lane][2 * p]) = lo;
                    *reinterpret_cast<uint32_t*>(&s_t[2][lane][2 * p]) = Bf::from2(x0 - fh.x - fl.x, x1 - fh.y - fl.y);
                  }
                } else {
                  uint32_t hi[C / 2], lo[C / 2];
#pragma unroll
                  for (int p = 0; p < C / 2; ++p)
                    split2(2 * p < tc ? x[2 * p] : 0.f, 2 * p + 1 < tc ? x[2 * p + 1] : 0.f, hi[p], lo[p]);
#pragma unroll
                  for (int p = 0; p < 2; ++p) {
                    *reinterpret_cast<uint4*>(&s_t[0][lane][8 * p]) =
                        make_uint4(hi[4 * p], hi[4 * p + 1], hi[4 * p + 2], hi[4 * p + 3]);
                    *reinterpret_cast<uint4*>(&s_t[1][lane][8 * p]) =
                        make_uint4(lo[4 * p], lo[4 * p + 1], lo[4 * p + 2], lo[4 * p + 3]);
                  }
                }
              }
            }
          }
        }

        if (t0 == 0) {  // the start state, landed (this thread's own copies) into the accumulator tiles
          cp_async_wait_all();
#pragma unroll
          for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float2 x = load_pair(&s_st[2 * j + e][tid][0]);
              s[j][e] = x.x, s[j][2 + e] = x.y;
            }
          if (has_next) issue_state(rn);  // into this thread's own pairs, just read
        }

        // ---- S0^T k_t and S0^T q_t (raw rows), 16 columns x 16 tokens each, over the keys: two accumulators a
        // product by the parity of the key step (each chain K / 16 dependent mma, not K / 8), summed after ----
        float acck[2][2][4] = {}, accq[2][2][4] = {};  // [ks % 2][nt]
#pragma unroll
        for (int ks = 0; ks < K / 16; ++ks) {
          uint32_t ah[4], al[4];
          afrag(s[2 * ks], s[2 * ks + 1], ah, al);
          pin(ah), pin(al);  // formed after the previous step's products, not all K / 16 steps ahead
          const int row = 16 * ks + (mi & 1) * 8 + mr, col = (mi >> 1) * 8;
          uint32_t fk[NP][4], fq[NP][4];
#pragma unroll
          for (int p = 0; p < NP; ++p) ldsm_x4_t(fk[p], &s_k[p][row][col]), ldsm_x4_t(fq[p], &s_q[p][row][col]);
#pragma unroll
          for (int nt = 0; nt < 2; ++nt) {
            mma_split<NP>(acck[ks & 1][nt], ah, al, &fk[0][2 * nt], &fk[NP - 1][2 * nt]);
            mma_split<NP>(accq[ks & 1][nt], ah, al, &fq[0][2 * nt], &fq[NP - 1][2 * nt]);
          }
        }
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) acck[0][nt][e] += acck[1][nt][e], accq[0][nt][e] += accq[1][nt][e];
        if (!reuse) __syncthreads();  // T, B, the decay scalars (reused: staged before the row's first tile's)

        // ---- r^T = beta (v - e^{gamma} rk S0^T k), qs^T = e^{gamma} rq S0^T q: element (column c0 + e / 2, token
        // 8 nt + 2 t4 + e % 2) ----
        float r[2][4], o[2][4];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int ee = 0; ee < 2; ++ee) {
            const int t = nt * 8 + 2 * t4 + ee;
            const float2 vv = act_pair(vb[nt][ee], v_bf16);
            const float be = s_be[t], dk = s_d[t] * s_rk[t], dq = s_d[t] * s_rq[t];
            r[nt][ee] = be * (vv.x - dk * acck[0][nt][ee]);
            r[nt][2 + ee] = be * (vv.y - dk * acck[0][nt][2 + ee]);
            o[nt][ee] = dq * accq[0][nt][ee], o[nt][2 + ee] = dq * accq[0][nt][2 + ee];
          }
        // ---- u^T = r^T T^T, then o^T += u^T B^T (B fragments of B: matrices (token half, s half) in the order (0,0),
        // (0,1), (1,0), (1,1)) ----
        float u[2][4] = {};
        const bool big = __ballot_sync(0xffffffffu, lane < C && s_be[lane] > 1.f) != 0u;
        {
          const int row = (mi >> 1) * 8 + mr, col = (mi & 1) * 8;
          uint32_t ah[4], al[4], fh[4], fl[4];  // (one operand pair at a time: the register peak is here)
          afrag(r[0], r[1], ah, al);
          // T^T [s][t] as stored (as s_k: K-major), by the transposing load: matrices (s half, t half) in the order
          // (0,0), (1,0), (0,1), (1,1)
          const int srow = (mi & 1) * 8 + mr, tcol = (mi >> 1) * 8;
          if (big) {  // the chunk's largest beta > 1: T's third part first (into fh's registers)
            ldsm_x4_t(fh, &s_t[2][srow][tcol]);
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) mma(u[nt], ah, fh[2 * nt], fh[2 * nt + 1]);
          }
          ldsm_x4_t(fh, &s_t[0][srow][tcol]), ldsm_x4_t(fl, &s_t[1][srow][tcol]);
#pragma unroll
          for (int nt = 0; nt < 2; ++nt) mma_split<2>(u[nt], ah, al, &fh[2 * nt], &fl[2 * nt]);
          afrag(u[0], u[1], ah, al);
          ldsm_x4(fh, &s_b[0][row][col]), ldsm_x4(fl, &s_b[1][row][col]);
#pragma unroll
          for (int nt = 0; nt < 2; ++nt) mma_split<2>(o[nt], ah, al, &fh[2 * nt], &fl[2 * nt]);
        }
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int ee = 0; ee < 2; ++ee) {
            const int t = nt * 8 + 2 * t4 + ee;
            if (t < tc)
              *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(a.o) + b * a.o_s[0] + (bos + t0 + t) * a.o_s[1] +
                                           h * a.o_s[2] + c0) = act_bits(o[nt][ee], o[nt][2 + ee], v_bf16);
            const float w = s_e[t] * s_rk[t];  // w_t = e^{gamma_last - gamma_t} rk_t u_t (k^_t = rk_t k_t)
            u[nt][ee] *= w, u[nt][2 + ee] *= w;
          }

        // ---- S^T = e^{gamma_last} S0^T + w^T K (B fragments of k: matrices (key tile, token half) in the order
        // (j, 0), (j, 1), (j + 1, 0), (j + 1, 1)) ----
        const float dl = s_d[tc - 1];  // e^{gamma_last}
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[j][e] *= dl;
        {
          uint32_t ah[4], al[4];
          afrag(u[0], u[1], ah, al);
#pragma unroll
          for (int jp = 0; jp < NJ / 2; ++jp) {
            const int row = 8 * (2 * jp + (mi >> 1)) + mr, col = (mi & 1) * 8;
            uint32_t f[NP][4];
#pragma unroll
            for (int p = 0; p < NP; ++p) ldsm_x4(f[p], &s_k[p][row][col]);
            mma_split<NP>(s[2 * jp], ah, al, &f[0][0], &f[NP - 1][0]);
            mma_split<NP>(s[2 * jp + 1], ah, al, &f[0][2], &f[NP - 1][2]);
          }
        }
      }

      if (has_next && rn.len > 0) load_chunk(rn, 0, !reuse_next);  // (the last chunk's v pairs are consumed)
      // ---- the final state to the start slot (1-D slots, commit) ----
      if (a.commit && a.T_max == 0) {
        ST* const dst = pool_at(r);
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) store_pair(dst + (2 * j + e) * rs, s[j][e], s[j][2 + e]);
      }
    }
    if (!has_next) break;
    // every warp is done with this tile's shared data before the next tile stages its own (a tile that reuses them
    // writes none; the --tsan emulation reports a reused tile's s_k reads against the next row's staging without it)
    if (!reuse_next) __syncthreads();
    tile = nxt, r = rn;
  }
  cp_async_wait_all();  // (an empty group at most: no copy may be in flight at exit)
}

// grid = min(tiles, kMinBlocks x SMs) persistent CTAs over the N x Hv x V / 64 tiles (the launcher checks the 32-bit
// tile index); K-major pool, 16-bit q, k, v (the plan checks).
template <class ST, int K>
cudaError_t launch_recurrent_wy_mma(const RecurrentArgs& a, int sms, cudaStream_t stream) {
  const int64_t ntiles = a.N * a.Hv * (a.V / wymma::kCols);
  if (ntiles == 0) return cudaSuccess;
  // the walk's tile index reaches ntiles + grid (ungrouped) or ntiles + grid V / 64 (grouped) in 32 bits
  if (ntiles + int64_t(wymma::kMinBlocks) * sms * (a.V / wymma::kCols) > 0x7fffffff || a.V % wymma::kCols != 0)
    return cudaErrorInvalidConfiguration;
  const int64_t grid = ntiles < int64_t(wymma::kMinBlocks) * sms ? ntiles : int64_t(wymma::kMinBlocks) * sms;
  constexpr size_t smem = wymma::state_stage_bytes<ST, K>();
  static std::atomic<uint64_t> done_bf16{0}, done_f16{0};
  if (a.qk_dtype == DType::bf16) {
    if (const int e = prepare_launch(recurrent_wy_mma_kernel<ST, K, true>, smem, done_bf16))
      return static_cast<cudaError_t>(e);
    return launch_pdl(recurrent_wy_mma_kernel<ST, K, true>, dim3(unsigned(grid)), dim3(wymma::kThreads), smem, stream,
                      a);
  } else {
    if (const int e = prepare_launch(recurrent_wy_mma_kernel<ST, K, false>, smem, done_f16))
      return static_cast<cudaError_t>(e);
    return launch_pdl(recurrent_wy_mma_kernel<ST, K, false>, dim3(unsigned(grid)), dim3(wymma::kThreads), smem, stream,
                      a);
  }
}

#define FGDN_INSTANTIATE_RECURRENT_WY_MMA(ST)                                                    \
  template cudaError_t launch_recurrent_wy_mma<ST, 64>(const RecurrentArgs&, int, cudaStream_t); \
  template cudaError_t launch_recurrent_wy_mma<ST, 128>(const RecurrentArgs&, int, cudaStream_t);

}  // namespace flashgdn::cuda
