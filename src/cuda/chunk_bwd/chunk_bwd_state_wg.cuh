// Pass 2 of the backward (the state chain) on Hopper warpgroup MMA (wgmma, sm_90a), K = V = 128: the chain of
// chunk_bwd_state_kernel (chunk_bwd_kernels.cuh) with the same operand splits and fp32 accumulation, every product on
// wgmma m64n32k16 (bf16 operands) from 128-byte-swizzled K-major shared-memory tiles (cuda/common/wgmma.cuh) and
// register A fragments. Included by chunk_bwd_kernels.cuh after the chain helpers (ChainWork, chain_start, row_kb,
// the copies), which it shares with the mma.sync kernel.
//
// One CTA = one warpgroup (128 threads) owns (work item, value head, kBV = 32 state columns): the grid of the mma.sync
// kernel, (N | items, Hv, V / 32) or (items, Hv, (K + V) / 32) for the summaries, and the same ChainMode walks. The
// running state S (128 keys x 32 columns, fp32) is two m64n32 accumulators (key blocks mb) in registers for the whole
// walk. Per chunk c (n <= 64 rows, rows past n zero in every record):
//
//   product 1   U = U0 - W S0:  W_hi S0_lo + W_hi S0_hi (16 wgmma ss; + W_lo S0_hi, 8 more, where the chunk's beta
//               exceeds 1: W_lo copied by the step itself there), A = W [token][key] hi / lo as prep stores it, B =
//               S0^T [value][key] hi / lo written by stmatrix.trans from the state's registers; U stored (fp32, over
//               U0, for pass 4), diag(kb) U split into hi + lo and stored transposed (stmatrix.trans)
//   product 2   S <- e_n S + K^T (diag(kb) U)_lo + K^T (diag(kb) U)_hi per key block (16 wgmma rs, K^T by
//               ldmatrix.trans of the swizzled k tile; f16 k split into bf16 hi + lo there, + 8 wgmma for k_lo U_hi);
//               then S as the next chunk's S0^T (hi, lo) and its bf16 hi as S0 of chunk c + 1 (pass 4's record)
//
// Loads, in one of two forms (the template parameter Stages; the same products in the same order, so the same bits):
//   Stages = 2  every input of chunk c + 1 (W, k rows, U0 columns, record rows) is copied by cp.async into the other
//               of two stages while chunk c computes, issued under product 1: 140 KiB (one CTA per SM).
//   Stages = 1  W and the record rows keep two stages (W, 32 of the 57 KiB a step reads, still lands under a whole
//               step); k has one tile, which each warp refills with chunk c + 1's rows as soon as it holds its K^T in
//               registers, under product 1 as in the two-stage form: the warp copies exactly the key pieces that its
//               own ldmatrix reads (keys 16 wi .. of each key half), so a __syncwarp orders its reads before its
//               refill and no other warp is involved; U0 never enters shared memory: each thread loads its own
//               fragment elements of chunk c + 1 into registers after its last use of chunk c's (under product 2),
//               so they have the rest of the step and product 1 of the next to land. 106 KiB: two CTAs per SM
//               (2 (106 + 1 + 1) KiB of the 228), 128 threads x 2 x <= 255 registers.
// (every copy a fixed trip count per thread; k rows past the chunk end land as zeros). Synchronization per chunk:
// two CTA barriers (= the warpgroup), as in the mma.sync kernel: [stage c landed (wait + proxy fence by each copier),
// S0^T written] and [(diag(kb) U)^T written, S0^T read]. Every wgmma group is waited within its step
// (no group in flight across the loop's back edge or a barrier), so the barriers order the async-proxy reads against
// the next generic writes.
#pragma once

#include "cuda/chunk_fwd/chunk_fwd_state_wg.cuh"
#include "cuda/common/wgmma.cuh"

