// The recurrent kernel: decode (T = 1), multi-token decode and speculative verify (gdn-math §1.2, §8).
//
// Work split: a tile is (row n, value head h, V-tile of BV columns); one CTA of 128 threads owns a tile at a
// time. State columns are independent (column j of S only meets column j of v), so a tile needs no other
// CTA, which also makes protocol A's read-before-write safe (gdn-math §8.2): the tile is loaded whole
// before its first store, and no other CTA touches it.
//
// Pipeline: CTAs are persistent (grid = resident capacity) and walk tiles with stride gridDim.x. While tile
// i is computed, tile i+1's state streams into a second shared-memory stage with cp.async (no registers
// held), and tile i+1's q/k/v/gates are requested before tile i+2's slot lookup, so the dependent index
// loads, the state loads and the activation loads of consecutive tiles overlap.
//
// Registers: the K x BV tile lives in fp32 registers for all tokens (read once, written once). Each thread
// holds P tile rows x 4 contiguous elements (a tile row is one key index i for K-major, one value index j
// for V-major): one 16-byte (fp32) or 8-byte (bf16/f16) vector per row, coalesced for both layouts.
//
// Per token, from the pre-update state S (one pass over the registers, two reductions over K):
//   kS = S^T k,  qS = S^T q'                 (q' = scale * q^)
//   u  = beta (v - alpha kS)                 (2a), with S~ = alpha S
//   o  = alpha qS + (q'.k) u                 (= scale S_t^T q, the post-update read, gdn-math §1.3)
//   S  = alpha S + k u^T                     (2b)
// l2norm, q'.k, gates and the token's v slice are computed once per (token, tile) into shared memory, for
// up to kRecTch tokens at a time, before the token loop, so the loop itself does no global loads.
#pragma once

#include <type_traits>

#include "cuda/common/device_util.cuh"
#include "cuda/recurrent/recurrent_args.hpp"

