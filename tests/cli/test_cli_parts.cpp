// The CLI's pieces: bench --json is valid JSON whatever the numbers and strings; the progress line's percentage
// and estimate; the demo's CPU prefill in head groups equals one chunk_fwd call.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "bench_report.hpp"
#include "cli_util.hpp"
#include "progress.hpp"

namespace flashgdn::cli {
namespace {

TEST(BenchReport, NonFiniteNumbersBecomeNullAndStringsAreEscaped) {
  Ceilings ceil;
  ceil.copy_tbps = 4.2;
  ceil.gemm_tflops = std::numeric_limits<double>::quiet_NaN();
  BenchResult ok;
  ok.name = "decode_n1";
  ok.what = "decode \"T=1\"";
  ok.ms = 0.0058;
  ok.eager_ms = std::numeric_limits<double>::infinity();
  ok.bytes = 1e9;
  BenchResult failed;
  failed.name = "prefill_t32k_h16";
  failed.status = "chunk_fwd: v: expected 4 dims\nline two \\ tab\t";
  failed.ms = std::nan("");
  const std::string text = bench_report("NVIDIA H200 \"x\"", 132, ceil, {ok, failed}).dump(2);

  const nlohmann::json j = nlohmann::json::parse(text);  // throws on invalid JSON
  EXPECT_EQ(j["device"], "NVIDIA H200 \"x\"");
  EXPECT_EQ(j["sms"], 132);
  EXPECT_DOUBLE_EQ(j["copy_tbps"].get<double>(), 4.2);
  EXPECT_TRUE(j["gemm_tflops"].is_null()) << text;
  ASSERT_EQ(j["cases"].size(), 2u);
  EXPECT_EQ(j["cases"][0]["case"], "decode_n1");
  EXPECT_EQ(j["cases"][0]["what"], "decode \"T=1\"");
  EXPECT_DOUBLE_EQ(j["cases"][0]["ms"].get<double>(), 0.0058);
  EXPECT_TRUE(j["cases"][0]["eager_ms"].is_null()) << text;
  EXPECT_DOUBLE_EQ(j["cases"][0]["bytes"].get<double>(), 1e9);
  EXPECT_EQ(j["cases"][1]["status"], failed.status);
  EXPECT_TRUE(j["cases"][1]["ms"].is_null()) << text;
  EXPECT_EQ(text.find("nan"), std::string::npos) << text;
  EXPECT_EQ(text.find("inf"), std::string::npos) << text;
}

TEST(Progress, PercentageAndEstimate) {
  EXPECT_EQ(progress_line("oracle", 0, 8, 0.0), "oracle   0% (0 s)");
  EXPECT_EQ(progress_line("oracle", 2, 8, 10.0), "oracle  25% (10 s, ~30 s left)");
  EXPECT_EQ(progress_line("oracle", 6, 8, 30.0), "oracle  75% (30 s, ~10 s left)");
  EXPECT_EQ(progress_line("oracle", 8, 8, 40.0), "oracle 100% (40 s)");
}

// GQA (two value heads per q/k head), raw gates (A_log, dt_bias sliced on dim 0), varlen with an initial state:
// every head of o and of the final state must come from its own group, in fp64 and fp32.
TEST(HeadGroups, EqualsOneCall) {
  for (DType dt : {DType::f64, DType::f32}) {
    test::GdnCase c;
    c.Hqk = 4, c.Hv = 8, c.K = 16, c.V = 8;
    c.seqlens = {5, 0, 11};
    c.dtype = dt;
    c.seed = 3;
    test::GdnInputs in = test::make_inputs(c);
    const int64_t T = c.total_T(), N = c.N();
    const DType fdt = dt == DType::f64 ? DType::f64 : DType::f32;
    HostTensor A_log(fdt, {c.Hv}), dt_bias(fdt, {c.Hv});
    test::Rng rng(5);
    for (int64_t h = 0; h < c.Hv; ++h) A_log.set(h, 0.3 * rng.normal()), dt_bias.set(h, rng.normal());
    HostTensor o1(dt, {1, T, c.Hv, c.V}), o2(dt, {1, T, c.Hv, c.V});
    HostTensor h1(fdt, {N, c.Hv, c.K, c.V}), h2(fdt, {N, c.Hv, c.K, c.V});
    for (HostTensor* t : {&o1, &o2, &h1, &h2}) t->fill_nan();
    ChunkFwdParams p;
    p.q = in.q.view(), p.k = in.k.view(), p.v = in.v.view(), p.g = in.g.view(), p.beta = in.beta.view();
    p.A_log = A_log.view(), p.dt_bias = dt_bias.view();
    p.gate.use_gate_in_kernel = true;
    p.initial_state = in.h0.view(), p.cu_seqlens = in.cu.view();
    p.use_qk_l2norm_in_kernel = true;
    p.exec.cpu_fp64 = dt == DType::f64;
    p.o = o1.view(), p.final_state = h1.view();
    ASSERT_TRUE(chunk_fwd(p).ok());
    p.o = o2.view(), p.final_state = h2.view();
    chunk_fwd_by_heads(p, c.Hqk, c.Hv, "test", /*groups=*/4);
    EXPECT_LE(test::rel_err(o2, o1), 1e-12) << dtype_name(dt);
    EXPECT_LE(test::rel_err(h2, h1), 1e-12) << dtype_name(dt);
  }
}

}  // namespace
}  // namespace flashgdn::cli
