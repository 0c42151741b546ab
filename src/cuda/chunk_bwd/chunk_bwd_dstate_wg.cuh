// Pass 3 of the backward (the reverse state-gradient chain) on Hopper warpgroup MMA (wgmma, sm_90a), K = V = 128: the
// chain of chunk_bwd_dstate_kernel (chunk_bwd_kernels.cuh) with the same operand splits and fp32 accumulation, every
// product on wgmma m64n32k16 (bf16 operands) from 128-byte-swizzled K-major shared-memory tiles (cuda/common/wgmma.cuh)
// and register A fragments. Included by chunk_bwd_kernels.cuh after the chain helpers (ChainWork, chain_start, row_kb,
// the copies) and pass 2's wgmma kernel, whose tile layouts it shares.
//
// One CTA = one warpgroup (128 threads) owns (work item, value head, kBV = 32 state columns): the grid of the mma.sync
// kernel, (N | items, Hv, V / 32) or (items, Hv, (K + V) / 32) for the summaries, and the same ChainMode walks. The
// running gradient dS (128 keys x 32 columns, fp32) is two m64n32 accumulators (key blocks mb) in registers for the
// whole walk. Per chunk c, in reverse (n <= 64 rows, rows past n zero in every record; dS enters as the gradient
// w.r.t. chunk c's end state):
//
//   product 1   dU = dU0 + diag(kb) K dS:  K dS_lo + K dS_hi (16 wgmma ss, A = k [token][key] as stored, B = dS^T
//               [value][key] hi / lo written by stmatrix.trans from the registers; an f16 k is split into bf16
//               hi + lo in registers and adds K_lo dS_hi: 24 wgmma rs); dU stored (fp32, over dU0, for pass 4), -dU
//               split into hi + lo and stored transposed (stmatrix.trans); diag(qg) dO split and stored transposed
//               while product 1 runs
//   product 2   dS <- e_n dS + Q^T (diag(qg) dO) + W^T (-dU) per key block: Q^T Ob_lo + Q^T Ob_hi (+ Q_lo^T Ob_hi
//               for f16), W_hi^T (-dU)_lo + W_hi^T (-dU)_hi + W_lo^T (-dU)_hi (W split as prep stores it; 20 wgmma
//               rs per key block, Q^T and W^T by ldmatrix.trans of the swizzled q and W tiles; 24 for f16); then dS as
//               the next step's dS^T (hi, lo) and as the fp32 record of chunk c - 1 (pass 4 reads it)
//
// A summary walks only its N columns (from zero, every term on; its M is the state chain's, transposed).
//
// Loads (cp.async, a fixed trip count per thread, to the swizzled addresses; k and q rows past the chunk end land as
// zeros): chunk c - 1's W, k, q, dO columns, dU0 columns and record rows. STAGES = 2: a second stage, issued under
// chunk c's product 1, so that the step waits on no load (one CTA per SM). STAGES = 1 (early refill, two CTAs per SM):
// the one stage is refilled as soon as every thread is done with it, at the step's second barrier: by then each thread
// has read what it needs of the stage (the factors, dU0 and dO of its rows; the Q^T and W^T fragments of product 2, in
// registers) and product 1's reads of k are waited, so chunk c - 1's copies run under product 2 and the end of the
// step. Synchronization per chunk: two CTA barriers (= the warpgroup), as in the mma.sync kernel: [stage c landed (wait
// + proxy fence by each copier), dS^T written] and [(-dU)^T, Ob^T written; product 1 waited; every read of the stage
// done]. Every wgmma group is waited within its step (no group in flight across the loop's back edge or a barrier), so
// the barriers order the async-proxy reads against the next generic writes.
#pragma once

#include "cuda/chunk_bwd/chunk_bwd_state_wg.cuh"  // its tile layouts, and state_wg_chain (both chains at once)
#include "cuda/chunk_fwd/chunk_fwd_state_wg.cuh"
#include "cuda/common/wgmma.cuh"

