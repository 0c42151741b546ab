// The CLI's report pieces: bench --json is valid JSON whatever the numbers and strings; the progress line's
// percentage and estimate.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "bench_report.hpp"
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

}  // namespace
}  // namespace flashgdn::cli
