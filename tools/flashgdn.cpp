// The `flashgdn` command-line tool: `demo` and `bench`.
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "flashgdn/flashgdn.hpp"

namespace flashgdn::cli {
int run_demo(int argc, char** argv);
int run_bench(int argc, char** argv);
}  // namespace flashgdn::cli

static void usage() {
  std::printf(
      "flashgdn %s — Gated DeltaNet kernels\n"
      "usage: flashgdn <command> [options]\n"
      "  demo    run a Qwen3-Next-shaped prefill + decode, check it against the fp64 oracle, print times\n"
      "  bench   run named GPU benchmark cases (flashgdn bench --help)\n"
      "  version print the version and whether a CUDA device is usable\n"
      "`flashgdn <command> --help` explains each command.\n",
      flashgdn::version());
}

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  std::string cmd = argv[1];
  try {
    if (cmd == "demo") return flashgdn::cli::run_demo(argc - 2, argv + 2);
    if (cmd == "bench") return flashgdn::cli::run_bench(argc - 2, argv + 2);
    if (cmd == "version") {
      std::printf("flashgdn %s, CUDA device: %s\n", flashgdn::version(), flashgdn::cuda_available() ? "yes" : "no");
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashgdn %s: %s\n", cmd.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "flashgdn: unknown command '%s'\n", cmd.c_str());
  usage();
  return 2;
}