namespace flashgdn::cuda {

inline constexpr int kRecThreads = 128;
inline constexpr int kRecWarps = kRecThreads / 32;
inline constexpr int kRecTch = 8;                           // tokens staged in shared memory per chunk
inline constexpr int kRecTokPerWarp = kRecTch / kRecWarps;  // staged tokens per warp

template <StateLayout L, int K, int BV>
struct RecTile {
  static constexpr bool kmaj = L == StateLayout::k_major;
  static constexpr int INNER = kmaj ? BV : K;    // contiguous extent of a tile row
  static constexpr int OUTER = kmaj ? K : BV;    // tile rows
  static constexpr int TPR = INNER / 4;          // threads per tile row (4 elements each)
  static constexpr int RPP = kRecThreads / TPR;  // tile rows per pass of the CTA
  static constexpr int P = OUTER / RPP;          // rows per thread
  // Register budget per thread: <= 168 (3 CTAs per SM). The cp.async pipeline keeps the next tile's state
  // in flight without registers, so few CTAs per SM suffice; the budget leaves room for the staged
  // activations of two tokens per warp and two tiles' coordinates without spilling.
  static constexpr int kMinBlocks = 3;
  static_assert(TPR >= 1 && TPR <= 32 && (TPR & (TPR - 1)) == 0, "a tile row must fit in one warp");
  static_assert(P >= 1 && OUTER % RPP == 0, "tile rows must split evenly over the CTA");
  static_assert(kRecTch * BV / 4 <= kRecThreads, "one staged v vector per thread");
};

__device__ __forceinline__ bool slot_valid(int64_t s, int64_t slots, bool null_invalid) {
  return s >= 0 && s < slots && !(null_invalid && s == 0);
}

// Where a tile lives and what it reads; every field is uniform across the CTA.
struct RecTileInfo {
  int32_t n = 0, h = 0, j0 = 0;
  int32_t b = 0, bos = 0, len = 0;  // batch index, first token, tokens of the row
  int32_t slot = -1;                // start slot (pool), -1 when invalid
  int32_t ibuf = -1;                // intermediate entry, -1 to skip
  bool valid = true;                // false: zero outputs, nothing else written
  bool load = false;                // a start state is copied in (else zeros)
};

// First-level index values of a tile, loaded ahead of their use.
struct RecIndexLoads {
  int64_t cu0 = 0, cu1 = 0;  // cu_seqlens[n], cu_seqlens[n + 1] (varlen)
  int64_t idx = -1;          // 1-D: the start slot; 2-D: num_accepted_tokens[n] (pool)
  int64_t ibuf = -1;         // intermediate entry (intermediate_states)
};

// Staged activations of up to kRecTokPerWarp tokens per warp (plus one v vector per thread), loaded to
// registers first and finished (norms, gates) later, so the loads overlap other latency.
// The staged tokens' loads as bits (load4_bits / load1_bits), widened in stage_store: all of them are issued before
// the first is widened (a widening inside a load's dtype branch makes the next load wait a round trip).
struct RecStaged {
  uint4 q[kRecTokPerWarp], k[kRecTokPerWarp];
  uint32_t g[kRecTokPerWarp], be[kRecTokPerWarp];
  int64_t wslot[kRecTokPerWarp];
  uint4 v;
  uint32_t A_log, dt_bias;
};

template <StateLayout L, class ST, int K, int BV>
__global__ void __launch_bounds__(kRecThreads, RecTile<L, K, BV>::kMinBlocks) recurrent_kernel(const RecurrentArgs a) {
  using Tile = RecTile<L, K, BV>;
  constexpr bool kmaj = Tile::kmaj;
  constexpr int TPR = Tile::TPR, RPP = Tile::RPP, P = Tile::P;
  constexpr int NW = kRecWarps, TCH = kRecTch;
  constexpr int VB = 4 * int(sizeof(ST));  // bytes of one state vector (16 or 8)
  using Vec = std::conditional_t<VB == 16, float4, uint2>;

  // Two state stages (thread-private slots: each thread copies and reads back only its own vectors), then
  // the staging area of one chunk.
  __shared__ Vec s_stage[2][P][kRecThreads];
  __shared__ int64_t s_slot[TCH];              // pool slot of token t (2-D slots), -1 = none
  __shared__ __align__(16) float s_q[TCH][K];  // scale * q^
  __shared__ __align__(16) float s_k[TCH][K];  // k^
  __shared__ __align__(16) float s_v[TCH][BV];
  __shared__ __align__(16) float s_red[2][NW][2][BV];     // K-major cross-warp partial sums, by token parity
  __shared__ float s_alpha[TCH], s_beta[TCH], s_qk[TCH];  // exp(g), beta, q'.k^

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int c4 = tid % TPR;  // 4-vector index along the tile row
  const int r0 = tid / TPR;  // tile row within a pass
  const int nvt = a.V / BV;
  const int64_t ntiles = a.N * a.Hv * nvt;
  const bool has_pool = a.pool != nullptr;
  const int64_t group = a.Hv / a.Hqk;  // GQA: value head h reads q/k head h / (Hv / Hqk) (gdn-math §2)

  // Offset of this thread's p-th vector inside a [K, V] / [V, K] state with row stride rs.
  auto tile_off = [&](int j0, int p, int64_t rs) -> int64_t {
    const int row = r0 + p * RPP;
    return kmaj ? int64_t(row) * rs + j0 + 4 * c4 : int64_t(j0 + row) * rs + 4 * c4;
  };

  // ---- a tile's first-level index loads (cu_seqlens, slot or accepted count, buffer index), issued early
  // and consumed later by coords / lookup ----
  auto issue_indices = [&](int64_t tile) {
    RecIndexLoads q;
    const int64_t n = tile / nvt / a.Hv;
    if (a.varlen) {
      q.cu0 = load_index(a.cu_seqlens, a.cu_i64, n);
      q.cu1 = load_index(a.cu_seqlens, a.cu_i64, n + 1);
    }
    if (has_pool) {
      if (a.T_max > 0)  // 2-D slots: the accepted count picks the column
        q.idx = a.num_accepted ? load_index(a.num_accepted, a.na_i64, n * a.na_s) : 1;
      else
        q.idx = a.state_indices ? load_index(a.state_indices, a.si_i64, n * a.si_s[0]) : n;
    }
    if (a.inter) q.ibuf = a.inter_indices ? load_index(a.inter_indices, a.ii_i64, n * a.ii_s) : n;
    return q;
  };

  // ---- tile coordinates and token range: cu_seqlens clamped into [0, T] and made monotone ----
  auto coords = [&](int64_t tile, const RecIndexLoads& q) {
    RecTileInfo ti;
    const int64_t nh = tile / nvt;
    ti.j0 = int32_t(tile % nvt) * BV;
    ti.h = int32_t(nh % a.Hv);
    ti.n = int32_t(nh / a.Hv);
    if (a.varlen) {
      int64_t bos = q.cu0, eos = q.cu1;
      bos = bos < 0 ? 0 : (bos > a.T ? a.T : bos);
      eos = eos < bos ? bos : (eos > a.T ? a.T : eos);
      ti.b = 0, ti.bos = int32_t(bos), ti.len = int32_t(eos - bos);
    } else {
      ti.b = ti.n, ti.bos = 0, ti.len = int32_t(a.T);
    }
    return ti;
  };

  // ---- the row's start slot and validity (gdn-math §8.1, §8.2) and its intermediate entry ----
  auto lookup = [&](RecTileInfo& ti, const RecIndexLoads& q) {
    if (has_pool) {
      int64_t slot = -1;
      bool ok = true;
      if (a.T_max > 0) {  // 2-D slots: start from column a - 1
        const int64_t acc = q.idx;
        if (acc < 1 || acc > a.T_max)
          ok = false;
        else
          slot = load_index(a.state_indices, a.si_i64, ti.n * a.si_s[0] + (acc - 1) * a.si_s[1]);
      } else {
        slot = q.idx;
      }
      ti.valid = ok && slot_valid(slot, a.slots, a.null_slot_is_invalid);
      ti.slot = ti.valid ? int32_t(slot) : -1;
      ti.load = ti.valid && ti.len > 0;
    } else {
      ti.valid = true;
      ti.load = a.h0 != nullptr && (ti.len > 0 || a.hT != nullptr);
    }
    if (a.inter && ti.valid && ti.len > 0) ti.ibuf = q.ibuf >= 0 && q.ibuf < a.n_buf ? int32_t(q.ibuf) : -1;
  };

  // ---- start state -> shared stage (cp.async) ----
  auto copy_state = [&](const RecTileInfo& ti, int stage) {
    if (!ti.load) return;
    const ST* src;
    int64_t rs;
    if (has_pool) {
      src = static_cast<const ST*>(a.pool) + int64_t(ti.slot) * a.pool_s[0] + int64_t(ti.h) * a.pool_s[1];
      rs = a.pool_s[2];
    } else {  // ST is float without a pool
      src = reinterpret_cast<const ST*>(a.h0 + int64_t(ti.n) * a.h0_s[0] + int64_t(ti.h) * a.h0_s[1]);
      rs = a.h0_s[2];
    }
#pragma unroll
    for (int p = 0; p < P; ++p) cp_async<VB>(&s_stage[stage][p][tid], src + tile_off(ti.j0, p, rs));
  };

  // ---- staging, phase 1: global loads into registers (warp w: tokens w, w + NW; thread: one v vector) ----
  auto stage_load = [&](const RecTileInfo& ti, int t0, int nt, RecStaged& r) {
    const int64_t hq = ti.h / group;
#pragma unroll
    for (int m = 0; m < kRecTokPerWarp; ++m) {
      const int tt = warp + m * NW;
      r.q[m] = r.k[m] = make_uint4(0u, 0u, 0u, 0u);  // +0 in every dtype
      r.g[m] = r.be[m] = 0u, r.wslot[m] = -1;
      if (tt >= nt) continue;
      const int64_t t = int64_t(ti.bos) + t0 + tt, b = ti.b;
      if (4 * lane < K) {
        r.q[m] = load4_bits(a.q, a.qk_dtype, b * a.q_s[0] + t * a.q_s[1] + hq * a.q_s[2] + 4 * lane);
        r.k[m] = load4_bits(a.k, a.qk_dtype, b * a.k_s[0] + t * a.k_s[1] + hq * a.k_s[2] + 4 * lane);
      }
      if (a.g) r.g[m] = load1_bits(a.g, a.g_dtype, b * a.g_s[0] + t * a.g_s[1] + ti.h * a.g_s[2]);
      if (a.beta) r.be[m] = load1_bits(a.beta, a.beta_dtype, b * a.beta_s[0] + t * a.beta_s[1] + ti.h * a.beta_s[2]);
      // Protocol A: the state after token t goes to slot [n, t] when that slot is valid (and t < T_max).
      const int64_t tr = t0 + tt;
      if (has_pool && a.commit && a.T_max > 0 && tr < a.T_max)
        r.wslot[m] = load_index(a.state_indices, a.si_i64, ti.n * a.si_s[0] + tr * a.si_s[1]);
    }
    r.A_log = a.gate_in_kernel ? load1_bits(a.A_log, a.A_log_dtype, ti.h * a.A_log_s) : 0u;
    r.dt_bias = a.gate_in_kernel && a.dt_bias ? load1_bits(a.dt_bias, a.dt_bias_dtype, ti.h * a.dt_bias_s) : 0u;
    r.v = make_uint4(0u, 0u, 0u, 0u);
    if (tid < nt * (BV / 4)) {
      const int tt = tid / (BV / 4), c = tid % (BV / 4);
      r.v = load4_bits(
          a.v, a.v_dtype,
          int64_t(ti.b) * a.v_s[0] + (int64_t(ti.bos) + t0 + tt) * a.v_s[1] + ti.h * a.v_s[2] + ti.j0 + 4 * c);
    }
  };

  // ---- staging, phase 2: l2norm, scale, q'.k, gates -> shared memory ----
  auto stage_store = [&](int nt, RecStaged& r) {
#pragma unroll
    for (int m = 0; m < kRecTokPerWarp; ++m) {
      const int tt = warp + m * NW;
      if (tt >= nt) continue;  // warp-uniform
      float q[4], k[4];
      from_bits4(a.qk_dtype, r.q[m], q);
      from_bits4(a.qk_dtype, r.k[m], k);
      float rq, rk;
      qk_norm_factors(q, k, a.scale, a.l2norm, &rq, &rk);
      float qk = 0.f;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        q[e] *= rq;
        k[e] *= rk;
        qk = fmaf(q[e], k[e], qk);
      }
      qk = lane_sum<1, 32>(qk);
      if (4 * lane < K) {
        *reinterpret_cast<float4*>(&s_q[tt][4 * lane]) = make_float4(q[0], q[1], q[2], q[3]);
        *reinterpret_cast<float4*>(&s_k[tt][4 * lane]) = make_float4(k[0], k[1], k[2], k[3]);
      }
      if (lane == 0) {
        float g = a.g ? from_bits1(a.g_dtype, r.g[m]) : 0.f;
        const float be = a.beta ? from_bits1(a.beta_dtype, r.be[m]) : 1.f;
        if (a.gate_in_kernel)  // g = -exp(A_log) softplus(a + dt_bias) (gdn-math §4)
          g = gate_from_raw(g, from_bits1(a.A_log_dtype, r.A_log),
                            a.dt_bias ? from_bits1(a.dt_bias_dtype, r.dt_bias) : 0.f, a.softplus_beta,
                            a.softplus_threshold);
        s_alpha[tt] = expf(g);
        s_beta[tt] = a.beta_sigmoid ? beta_from_raw(be, a.allow_neg_eigval) : be;
        s_qk[tt] = qk;
        s_slot[tt] = slot_valid(r.wslot[m], a.slots, a.null_slot_is_invalid) ? r.wslot[m] : -1;
      }
    }
    if (tid < nt * (BV / 4)) {
      const int tt = tid / (BV / 4), c = tid % (BV / 4);
      float v[4];
      from_bits4(a.v_dtype, r.v, v);
      *reinterpret_cast<float4*>(&s_v[tt][4 * c]) = make_float4(v[0], v[1], v[2], v[3]);
    }
  };

