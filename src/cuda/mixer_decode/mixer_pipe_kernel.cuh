// The pipe form of mixer_decode: single-token rows (fixed T = 1) on a K-major bf16 or fp32 state pool with 1-D slots
// and no intermediate states, the memory-bound large-batch case (docs/mixer_decode.md, "The pipe kernel"). Same step as
// the clustered kernel (mixer_decode.cu); the sums over K and over V run in other orders.
//
// Why: the clustered kernel holds one (row, value head) state tile per CTA group in registers, so an SM has no state
// bytes in flight while its CTAs compute, and each split CTA recomputes the key head's q / k conv. Here CTAs are
// persistent: CTA b owns key head kh = b mod Hqk and walks the rows n = b / Hqk + m R (R = gridDim.x / Hqk CTAs per
// key head); for each row it forms the q / k conv once and then walks the key head's `group` value heads. Every
// (row, value head) item's 128 x 128 state arrives through an S-stage shared-memory ring of TMA bulk copies (one
// block of 16 rows per warp, 4 KB bf16 or 8 KB fp32, completing on the stage's mbarrier), the direct_pipe kernel's ring
// (direct_pipe_kernel.cuh), so S items are in flight while one computes. One CTA owns a (row, key head), so the
// in-place q / k conv-window update needs no cluster: nothing else reads that window during the call.
//
// The pool is bf16 or fp32 (the stage holds the rows as stored; elements widened where used, the update rounded once).
// Per item (row n, value head h = kh group + j), fp32 math, y, o and out rounded to the activation dtype as the
// engines do:
//   y      = silu(bias + sum_j W[:, j] w_j)             conv over the window of the last Kc raw inputs (q, k at j = 0)
//   q^, k^ = scale q / |q|, k / |k|                     |x| = sqrt(sum x^2 + 1e-6)
//   alpha  = exp(-exp(A_log) softplus(a + dt_bias)),  beta = sigmoid(b)
//   kS = S^T k^,  qS = S^T q^,  u = beta (v - alpha kS),  o = alpha qS + (q^ . k^) u,  S = alpha S + k^ u^T
//   out = o rsqrt(mean(o^2) + eps) w silu(z)            mean over the 128 columns, all in this CTA
// Threads: conv channel tid of q (tid < 128) or k (tid >= 128) and v channel tid (tid < 128); state rows
// r0 P .. r0 P + P - 1 and columns E c .. E c + E - 1 (r0 = tid / TPR, c = tid % TPR, pipe::Geo); output column tid.
// Each next item's activations, windows, taps and gates are loaded one item ahead (registers), its slot with them.
// Barriers per item: after the stage wait (the previous item's shared memory is free; the previous item's s_o and s_rho
// visible, so its output goes out here), after the conv, after the cross-warp reduction. An invalid slot (< 0, >=
// slots, 0 with null_slot_is_invalid) writes exact zeros to the item's outputs and nothing else; commit = false writes
// neither the pool nor the conv state.
#pragma once

#include "cuda/mixer_decode/mixer_args.cuh"
#include "cuda/recurrent/direct_pipe_kernel.cuh"  // pipe::Geo, pipe::elem, direct::store16, tma, mbar

