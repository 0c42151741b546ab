// The "pipe" variant of the direct recurrent kernel: single-token decode (fixed T = 1) on a K-major state pool with
// 1-D slots and no intermediate states, the large-batch 16-bit-pool case of recurrent.cu's dispatch
// (docs/recurrent.md, "direct_pipe: pipelined single-token tiles"). Same math as the direct kernel's T = 1 path
// (direct_kernel.cuh); the sums over K run over consecutive rows per thread (another order than the direct kernel's).
//
// Why: the direct kernel holds one tile per CTA in registers; a CTA issues all its state loads, waits, computes,
// stores and retires, so an SM has no state bytes in flight while its resident CTAs compute. For 16-bit pools a
// byte carries twice the elements (twice the math per byte) and that gap costs ~20% (N = 256, bf16: 80% of copy vs
// 92% for fp32). Here CTAs are persistent and walk tiles with stride gridDim.x through an S-stage shared-memory
// ring filled by TMA bulk copies (cp.async.bulk: state rows, raw q, k, v) that complete on one mbarrier per stage
// (the next tiles' slots and gates are ordinary loads ahead of use). Tile i lives in stage i % S. Each warp's share
// of the state rows is read by that warp's threads only, so a warp refills its share with tile i + S as soon as its
// lanes hold tile i's state in registers (at the start of the reduction, no CTA barrier; the f16 instance after the
// reduction barrier: pipe::early_refill); the raw q, k, v, read by every warp, follow after the reduction barrier.
// S tiles per CTA are in flight during the reduction (bf16) and the update.
//
// Per tile (n, h, BV columns j0..), thread (r0 = tid / TPR, c = tid % TPR) owns the consecutive rows i_p = r0 P + p
// and columns j0 + E c + e of S (K-major [K, V]); the stage holds the tile's rows as they are in the pool ([K][BV],
// BV sizeof(ST) = TPR 16 bytes a row), so its 16-byte vectors sit at stage[i_p][c] and warp w's threads own the rows
// w K / NW .. (w + 1) K / NW - 1 (one bulk copy of that block when the pool's rows are contiguous, else one per row).
// Consecutive rows let a thread read its k^ / q' rows 4 at a time (one 8-byte load of 16-bit q / k per 4 rows, one
// dtype branch) instead of one by one.
//   rq = scale / |q|, rk = 1 / |k| (l2norm in fp32, per warp from the staged raw q, k), q'_i = q_i rq, k^_i = k_i rk
//   kS = S^T k^, qS = S^T q',  u = beta (v - alpha kS),  o = alpha qS + (q'.k^) u,  S = alpha S + k^ u^T
// Barriers per tile: one after the stage wait (s_slot; every thread done with the previous tile's partial sums and
// k^), one for the cross-warp reduction (which also releases the stage's q, k, v).
// Rows (all indices clamped): slot = state_indices[n] (n when absent); an invalid slot (< 0, >= slots, 0 with
// null_slot_is_invalid) writes exact zeros to o and nothing else; commit = false never writes the pool.
#pragma once

#include "api/plan.hpp"  // kPipeStages, kPipeThreads
#include "cuda/common/cuda_check.cuh"
#include "cuda/common/mbarrier.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/common/wgmma.cuh"  // fence_async_smem
#include "cuda/recurrent/direct_kernel.cuh"