  // ---- one tile: state from the stage, tokens, stores ----
  auto process = [&](const RecTileInfo& ti, RecStaged& r, int stage) {
    const int64_t h = ti.h, b = ti.b;
    if (ti.len == 0) {  // touches nothing, except the no-pool final state = initial state (gdn-math §1.5)
      if (!has_pool && a.hT) {
        float* dst = a.hT + int64_t(ti.n) * a.hT_s[0] + h * a.hT_s[1];
#pragma unroll
        for (int p = 0; p < P; ++p) {
          float x[4] = {0.f, 0.f, 0.f, 0.f};
          if (ti.load) load4(reinterpret_cast<const float*>(&s_stage[stage][p][tid]), x);
          store4(dst + tile_off(ti.j0, p, a.hT_s[2]), x);
        }
      }
      return;
    }
    if (!ti.valid) {  // invalid row: zero outputs, nothing else written
      const float z[4] = {0.f, 0.f, 0.f, 0.f};
      for (int idx = tid; idx < ti.len * (BV / 4); idx += kRecThreads) {
        const int64_t t = int64_t(ti.bos) + idx / (BV / 4);
        store4(a.o, a.v_dtype, b * a.o_s[0] + t * a.o_s[1] + h * a.o_s[2] + ti.j0 + 4 * (idx % (BV / 4)), z);
      }
      return;
    }
    float s[P][4];
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if (ti.load) {
        load4(reinterpret_cast<const ST*>(&s_stage[stage][p][tid]), s[p]);
      } else {
        s[p][0] = s[p][1] = s[p][2] = s[p][3] = 0.f;
      }
    }

