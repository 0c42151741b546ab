// CUDA gating (g, beta from raw projections, gdn-math §4) through the public API against the CPU oracle
// (fp64 copies, exec.cpu_fp64): leading shapes [T, Hv] and [B, T, Hv], bf16 / f16 / f32 inputs, bf16 and
// f32 beta outputs, allow_neg_eigval, dt_bias and b absent, the linear branch of softplus (x > threshold)
// and a non-default softplus beta / threshold. Outputs are poisoned with NaN before the run.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "flashgdn/flashgdn.hpp"
#include "test_util.hpp"

#if FLASHGDN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace flashgdn::test {
namespace {

// A device copy of a host tensor (guarded so this file compiles without CUDA; the tests skip there).
struct DevCopy {
  HostTensor* h = nullptr;
  void* ptr = nullptr;
  explicit DevCopy(HostTensor* t) : h(t) {
#if FLASHGDN_WITH_CUDA
    EXPECT_EQ(cudaMalloc(&ptr, t->bytes.size() ? t->bytes.size() : 16), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, t->data(), t->bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
#endif
  }
  ~DevCopy() {
#if FLASHGDN_WITH_CUDA
    cudaFree(ptr);
#endif
  }
  DevCopy(const DevCopy&) = delete;
  DevCopy& operator=(const DevCopy&) = delete;
  TensorView view() const {
    TensorView v = h->view();
    v.data = ptr;
    v.device = DeviceType::cuda;
    return v;
  }
  void download() {
#if FLASHGDN_WITH_CUDA
    EXPECT_EQ(cudaMemcpy(h->data(), ptr, h->bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
#endif
  }
};

struct GateSpec {
  std::vector<int64_t> lead = {5};  // leading dims of [..., Hv]
  int64_t Hv = 6;
  DType in_dt = DType::f32;
  DType beta_dt = DType::f32;
  bool has_b = true, has_dt_bias = true, neg_eig = false;
  float sp_beta = 1.f, sp_threshold = 20.f;
  uint64_t seed = 3;
};

void check_gating(const GateSpec& s) {
  Rng rng(s.seed);
  std::vector<int64_t> shape = s.lead;
  shape.push_back(s.Hv);
  HostTensor A(s.in_dt, {s.Hv}), dtb(s.in_dt, {s.Hv}), a(s.in_dt, shape), b(s.in_dt, shape), g(DType::f32, shape),
      beta(s.beta_dt, shape);
  for (int64_t h = 0; h < s.Hv; ++h) A.set(h, rng.normal()), dtb.set(h, rng.normal());
  for (int64_t i = 0; i < a.numel(); ++i) a.set(i, 8 * rng.normal()), b.set(i, 3 * rng.normal());
  a.set(0, 40.0);  // x > threshold: the linear branch of softplus
  g.fill_nan(), beta.fill_nan();

  // Oracle on fp64 copies.
  HostTensor A64 = A.cast(DType::f64), dtb64 = dtb.cast(DType::f64), a64 = a.cast(DType::f64), b64 = b.cast(DType::f64),
             g64(DType::f64, shape), beta64(DType::f64, shape);
  GatingParams hp;
  hp.A_log = A64.view(), hp.a = a64.view(), hp.g = g64.view();
  if (s.has_dt_bias) hp.dt_bias = dtb64.view();
  if (s.has_b) hp.b = b64.view(), hp.beta = beta64.view();
  hp.gate.allow_neg_eigval = s.neg_eig, hp.gate.softplus_beta = s.sp_beta, hp.gate.softplus_threshold = s.sp_threshold;
  hp.exec.cpu_fp64 = true;
  Status st = gating(hp);
  ASSERT_TRUE(st.ok()) << "oracle: " << st.message();

  DevCopy dA(&A), ddtb(&dtb), da(&a), db(&b), dg(&g), dbeta(&beta);
  GatingParams p = hp;
  p.exec = ExecOptions{};
  p.A_log = dA.view(), p.a = da.view(), p.g = dg.view();
  p.dt_bias = s.has_dt_bias ? ddtb.view() : TensorView{};
  p.b = s.has_b ? db.view() : TensorView{};
  p.beta = s.has_b ? dbeta.view() : TensorView{};
  st = gating(p);
  ASSERT_TRUE(st.ok()) << "cuda: " << st.message();
  dg.download(), dbeta.download();
  EXPECT_LE(rel_err(g, g64), 1e-6);
  if (s.has_b) {
    EXPECT_LE(rel_err(beta, beta64), s.beta_dt == DType::f32 ? 1e-6 : 4e-3);
  } else {
    for (int64_t i = 0; i < beta.numel(); ++i) ASSERT_TRUE(std::isnan(beta.get(i))) << "beta written without b";
  }
}

TEST(CudaGating, MatchesOracle) {
  if (!flashgdn::cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (auto lead : {std::vector<int64_t>{5}, std::vector<int64_t>{2, 7}})
    for (DType in : {DType::f32, DType::bf16, DType::f16})
      for (bool neg : {false, true}) {
        GateSpec s;
        s.lead = lead, s.in_dt = in, s.neg_eig = neg;
        SCOPED_TRACE(std::string(dtype_name(in)) + " dims " + std::to_string(lead.size() + 1) +
                     (neg ? " allow_neg_eigval" : ""));
        check_gating(s);
      }
}

TEST(CudaGating, OptionalInputsAndSoftplusOptions) {
  if (!flashgdn::cuda_available()) GTEST_SKIP() << "no CUDA device";
  GateSpec s;
  s.has_dt_bias = false;
  check_gating(s);
  s = GateSpec{};
  s.has_b = false;
  check_gating(s);
  s = GateSpec{};
  s.sp_beta = 2.f, s.sp_threshold = 5.f, s.beta_dt = DType::bf16, s.Hv = 32, s.lead = {3, 4};
  check_gating(s);
}

}  // namespace
}  // namespace flashgdn::test
