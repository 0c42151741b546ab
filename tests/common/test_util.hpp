// Shared test helpers: an owning host tensor, seeded random inputs, the GDN case generator and the error
// metric of gdn-math §10.3. Used by the CPU, API and GPU suites and by the CLI demo.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/dtype.hpp"
#include "flashgdn/flashgdn.hpp"

namespace flashgdn::test {

// An owning, compact row-major host tensor.
struct HostTensor {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  HostTensor() = default;
  HostTensor(DType dt, std::vector<int64_t> shp) : dtype(dt), shape(std::move(shp)) {
    bytes.assign(size_t(numel() * dtype_size(dt)), 0);
  }
  bool empty_shape() const { return shape.empty(); }
  int64_t numel() const {
    int64_t n = 1;
    for (auto s : shape) n *= s;
    return n;
  }
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }
  // Element i of the flat tensor; an index outside it throws (a test that sets a row the case does not have fails
  // cleanly instead of corrupting the heap).
  double get(int64_t i) const { return detail::load_as_double(bytes.data(), dtype, in_range(i)); }
  void set(int64_t i, double x) { detail::store_from_double(bytes.data(), dtype, in_range(i), x); }
  int64_t in_range(int64_t i) const {
    if (i < 0 || i >= numel())
      throw std::out_of_range("HostTensor index " + std::to_string(i) + " outside [0, " + std::to_string(numel()) +
                              ")");
    return i;
  }
  std::vector<double> to_double() const {
    std::vector<double> out(static_cast<size_t>(numel()));
    for (int64_t i = 0; i < numel(); ++i) out[size_t(i)] = get(i);
    return out;
  }
  HostTensor cast(DType dt) const {
    HostTensor t(dt, shape);
    for (int64_t i = 0; i < numel(); ++i) t.set(i, get(i));
    return t;
  }
  void fill(double x) {
    if (bytes.empty()) return;  // absent (no shape): nothing to fill
    for (int64_t i = 0; i < numel(); ++i) set(i, x);
  }
  void fill_nan() { fill(std::numeric_limits<double>::quiet_NaN()); }
  // View for the API: a compact CPU view, or absent when this tensor has no shape.
  TensorView view() const {
    TensorView v;
    if (shape.empty()) return v;
    v.data = const_cast<uint8_t*>(bytes.data());
    v.dtype = dtype;
    v.device = DeviceType::cpu;
    v.ndim = int32_t(shape.size());
    int64_t st = 1;
    for (int i = v.ndim - 1; i >= 0; --i) {
      v.shape[i] = shape[size_t(i)];
      v.strides[i] = st;
      st *= shape[size_t(i)];
    }
    return v;
  }
  bool bit_equal(const HostTensor& o) const { return shape == o.shape && dtype == o.dtype && bytes == o.bytes; }
};

struct Rng {
  std::mt19937_64 gen;
  explicit Rng(uint64_t seed) : gen(seed) {}
  double normal() { return std::normal_distribution<double>(0.0, 1.0)(gen); }
  double uniform(double a = 0.0, double b = 1.0) { return std::uniform_real_distribution<double>(a, b)(gen); }
  int64_t integer(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen); }
};

// Fills t with scale * x, x of mean 0 and variance 1: the Irwin-Hall sum of four 16-bit uniforms (|x| <= 2 sqrt 3)
// from a counter hash seeded by one draw of rng. For the large state pools of the GPU suites, where a
// std::normal_distribution draw per element took seconds per case (1.5e8 elements for 300 rows of Qwen3-Next).
inline void fill_pool_values(HostTensor& t, Rng& rng, double scale) {
  const uint64_t seed = rng.gen();
  const double f = scale * std::sqrt(3.0) / 65536.0;  // (sum of four (u + 1/2) - 2^17) * sqrt(3) / 2^16
  for (int64_t i = 0; i < t.numel(); ++i) {
    uint64_t z = seed + uint64_t(i + 1) * 0x9E3779B97F4A7C15ull;  // splitmix64
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const double u = double(z & 0xFFFF) + double((z >> 16) & 0xFFFF) + double((z >> 32) & 0xFFFF) + double(z >> 48);
    t.set(i, f * (u + 2.0 - 131072.0));
  }
}

