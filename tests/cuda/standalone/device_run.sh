#!/usr/bin/env bash
# One device call (H200): build the harness twice (default, and the comparison build with extra nvcc flags that
# re-compiles only the files named in VARIANT_SRCS, default the direct kernel's), run check + bench + wysweep,
# print a compact table last.
# Usage (repo root): OUT=/path tests/cuda/standalone/device_run.sh "<variant flags>" "<variant bench args>" \
#   "<families>" (default: the three families the dispatch runs: direct wy wy-mma; "" = all four)
set -uo pipefail
vflags=${1:-"-DFGDN_REC_DIRECT_PACK=0"}
vargs=${2:-"direct wysweep"}
fams=${3-"direct wy wy-mma"}
out=${OUT:-/tmp/out}
mkdir -p "$out"
t0=$(date +%s)
JOBS=16 tests/cuda/standalone/build.sh /tmp/rec > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
cp "$out/build.log" "$out/ptxas_default.log"
# comparison build: same objects, the direct files (and anything the flags touch) recompiled with vflags
rm -rf /tmp/rec0 && cp -r /tmp/rec /tmp/rec0
flags="-O3 -std=c++20 -DFLASHGDN_WITH_CUDA=1 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Iinclude -Isrc $vflags"
for f in ${VARIANT_SRCS:-src/cuda/recurrent/direct_*.cu}; do
  nvcc $flags -c "$f" -o "/tmp/rec0/$(echo "$f" | tr '/' '_').o" &
done
wait
nvcc -gencode=arch=compute_90a,code=sm_90a /tmp/rec0/*.cu.o /tmp/rec0/tensor.o -o /tmp/rec0/recurrent_bench
echo "build: $(( $(date +%s) - t0 )) s"
grep -E "spill|lmem" "$out/build.log" | grep -E "[1-9][0-9]* bytes spill" | head -5
/tmp/rec/recurrent_bench check $fams > "$out/check.log" 2>&1
echo "check rc=$? ($(( $(date +%s) - t0 )) s): $(grep '== correctness' "$out/check.log")"
grep FAIL "$out/check.log" | head -20
/tmp/rec/recurrent_bench bench wysweep $fams > "$out/bench.log" 2>&1
echo "bench ($(( $(date +%s) - t0 )) s)"
/tmp/rec0/recurrent_bench $vargs > "$out/bench_variant.log" 2>&1
echo "variant bench [$vflags] ($(( $(date +%s) - t0 )) s)"
echo "== default build: bench wysweep"
grep -E "^\| |copy" "$out/bench.log"
echo "== variant build [$vflags]: $vargs"
grep -E "^\| |copy" "$out/bench_variant.log"