namespace flashgdn::cuda {
namespace pipe {

template <class ST, int K, int BV, int NT>
struct Geo {
  static constexpr int NW = NT / 32;              // warps
  static constexpr int E = 16 / int(sizeof(ST));  // elements per 16-byte vector
  static constexpr int TPR = BV / E;              // threads per tile row
  static constexpr int RPP = NT / TPR;            // tile rows per pass
  static constexpr int P = K / RPP;               // 16-byte state vectors per thread
  static constexpr int kStateBytes = P * NT * 16;
  static constexpr int kRowBytes = TPR * 16;  // one state row of the tile (BV elements)
  static constexpr int RPW = K / NW;          // state rows of one warp's threads (consecutive)
  static_assert(TPR >= 1 && TPR <= 32 && (TPR & (TPR - 1)) == 0 && K % RPP == 0, "tile must split over the CTA");
  static_assert(RPW == 32 / TPR * P && RPW <= 32, "a warp's rows are consecutive, one lane per row at most");
  static_assert(K % 4 == 0 && K / 4 <= 32, "one warp holds q and k (4 elements per lane)");
};

// Element e of a 16-byte state vector as fp32 (exact widening for bf16 / f16). USE 0 (reduction) and 1 (update)
// widen with different opaque instructions (direct::unpack), so the compiler keeps the packed words live between
// the two passes instead of all widened values (2 x the registers).
template <class ST, int USE>
__device__ __forceinline__ float elem(const uint4& w, int e) {
  if constexpr (sizeof(ST) == 4)
    return __uint_as_float(e == 0 ? w.x : (e == 1 ? w.y : (e == 2 ? w.z : w.w)));
  else
    return direct::unpack<direct::half2_of<ST>, USE>(w, e);
}

// A warp refills its share of a stage as soon as its lanes hold their state vectors (before the reduction: the copy
// is in flight during the whole tile), or after the reduction barrier: the f16 instance (K = 128) spills at the
// register cap of 3 CTAs per SM with the early refill (44-56 bytes), so it keeps the late one.
template <class ST>
constexpr bool early_refill() {
  return !std::is_same_v<ST, __half>;
}

// Resident CTAs per SM the register budget is cut for: the shared-memory ring allows 3 CTAs with 2 stages and 2
// with 3 (K = 128: ~33 KB per stage).
template <int S>
constexpr int min_blocks() {
  return S == 2 ? 3 : 2;
}

}  // namespace pipe

// Dynamic shared memory: S stages of [state: K rows x BV elements][q raw: qb][k raw: qb][v raw: vb] (qb, vb: the
// activations' bytes rounded to 16; stage_bytes = kStateBytes + 2 qb + vb). Stage s is complete when phase u of
// s_full[s] is (tile u S + s of the CTA): NW + 1 arrivals per phase (each warp's lane 0 with its rows' bytes, thread 0
// with the q, k, v bytes; 0 bytes for a tile that has nothing to stage).
template <class ST, int K, int BV, int S, int NT>
__global__ void __launch_bounds__(NT, pipe::min_blocks<S>())
    recurrent_direct_pipe_kernel(const RecurrentArgs a, int stage_bytes, int qb) {
  using G = pipe::Geo<ST, K, BV, NT>;
  constexpr int E = G::E, TPR = G::TPR, P = G::P, NW = G::NW, RPW = G::RPW, kRowBytes = G::kRowBytes;
  static_assert(S >= 2, "at least double buffering");
  static_assert(P % 4 == 0, "q / k rows are read 4 at a time");
  extern __shared__ __align__(16) unsigned char s_ring[];
  __shared__ __align__(16) float s_red[NW][2][BV];  // cross-warp partial sums of S^T k^, S^T q'
  __shared__ __align__(16) float s_kn[K];           // k^ of the current tile (for the update, after the refill)
  __shared__ int64_t s_slot[S];                     // slot of the tile in each stage (-1: invalid row)
  __shared__ uint64_t s_full[S];                    // mbarrier of each stage: its bulk copies have landed

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int c = tid % TPR, r0 = tid / TPR;
  // Tile indices are 32-bit (the launcher checks (S + 2) ntiles <= 2^31) and divided by the host-built
  // DivU32 of V / BV and Hv: a multiply-high each, not a 64-bit division per tile and use.
  const uint32_t nvt = a.vt.d;
  const uint32_t ntiles = uint32_t(a.N) * uint32_t(a.Hv) * nvt, stride = gridDim.x;
  const int qsz = a.qk_dtype == DType::f32 ? 4 : 2, vsz = a.v_dtype == DType::f32 ? 4 : 2;

  // tile = (n Hv + h) nvt + V-tile (the direct kernel's order)
  auto coords = [&](uint32_t t, int64_t& n, int64_t& h, int& j0) {
    const uint32_t nh = udiv(t, a.vt), nu = udiv(nh, a.hv);
    j0 = int(t - nh * nvt) * BV, h = nh - nu * a.hv.d, n = nu;
  };
  // The tile's start slot, -1 when the row is invalid or the tile does not exist.
  auto slot_of = [&](uint32_t t) -> int64_t {
    if (t >= ntiles) return -1;
    const int64_t n = udiv(udiv(t, a.vt), a.hv);
    const int64_t s = a.state_indices ? load_index(a.state_indices, a.si_i64, n * a.si_s[0]) : n;
    return slot_ok(s, a.slots, a.null_slot_is_invalid) ? s : -1;
  };
  // The first of this warp's state rows of tile t (null: nothing to stage, the row is invalid or the tile does not
  // exist).
  const int64_t row_step = a.pool_s[2];
  const bool rows_contig = row_step == BV;  // a warp's rows are one block of RPW BV elements
  auto rows_src = [&](uint32_t t, int64_t slot) -> const ST* {
    if (t >= ntiles || slot < 0) return nullptr;
    int64_t n, h;
    int j0;
    coords(t, n, h, j0);
    return static_cast<const ST*>(a.pool) + slot * a.pool_s[0] + h * a.pool_s[1] + int64_t(warp * RPW) * row_step + j0;
  };
  // Stage this warp's rows (every lane of the warp calls it): lane 0 arrives on the stage's barrier expecting their
  // bytes, then one bulk copy of the block (contiguous rows) or one per row by lanes 0 .. RPW - 1.
  auto issue_rows = [&](const ST* src, int buf) {
    uint64_t* bar = &s_full[buf];
    unsigned char* dst = s_ring + size_t(buf) * stage_bytes + warp * RPW * kRowBytes;
    if (lane == 0) tma::arrive_expect_tx(bar, src != nullptr ? RPW * kRowBytes : 0);
    if (src == nullptr) return;
    if (rows_contig) {
      if (lane == 0) tma::load_bulk(dst, src, RPW * kRowBytes, bar);
    } else {
      __syncwarp();  // (the bytes are expected before they complete)
      if (lane < RPW) tma::load_bulk(dst + lane * kRowBytes, src + lane * row_step, kRowBytes, bar);
    }
  };
  // Stage tile t's raw q, k, v (thread 0 only; fixed T = 1: the token of batch row n is (b = n, t = 0)) and record
  // its slot (-1: nothing staged).
  auto issue_act = [&](uint32_t t, int64_t slot, int buf) {
    const bool any = t < ntiles && slot >= 0;
    s_slot[buf] = any ? slot : -1;
    uint64_t* bar = &s_full[buf];
    tma::arrive_expect_tx(bar, any ? uint32_t(2 * K * qsz + BV * vsz) : 0u);
    if (!any) return;
    int64_t n, h;
    int j0;
    coords(t, n, h, j0);
    const int64_t hq = udiv(uint32_t(h), a.gqa);
    unsigned char* dst = s_ring + size_t(buf) * stage_bytes + G::kStateBytes;
    tma::load_bulk(dst, static_cast<const char*>(a.q) + (n * a.q_s[0] + hq * a.q_s[2]) * qsz, K * qsz, bar);
    tma::load_bulk(dst + qb, static_cast<const char*>(a.k) + (n * a.k_s[0] + hq * a.k_s[2]) * qsz, K * qsz, bar);
    tma::load_bulk(dst + 2 * qb, static_cast<const char*>(a.v) + (n * a.v_s[0] + h * a.v_s[2] + j0) * vsz, BV * vsz,
                   bar);
  };
  // Raw gate scalars of a tile, as bits (ordinary loads, requested one tile ahead of their use and widened there:
  // a widening beside its load would wait for it, and the four one round trip after another).
  struct Gates {
    uint32_t g, be, A_log, dt_bias;
  };
  auto load_gates = [&](uint32_t t, Gates& x) {
    x = Gates{0u, 0u, 0u, 0u};
    if (t >= ntiles) return;
    int64_t n, h;
    int j0;
    coords(t, n, h, j0);
    if (a.g) x.g = load1_bits(a.g, a.g_dtype, n * a.g_s[0] + h * a.g_s[2]);
    if (a.beta) x.be = load1_bits(a.beta, a.beta_dtype, n * a.beta_s[0] + h * a.beta_s[2]);
    if (a.gate_in_kernel) {
      x.A_log = load1_bits(a.A_log, a.A_log_dtype, h * a.A_log_s);
      if (a.dt_bias) x.dt_bias = load1_bits(a.dt_bias, a.dt_bias_dtype, h * a.dt_bias_s);
    }
  };

  // ---- prologue: this CTA's first S tiles in flight, the slot of the next one requested ----
  // Ring: tile i of the CTA lives in stage i % S; a warp refills its rows with tile i + S as soon as its lanes hold
  // tile i's state in registers, thread 0 the q, k, v after the reduction barrier, so S tiles are in flight during
  // the reduction and the update.
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < S; ++s) mbar::init(&s_full[s], NW + 1);
  }
  wg::fence_async_smem();  // the barriers' initialization before the copies complete on them
  __syncthreads();
  pdl_start();  // every global access below follows the previous kernel in the stream
  const uint32_t t0 = blockIdx.x;
