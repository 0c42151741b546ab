// Overflow-checked integer arithmetic on sizes, for every product of caller-given dims (signed overflow is UB,
// so a product is formed only through these before the factors are known to be bounded).
#pragma once

#include <cstdint>
#include <initializer_list>

namespace flashgdn::detail {

// *out = a * b; false (and *out unspecified) when the product does not fit in int64.
inline bool checked_mul(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

// The product of non-negative factors, or -1 when it does not fit in int64. A zero factor gives 0 whatever the
// others are (an empty tensor of huge declared dims has no elements); a negative factor gives -1.
inline int64_t checked_product(const int64_t* f, int n) {
  for (int i = 0; i < n; ++i) {
    if (f[i] < 0) return -1;
    if (f[i] == 0) return 0;
  }
  int64_t p = 1;
  for (int i = 0; i < n; ++i)
    if (!checked_mul(p, f[i], &p)) return -1;
  return p;
}

inline int64_t checked_product(std::initializer_list<int64_t> f) {
  return checked_product(f.begin(), int(f.size()));
}

}  // namespace flashgdn::detail