namespace flashgdn::cuda::mixer {

// kMixerPipeThreads = 256 threads, kMixerPipeStages = 3 stages (api/plan.hpp): 3 x 32 KB of bf16 state, 2 CTAs per SM
// (128 registers); 3 x 64 KB of fp32 state, 1 CTA per SM.
inline constexpr int kPipeMaxHist = 3;   // Kc <= 4 (the plan sends larger windows to the clustered kernel)
inline constexpr int kPipeMaxGroup = 8;  // value heads per key head
template <class ST>
constexpr int pipe_min_blocks() {
  return sizeof(ST) == 2 ? 2 : 1;
}

template <class AT, class ST, int S>
__global__ void __launch_bounds__(kMixerPipeThreads, pipe_min_blocks<ST>())
    mixer_pipe_kernel(const __grid_constant__ MixerArgs p) {
  constexpr int NT = kMixerPipeThreads;
  using G = pipe::Geo<ST, kD, kD, NT>;
  constexpr int E = G::E, TPR = G::TPR, P = G::P, NW = G::NW, RPW = G::RPW, kRowBytes = G::kRowBytes;
  static_assert(S >= 2 && P % 4 == 0 && NT == 2 * kD, "ring, 4-row q / k reads, one thread per q / k channel");
  using Act = Storage<AT>;
  extern __shared__ __align__(128) unsigned char s_ring[];  // S stages of the item's [K][V] state rows
  __shared__ __align__(16) float s_y[3 * kD];               // conv outputs: the row's q, k, the item's v
  __shared__ __align__(16) float s_red[NW][2][kD];          // per-warp partial sums of S^T k^, S^T q^
  __shared__ __align__(16) float s_o[kD];                   // o rounded to the activation dtype
  __shared__ float s_rho;                                   // rsqrt(mean(o^2) + eps)
  __shared__ float s_gpar[kPipeMaxGroup][2];                // -exp(A_log), dt_bias of the key head's value heads
  __shared__ uint64_t s_full[S];                            // stage s: its bulk copies have landed

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int c = tid % TPR, r0 = tid / TPR;
  const int Hqk = p.Hqk, group = p.group, H = p.Kc - 1;
  const int kh = int(blockIdx.x % unsigned(Hqk));
  const int64_t r = blockIdx.x / unsigned(Hqk), R = gridDim.x / unsigned(Hqk);
  // Item i of this CTA: row r + (i / group) R, value head kh group + i mod group (past the end once the row is >= N).
  auto item_n = [&](uint32_t i) { return r + int64_t(i / unsigned(group)) * R; };
  auto item_h = [&](uint32_t i) { return kh * group + int(i % unsigned(group)); };
  auto slot_of = [&](uint32_t i) -> int64_t {  // -1: the row is invalid or past the end
    const int64_t n = item_n(i);
    if (n >= p.N) return -1;
    const int64_t s = p.si.data ? p.si.at(n) : n;
    return slot_ok(p, s) ? s : -1;
  };
  // Stage item i's state rows (every lane of every warp calls it): lane 0 of each warp expects its 16 rows' bytes
  // (0 for an item with nothing to stage) and copies them as one block (the pool is dense: rows 256 bytes apart).
  auto issue_rows = [&](uint32_t i, int64_t slot, int buf) {
    uint64_t* bar = &s_full[buf];
    if (lane != 0) return;
    tma::arrive_expect_tx(bar, slot >= 0 ? RPW * kRowBytes : 0);
    if (slot < 0) return;
    const ST* src = static_cast<const ST*>(p.pool) + slot * p.pool_s[0] + item_h(i) * p.pool_s[1] +
                    int64_t(warp * RPW) * p.pool_s[2];
    tma::load_bulk(s_ring + size_t(buf) * G::kStateBytes + warp * RPW * kRowBytes, src, RPW * kRowBytes, bar);
  };

  const AT* x = static_cast<const AT*>(p.x);
  const AT* cs = static_cast<const AT*>(p.conv_state);
  // The thread's q / k channel in x, W and the conv state (q of the key head for tid < 128, else its k).
  const int64_t qk_ch = tid < kD ? int64_t(kh) * kD + tid : int64_t(Hqk + kh) * kD + (tid - kD);
  const auto v_ch = [&](int h) { return 2 * int64_t(Hqk) * kD + int64_t(h) * kD + tid; };  // tid < 128
  // An item's loads, as raw values (widened where used, so every load is out before the first waits).
  struct In {
    int64_t slot;
    AT xq, xv;                              // raw inputs of the thread's q / k channel (j = 0), v channel
    AT wq[kPipeMaxHist], wv[kPipeMaxHist];  // their windows, oldest first
    uint32_t vtw[kPipeMaxHist], vtx, vb;    // the v channel's taps on the window, on x, its bias (bits)
    AT z;                                   // z of column tid
    uint32_t a, b;                          // raw gate inputs (bits)
  };
  auto load_in = [&](uint32_t i) {
    In in;
    in.slot = slot_of(i);
    in.xq = in.xv = in.z = Act::from(0.f);
#pragma unroll
    for (int j = 0; j < kPipeMaxHist; ++j) in.wq[j] = in.wv[j] = Act::from(0.f), in.vtw[j] = 0u;
    in.vtx = in.vb = in.a = in.b = 0u;
    if (in.slot < 0) return in;
    const int64_t n = item_n(i);  // fixed T = 1: the token of row n is (b = n, t = 0)
    const int h = item_h(i);
    if (i % unsigned(group) == 0) {  // the row's q / k conv
      in.xq = x[n * p.x_s[0] + qk_ch * p.x_s[2]];
      const AT* row = cs + in.slot * p.cs_s[0] + qk_ch * p.cs_s[1];
#pragma unroll
      for (int j = 0; j < kPipeMaxHist; ++j)
        if (j < H) in.wq[j] = row[j * p.cs_s[2]];
    }
    if (tid < kD) {
      const int64_t g = v_ch(h);
      in.xv = x[n * p.x_s[0] + g * p.x_s[2]];
      const AT* row = cs + in.slot * p.cs_s[0] + g * p.cs_s[1];
#pragma unroll
      for (int j = 0; j < kPipeMaxHist; ++j) {
        if (j < H) in.wv[j] = row[j * p.cs_s[2]];
        if (j < H) in.vtw[j] = load1_bits(p.conv_w, p.conv_w_dt, g * p.conv_w_s[0] + j * p.conv_w_s[1]);
      }
      in.vtx = load1_bits(p.conv_w, p.conv_w_dt, g * p.conv_w_s[0] + H * p.conv_w_s[1]);
      in.vb = p.conv_bias.data ? p.conv_bias.bits(g) : 0u;
      in.z = static_cast<const AT*>(p.z)[n * p.z_s[0] + h * p.z_s[2] + tid * p.z_s[3]];
    }
    in.a = load1_bits(p.a, p.a_dt, n * p.a_s[0] + h * p.a_s[2]);
    in.b = load1_bits(p.b, p.b_dt, n * p.b_s[0] + h * p.b_s[2]);
    return in;
  };
  // y = silu(bias + sum_j tap_j w_j + tap_x x), rounded to the activation dtype; commit: the window shifted by x.
  auto conv = [&](const AT(&w)[kPipeMaxHist], AT xin, const float(&tw)[kPipeMaxHist], float tx, float bias,
                  int64_t slot, int64_t ch) {
    float acc = bias;
#pragma unroll
    for (int j = 0; j < kPipeMaxHist; ++j)
      if (j < H) acc = fmaf(tw[j], Act::to(w[j]), acc);
    acc = fmaf(tx, Act::to(xin), acc);
    if (p.commit) {
      AT* row = static_cast<AT*>(p.conv_state) + slot * p.cs_s[0] + ch * p.cs_s[1];
#pragma unroll
      for (int j = 0; j < kPipeMaxHist; ++j)
        if (j < H) row[j * p.cs_s[2]] = j + 1 < H ? w[j + 1] : xin;
    }
    return Act::to(Act::from(silu(acc)));
  };

  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < S; ++s) mbar::init(&s_full[s], NW);
  }
  wg::fence_async_smem();  // the barriers' initialization before the copies complete on them
  __syncthreads();
  pdl_start();  // every global access below follows the previous kernel in the stream

  // ---- prologue: the first S items in flight; the key head's constants ----
