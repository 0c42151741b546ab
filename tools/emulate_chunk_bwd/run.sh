#!/usr/bin/env bash
# Host emulation of the CUDA chunk_bwd kernels against the CPU oracle (no GPU needed; nvcc's headers are), of the
# prefill's intra-chunk kernel against fp64 (intra_harness.cpp), of the whole prefill with its wgmma state pass
# (wgmma, TMA, mbarriers: emu_sm90.hpp) or its mma.sync one and the segment split against the CPU oracle
# (state_wg_harness.cpp), of the recurrent wy kernels on multi-token rows against the CPU oracle
# (recurrent_harness.cpp), and of mixer_decode's pipe kernel against the CPU op (mixer_harness.cpp).
# Usage: bash tools/emulate_chunk_bwd/run.sh [--tsan] [build dir with a CPU libflashgdn_static.a, default build-cpu]
#   [cases]
# (cases: numbers 0-29 for chunk_bwd, i0-i4 for the intra-chunk kernel, w0-w28 for the prefill, default all; 7-9 and
# 11 force the chains' segment split, 10 nearly parallel keys, 11-15 K = V = 128 bf16, 13-15 the GPU test's inputs:
# 13 identical keys with beta = 1, g = 0, 14 g = -30, 15 a T = 500 Hv = 8 gated walk; 16, 17 beta = 2 with nearly
# parallel / identical keys (K = V = 128 bf16, five chunks), 18, 19 the same with the chains' split forced,
# 20 keys and a query of norm ~1e-4 with scale 0.3, K = 128, V = 64, 21 16 at K = V = 64 with GQA 2, 22, 23 17 on one
# walk of 16 / 32 chunks (T = 1024 / 2048, no split; 23 not in the default list), 24 23 with beta = 1.999 (not in the
# default list), 25 K = V = 128 bf16 without GQA (varlen, an empty sequence, slack rows, the gate), 26 K = V = 128 bf16
# without GQA, 20 chunks unsplit, one head decaying by e^-32 a chunk and one slowly (the dstate chain's decay windows:
# 26f, ~2 min, not in the default list, also runs dO NaN in a skipped chunk), 27 26 with the chains' split forced
# (4 segments: the summaries' decay windows; 27f also runs v and dO NaN in chunks only the full summaries walk, not in
# the default list), 28 25 with GQA 4 (Hv = 8: the fused pass's per-value-head scratch and pass 5a), 29 13 with GQA 4
# (Hv = 4; not in the default list: the fused pass's worst head of dg at 2.3e-2 exceeds the harness's per-head bound
# of 2e-2, docs/chunk_bwd.md "Fused gradients pass"); a chunk_bwd case N runs the
# chains (at K = V = 128) on the plan's wgmma kernels (2 input stages), Ns1 on their one-stage forms one after the
# other, Nc both at once (exec.chunk_bwd_chains = 2: a CTA per chain), Np both at once in one CTA (3; Ns1, Nc and Np
# are compared bitwise with N), Nm pass 3 on the
# mma.sync kernel, Ng / Ngm / Nf pass 4 on wgmma / mma.sync / the fused pass (exec.chunk_bwd_grads 2 / 1 / 3; Nf also
# against Nfw, the same with exec.chunk_bwd_window = 1, within 1e-5), Ns the fused pass with the chunk start states
# from chunk_fwd's passes (exec.chunk_bwd_state = 2, fwd_passes.cpp; also against Nf within 1e-2); with
# GQA 2 the fused pass's pairs of value heads (rank 0 sums their dq, dk; the emulation runs the CTAs in ticket order);
# the plan takes the fused pass at K = V = 128 bf16, the wgmma pass 4 where a beta exceeds 1 or under allow_neg_eigval); w0 bf16 GQA 2 with a partial last chunk, w1 varlen with a length-0 sequence and slack rows, w2 / w3
# the split forced (decay windows / full summaries), w4 fp16 v-major with checkpoints, w5 the wgmma model alone
# against plain products, w6 nearly parallel keys, w7 identical keys with a full last chunk, w8 the same with the
# split forced, w9-w11 K = V = 64 on the mma.sync state pass (bf16 GQA 2, w6's and w7's inputs), w12, w13 beta near 2
# with w6's keys / beta = 2 with identical keys (five chunks), w14, w15 the same at K = V = 64 (mma.sync), w16, w17 w12, w13 with the split forced, w18 w13 in fp16,
# w19 w12 at K = 128, V = 64, w20, w21 w13 on one walk of 16 / 32 chunks (T = 1024 / 2048, Hv = 1), w22, w23 the same
# with the split forced, w24, w25 the same at K = V = 64 (mma.sync), w26-w28 w21, w23, w25 with beta = 1.999 (A
# diag(beta)'s third part: docs/chunk_fwd.md "Numerics"; w20-w28 not in the default list, ~10 s each); r0-r9 for the
# recurrent wy kernel on multi-token rows, K-major pool, 1-D slots, commit, GQA 2, K = V = 128: r0 bf16 T = 12 N = 3,
# r1 varlen {12, 0, 1, 17, 33} with an invalid slot and the fused gate, r2 a bf16 pool, r3 fp16 activations, r4 K =
# 64, r5 r1 on 16-column tiles, r6 one row of 160 tokens, r7 an f16 pool, r8 2-D slots with num_accepted_tokens and
# commit off, r9 no state_indices with null_slot_is_invalid, MHA, V = 64, no g and beta; r10-r15 verify (per-token
# states): r10 r1 with bf16 intermediate states, commit off, an invalid buffer, r11 fp32 intermediate states with the
# 1-D commit, r12 protocol A with bf16 intermediate states on a bf16 pool, an invalid count and slot, r13 protocol A
# alone (f16, K = 64, varlen), r14 2-D slots with commit off and f16 intermediate states, r15 protocol A on an fp32
# pool with fp32 intermediate states over 2 chunks; r16-r20 r10, r12, r1, r15, r14 on the wy kernel's 64-column
# tiles; r31-r33 r10, r12, r15 on its 16-column tiles (the verify N = 1 width); r34-r36 r6 (identical keys, nearly
# parallel keys) and r10 at beta = 2 (r34m, r35m: wy_mma's fp32 pool at 6e-5 / 1.1e-4 against the harness's 1e-5;
# gdn-math §10.3 allows 5e-3 with tensor-core operands); r37, r38 walks of 150 calls of T = 12 on one pool slot
# (identical keys, g = 0, beta = 2 / 1.999, Hv = 2, fp32 pool; the pool carried from call to call) against the oracle
# and the CPU backend in fp32 over the same calls, errors printed after calls 1, 2, 5, 10, 25, 50, ..., bound 5e-3 for
# o and the pool (r37m, r38m: wy_mma, T's third part, docs/recurrent.md "Numerics"; ~40 s each, not in the default
# list); rNm runs case N on the wy kernel on
# mma.sync, wy_mma_kernel.cuh, and is not in the default list (its grouped walk with the staged chunk reused by a
# row's second V-tile in r0m-r5m, r7m, r8m; r6m on 6 CTAs its ungrouped walk, r9m one V-tile a head); rNd runs case N on the direct kernel, direct_kernel.cuh (r0-r15, and r21-r30: single-token decode, its
# 64-register instances: r21 fp32 pool with the fused gate and an invalid row, r22 its 16-column tiles, the N = 1
# instance, r23 a bf16 pool, r24 2-D slots with protocol A, r25 no state_indices, r26 a V-major pool, r27 an f16 pool
# with f16 activations, r28 a bf16 pool, K = 64, plain g / beta, r29 the benchmark's decode on N = 6, r30 r29 on a
# strided pool (padded rows); not in the default list); rNp runs case N on the direct_pipe kernel,
# direct_pipe_kernel.cuh (r23, r27-r30: K-major 16-bit pools; not in the default list; the case's o, pool bits are
# printed: a bitwise-neutral change keeps them)); m0-m4 mixer_decode's pipe kernel (mixer_pipe_kernel.cuh; one token per
# row, K-major pool): m0 GQA 2, Kc 4, a padded row, m1 f16, GQA 4, Kc 3, no conv bias, commit off, m2 MHA, 7 rows,
# allow_neg_eigval, m3 rows on slots n (row 0 on the null slot), Kc 2, m4 GQA 8, Kc 1 (bf16 pools), m5, m6 m0, m1 on fp32
# pools (mixer_harness.cpp). --tsan builds with ThreadSanitizer: it reports every pair of
# shared-memory accesses of two emulated threads (or async units: wgmma, TMA) that no barrier, mbarrier phase or async
# wait orders (and fails the case).
# Under --tsan a w case takes 10-90 s of CPU on two cores, chunk_bwd's case 10 a few minutes, an r case under a
# minute.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
flags=(-O1 -Wno-psabi)
if [[ "${1:-}" == --tsan ]]; then
  flags=(-O1 -Wno-psabi -g -fsanitize=thread)
  shift
