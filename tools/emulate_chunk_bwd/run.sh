#!/usr/bin/env bash
# Host emulation of the CUDA chunk_bwd kernels against the CPU oracle (no GPU needed; nvcc's headers are), and of the
# prefill's intra-chunk kernel against fp64 (intra_harness.cpp).
# Usage: bash tools/emulate_chunk_bwd/run.sh [--tsan] [build dir with a CPU libflashgdn_static.a, default build-cpu]
#   [cases]
# (cases: numbers 0-10 for chunk_bwd, i0-i2 for the intra-chunk kernel, default all; 7-9 force the chains' segment
# split, 10 nearly parallel keys). --tsan builds with ThreadSanitizer: it reports every pair of shared-memory accesses
# of two emulated threads that no barrier orders (and fails the case).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
flags=(-O1)
if [[ "${1:-}" == --tsan ]]; then
  flags=(-O1 -g -fsanitize=thread)
  shift
fi
lib="${1:-$root/build-cpu}/libflashgdn_static.a"
shift || true
cases="${*:-0 1 2 3 4 5 6 7 8 9 10 i0 i1 i2}"
cuda="${CUDA_HOME:-/usr/local/cuda}"
out="$(mktemp -d)"
python3 "$root/tools/emulate_chunk_bwd/gen.py" "$root" "$out"
for h in harness intra_harness; do
  g++ -std=c++20 "${flags[@]}" -w -DFLASHGDN_WITH_CUDA=1 -I"$cuda/include" -I"$root/include" -I"$root/src" \
    -I"$root/tests/common" -I"$out" -I"$root/tools/emulate_chunk_bwd" "$root/tools/emulate_chunk_bwd/$h.cpp" \
    "$lib" -lpthread -o "$out/$h"
done
status=0
for c in $cases; do
  if [[ "$c" == i* ]]; then
    "$out/intra_harness" "${c#i}" || status=1
  else
    "$out/harness" "$c" || status=1
  fi
done
rm -rf "$out"
exit $status