namespace flashgdn::cuda::bwd_detail {

constexpr int kDStateWgThreads = 128;  // one warpgroup
static_assert(kDStateWgThreads == kStateWgThreads, "copy_w_tile: one warpgroup");

// Shared memory: 32 KiB of step operands and STAGES stages of 79 KiB: 190 KiB at STAGES = 2 (one CTA per SM), 111
// KiB at STAGES = 1 (two CTAs per SM). Every swizzled region is 1024-byte aligned (the struct is, and every region and
// stage size a multiple of 1024).
template <int STAGES>
struct alignas(1024) DStateWgSmem {
  unsigned char dst[2][2][4096];  // dS^T [hi, lo][key half][32 values x 64 keys]
  unsigned char dut[2][4096];     // (-dU)^T [hi, lo][32 values x 64 tokens]
  unsigned char obt[2][4096];     // (diag(qg) dO)^T [hi, lo][32 values x 64 tokens]
  struct Stage {
    unsigned char w[2][2][8192];  // W [hi, lo][key half][64 tokens x 64 keys]
    unsigned char k[2][8192];     // k [key half][64 tokens x 64 keys], zero past the chunk end
    unsigned char q[2][8192];     // q, the same
    float du0[kC][kLS];           // dU0 = scale P^T dO, these columns
    uint16_t dO[kC][kLB];         // dO, these columns (16-bit inputs as stored)
    float rows[4][kC];            // the record's gamma, rho_q, rho_k, beta
  } stg[STAGES];
};
static_assert(sizeof(DStateWgSmem<1>::Stage) % 1024 == 0, "dstate (wgmma): swizzled stages");
static_assert(sizeof(DStateWgSmem<2>) + 1024 <= 227 * 1024, "dstate (wgmma), 2 stages: one CTA's shared memory");
// Two CTAs per SM: 228 KiB per SM, less 1 KiB that the system keeps per CTA, is 113 KiB per CTA (with the 1 KiB of
// alignment slack: the dynamic allocation is sizeof + 1024).
static_assert(sizeof(DStateWgSmem<1>) + 1024 <= 115712, "dstate (wgmma), 1 stage: two CTAs per SM");

// The cp.async copies of one 16-bit input tile (k or q): rows t0 .. t0 + 63 of 128 keys, each row as 16 pieces of 16
// bytes into the swizzled key halves (thread tid: piece tid % 16 of rows tid / 16 + 8 p), zeros from row nv on
// (nothing read there; such a copy reads row 0, always valid). src: the head's row t0.
template <class E>
__device__ __forceinline__ void copy_key_rows(unsigned char (&dst)[2][8192], const E* src, int64_t st, int nv,
                                              int tid) {
  constexpr int NTH = kDStateWgThreads;
  const int r0 = tid >> 4, kv = tid & 15;
  const E* p0 = src + kv * 8;
  const E* p = p0 + r0 * st;
  const int64_t step = (NTH / 16) * st;
#pragma unroll
  for (int i = 0; i < kC / (NTH / 16); ++i, p += step) {
    const int r = r0 + (NTH / 16) * i;
    const bool ok = r < nv;
    cp_async16_zfill(&dst[kv >> 3][wg::swz(r, kv & 7)], ok ? p : p0, ok);
  }
}

// Issue the cp.async copies of chunk c's inputs into stage g: W's hi tile (copy_w_tile; the lo tile by the step that
// reads it), the key and query rows, dU0's and dO's kBV columns, the record rows.
template <class E, int V, class Stage>
__device__ __forceinline__ void dstate_wg_prefetch(const ChunkBwdArgs& a, Stage& g, const ChainWork& w, int64_t c,
                                                   int h, int tid) {
  constexpr int NTH = kDStateWgThreads;
  const int64_t t0 = w.st + kC * c, rec = chunk_slot(a, w.n, w.st, c) * a.Hv + h;
  const int nv = int(w.len - kC * c < kC ? w.len - kC * c : kC), hk = h / a.group;
  copy_w_tile(g.w[0], a, rec, 0, tid);
  copy_key_rows(g.k, static_cast<const E*>(a.k) + w.sb * a.k_sb + hk * a.k_sh + t0 * a.k_st, a.k_st, nv, tid);
  copy_key_rows(g.q, static_cast<const E*>(a.q) + w.sb * a.q_sb + hk * a.q_sh + t0 * a.q_st, a.q_st, nv, tid);
  copy_f32_tile<kBV, NTH>(g.du0, a.dU + rec * (kC * V) + w.j0, V, tid);
  copy_rows<E, kBV, NTH>(reinterpret_cast<E(*)[kLB]>(&g.dO[0][0]),
                         static_cast<const E*>(a.d_o) + w.sb * a.do_sb + h * a.do_sh, a.do_st, t0, nv, w.j0, tid);
  copy_record_rows(g.rows, a.rows, rec, tid);
  cp_async_commit();
}

// The A fragments of K for this warp's tokens 16 wi .. + 15, all 8 key steps (f16 product 1): ldmatrix (not
// transposed) of the swizzled k tile [token][key]; lane l addresses row l % 8 (+ 8 for matrices 1, 3) at keys 16 ks
// (+ 8 for matrices 2, 3).
__device__ __forceinline__ void load_k_frags(const unsigned char (&kt)[2][8192], int wi, int lane,
                                             uint32_t (&f)[8][4]) {
  const int row = 16 * wi + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
  for (int ks = 0; ks < 8; ++ks) {
    const int key = 16 * ks + (lane >> 4) * 8;
    ldsm_x4(f[ks], &kt[key >> 6][wg::swz(row, (key & 63) >> 3)]);
  }
}

// The walk of one CTA (ChainWork w, value head h). Per step c (reverse): [barrier: stage landed, dS^T] dU = dU0 +
// diag(kb) K dS (wgmma), dU stored, (-dU)^T and Ob^T split [barrier] dS <- e_n dS + Q^T Ob + W^T (-dU) (wgmma, in the
// registers), then dS^T and the record dS of chunk c - 1. A summary stores only its end gradient (its columns of
// [M | N]); the sequence's first segment (or the whole walk) stores dh0. With the fused pass and a decay table the walk
// visits only the chunks of the decay windows of the gradients that pass reads (next_from, below).
template <class E, int V, int STAGES, int BAR>
__device__ __forceinline__ void dstate_wg_walk(const ChunkBwdArgs& a, DStateWgSmem<STAGES>& s, const ChainWork& w,
                                               int h, int tid, int wi, int lane) {
  constexpr int K = 128, NJ = kBV / 8;
  constexpr bool kF16 = std::is_same_v<E, __half>;
  using Stage = typename DStateWgSmem<STAGES>::Stage;
  const int t4 = lane & 3;
  const bool sum = a.chain_mode == kChainSummary;
  const int r0 = 16 * wi + (lane >> 2);  // this thread's rows (tokens of product 1, keys of a block of product 2)

  // descriptor low words: dS^T (hi; lo at + 8192; key half at + 4096), (-dU)^T and Ob^T (hi; lo at + 4096), stage 0's
  // k (key half at + 8192; stage 1 at + sizeof(Stage))
  const uint32_t dst_addr = smem_addr(&s.dst[0][0][0]), dut_addr = smem_addr(&s.dut[0][0]);
  const uint32_t obt_addr = smem_addr(&s.obt[0][0]);
  const uint32_t dst_lo = wg::desc_lo(dst_addr), dut_lo = wg::desc_lo(dut_addr), obt_lo = wg::desc_lo(obt_addr);
  const uint32_t k_lo = wg::desc_lo(smem_addr(&s.stg[0].k[0][0]));

  float dacc[2][NJ][4];  // key block mb: keys 64 mb + r0 (+ 8), columns 8 jn + 2 t4 (+ 1)
#pragma unroll
  for (int mb = 0; mb < 2; ++mb)
    for_pairs<NJ>(64 * mb + 16 * wi, 0, lane, [&](int jn, int e, int i, int j) {
      dacc[mb][jn][e] = chain_start<K, V>(a, w, true, h, a.dht, a.dht_sn, a.dht_sh, a.dht_sr, i, j);
      dacc[mb][jn][e + 1] = chain_start<K, V>(a, w, true, h, a.dht, a.dht_sn, a.dht_sh, a.dht_sr, i, j + 1);
    });
  // dS, the gradient w.r.t. chunk c's end state, as the next product's operand dS^T (hi, lo) and, but for a summary,
  // into its record (fp32: it enters dg through <S0, dS>), from the registers
  // With the fused gradients pass (fused_on) only the records it reads: dS where a walk of it starts (the last slot
  // of a walk) or a sequence ends; no dU.
  const int64_t nch = (w.len + kC - 1) / kC;
  const bool trim = fused_on(a);
  const auto in_walk = [&](int64_t slot) { return fused_in_walk(a, slot); };
  const auto put_grad = [&](int64_t c, bool record) {
    const int64_t slot = chunk_slot(a, w.n, w.st, c);
    const bool rec_out = record && !sum && (!trim || c == nch - 1 || in_walk(slot + 1) == 0);
    float* dSg = a.dS + (slot * a.Hv + h) * (K * V) + w.j0;
#pragma unroll
    for (int mb = 0; mb < 2; ++mb) {
      uint32_t xh[NJ][2], xl[NJ][2];
      chunk_detail::split_acc<true>(dacc[mb], xh, xl);
      chunk_detail::store_transposed(dst_addr + 4096 * mb, xh, wi, lane);
      chunk_detail::store_transposed(dst_addr + 8192 + 4096 * mb, xl, wi, lane);
      if (rec_out)
        for_pairs<NJ>(64 * mb + 16 * wi, 0, lane, [&](int jn, int e, int i, int j) {
          *reinterpret_cast<float2*>(dSg + i * V + j) = make_float2(dacc[mb][jn][e], dacc[mb][jn][e + 1]);
        });
    }
  };
  // The decay window (a.dec; dstate_next_from): every CTA of the (sequence, value head) finds the same e (the same
  // table, the same sum), and prep has formed dU0 for exactly the chunks walked (dstate_reads_du0).
  const bool window = trim && a.dec && !sum;
  const int64_t slot0 = chunk_slot(a, w.n, w.st, 0);  // chunk c's slot: slot0 + c
  // the chunk to walk next from dS(x): x, e < x (from a zero gradient), or c_begin - 1 (nothing left that is read)
  const auto next_from = [&](int64_t x) -> int64_t {
    return window ? dstate_next_from(a, h, slot0, w.c_begin, w.seg == 0 && a.dh0, x) : x;
  };
  const auto restart = [&] {  // dS = 0: the start of a decay window (the operand tiles, no record)
#pragma unroll
    for (int mb = 0; mb < 2; ++mb)
#pragma unroll
      for (int jn = 0; jn < NJ; ++jn)
#pragma unroll
        for (int e = 0; e < 4; ++e) dacc[mb][jn][e] = 0.f;
    put_grad(0, false);
  };
  int64_t c = w.c_end - 1;
  if (w.c_begin < w.c_end) {
    const int64_t c1 = next_from(c);
    if (c1 >= w.c_begin) dstate_wg_prefetch<E, V>(a, s.stg[0], w, c1, h, tid);
    put_grad(c, true);
    if (c1 < c) restart();
    c = c1;
  }
  for (int step = 0; c >= w.c_begin; ++step) {
    const int bf = STAGES == 1 ? 0 : step & 1;
    // the chunk after c: c - 1, or where the window of the gradient read at c - 1 (the end of a fused walk) starts
    const int64_t nx = window && c > w.c_begin && in_walk(slot0 + c) == 0 ? next_from(c - 1) : c - 1;
    const int64_t rec = chunk_slot(a, w.n, w.st, c) * a.Hv + h;
    const int nv = int(w.len - kC * c < kC ? w.len - kC * c : kC);
    const Stage& g = s.stg[bf];
    cp_async_wait_all();
    wg::fence_async_smem();  // this thread's copies and dS^T stores, before the async proxy's (wgmma) reads
    chain_sync<BAR>();       // stage bf landed (every thread's copies); dS^T complete; (-dU)^T, Ob^T free

    // e_n = e^{gamma_{n-1}} before product 1 (for dS <- e_n dS); every other factor and operand of the step is formed
    // while product 1 runs
    const float gl = g.rows[0][nv - 1], en = expf(gl);
    // W's lo terms where the chunk's beta exceeds 1; with the fused pass on no beta does (pass 0's flag), and the
    // step skips the shuffle reduction ahead of product 1 (read before a one-stage walk refills the stage)
    const bool w_lo_terms = !trim && beta_above_one(g.rows, lane);
    if (w_lo_terms) {  // W's lo tile of this chunk, copied only where read (no prefetch writes the stage's lo tile)
      copy_w_tile(s.stg[bf].w[1], a, rec, 1, tid);
      cp_async_commit();
    }

    // dS <- e_n dS, pinned before product 1 (wg::pin): under product 1, ptxas waits for it before the multiplications
    // (C7517); sunk into product 2's group, the products would wait on it (C7519)
    chunk_detail::scale_state(dacc, en);
    wg::pin(reinterpret_cast<float(&)[2 * 4 * NJ]>(dacc));

    // ---- product 1: K dS (k steps of 16 keys, key half at ks / 4); the terms lo*hi (f16), hi*lo, hi*hi
    float u[NJ][4];                // written by the first wgmma (accumulate = 0)
    uint32_t kf[8][4], kfl[8][4];  // f16 k: K = hi + lo in bf16 (exact: f16 has 11 significant bits); bf16: unused
    {
      float(&uv)[4 * NJ] = reinterpret_cast<float(&)[4 * NJ]>(u);
      if constexpr (kF16) {
        load_k_frags(g.k, wi, lane, kf);
#pragma unroll
        for (int ks = 0; ks < 8; ++ks) ready_frag(InTile<__half>{nullptr, 0}, kf[ks], kfl[ks]);
        wg::fence();
#pragma unroll
        for (int ks = 0; ks < K / 16; ++ks)
          wg::mma_rs_n32_bf16(uv, kfl[ks], wg::desc_at(dst_lo, (ks >> 2) * 4096 + (ks & 3) * 32), ks > 0);
#pragma unroll
        for (int ks = 0; ks < K / 16; ++ks)
          wg::mma_rs_n32_bf16(uv, kf[ks], wg::desc_at(dst_lo, 8192 + (ks >> 2) * 4096 + (ks & 3) * 32), 1);
#pragma unroll
        for (int ks = 0; ks < K / 16; ++ks)
          wg::mma_rs_n32_bf16(uv, kf[ks], wg::desc_at(dst_lo, (ks >> 2) * 4096 + (ks & 3) * 32), 1);
      } else {
        const uint32_t kst = uint32_t(bf) * uint32_t(sizeof(Stage));
        wg::fence();
#pragma unroll
        for (int t = 1; t < 3; ++t)
#pragma unroll
          for (int ks = 0; ks < K / 16; ++ks)
            wg::mma_ss_n32_bf16(uv, wg::desc_at(k_lo, kst + (ks >> 2) * 8192 + (ks & 3) * 32),
                                wg::desc_at(dst_lo, (t == 1 ? 8192 : 0) + (ks >> 2) * 4096 + (ks & 3) * 32),
                                t + ks > 1);
      }
      wg::commit();
    }
    // while product 1 runs (the issue slots are idle): chunk c - 1's copies into the other stage (two stages), Ob^T,
    // and (bf16) the A fragments of product 2: Q^T and W^T of key blocks 0, 1 (keys 64 mb + 16 wi ..; k steps of 16
    // tokens). An f16 walk loads them after the wait, into the registers of the k fragments.
    if constexpr (STAGES == 2) {
      if (nx >= w.c_begin) dstate_wg_prefetch<E, V>(a, s.stg[bf ^ 1], w, nx, h, tid);
    }
    {  // Ob = diag(qg) dO, qg_r = scale rho_q,r e^{gamma_r} (scale Gamma Q^ = diag(qg) Q), split
      uint32_t oh[NJ][2], ol[NJ][2];
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int r = r0 + 8 * hr;
        const float qg = r < nv ? a.scale * g.rows[1][r] * expf(g.rows[0][r]) : 0.f;
#pragma unroll
        for (int jn = 0; jn < NJ; ++jn) {
          const float2 d =
              chunk_detail::Elem<!kF16>::unpack(*reinterpret_cast<const uint32_t*>(&g.dO[r][8 * jn + 2 * t4]));
          const Split2 y = split_pair<false>(qg * d.x, qg * d.y);
          oh[jn][hr] = y.hi, ol[jn][hr] = y.lo;
        }
      }
      chunk_detail::store_transposed(obt_addr, oh, wi, lane);
      chunk_detail::store_transposed(obt_addr + 4096, ol, wi, lane);
    }
    uint32_t qt[2][4][4], wt[2][4][4], wtl[2][4][4];
    const auto load_p2 = [&] {
#pragma unroll
      for (int mb = 0; mb < 2; ++mb) {
        chunk_detail::load_kt_frags(g.q, 64 * mb + 16 * wi, lane, qt[mb]);
        chunk_detail::load_kt_frags(g.w[0], 64 * mb + 16 * wi, lane, wt[mb]);
      }
    };
    if constexpr (!kF16) load_p2();
    // dU's epilogue reads, ahead of the wait (it orders shared-memory reads, so nothing after it is hoisted): kb_r =
    // rho_k,r e^{gamma_{n-1} - gamma_r} of rows r0, r0 + 8 and this thread's dU0 elements, so that from product 1's
    // end to the second barrier only the epilogue's arithmetic and stores remain
    float kb[2];
    row_kb(kb, g.rows, gl, nv, 16 * wi, lane);
    float2 d0[NJ][2];
    for_pairs<NJ>(16 * wi, 0, lane,
                  [&](int jn, int e, int r, int j) { d0[jn][e / 2] = *reinterpret_cast<const float2*>(&g.du0[r][j]); });
    wg::wait0();
    if constexpr (kF16) load_p2();
    {  // dU = dU0 + diag(kb) K dS stored (fp32, over dU0); -dU as hi + lo, transposed, for product 2
      float* dUg = a.dU + rec * (kC * V) + w.j0;
      float nd[NJ][4];
      for_pairs<NJ>(16 * wi, 0, lane, [&](int jn, int e, int r, int j) {
        const float2 uv =
            make_float2(fmaf(kb[e / 2], u[jn][e], d0[jn][e / 2].x), fmaf(kb[e / 2], u[jn][e + 1], d0[jn][e / 2].y));
        if (!sum && !trim) *reinterpret_cast<float2*>(dUg + r * V + j) = uv;
        nd[jn][e] = -uv.x, nd[jn][e + 1] = -uv.y;
      });
      uint32_t xh[NJ][2], xl[NJ][2];
      chunk_detail::split_acc<true>(nd, xh, xl);
      chunk_detail::store_transposed(dut_addr, xh, wi, lane);
      chunk_detail::store_transposed(dut_addr + 4096, xl, wi, lane);
      wg::fence_async_smem();  // (-dU)^T and Ob^T, before product 2's reads
    }
    uint32_t qtl[2][4][4];  // f16 q: Q^T = hi + lo in bf16; bf16: unused
    if constexpr (kF16) {
#pragma unroll
      for (int mb = 0; mb < 2; ++mb)
#pragma unroll
        for (int kc = 0; kc < 4; ++kc) ready_frag(InTile<__half>{nullptr, 0}, qt[mb][kc], qtl[mb][kc]);
    }
    chain_sync<BAR>();  // (-dU)^T, Ob^T complete; every warp's product-1 reads of dS^T and k and its reads of stage
                        // done

    // ---- product 2: dS <- e_n dS + Q^T Ob + W^T (-dU), per key block (k steps of 16 tokens)
    wg::fence();
#pragma unroll
    for (int mb = 0; mb < 2; ++mb) {
      float(&sv)[4 * NJ] = reinterpret_cast<float(&)[4 * NJ]>(dacc[mb]);
      if constexpr (kF16) {
#pragma unroll
        for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n32_bf16(sv, qtl[mb][kc], wg::desc_at(obt_lo, kc * 32), 1);
      }
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n32_bf16(sv, qt[mb][kc], wg::desc_at(obt_lo, 4096 + kc * 32), 1);
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n32_bf16(sv, qt[mb][kc], wg::desc_at(obt_lo, kc * 32), 1);
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n32_bf16(sv, wt[mb][kc], wg::desc_at(dut_lo, 4096 + kc * 32), 1);
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n32_bf16(sv, wt[mb][kc], wg::desc_at(dut_lo, kc * 32), 1);
    }
    wg::commit();
    // one stage: refilled with chunk c - 1 now that every thread is done with it (the barrier above), under product 2
    if constexpr (STAGES == 1) {
      if (nx >= w.c_begin) dstate_wg_prefetch<E, V>(a, s.stg[0], w, nx, h, tid);
    }
    wg::wait0();
    if (w_lo_terms) {       // W_lo^T (-dU)_hi where the chunk's beta exceeds 1; no group in flight
      cp_async_wait_all();  // W's lo tile (and a one-stage walk's refill) landed, every thread's
      chain_sync<BAR>();
#pragma unroll
      for (int mb = 0; mb < 2; ++mb) chunk_detail::load_kt_frags(g.w[1], 64 * mb + 16 * wi, lane, wtl[mb]);
      wg::fence();
#pragma unroll
      for (int mb = 0; mb < 2; ++mb) {
        float(&sv)[4 * NJ] = reinterpret_cast<float(&)[4 * NJ]>(dacc[mb]);
#pragma unroll
        for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n32_bf16(sv, wtl[mb][kc], wg::desc_at(dut_lo, kc * 32), 1);
      }
      wg::commit();
      wg::wait0();
    }
    if (c > w.c_begin) {
      put_grad(c - 1, true);
      if (nx < c - 1) restart();
    }
    c = nx;
  }
  if (sum) {                                                          // this CTA's columns of the item's [M | N]
    float* dst = chain_mn<K, V>(a, w.reverse, w.item, h) + K + w.j0;  // N columns
#pragma unroll
    for (int mb = 0; mb < 2; ++mb)
      for_pairs<NJ>(64 * mb + 16 * wi, 0, lane, [&](int jn, int e, int i, int j) {
        *reinterpret_cast<float2*>(dst + i * (K + V) + j) = make_float2(dacc[mb][jn][e], dacc[mb][jn][e + 1]);
      });
  } else if (a.dh0 && w.seg == 0) {  // dh0 = dS_start of the first chunk (dht, or 0, for an empty sequence)
    float* d = a.dh0 + w.n * a.dh0_sn + h * a.dh0_sh;
#pragma unroll
    for (int mb = 0; mb < 2; ++mb)
      for_pairs<NJ>(64 * mb + 16 * wi, 0, lane, [&](int jn, int e, int i, int j) {
        d[state_off(a.state_vmajor, a.dh0_sr, i, w.j0 + j)] = dacc[mb][jn][e];
        d[state_off(a.state_vmajor, a.dh0_sr, i, w.j0 + j + 1)] = dacc[mb][jn][e + 1];
      });
  }
}