#pragma unroll 1
  for (int s = 0; s < S; ++s) issue_rows(uint32_t(s), slot_of(uint32_t(s)), s);
  int64_t nslot = slot_of(uint32_t(S));  // the refill of item 0's stage (item S)
  In cur = load_in(0);
  float qtw[kPipeMaxHist], qtx, qb;  // the q / k channel's taps and bias (the same for every row)
#pragma unroll
  for (int j = 0; j < kPipeMaxHist; ++j)
    qtw[j] = j < H
                 ? from_bits1(p.conv_w_dt, load1_bits(p.conv_w, p.conv_w_dt, qk_ch * p.conv_w_s[0] + j * p.conv_w_s[1]))
                 : 0.f;
  qtx = from_bits1(p.conv_w_dt, load1_bits(p.conv_w, p.conv_w_dt, qk_ch * p.conv_w_s[0] + H * p.conv_w_s[1]));
  qb = p.conv_bias.data ? p.conv_bias.widen(p.conv_bias.bits(qk_ch)) : 0.f;
  const float nw = tid < kD ? p.norm_w.widen(p.norm_w.bits(tid)) : 0.f;
  if (tid < group) {
    const int h = kh * group + tid;
    s_gpar[tid][0] = gate_factor(p.A_log.widen(p.A_log.bits(h)));
    s_gpar[tid][1] = p.dt_bias.data ? p.dt_bias.widen(p.dt_bias.bits(h)) : 0.f;
  }

  AT* out = static_cast<AT*>(p.out);
  // The item's gated RMSNorm output goes out after the next item's first barrier, which also orders s_o / s_rho
  // before it (the next item rewrites them only after its third barrier).
  int64_t prev_off = -1;  // out offset of the item whose output is pending (-1: none)
  AT prev_z = Act::from(0.f);
  int buf = 0;
  uint32_t parity = 0;  // bit s: the parity of the next phase of s_full[s]
