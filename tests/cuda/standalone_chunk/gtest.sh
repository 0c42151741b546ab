#!/bin/bash
# Device run of the GPU gtest of chunk_fwd without the CMake build: compiles tests/cuda/test_chunk_fwd.cpp with
# src/api, src/cpu (the oracle), src/cuda/chunk_fwd and a stub for the other ops' CUDA entry points, links
# GoogleTest carried in build-chunk/carry/gtest (headers + static libs copied from this machine's libgtest-dev).
set -o pipefail
OUT=${OUT:-/tmp}
G=build-chunk/carry/gtest
F="-O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr"
F="$F -DFLASHGDN_WITH_CUDA=1 -Iinclude -Isrc -Itests/common -I$G"
mkdir -p /tmp/cht
S="tests/cuda/test_chunk_fwd.cpp tests/cuda/standalone_chunk/other_ops_stub.cpp"
S="$S $(ls src/api/*.cpp src/cpu/*.cpp src/cuda/chunk_fwd/*.cu src/cuda/common/device.cu)"
for f in $S; do
  o=/tmp/cht/$(echo $f | tr / _).o
  nvcc $F -c $f -o $o > $o.log 2>&1 || echo "COMPILE FAIL $f" &
done
wait
cat /tmp/cht/*.log | grep -E "error" | head -20
nvcc -gencode=arch=compute_90a,code=sm_90a /tmp/cht/*.o $G/lib/libgtest_main.a $G/lib/libgtest.a -lpthread \
  -o /tmp/cht/gpu_tests || exit 1
[ "$1" = build-only ] && exit 0
/tmp/cht/gpu_tests 2>&1 | tee $OUT/gtest.log | grep -E "^\[  |FAIL|chunk_fwd cuda|Failure|error" |
  head -80