// STAGES: 2 (double-buffered, one CTA per SM) or 1 (early refill, two CTAs per SM, or beside the state chain in one
// CTA); launch_dstate picks it from a.dstate_wg.
// z: the warpgroup's column tile in its chain's grid (chunk_bwd_dstate_wg_kernel, the chains kernels); sm:
// its shared memory (1024-byte aligned); BAR: its barrier (chain_sync).
template <class E, int V, int STAGES, int BAR>
__device__ __forceinline__ void dstate_wg_chain(const ChunkBwdArgs& a, int z, unsigned char* sm) {
  auto& s = *reinterpret_cast<DStateWgSmem<STAGES>*>(sm);
  const int tid = threadIdx.x % kDStateWgThreads, lane = tid & 31;  // the thread within its warpgroup
  // the warp index, broadcast from lane 0 so that the compiler sees it warp-uniform
  const int wi = __shfl_sync(0xffffffffu, tid >> 5, 0);
  ChainWork w;
  if (!chain_work<128>(a, true, &w, z)) return;
  dstate_wg_walk<E, V, STAGES, BAR>(a, s, w, int(blockIdx.y), tid, wi, lane);
}

// This CTA's chains (or its reverse chain) are stored: count it in its unit (ChunkBwdArgs::order); the unit's last CTA
// appends the unit to the queue. Every thread's stores precede the barrier; thread 0's fence and release publish them,
// and the last CTA's acquire of the count carries the unit's other CTAs' releases into its own.
__device__ __forceinline__ void release_unit(const ChunkBwdArgs& a) {
  __syncthreads();
  if (threadIdx.x != 0) return;
  const int cs = a.fused_cluster > 1 ? a.fused_cluster : 1, units = a.Hv / cs, u = int(blockIdx.y) / cs;
  const int32_t ctas = int32_t(gridDim.x * gridDim.z) * cs;  // the unit's chain CTAs
  __threadfence();
  if (atom_add_acq_rel_gpu(a.order + 2 + u, 1) == ctas - 1)
    st_release_gpu(a.order + 2 + units + atom_add_acq_rel_gpu(a.order, 1), u + 1);
}

