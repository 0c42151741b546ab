#!/usr/bin/env bash
# Bitwise A/B of the direct_pipe kernel in the host emulation (../emu.hpp, TMA and mbarriers from ../emu_sm90.hpp):
# the working tree's direct_pipe_kernel.cuh (B) against the one of a git ref (A, default main), o and the pool
# compared bit for bit on bf16 / f16 pools, K = 64 / 128, contiguous rows (one bulk copy a warp) and V = 256 (per-row
# copies), raw gates, fp32 activations, invalid slots, several tiles per CTA. No GPU and no oracle needed: the two
# kernels must agree exactly (same arithmetic in the same order).
# Usage: bash tools/emulate_chunk_bwd/pipe_ab/run.sh [--tsan] [ref] (needs a CPU build-cpu/libflashgdn_static.a)
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
here="$root/tools/emulate_chunk_bwd/pipe_ab"
flags=(-O1)
if [[ "${1:-}" == --tsan ]]; then flags=(-O1 -g -fsanitize=thread); shift; fi
ref="${1:-main}"
out="$(mktemp -d)"
python3 "$root/tools/emulate_chunk_bwd/gen.py" "$root" "$out"
git -C "$root" show "$ref:src/cuda/recurrent/direct_pipe_kernel.cuh" > "$out/ref_kernel.cuh"
python3 "$here/xform.py" "$root/src/cuda/recurrent/direct_kernel.cuh" "$out/direct_kernel.cuh" x
python3 "$here/xform.py" "$out/ref_kernel.cuh" "$out/pipe_old.cuh" oldk
python3 "$here/xform.py" "$root/src/cuda/recurrent/direct_pipe_kernel.cuh" "$out/pipe_new.cuh" newk
g++ -std=c++20 "${flags[@]}" -Wno-psabi -w -DFLASHGDN_WITH_CUDA=1 -I"$out" -I"${CUDA_HOME:-/usr/local/cuda}/include" \
  -I"$root/include" -I"$root/src" -I"$root/tests/common" -I"$root/tools/emulate_chunk_bwd" "$here/pab.cpp" \
  "$root/build-cpu/libflashgdn_static.a" -lpthread -o "$out/pab"
"$out/pab"
