// Kernel arguments of the recurrent (decode / multi-token / verify) kernel, resolved from validated
// RecurrentParams + RecurrentDims on the host. Plain C++ (no CUDA headers). All strides are in elements; the last dim
// of every tensor is contiguous.
#pragma once

#include <cstdint>

#include "api/internal.hpp"

namespace flashgdn::cuda {

// x / d for 0 <= x < 2^31 and 1 <= d <= 2^31 as a multiply-high, an add and a shift (Granlund-Montgomery):
// l = ceil(log2 d), m = floor(2^32 (2^l - d) / d) + 1 (< 2^32), x / d = (umulhi(x, m) + x) >> l; the sum cannot
// overflow 32 bits because umulhi(x, m) <= x < 2^31. Built on the host; the kernels divide tile and head indices by
// runtime counts with it (udiv, below) instead of a ~25-instruction integer division each.
struct DivU32 {
  uint32_t d = 1, m = 1, l = 0;
  static constexpr DivU32 of(uint32_t d) {
    DivU32 r;
    r.d = d < 1 ? 1 : d;
    while (r.l < 32 && (uint64_t(1) << r.l) < r.d) ++r.l;
    r.m = uint32_t((uint64_t(1) << 32) * ((uint64_t(1) << r.l) - r.d) / r.d + 1);
    return r;
  }
  // The host form (tests); the kernels use udiv.
  constexpr uint32_t div(uint32_t x) const { return uint32_t(((uint64_t(x) * m) >> 32) + x) >> l; }
};
#ifdef __CUDACC__
__device__ __forceinline__ uint32_t udiv(uint32_t x, const DivU32& q) {
  return (__umulhi(x, q.m) + x) >> q.l;
}
#endif

struct RecurrentArgs {
  // ---- what a single-token row reads first, in the first constant-cache lines: at N = 1 the kernel is a latency
  // chain (parameter -> slot -> state -> store) and each parameter line is a miss on every SM ----
  int64_t N = 0, T = 0;
  int32_t K = 0, V = 0;
  DivU32 gqa;  // Hv / Hqk: value head h reads q/k head h / (Hv / Hqk)
  DivU32 vt;   // V-tiles per head, V / BV of the planned kernel (set at the launch; direct, direct_pipe)
  bool varlen = false;
  bool commit = true;
  bool null_slot_is_invalid = false;
  bool cu_i64 = false, si_i64 = false, na_i64 = false, ii_i64 = false;
  StateLayout layout = StateLayout::k_major;
  const void* state_indices = nullptr;  // [N] or [N, T_max]; may be null (row n uses slot n)
  int64_t si_s[2] = {};
  int64_t T_max = 0;  // 0: 1-D (or absent) state_indices
  // state ([slot or n, h, row] strides; rows are K (k_major) or V (v_major) long)
  void* pool = nullptr;  // [slots, Hv, K, V] / [slots, Hv, V, K]; may be null
  DType pool_dtype = DType::f32;
  int64_t pool_s[3] = {};
  int64_t slots = 0;
  void* inter = nullptr;  // [N_buf, T_buf, Hv, K, V] / [.., V, K]; may be null

  // ---- activations ([b, t, h] strides; the head dim is contiguous), gates and output scale ----
  const void* q = nullptr;  // [B, T, Hqk, K]
  const void* k = nullptr;  // [B, T, Hqk, K]
  DType qk_dtype = DType::f32;
  int64_t q_s[3] = {}, k_s[3] = {};
  const void* v = nullptr;  // [B, T, Hv, V]
  void* o = nullptr;        // [B, T, Hv, V] output, dtype of v
  DType v_dtype = DType::f32;
  int64_t v_s[3] = {}, o_s[3] = {};
  const void* g = nullptr;     // [B, T, Hv] (raw a with gate_in_kernel); may be null (g = 0)
  const void* beta = nullptr;  // [B, T, Hv] (raw b with beta_sigmoid); may be null (beta = 1)
  DType g_dtype = DType::f32, beta_dtype = DType::f32;
  int64_t g_s[3] = {}, beta_s[3] = {};
  float scale = 0.f;
  bool l2norm = false;
  bool gate_in_kernel = false, beta_sigmoid = false, allow_neg_eigval = false;
  float softplus_beta = 1.f, softplus_threshold = 20.f;

  // ---- the rest: other dims, varlen, protocol A / B tables, intermediate states, pool-less states, raw gates ----
  int64_t Hqk = 0, Hv = 0;
  DivU32 hv;                           // Hv
  const void* cu_seqlens = nullptr;    // [N + 1]; may be null (fixed length)
  const void* num_accepted = nullptr;  // [N]; may be null (a = 1)
  int64_t na_s = 1;
  const void* inter_indices = nullptr;  // [N]; may be null (row n uses entry n)
  int64_t ii_s = 1;
  DType inter_dtype = DType::f32;
  int64_t inter_s[4] = {};
  int64_t n_buf = 0, T_buf = 0;
  const float* h0 = nullptr;  // [N, Hv, K, V] / [N, Hv, V, K] (only without a pool); may be null (zeros)
  int64_t h0_s[3] = {};
  float* hT = nullptr;  // like h0, output; may be null
  int64_t hT_s[3] = {};
  const void* A_log = nullptr;    // [Hv]; may be null
  const void* dt_bias = nullptr;  // [Hv]; may be null
  DType A_log_dtype = DType::f32, dt_bias_dtype = DType::f32;
  int64_t A_log_s = 1, dt_bias_s = 1;
};

// Resolve the kernel arguments from validated params.
RecurrentArgs make_recurrent_args(const RecurrentParams& p, const RecurrentDims& d);

}  // namespace flashgdn::cuda