#pragma unroll 1
  for (uint32_t i = 0; item_n(i) < p.N; ++i) {
    mbar::wait(&s_full[buf], (parity >> buf) & 1u);  // this item's rows have landed
    parity ^= 1u << buf;
    __syncthreads();  // every thread is done with the previous item's s_y (v), s_red; its s_o, s_rho and s_gpar visible
    if (prev_off >= 0 && tid < kD)  // the previous item's out = o rsqrt(mean(o^2) + eps) w silu(z)
      out[prev_off + tid * p.out_s[3]] = Act::from(s_o[tid] * s_rho * nw * silu(Act::to(prev_z)));
    prev_off = -1;
    const In nxt = load_in(i + 1);
    const int64_t n = item_n(i);
    const int j = int(i % unsigned(group)), h = kh * group + j;
    const int64_t o_off = n * p.out_s[0] + h * p.out_s[2];
    if (cur.slot < 0) {  // invalid row (CTA-uniform): exact zeros to its outputs, nothing else written
      if (tid < kD) out[o_off + tid * p.out_s[3]] = Act::from(0.f);
      issue_rows(i + S, nslot, buf);
    } else {
      // ---- conv + SiLU of the row's q / k (its first value head) and of the item's v ----
      if (j == 0) s_y[tid] = conv(cur.wq, cur.xq, qtw, qtx, qb, cur.slot, qk_ch);
      if (tid < kD) {
        float vtw[kPipeMaxHist];
#pragma unroll
        for (int m = 0; m < kPipeMaxHist; ++m) vtw[m] = from_bits1(p.conv_w_dt, cur.vtw[m]);
        const float vb = p.conv_bias.data ? p.conv_bias.widen(cur.vb) : 0.f;
        s_y[2 * kD + tid] = conv(cur.wv, cur.xv, vtw, from_bits1(p.conv_w_dt, cur.vtx), vb, cur.slot, v_ch(h));
      }
      __syncthreads();                                  // q, k, v visible
      const auto [rq, rk, qk] = qk_norm(s_y, p.scale);  // q^ = rq q, k^ = rk k, q^ . k^
      const float alpha =
          expf(gate_from_factor(from_bits1(p.a_dt, cur.a), s_gpar[j][0], s_gpar[j][1], p.sp_beta, p.sp_thr));
      const float beta = beta_from_raw(from_bits1(p.b_dt, cur.b), p.allow_neg);

      // ---- recurrence: the thread's state vectors into registers, then the warp's rows of the stage are free and
      // its refill with item i + S goes out at once ----
      const unsigned char* stg = s_ring + size_t(buf) * G::kStateBytes;
      uint4 w[P];
#pragma unroll
      for (int m = 0; m < P; ++m) w[m] = reinterpret_cast<const uint4*>(stg)[(r0 * P + m) * TPR + c];
      __syncwarp();  // every lane's vectors are read
      issue_rows(i + S, nslot, buf);
      float kS[E], qS[E];  // S^T k^, S^T q^ over the thread's rows, then the lanes of column group c, then the warps
#pragma unroll
      for (int e = 0; e < E; ++e) kS[e] = 0.f, qS[e] = 0.f;
#pragma unroll
      for (int m4 = 0; m4 < P; m4 += 4) {
        const float4 k4 = *reinterpret_cast<const float4*>(&s_y[kD + r0 * P + m4]);
        const float4 q4 = *reinterpret_cast<const float4*>(&s_y[r0 * P + m4]);
        const float kr[4] = {k4.x * rk, k4.y * rk, k4.z * rk, k4.w * rk};
        const float qr[4] = {q4.x * rq, q4.y * rq, q4.z * rq, q4.w * rq};
#pragma unroll
        for (int m = 0; m < 4; ++m) {
#pragma unroll
          for (int e = 0; e < E; ++e) {
            const float s = pipe::elem<ST, 0>(w[m4 + m], e);
            kS[e] = fmaf(s, kr[m], kS[e]), qS[e] = fmaf(s, qr[m], qS[e]);
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
      __syncthreads();  // partial sums visible
      float u[E], o[E];
#pragma unroll
      for (int e = 0; e < E; ++e) {
        float ks = s_red[0][0][E * c + e], qs = s_red[0][1][E * c + e];
#pragma unroll
        for (int m = 1; m < NW; ++m) ks += s_red[m][0][E * c + e], qs += s_red[m][1][E * c + e];  // fixed order
        u[e] = beta * (s_y[2 * kD + E * c + e] - alpha * ks);  // u = beta (v - alpha S^T k^)
        o[e] = fmaf(alpha, qs, qk * u[e]);                     // o = alpha S^T q^ + (q^ . k^) u
      }
      if (warp == 0) {  // lanes 0 .. TPR - 1 hold the 128 columns: o rounded, the sum of o^2
        float so = 0.f;
#pragma unroll
        for (int e = 0; e < E; ++e) {
          const float oe = Act::to(Act::from(o[e]));
          if (lane < TPR) s_o[E * c + e] = oe;
          so = fmaf(oe, oe, so);
        }
        so = lane_sum<1, TPR>(so);
        if (lane == 0) s_rho = rsqrtf(so / float(kD) + p.eps);
      }
      if (p.commit) {  // S = alpha S + k^ u^T, rounded once to the pool type
        ST* dst =
            static_cast<ST*>(p.pool) + cur.slot * p.pool_s[0] + h * p.pool_s[1] + E * c + int64_t(r0 * P) * p.pool_s[2];
#pragma unroll
        for (int m4 = 0; m4 < P; m4 += 4) {
          const float4 k4 = *reinterpret_cast<const float4*>(&s_y[kD + r0 * P + m4]);
          const float kr[4] = {k4.x * rk, k4.y * rk, k4.z * rk, k4.w * rk};
#pragma unroll
          for (int m = 0; m < 4; ++m) {
            float xs[E];
#pragma unroll
            for (int e = 0; e < E; ++e) xs[e] = fmaf(alpha, pipe::elem<ST, 1>(w[m4 + m], e), kr[m] * u[e]);
            direct::store16(dst + int64_t(m4 + m) * p.pool_s[2], xs);
          }
        }
      }
      prev_off = o_off, prev_z = cur.z;  // out goes out after the next item's first barrier
    }
    nslot = slot_of(i + S + 1);
    cur = nxt;
    buf = buf + 1 == S ? 0 : buf + 1;
  }
  if (prev_off >= 0) {  // the last item's output
    __syncthreads();
    if (tid < kD) out[prev_off + tid * p.out_s[3]] = Act::from(s_o[tid] * s_rho * nw * silu(Act::to(prev_z)));
  }
  // No copy outlives the CTA: every item it staged is one it walked (items past the end stage nothing).
}

// Persistent grid: resident CTAs per SM (occupancy of the ring's shared memory, queried once per device) times SMs,
// rounded down to whole key heads (at least one CTA per key head, at most one per (row, key head)).
template <class AT, class ST>
cudaError_t launch_mixer_pipe(const MixerArgs& a, cudaStream_t stream) {
  constexpr int S = kMixerPipeStages;
  using G = pipe::Geo<ST, kD, kD, kMixerPipeThreads>;
  if (a.N == 0) return cudaSuccess;
  // 32-bit item indices (i + S + 1 < items per CTA + S + 2), a whole key head's value heads per CTA
  if (a.N * a.group > (int64_t(1) << 30) || a.group > kPipeMaxGroup || a.Kc - 1 > kPipeMaxHist || a.Kc < 1)
    return cudaErrorInvalidConfiguration;
  constexpr int smem = S * G::kStateBytes;
  auto kern = mixer_pipe_kernel<AT, ST, S>;
  static std::atomic<uint64_t> done_mask{0};
  static std::atomic<int> per_sm_of[64];  // [device] resident CTAs per SM (0: not queried yet)
  if (const int e = prepare_launch(kern, smem, done_mask)) return static_cast<cudaError_t>(e);
  int dev = 0, per_sm = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = resident_ctas_per_sm(kern, kMixerPipeThreads, smem, dev, per_sm_of, &per_sm);
  if (e != cudaSuccess) return e;
  const int64_t R = std::max<int64_t>(1, std::min<int64_t>(a.N, int64_t(per_sm) * device_sm_count(dev) / a.Hqk));
  if (R * a.Hqk > (int64_t(1) << 31) - 1) return cudaErrorInvalidConfiguration;
  return launch_pdl(kern, dim3(unsigned(R * a.Hqk)), dim3(kMixerPipeThreads), size_t(smem), stream, a);
}

}  // namespace flashgdn::cuda::mixer
