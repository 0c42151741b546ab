// cpu::gating (gdn-math §4, vLLM fused_gdn_gating): g = -exp(A_log) softplus_{beta,threshold}(a + dt_bias),
// beta = sigmoid(b) (x2 with allow_neg_eigval), on a [..., Hv] tensor with arbitrary leading dims.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cpu_test_helpers.hpp"

namespace flashgdn::test {
namespace {

struct GateRef {
  HostTensor g, beta;
};

// Independent fp64 reference with the select-based softplus.
GateRef reference(const HostTensor& a, const HostTensor& b, const HostTensor& A_log, const HostTensor& dtb,
                  double sp_beta, double thr, bool neg) {
  const int64_t Hv = A_log.numel();
  GateRef r{HostTensor(DType::f64, a.shape), HostTensor(DType::f64, a.shape)};
  for (int64_t i = 0; i < a.numel(); ++i) {
    const int64_t h = i % Hv;
    const double x = a.get(i) + (dtb.empty_shape() ? 0.0 : dtb.get(h));
    const double sp = sp_beta * x <= thr ? std::log1p(std::exp(sp_beta * x)) / sp_beta : x;
    r.g.set(i, -std::exp(A_log.get(h)) * sp);
    r.beta.set(i, (neg ? 2.0 : 1.0) / (1.0 + std::exp(-b.get(i))));
  }
  return r;
}

struct Inputs {
  HostTensor a, b, A_log, dtb;
};

Inputs make(uint64_t seed, std::vector<int64_t> shape) {
  Rng rng(seed);
  const int64_t Hv = shape.back();
  Inputs in{HostTensor(DType::f32, shape), HostTensor(DType::f32, shape), HostTensor(DType::f32, {Hv}),
            HostTensor(DType::f32, {Hv})};
  for (int64_t i = 0; i < in.a.numel(); ++i) {
    // Cover both softplus branches, the threshold itself and very negative inputs.
    const double u = rng.uniform();
    in.a.set(i, u < 0.2 ? 20.0 + 10 * rng.uniform() : u < 0.3 ? -30.0 * rng.uniform() : 3 * rng.normal());
    in.b.set(i, 3 * rng.normal());
  }
  for (int64_t h = 0; h < Hv; ++h) {
    in.A_log.set(h, std::log(rng.uniform(1, 16)));
    in.dtb.set(h, rng.normal() * 0.5 - 2.0);
  }
  return in;
}

GateRef run(const Inputs& in, bool fp64, bool neg, float sp_beta = 1.0f, float thr = 20.0f, bool with_dtb = true,
            bool with_beta = true) {
  const DType dt = fp64 ? DType::f64 : DType::f32;
  GateRef out{poisoned(dt, in.a.shape), poisoned(dt, in.a.shape)};
  GatingParams p;
  p.A_log = in.A_log.view();
  p.a = in.a.view();
  if (with_dtb) p.dt_bias = in.dtb.view();
  if (with_beta) {
    p.b = in.b.view();
    p.beta = out.beta.view();
  }
  p.g = out.g.view();
  p.gate.allow_neg_eigval = neg;
  p.gate.softplus_beta = sp_beta;
  p.gate.softplus_threshold = thr;
  p.exec.cpu_fp64 = fp64;
  GatingDims d;
  d.Hv = in.a.shape.back();
  d.rows = in.a.numel() / d.Hv;
  Status st = cpu::gating(p, d);
  EXPECT_TRUE(st.ok()) << st.message();
  return out;
}

TEST(Gating, MatchesReferenceBothPrecisions) {
  const Inputs in = make(3, {2, 5, 6});
  for (bool neg : {false, true}) {
    const GateRef ref = reference(in.a, in.b, in.A_log, in.dtb, 1.0, 20.0, neg);
    const GateRef f64 = run(in, true, neg), f32 = run(in, false, neg);
    EXPECT_LE(rel_err(f64.g, ref.g), 1e-15);
    EXPECT_LE(rel_err(f64.beta, ref.beta), 1e-15);
    EXPECT_LE(rel_err(f32.g, ref.g), 1e-6);
    EXPECT_LE(rel_err(f32.beta, ref.beta), 1e-6);
    EXPECT_LE(max_head_err(f32.g, ref.g, 6, [](int64_t i) { return i % 6; }), 1e-6);
    for (int64_t i = 0; i < ref.g.numel(); ++i) ASSERT_LT(f32.g.get(i), 0.0);  // g < 0 always
  }
}

// Non-default softplus beta / threshold, absent dt_bias and absent beta.
TEST(Gating, SoftplusParametersAndAbsentInputs) {
  Inputs in = make(4, {7, 3});
  in.a.set(0, 0.5);   // beta x == threshold: the log branch
  in.a.set(1, 0.6);   // just past the threshold: x
  in.a.set(2, 0.45);  // just below it
  HostTensor none;
  const GateRef ref = reference(in.a, in.b, in.A_log, none, 2.0, 1.0, false);
  const GateRef out = run(in, true, false, 2.0f, 1.0f, false, false);
  EXPECT_LE(rel_err(out.g, ref.g), 1e-15);
  for (int64_t i = 0; i < out.beta.numel(); ++i) ASSERT_TRUE(std::isnan(out.beta.get(i)));  // not written
  // The wrong threshold convention (beta x < threshold on the log branch vs x) is visible at these inputs.
  const GateRef wrong = reference(in.a, in.b, in.A_log, none, 2.0, 20.0, false);
  double worst = 0;
  for (int64_t i = 0; i < ref.g.numel(); ++i)
    worst = std::max(worst, std::fabs(wrong.g.get(i) - ref.g.get(i)) / std::fabs(ref.g.get(i)));
  EXPECT_GT(worst, 0.1);
}

// A strided (non-compact) a: every other element of a wider buffer.
TEST(Gating, StridedInput) {
  const Inputs in = make(5, {4, 8});
  HostTensor wide(DType::f32, {4, 16});
  wide.fill(1e6);
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t h = 0; h < 8; ++h) wide.set(r * 16 + 2 * h, in.a.get(r * 8 + h));
  GateRef out{poisoned(DType::f64, {4, 8}), poisoned(DType::f64, {4, 8})};
  GatingParams p;
  p.A_log = in.A_log.view();
  p.a = wide.view();
  p.a.shape[1] = 8;
  p.a.strides[1] = 2;
  p.dt_bias = in.dtb.view();
  p.b = in.b.view();
  p.beta = out.beta.view();
  p.g = out.g.view();
  p.exec.cpu_fp64 = true;
  GatingDims d;
  d.rows = 4;
  d.Hv = 8;
  ASSERT_TRUE(cpu::gating(p, d).ok());
  const GateRef ref = reference(in.a, in.b, in.A_log, in.dtb, 1.0, 20.0, false);
  EXPECT_LE(rel_err(out.g, ref.g), 1e-15);
  EXPECT_LE(rel_err(out.beta, ref.beta), 1e-15);
}

}  // namespace
}  // namespace flashgdn::test
