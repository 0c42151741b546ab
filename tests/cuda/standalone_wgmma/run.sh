#!/usr/bin/env bash
# One device call (repository root): build the wgmma probe and the state-pass comparison (plus a compute-only
# variant of the wgmma state pass, -DFGDN_WG_NOLOAD, for timing), run them, and profile one launch of each state
# kernel with Nsight Compute (stall reasons). Logs in $OUT.
set -o pipefail
OUT=${OUT:-/tmp}
F="-O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Iinclude -Isrc -DFLASHGDN_WITH_CUDA=1"
D=tests/cuda/standalone_wgmma
S="$D/state_wg.cu src/cuda/chunk_fwd/chunk_fwd_intra_bf16.cu src/cuda/chunk_fwd/chunk_fwd_state_bf16.cu src/cuda/chunk_fwd/chunk_fwd_state_wg_bf16.cu"
nvcc $F -Xptxas=-v $D/wgmma_probe.cu -o /tmp/wgmma_probe >"$OUT/build_probe.log" 2>&1 &
nvcc $F -Xptxas=-v $S -o /tmp/state_wg >"$OUT/build_state_wg.log" 2>&1 &
nvcc $F -DFGDN_WG_NOLOAD $S -o /tmp/state_wg_noload >"$OUT/build_noload.log" 2>&1 &
# WG_VARIANTS: extra builds of the comparison, one per set of -D flags (separated by ';'), e.g.
# WG_VARIANTS="-DFGDN_WG_REFILL_AT=0;-DFGDN_WG_REFILL_AT=3"
IFS=';' read -ra variants <<<"${WG_VARIANTS:-}"
for i in "${!variants[@]}"; do
  nvcc $F ${variants[$i]} $S -o /tmp/state_wg_v$i >"$OUT/build_v$i.log" 2>&1 &
done
wait
grep -E "error" "$OUT"/build_*.log | head -10
echo "== probe"
timeout 60 /tmp/wgmma_probe 2>&1 | tee "$OUT/probe.log" | tail -2
echo "== state_wg"
timeout 60 /tmp/state_wg 2>&1 | tee "$OUT/state_wg.log"
echo "== state_wg compute only (FGDN_WG_NOLOAD; results meaningless)"
timeout 60 /tmp/state_wg_noload 2>&1 | grep "wgmma state kernel"
for i in "${!variants[@]}"; do
  echo "== state_wg ${variants[$i]}"
  timeout 60 /tmp/state_wg_v$i 2>&1 | tee "$OUT/state_wg_v$i.log"
done
# RACECHECK=1: compute-sanitizer racecheck (hazard and analysis reports) of the comparison and of every variant on a
# small shape (B=1, T=1024, H=2: two CTAs of 16 chunks; racecheck follows the synchronization, not the timing)
if [ "${RACECHECK:-0}" = 1 ]; then
  for b in /tmp/state_wg $(for i in "${!variants[@]}"; do echo /tmp/state_wg_v$i; done); do
    echo "== racecheck $b"
    WG_B=1 WG_T=1024 WG_H=2 WG_NOTIME=1 timeout 240 compute-sanitizer --tool racecheck --racecheck-report all \
      --print-limit 40 "$b" >"$OUT/racecheck_$(basename "$b").log" 2>&1
    grep -E "RACECHECK SUMMARY|PASS|FAIL|hazard" "$OUT/racecheck_$(basename "$b").log" | sort | uniq -c | head -12
  done
fi
if [ "${NCU:-1}" = 1 ] && command -v ncu >/dev/null; then
  timeout 150 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" -k "regex:chunk_fwd_state" --launch-skip 0 --launch-count 2 /tmp/state_wg >"$OUT/ncu_state.log" 2>&1
  grep -E "chunk_fwd_state|Duration|Throughput|stalled|Warp Cycles|Bandwidth|Hit Rate" "$OUT/ncu_state.log" |
    awk '$NF+0 > 0.1 || /chunk_fwd_|Duration/' | sed 's/smsp__average_warps_issue_stalled_//' | cut -c1-100 | head -70
fi
