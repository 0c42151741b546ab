#!/bin/bash
# Device run: build the harness with nvcc (only this op's files), then check + time, and a profiling build
# that prints cycles per chunk per phase. Usage (repo root): bash tests/cuda/standalone_chunk/run.sh
set -o pipefail
OUT=${OUT:-/tmp}
F="-O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr"
F="$F -DFLASHGDN_WITH_CUDA=1 -Iinclude -Isrc"
S="$(ls src/cuda/chunk_fwd/*.cu | tr '\n' ' ')"
S="$S src/cuda/common/device.cu tests/cuda/standalone_chunk/harness.cu src/api/tensor.cpp"
mkdir -p /tmp/chb/n /tmp/chb/p
for f in $S; do b=$(basename $f); nvcc $F -Xptxas=-v -c $f -o /tmp/chb/n/$b.o > /tmp/chb/n/$b.log 2>&1 & done
for f in $S; do b=$(basename $f); nvcc $F -DFGDN_CHUNK_PROFILE -c $f -o /tmp/chb/p/$b.o > /tmp/chb/p/$b.log 2>&1 & done
wait
cat /tmp/chb/n/*.log > $OUT/build.log
nvcc -gencode=arch=compute_90a,code=sm_90a /tmp/chb/n/*.o -o /tmp/chb/chunk_h || { tail -30 $OUT/build.log; exit 1; }
nvcc -gencode=arch=compute_90a,code=sm_90a /tmp/chb/p/*.o -o /tmp/chb/chunk_p ||
  { cat /tmp/chb/p/*.log | tail -30; exit 1; }
grep -E "registers|spill" $OUT/build.log | sort | uniq -c
/tmp/chb/chunk_h "$@" 2>&1 | tee $OUT/harness.log
[ "$1" != check ] && /tmp/chb/chunk_p time 2>&1 | grep PROF | tee $OUT/profile.log
