// The state pass of the two-pass prefill on Hopper warpgroup MMA (wgmma), K = V = 128: the same chain and the same
// rounding points as chunk_fwd_state.cuh (gdn-math §5.3-§5.5, records from chunk_fwd_intra.cuh), with every product
// on m64n64k16 and the operands read once per warpgroup instead of once per warp.
//
// One CTA (512 threads) owns (work item, value head) and both 64-column value halves hf. Warpgroup (hf, role):
// role 0 holds state rows (keys) 0-63 of half hf, role 1 keys 64-127, as an m64n64 fp32 accumulator (32 registers
// per thread) for the whole walk. Shared memory holds the 16-bit operands in the 128-byte-swizzled K-major layout
// (cuda/common/wgmma.cuh): q and k [token][key], the state copy S0^T [value][key], R^T and U^T [value][token]
// (written transposed from accumulators by stmatrix.trans). Per chunk:
//
//   phase 1   role 0: R = V - diag(ek) (K S0) -> R^T          role 1: O = diag(eq) (Q S0), kept in registers
//             (8 + 8 wgmma per half, A and B from shared memory)
//   phase 2   role 0: U = (A diag(beta)) R, A diag(beta) hi + lo from the record's fragments as register A operands
//             (8 wgmma; U kept as hi + lo: U^T_hi, U^T_lo)                                 role 1: waits
//   phase 3a  role 1: O += P_hi U_hi + P_lo U_hi + P_hi U_lo (12 wgmma, P from registers), stored
//   phase 3b  both:   S <- en S + (diag(dk) K)^T U_hi for their 64 keys (4 wgmma, K^T by ldmatrix.trans from the
//             swizzled k tile, scaled by dk in registers), then S0^T for the next chunk
//
// Barriers per chunk: one CTA-wide (the double-buffered q, k, v and record tiles, issued by cp.async one chunk
// ahead), one per role-0 warpgroup (R^T complete), one per half (U^T complete). The causal zero blocks of
// A diag(beta) and P are multiplied as zeros (a warpgroup instruction cannot skip a warp's block): 37.5% of phases 2
// and 3a. Tensor work per chunk and CTA: 32 (phase 1) + 16 + 24 + 16 = 88 m64n64k16 = 11.5 MFLOP, ~2.9k cycles at
// the SM's dense rate; the mma.sync kernel (chunk_fwd_state.cuh) takes ~11.5k cycles per chunk, bound by the
// ldmatrix traffic of its per-warp operand reloads (docs/chunk_fwd.md).
#pragma once

#include <type_traits>

#include "cuda/chunk_fwd/chunk_fwd_common.cuh"
#include "cuda/common/wgmma.cuh"

namespace flashgdn::cuda::chunk_detail {

struct StateWgSmem {
  static constexpr int LDV = kBV + 8;  // padded value rows: conflict-free 4-byte reads in the accumulator layout
  unsigned char q[2][2][8192];         // [buffer][key half][64 tokens x 64 keys], swizzled
  unsigned char k[2][2][8192];         // [buffer][key half][64 tokens x 64 keys], swizzled
  unsigned char st[2][2][8192];        // [value half][key half][64 values x 64 keys]: S0^T (16-bit, gdn-math §10.2)
  unsigned char rt[2][8192];           // [value half][64 values x 64 tokens]: R^T
  unsigned char ut[2][2][8192];        // [value half][hi, lo][64 values x 64 tokens]: U^T
  uint32_t rec[2][kRecBytes / 4];      // [buffer] the chunk's record (header | A diag(beta) | P)
  uint16_t v[2][2][kC * LDV];          // [buffer][value half][token][64] value tile
};

// Store a warp's 16 x 64 block of an m64n64 accumulator (rows 16 wi .., packed 16-bit pairs: x[jn][0] row lane / 4,
// x[jn][1] row lane / 4 + 8, columns 8 jn + 2 (lane % 4)) transposed into a swizzled [64 columns][64 rows] region.
__device__ __forceinline__ void store_transposed(unsigned char* region, const uint32_t (&x)[8][2], int wi, int lane) {
  const int mi = lane >> 3, rho = lane & 7;
#pragma unroll
  for (int np = 0; np < 4; ++np) {
    const int col = 16 * np + 8 * (mi >> 1) + rho;
    wg::stsm_x4_t(region + wg::swz(col, 2 * wi + (mi & 1)), x[2 * np][0], x[2 * np][1], x[2 * np + 1][0],
                  x[2 * np + 1][1]);
  }
}

template <bool BF16>
__device__ __forceinline__ void pack_acc(const float (&d)[8][4], uint32_t (&x)[8][2]) {
#pragma unroll
  for (int jn = 0; jn < 8; ++jn) {
    x[jn][0] = Elem<BF16>::pack(d[jn][0], d[jn][1]);
    x[jn][1] = Elem<BF16>::pack(d[jn][2], d[jn][3]);
  }
}

// The m16n8k16 A fragments of this warp's row block wi of a causal 64 x 64 record matrix (fr: the hi part, fr + 32:
// the lo part), k-steps kc > wi zero.
__device__ __forceinline__ void load_causal_frags(const uint4* fr, int wi, int lane, uint32_t (&f)[4][4]) {
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) {
    uint4 x = make_uint4(0, 0, 0, 0);
    if (kc <= wi) x = fr[(wi * (wi + 1) / 2 + kc) * 64 + lane];
    f[kc][0] = x.x, f[kc][1] = x.y, f[kc][2] = x.z, f[kc][3] = x.w;
  }
}

