// cuda::mixer_decode: the Gated DeltaNet mixer step (flashgdn.hpp, MixerDecodeParams) in one launch.
//
// Grid: x = (value head h, split rank r), y = row n. The V columns of a head are split over SPLIT CTAs
// (MixerDecodePlan::split, api/plan.cpp: 1, 2 or 4); CTA (n, h, r) owns columns [r BV, (r + 1) BV) of the head's
// 128 x 128 fp32 state (BV = 128 / SPLIT) in registers for all of the row's tokens. The reductions of the
// recurrence run over K, which every CTA holds whole, so they stay inside the CTA; only the gated RMSNorm's sum of
// o^2 over V crosses CTAs, through distributed shared memory.
//
// The SPLIT CTAs of each of the Hv / Hqk value heads of one key head form one thread block cluster
// (group SPLIT CTAs, rank (h mod group) SPLIT + r). Every CTA recomputes the key head's q and k conv (256 of its
// 256 + BV channels: cheap) and the l2norms, and its own BV v channels. The cluster barrier orders every CTA's
// read of the shared q/k conv window before its one writer rewrites it in place: q/k channel i is written by the
// group's first value head, split rank i / BV; each v channel and each output by the CTA that owns its column.
//
// Per token t of the row (fp32 math; y, o and out rounded to the activation dtype as the engines do):
//   y      = silu(bias + sum_j W[:, j] w_j)             conv over the window of the last Kc raw inputs
//   q^, k^ = scale q / |q|, k / |k|                     |x| = sqrt(sum x^2 + 1e-6)
//   alpha  = exp(-exp(A_log) softplus(a + dt_bias)),  beta = sigmoid(b)
//   kS = S^T k^,  qS = S^T q^ (pre-update state)
//   u  = beta (v - alpha kS)                            (2a) on S~ = alpha S
//   o  = alpha qS + (q^ . k^) u                         = S_t^T q^, the post-update read
//   S  = alpha S + k^ u^T                               (2b)
//   out = o rsqrt(mean(o^2) + eps) w silu(z)           mean over all 128 columns: the cluster's 4 partial sums
// State registers (Cfg): a thread holds kRows 4-vectors of the stored tile, row row0 + rstep m, 4 columns from col.
// K-major ([K, V]) rows are key indices, BV / 4 threads per row: the reductions over K run over m, the lanes of
// one column group (shuffles), then the warps through shared memory. V-major ([V, K]) rows are value indices, one
// warp per row: they run over the lanes (shuffles). The state loads are issued first, so their latency overlaps
// the conv. Every sum runs in a fixed order (the norm's four 32-column partials in column order, whatever SPLIT):
// bitwise reproducible.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "api/internal.hpp"
#include "api/plan.hpp"
#include "cuda/common/cuda_check.cuh"
#include "cuda/common/device_util.cuh"
#include "cuda/mixer_decode/mixer_args.cuh"
#include "cuda/mixer_decode/mixer_pipe_kernel.cuh"

#include <cooperative_groups.h>