    for (int t0 = 0; t0 < ti.len; t0 += TCH) {
      const int nt = ti.len - t0 < TCH ? ti.len - t0 : TCH;
      if (t0 > 0) stage_load(ti, t0, nt, r);
      __syncthreads();  // the previous chunk (or tile) is done with the staging area
      stage_store(nt, r);
      __syncthreads();

      for (int tt = 0; tt < nt; ++tt) {
        const int64_t t = int64_t(ti.bos) + t0 + tt;
        const float alpha = s_alpha[tt], be = s_beta[tt], qk = s_qk[tt];
        const int64_t o_off = b * a.o_s[0] + t * a.o_s[1] + h * a.o_s[2];
        if constexpr (kmaj) {
          // Thread holds rows i_p = r0 + p RPP, columns j0 + 4 c4 + e. Reduce over i: own rows, then the lanes
          // with the same c4, then the warps through shared memory (double-buffered by token parity).
          float kS[4] = {0.f, 0.f, 0.f, 0.f}, qS[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
          for (int p = 0; p < P; ++p) {
            const float ki = s_k[tt][r0 + p * RPP], qi = s_q[tt][r0 + p * RPP];
#pragma unroll
            for (int e = 0; e < 4; ++e) kS[e] = fmaf(s[p][e], ki, kS[e]), qS[e] = fmaf(s[p][e], qi, qS[e]);
          }
#pragma unroll
          for (int e = 0; e < 4; ++e) kS[e] = lane_sum<TPR, 32>(kS[e]), qS[e] = lane_sum<TPR, 32>(qS[e]);
          float(*red)[2][BV] = s_red[tt & 1];
          if (lane < TPR) {
            *reinterpret_cast<float4*>(&red[warp][0][4 * c4]) = make_float4(kS[0], kS[1], kS[2], kS[3]);
            *reinterpret_cast<float4*>(&red[warp][1][4 * c4]) = make_float4(qS[0], qS[1], qS[2], qS[3]);
          }
          __syncthreads();
          float4 ks4 = *reinterpret_cast<const float4*>(&red[0][0][4 * c4]);
          float4 qs4 = *reinterpret_cast<const float4*>(&red[0][1][4 * c4]);
#pragma unroll
          for (int w = 1; w < NW; ++w) {  // fixed order: bitwise reproducible
            const float4 x = *reinterpret_cast<const float4*>(&red[w][0][4 * c4]);
            const float4 y = *reinterpret_cast<const float4*>(&red[w][1][4 * c4]);
            ks4.x += x.x, ks4.y += x.y, ks4.z += x.z, ks4.w += x.w;
            qs4.x += y.x, qs4.y += y.y, qs4.z += y.z, qs4.w += y.w;
          }
          const float4 v4 = *reinterpret_cast<const float4*>(&s_v[tt][4 * c4]);
          // u = beta (v - alpha S^T k);  o = alpha S^T q' + (q'.k) u
          float u[4], o[4];
          u[0] = be * (v4.x - alpha * ks4.x), o[0] = fmaf(qk, u[0], alpha * qs4.x);
          u[1] = be * (v4.y - alpha * ks4.y), o[1] = fmaf(qk, u[1], alpha * qs4.y);
          u[2] = be * (v4.z - alpha * ks4.z), o[2] = fmaf(qk, u[2], alpha * qs4.z);
          u[3] = be * (v4.w - alpha * ks4.w), o[3] = fmaf(qk, u[3], alpha * qs4.w);
          if (tid < TPR) store4(a.o, a.v_dtype, o_off + ti.j0 + 4 * c4, o);
            // S = alpha S + k u^T
#pragma unroll
          for (int p = 0; p < P; ++p) {
            const float ki = s_k[tt][r0 + p * RPP];
#pragma unroll
            for (int e = 0; e < 4; ++e) s[p][e] = fmaf(ki, u[e], alpha * s[p][e]);
          }
        } else {
          // Thread holds rows j_p = j0 + r0 + p RPP (value index), keys i = 4 c4 + e. Reduce over i inside
          // the TPR lanes of the row: no shared memory, no barrier.
          const float4 k4 = *reinterpret_cast<const float4*>(&s_k[tt][4 * c4]);
          const float4 q4 = *reinterpret_cast<const float4*>(&s_q[tt][4 * c4]);
          float u[P], o_mine = 0.f;  // lane c4 of a row group stores the output of its row p = c4
#pragma unroll
          for (int p = 0; p < P; ++p) {
            float kS = s[p][0] * k4.x, qS = s[p][0] * q4.x;
            kS = fmaf(s[p][1], k4.y, kS), qS = fmaf(s[p][1], q4.y, qS);
            kS = fmaf(s[p][2], k4.z, kS), qS = fmaf(s[p][2], q4.z, qS);
            kS = fmaf(s[p][3], k4.w, kS), qS = fmaf(s[p][3], q4.w, qS);
            kS = lane_sum<1, TPR>(kS);
            qS = lane_sum<1, TPR>(qS);
            u[p] = be * (s_v[tt][r0 + p * RPP] - alpha * kS);  // u = beta (v - alpha S^T k)
            if (c4 == p) o_mine = fmaf(qk, u[p], alpha * qS);  // o = alpha S^T q' + (q'.k) u
          }
          static_assert(P <= TPR, "one storing lane per row");
          if (c4 < P) store1(a.o, a.v_dtype, o_off + ti.j0 + r0 + c4 * RPP, o_mine);
            // S^v = alpha S^v + u k^T
#pragma unroll
          for (int p = 0; p < P; ++p) {
            s[p][0] = fmaf(u[p], k4.x, alpha * s[p][0]);
            s[p][1] = fmaf(u[p], k4.y, alpha * s[p][1]);
            s[p][2] = fmaf(u[p], k4.z, alpha * s[p][2]);
            s[p][3] = fmaf(u[p], k4.w, alpha * s[p][3]);
          }
        }

        // ---- per-token state writes: intermediate entry (protocol B), pool slot [n, t] (protocol A) ----
        const int64_t tr = t0 + tt;
        if (ti.ibuf >= 0 && tr < a.T_buf) {
          const int64_t base = ti.ibuf * a.inter_s[0] + tr * a.inter_s[1] + h * a.inter_s[2];
#pragma unroll
          for (int p = 0; p < P; ++p) store4(a.inter, a.inter_dtype, base + tile_off(ti.j0, p, a.inter_s[3]), s[p]);
        }
        const int64_t st = s_slot[tt];
        if (st >= 0) {
          ST* dst = static_cast<ST*>(a.pool) + st * a.pool_s[0] + h * a.pool_s[1];
#pragma unroll
          for (int p = 0; p < P; ++p) store4(dst + tile_off(ti.j0, p, a.pool_s[2]), s[p]);
        }
      }
    }

    // ---- final state: pool[slot] (1-D slots, commit) or final_state[n] (no pool) ----
    if (has_pool) {
      if (a.commit && a.T_max == 0) {
        ST* dst = static_cast<ST*>(a.pool) + int64_t(ti.slot) * a.pool_s[0] + h * a.pool_s[1];
#pragma unroll
        for (int p = 0; p < P; ++p) store4(dst + tile_off(ti.j0, p, a.pool_s[2]), s[p]);
      }
    } else if (a.hT) {
      float* dst = a.hT + int64_t(ti.n) * a.hT_s[0] + h * a.hT_s[1];
#pragma unroll
      for (int p = 0; p < P; ++p) store4(dst + tile_off(ti.j0, p, a.hT_s[2]), s[p]);
    }
  };