template <bool BF16>
__global__ void __launch_bounds__(512, 1) chunk_fwd_state_wg_kernel(const ChunkKernelArgs a) {
  using E = typename Elem<BF16>::T;
  using P = Elem<BF16>;
  constexpr int K = 128, LDV = StateWgSmem::LDV;
  extern __shared__ unsigned char smem_raw[];
  StateWgSmem& sm = *reinterpret_cast<StateWgSmem*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));

  const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g8 = lane >> 2, t4 = lane & 3;
  const int hf = w >> 3, wg_role = (w >> 2) & 1, wi = w & 3;  // warpgroup (hf, role), warp wi of it
  const int h = blockIdx.y, tile = blockIdx.z * 2 + hf;
  const int64_t item = blockIdx.x;
  const int hk = h / a.group;

  ChunkWork wk;
  if (!resolve_work(a, item, &wk)) return;
  const int64_t n = wk.n, bidx = wk.bidx, t0 = wk.t0, len = wk.len, c_begin = wk.c_begin, c_end = wk.c_end;
  const bool summary = a.mode == kModeSummary;
  const bool has_output = !summary;
  const int ntiles = summary ? (K + static_cast<int>(a.V)) / 64 : static_cast<int>(a.V) / 64;
  const bool active = tile < ntiles;             // the last half may have no tile (summary, odd count)
  const bool m_tile = summary && tile < K / 64;  // augmented columns of M: identity start, zero values
  const bool has_values = active && !m_tile;
  const int vcol0 = summary ? (tile - K / 64) * kBV : tile * kBV;
  const int rw = 64 * wg_role + 16 * wi;     // first state row (key) of this warp
  const int r0 = 16 * wi + g8, r1 = r0 + 8;  // chunk rows of this thread in phases 1-3a

  // ---- start state: fp32 accumulator and the transposed 16-bit copy
  float sacc[1][8][4];
  {
    const StateRef src = start_state(a, wk, item, h, K);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = rw + g8 + (e >> 1) * 8, j = nt * 8 + 2 * t4 + (e & 1);
        float val = 0.f;
        if (m_tile)
          val = (i == tile * kBV + j) ? 1.f : 0.f;
        else if (src.p && active)
          val = src.p[src.off(i, vcol0 + j)];
        sacc[0][nt][e] = val;
      }
    uint32_t x[8][2];
    pack_acc<BF16>(sacc[0], x);
    store_transposed(sm.st[hf][wg_role], x, wi, lane);
  }

  const E* qbase = static_cast<const E*>(a.q) + bidx * a.q_sb + hk * a.q_sh;
  const E* kbase = static_cast<const E*>(a.k) + bidx * a.k_sb + hk * a.k_sh;
  const E* vbase = static_cast<const E*>(a.v) + bidx * a.v_sb + h * a.v_sh + vcol0;
  E* obase = static_cast<E*>(a.o) + bidx * a.o_sb + h * a.o_sh + vcol0;

  // Every load of chunk ck into buffer bf (rows past the sequence end zero-filled by plain stores).
  auto issue = [&](int64_t ck, int bf) {
    const int64_t nv = len - ck * kC, tok = t0 + ck * kC;
    {
      const int64_t slot = chunk_slot(a, n, t0, ck);
      const uint4* src = reinterpret_cast<const uint4*>(a.rec + (slot * a.Hv + h) * kRecBytes);
      uint4* dst = reinterpret_cast<uint4*>(sm.rec[bf]);
      const int nvec = static_cast<int>((has_output ? kRecBytes : kRecHdrBytes + kRecABytes) / 16);
      for (int i = tid; i < nvec; i += 512) cp_async16(dst + i, src + i);
    }
#pragma unroll
    for (int p = 0; p < 2; ++p) {  // 64 rows x 16 vectors of 16 bytes per tile
      const int i = tid + 512 * p, r = i >> 4, vv = i & 15;
      unsigned char* dk = &sm.k[bf][vv >> 3][wg::swz(r, vv & 7)];
      unsigned char* dq = &sm.q[bf][vv >> 3][wg::swz(r, vv & 7)];
      if (r < nv) {
        cp_async16(dk, kbase + (tok + r) * a.k_st + vv * 8);
        if (has_output) cp_async16(dq, qbase + (tok + r) * a.q_st + vv * 8);
      } else {
        *reinterpret_cast<uint4*>(dk) = make_uint4(0, 0, 0, 0);
        if (has_output) *reinterpret_cast<uint4*>(dq) = make_uint4(0, 0, 0, 0);
      }
    }
    if (has_values) {  // 64 rows x 8 vectors of this half's value tile over its 256 threads
      const int ht = tid & 255;
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        const int r = p * 32 + (ht >> 3), vec = ht & 7;
        uint16_t* d = &sm.v[bf][hf][r * LDV + vec * 8];
        if (r < nv)
          cp_async16(d, vbase + (tok + r) * a.v_st + vec * 8);
        else
          *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
      }
    }
  };

  if (c_begin < c_end) issue(c_begin, 0);
  cp_async_commit();

  // The two roles walk the chunks in separate instantiations of the loop (the same barriers per chunk), so the
  // live ranges are per role: O (32 registers, role 1) is never live beside U and A diag(beta) (role 0).
  auto walk = [&](auto role_tag) {
    constexpr int role = decltype(role_tag)::value;
    for (int64_t c = c_begin; c < c_end; ++c) {
      const int bf = static_cast<int>((c - c_begin) & 1);
      const int64_t tok0 = c * kC;
      const int64_t nvalid = (len - tok0) < kC ? (len - tok0) : kC;
      cp_async_wait_all();
      wg::fence_async_smem();  // this thread's cp.async data, zero fills and stmatrix stores, before wgmma reads them
      __syncthreads();         // B0: chunk c's tiles have landed; chunk c - 1 is done with every buffer of c + 1
#ifndef FGDN_WG_NOLOAD  // (experiment: compute-only timing, wrong results)
      if (c + 1 < c_end) issue(c + 1, bf ^ 1);
#endif
      cp_async_commit();

      const float* hdr = reinterpret_cast<const float*>(sm.rec[bf]);
      const uint4* afr = reinterpret_cast<const uint4*>(sm.rec[bf] + kRecHdrBytes / 4);
      const uint4* pfr = reinterpret_cast<const uint4*>(sm.rec[bf] + (kRecHdrBytes + kRecABytes) / 4);
      const uint32_t ut_hi = wg::smem_u32(sm.ut[hf][0]), ut_lo = wg::smem_u32(sm.ut[hf][1]);

      // ---- phase 1: D = K S0 (role 0) or Q S0 (role 1), 64 x 64 over the 128 keys
      float d[8][4];
      float(&d32)[32] = reinterpret_cast<float(&)[32]>(d);
#pragma unroll
      for (int i = 0; i < 32; ++i) d32[i] = 0.f;
      if (active && (role == 0 || has_output)) {
        const uint32_t abase = wg::smem_u32(role ? &sm.q[bf][0][0] : &sm.k[bf][0][0]);
        const uint32_t bbase = wg::smem_u32(&sm.st[hf][0][0]);
        wg::fence();
#pragma unroll
        for (int ks = 0; ks < K / 16; ++ks) {
          const uint32_t off = (ks >> 2) * 8192 + (ks & 3) * 32;
          wg::mma_ss<BF16>(d32, wg::desc(abase + off), wg::desc(bbase + off), 1);
        }
        wg::commit();
        wg::wait0();
      }

      if constexpr (role == 0) {
        if (active) {  // R = V - diag(ek) K S0 -> R^T
          const uint16_t* vt = sm.v[bf][hf];
          const float ek0 = hdr[r0], ek1 = hdr[r1];
          uint32_t x[8][2];
#pragma unroll
          for (int jn = 0; jn < 8; ++jn) {
            const int j = 8 * jn + 2 * t4;
            float2 v0 = make_float2(0.f, 0.f), v1 = v0;
            if (has_values)  // M tiles of the summary: zero values
              v0 = P::unpack(*reinterpret_cast<const uint32_t*>(&vt[r0 * LDV + j])),
              v1 = P::unpack(*reinterpret_cast<const uint32_t*>(&vt[r1 * LDV + j]));
            x[jn][0] = P::pack(v0.x - ek0 * d[jn][0], v0.y - ek0 * d[jn][1]);
            x[jn][1] = P::pack(v1.x - ek1 * d[jn][2], v1.y - ek1 * d[jn][3]);
          }
          store_transposed(sm.rt[hf], x, wi, lane);
          wg::fence_async_smem();
        }
        wg::bar_sync(1 + hf, 128);  // B1: R^T complete (its only reader is this warpgroup's wgmma)

        // ---- phase 2: U = (A diag(beta)) R, hi + lo parts of A diag(beta); U^T as hi + lo
        if (active) {
          uint32_t af[4][4];
          const uint32_t rbase = wg::smem_u32(sm.rt[hf]);
          float u[8][4];
          float(&u32)[32] = reinterpret_cast<float(&)[32]>(u);
#pragma unroll
          for (int i = 0; i < 32; ++i) u32[i] = 0.f;
#pragma unroll
          for (int part = 0; part < 2; ++part) {  // hi, then lo: 16 registers of fragments live at a time
            load_causal_frags(afr + 32 * part, wi, lane, af);
            wg::fence();
#pragma unroll
            for (int kc = 0; kc < 4; ++kc) wg::mma_rs<BF16>(u32, af[kc], wg::desc(rbase + kc * 32), 1);
            wg::commit();
            wg::wait0();
          }
          uint32_t xh[8][2], xl[8][2];
#pragma unroll
          for (int jn = 0; jn < 8; ++jn)
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
              xh[jn][hr] = P::pack(u[jn][2 * hr], u[jn][2 * hr + 1]);
              const float2 f = P::unpack(xh[jn][hr]);
              xl[jn][hr] = P::pack(u[jn][2 * hr] - f.x, u[jn][2 * hr + 1] - f.y);
            }
          store_transposed(sm.ut[hf][0], xh, wi, lane);
          store_transposed(sm.ut[hf][1], xl, wi, lane);
          wg::fence_async_smem();
        }
      } else if (active && has_output) {  // O = diag(eq) Q S0
        const float eq0 = hdr[64 + r0], eq1 = hdr[64 + r1];
#pragma unroll
        for (int jn = 0; jn < 8; ++jn) d[jn][0] *= eq0, d[jn][1] *= eq0, d[jn][2] *= eq1, d[jn][3] *= eq1;
      }
      wg::bar_sync(3 + hf, 256);  // B2: U^T of this half complete

      if (active) {
        // ---- phase 3a: O += P U with P and U as hi + lo (role 1), to global
        if (role == 1 && has_output) {
          // two groups (P_hi, then P_lo) so that only 16 registers of fragments are live beside O and the state
          uint32_t pf[4][4];
          load_causal_frags(pfr, wi, lane, pf);
          wg::fence();
#pragma unroll
          for (int kc = 0; kc < 4; ++kc) wg::mma_rs<BF16>(d32, pf[kc], wg::desc(ut_hi + kc * 32), 1);
#pragma unroll
          for (int kc = 0; kc < 4; ++kc) wg::mma_rs<BF16>(d32, pf[kc], wg::desc(ut_lo + kc * 32), 1);
          wg::commit();
          wg::wait0();
          load_causal_frags(pfr + 32, wi, lane, pf);
          wg::fence();
#pragma unroll
          for (int kc = 0; kc < 4; ++kc) wg::mma_rs<BF16>(d32, pf[kc], wg::desc(ut_hi + kc * 32), 1);
          wg::commit();
          wg::wait0();
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const int r = hr ? r1 : r0;
            if (r < nvalid) {
              E* orow = obase + (t0 + tok0 + r) * a.o_st;
#pragma unroll
              for (int jn = 0; jn < 8; ++jn)
                *reinterpret_cast<uint32_t*>(orow + jn * 8 + 2 * t4) = P::pack(d[jn][2 * hr], d[jn][2 * hr + 1]);
            }
          }
        }

        // ---- phase 3b: S <- en S + (diag(dk) K)^T U_hi for keys rw .. rw + 15 of this warp. K^T's A fragments come
        // from ldmatrix.trans of the swizzled k tile: register e holds tokens 16 kc + 2 t4 (+ 8 for e >= 2) and + 1,
        // so diag(dk) is a per-register product before the rounding to 16 bits (one rounding of dk k).
        const float en = hdr[192];
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) sacc[0][nt][e] *= en;
        uint32_t ak[4][4];
