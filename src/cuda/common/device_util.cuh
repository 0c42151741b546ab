// Device helpers shared by the recurrent, commit and gating kernels: runtime-dtype scalar and 4-vector
// loads/stores (fp32 math on bf16/f16/f32 storage), index loads, warp reductions. The PTX wrappers (cp.async, ...)
// are ptx.cuh, the gate and l2norm math gate.cuh, shared with the chunked prefill.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/gate.cuh"
#include "cuda/common/ptx.cuh"
#include "flashgdn/flashgdn.hpp"

namespace flashgdn::cuda {

// ---- compile-time storage types ------------------------------------------------------------------------
// Storage<T>: fp32 <-> one element of the storage type T (fp32, bf16, f16), and for the 16-bit types fp32 pairs
// <-> one 32-bit word of two packed elements. Stores round to nearest even; loads widen exactly.
template <class T>
struct Storage;
template <>
struct Storage<float> {
  __device__ __forceinline__ static float to(float v) { return v; }
  __device__ __forceinline__ static float from(float x) { return x; }
};
// The 16-bit types' conversions under one name per direction (overloads), for Storage16.
__device__ __forceinline__ float widen16(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float widen16(__half v) {
  return __half2float(v);
}
// bf16 -> fp32 is exact: the 16 bits moved into the high half (one shift or mask per element).
__device__ __forceinline__ float2 widen16(__nv_bfloat162 v) {
  const uint32_t w = *reinterpret_cast<const uint32_t*>(&v);
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}
__device__ __forceinline__ float2 widen16(__half2 v) {
  return __half22float2(v);
}
__device__ __forceinline__ void narrow16(float x, __nv_bfloat16* y) {
  *y = __float2bfloat16_rn(x);
}
__device__ __forceinline__ void narrow16(float x, __half* y) {
  *y = __float2half_rn(x);
}
__device__ __forceinline__ void narrow16(float a, float b, __nv_bfloat162* y) {
  *y = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void narrow16(float a, float b, __half2* y) {
  *y = __floats2half2_rn(a, b);
}
template <class T, class T2>
struct Storage16 {
  __device__ __forceinline__ static float to(T v) { return widen16(v); }
  __device__ __forceinline__ static T from(float x) {
    T y;
    narrow16(x, &y);
    return y;
  }
  __device__ __forceinline__ static float2 to2(uint32_t w) { return widen16(*reinterpret_cast<const T2*>(&w)); }
  __device__ __forceinline__ static uint32_t from2(float a, float b) {
    T2 h;
    narrow16(a, b, &h);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};
template <>
struct Storage<__nv_bfloat16> : Storage16<__nv_bfloat16, __nv_bfloat162> {};
template <>
struct Storage<__half> : Storage16<__half, __half2> {};

// A 4-element vector of a storage type: 16 bytes for fp32, 8 bytes for bf16/f16. Callers guarantee the
// element offset is a multiple of 4 and the base 16-byte aligned (validated: last dim contiguous, other
// strides multiples of 16 bytes). As bits: fp32 in x..w; bf16 / f16 as two packed pairs in x, y (z = w = 0).
template <class T>
__device__ __forceinline__ uint4 load4_bits(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return *reinterpret_cast<const uint4*>(p);
  } else {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    return make_uint4(v.x, v.y, 0u, 0u);
  }
}
template <class T>
__device__ __forceinline__ void from_bits4(const uint4& w, float (&x)[4]) {
  if constexpr (std::is_same_v<T, float>) {
    x[0] = __uint_as_float(w.x), x[1] = __uint_as_float(w.y), x[2] = __uint_as_float(w.z);
    x[3] = __uint_as_float(w.w);
  } else {
    const float2 a = Storage<T>::to2(w.x), b = Storage<T>::to2(w.y);
    x[0] = a.x, x[1] = a.y, x[2] = b.x, x[3] = b.y;
  }
}
template <class T>
__device__ __forceinline__ void load4(const T* p, float (&x)[4]) {
  from_bits4<T>(load4_bits(p), x);
}
template <class T>
__device__ __forceinline__ void store4(T* p, const float (&x)[4]) {
  if constexpr (std::is_same_v<T, float>)
    *reinterpret_cast<float4*>(p) = make_float4(x[0], x[1], x[2], x[3]);
  else
    *reinterpret_cast<uint2*>(p) = make_uint2(Storage<T>::from2(x[0], x[1]), Storage<T>::from2(x[2], x[3]));
}

// ---- runtime storage types (DType as int) ---------------------------------------------------------------
// f(std::type_identity<T>{}) with T the storage type of dt (bf16, f16, anything else fp32). The branch is
// uniform across the CTA, so it costs one predicate per access.
template <class F>
__device__ __forceinline__ decltype(auto) with_storage(DType dt, F&& f) {
  switch (dt) {
    case DType::bf16:
      return f(std::type_identity<__nv_bfloat16>{});
    case DType::f16:
      return f(std::type_identity<__half>{});
    default:
      return f(std::type_identity<float>{});
  }
}
__device__ __forceinline__ float load1(const void* base, DType dt, int64_t off) {
  return with_storage(dt, [&](auto t) {
    using T = typename decltype(t)::type;
    return Storage<T>::to(static_cast<const T*>(base)[off]);
  });
}
__device__ __forceinline__ void store1(void* base, DType dt, int64_t off, float x) {
  with_storage(dt, [&](auto t) {
    using T = typename decltype(t)::type;
    static_cast<T*>(base)[off] = Storage<T>::from(x);
  });
}
__device__ __forceinline__ void load4(const void* base, DType dt, int64_t off, float (&x)[4]) {
  with_storage(dt, [&](auto t) {
    using T = typename decltype(t)::type;
    load4(static_cast<const T*>(base) + off, x);
  });
}
__device__ __forceinline__ void store4(void* base, DType dt, int64_t off, const float (&x)[4]) {
  with_storage(dt, [&](auto t) {
    using T = typename decltype(t)::type;
    store4(static_cast<T*>(base) + off, x);
  });
}

// ---- the bits first, the conversion at use -------------------------------------------------------------
// A load whose widening sits inside the dtype branch waits for its data before the branch joins, so the next load
// issues a round trip later. Latency-bound kernels (decode at small N) load the bits of every operand first and
// widen them after their last load is issued.
// 4 consecutive elements: fp32 in x..w; bf16 / f16 as two packed pairs in x, y (z = w = 0).
// The loads carry no conversion, so the dtype branch joins before their data arrive.
__device__ __forceinline__ uint4 load4_bits(const void* base, DType dt, int64_t off) {
  const bool b16 = dt == DType::bf16 || dt == DType::f16;
  const unsigned char* p = static_cast<const unsigned char*>(base) + off * (b16 ? 2 : 4);
  return b16 ? load4_bits(reinterpret_cast<const uint16_t*>(p)) : load4_bits(reinterpret_cast<const float*>(p));
}
__device__ __forceinline__ void from_bits4(DType dt, uint4 w, float (&x)[4]) {
  with_storage(dt, [&](auto t) { from_bits4<typename decltype(t)::type>(w, x); });
}
// One element: fp32 bits, or the 16-bit element in the low half.
__device__ __forceinline__ uint32_t load1_bits(const void* base, DType dt, int64_t off) {
  if (dt == DType::bf16 || dt == DType::f16) return static_cast<const uint16_t*>(base)[off];
  return static_cast<const uint32_t*>(base)[off];
}
__device__ __forceinline__ float from_bits1(DType dt, uint32_t w) {
  return with_storage(dt, [&](auto t) {
    using T = typename decltype(t)::type;
    if constexpr (std::is_same_v<T, float>) {
      return __uint_as_float(w);
    } else {
      const uint16_t b = static_cast<uint16_t>(w);
      return Storage<T>::to(*reinterpret_cast<const T*>(&b));
    }
  });
}

// Index tensors are i32 or i64.
__device__ __forceinline__ int64_t load_index(const void* base, bool i64, int64_t off) {
  return i64 ? static_cast<const int64_t*>(base)[off] : int64_t(static_cast<const int32_t*>(base)[off]);
}
// A state-pool slot is valid in [0, slots), and slot 0 not with null_slot_is_invalid (gdn-math §8.1).
__device__ __forceinline__ bool slot_ok(int64_t s, int64_t slots, bool null_invalid) {
  return s >= 0 && s < slots && !(null_invalid && s == 0);
}

// ---- reductions ------------------------------------------------------------------------------------------
// Butterfly sum over the lanes that differ in the bits [FROM, TO) of the lane id; every lane gets the sum.
template <int FROM, int TO>
__device__ __forceinline__ float lane_sum(float x) {
#pragma unroll
  for (int m = FROM; m < TO; m <<= 1) x += __shfl_xor_sync(0xffffffffu, x, m);
  return x;
}

// The l2norm chain of a row's gradient (gdn-math §7.6), the row held as 4-element slices by LANES adjacent lanes:
// g = dx^ in, dx = rho (dx^ - (dx^ . x^) x^) out, x^ = rho x, rho = (|x|^2 + 1e-6)^-1/2; x the raw row (fp32).
template <int LANES>
__device__ __forceinline__ void l2norm_backward4(float (&g)[4], const float (&x)[4]) {
  float n = 0.f, d = 0.f;
#pragma unroll
  for (int e = 0; e < 4; ++e) n = fmaf(x[e], x[e], n), d = fmaf(g[e], x[e], d);
  n = lane_sum<1, LANES>(n), d = lane_sum<1, LANES>(d);
  const float r = rsqrtf(n + 1e-6f);
#pragma unroll
  for (int e = 0; e < 4; ++e) g[e] = r * (g[e] - d * r * r * x[e]);
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

// ---- the WY kernels' chunk solve (gdn-math §5.7) ---------------------------------------------------------
// Column m of T = (I + A)^{-1} for a strictly lower triangular C x C chunk matrix A, given transposed (at[s][t] =
// A[t][s]), by forward substitution in the column order: x_t starts at [t = m], and once T[s][m] = x_s is final every
// x_t, t > s, takes -A[t][s] x_s, so each T[s][m] is one FFMA behind the one before (the row order puts row t's t
// dependent products behind row t - 1's); each x_t takes its products in the order s = 0, 1, .. as the row order does
// (the same bits). A's columns (rows of at, broadcast 16-byte loads) do not depend on x: all issued ahead.
template <int C>
__device__ __forceinline__ void chunk_inverse_column(const float (&at)[C][C], int m, float (&x)[C]) {
  static_assert(C % 4 == 0, "A^T rows as 16-byte vectors");
#pragma unroll
  for (int t = 0; t < C; ++t) x[t] = t == m ? 1.f : 0.f;
#pragma unroll
  for (int sx = 0; sx < C - 1; ++sx) {
    float ac[C];  // column sx of A, rows 4 ((sx + 1) / 4) .. C - 1
#pragma unroll
    for (int x4 = (sx + 1) / 4; x4 < C / 4; ++x4) {
      const float4 v4 = *reinterpret_cast<const float4*>(&at[sx][4 * x4]);
      ac[4 * x4] = v4.x, ac[4 * x4 + 1] = v4.y, ac[4 * x4 + 2] = v4.z, ac[4 * x4 + 3] = v4.w;
    }
#pragma unroll
    for (int t = sx + 1; t < C; ++t) x[t] = fmaf(-ac[t], x[sx], x[t]);  // x_t -= A[t][s] T[s][m]
  }
}

}  // namespace flashgdn::cuda
