// Host-side scalar conversions for the storage dtypes (bf16, fp16) and strided element access.
// Used by the CPU backend, validation and tests; device code has its own (cuda_bf16.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "flashgdn/flashgdn.hpp"

namespace flashgdn::detail {

// The bits of a float and back (std::bit_cast is C++20).
inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16_to_float(uint16_t h) {
  return bits_float(uint32_t(h) << 16);
}

// Round to nearest even; NaN stays NaN.
inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

inline float f16_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: renormalize
      exp = 127 - 15 + 1;
      while ((man & 0x400u) == 0) {
        man <<= 1;
        --exp;
      }
      man &= 0x3ffu;
      u = sign | (exp << 23) | (man << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  return bits_float(u);
}

// Round to nearest even, with overflow to inf and gradual underflow.
inline uint16_t float_to_f16(float f) {
  const uint32_t u = float_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t au = u & 0x7fffffffu;
  if (au > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (au >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow (incl. inf) after rounding
  if (au < 0x38800000u) {                                  // subnormal or zero in f16
    if (au < 0x33000000u) return uint16_t(sign);           // rounds to 0
    uint32_t e = au >> 23;
    uint32_t m = (au & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // 14 - (e - 127) + 13 - 1 ... m >> (shift) gives the f16 mantissa
    uint32_t r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t r = au - 0x38000000u;  // rebias exponent 127 -> 15 (shifted by 13)
  uint32_t lsb = (r >> 13) & 1u;
  r += 0xfffu + lsb;
  return uint16_t(sign | (r >> 13));
}

// Read element `off` (in elements) of a tensor of dtype `dt` as double.
inline double load_as_double(const void* base, DType dt, int64_t off) {
  switch (dt) {
    case DType::f32:
      return static_cast<const float*>(base)[off];
    case DType::f64:
      return static_cast<const double*>(base)[off];
    case DType::bf16:
      return bf16_to_float(static_cast<const uint16_t*>(base)[off]);
    case DType::f16:
      return f16_to_float(static_cast<const uint16_t*>(base)[off]);
    case DType::i32:
      return static_cast<const int32_t*>(base)[off];
    case DType::i64:
      return double(static_cast<const int64_t*>(base)[off]);
  }
  return 0.0;
}

inline int64_t load_index(const void* base, DType dt, int64_t off) {
  return dt == DType::i64 ? static_cast<const int64_t*>(base)[off] : static_cast<const int32_t*>(base)[off];
}

// Write `x` (rounded to the storage dtype) to element `off`.
inline void store_from_double(void* base, DType dt, int64_t off, double x) {
  switch (dt) {
    case DType::f32:
      static_cast<float*>(base)[off] = float(x);
      break;
    case DType::f64:
      static_cast<double*>(base)[off] = x;
      break;
    case DType::bf16:
      static_cast<uint16_t*>(base)[off] = float_to_bf16(float(x));
      break;
    case DType::f16:
      static_cast<uint16_t*>(base)[off] = float_to_f16(float(x));
      break;
    case DType::i32:
      static_cast<int32_t*>(base)[off] = int32_t(x);
      break;
    case DType::i64:
      static_cast<int64_t*>(base)[off] = int64_t(x);
      break;
  }
}

}  // namespace flashgdn::detail