#pragma unroll
        for (int kc = 0; kc < 4; ++kc) {
          const int s0 = 16 * kc + 2 * t4;
          const float d0 = hdr[128 + s0], d1 = hdr[128 + s0 + 1], d8 = hdr[128 + s0 + 8], d9 = hdr[128 + s0 + 9];
          const int tr = 16 * kc + (lane & 7) + ((lane >> 4) & 1) * 8;  // token row of this lane's address
          const int key = rw + ((lane >> 3) & 1) * 8;                   // first key of its 16-byte chunk
          ldsm_x4_t(ak[kc], &sm.k[bf][key >> 6][wg::swz(tr, (key & 63) >> 3)]);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float2 f = P::unpack(ak[kc][e]);
            ak[kc][e] = e < 2 ? P::pack(f.x * d0, f.y * d1) : P::pack(f.x * d8, f.y * d9);
          }
        }
        float(&s32)[32] = reinterpret_cast<float(&)[32]>(sacc);
        wg::fence();
#pragma unroll
        for (int kc = 0; kc < 4; ++kc) wg::mma_rs<BF16>(s32, ak[kc], wg::desc(ut_hi + kc * 32), 1);
        wg::commit();
        wg::wait0();
        // the 16-bit copy for the next chunk's phase 1 (every wgmma read of it was waited before B2)
        uint32_t x[8][2];
        pack_acc<BF16>(sacc[0], x);
        store_transposed(sm.st[hf][role], x, wi, lane);

        store_checkpoint(a, wk, c, h, vcol0, sacc, rw, 0, g8, t4);
      }
    }
  };
  if (wg_role)
    walk(std::integral_constant<int, 1>{});
  else
    walk(std::integral_constant<int, 0>{});
  cp_async_wait_all();  // no copy may be in flight at exit

  // ---- final state (a zero-length sequence stores its start state unchanged); summary columns from tile 0
  if (!active) return;
  const StateRef dst = end_state(a, wk, item, h, K);
  if (dst.p) store_state(dst, sacc, rw, 0, summary ? tile * kBV : vcol0, g8, t4);
}

// grid = (items, Hv, ceil(tiles / 2)): both value halves of V = 128 per CTA.
template <bool BF16>
int launch_chunk_state_wg(const ChunkKernelArgs& a, int64_t items, int64_t tiles, void* stream) {
  const size_t smem = sizeof(StateWgSmem) + 1024;  // + alignment of the swizzled regions to 1024 bytes
  static std::atomic<uint64_t> done_mask{0};
  if (const int e = prepare_launch(chunk_fwd_state_wg_kernel<BF16>, smem, done_mask)) return e;
  if (items <= 0 || a.Hv <= 0 || tiles <= 0) return 0;
  const dim3 grid(static_cast<unsigned>(items), static_cast<unsigned>(a.Hv), static_cast<unsigned>((tiles + 1) / 2));
  chunk_fwd_state_wg_kernel<BF16><<<grid, 512, smem, static_cast<cudaStream_t>(stream)>>>(a);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace flashgdn::cuda::chunk_detail