// Repetitions of a determinism loop: n, or FLASHGDN_TEST_REPEATS when set (scripts/device_run.sh sets it under
// compute-sanitizer, where one launch takes seconds and a repeat checks no code a first launch did not).
inline int test_repeats(int n) {
  const char* s = std::getenv("FLASHGDN_TEST_REPEATS");
  const int r = s ? std::atoi(s) : 0;
  return r > 0 && r < n ? r : n;
}

inline bool any_nonfinite(const HostTensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(t.get(i))) return true;
  return false;
}

// Relative Frobenius error ||x - ref|| / ||ref|| (gdn-math §10.3); NaN in x gives +inf.
inline double rel_err(const HostTensor& x, const HostTensor& ref) {
  if (x.numel() != ref.numel()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    double a = x.get(i), b = ref.get(i);
    if (!std::isfinite(a)) return std::numeric_limits<double>::infinity();
    num += (a - b) * (a - b);
    den += b * b;
  }
  if (den == 0) return std::sqrt(num);
  return std::sqrt(num / den);
}

// Per-head relative error (gdn-math §10.3): element i belongs to head head_of(i); returns the worst head's
// relative Frobenius error, so one broken head cannot hide in the aggregate.
template <class HeadOf>
double max_head_err(const HostTensor& x, const HostTensor& ref, int64_t num_heads, HeadOf head_of) {
  std::vector<double> num(size_t(num_heads), 0.0), den(size_t(num_heads), 0.0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    double a = x.get(i), b = ref.get(i);
    if (!std::isfinite(a)) return std::numeric_limits<double>::infinity();
    int64_t h = head_of(i);
    num[size_t(h)] += (a - b) * (a - b);
    den[size_t(h)] += b * b;
  }
  double worst = 0;
  for (int64_t h = 0; h < num_heads; ++h) {
    double e = den[size_t(h)] > 0 ? std::sqrt(num[size_t(h)] / den[size_t(h)]) : std::sqrt(num[size_t(h)]);
    worst = std::max(worst, e);
  }
  return worst;
}

// ---- the case generator -------------------------------------------------------------------------------
struct GdnCase {
  std::string name;
  int64_t B = 1, T = 16, Hqk = 2, Hv = 4, K = 64, V = 64;
  std::vector<int64_t> seqlens;  // non-empty: varlen (B = 1, T = sum)
  bool has_h0 = true;
  double g_scale = 1.0;  // g = -g_scale * U(0, 1)
  bool l2norm = true;    // inputs are raw; the op normalizes q, k
  DType dtype = DType::f32;
  StateLayout layout = StateLayout::k_major;
  uint64_t seed = 1;
  int64_t N() const { return seqlens.empty() ? B : int64_t(seqlens.size()); }
  int64_t total_T() const {
    if (seqlens.empty()) return T;
    int64_t s = 0;
    for (auto l : seqlens) s += l;
    return s;
  }
};

struct GdnInputs {
  HostTensor q, k, v, g, beta, h0, cu;  // h0 / cu absent (empty shape) when not used
};