namespace flashgdn::cuda {
namespace {

namespace cg = cooperative_groups;

using namespace mixer;

__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// The CTA shape of a split: 256 threads for the whole head (64 state values a thread), 128 for a half or a
// quarter (64 or 32), so that the split CTAs fit several to an SM (launch bounds, MinBlocks: at most 128
// registers for a half, 80 for a quarter; no spills).
template <int SPLIT>
struct Cfg {
  static constexpr int kThreads = SPLIT == 1 ? 256 : 128;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kBV = kD / SPLIT;    // value columns of the CTA
  static constexpr int kNC = 2 * kD + kBV;  // conv channels of the CTA: q, k, its v columns
  static constexpr int kConvIters = (kNC + kThreads - 1) / kThreads;
  static constexpr int kRows = kD * kBV / (4 * kThreads);  // state 4-vectors a thread
  static constexpr int kTPR = kBV / 4;                     // K-major: threads per stored row
  static constexpr int kRPW = 32 / kTPR;                   // K-major: rows per warp and pass
  static constexpr int kMinBlocks = SPLIT == 1 ? 1 : SPLIT == 2 ? 4 : 6;
  static_assert(kBV % 32 == 0 && kD * kBV % (4 * kThreads) == 0, "tile shape");
};

// Where a thread's state vectors lie in the stored [128, 128] tile: element (row0 + rstep m) row_stride + col.
template <int SPLIT, bool KMAJOR>
struct TileMap {
  int row0, rstep, col;
  __device__ explicit TileMap(int c0) {
    using C = Cfg<SPLIT>;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if constexpr (KMAJOR) {
      row0 = warp * C::kRPW + lane / C::kTPR, rstep = C::kWarps * C::kRPW, col = c0 + 4 * (lane % C::kTPR);
    } else {
      row0 = c0 + warp, rstep = C::kWarps, col = 4 * lane;
    }
  }
};

// x, hidden from the optimizer: the 16-byte state addresses are rebuilt at each use by a pointer walk instead of
// being kept in 2 registers each for the whole kernel.
__device__ __forceinline__ int64_t opaque(int64_t x) {
  asm volatile("mov.b64 %0, %0;" : "+l"(x));
  return x;
}

template <int SPLIT, bool KMAJOR, class ST>
__device__ __forceinline__ void load_state(const ST* base, int64_t row_stride, const TileMap<SPLIT, KMAJOR>& tm,
                                           float (&S)[Cfg<SPLIT>::kRows][4]) {
  const ST* ptr = base + int64_t(tm.row0) * row_stride + tm.col;
  const int64_t step = opaque(int64_t(tm.rstep) * row_stride);
#pragma unroll
  for (int m = 0; m < Cfg<SPLIT>::kRows; ++m) load4(ptr + m * step, S[m]);
}
template <int SPLIT, bool KMAJOR, class ST>
__device__ __forceinline__ void store_state(ST* base, int64_t row_stride, const TileMap<SPLIT, KMAJOR>& tm,
                                            const float (&S)[Cfg<SPLIT>::kRows][4]) {
  ST* ptr = base + int64_t(tm.row0) * row_stride + tm.col;
  const int64_t step = opaque(int64_t(tm.rstep) * row_stride);
#pragma unroll
  for (int m = 0; m < Cfg<SPLIT>::kRows; ++m) store4(ptr + m * step, S[m]);
}

template <class AT, class ST, bool KMAJOR, int SPLIT>
__global__ void __launch_bounds__(Cfg<SPLIT>::kThreads, Cfg<SPLIT>::kMinBlocks)
    mixer_decode_kernel(const __grid_constant__ MixerArgs p) {
  using C = Cfg<SPLIT>;
  constexpr int kBV = C::kBV, kNC = C::kNC, kW = C::kWarps, kR = C::kRows, kT = C::kThreads;
  __shared__ float ys[kNC];                  // the token's conv outputs: q [0, 128), k [128, 256), the CTA's v
  __shared__ float hist[kMaxHist][kNC];      // per channel the window's Kc - 1 raw inputs, oldest first
  __shared__ float taps[kMaxHist + 1][kNC];  // conv weights, tap 0 on the oldest input, tap Kc - 1 on x_t
  __shared__ float cbias[kNC];               // conv bias (0 when absent)
  __shared__ float os[kBV];                  // o of the CTA's columns
  __shared__ __align__(16) float red_k[KMAJOR ? kW : 1][kBV];  // K-major: per-warp partials of S^T k^, S^T q^
  __shared__ __align__(16) float red_q[KMAJOR ? kW : 1][kBV];
  __shared__ float part[2][4];  // sum of o^2 over each 32 columns, by token parity; the cluster peers read it
  __shared__ float gates[2];    // alpha, beta of the token
  __shared__ float gpar[2];     // -exp(A_log), dt_bias of the head
  __shared__ float nw[kBV];     // the norm weight of the CTA's columns
  __shared__ float zs[kBV];     // z of the token, the CTA's columns

  const int h = blockIdx.x / SPLIT, r = blockIdx.x % SPLIT, n = blockIdx.y;
  const int c0 = r * kBV;  // the CTA's first value column
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int key = h / p.group;
  const bool qk_owner = h % p.group == 0;  // the group's first value head writes the shared q/k conv state
  using Act = Storage<AT>;                 // fp32 <-> the activation dtype
  pdl_start();                             // every global access below follows the previous kernel in the stream

  // Row range (cu_seqlens clamped to [0, T]) and slots; everything below depends on n only, so an early
  // return is uniform over the cluster.
  int64_t bi = n, t0 = 0, len = p.T;
  if (p.cu.data) {
    const int64_t s = min(max(p.cu.at(n), int64_t(0)), p.T), e = min(max(p.cu.at(n + 1), int64_t(0)), p.T);
    bi = 0, t0 = s, len = max(e - s, int64_t(0));
  }
  if (len == 0) return;  // a length-0 row touches nothing
  int64_t acc_n = 1, start = n, conv_slot = n;
  bool valid = true;
  if (p.si_2d) {
    acc_n = p.na.data ? p.na.at(n) : 1;
    valid = acc_n >= 1 && acc_n <= p.T_max;
    start = valid ? p.si.at(n, acc_n - 1) : -1;
    conv_slot = p.si.at(n, 0);
  } else if (p.si.data) {
    start = conv_slot = p.si.at(n);
  }
  valid = valid && slot_ok(p, start);
  AT* out = static_cast<AT*>(p.out);
  if (!valid) {  // zero outputs, nothing else
    for (int64_t t = 0; t < len; ++t)
      if (tid < kBV)
        out[bi * p.out_s[0] + (t0 + t) * p.out_s[1] + h * p.out_s[2] + (c0 + tid) * p.out_s[3]] = Act::from(0.f);
    return;
  }
  const bool conv_ok = slot_ok(p, conv_slot);
  const int64_t offset = p.si_2d ? acc_n - 1 : 0;

  // Start state: every load issued before any use, before the conv's loads.
  const TileMap<SPLIT, KMAJOR> tm(c0);
  float S[kR][4];
  load_state(static_cast<const ST*>(p.pool) + start * p.pool_s[0] + h * p.pool_s[1], p.pool_s[2], tm, S);
  int64_t buf = -1;  // its index load after the state's
  if (p.inter || p.inter_win) {
    buf = p.ii.data ? p.ii.at(n) : n;
    if (buf < 0 || buf >= p.n_buf) buf = -1;  // an invalid buffer index skips the intermediate writes
  }

  // Conv channels: CTA channel c < 128 is q channel c of the key head, c < 256 k channel c - 128, then the v
  // channels of the CTA's columns; thread tid owns c = tid + kT i. gch: the channel in x, W and the conv state.
  const auto gch = [&](int c) -> int64_t {
    if (c < kD) return int64_t(key) * kD + c;
    if (c < 2 * kD) return int64_t(p.Hqk + key) * kD + (c - kD);
    return 2 * int64_t(p.Hqk) * kD + int64_t(h) * kD + c0 + (c - 2 * kD);
  };
  const auto writer = [&](int c) { return c >= 2 * kD || (qk_owner && (c % kD) / kBV == r); };
  const int H = p.Kc - 1;
  const AT* cs = static_cast<const AT*>(p.conv_state);
  const AT* x = static_cast<const AT*>(p.x);
  const AT* z = static_cast<const AT*>(p.z);
  AT* iw = static_cast<AT*>(p.inter_win);
  // Every global load of the prologue and of a token goes out before the first of them is used: a load whose
  // value is widened or stored in its own branch (a runtime dtype, the window's `j < H`) waits for its data there,
  // and at N = 1 such loads ran one round trip after another (~30 before the first token). Here they are
  // predicated loads of the bits into registers, widened or stored to shared memory after the last one is issued.
  // A token's loads: the thread's conv inputs, z of its column, the raw gates.
  const bool gate_thread = tid == kT - 1;  // forms the token's alpha and beta into shared memory
  struct TokenIn {
    AT x[C::kConvIters], z;
    uint32_t a, b;
  };
  const auto load_token = [&](int64_t tok) {
    TokenIn in;
#pragma unroll
    for (int i = 0; i < C::kConvIters; ++i) {
      const int c = tid + kT * i;
      in.x[i] = c < kNC ? x[bi * p.x_s[0] + tok * p.x_s[1] + gch(c) * p.x_s[2]] : Act::from(0.f);
    }
    in.z = tid < kBV ? z[bi * p.z_s[0] + tok * p.z_s[1] + h * p.z_s[2] + (c0 + tid) * p.z_s[3]] : Act::from(0.f);
    in.a = gate_thread ? load1_bits(p.a, p.a_dt, bi * p.a_s[0] + tok * p.a_s[1] + h * p.a_s[2]) : 0u;
    in.b = gate_thread ? load1_bits(p.b, p.b_dt, bi * p.b_s[0] + tok * p.b_s[1] + h * p.b_s[2]) : 0u;
    return in;
  };
  // Split 1 (small N: latency) loads the first token's inputs beside the state's and the windows' and each next
  // token's under the recurrence of the one before; the split CTAs (up to 128 or 80 registers a thread) each token
  // at its start.
  constexpr bool kPrefetch = SPLIT == 1;
  TokenIn in{};
  if constexpr (kPrefetch) in = load_token(t0);
  // The head's gate parameters and the norm weight of the thread's column (shared memory after the conv's).
  const uint32_t alog_bits = gate_thread ? p.A_log.bits(h) : 0u;
  const uint32_t dtb_bits = gate_thread && p.dt_bias.data ? p.dt_bias.bits(h) : 0u;
  const uint32_t nw_bits = tid < kBV ? p.norm_w.bits(c0 + tid) : 0u;
  // The windows, taps and bias of the thread's channels (shared memory: the conv below reads them per token).
  // Split 1 (small N, latency-bound) issues every channel's loads together; the split CTAs (large N, up to 128 or
  // 80 registers a thread) one channel at a time, which spills nothing.
  constexpr int kU = SPLIT == 1 ? C::kConvIters : 1;  // channels whose loads go out together
#pragma unroll 1
  for (int i0 = 0; i0 < C::kConvIters; i0 += kU) {
    if (kU == 1 && tid + kT * i0 >= kNC) break;
    AT win[kU][kMaxHist];
    uint32_t tap[kU][kMaxHist + 1], bias[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int c = tid + kT * (i0 + u);
      const bool own = c < kNC;
      const int64_t g = gch(own ? c : 0);
      const AT* row = cs + (conv_ok ? conv_slot : 0) * p.cs_s[0] + g * p.cs_s[1];
#pragma unroll
      for (int j = 0; j < kMaxHist; ++j)  // an invalid conv slot (2-D indices, column 0) starts from a zero window
        win[u][j] = own && conv_ok && j < H ? row[(offset + j) * p.cs_s[2]] : Act::from(0.f);
#pragma unroll
      for (int j = 0; j <= kMaxHist; ++j)
        tap[u][j] = own && j < p.Kc ? load1_bits(p.conv_w, p.conv_w_dt, g * p.conv_w_s[0] + j * p.conv_w_s[1]) : 0u;
      bias[u] = own && p.conv_bias.data ? p.conv_bias.bits(g) : 0u;
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int c = tid + kT * (i0 + u);
      if (c >= kNC) break;
#pragma unroll
      for (int j = 0; j < kMaxHist; ++j)
        if (j < H) hist[j][c] = Act::to(win[u][j]);
#pragma unroll
      for (int j = 0; j <= kMaxHist; ++j)
        if (j < p.Kc) taps[j][c] = from_bits1(p.conv_w_dt, tap[u][j]);
      cbias[c] = p.conv_bias.data ? p.conv_bias.widen(bias[u]) : 0.f;
    }
  }
  if (gate_thread) {  // -exp(A_log), dt_bias
    gpar[0] = gate_factor(p.A_log.widen(alog_bits));
    gpar[1] = p.dt_bias.data ? p.dt_bias.widen(dtb_bits) : 0.f;
  }
  if (tid < kBV) nw[tid] = p.norm_w.widen(nw_bits);
  if constexpr (SPLIT == 1) cluster_arrive();  // this CTA has read its conv windows

  for (int64_t t = 0; t < len; ++t) {
    const int64_t tok = t0 + t;
    // ---- gates; conv + SiLU, window shift ----
    if constexpr (!kPrefetch) in = load_token(tok);
    if (gate_thread) {  // the gates of (token, head), fp32
      gates[0] = expf(gate_from_factor(from_bits1(p.a_dt, in.a), gpar[0], gpar[1], p.sp_beta, p.sp_thr));
      gates[1] = beta_from_raw(from_bits1(p.b_dt, in.b), p.allow_neg);
    }
#pragma unroll
    for (int i = 0; i < C::kConvIters; ++i)  // parked in ys[c], this thread's own entries, which the conv overwrites
      if (tid + kT * i < kNC) ys[tid + kT * i] = Act::to(in.x[i]);
    if (tid < kBV) zs[tid] = Act::to(in.z);
    if (kPrefetch && t + 1 < len) in = load_token(tok + 1);  // in flight under this token's recurrence
#pragma unroll 1
    for (int i = 0; i < C::kConvIters; ++i) {
      const int c = tid + kT * i;
      if (c >= kNC) break;
      const float xin = ys[c];
      float acc = cbias[c];
#pragma unroll
      for (int j = 0; j < kMaxHist; ++j)
        if (j < H) acc = fmaf(taps[j][c], hist[j][c], acc);
      acc = fmaf(taps[H][c], xin, acc);
      ys[c] = Act::to(Act::from(silu(acc)));
#pragma unroll
      for (int j = 0; j < kMaxHist; ++j)
        if (j < H) hist[j][c] = j + 1 < H ? hist[j + 1][c] : xin;
      if (iw && buf >= 0 && t < p.T_buf && writer(c)) {  // the last Kc - 1 inputs after token t
        const int64_t g = gch(c);
#pragma unroll
        for (int j = 0; j < kMaxHist; ++j)
          if (j < H) iw[buf * p.iw_s[0] + t * p.iw_s[1] + g * p.iw_s[2] + j * p.iw_s[3]] = Act::from(hist[j][c]);
      }
    }
    __syncthreads();
    const auto [rq, rk, qk] = qk_norm(ys, p.scale);  // q^ = rq q, k^ = rk k, q^ . k^
    const float alpha = gates[0], beta = gates[1];
    const float* vs = ys + 2 * kD;  // v of the CTA's columns

    // ---- recurrence ----
    if constexpr (KMAJOR) {
      const int cl = tm.col - c0;  // the thread's first column within the CTA's
      float pk[4] = {0.f, 0.f, 0.f, 0.f}, pq[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int m = 0; m < kR; ++m) {
        const int i = tm.row0 + tm.rstep * m;
        const float kr = ys[kD + i] * rk, qr = ys[i] * rq;
#pragma unroll
        for (int e = 0; e < 4; ++e) pk[e] = fmaf(S[m][e], kr, pk[e]), pq[e] = fmaf(S[m][e], qr, pq[e]);
      }
      if constexpr (C::kRPW > 1) {  // the rows of the warp's column group
#pragma unroll
        for (int e = 0; e < 4; ++e) pk[e] = lane_sum<C::kTPR, 32>(pk[e]), pq[e] = lane_sum<C::kTPR, 32>(pq[e]);
      }
      if (lane < C::kTPR) {
        *reinterpret_cast<float4*>(&red_k[warp][cl]) = make_float4(pk[0], pk[1], pk[2], pk[3]);
        *reinterpret_cast<float4*>(&red_q[warp][cl]) = make_float4(pq[0], pq[1], pq[2], pq[3]);
      }
      __syncthreads();
      float u[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) pk[e] = pq[e] = 0.f;
#pragma unroll 1  // a warp's partials at a time: 8 registers of loads, not 8 kW
      for (int w = 0; w < kW; ++w) {
        const float4 a4 = *reinterpret_cast<const float4*>(&red_k[w][cl]);
        const float4 b4 = *reinterpret_cast<const float4*>(&red_q[w][cl]);
        pk[0] += a4.x, pk[1] += a4.y, pk[2] += a4.z, pk[3] += a4.w;
        pq[0] += b4.x, pq[1] += b4.y, pq[2] += b4.z, pq[3] += b4.w;
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        u[e] = beta * (vs[cl + e] - alpha * pk[e]);  // u = beta (v - alpha S^T k^)
        if (warp == 0 && lane < C::kTPR) os[cl + e] = fmaf(alpha, pq[e], qk * u[e]);
      }
#pragma unroll
      for (int m = 0; m < kR; ++m) {
        const float kr = ys[kD + tm.row0 + tm.rstep * m] * rk;
#pragma unroll
        for (int e = 0; e < 4; ++e) S[m][e] = fmaf(alpha, S[m][e], kr * u[e]);  // S = alpha S + k^ u^T
      }
    } else {
      float kr[4], qr[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) kr[e] = ys[kD + 4 * lane + e] * rk, qr[e] = ys[4 * lane + e] * rq;
#pragma unroll
      for (int m = 0; m < kR; ++m) {  // row j = warp + kW m (of the CTA's) of M = S^T
        float dk = 0.f, dq = 0.f;
#pragma unroll
        for (int e = 0; e < 4; ++e) dk = fmaf(S[m][e], kr[e], dk), dq = fmaf(S[m][e], qr[e], dq);
        dk = lane_sum<1, 32>(dk);
        dq = lane_sum<1, 32>(dq);
        const int j = warp + kW * m;
        const float u = beta * (vs[j] - alpha * dk);
        if (lane == 0) os[j] = fmaf(alpha, dq, qk * u);
#pragma unroll
        for (int e = 0; e < 4; ++e) S[m][e] = fmaf(alpha, S[m][e], kr[e] * u);
      }
    }

    // ---- per-token state writes ----
    if (p.si_2d && p.commit && t < p.T_max) {
      const int64_t st = p.si.at(n, t);
      if (slot_ok(p, st))
        store_state(static_cast<ST*>(p.pool) + st * p.pool_s[0] + h * p.pool_s[1], p.pool_s[2], tm, S);
    }
    if (p.inter && buf >= 0 && t < p.T_buf)
      store_state(static_cast<ST*>(p.inter) + buf * p.inter_s[0] + t * p.inter_s[1] + h * p.inter_s[2], p.inter_s[3],
                  tm, S);
    __syncthreads();

    // ---- gated RMSNorm over V (o rounded to the activation dtype first) ----
    float o = 0.f;
    if (tid < kBV) {
      o = Act::to(Act::from(os[tid]));
      const float so = lane_sum<1, 32>(o * o);
      if (lane == 0) part[t & 1][warp] = so;
    }
    float sso;  // sum of o^2 over all 128 columns: the four 32-column partials in column order
    if constexpr (SPLIT == 1) {
      __syncthreads();
      sso = part[t & 1][0] + part[t & 1][1] + part[t & 1][2] + part[t & 1][3];
    } else {
      // Peers' partials through distributed shared memory. A peer rewrites part[t & 1] two tokens later, after
      // the next token's barrier, which this CTA reaches only after these reads: double buffering suffices.
      cluster_arrive();
      cluster_wait();
      sso = 0.f;
      if (tid < kBV) {
        cg::cluster_group cluster = cg::this_cluster();
        const unsigned rank0 = unsigned(h % p.group) * SPLIT;
#pragma unroll
        for (int j = 0; j < SPLIT; ++j) {
          const float* peer = cluster.map_shared_rank(&part[t & 1][0], rank0 + j);
#pragma unroll
          for (int w = 0; w < kBV / 32; ++w) sso = j == 0 && w == 0 ? peer[w] : sso + peer[w];
        }
      }
    }
    if (tid < kBV) {
      const float rho = rsqrtf(sso / float(kD) + p.eps);
      out[bi * p.out_s[0] + tok * p.out_s[1] + h * p.out_s[2] + (c0 + tid) * p.out_s[3]] =
          Act::from(o * rho * nw[tid] * silu(zs[tid]));
    }
  }
  if constexpr (SPLIT > 1) cluster_arrive();  // this CTA's reads of its peers' shared memory are done

  if (p.commit && !p.si_2d)
    store_state(static_cast<ST*>(p.pool) + start * p.pool_s[0] + h * p.pool_s[1], p.pool_s[2], tm, S);

  // ---- conv state: after every CTA of the cluster has read the shared q/k window (and, split, before any CTA
  // exits while a peer may still read its shared memory) ----
  cluster_wait();
  if (!p.commit || !conv_ok || H == 0) return;
  AT* csw = static_cast<AT*>(p.conv_state);
#pragma unroll 1
  for (int i = 0; i < C::kConvIters; ++i) {
    const int c = tid + kT * i;
    if (c >= kNC) break;
    if (!writer(c)) continue;
    const int64_t g = gch(c);
    AT* row = csw + conv_slot * p.cs_s[0] + g * p.cs_s[1];
    if (p.si_2d) {  // s'[i] = s[o + 1 + i] (i < Kc - 2), s'[Kc - 2 + t] = x_t; only this thread writes the row
      AT h0[kMaxHist];
#pragma unroll
      for (int j = 0; j + 1 < kMaxHist; ++j)
        if (j + 1 < H) h0[j] = row[(offset + 1 + j) * p.cs_s[2]];
#pragma unroll
      for (int j = 0; j + 1 < kMaxHist; ++j)
        if (j + 1 < H) row[j * p.cs_s[2]] = h0[j];
      for (int64_t t = 0; t < len && H - 1 + t < p.L; ++t)
        row[(H - 1 + t) * p.cs_s[2]] = x[bi * p.x_s[0] + (t0 + t) * p.x_s[1] + g * p.x_s[2]];
    } else {  // the last Kc - 1 raw inputs
#pragma unroll
      for (int j = 0; j < kMaxHist; ++j)
        if (j < H) row[j * p.cs_s[2]] = Act::from(hist[j][c]);
    }
  }
}

// Grid (Hv SPLIT, N), clusters of group SPLIT CTAs along x: the split CTAs of the key head's value heads.
template <class AT, class ST, bool KMAJOR, int SPLIT>
Status launch(const MixerArgs& args, int64_t Hv, int64_t N, cudaStream_t stream) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(Hv * SPLIT), unsigned(N), 1);
  cfg.blockDim = dim3(Cfg<SPLIT>::kThreads, 1, 1);
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(args.group * SPLIT);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1] = pdl_attribute();  // the kernel's pdl_start orders it after the previous kernel
  cfg.attrs = attr;
  cfg.numAttrs = 2;
  FGDN_CUDA_CHECK(cudaLaunchKernelEx(&cfg, mixer_decode_kernel<AT, ST, KMAJOR, SPLIT>, args));
  return Status::OK();
}