fi
lib="${1:-$root/build-cpu}/libflashgdn_static.a"
shift || true
cases="${*:-0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 25 28 i0 i1 i2 i3 i4 w0 w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12 w13 w14 w15 w16 w17 w18 w19 r0 r1 r2 r3 r4 r5 r6 r7 r8 r9 r10 r11 r12 r13 r14 r15 r16 r17 r18 r19 r20 r31 r32 r33 r34 r35 r36 m0 m1 m2 m3 m4 m5 m6}"
cuda="${CUDA_HOME:-/usr/local/cuda}"
out="$(mktemp -d)"
python3 "$root/tools/emulate_chunk_bwd/gen.py" "$root" "$out"
# only the harnesses the cases need; $out first on the include path: its cuda/common/{wgmma,mbarrier,tma}.cuh stand in
# for the device headers
need=()
for c in $cases; do
  case "$c" in i*) h=intra_harness ;; w*) h=state_wg_harness ;; r*) h=recurrent_harness ;; m*) h=mixer_harness ;; *) h=harness ;; esac
  [[ " ${need[*]} " == *" $h "* ]] || need+=("$h")
done
# chunk_fwd's passes (fwd_passes.cpp) link into the harnesses that run them: the prefill's and chunk_bwd's (its chunk
# start states from the forward)
declare -A fwd=([harness]="$root/tools/emulate_chunk_bwd/fwd_passes.cpp" [state_wg_harness]="$root/tools/emulate_chunk_bwd/fwd_passes.cpp")
for h in "${need[@]}"; do
  g++ -std=c++20 "${flags[@]}" -w -DFLASHGDN_WITH_CUDA=1 -I"$out" -I"$cuda/include" -I"$root/include" -I"$root/src" \
    -I"$root/tests/common" -I"$root/tools/emulate_chunk_bwd" "$root/tools/emulate_chunk_bwd/$h.cpp" \
    ${fwd[$h]:-} "$lib" -lpthread -o "$out/$h"