// Where the fused pass follows the reverse chain alone (a.follow with the chunk start states from chunk_fwd's passes,
// ChunkBwdPlan::fused_follows) the chain's CTAs let it be scheduled at once and release their units as the chains
// kernels do (chunk_bwd_chains_pair_kernel).
template <class E, int V, int STAGES>
__global__ void __launch_bounds__(kDStateWgThreads, STAGES == 1 ? 2 : 1)
    chunk_bwd_dstate_wg_kernel(const ChunkBwdArgs a) {
  pdl_trigger();
  dstate_wg_chain<E, V, STAGES, 0>(a, int(blockIdx.z), chunk_detail::swizzled_smem());
  if (a.follow && a.chain_mode != kChainSummary) release_unit(a);
}

// Passes 2 and 3 at once (the plan's chains_concurrent, K = V = 128), each chain in its one-stage form, so that an SM
// runs a state step beside a dstate step and their latency-bound steps overlap. The chains share nothing (the reverse
// one's summaries in a.mn_rev). Two forms:
//
// chunk_bwd_chains_wg_kernel (kChainsTwoCtas): one warpgroup per CTA, two CTAs per SM; the grid's z holds the dstate
// chain's column tiles (V / 32, its summaries too: N columns alone), then the state chain's (V / 32, or (K + V) / 32
// for the summaries). A CTA's slot frees when its own chain ends, so where the grid runs in several waves the next CTA
// takes it. The dstate CTAs, the longer chain over every chunk, come first, so they are dispatched first: measured on
// an H100, the state chain first was 2.5% slower at T = 32K Hqk = Hv = 4 (the split) and level at the unsplit shapes
// (docs/chunk_bwd.md; that the schedulers favour the older CTA's warps is the likely reason, not verified).
template <class E, int V>
__global__ void __launch_bounds__(kDStateWgThreads, 2) chunk_bwd_chains_wg_kernel(const ChunkBwdArgs a) {
  constexpr int zd = V / kBV;
  const int z = int(blockIdx.z);
  if (z < zd)
    dstate_wg_chain<E, V, 1, 0>(a, z, chunk_detail::swizzled_smem());
  else
    state_wg_chain<E, V, 1, 0>(a, z - zd, chunk_detail::swizzled_smem());
}

