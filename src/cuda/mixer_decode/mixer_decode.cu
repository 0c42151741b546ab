// cuda::mixer_decode: the Gated DeltaNet mixer step (flashgdn.hpp, MixerDecodeParams) in one launch.
//
// Grid: x = value head h, y = row n; one CTA of 256 threads per (n, h) owns the whole 128 x 128 fp32 state
// of the head in registers (64 values a thread) for all of the row's tokens, so the gated RMSNorm over V
// needs no second pass. The Hv / Hqk value heads of one key head form a thread block cluster: each of them
// recomputes the key head's q and k conv (384 channels a CTA: cheap), and the cluster barrier orders every
// CTA's read of the shared q/k conv window before rank 0 rewrites it in place (the v channels are private).
//
// Per token t of the row (fp32 math; y, o and out rounded to the activation dtype as the engines do):
//   y      = silu(bias + sum_j W[:, j] w_j)             conv over the window of the last Kc raw inputs
//   q^, k^ = scale q / |q|, k / |k|                     |x| = sqrt(sum x^2 + 1e-6)
//   alpha  = exp(-exp(A_log) softplus(a + dt_bias)),  beta = sigmoid(b)
//   kS = S^T k^,  qS = S^T q^ (pre-update state)
//   u  = beta (v - alpha kS)                            (2a) on S~ = alpha S
//   o  = alpha qS + (q^ . k^) u                         = S_t^T q^, the post-update read
//   S  = alpha S + k^ u^T                               (2b)
//   out = o rsqrt(mean(o^2) + eps) w silu(z)
// State registers: thread (warp w, lane l) holds rows r = w + 8 m (m < 16) and columns 4 l .. 4 l + 3 of the
// stored [128, 128] tile. K-major ([K, V]) rows are key indices: the reductions over K run over m, then over
// the 8 warps through shared memory. V-major ([V, K]) rows are value indices: they run over the lanes
// (shuffles). Sums run in a fixed order: bitwise reproducible.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "api/internal.hpp"
#include "cuda/common/cuda_check.cuh"
#include "cuda/common/device_util.cuh"

namespace flashgdn::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kD = 128;             // K = V = 128
constexpr int kRows = kD / kWarps;  // state rows per thread
constexpr int kMaxHist = 7;         // Kc - 1 <= 7 (Kc <= 8, validated)

struct Index {
  const void* data = nullptr;  // may be null (absent)
  bool i64 = false;
  int64_t s0 = 0, s1 = 0;
  __device__ int64_t at(int64_t i, int64_t j = 0) const { return load_index(data, i64, i * s0 + j * s1); }
};

struct Vec {                   // a [n] parameter vector of runtime dtype
  const void* data = nullptr;  // may be null (absent)
  DType dt = DType::f32;
  int64_t s = 0;
  __device__ float at(int64_t i) const { return load1(data, dt, i * s); }
};

struct MixerArgs {
  const void* x;  // [B, T, C] activation dtype
  int64_t x_s[3];
  const void* z;  // [B, T, Hv, V]
  int64_t z_s[4];
  const void* a;  // [B, T, Hv] runtime dtype
  DType a_dt;
  int64_t a_s[3];
  const void* b;  // [B, T, Hv] runtime dtype
  DType b_dt;
  int64_t b_s[3];
  Vec A_log;           // [Hv]
  Vec dt_bias;         // [Hv]; may be null
  const void* conv_w;  // [C, Kc] runtime dtype
  DType conv_w_dt;
  int64_t conv_w_s[2];
  Vec conv_bias;     // [C]; may be null
  Vec norm_w;        // [V]
  Index cu;          // [N + 1]; may be null
  void* conv_state;  // [slots, C, L] activation dtype
  int64_t cs_s[3];
  void* pool;         // [slots, Hv, 128, 128] state dtype, rows contiguous
  int64_t pool_s[3];  // slot, head, row strides
  Index si;           // [N] or [N, T_max]; may be null
  bool si_2d;
  Index na;     // [N]; may be null
  void* inter;  // [N_buf, T_buf, Hv, 128, 128] state dtype; may be null
  int64_t inter_s[4];
  void* inter_win;  // [N_buf, T_buf, C, Kc - 1] activation dtype; may be null
  int64_t iw_s[4];
  Index ii;   // [N]; may be null
  void* out;  // [B, T, Hv, V]
  int64_t out_s[4];
  int64_t T, slots, T_max, n_buf, T_buf, L;
  int Hqk, group, Kc;
  float scale, eps, sp_beta, sp_thr;
  bool allow_neg, commit, null_slot_invalid;
};

