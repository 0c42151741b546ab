#!/usr/bin/env bash
# Host emulation of the CUDA chunk_bwd kernels against the CPU oracle (no GPU needed; nvcc's headers are).
# Usage: bash tools/emulate_chunk_bwd/run.sh [build dir with a CPU libflashgdn_static.a, default build-cpu] [cases]
# (cases: numbers 0-10, default all; 7-9 force the chains' segment split, 10 nearly parallel keys)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
lib="${1:-$root/build-cpu}/libflashgdn_static.a"
shift || true
cases="${*:-0 1 2 3 4 5 6 7 8 9 10}"
cuda="${CUDA_HOME:-/usr/local/cuda}"
out="$(mktemp -d)"
python3 "$root/tools/emulate_chunk_bwd/gen.py" "$root" "$out"
g++ -std=c++20 -O1 -w -DFLASHGDN_WITH_CUDA=1 -I"$cuda/include" -I"$root/include" -I"$root/src" \
  -I"$root/tests/common" -I"$out" -I"$root/tools/emulate_chunk_bwd" "$root/tools/emulate_chunk_bwd/harness.cpp" \
  "$lib" -lpthread -o "$out/harness"
status=0
for c in $cases; do "$out/harness" "$c" || status=1; done
rm -rf "$out"
exit $status
