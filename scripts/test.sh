#!/usr/bin/env bash
# One command on a fresh machine: set up, build everything (CUDA kernels included when nvcc is present), run
# every C++ test (CTest: CPU suites; GPU suites skip visibly without a GPU), the sanitizer and fuzzer stage
# (scripts/sanitize.sh) and the Python tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
# The CPU and API suites again under ASan + UBSan, and the C ABI fuzzer for a bounded time (CPU-only clang build).
bash scripts/sanitize.sh
if [ -f scripts/python_tests.sh ]; then
  bash scripts/python_tests.sh
fi
