#include "bench_report.hpp"

#include "flashgdn/flashgdn.hpp"

namespace flashgdn::cli {

nlohmann::json bench_report(const std::string& device, int sms, const Ceilings& ceil,
                            const std::vector<BenchResult>& results) {
  nlohmann::json cases = nlohmann::json::array();
  for (const BenchResult& r : results)
    cases.push_back({{"case", r.name},
                     {"what", r.what},
                     {"status", r.status},
                     {"ms", r.ms},
                     {"eager_ms", r.eager_ms},
                     {"bytes", r.bytes},
                     {"flops", r.flops},
                     {"workspace_bytes", r.ws_bytes}});
  return {{"device", device},
          {"sms", sms},
          {"flashgdn", version()},
          {"copy_tbps", ceil.copy_tbps},
          {"gemm_tflops", ceil.gemm_tflops},
          {"cases", std::move(cases)}};
}

}  // namespace flashgdn::cli
