#!/usr/bin/env bash
# One device call (H200) for the single-token decode work: build the harness, check the direct kernel, the
# pipelined kernel and the direct kernel with PDL against the fp64 reference, then `pipesweep` (direct vs pipe at 2 /
# 3 stages x 128 / 256 threads on N = 32 / 128 / 256 fp32 and bf16 pools; N = 1 / 8 latency with and without PDL).
# Usage (repo root): OUT=/path tests/cuda/standalone/device_run_pipe.sh ["<check families>"] ["<bench args>"]
set -uo pipefail
fams=${1-"direct pipe"}
bargs=${2-"pipesweep"}
out=${OUT:-/tmp/out}
mkdir -p "$out"
t0=$(date +%s)
JOBS=16 tests/cuda/standalone/build.sh /tmp/rec > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
grep -E "[1-9][0-9]* bytes spill" "$out/build.log" | head -5
if [ -n "$fams" ]; then
  /tmp/rec/recurrent_bench check $fams > "$out/check.log" 2>&1
  echo "check rc=$? ($(( $(date +%s) - t0 )) s): $(grep '== correctness' "$out/check.log")"
  grep -E "FAIL|error" "$out/check.log" | head -20
fi
/tmp/rec/recurrent_bench $bargs > "$out/bench.log" 2>&1
echo "bench rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "^\| |copy|^==|error" "$out/bench.log"