namespace flashgdn::cuda::bwd_detail {

constexpr int kStateWgThreads = 128;  // one warpgroup

// Shared memory; every swizzled region 1024-byte aligned (the struct is, and every region size a multiple of 1024).
template <int Stages>
struct StateWgSmem;
// Stages = 2: 140 KiB.
template <>
struct alignas(1024) StateWgSmem<2> {
  unsigned char st[2][2][4096];  // S0^T [hi, lo][key half][32 values x 64 keys]
  unsigned char ut[2][4096];     // (diag(kb) U)^T [hi, lo][32 values x 64 tokens]
  struct Stage {
    unsigned char w[4][8192];  // W [hi key half 0, 1, lo key half 0, 1][64 tokens x 64 keys]
    unsigned char k[2][8192];  // k [key half][64 tokens x 64 keys], zero past the chunk end
    float u0[kC][kLS];         // U0, these columns
    float rows[4][kC];         // the record's gamma, rho_q, rho_k, beta
  } stg[2];
};
// Stages = 1: 106 KiB (two CTAs per SM); U0 in registers.
template <>
struct alignas(1024) StateWgSmem<1> {
  unsigned char st[2][2][4096];  // S0^T [hi, lo][key half][32 values x 64 keys]
  unsigned char ut[2][4096];     // (diag(kb) U)^T [hi, lo][32 values x 64 tokens]
  struct Stage {
    unsigned char w[4][8192];  // W [hi key half 0, 1, lo key half 0, 1][64 tokens x 64 keys]
    float rows[4][kC];         // the record's gamma, rho_q, rho_k, beta
  } stg[2];
  unsigned char k[2][8192];  // k [key half][64 tokens x 64 keys], zero past the chunk end (one tile)
};
static_assert(sizeof(StateWgSmem<2>::Stage) % 1024 == 0 && sizeof(StateWgSmem<2>) + 1024 <= 227 * 1024,
              "state (wgmma, two stages): swizzled stages, one CTA's shared memory");
static_assert(sizeof(StateWgSmem<1>::Stage) % 1024 == 0 && offsetof(StateWgSmem<1>, k) % 1024 == 0 &&
                  sizeof(StateWgSmem<1>) + 1024 <= 115712,
              "state (wgmma, one stage): swizzled tiles, two CTAs' shared memory per SM");

// The cp.async copies of W's tile `part` (0 hi, 1 lo: [64][K] bf16, K = 128) of record rec into its swizzled key
// halves dst[0], dst[1], by the 128 threads of a chain's warpgroup (thread tid: piece tid % 16 of rows tid / 16 + 8 p).
// Both wgmma chains prefetch the hi tile; a step whose chunk has beta above 1 copies the lo tile for itself (prep
// writes it only there).
__device__ __forceinline__ void copy_w_tile(unsigned char (*dst)[8192], const ChunkBwdArgs& a, int64_t rec, int part,
                                            int tid) {
  constexpr int K = 128, NTH = kStateWgThreads;
  const int r0 = tid >> 4, kv = tid & 15;
  const auto* src =
      reinterpret_cast<const __nv_bfloat16*>(a.W + rec * (2 * kC * K)) + part * (kC * K) + r0 * K + kv * 8;
#pragma unroll
  for (int p = 0; p < kC / (NTH / 16); ++p)
    cp_async<16>(&dst[kv >> 3][wg::swz(r0 + (NTH / 16) * p, kv & 7)], src + (NTH / 16) * p * K);
}

// The cp.async copies of chunk c's inputs (the caller commits), the parts in PARTS: kCopyW W's hi tile into w
// (copy_w_tile) and the record rows into rows; kCopyK the raw key rows into the swizzled key halves (thread tid: piece
// tid % 16 of rows tid / 16 + 8 p); kCopyKWarp the same rows, but each warp wi only the 16-byte pieces that its own
// K^T ldmatrix reads (keys 16 wi .. 16 wi + 15 of each key half, pieces 2 wi, 2 wi + 1 and 8 + 2 wi, 9 + 2 wi; lane
// l: piece l % 4 of rows l / 4 + 8 p), so that no other warp reads what it refills; kCopyU0 U0's kBV columns into u0
// (but for the M columns of a summary: U0 = 0).
enum : int { kCopyW = 1, kCopyK = 2, kCopyU0 = 4, kCopyKWarp = 8 };
template <class E, int V, int PARTS>
__device__ __forceinline__ void state_wg_copy(const ChunkBwdArgs& a, unsigned char (*w_dst)[8192], float (*rows)[kC],
                                              unsigned char (*k_dst)[8192], float (*u0)[kLS], const ChainWork& w,
                                              int64_t c, int h, int tid) {
  constexpr int NTH = kStateWgThreads;
  const int64_t t0 = w.st + kC * c, rec = chunk_slot(a, w.n, w.st, c) * a.Hv + h;
  const int r0 = tid >> 4, kv = tid & 15;
  if constexpr ((PARTS & kCopyW) != 0) copy_w_tile(w_dst, a, rec, 0, tid);
  if constexpr ((PARTS & kCopyK) != 0) {
    const int nv = int(w.len - kC * c < kC ? w.len - kC * c : kC);
    const E* k0 = static_cast<const E*>(a.k) + w.sb * a.k_sb + (h / a.group) * a.k_sh + t0 * a.k_st + kv * 8;
    const E* kp = k0 + r0 * a.k_st;
    const int64_t kstep = (NTH / 16) * a.k_st;
#pragma unroll
    for (int p = 0; p < kC / (NTH / 16); ++p, kp += kstep) {
      const int r = r0 + (NTH / 16) * p;
      const bool ok = r < nv;
      cp_async16_zfill(&k_dst[kv >> 3][wg::swz(r, kv & 7)], ok ? kp : k0, ok);  // row 0 is always valid
    }
  }
  if constexpr ((PARTS & kCopyKWarp) != 0) {
    const int nv = int(w.len - kC * c < kC ? w.len - kC * c : kC);
    const int wi = tid >> 5, l = tid & 31, rr = l >> 2;
    const int kp8 = ((l & 3) >> 1) * 8 + 2 * wi + (l & 1);  // the piece: keys 8 kp8 .. 8 kp8 + 7
    const E* k0 = static_cast<const E*>(a.k) + w.sb * a.k_sb + (h / a.group) * a.k_sh + t0 * a.k_st + kp8 * 8;
    const E* kp = k0 + rr * a.k_st;
    const int64_t kstep = 8 * a.k_st;
#pragma unroll
    for (int p = 0; p < kC / 8; ++p, kp += kstep) {
      const int r = rr + 8 * p;
      const bool ok = r < nv;
      cp_async16_zfill(&k_dst[kp8 >> 3][wg::swz(r, kp8 & 7)], ok ? kp : k0, ok);  // row 0 is always valid
    }
  }
  if constexpr ((PARTS & kCopyU0) != 0) {
    if (!w.hom) copy_f32_tile<kBV, NTH>(u0, a.U + rec * (kC * V) + w.j0, V, tid);
  }
  if constexpr ((PARTS & kCopyW) != 0) copy_record_rows(rows, a.rows, rec, tid);
}

// Stages = 1: this thread's U0 elements of chunk c (rows 16 wi + lane / 4 (+ 8), columns 8 jn + 2 t4 (+ 1): product
// 1's fragment layout) from the record into registers (zeros for the M columns of a summary). Plain loads: the record
// is the one this CTA overwrites with U later in the walk, so not a read-only (non-coherent) load.
template <int V, int NJ>
__device__ __forceinline__ void state_wg_load_u0(float2 (&x0)[NJ][2], const ChunkBwdArgs& a, const ChainWork& w,
                                                 int64_t c, int h, int wi, int lane) {
  const float* src = a.U + (chunk_slot(a, w.n, w.st, c) * a.Hv + h) * (kC * V) + w.j0;
  for_pairs<NJ>(16 * wi, 0, lane, [&](int jn, int e, int r, int j) {
    x0[jn][e / 2] = w.hom ? make_float2(0.f, 0.f) : *reinterpret_cast<const float2*>(src + r * V + j);
  });
}

// The barrier of a chain's warpgroup: the CTA's where the chain has the CTA to itself (BAR = 0), else named barrier
// BAR of its 128 threads (both chains in one CTA, chunk_bwd_chains_pair_kernel).
template <int BAR>
__device__ __forceinline__ void chain_sync() {
  static_assert(kStateWgThreads == 128, "a chain is one warpgroup");
  if constexpr (BAR == 0)
    __syncthreads();
  else
    named_barrier<128>(BAR);
}

// Per step c: [barrier: stage c landed, S0^T] U = U0 - W S0 (wgmma), U stored, (diag(kb) U)^T split
// [barrier: (diag(kb) U)^T] S <- e_n S + K^T (diag(kb) U) (wgmma, in the registers), then S0^T of chunk c + 1 and its
// record S0 (bf16, the hi part). A summary stores only its end state (store_summary's columns of [M | N]).
// z: the warpgroup's column tile in its chain's grid (chunk_bwd_state_wg_kernel, the chains kernels); sm: its
// shared memory (1024-byte aligned); BAR: its barrier (chain_sync).
template <class E, int V, int Stages, int BAR>
__device__ __forceinline__ void state_wg_chain(const ChunkBwdArgs& a, int z, unsigned char* sm) {
  static_assert(Stages == 1 || Stages == 2, "state (wgmma): one or two input stages");
  constexpr int K = 128, NJ = kBV / 8;
  constexpr bool kF16 = std::is_same_v<E, __half>, kOne = Stages == 1;
  using Smem = StateWgSmem<Stages>;
  auto& s = *reinterpret_cast<Smem*>(sm);
  // the thread within its warpgroup (the wgmma fragments and the copies are the warpgroup's)
  const int tid = threadIdx.x % kStateWgThreads, lane = tid & 31, t4 = lane & 3;
  // the warp index, broadcast from lane 0 so that the compiler sees it warp-uniform
  const int wi = __shfl_sync(0xffffffffu, tid >> 5, 0);
  const int h = blockIdx.y;
  if (a.s0_from_fwd && fused_on(a)) return;  // S0 is chunk_fwd's, and nothing reads U
  ChainWork w;
  if (!chain_work<K>(a, false, &w, z)) return;
  const bool sum = a.chain_mode == kChainSummary, trim = fused_on(a);  // trim: U unread (the fused pass forms it)
  const int r0 = 16 * wi + (lane >> 2);  // this thread's rows (tokens of product 1, keys of a block of product 2)

  // descriptor low words: S0^T (hi; lo at + 8192; key half at + 4096), (diag(kb) U)^T (hi; lo at + 4096), stage 0's
  // W (key half at + 8192; stage 1 at + sizeof(Stage))
  const uint32_t st_addr = smem_addr(&s.st[0][0][0]), ut_addr = smem_addr(&s.ut[0][0]);
  const uint32_t st_lo = wg::desc_lo(st_addr), ut_lo = wg::desc_lo(ut_addr);
  const uint32_t w_lo = wg::desc_lo(smem_addr(&s.stg[0].w[0][0]));

  float sacc[2][NJ][4];  // key block mb: keys 64 mb + r0 (+ 8), columns 8 jn + 2 t4 (+ 1)
#pragma unroll
  for (int mb = 0; mb < 2; ++mb)
    for_pairs<NJ>(64 * mb + 16 * wi, 0, lane, [&](int jn, int e, int i, int j) {
      sacc[mb][jn][e] = chain_start<K, V>(a, w, false, h, a.h0, a.h0_sn, a.h0_sh, a.h0_sr, i, j);
      sacc[mb][jn][e + 1] = chain_start<K, V>(a, w, false, h, a.h0, a.h0_sn, a.h0_sh, a.h0_sr, i, j + 1);
    });
  // S as the next product's operand S0^T (hi, lo) and, but for a summary, as S0 of chunk c in bf16 (pass 4 uses it
  // only as a GEMM operand, gdn-math §10.2): the hi part of the split, from the registers
  const auto put_state = [&](int64_t c) {
    __nv_bfloat16* S0g =
        reinterpret_cast<__nv_bfloat16*>(a.S0) + (chunk_slot(a, w.n, w.st, c) * a.Hv + h) * (K * V) + w.j0;
#pragma unroll
    for (int mb = 0; mb < 2; ++mb) {
      uint32_t xh[NJ][2], xl[NJ][2];
      chunk_detail::split_acc<true>(sacc[mb], xh, xl);
      chunk_detail::store_transposed(st_addr + 4096 * mb, xh, wi, lane);
      chunk_detail::store_transposed(st_addr + 8192 + 4096 * mb, xl, wi, lane);
      if (!sum) {
#pragma unroll
        for (int jn = 0; jn < NJ; ++jn)
#pragma unroll
          for (int hr = 0; hr < 2; ++hr)
            *reinterpret_cast<uint32_t*>(S0g + (64 * mb + r0 + 8 * hr) * V + 8 * jn + 2 * t4) = xh[jn][hr];
      }
    }
  };
  // the chunk's k tile: its stage's (Stages = 2) or the one tile (Stages = 1)
  const auto k_tile = [&](int bf) -> const unsigned char(&)[2][8192] {
    if constexpr (kOne)
      return s.k;
    else
      return s.stg[bf].k;
  };
  float2 x0[NJ][2];  // U0 of this thread's rows r0, r0 + 8 and columns 8 jn + 2 t4 (+ 1)
  if (w.c_begin < w.c_end) {
    if constexpr (kOne) {
      state_wg_copy<E, V, kCopyW | kCopyKWarp>(a, s.stg[0].w, s.stg[0].rows, s.k, nullptr, w, w.c_begin, h, tid);
      state_wg_load_u0<V>(x0, a, w, w.c_begin, h, wi, lane);
    } else {
      state_wg_copy<E, V, kCopyW | kCopyK | kCopyU0>(a, s.stg[0].w, s.stg[0].rows, s.stg[0].k, s.stg[0].u0, w,
                                                     w.c_begin, h, tid);
    }
    cp_async_commit();
    put_state(w.c_begin);
  }
  for (int64_t c = w.c_begin; c < w.c_end; ++c) {
    const int bf = int(c - w.c_begin) & 1;
    const int64_t rec = chunk_slot(a, w.n, w.st, c) * a.Hv + h;
    const int nv = int(w.len - kC * c < kC ? w.len - kC * c : kC);
    const auto& g = s.stg[bf];
    cp_async_wait_all();
    wg::fence_async_smem();  // this thread's copies and S0^T stores, before the async proxy's (wgmma) reads
    chain_sync<BAR>();       // stage bf (and k) landed (every thread's copies); S0^T complete; the other stage free

    // the step's factors and U0 into registers, before product 1 is issued (a branch while a wgmma group is in flight
    // makes ptxas wait for it at the join): e_n = e^{gamma_{n-1}}, kb of rows r0, r0 + 8
    const float gl = g.rows[0][nv - 1], en = expf(gl);
    float kb[2];
    row_kb(kb, g.rows, gl, nv, 16 * wi, lane);
    if constexpr (!kOne) {  // Stages = 1: loaded into x0 during the step before
      for_pairs<NJ>(16 * wi, 0, lane, [&](int jn, int e, int r, int j) {
        x0[jn][e / 2] = w.hom ? make_float2(0.f, 0.f) : *reinterpret_cast<const float2*>(&g.u0[r][j]);
      });
    }

    // S <- e_n S, pinned before product 1 (wg::pin): under product 1, ptxas waits for it before the multiplications
    // (C7517); sunk into product 2's group, the products would wait on it (C7519)
    chunk_detail::scale_state(sacc, en);
    wg::pin(reinterpret_cast<float(&)[2 * 4 * NJ]>(sacc));

    // ---- product 1: U = U0 - W S0 (W_hi S0_lo, W_hi S0_hi; k steps of 16 keys, key half at ks / 4), then W_lo S0_hi
    // where the chunk's beta exceeds 1 (a second group after the wait)
    float u[NJ][4];  // written by the first wgmma (accumulate = 0)
    float(&uv)[4 * NJ] = reinterpret_cast<float(&)[4 * NJ]>(u);
    const uint32_t wst = uint32_t(bf) * uint32_t(sizeof(typename Smem::Stage));
    // W's lo terms where the chunk's beta exceeds 1; with the fused pass on no beta does (pass 0's flag), and the
    // step skips the shuffle reduction ahead of product 1
    const bool w_lo_terms = !trim && beta_above_one(g.rows, lane);
    if (w_lo_terms) {  // W's lo tile of this chunk, copied only where read (prep writes it only there)
      copy_w_tile(s.stg[bf].w + 2, a, rec, 1, tid);
      cp_async_commit();
    }
    {
      wg::fence();
#pragma unroll
      for (int t = 0; t < 2; ++t)
#pragma unroll
        for (int ks = 0; ks < K / 16; ++ks)
          wg::mma_ss_n32_bf16(uv, wg::desc_at(w_lo, wst + (ks >> 2) * 8192 + (ks & 3) * 32),
                              wg::desc_at(st_lo, (t == 0 ? 8192 : 0) + (ks >> 2) * 4096 + (ks & 3) * 32), t + ks > 0);
      wg::commit();
    }
    // while product 1 runs (the issue slots are idle): chunk c + 1's copies into the other stage (Stages = 1: W and
    // the record rows; k and U0 follow under product 2), and K^T of key blocks 0, 1 (keys 64 mb + 16 wi ..; k steps
    // of 16 tokens)
    if (c + 1 < w.c_end) {
      auto& gn = s.stg[bf ^ 1];
      if constexpr (kOne)
        state_wg_copy<E, V, kCopyW>(a, gn.w, gn.rows, nullptr, nullptr, w, c + 1, h, tid);
      else
        state_wg_copy<E, V, kCopyW | kCopyK | kCopyU0>(a, gn.w, gn.rows, gn.k, gn.u0, w, c + 1, h, tid);
      cp_async_commit();
    }
    uint32_t kt[2][4][4];
    chunk_detail::load_kt_frags(k_tile(bf), 16 * wi, lane, kt[0]);
    chunk_detail::load_kt_frags(k_tile(bf), 64 + 16 * wi, lane, kt[1]);
    if constexpr (kOne) {  // chunk c + 1's key pieces that this warp's K^T reads, into the one k tile
      __syncwarp();        // every lane's K^T reads of them before any lane's refill
      if (c + 1 < w.c_end) {
        state_wg_copy<E, V, kCopyKWarp>(a, nullptr, nullptr, s.k, nullptr, w, c + 1, h, tid);
        cp_async_commit();
      }
    }
    wg::wait0();
    if (w_lo_terms) {       // uniform; no group in flight across the branch
      cp_async_wait_all();  // W's lo tile (and chunk c + 1's copies) landed, every thread's, before the async proxy
                            // reads
      wg::fence_async_smem();
      chain_sync<BAR>();
      wg::fence();
#pragma unroll
      for (int ks = 0; ks < K / 16; ++ks)
        wg::mma_ss_n32_bf16(uv, wg::desc_at(w_lo, wst + 16384 + (ks >> 2) * 8192 + (ks & 3) * 32),
                            wg::desc_at(st_lo, (ks >> 2) * 4096 + (ks & 3) * 32), 1);
      wg::commit();
      wg::wait0();
    }
    {  // U = U0 - W S0 stored (fp32, over U0); diag(kb) U as hi + lo, transposed, for product 2
      float* Ug = a.U + rec * (kC * V) + w.j0;
      float du[NJ][4];
      for_pairs<NJ>(16 * wi, 0, lane, [&](int jn, int e, int r, int j) {
        const float2 uv = make_float2(x0[jn][e / 2].x - u[jn][e], x0[jn][e / 2].y - u[jn][e + 1]);
        if (!sum && !trim) *reinterpret_cast<float2*>(Ug + r * V + j) = uv;  // U: pass 4's input
        du[jn][e] = kb[e / 2] * uv.x, du[jn][e + 1] = kb[e / 2] * uv.y;
      });
      uint32_t xh[NJ][2], xl[NJ][2];
      chunk_detail::split_acc<true>(du, xh, xl);
      chunk_detail::store_transposed(ut_addr, xh, wi, lane);
      chunk_detail::store_transposed(ut_addr + 4096, xl, wi, lane);
      wg::fence_async_smem();
    }
    uint32_t ktl[2][4][4];  // f16 k: K^T = hi + lo in bf16 (exact: f16 has 11 significant bits); bf16: unused
    if constexpr (kF16) {
#pragma unroll
      for (int mb = 0; mb < 2; ++mb)
#pragma unroll
        for (int kc = 0; kc < 4; ++kc) ready_frag(InTile<__half>{nullptr, 0}, kt[mb][kc], ktl[mb][kc]);
    }
    chain_sync<BAR>();  // (diag(kb) U)^T complete; every warp's product-1 reads of S0^T done (waited)

    // ---- product 2: S <- e_n S + K^T (diag(kb) U)_lo + K^T (diag(kb) U)_hi (+ K^T_lo (diag(kb) U)_hi for f16)
    wg::fence();
#pragma unroll
    for (int mb = 0; mb < 2; ++mb) {
      float(&sv)[4 * NJ] = reinterpret_cast<float(&)[4 * NJ]>(sacc[mb]);
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n32_bf16(sv, kt[mb][kc], wg::desc_at(ut_lo, 4096 + kc * 32), 1);
      if constexpr (kF16) {
#pragma unroll
        for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n32_bf16(sv, ktl[mb][kc], wg::desc_at(ut_lo, kc * 32), 1);
      }
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n32_bf16(sv, kt[mb][kc], wg::desc_at(ut_lo, kc * 32), 1);
    }
    wg::commit();
    // Stages = 1, while product 2 runs: chunk c + 1's U0 into x0 (this thread's last use of chunk c's was U above)
    if constexpr (kOne) {
      if (c + 1 < w.c_end) state_wg_load_u0<V>(x0, a, w, c + 1, h, wi, lane);
    }
    wg::wait0();
    if (c + 1 < w.c_end) put_state(c + 1);
  }
  if (sum) {  // this CTA's columns of the item's [M | N]
    float* dst = chain_mn<K, V>(a, w.reverse, w.item, h) + (w.hom ? 0 : K) + w.j0;
#pragma unroll
    for (int mb = 0; mb < 2; ++mb)
      for_pairs<NJ>(64 * mb + 16 * wi, 0, lane, [&](int jn, int e, int i, int j) {
        *reinterpret_cast<float2*>(dst + i * (K + V) + j) = make_float2(sacc[mb][jn][e], sacc[mb][jn][e + 1]);
      });
  }
}

// Stages = 1 fits two CTAs per SM (__launch_bounds__(128, 2): <= 255 registers a thread).
template <class E, int V, int Stages>
__global__ void __launch_bounds__(kStateWgThreads, Stages == 1 ? 2 : 1)
    chunk_bwd_state_wg_kernel(const ChunkBwdArgs a) {
  state_wg_chain<E, V, Stages, 0>(a, int(blockIdx.z), chunk_detail::swizzled_smem());
}

}  // namespace flashgdn::cuda::bwd_detail