template <class AT, class ST, bool KMAJOR>
Status dispatch_split(const MixerArgs& args, int split, int64_t Hv, int64_t N, cudaStream_t s) {
  switch (split) {
    case 1:
      return launch<AT, ST, KMAJOR, 1>(args, Hv, N, s);
    case 2:
      return launch<AT, ST, KMAJOR, 2>(args, Hv, N, s);
    case 4:
      return launch<AT, ST, KMAJOR, 4>(args, Hv, N, s);
    default:
      return FGDN_ERROR(internal, "mixer_decode: plan split ", split, " (expected 1, 2 or 4)");
  }
}

template <class AT>
Status dispatch_state(const MixerArgs& args, const MixerDecodeParams& p, int split, int64_t Hv, int64_t N,
                      cudaStream_t s) {
  const bool km = p.state_layout == StateLayout::k_major;
  if (p.state_pool.dtype == DType::bf16)
    return km ? dispatch_split<AT, __nv_bfloat16, true>(args, split, Hv, N, s)
              : dispatch_split<AT, __nv_bfloat16, false>(args, split, Hv, N, s);
  return km ? dispatch_split<AT, float, true>(args, split, Hv, N, s)
            : dispatch_split<AT, float, false>(args, split, Hv, N, s);
}

}  // namespace