#pragma unroll 1
  for (int s = 0; s < S; ++s) {
    const int64_t slot = slot_of(t0 + s * stride);
    issue_rows(rows_src(t0 + s * stride, slot), s);
    if (tid == 0) issue_act(t0 + s * stride, slot, s);
  }
  int64_t nslot = slot_of(t0 + S * stride);  // the refill of iteration 0 (tile S), addressed at its start
  Gates cur;
  load_gates(t0, cur);

  int buf = 0;
  uint32_t parity = 0;  // bit s: the parity of the next phase of s_full[s]
#pragma unroll 1
  for (uint32_t t = t0; t < ntiles; t += stride) {
    mbar::wait(&s_full[buf], (parity >> buf) & 1u);  // this tile's copies have landed (the later ones may still fly)
    parity ^= 1u << buf;
    __syncthreads();  // every thread has read s_slot[buf] of the last tile; every thread is done with s_red, s_kn
    Gates nxt;
    load_gates(t + stride, nxt);

    int64_t n, h;
    int j0;
    coords(t, n, h, j0);
    const int64_t slot = s_slot[buf];
    const int64_t o_off = n * a.o_s[0] + h * a.o_s[2] + j0;
    if (slot < 0) {  // invalid row (CTA-uniform): exact zeros to its outputs, nothing else written
      const float z[E] = {};
      if (tid < TPR) direct::store_n<E>(a.o, a.v_dtype, o_off + E * c, z);
      __syncthreads();  // every thread has read s_slot[buf] before the refill below rewrites it
      issue_rows(rows_src(t + S * stride, nslot), buf);
      if (tid == 0) issue_act(t + S * stride, nslot, buf);
    } else {
      const unsigned char* stg = s_ring + size_t(buf) * stage_bytes;
      const unsigned char* qraw = stg + G::kStateBytes;
      const unsigned char* kraw = qraw + qb;
      // rq = scale / |q|, rk = 1 / |k| and q'.k^ per warp from the lane slices (gdn-math §1.4); the thread's rows
      // are then q'_i = q_i rq, k^_i = k_i rk: the same fp32 products as the direct kernel's staged q', k^.
      float q4[4] = {0.f, 0.f, 0.f, 0.f}, k4[4] = {0.f, 0.f, 0.f, 0.f};
      if (4 * lane < K) {
        load4(qraw, a.qk_dtype, 4 * lane, q4);
        load4(kraw, a.qk_dtype, 4 * lane, k4);
      }
      float rq, rk;
      qk_norm_factors(q4, k4, a.scale, a.l2norm, &rq, &rk);
      float qk = 0.f;
#pragma unroll
      for (int e = 0; e < 4; ++e) qk = fmaf(q4[e] * rq, k4[e] * rk, qk);
      qk = lane_sum<1, 32>(qk);  // q'.k^
      float g = a.g ? from_bits1(a.g_dtype, cur.g) : 0.f;
      if (a.gate_in_kernel)  // g = -exp(A_log) softplus(a + dt_bias) (gdn-math §4)
        g = gate_from_raw(g, from_bits1(a.A_log_dtype, cur.A_log),
                          a.dt_bias ? from_bits1(a.dt_bias_dtype, cur.dt_bias) : 0.f, a.softplus_beta,
                          a.softplus_threshold);
      const float alpha = expf(g);
      const float be_raw = a.beta ? from_bits1(a.beta_dtype, cur.be) : 1.f;
      const float be = a.beta_sigmoid ? beta_from_raw(be_raw, a.allow_neg_eigval) : be_raw;
      float v[E];
      direct::load_n<E>(stg + G::kStateBytes + 2 * qb, a.v_dtype, E * c, v);

      // The thread's state vectors (rows i = r0 P + p) into registers; then the warp's share of the stage is free and
      // its refill with tile i + S goes out at once (early_refill; else after the reduction barrier).
      uint4 w[P];
#pragma unroll
      for (int p = 0; p < P; ++p) w[p] = reinterpret_cast<const uint4*>(stg)[(r0 * P + p) * TPR + c];
      if constexpr (pipe::early_refill<ST>()) {
        __syncwarp();  // every lane's vectors are read
        issue_rows(rows_src(t + S * stride, nslot), buf);
      }
      // The thread's k^ / q' rows, 4 rows per 16-byte (fp32) or 8-byte (16-bit) load of the staged raw q, k; kS =
      // S^T k^, qS = S^T q': own rows, the lanes of the same c (shuffles), the warps (shared memory).
      float kS[E], qS[E];
#pragma unroll
      for (int e = 0; e < E; ++e) kS[e] = 0.f, qS[e] = 0.f;
#pragma unroll
      for (int p4 = 0; p4 < P; p4 += 4) {
        const int i0 = r0 * P + p4;
        float kr[4], qr[4];
        load4(kraw, a.qk_dtype, i0, kr);
        load4(qraw, a.qk_dtype, i0, qr);
#pragma unroll
        for (int m = 0; m < 4; ++m) kr[m] *= rk, qr[m] *= rq;
        if (c == 0) *reinterpret_cast<float4*>(&s_kn[i0]) = make_float4(kr[0], kr[1], kr[2], kr[3]);  // one writer
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const int p = p4 + m;
#pragma unroll
          for (int e = 0; e < E; ++e) {
            const float x = pipe::elem<ST, 0>(w[p], e);
            kS[e] = fmaf(x, kr[m], kS[e]), qS[e] = fmaf(x, qr[m], qS[e]);
          }
        }
      }
#pragma unroll
      for (int e = 0; e < E; ++e) kS[e] = lane_sum<TPR, 32>(kS[e]), qS[e] = lane_sum<TPR, 32>(qS[e]);
      if (lane < TPR) {
#pragma unroll
        for (int e = 0; e < E; e += 4) {
          *reinterpret_cast<float4*>(&s_red[warp][0][E * c + e]) = make_float4(kS[e], kS[e + 1], kS[e + 2], kS[e + 3]);
          *reinterpret_cast<float4*>(&s_red[warp][1][E * c + e]) = make_float4(qS[e], qS[e + 1], qS[e + 2], qS[e + 3]);
        }
      }
      __syncthreads();  // partial sums and k^ visible; every thread is done reading this stage's q, k, v
      if constexpr (!pipe::early_refill<ST>()) issue_rows(rows_src(t + S * stride, nslot), buf);
      if (tid == 0) issue_act(t + S * stride, nslot, buf);  // the rest of its refill
      float u[E], o[E];
#pragma unroll
      for (int e = 0; e < E; e += 4) {
        float4 ks = *reinterpret_cast<const float4*>(&s_red[0][0][E * c + e]);
        float4 qs = *reinterpret_cast<const float4*>(&s_red[0][1][E * c + e]);
#pragma unroll
        for (int m = 1; m < NW; ++m) {  // fixed order: bitwise reproducible
          const float4 x = *reinterpret_cast<const float4*>(&s_red[m][0][E * c + e]);
          const float4 y = *reinterpret_cast<const float4*>(&s_red[m][1][E * c + e]);
          ks.x += x.x, ks.y += x.y, ks.z += x.z, ks.w += x.w;
          qs.x += y.x, qs.y += y.y, qs.z += y.z, qs.w += y.w;
        }
        const float kk[4] = {ks.x, ks.y, ks.z, ks.w}, qq[4] = {qs.x, qs.y, qs.z, qs.w};
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          u[e + m] = be * (v[e + m] - alpha * kk[m]);    // u = beta (v - alpha S^T k^)
          o[e + m] = fmaf(qk, u[e + m], alpha * qq[m]);  // o = alpha S^T q' + (q'.k^) u
        }
      }
      if (tid < TPR) direct::store_n<E>(a.o, a.v_dtype, o_off + E * c, o);
      if (a.commit) {  // S = alpha S + k^ u^T, rounded once to the pool type
        ST* dst = static_cast<ST*>(a.pool) + slot * a.pool_s[0] + h * a.pool_s[1] + j0 + E * c;
        dst += int64_t(r0 * P) * a.pool_s[2];
#pragma unroll
        for (int p4 = 0; p4 < P; p4 += 4) {
          const float4 k4 = *reinterpret_cast<const float4*>(&s_kn[r0 * P + p4]);
          const float kr[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
          for (int m = 0; m < 4; ++m) {
            float x[E];
#pragma unroll
            for (int e = 0; e < E; ++e) x[e] = fmaf(kr[m], u[e], alpha * pipe::elem<ST, 1>(w[p4 + m], e));
            direct::store16(dst + int64_t(p4 + m) * a.pool_s[2], x);
          }
        }
      }
    }
    nslot = slot_of(t + (S + 1) * stride);
    cur = nxt;
    buf = buf + 1 == S ? 0 : buf + 1;
  }
  // No copy outlives the CTA: every tile it staged is one it walked (tiles past the end stage nothing).
}

