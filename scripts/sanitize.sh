#!/usr/bin/env bash
# The sanitizer stage of scripts/test.sh: a CPU-only clang build with ASan + UBSan (-DFLASHGDN_SANITIZE) and the
# libFuzzer targets (-DFLASHGDN_BUILD_FUZZERS), into ./build-sanitize; then the CPU and API suites under the
# sanitizers and the C ABI fuzzer for a bounded time. Any sanitizer report, fuzzer finding or test failure fails.
#   FUZZ_SECONDS (default 120): how long the fuzzer runs.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${SANITIZE_BUILD_DIR:-build-sanitize}
FUZZ_SECONDS=${FUZZ_SECONDS:-120}

if ! command -v clang++ >/dev/null 2>&1; then
  echo "sanitize: installing clang (libFuzzer and the sanitizer runtimes come with it)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq clang >/dev/null
fi

t0=$(date +%s)
CC=clang CXX=clang++ cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLASHGDN_WITH_CUDA=OFF \
  -DFLASHGDN_SANITIZE=address,undefined -DFLASHGDN_BUILD_FUZZERS=ON -DFLASHGDN_BUILD_CLI=OFF \
  -DFLASHGDN_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$B" -j "$(nproc)" --target flashgdn_cpu_tests flashgdn_api_tests flashgdn_fuzz_capi
echo "sanitize: build $(( $(date +%s) - t0 )) s"

# halt_on_error: the first report fails the run; detect_leaks: a leak is a report too, where LeakSanitizer can
# run at all (it cannot under some ptrace-restricted containers: then leaks go unchecked, said so here).
leaks=1
if ! ASAN_OPTIONS=detect_leaks=1 "$B/flashgdn_api_tests" --gtest_filter=CApi.VersionAndCuda >/dev/null 2>&1; then
  echo "sanitize: LeakSanitizer does not run on this machine: leak checks off"
  leaks=0
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=$leaks:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
t0=$(date +%s)
"$B/flashgdn_cpu_tests" --gtest_brief=1
"$B/flashgdn_api_tests" --gtest_brief=1
echo "sanitize: CPU and API suites under ASan + UBSan $(( $(date +%s) - t0 )) s"

# The fuzzer grows a scratch copy of the seed corpus (the repository's stays as committed). -rss_limit_mb and
# -malloc_limit_mb turn an unbounded allocation into a finding; -timeout a call that does unbounded work.
t0=$(date +%s)
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
cp tests/fuzz/corpus/* "$corpus"/
rc=0
"$B/flashgdn_fuzz_capi" -max_total_time="$FUZZ_SECONDS" -timeout=20 -rss_limit_mb=2560 -malloc_limit_mb=1024 \
  -print_final_stats=1 -artifact_prefix="$B/fuzz-" "$corpus" >"$B/fuzz.log" 2>&1 || rc=$?
grep -vE '^#[0-9]+.*(NEW|REDUCE|pulse)' "$B/fuzz.log" | tail -40
if [ $rc -ne 0 ]; then
  echo "sanitize: the fuzzer found a failing input (rc $rc; saved as $B/fuzz-*; log $B/fuzz.log)"
  exit 1
fi
echo "sanitize: fuzzer $(( $(date +%s) - t0 )) s"