__device__ __forceinline__ bool slot_ok(const MixerArgs& p, int64_t s) {
  return s >= 0 && s < p.slots && !(p.null_slot_invalid && s == 0);
}

__device__ __forceinline__ float silu(float u) {
  return u / (1.f + expf(-u));
}

__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

template <class ST>
__device__ __forceinline__ void store_state(ST* base, int64_t row_stride, const float (&S)[kRows][4]) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int m = 0; m < kRows; ++m) store4(base + (warp + kWarps * m) * row_stride + 4 * lane, S[m]);
}

template <class AT, class ST, bool KMAJOR>
__global__ void __launch_bounds__(kThreads) mixer_decode_kernel(const __grid_constant__ MixerArgs p) {
  __shared__ float qs[kD], ks[kD], vs[kD], os[kD];
  __shared__ __align__(16) float red_k[kWarps][kD];  // K-major: per-warp partials of S^T k^ and S^T q^
  __shared__ __align__(16) float red_q[kWarps][kD];
  __shared__ float red_s[4][4];  // per-warp sums: |q|^2, |k|^2, q.k (warps 0-3), |o|^2
  __shared__ float gates[2];     // alpha, beta

  const int h = blockIdx.x, n = blockIdx.y;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int key = h / p.group;
  const bool qk_owner = h % p.group == 0;  // cluster rank 0 writes the shared q/k conv state
  using Act = Storage<AT>;                 // fp32 <-> the activation dtype

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
      if (tid < kD) out[bi * p.out_s[0] + (t0 + t) * p.out_s[1] + h * p.out_s[2] + tid * p.out_s[3]] = Act::from(0.f);
    return;
  }
  const bool conv_ok = slot_ok(p, conv_slot);
  const int64_t offset = p.si_2d ? acc_n - 1 : 0;
  int64_t buf = -1;
  if (p.inter || p.inter_win) {
    buf = p.ii.data ? p.ii.at(n) : n;
    if (buf < 0 || buf >= p.n_buf) buf = -1;  // an invalid buffer index skips the intermediate writes
  }

  // Start state: every load issued before any use.
  float S[kRows][4];
  {
    const ST* base = static_cast<const ST*>(p.pool) + start * p.pool_s[0] + h * p.pool_s[1] + 4 * lane;
#pragma unroll
    for (int m = 0; m < kRows; ++m) load4(base + (warp + kWarps * m) * p.pool_s[2], S[m]);
  }

  // Conv channels of this thread: threads 0-127 own q and k channel tid of the key head, 128-255 v channel
  // tid - 128 of the value head. hist holds the window's Kc - 1 raw inputs, oldest first.
  const int nch = tid < kD ? 2 : 1;
  int64_t ch[2];
  ch[0] = tid < kD ? int64_t(key) * kD + tid : 2 * int64_t(p.Hqk) * kD + int64_t(h) * kD + (tid - kD);
  ch[1] = int64_t(p.Hqk) * kD + int64_t(key) * kD + tid;
  const int H = p.Kc - 1;
  float w[2][kMaxHist + 1], hist[2][kMaxHist], hist0[2][kMaxHist], bias[2];
  const AT* cs = static_cast<const AT*>(p.conv_state);
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    bias[c] = 0.f;
#pragma unroll
    for (int j = 0; j <= kMaxHist; ++j) w[c][j] = 0.f;
#pragma unroll
    for (int j = 0; j < kMaxHist; ++j) hist[c][j] = 0.f;
    if (c >= nch) continue;
    if (p.conv_bias.data) bias[c] = p.conv_bias.at(ch[c]);
#pragma unroll
    for (int j = 0; j <= kMaxHist; ++j)
      if (j < p.Kc) w[c][j] = load1(p.conv_w, p.conv_w_dt, ch[c] * p.conv_w_s[0] + j * p.conv_w_s[1]);
    if (conv_ok) {
#pragma unroll
      for (int j = 0; j < kMaxHist; ++j)
        if (j < H) hist[c][j] = Act::to(cs[conv_slot * p.cs_s[0] + ch[c] * p.cs_s[1] + (offset + j) * p.cs_s[2]]);
    }
