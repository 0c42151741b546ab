#!/bin/bash
# One device call (see README.md), about 3-4 minutes: builds the harness (normal + phase-profile builds) and the
# GPU gtest in parallel, then for every kernel selectable by FLASHGDN_CHUNK_IMPL (twopass, wide;
# override with IMPLS="...") the harness checks and the timing table (T=32768 H=16 also sweeps the segment count:
# nosplit, auto, P=4, 8, 16), the phase profile of the first shape, and the gtest (CudaChunkFwd*) with each
# kernel. Logs in $OUT: build.log (ptxas registers/spills), harness_<impl>.log, profile.log, gtest_<impl>.log.
set -o pipefail
OUT=${OUT:-/tmp}
IMPLS=${IMPLS:-"twopass mma wide"}
GTEST_IMPLS=${GTEST_IMPLS:-"twopass mma wide"}
F="-O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -DFLASHGDN_WITH_CUDA=1"
F="$F -Iinclude -Isrc"
D=src/cuda/chunk_fwd
S="$(ls $D/*.cu | tr '\n' ' ')"
S="$S src/cuda/common/device.cu tests/cuda/standalone_chunk/harness.cu src/api/tensor.cpp"
mkdir -p /tmp/ch/n /tmp/ch/p
T0=$(date +%s)
for f in $S; do b=$(basename $f)
  nvcc $F -Xptxas=-v -c $f -o /tmp/ch/n/$b.o > /tmp/ch/n/$b.log 2>&1 &
  nvcc $F -DFGDN_CHUNK_PROFILE -c $f -o /tmp/ch/p/$b.o > /tmp/ch/p/$b.log 2>&1 &
done
( timeout 200 bash tests/cuda/standalone_chunk/gtest.sh build-only > /tmp/ch/gtest_build.log 2>&1 ) &
wait
cat /tmp/ch/n/*.log > $OUT/build.log
echo "=== build $(($(date +%s) - T0)) s; ptxas (kernel: registers, spills)"
grep -E "Compiling entry|registers|spill" $OUT/build.log | grep -B2 "registers" | grep -v "^--" |
  sed -e 's/.*entry function .\(_Z[^ ]*\). .*/\1/' | paste - - - | grep -i chunk_fwd_kernel |
  sed -e 's/_ZN8flashgdn4cuda12chunk_detail[0-9]*//' -e 's/EvNS0_15ChunkKernelArgsE//' -e 's/ptxas info *: //g' |
  awk '{$1=$1};1' | sort | uniq
L="-gencode=arch=compute_90a,code=sm_90a"
nvcc $L /tmp/ch/n/*.o -o /tmp/ch/h_n || { grep -B2 -A5 error $OUT/build.log | head -40; exit 1; }
nvcc $L /tmp/ch/p/*.o -o /tmp/ch/h_p || { cat /tmp/ch/p/*.log | grep -A5 error | head -40; exit 1; }
for impl in $IMPLS; do
  echo "=== $impl: harness check + time ($(($(date +%s) - T0)) s)"
  FLASHGDN_CHUNK_IMPL=$impl timeout 70 /tmp/ch/h_n 2>&1 | tee $OUT/harness_$impl.log | grep -v "^ok "
  grep "^ok .*identical" $OUT/harness_$impl.log
  awk '/^ok / {n++; if ($5 + 0 > o) o = $5 + 0; if ($10 + 0 > t) t = $10 + 0} END {printf "ok cases %d: max o %.3g, max hT %.3g\n", n, o, t}' \
    $OUT/harness_$impl.log
done
echo "=== phase profile, T=32768 H=16 (cycles per chunk of CTA 0) ($(($(date +%s) - T0)) s)"
for impl in $IMPLS; do
  FLASHGDN_CHUNK_IMPL=$impl timeout 25 /tmp/ch/h_p time 1 2>&1 | grep PROF | sed "s/^PROF/PROF $impl/" |
    tee -a $OUT/profile.log
done
echo "=== gtest ($(($(date +%s) - T0)) s)"; tail -3 /tmp/ch/gtest_build.log
for impl in $GTEST_IMPLS; do
  echo "--- gtest FLASHGDN_CHUNK_IMPL=$impl"
  FLASHGDN_CHUNK_IMPL=$impl timeout 40 /tmp/cht/gpu_tests --gtest_filter='CudaChunkFwd*' 2>&1 |
    tee $OUT/gtest_$impl.log | grep -E "^\[  |FAIL|Failure|chunk_fwd cuda" | grep -v "^\[ RUN\|^\[       OK" | tail -25
done
echo "=== done ($(($(date +%s) - T0)) s)"