// Persistent grid: resident CTAs per SM from the occupancy of this shared-memory size (queried per launch: host
// only, graph-safe), times SMs, at most one CTA per tile.
template <class ST, int K, int BV, int S, int NT>
cudaError_t launch_recurrent_direct_pipe(const RecurrentArgs& a, cudaStream_t stream) {
  using G = pipe::Geo<ST, K, BV, NT>;
  const int64_t ntiles = a.N * a.Hv * (a.V / BV);
  if (ntiles == 0) return cudaSuccess;
  // 32-bit tile indices: t + (S + 1) gridDim.x < (S + 2) ntiles <= 2^31 (2^29 tiles are 256 GB of v and o alone)
  if (ntiles > (int64_t(1) << 31) / (S + 2)) return cudaErrorInvalidConfiguration;
  if (a.vt.d != uint32_t(a.V / BV)) return cudaErrorInvalidConfiguration;  // the divider of this tile width
  const int qsz = a.qk_dtype == DType::f32 ? 4 : 2, vsz = a.v_dtype == DType::f32 ? 4 : 2;
  const int qb = (K * qsz + 15) / 16 * 16, vb = (BV * vsz + 15) / 16 * 16;
  const int stage_bytes = G::kStateBytes + 2 * qb + vb;
  const int smem = S * stage_bytes;
  // The shared-memory opt-in and the resident CTAs per SM are set up once per device for the largest ring (fp32 q, k,
  // v), not per launch (a decode step launches this per layer): both calls cost microseconds of host time. The
  // narrower rings of 16-bit activations fit the same CTAs per SM (the register budget, min_blocks<S>, binds first).
  constexpr int kSmemMax = S * (G::kStateBytes + 2 * K * 4 + BV * 4);
  auto kern = recurrent_direct_pipe_kernel<ST, K, BV, S, NT>;
  static std::atomic<uint64_t> done_mask{0};
  static std::atomic<int> per_sm_of[64];  // [device] resident CTAs per SM at kSmemMax (0: not queried yet)
  if (const int e = prepare_launch(kern, kSmemMax, done_mask)) return static_cast<cudaError_t>(e);
  int dev = 0, per_sm = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = resident_ctas_per_sm(kern, NT, kSmemMax, dev, per_sm_of, &per_sm);
  if (e != cudaSuccess) return e;
  int64_t grid = int64_t(per_sm) * device_sm_count(dev);
  if (grid > ntiles) grid = ntiles;
  return launch_pdl(kern, dim3(unsigned(grid)), dim3(NT), size_t(smem), stream, a, stage_bytes, qb);
}

// The shipped configuration: kPipeStages = 2 stages (3 CTAs/SM at K = 128), kPipeThreads = 128 threads per CTA
// (api/plan.hpp), for K in {64, 128}.
#define FGDN_INSTANTIATE_RECURRENT_DIRECT_PIPE(ST, BV)                                                            \
  template cudaError_t launch_recurrent_direct_pipe<ST, 64, BV, kPipeStages, kPipeThreads>(const RecurrentArgs&,  \
                                                                                           cudaStream_t);         \
  template cudaError_t launch_recurrent_direct_pipe<ST, 128, BV, kPipeStages, kPipeThreads>(const RecurrentArgs&, \
                                                                                            cudaStream_t);

}  // namespace flashgdn::cuda
