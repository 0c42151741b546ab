// cuda::gating: g and beta from the raw projections (gdn-math §4, vLLM fused_gdn_gating):
//   g = -exp(A_log[h]) softplus(a + dt_bias[h]),  beta = sigmoid(b) (x2 with allow_neg_eigval), all fp32.
// a, b, g, beta share the shape [..., Hv] with arbitrary strides; each thread does one element.
#include "api/internal.hpp"
#include "cuda/common/cuda_check.cuh"
#include "cuda/common/device_util.cuh"

namespace flashgdn::cuda {
namespace {

constexpr int kGatingLead = kMaxDims - 1;  // leading dims of [..., Hv]

struct GatingTensor {
  void* data = nullptr;  // may be null (absent)
  DType dtype = DType::f32;
  int64_t s[kMaxDims] = {};  // strides: leading dims, then the head dim at index `lead`
};

struct GatingArgs {
  GatingTensor a, b, g, beta;
  const void* A_log = nullptr;    // [Hv]
  const void* dt_bias = nullptr;  // [Hv]; may be null
  DType A_log_dtype = DType::f32, dt_bias_dtype = DType::f32;
  int64_t A_log_s = 1, dt_bias_s = 1;
  int64_t shape[kGatingLead] = {};  // leading dims
  int lead = 0;
  int64_t rows = 0, Hv = 0;
  float sp_beta = 1.f, sp_threshold = 20.f;
  bool allow_neg_eigval = false;
};

__device__ __forceinline__ int64_t gating_offset(const GatingTensor& t, const GatingArgs& a, int64_t row, int64_t h) {
  int64_t off = h * t.s[a.lead];
  for (int d = a.lead - 1; d >= 0; --d) {  // row -> multi-index over the leading dims
    const int64_t i = row % a.shape[d];
    row /= a.shape[d];
    off += i * t.s[d];
  }
  return off;
}

__global__ void gating_kernel(const GatingArgs a) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= a.rows * a.Hv) return;
  const int64_t row = e / a.Hv, h = e % a.Hv;
  // The four loads as bits before any is widened (a widening beside its load waits for it: one round trip
  // after another at decode, where this kernel is one thread per value head).
  const bool has_b = a.b.data && a.beta.data;
  const uint32_t xw = load1_bits(a.a.data, a.a.dtype, gating_offset(a.a, a, row, h));
  const uint32_t Aw = load1_bits(a.A_log, a.A_log_dtype, h * a.A_log_s);
  const uint32_t bias_w = a.dt_bias ? load1_bits(a.dt_bias, a.dt_bias_dtype, h * a.dt_bias_s) : 0u;
  const uint32_t bw = has_b ? load1_bits(a.b.data, a.b.dtype, gating_offset(a.b, a, row, h)) : 0u;
  const float bias = a.dt_bias ? from_bits1(a.dt_bias_dtype, bias_w) : 0.f;
  store1(a.g.data, a.g.dtype, gating_offset(a.g, a, row, h),
         gate_from_raw(from_bits1(a.a.dtype, xw), from_bits1(a.A_log_dtype, Aw), bias, a.sp_beta, a.sp_threshold));
  if (has_b)
    store1(a.beta.data, a.beta.dtype, gating_offset(a.beta, a, row, h),
           beta_from_raw(from_bits1(a.b.dtype, bw), a.allow_neg_eigval));
}

void set_tensor(GatingTensor* t, const TensorView& v) {
  if (!v.defined()) return;
  t->data = v.data, t->dtype = v.dtype;
  for (int i = 0; i < v.ndim; ++i) t->s[i] = v.strides[i];
}

}  // namespace

Status gating(const GatingParams& p, const GatingDims& d, void* stream) {
  GatingArgs a;
  a.lead = p.a.ndim - 1;
  if (a.lead < 0 || a.lead > kGatingLead) return FGDN_INVALID("gating: a: expected 1 to ", kMaxDims, " dims");
  for (int i = 0; i < a.lead; ++i) a.shape[i] = p.a.shape[i];
  set_tensor(&a.a, p.a), set_tensor(&a.b, p.b), set_tensor(&a.g, p.g), set_tensor(&a.beta, p.beta);
  a.A_log = p.A_log.data, a.A_log_dtype = p.A_log.dtype, a.A_log_s = p.A_log.strides[0];
  if (p.dt_bias.defined())
    a.dt_bias = p.dt_bias.data, a.dt_bias_dtype = p.dt_bias.dtype, a.dt_bias_s = p.dt_bias.strides[0];
  a.rows = d.rows, a.Hv = d.Hv;
  a.sp_beta = p.gate.softplus_beta, a.sp_threshold = p.gate.softplus_threshold;
  a.allow_neg_eigval = p.gate.allow_neg_eigval;
  const int64_t total = d.rows * d.Hv;
  if (total == 0) return Status::OK();
  constexpr int kThreads = 256;
  gating_kernel<<<dim3(unsigned((total + kThreads - 1) / kThreads)), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      a);
  FGDN_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

}  // namespace flashgdn::cuda
