// `flashgdn bench` results and their JSON report (nlohmann-json: strings escaped, NaN and infinities written
// as null, so the file is always valid JSON).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace flashgdn::cli {

struct BenchResult {
  std::string name;
  std::string what;
  double ms = 0;        // per call, graph replay
  double eager_ms = 0;  // per call, plain stream launches
  double bytes = 0;     // compulsory bytes moved
  double flops = 0;
  double ws_bytes = 0;  // workspace
  std::string status = "ok";
};

struct Ceilings {
  double copy_tbps = 0;    // device-to-device copy, read + write counted
  double gemm_tflops = 0;  // bf16 GEMM 8192^3 via cuBLAS
};

// {"device", "sms", "flashgdn", "copy_tbps", "gemm_tflops", "cases": [{"case", "what", "status", "ms",
//  "eager_ms", "bytes", "flops", "workspace_bytes"}, ...]}
nlohmann::json bench_report(const std::string& device, int sms, const Ceilings& ceil,
                            const std::vector<BenchResult>& results);

}  // namespace flashgdn::cli
