// The gate, beta and l2norm math of every kernel (gdn-math §1.4, §4), in fp32, one rounding for every op: the
// prefill, the decode kernels and the gating op compute g and beta from raw projections with the same instructions.
#pragma once

#include <cuda_runtime.h>

namespace flashgdn::cuda {

// softplus with PyTorch's convention: (1/beta) log(1 + exp(beta x)) if beta x <= threshold, else x.
__device__ __forceinline__ float softplus(float x, float sp_beta, float sp_threshold) {
  float bx = sp_beta * x;
  return bx <= sp_threshold ? log1pf(expf(bx)) / sp_beta : x;
}
// -exp(A_log): the per-head factor of the gate
__device__ __forceinline__ float gate_factor(float A_log) {
  return -expf(A_log);
}
// g = -exp(A_log) softplus(a + dt_bias), with -exp(A_log) precomputed (gate_factor)
__device__ __forceinline__ float gate_from_factor(float a, float factor, float dt_bias, float sp_beta, float sp_thr) {
  return factor * softplus(a + dt_bias, sp_beta, sp_thr);
}
__device__ __forceinline__ float gate_from_raw(float a, float A_log, float dt_bias, float sp_beta, float sp_thr) {
  return gate_from_factor(a, gate_factor(A_log), dt_bias, sp_beta, sp_thr);
}
// beta = c sigmoid(b), c = 2 with allow_neg_eigval (c / (1 + e) = c (1 / (1 + e)) exactly for c = 1, 2)
__device__ __forceinline__ float beta_from_raw(float b, bool allow_neg_eigval) {
  float s = 1.0f / (1.0f + expf(-b));
  return allow_neg_eigval ? 2.0f * s : s;
}

// 1 / sqrt(sum x^2 + 1e-6) from the row's sum of squares: the l2norm factor of q and k rows (x / sqrt(sum x^2 + 1e-6),
// zero rows stay zero).
__device__ __forceinline__ float l2_rnorm(float sumsq) {
  return rsqrtf(sumsq + 1e-6f);
}

}  // namespace flashgdn::cuda