#pragma unroll
    for (int j = 0; j < kMaxHist; ++j) hist0[c][j] = hist[c][j];
  }
  cluster_arrive();  // this CTA has read its conv windows

  const AT* x = static_cast<const AT*>(p.x);
  const AT* z = static_cast<const AT*>(p.z);
  AT* iw = static_cast<AT*>(p.inter_win);
  for (int64_t t = 0; t < len; ++t) {
    const int64_t tok = t0 + t;
    // ---- conv + SiLU, window shift ----
    float y[2];
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      y[c] = 0.f;
      if (c >= nch) continue;
      const float xin = Act::to(x[bi * p.x_s[0] + tok * p.x_s[1] + ch[c] * p.x_s[2]]);
      float acc = bias[c];
#pragma unroll
      for (int j = 0; j < kMaxHist; ++j)
        if (j < H) acc = fmaf(w[c][j], hist[c][j], acc);
#pragma unroll
      for (int j = 0; j <= kMaxHist; ++j)
        if (j == H) acc = fmaf(w[c][j], xin, acc);
      y[c] = Act::to(Act::from(silu(acc)));
#pragma unroll
      for (int j = 0; j < kMaxHist; ++j)
        if (j < H) hist[c][j] = j + 1 < H ? hist[c][j + 1] : xin;
      if (iw && buf >= 0 && t < p.T_buf && (tid >= kD || qk_owner)) {  // the last Kc - 1 inputs after token t
#pragma unroll
        for (int j = 0; j < kMaxHist; ++j)
          if (j < H) iw[buf * p.iw_s[0] + t * p.iw_s[1] + ch[c] * p.iw_s[2] + j * p.iw_s[3]] = Act::from(hist[c][j]);
      }
    }
    if (tid < kD) {
      qs[tid] = y[0];
      ks[tid] = y[1];
    } else {
      vs[tid - kD] = y[0];
    }
    if (tid < kD) {
      const float sq = lane_sum<1, 32>(y[0] * y[0]), sk = lane_sum<1, 32>(y[1] * y[1]);
      const float sqk = lane_sum<1, 32>(y[0] * y[1]);
      if (lane == 0) red_s[warp][0] = sq, red_s[warp][1] = sk, red_s[warp][2] = sqk;
    }
    if (tid == kD) {  // the gates of (token, head), fp32
      const int64_t ai = bi * p.a_s[0] + tok * p.a_s[1] + h * p.a_s[2];
      const int64_t bj = bi * p.b_s[0] + tok * p.b_s[1] + h * p.b_s[2];
      const float bias_h = p.dt_bias.data ? p.dt_bias.at(h) : 0.f;
      gates[0] = expf(gate_from_raw(load1(p.a, p.a_dt, ai), p.A_log.at(h), bias_h, p.sp_beta, p.sp_thr));
      gates[1] = beta_from_raw(load1(p.b, p.b_dt, bj), p.allow_neg);
    }
    __syncthreads();
    const float ssq = red_s[0][0] + red_s[1][0] + red_s[2][0] + red_s[3][0];
    const float ssk = red_s[0][1] + red_s[1][1] + red_s[2][1] + red_s[3][1];
    const float sqk = red_s[0][2] + red_s[1][2] + red_s[2][2] + red_s[3][2];
    const float rq = p.scale * rsqrtf(ssq + 1e-6f), rk = rsqrtf(ssk + 1e-6f);
    const float qk = sqk * rq * rk;  // q^ . k^
    const float alpha = gates[0], beta = gates[1];

    // ---- recurrence ----
    if constexpr (KMAJOR) {
      float pk[4] = {0.f, 0.f, 0.f, 0.f}, pq[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        const float kr = ks[warp + kWarps * m] * rk, qr = qs[warp + kWarps * m] * rq;
#pragma unroll
        for (int e = 0; e < 4; ++e) pk[e] = fmaf(S[m][e], kr, pk[e]), pq[e] = fmaf(S[m][e], qr, pq[e]);
      }
      *reinterpret_cast<float4*>(&red_k[warp][4 * lane]) = make_float4(pk[0], pk[1], pk[2], pk[3]);
      *reinterpret_cast<float4*>(&red_q[warp][4 * lane]) = make_float4(pq[0], pq[1], pq[2], pq[3]);
      __syncthreads();
      float u[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) pk[e] = pq[e] = 0.f;
#pragma unroll
      for (int r = 0; r < kWarps; ++r) {
        const float4 a4 = *reinterpret_cast<const float4*>(&red_k[r][4 * lane]);
        const float4 b4 = *reinterpret_cast<const float4*>(&red_q[r][4 * lane]);
        pk[0] += a4.x, pk[1] += a4.y, pk[2] += a4.z, pk[3] += a4.w;
        pq[0] += b4.x, pq[1] += b4.y, pq[2] += b4.z, pq[3] += b4.w;
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        u[e] = beta * (vs[4 * lane + e] - alpha * pk[e]);  // u = beta (v - alpha S^T k^)
        if (warp == 0) os[4 * lane + e] = fmaf(alpha, pq[e], qk * u[e]);
      }
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        const float kr = ks[warp + kWarps * m] * rk;
#pragma unroll
        for (int e = 0; e < 4; ++e) S[m][e] = fmaf(alpha, S[m][e], kr * u[e]);  // S = alpha S + k^ u^T
      }
    } else {
      float kr[4], qr[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) kr[e] = ks[4 * lane + e] * rk, qr[e] = qs[4 * lane + e] * rq;
#pragma unroll
      for (int m = 0; m < kRows; ++m) {  // row j = warp + 8 m of M = S^T
        float dk = 0.f, dq = 0.f;
#pragma unroll
        for (int e = 0; e < 4; ++e) dk = fmaf(S[m][e], kr[e], dk), dq = fmaf(S[m][e], qr[e], dq);
        dk = lane_sum<1, 32>(dk);
        dq = lane_sum<1, 32>(dq);
        const int j = warp + kWarps * m;
        const float u = beta * (vs[j] - alpha * dk);
        if (lane == 0) os[j] = fmaf(alpha, dq, qk * u);
#pragma unroll
        for (int e = 0; e < 4; ++e) S[m][e] = fmaf(alpha, S[m][e], kr[e] * u);
      }
    }

    // ---- per-token state writes ----
    if (p.si_2d && p.commit && t < p.T_max) {
      const int64_t st = p.si.at(n, t);
      if (slot_ok(p, st)) store_state(static_cast<ST*>(p.pool) + st * p.pool_s[0] + h * p.pool_s[1], p.pool_s[2], S);
    }
    if (p.inter && buf >= 0 && t < p.T_buf)
      store_state(static_cast<ST*>(p.inter) + buf * p.inter_s[0] + t * p.inter_s[1] + h * p.inter_s[2], p.inter_s[3],
                  S);
    __syncthreads();

    // ---- gated RMSNorm over V (o rounded to the activation dtype first) ----
    float o = 0.f;
    if (tid < kD) {
      o = Act::to(Act::from(os[tid]));
      const float so = lane_sum<1, 32>(o * o);
      if (lane == 0) red_s[warp][3] = so;
    }
    __syncthreads();
    if (tid < kD) {
      const float rho = rsqrtf((red_s[0][3] + red_s[1][3] + red_s[2][3] + red_s[3][3]) / float(kD) + p.eps);
      const float zz = Act::to(z[bi * p.z_s[0] + tok * p.z_s[1] + h * p.z_s[2] + tid * p.z_s[3]]);
      out[bi * p.out_s[0] + tok * p.out_s[1] + h * p.out_s[2] + tid * p.out_s[3]] =
          Act::from(o * rho * p.norm_w.at(tid) * silu(zz));
    }
  }

  if (p.commit && !p.si_2d)
    store_state(static_cast<ST*>(p.pool) + start * p.pool_s[0] + h * p.pool_s[1], p.pool_s[2], S);

  // ---- conv state: after every CTA of the cluster has read the shared q/k window ----
  cluster_wait();
  if (!p.commit || !conv_ok || H == 0) return;
  AT* csw = static_cast<AT*>(p.conv_state);
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    if (c >= nch || (tid < kD && !qk_owner)) continue;
    AT* row = csw + conv_slot * p.cs_s[0] + ch[c] * p.cs_s[1];
    if (p.si_2d) {  // s'[i] = s[o + 1 + i] (i < Kc - 2), s'[Kc - 2 + t] = x_t
#pragma unroll
      for (int j = 0; j + 1 < kMaxHist; ++j)
        if (j + 1 < H) row[j * p.cs_s[2]] = Act::from(hist0[c][j + 1]);
      for (int64_t t = 0; t < len && H - 1 + t < p.L; ++t)
        row[(H - 1 + t) * p.cs_s[2]] = x[bi * p.x_s[0] + (t0 + t) * p.x_s[1] + ch[c] * p.x_s[2]];
    } else {  // the last Kc - 1 raw inputs
#pragma unroll
      for (int j = 0; j < kMaxHist; ++j)
        if (j < H) row[j * p.cs_s[2]] = Act::from(hist[c][j]);
    }
  }
}

