#!/usr/bin/env bash
# A/B of the kernel overrides on the GPU (ExecOptions::recurrent_kernel, ExecOptions::chunk_fwd_segments,
# ExecOptions::chunk_bwd_segments; the library reads no environment): correctness is the GPU suite, whose
# CudaRecurrent.EveryKernelForced, CudaChunkFwd.SegmentSplitOnAndOff and CudaChunkBwd.SegmentSplit* cases force every
# kernel and split; speed is the CLI benchmark with `--recurrent-kernel K` / `--chunk-segments P` /
# `--chunk-bwd-segments P`, plus per-kernel GPU times of one prefill call (Nsight Compute).
# Run after `scripts/device_run.sh build` (same BUILD_DIR).
#   RECURRENT_KERNELS = auto persistent direct direct_pipe wy wy_mma (decode cases; a kernel that cannot take a case
#                                                                 reports it unsupported)
#   SEGMENTS          = 0 (auto) 1 (off) P ...                   (prefill cases)
#   BWD_SEGMENTS      = 0 (auto) 1 (off) P ...                   (training backward cases)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/flashgdn-out}
B=${BUILD_DIR:-build-dev}
res=$OUT/compare.md
echo "# kernel override comparison ($(date -u +%FT%TZ), commit ${FLASHGDN_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)})" >"$res"
bench_rows() { sed -n '/^copy /p;/^| [a-z]/p' | grep -v "^| case"; }

t=$(timeout 300 $B/flashgdn_gpu_tests --gtest_brief=1 --gtest_filter='CudaRecurrent.EveryKernelForced:CudaChunkFwd.SegmentSplitOnAndOff:CudaChunkBwd.SegmentSplit*' 2>&1)
echo "### forced kernels and splits: $(echo "$t" | grep -E '^\[  (PASSED|FAILED)' | tr '\n' ' ')" | tee -a "$res"
echo "$t" | grep -E "Failure|rel err|error|Expected|Which is" | head -12 | tee -a "$res"

for seg in ${SEGMENTS-0 1 4 8 16 32}; do
  echo "### prefill, chunk_fwd_segments=$seg" | tee -a "$res"
  $B/flashgdn plan chunk_fwd T=32768 Hqk=16 segments=$seg | grep -E "split|state pass" | tee -a "$res"
  timeout 90 $B/flashgdn bench --reps 8 --chunk-segments $seg prefill_t32k_h16 prefill_t32k_h16_32 2>&1 | bench_rows |
    sed "s/^| prefill/| seg=$seg prefill/" | tee -a "$res"
done
for seg in ${BWD_SEGMENTS-0 1 4 8 16}; do
  echo "### training backward, chunk_bwd_segments=$seg" | tee -a "$res"
  $B/flashgdn plan chunk_bwd T=32768 Hqk=4 Hv=4 segments=$seg | grep -E "split" | tee -a "$res"
  timeout 120 $B/flashgdn bench --reps 8 --chunk-bwd-segments $seg train 2>&1 | bench_rows |
    sed "s/^| train/| seg=$seg train/" | tee -a "$res"
done
for k in ${RECURRENT_KERNELS-auto persistent direct direct_pipe wy wy_mma}; do
  echo "### decode, recurrent_kernel=$k" | tee -a "$res"
  timeout 90 $B/flashgdn bench --reps 20 --recurrent-kernel $k decode 2>&1 | bench_rows | sed "s/^| /| $k /" | tee -a "$res"
done
# per-kernel GPU time of one prefill call (Nsight Compute, a few launches after the warm-up): the intra-chunk pass,
# the index, summary, scan and forward kernels of the state pass
if [ -n "${NCU_CASE-prefill_t32k_h16}" ] && command -v ncu >/dev/null; then
  echo "### kernel times, ${NCU_CASE-prefill_t32k_h16} (ncu gpu__time_duration)" | tee -a "$res"
  timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --launch-skip 30 --launch-count 10 $B/flashgdn bench --reps 3 \
    ${NCU_CASE-prefill_t32k_h16} >"$OUT/ncu.log" 2>&1
  grep -E "^  [a-zA-Z_].*\(|gpu__time_duration" "$OUT/ncu.log" | sed 's/^ *//' | cut -c1-110 | tee -a "$res"
fi