Status mixer_decode(const MixerDecodeParams& p, const MixerDims& d, const MixerDecodePlan& plan, void* stream) {
  if (d.N == 0 || d.T == 0) return Status::OK();
  const MixerArgs a = make_args(p, d);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (plan.pipe) {  // one token per row on a K-major bf16 or fp32 pool (plan_mixer_decode)
    if (p.state_layout != StateLayout::k_major)
      return FGDN_ERROR(internal, "mixer_decode: the pipe kernel planned for a V-major pool");
    const bool bf = p.x.dtype == DType::bf16;
    const auto launch =
        p.state_pool.dtype == DType::bf16
            ? (bf ? launch_mixer_pipe<__nv_bfloat16, __nv_bfloat16> : launch_mixer_pipe<__half, __nv_bfloat16>)
            : (bf ? launch_mixer_pipe<__nv_bfloat16, float> : launch_mixer_pipe<__half, float>);
    FGDN_CUDA_CHECK(launch(a, s));
    return Status::OK();
  }
  if (p.x.dtype == DType::bf16) return dispatch_state<__nv_bfloat16>(a, p, plan.split, d.Hv, d.N, s);
  return dispatch_state<__half>(a, p, plan.split, d.Hv, d.N, s);
}

}  // namespace flashgdn::cuda