// Fresh random inputs for a case. Without l2norm the keys are normalized here (unit norm) so the
// recurrence stays contractive (gdn-math §1.3); q is Gaussian either way.
inline GdnInputs make_inputs(const GdnCase& c) {
  Rng rng(c.seed);
  const int64_t B = c.seqlens.empty() ? c.B : 1, T = c.total_T(), N = c.N();
  GdnInputs in;
  in.q = HostTensor(c.dtype, {B, T, c.Hqk, c.K});
  in.k = HostTensor(c.dtype, {B, T, c.Hqk, c.K});
  in.v = HostTensor(c.dtype, {B, T, c.Hv, c.V});
  DType fdt = c.dtype == DType::f64 ? DType::f64 : DType::f32;
  in.g = HostTensor(fdt, {B, T, c.Hv});
  in.beta = HostTensor(fdt, {B, T, c.Hv});
  for (int64_t i = 0; i < in.q.numel(); ++i) in.q.set(i, rng.normal());
  for (int64_t row = 0; row < B * T * c.Hqk; ++row) {
    std::vector<double> kv(size_t(c.K));
    double nrm = 0;
    for (auto& x : kv) {
      x = rng.normal();
      nrm += x * x;
    }
    nrm = c.l2norm ? 1.0 : std::sqrt(nrm);
    for (int64_t i = 0; i < c.K; ++i) in.k.set(row * c.K + i, kv[size_t(i)] / nrm);
  }
  for (int64_t i = 0; i < in.v.numel(); ++i) in.v.set(i, rng.normal());
  for (int64_t i = 0; i < in.g.numel(); ++i) in.g.set(i, -c.g_scale * rng.uniform());
  for (int64_t i = 0; i < in.beta.numel(); ++i) in.beta.set(i, 1.0 / (1.0 + std::exp(-rng.normal())));
  if (c.has_h0) {
    in.h0 =
        c.layout == StateLayout::k_major ? HostTensor(fdt, {N, c.Hv, c.K, c.V}) : HostTensor(fdt, {N, c.Hv, c.V, c.K});
    for (int64_t i = 0; i < in.h0.numel(); ++i) in.h0.set(i, 0.1 * rng.normal());  // non-symmetric
  }
  if (!c.seqlens.empty()) {
    in.cu = HostTensor(DType::i32, {N + 1});
    int64_t acc = 0;
    in.cu.set(0, 0);
    for (int64_t n = 0; n < N; ++n) {
      acc += c.seqlens[size_t(n)];
      in.cu.set(n + 1, double(acc));
    }
  }
  return in;
}

// The sweep of gdn-math §10.4 (shapes for CI): T not a multiple of the chunk, length-0 segments, GQA
// ratios 1/2/4, K != V, K, V in {64, 128}, both state layouts. Kept small enough for the fp64 oracle on
// two cores.
inline std::vector<GdnCase> standard_cases() {
  std::vector<GdnCase> cs;
  auto add = [&](GdnCase c) {
    c.seed = 1000 + cs.size();
    cs.push_back(c);
  };
  GdnCase c;
  c.name = "fixed_gqa2_k64v64";
  c.B = 2;
  c.T = 70;
  c.Hqk = 2;
  c.Hv = 4;
  c.K = 64;
  c.V = 64;
  add(c);
  c.name = "fixed_mha_k128v64";
  c.B = 1;
  c.T = 65;
  c.Hqk = 2;
  c.Hv = 2;
  c.K = 128;
  c.V = 64;
  add(c);
  c.name = "fixed_gqa4_k64v128_vmajor";
  c.B = 1;
  c.T = 63;
  c.Hqk = 1;
  c.Hv = 4;
  c.K = 64;
  c.V = 128;
  c.layout = StateLayout::v_major;
  add(c);
  c.layout = StateLayout::k_major;
  c.name = "varlen_gqa2_k128v128";
  c.B = 1;
  c.seqlens = {1, 63, 0, 64, 65};
  c.Hqk = 2;
  c.Hv = 4;
  c.K = 128;
  c.V = 128;
  add(c);
  c.name = "varlen_empty_ends_nol2";
  c.seqlens = {0, 11, 0, 6, 13, 0};
  c.Hqk = 2;
  c.Hv = 4;
  c.K = 64;
  c.V = 64;
  c.l2norm = false;
  add(c);
  c.seqlens.clear();
  c.l2norm = true;
  c.name = "fixed_no_h0_strong_gate";
  c.B = 2;
  c.T = 33;
  c.Hqk = 2;
  c.Hv = 2;
  c.K = 64;
  c.V = 64;
  c.has_h0 = false;
  c.g_scale = 10;
  add(c);
  return cs;
}

}  // namespace flashgdn::test
