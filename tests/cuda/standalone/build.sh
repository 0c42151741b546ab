#!/usr/bin/env bash
# Build the standalone recurrent harness with a direct nvcc line per file (no CMake), JOBS files at a time.
# Usage (repo root): tests/cuda/standalone/build.sh OUTDIR [extra nvcc flags...]
set -euo pipefail
out=${1:-/tmp/rec}; shift || true
jobs=${JOBS:-2}
mkdir -p "$out"
flags="-O3 -std=c++20 -DFLASHGDN_WITH_CUDA=1 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Iinclude -Isrc -Xptxas=-v,-warn-spills,-warn-lmem-usage $*"
srcs=(tests/cuda/standalone/recurrent_bench.cu src/cuda/recurrent/*.cu src/cuda/gating/*.cu src/cuda/common/*.cu)
objs=()
for f in "${srcs[@]}"; do
  o="$out/$(echo "$f" | tr '/' '_').o"
  objs+=("$o")
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 0.2; done
  nvcc $flags -c "$f" -o "$o" > "$o.log" 2>&1 || { cat "$o.log"; exit 1; } &
done
wait
for f in "${srcs[@]}"; do cat "$out/$(echo "$f" | tr '/' '_').o.log"; done > "$out/ptxas.log"
g++ -O2 -std=c++20 -Iinclude -Isrc -c src/api/tensor.cpp -DFLASHGDN_WITH_CUDA=1 -o "$out/tensor.o"
nvcc -gencode=arch=compute_90a,code=sm_90a "${objs[@]}" "$out/tensor.o" -o "$out/recurrent_bench"
if grep -q "spill\|lmem" "$out/ptxas.log" && grep -E "[1-9][0-9]* bytes spill" "$out/ptxas.log"; then echo "WARNING: spills"; fi
echo "built $out/recurrent_bench"