// chunk_bwd_chains_pair_kernel (kChainsOneCta): one CTA of two warpgroups per (item, value head, column tile z),
// warpgroup 0 the dstate chain's tile z (it has V / 32: a summary tile past them leaves warpgroup 0 idle) and
// warpgroup 1 the state chain's (the grid is the state chain's), each over its own shared memory (the dstate chain's,
// then the state chain's: 218 KiB, one CTA per SM) with a named barrier of its own. Every SM then holds one step of
// each chain, where with a CTA per chain an SM may get two CTAs of one chain (a state CTA that outlasts its dstate
// neighbour, under decay windows, then walks on beside another state CTA). The plan takes it where the grid fits one
// wave: its CTA holds the slot until the longer of its two chains ends.
//
// Where the fused pass follows (a.follow, ChunkBwdPlan::fused_follows) each CTA lets it be scheduled at once (its CTAs
// take only SMs that no chain CTA holds: a CTA of each needs most of an SM's shared memory) and, once both chains of
// its tile are stored, counts itself done in its unit; the unit's last CTA queues the unit (release_unit).
constexpr int kChainsThreads = 2 * kStateWgThreads;

template <class E, int V>
__global__ void __launch_bounds__(kChainsThreads, 1) chunk_bwd_chains_pair_kernel(const ChunkBwdArgs a) {
  pdl_trigger();
  const int z = int(blockIdx.z);
  unsigned char* sm = chunk_detail::swizzled_smem();
  if (threadIdx.x < kDStateWgThreads) {
    if (z < V / kBV) dstate_wg_chain<E, V, 1, 1>(a, z, sm);
  } else {
    state_wg_chain<E, V, 1, 2>(a, z, sm + sizeof(DStateWgSmem<1>));
  }
  if (a.follow && a.chain_mode != kChainSummary) release_unit(a);
}
static_assert(sizeof(DStateWgSmem<1>) % 1024 == 0 &&
                  sizeof(DStateWgSmem<1>) + sizeof(StateWgSmem<1>) + 1024 <= 227 * 1024,
              "both chains in one CTA: the state chain's tiles 1024-byte aligned, one CTA's shared memory");

}  // namespace flashgdn::cuda::bwd_detail