void copy_strides(int64_t* dst, const TensorView& t) {
  for (int i = 0; i < t.ndim; ++i) dst[i] = t.strides[i];
}
Index make_index(const TensorView& t) {
  Index r;
  if (!t.defined()) return r;
  r.data = t.data, r.i64 = t.dtype == DType::i64, r.s0 = t.strides[0], r.s1 = t.ndim > 1 ? t.strides[1] : 0;
  return r;
}
Vec make_vec(const TensorView& t) {
  Vec r;
  if (!t.defined()) return r;
  r.data = t.data, r.dt = t.dtype, r.s = t.strides[0];
  return r;
}

template <class AT, class ST, bool KMAJOR>
Status launch(const MixerArgs& args, int64_t Hv, int64_t N, cudaStream_t stream) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(Hv), unsigned(N), 1);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(args.group);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  FGDN_CUDA_CHECK(cudaLaunchKernelEx(&cfg, mixer_decode_kernel<AT, ST, KMAJOR>, args));
  return Status::OK();
}

template <class AT>
Status dispatch_state(const MixerArgs& args, const MixerDecodeParams& p, int64_t Hv, int64_t N, cudaStream_t s) {
  const bool km = p.state_layout == StateLayout::k_major;
  if (p.state_pool.dtype == DType::bf16)
    return km ? launch<AT, __nv_bfloat16, true>(args, Hv, N, s) : launch<AT, __nv_bfloat16, false>(args, Hv, N, s);
  return km ? launch<AT, float, true>(args, Hv, N, s) : launch<AT, float, false>(args, Hv, N, s);
}

}  // namespace

