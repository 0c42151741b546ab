#!/bin/bash
# One device call (see README.md): harness (check, time, phase profile) for the kernel in src/ and, when
# tests/cuda/standalone_chunk/variant/ holds an alternative kernel header, for that too; then the gtest.
set -o pipefail
OUT=${OUT:-/tmp}
F="-O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -DFLASHGDN_WITH_CUDA=1"
F="$F -Iinclude"
KS="src/cuda/chunk_fwd/chunk_fwd_bf16.cu src/cuda/chunk_fwd/chunk_fwd_f16.cu"
CS="src/cuda/chunk_fwd/chunk_fwd.cu tests/cuda/standalone_chunk/harness.cu src/api/tensor.cpp"
V=tests/cuda/standalone_chunk/variant
for cfg in n p vn vp; do mkdir -p /tmp/ch/$cfg; done
for f in $KS $CS; do b=$(basename $f)
  nvcc $F -Isrc -Xptxas=-v -c $f -o /tmp/ch/n/$b.o > /tmp/ch/n/$b.log 2>&1 &
  nvcc $F -Isrc -DFGDN_CHUNK_PROFILE -c $f -o /tmp/ch/p/$b.o > /tmp/ch/p/$b.log 2>&1 &
done
if [ -d $V ]; then for f in $KS; do b=$(basename $f)
  nvcc $F -I$V -Isrc -Xptxas=-v -c $f -o /tmp/ch/vn/$b.o > /tmp/ch/vn/$b.log 2>&1 &
  nvcc $F -I$V -Isrc -DFGDN_CHUNK_PROFILE -c $f -o /tmp/ch/vp/$b.o > /tmp/ch/vp/$b.log 2>&1 &
done; fi
( timeout 200 bash tests/cuda/standalone_chunk/gtest.sh build-only > /tmp/ch/gtest_build.log 2>&1 ) &
wait
cat /tmp/ch/n/*.log > $OUT/build.log; cat /tmp/ch/vn/*.log > $OUT/build_variant.log 2>/dev/null
grep -E "registers|spill" $OUT/build.log | sort | uniq -c
L="-gencode=arch=compute_90a,code=sm_90a"
nvcc $L /tmp/ch/n/*.o -o /tmp/ch/h_n && nvcc $L /tmp/ch/p/*.o -o /tmp/ch/h_p || exit 1
echo "=== kernel in src"
timeout 60 /tmp/ch/h_n 2>&1 | tee $OUT/harness.log | grep -v "^ok "
timeout 40 /tmp/ch/h_p time 2>&1 | grep PROF | tee $OUT/profile.log
if [ -d $V ]; then
  cp /tmp/ch/n/chunk_fwd.cu.o /tmp/ch/n/harness.cu.o /tmp/ch/n/tensor.cpp.o /tmp/ch/vn/
  cp /tmp/ch/p/chunk_fwd.cu.o /tmp/ch/p/harness.cu.o /tmp/ch/p/tensor.cpp.o /tmp/ch/vp/
  nvcc $L /tmp/ch/vn/*.o -o /tmp/ch/h_vn && nvcc $L /tmp/ch/vp/*.o -o /tmp/ch/h_vp
  echo "=== variant"; grep -E "registers|spill" $OUT/build_variant.log | sort | uniq -c
  timeout 60 /tmp/ch/h_vn 2>&1 | tee $OUT/harness_variant.log | grep -v "^ok "
  timeout 40 /tmp/ch/h_vp time 2>&1 | grep PROF | tee $OUT/profile_variant.log
fi
echo "=== gtest"; tail -3 /tmp/ch/gtest_build.log
timeout 100 /tmp/cht/gpu_tests 2>&1 | tee $OUT/gtest.log | grep -E "^\[  |FAIL|Failure|chunk_fwd cuda" |
  grep -v "^\[ RUN\|^\[       OK" | tail -40
