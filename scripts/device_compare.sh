#!/usr/bin/env bash
# Compare the kernel paths behind the environment switches on the GPU: correctness (the GPU test suites with the
# path selected) and speed (the CLI benchmark cases). Run after `scripts/device_run.sh build` (same BUILD_DIR).
#   FLASHGDN_CHUNK_IMPL = twopass (default) | mma | wide       (chunk_fwd kernels)
#   FLASHGDN_RECURRENT_DIRECT = 0 | 1                           (recurrent: persistent or direct kernel)
#   FLASHGDN_CHUNK_SEGMENTS = 0 (auto) | 1 (off) | P            (segment split of chunk_fwd)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/flashgdn-out}
B=${BUILD_DIR:-build-dev}
res=$OUT/compare.md
echo "# kernel path comparison ($(date -u +%FT%TZ), commit ${FLASHGDN_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)})" >"$res"
bench_rows() { sed -n '/^copy /p;/^| [a-z]/p' | grep -v "^| case" ; }

for impl in ${CHUNK_IMPLS-twopass mma wide}; do
  echo "== chunk_fwd impl=$impl"
  t=$(FLASHGDN_CHUNK_IMPL=$impl timeout 60 $B/flashgdn_gpu_tests --gtest_brief=1 --gtest_filter='CudaChunkFwd*' 2>&1)
  echo "### chunk_fwd $impl: tests: $(echo "$t" | grep -E '^\[  (PASSED|FAILED)' | tr '\n' ' ')" | tee -a "$res"
  echo "$t" | grep -E "Failure|rel err|error|Expected|Which is" | head -12 | tee -a "$res"
  FLASHGDN_CHUNK_IMPL=$impl timeout 60 $B/flashgdn bench --reps 12 prefill 2>&1 | bench_rows | tee -a "$res"
done
for seg in ${SEGMENTS-1 4 8 16 32}; do
  FLASHGDN_CHUNK_IMPL=${SEG_IMPL:-twopass} FLASHGDN_CHUNK_SEGMENTS=$seg timeout 60 $B/flashgdn bench --reps 8 \
    prefill_t32k_h16 prefill_t32k_h16_32 2>&1 | bench_rows | sed "s/^| prefill/| seg=$seg prefill/" | tee -a "$res"
done
# the two-pass prefill's parts timed alone (FLASHGDN_CHUNK_STAGES: 1 = intra-chunk pass, 2 = chain kernels)
for st in ${STAGES_LIST-1 2}; do
  FLASHGDN_CHUNK_STAGES=$st timeout 90 $B/flashgdn bench --reps 8 prefill 2>&1 | bench_rows |
    sed "s/^| prefill/| stages=$st prefill/" | tee -a "$res"
done
# per-kernel GPU time of one prefill call (Nsight Compute, a few launches after the warm-up)
if [ -n "${NCU_CASE-prefill_t32k_h16}" ] && command -v ncu >/dev/null; then
  echo "### kernel times, ${NCU_CASE-prefill_t32k_h16} (ncu gpu__time_duration)" | tee -a "$res"
  timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --launch-skip 30 --launch-count 10 $B/flashgdn bench --reps 3 \
    ${NCU_CASE-prefill_t32k_h16} >"$OUT/ncu.log" 2>&1
  grep -E "^  [a-zA-Z_].*\(|gpu__time_duration" "$OUT/ncu.log" | sed 's/^ *//' | cut -c1-110 | tee -a "$res"
fi
# stall reasons, occupancy and pipe use of the two-pass kernels (one launch each)
if [ -n "${NCU_DETAIL-}" ] && command -v ncu >/dev/null; then
  timeout 200 ncu --clock-control none --section SpeedOfLight --section Occupancy \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed" \
    -k "regex:chunk_fwd_(intra|state)" --launch-skip 3 --launch-count 3 $B/flashgdn bench --reps 1 ${NCU_DETAIL} \
    >"$OUT/ncu_detail.log" 2>&1
  grep -E "chunk_fwd_|Duration|Throughput|Occupancy|Block Limit|stalled|hmma|mem_shared|Registers" "$OUT/ncu_detail.log" |
    awk '$NF+0 > 0.05 || /chunk_fwd_|Occupancy|Block Limit|Duration/' | cut -c1-120 | tee -a "$res"
fi
for direct in ${RECURRENT_DIRECTS-1}; do
  echo "== recurrent direct=$direct"
  t=$(FLASHGDN_RECURRENT_DIRECT=$direct timeout 60 $B/flashgdn_gpu_tests --gtest_brief=1 --gtest_filter='CudaRecurrent*:CudaDispatch*' 2>&1)
  echo "### recurrent direct=$direct: tests: $(echo "$t" | grep -E '^\[  (PASSED|FAILED)' | tr '\n' ' ')" | tee -a "$res"
  echo "$t" | grep -E "Failure|rel err|error|Expected|Which is" | head -12 | tee -a "$res"
  FLASHGDN_RECURRENT_DIRECT=$direct timeout 60 $B/flashgdn bench --reps 20 decode 2>&1 | bench_rows | tee -a "$res"
done
if [ -n "${RECURRENT_DIRECTS-1}" ]; then
  echo "== default recurrent"
  timeout 60 $B/flashgdn bench --reps 20 decode 2>&1 | bench_rows | tee -a "$res"
fi
