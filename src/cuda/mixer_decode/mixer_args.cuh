// The arguments of the mixer_decode kernels (mixer_decode.cu: the clustered kernel; mixer_pipe_kernel.cuh: the
// persistent pipe kernel), built once per call from MixerDecodeParams by cuda::mixer_decode.
#pragma once

#include "api/internal.hpp"
#include "cuda/common/device_util.cuh"

namespace flashgdn::cuda::mixer {

constexpr int kD = 128;      // K = V = 128
constexpr int kMaxHist = 7;  // Kc - 1 <= 7 (Kc <= 8, validated)

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
  // element i's bits (the load), widened by `widen` once every load is out (load1_bits, device_util.cuh)
  __device__ uint32_t bits(int64_t i) const { return load1_bits(data, dt, i * s); }
  __device__ float widen(uint32_t w) const { return from_bits1(dt, w); }
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
  int64_t N, T, slots, T_max, n_buf, T_buf, L;
  int Hqk, group, Kc;
  float scale, eps, sp_beta, sp_thr;
  bool allow_neg, commit, null_slot_invalid;
};

__device__ __forceinline__ bool slot_ok(const MixerArgs& p, int64_t s) {
  return cuda::slot_ok(s, p.slots, p.null_slot_invalid);
}

__device__ __forceinline__ float silu(float u) {
  return u / (1.f + expf(-u));
}

// The l2norm factors of a token's q and k from its conv outputs y (q at [0, 128), k at [128, 256)), every warp for
// itself (no barrier) over the lanes' 4-element slices: q^ = rq q, k^ = rk k (qk_norm_factors, device_util.cuh), and
// qk = q^ . k^ from the raw dot product.
struct QkNorm {
  float rq, rk, qk;
};
__device__ __forceinline__ QkNorm qk_norm(const float* y, float scale) {
  const int lane = threadIdx.x & 31;
  float q[4], k[4], sqk = 0.f;
#pragma unroll
  for (int e = 0; e < 4; ++e) q[e] = y[4 * lane + e], k[e] = y[kD + 4 * lane + e], sqk = fmaf(q[e], k[e], sqk);
  sqk = lane_sum<1, 32>(sqk);
  QkNorm r;
  qk_norm_factors(q, k, scale, true, &r.rq, &r.rk);
  r.qk = sqk * r.rq * r.rk;
  return r;
}

inline void copy_strides(int64_t* dst, const TensorView& t) {
  for (int i = 0; i < t.ndim; ++i) dst[i] = t.strides[i];
}
inline Index make_index(const TensorView& t) {
  Index r;
  if (!t.defined()) return r;
  r.data = t.data, r.i64 = t.dtype == DType::i64, r.s0 = t.strides[0], r.s1 = t.ndim > 1 ? t.strides[1] : 0;
  return r;
}
inline Vec make_vec(const TensorView& t) {
  Vec r;
  if (!t.defined()) return r;
  r.data = t.data, r.dt = t.dtype, r.s = t.strides[0];
  return r;
}
// The kernels' arguments of a validated call.
inline MixerArgs make_args(const MixerDecodeParams& p, const MixerDims& d) {
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
  a.N = d.N, a.T = d.T, a.slots = d.slots, a.T_max = d.T_max, a.n_buf = d.n_buf, a.T_buf = d.T_buf, a.L = d.L;
  a.Hqk = int(d.Hqk), a.group = int(d.Hv / d.Hqk), a.Kc = int(d.Kc);
  a.scale = d.scale, a.eps = p.norm_eps, a.sp_beta = p.gate.softplus_beta, a.sp_thr = p.gate.softplus_threshold;
  a.allow_neg = p.gate.allow_neg_eigval, a.commit = p.commit, a.null_slot_invalid = p.null_slot_is_invalid;
  return a;
}

}  // namespace flashgdn::cuda::mixer
