#!/usr/bin/env bash
# One device call (repository root): build the wgmma probe and the state-pass prototype in parallel, run both.
# Logs in $OUT (build.log with ptxas registers/spills, probe.log, state_wg.log).
set -o pipefail
OUT=${OUT:-/tmp}
F="-O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Iinclude -Isrc -DFLASHGDN_WITH_CUDA=1"
D=tests/cuda/standalone_wgmma
nvcc $F -Xptxas=-v $D/wgmma_probe.cu -o /tmp/wgmma_probe >"$OUT/build_probe.log" 2>&1 &
nvcc $F -Xptxas=-v $D/state_wg.cu src/cuda/chunk_fwd/chunk_fwd_intra_bf16.cu src/cuda/chunk_fwd/chunk_fwd_state_bf16.cu \
  -o /tmp/state_wg >"$OUT/build_state_wg.log" 2>&1 &
wait
cat "$OUT"/build_*.log >"$OUT/build.log"
grep -E "error" "$OUT/build.log" | head -10
echo "== probe"
timeout 60 /tmp/wgmma_probe 2>&1 | tee "$OUT/probe.log"
echo "== state_wg"
timeout 60 /tmp/state_wg 2>&1 | tee "$OUT/state_wg.log"
