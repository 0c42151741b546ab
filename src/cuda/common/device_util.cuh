// Device helpers shared by the recurrent, commit and gating kernels: runtime-dtype scalar and 4-vector
// loads/stores (fp32 math on bf16/f16/f32 storage), index loads, warp reductions. The PTX wrappers (cp.async, ...)
// are ptx.cuh, the gate and l2norm math gate.cuh, shared with the chunked prefill.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/gate.cuh"
#include "cuda/common/ptx.cuh"
#include "flashgdn/flashgdn.hpp"

namespace flashgdn::cuda {

// ---- compile-time storage types ------------------------------------------------------------------------
// A 4-element vector of a storage type: 16 bytes for fp32, 8 bytes for bf16/f16. Callers guarantee the
// element offset is a multiple of 4 and the base 16-byte aligned (validated: last dim contiguous, other
// strides multiples of 16 bytes).
template <class T>
__device__ __forceinline__ void load4(const T* p, float (&x)[4]);
template <class T>
__device__ __forceinline__ void store4(T* p, const float (&x)[4]);

template <>
__device__ __forceinline__ void load4<float>(const float* p, float (&x)[4]) {
  float4 v = *reinterpret_cast<const float4*>(p);
  x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}
template <>
__device__ __forceinline__ void store4<float>(float* p, const float (&x)[4]) {
  *reinterpret_cast<float4*>(p) = make_float4(x[0], x[1], x[2], x[3]);
}
template <>
__device__ __forceinline__ void load4<__nv_bfloat16>(const __nv_bfloat16* p, float (&x)[4]) {
  uint2 v = *reinterpret_cast<const uint2*>(p);
  float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v.x));
  float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v.y));
  x[0] = a.x, x[1] = a.y, x[2] = b.x, x[3] = b.y;
}
template <>
__device__ __forceinline__ void store4<__nv_bfloat16>(__nv_bfloat16* p, const float (&x)[4]) {
  __nv_bfloat162 a = __floats2bfloat162_rn(x[0], x[1]);
  __nv_bfloat162 b = __floats2bfloat162_rn(x[2], x[3]);
  uint2 v;
  v.x = *reinterpret_cast<uint32_t*>(&a);
  v.y = *reinterpret_cast<uint32_t*>(&b);
  *reinterpret_cast<uint2*>(p) = v;
}
template <>
__device__ __forceinline__ void load4<__half>(const __half* p, float (&x)[4]) {
  uint2 v = *reinterpret_cast<const uint2*>(p);
  float2 a = __half22float2(*reinterpret_cast<const __half2*>(&v.x));
  float2 b = __half22float2(*reinterpret_cast<const __half2*>(&v.y));
  x[0] = a.x, x[1] = a.y, x[2] = b.x, x[3] = b.y;
}
template <>
__device__ __forceinline__ void store4<__half>(__half* p, const float (&x)[4]) {
  __half2 a = __floats2half2_rn(x[0], x[1]);
  __half2 b = __floats2half2_rn(x[2], x[3]);
  uint2 v;
  v.x = *reinterpret_cast<uint32_t*>(&a);
  v.y = *reinterpret_cast<uint32_t*>(&b);
  *reinterpret_cast<uint2*>(p) = v;
}

// ---- runtime storage types (DType as int) ---------------------------------------------------------------
// The branch is uniform across the CTA, so it costs one predicate per access.
__device__ __forceinline__ float load1(const void* base, DType dt, int64_t off) {
  switch (dt) {
    case DType::bf16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[off]);
    case DType::f16:
      return __half2float(static_cast<const __half*>(base)[off]);
    default:
      return static_cast<const float*>(base)[off];
  }
}
__device__ __forceinline__ void store1(void* base, DType dt, int64_t off, float x) {
  switch (dt) {
    case DType::bf16:
      static_cast<__nv_bfloat16*>(base)[off] = __float2bfloat16_rn(x);
      break;
    case DType::f16:
      static_cast<__half*>(base)[off] = __float2half_rn(x);
      break;
    default:
      static_cast<float*>(base)[off] = x;
      break;
  }
}
__device__ __forceinline__ void load4(const void* base, DType dt, int64_t off, float (&x)[4]) {
  switch (dt) {
    case DType::bf16:
      load4(static_cast<const __nv_bfloat16*>(base) + off, x);
      break;
    case DType::f16:
      load4(static_cast<const __half*>(base) + off, x);
      break;
    default:
      load4(static_cast<const float*>(base) + off, x);
      break;
  }
}
__device__ __forceinline__ void store4(void* base, DType dt, int64_t off, const float (&x)[4]) {
  switch (dt) {
    case DType::bf16:
      store4(static_cast<__nv_bfloat16*>(base) + off, x);
      break;
    case DType::f16:
      store4(static_cast<__half*>(base) + off, x);
      break;
    default:
      store4(static_cast<float*>(base) + off, x);
      break;
  }
}

// Index tensors are i32 or i64.
__device__ __forceinline__ int64_t load_index(const void* base, bool i64, int64_t off) {
  return i64 ? static_cast<const int64_t*>(base)[off] : int64_t(static_cast<const int32_t*>(base)[off]);
}

// ---- reductions ------------------------------------------------------------------------------------------
// Butterfly sum over the lanes that differ in the bits [FROM, TO) of the lane id; every lane gets the sum.
template <int FROM, int TO>
__device__ __forceinline__ float lane_sum(float x) {
#pragma unroll
  for (int m = FROM; m < TO; m <<= 1) x += __shfl_xor_sync(0xffffffffu, x, m);
  return x;
}

// The row factors of one token's q and k, held as 4-element lane slices across a warp (K = 128): rq = scale / |q|
// and rk = 1 / |k| with l2norm (x / sqrt(sum x^2 + 1e-6), fp32, gdn-math §1.4; zero rows stay zero), else scale
// and 1.
__device__ __forceinline__ void qk_norm_factors(const float (&q)[4], const float (&k)[4], float scale, bool l2norm,
                                                float* rq, float* rk) {
  *rq = scale;
  *rk = 1.f;
  if (l2norm) {
    float sq = 0.f, sk = 0.f;
#pragma unroll
    for (int e = 0; e < 4; ++e) sq = fmaf(q[e], q[e], sq), sk = fmaf(k[e], k[e], sk);
    sq = lane_sum<1, 32>(sq);
    sk = lane_sum<1, 32>(sk);
    *rq *= l2_rnorm(sq);
    *rk = l2_rnorm(sk);
  }
}

}  // namespace flashgdn::cuda