  // ---- the tile walk: tile i+1's lookup and state copy are in flight while tile i computes ----
  int64_t tile = blockIdx.x;
  if (tile >= ntiles) return;
  RecStaged r;
  RecIndexLoads q = issue_indices(tile);
  RecTileInfo cur = coords(tile, q);
  if (cur.len > 0) stage_load(cur, 0, cur.len < TCH ? cur.len : TCH, r);  // before the dependent slot loads
  lookup(cur, q);
  copy_state(cur, 0);
  cp_async_commit();
  for (int it = 0;; ++it) {
    const int64_t next = tile + gridDim.x;
    RecTileInfo nxt;
    if (next < ntiles) {
      q = issue_indices(next);
      nxt = coords(next, q);
      lookup(nxt, q);
      copy_state(nxt, (it + 1) & 1);
    }
    cp_async_commit();
    cp_async_wait<1>();  // this tile's stage has landed (the next tile's may still be in flight)
    process(cur, r, it & 1);
    if (next >= ntiles) break;
    cur = nxt;
    tile = next;
    if (cur.len > 0) stage_load(cur, 0, cur.len < TCH ? cur.len : TCH, r);
  }
}

template <StateLayout L, class ST, int K, int BV>
cudaError_t launch_recurrent(const RecurrentArgs& a, int sms, cudaStream_t stream) {
  const int64_t ntiles = a.N * a.Hv * (a.V / BV);
  if (ntiles == 0) return cudaSuccess;
  // Persistent grid: the resident capacity that __launch_bounds__ guarantees (no occupancy query, which is
  // not allowed inside every stream-capture mode).
  const int64_t cap = int64_t(sms) * RecTile<L, K, BV>::kMinBlocks;
  const int64_t grid = ntiles < cap ? ntiles : cap;
  recurrent_kernel<L, ST, K, BV><<<dim3(unsigned(grid)), kRecThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

// One translation unit per (layout, storage type) instantiates every (K, BV): they compile in parallel.
#define FGDN_INSTANTIATE_RECURRENT(L, ST)                                                         \
  template cudaError_t launch_recurrent<L, ST, 64, 16>(const RecurrentArgs&, int, cudaStream_t);  \
  template cudaError_t launch_recurrent<L, ST, 64, 32>(const RecurrentArgs&, int, cudaStream_t);  \
  template cudaError_t launch_recurrent<L, ST, 128, 16>(const RecurrentArgs&, int, cudaStream_t); \
  template cudaError_t launch_recurrent<L, ST, 128, 32>(const RecurrentArgs&, int, cudaStream_t);

}  // namespace flashgdn::cuda