done
status=0
for c in $cases; do
  if [[ "$c" == i* ]]; then
    "$out/intra_harness" "${c#i}" || status=1
  elif [[ "$c" == m* ]]; then
    "$out/mixer_harness" "${c#m}" || status=1
  elif [[ "$c" == w* ]]; then
    "$out/state_wg_harness" "${c#w}" || status=1
  elif [[ "$c" == r*d ]]; then
    c="${c#r}"
    "$out/recurrent_harness" "${c%d}" direct || status=1
  elif [[ "$c" == r*p ]]; then
    c="${c#r}"
    "$out/recurrent_harness" "${c%p}" pipe || status=1
  elif [[ "$c" == r*m ]]; then
    c="${c#r}"
    "$out/recurrent_harness" "${c%m}" mma || status=1
  elif [[ "$c" == r* ]]; then
    "$out/recurrent_harness" "${c#r}" || status=1
  elif [[ "$c" == *s1 ]]; then
    "$out/harness" "${c%s1}" 1 || status=1
  elif [[ "$c" == *c ]]; then
    "$out/harness" "${c%c}" c || status=1
  elif [[ "$c" == *p ]]; then
    "$out/harness" "${c%p}" p || status=1
  elif [[ "$c" == *s ]]; then
    "$out/harness" "${c%s}" s || status=1
  elif [[ "$c" == *fw ]]; then
    "$out/harness" "${c%fw}" fw || status=1
  elif [[ "$c" == *f ]]; then
    "$out/harness" "${c%f}" f || status=1
  elif [[ "$c" == *gm ]]; then
    "$out/harness" "${c%gm}" gm || status=1
  elif [[ "$c" == *g ]]; then
    "$out/harness" "${c%g}" g || status=1
  elif [[ "$c" == *m ]]; then
    "$out/harness" "${c%m}" mma || status=1
  else
    "$out/harness" "$c" || status=1
  fi
done
rm -rf "$out"
exit $status