Status mixer_decode(const MixerDecodeParams& p, const MixerDims& d, void* stream) {
  if (d.N == 0 || d.T == 0) return Status::OK();
  MixerArgs a = {};
  a.x = p.x.data;
  copy_strides(a.x_s, p.x);
  a.z = p.z.data;
  copy_strides(a.z_s, p.z);
  a.a = p.a.data, a.a_dt = p.a.dtype;
  copy_strides(a.a_s, p.a);
  a.b = p.b.data, a.b_dt = p.b.dtype;
  copy_strides(a.b_s, p.b);
  a.A_log = make_vec(p.A_log);
  a.dt_bias = make_vec(p.dt_bias);
  a.conv_w = p.conv_weight.data, a.conv_w_dt = p.conv_weight.dtype;
  copy_strides(a.conv_w_s, p.conv_weight);
  a.conv_bias = make_vec(p.conv_bias);
  a.norm_w = make_vec(p.norm_weight);
  a.cu = make_index(p.cu_seqlens);
  a.conv_state = p.conv_state.data;
  copy_strides(a.cs_s, p.conv_state);
  a.pool = p.state_pool.data;
  a.pool_s[0] = p.state_pool.strides[0], a.pool_s[1] = p.state_pool.strides[1], a.pool_s[2] = p.state_pool.strides[2];
  a.si = make_index(p.state_indices);
  a.si_2d = p.state_indices.defined() && p.state_indices.ndim == 2;
  a.na = make_index(p.num_accepted_tokens);
  if (p.intermediate_states.defined()) {
    a.inter = p.intermediate_states.data;
    for (int i = 0; i < 4; ++i) a.inter_s[i] = p.intermediate_states.strides[i];
  }
  if (p.intermediate_conv_windows.defined()) {
    a.inter_win = p.intermediate_conv_windows.data;
    copy_strides(a.iw_s, p.intermediate_conv_windows);
  }
  a.ii = make_index(p.intermediate_indices);
  a.out = p.out.data;
  copy_strides(a.out_s, p.out);
  a.T = d.T, a.slots = d.slots, a.T_max = d.T_max, a.n_buf = d.n_buf, a.T_buf = d.T_buf, a.L = d.L;
  a.Hqk = int(d.Hqk), a.group = int(d.Hv / d.Hqk), a.Kc = int(d.Kc);
  a.scale = d.scale, a.eps = p.norm_eps, a.sp_beta = p.gate.softplus_beta, a.sp_thr = p.gate.softplus_threshold;
  a.allow_neg = p.gate.allow_neg_eigval, a.commit = p.commit, a.null_slot_invalid = p.null_slot_is_invalid;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (p.x.dtype == DType::bf16) return dispatch_state<__nv_bfloat16>(a, p, d.Hv, d.N, s);
  return dispatch_state<__half>(a, p, d.Hv, d.N, s);
}

}  // namespace flashgdn::cuda
