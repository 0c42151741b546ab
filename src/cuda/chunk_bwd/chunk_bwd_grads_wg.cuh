// Pass 4 of the backward (the within-chunk gradients, gdn-math §7.3) on Hopper warpgroup MMA (wgmma, sm_90a), K = V =
// 128, bf16 inputs: the products, operand splits and fp32 accumulation of chunk_bwd_grads_kernel (the same inputs:
// prep's records, pass 2's U and S0, pass 3's dU and dS; the same outputs: dq, dk per value head, dv, dbeta and dg in
// the scratch), on wgmma m64n64k16 / m64n32k16 from 128-byte-swizzled K-major tiles (cuda/common/wgmma.cuh) and
// register A fragments. Included by chunk_bwd_kernels.cuh after pass 4 (its helpers) and the wgmma chains.
//
// One CTA of two warpgroups per (chunk slot, q/k head): grid (slots, Hqk), 256 threads, one CTA per SM (~210 KiB),
// walking the q/k head's Hv / Hqk value heads in order, one item each. dq and dk are summed over them here (pass 5a's
// sum otherwise, in the same order: the same bits): an item after the first adds the rows the one before stored (the
// same thread's addresses, L2 hits), so the scratch holds one row per (token, q/k head) instead of Hv / Hqk.
// Warpgroup j owns keys 64 j .. 64 j + 63 of the key-row products (dQ^T, dK^T [key][token], kept in registers from
// the first term to the store), value half j of the token-row ones (dV', dU^T) and columns 32 j .. 32 j + 31 of the
// 64 x 64 ones (dP, dA, Y, dL). Notation as in pass 4: X = scale Lower(dO U^T) (.) D, R0 = X diag(rho_k), R1 =
// diag(rho_q) X, Kbar = diag(kb) K^. Per item, in order (a CTA barrier between phases that read what the other
// warpgroup wrote):
//
//   0  loads in three cp.async groups, in the order the phases read them (q, k, dO, U raw; S0, dU raw; A, v), so
//      that the last two land under phase 1; dS by plain loads into registers. U split into its tiles.
//   1  dP = dO U^T and Q K^T: 24 n32; then dKbar^T = dS U^T (dS as register A fragments, split; U split): 24 n64,
//      issued while X, Z = dP (.) P -> R0 (rows), R1^T (transposed), both split, are formed; dK^T = diag(kb)
//      dKbar^T, tau.
//   2  dQ^T = K^T R0^T ... as K^T (X diag(rho_k))^T: 8 n64 (K^T by ldmatrix.trans); dK^T += Q^T R1: 8 n64; scale
//      Gamma dO S0^T as S0 dO^T: 8 n64 -> dQ^T, its dgamma term. dU^T (value half j) and dU (rows, value half j)
//      split from its raw fp32 copy.
//   3  dV' = A^T dU (A^T by ldmatrix.trans of the split A): 12 n64 -> dv = diag(b) dV', v . dV', dV' split (rows);
//      dW = -dU S0^T: 16 n64 -> split (rows).
//   4  A^T dW = -dV' S0^T as -(S0 dV'^T): 16 n64 -> dK^T += diag(b e^gamma) (A^T dW)^T, k^ . A^T dW;
//      dA = dU V^T diag(b) + dW K^T diag(b e^gamma rho_k), strictly lower: 32 n32 -> dA^T split (transposed).
//   5  Y = A^T dA: 12 n32 -> split (rows).
//   6  dL = -StrictLower(Y A^T): 12 n32; E = K^ K^^T (.) D: 8 n32 -> dL . E, Z += dL_b (.) E, dL_b (.) D (fp32).
//   7  R2 = (dL_b (.) D + its transpose) diag(rho_k) split; dK^T += K^T R2^T: 8 n64.
//   8  dq, dk staged through shared memory (16-byte row stores), the row sums, dgamma -> dg, dbeta.
//
// Every wgmma group is waited within its phase (none across a barrier), so the barriers order the async-proxy reads
// against the next generic writes; generic writes that a wgmma reads are fenced (fence.proxy.async) before the barrier.
#pragma once

#include "cuda/chunk_fwd/chunk_fwd_state_wg.cuh"
#include "cuda/common/wgmma.cuh"

namespace flashgdn::cuda::bwd_detail {

constexpr int kGradWgThreads = 256;  // two warpgroups

// Shared memory (every tile 64 rows x 128 bytes, 128-byte swizzled, 1024-byte aligned). Dead regions are reused:
// r holds U's raw fp32 copy (phase 0), R0 and R1^T (1-2), dU split (2-4); u holds U split (0-1), dV' split (3-4), the
// fp32 dL_b (.) D and R2 split (6-7); dut holds dU's raw fp32 copy (0-2), dU^T split (2-3), dA^T and Y split (4-6),
// dk staged (8); q and dO hold dW split (3-4); q and k hold dq staged (8).
struct alignas(1024) GradWgSmem {
  unsigned char q[2][8192];        // q [key half][64 tokens x 64 keys]; later dW hi [key half]
  unsigned char k[2][8192];        // k [key half]
  unsigned char v[2][8192];        // v [value half]
  unsigned char dO[2][8192];       // dO [value half]; later dW lo [key half]
  unsigned char a[2][8192];        // A [hi, lo][64 rows x 64 columns] (A_rc at row r)
  unsigned char s0[2][2][8192];    // S0 [key half][value half][64 keys x 64 values]
  unsigned char u[2][2][8192];     // U [hi, lo][value half][64 tokens x 64 values]
  unsigned char dut[2][2][8192];   // dU^T [hi, lo][value half][64 values x 64 tokens]
  unsigned char r[2][2][8192];     // R0 [hi, lo] (r[0]) and R1^T [hi, lo] (r[1]); dU [hi, lo][value half]
  float rows[4][kC];               // the record's gamma, rho_q, rho_k, beta
  float eg[kC], kb[kC];            // per token t < nv: e^{gamma_t}, e^{gamma_{nv-1} - gamma_t} (0 past nv)
  float pk[3][8][kC];              // per-token sums over each warp's keys: q^ . dQ_S0, tau, k^ . A^T dW
  float pv[2][2][kC];              // per-token sums over each warpgroup's columns: v . dV', dL . E
  float zrow[2][kC], zcol[4][kC];  // Z = dD (.) D: row sums per warpgroup, column sums per warp of 16 rows
  float red[8];                    // <S0, dS>_F per warp
  int64_t tok[2];                  // the items' batch entry sb and first token t0 (read where used: fewer registers)
};
static_assert(sizeof(GradWgSmem) + 1024 <= 227 * 1024, "grads (wgmma): one CTA's shared memory");

namespace gwg {

// Byte offset of 16-bit element (r, c) in a swizzled [64][64] tile.
__device__ __forceinline__ uint32_t at16(int r, int c) {
  return wg::swz(r, c >> 3) + uint32_t((c & 7) * 2);
}

// A warp's 16-row block of an accumulator with NJ 8-column groups (x: packed pairs, the layout of store_rows) into
// rows 16 wi .. of a swizzled tile at column chunk c0 + .. (c0: 8-column chunks from the tile's left edge).
template <int NJ>
__device__ __forceinline__ void store_rows_at(uint32_t tile, const uint32_t (&x)[NJ][2], int c0, int wi, int lane) {
  const int mi = lane >> 3, row = 16 * wi + (mi & 1) * 8 + (lane & 7);
#pragma unroll
  for (int np = 0; np < NJ / 2; ++np)
    wg::stsm_x4(tile + wg::swz(row, c0 + 2 * np + (mi >> 1)), x[2 * np][0], x[2 * np][1], x[2 * np + 1][0],
                x[2 * np + 1][1]);
}

// An fp32 accumulator split into hi + lo and stored as rows (store_rows_at) or transposed (store_transposed) into the
// tiles at hi and lo.
template <int NJ>
__device__ __forceinline__ void put_rows(uint32_t hi, uint32_t lo, const float (&d)[NJ][4], int c0, int wi, int lane) {
  uint32_t xh[NJ][2], xl[NJ][2];
  chunk_detail::split_acc<true>(d, xh, xl);
  store_rows_at(hi, xh, c0, wi, lane);
  store_rows_at(lo, xl, c0, wi, lane);
}
template <int NJ>
__device__ __forceinline__ void put_transposed(uint32_t hi, uint32_t lo, const float (&d)[NJ][4], int wi, int lane) {
  uint32_t xh[NJ][2], xl[NJ][2];
  chunk_detail::split_acc<true>(d, xh, xl);
  chunk_detail::store_transposed(hi, xh, wi, lane);
  chunk_detail::store_transposed(lo, xl, wi, lane);
}

// The A fragments of T^T for rows rw .. rw + 15 of T^T (columns of the stored tile), 4 k steps over the tile's rows:
// ldmatrix.trans of one swizzled [64][64] tile. chunk_detail::load_kt_frags for a tile known to be one half: no
// select of the half per fragment (the measured kernel's code; load_kt_frags here changes its cubin).
__device__ __forceinline__ void load_t_frags(const unsigned char* tile, int rw, int lane, uint32_t (&f)[4][4]) {
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) {
    const int tr = 16 * kc + (lane & 7) + ((lane >> 4) & 1) * 8;
    const int col = rw + ((lane >> 3) & 1) * 8;
    ldsm_x4_t(f[kc], tile + wg::swz(tr, col >> 3));
  }
}

// Row r and column c of element e of 8-column group jn in a warp's 16-row block (warp wi of its warpgroup) of an
// m64n32 accumulator that holds columns 32 wgi .. 32 wgi + 31 of a 64 x 64 product (dP, dA, Y, dL).
struct RowCol {
  int r, c;
};
__device__ __forceinline__ RowCol n32_at(int wi, int wgi, int g, int t4, int jn, int e) {
  return {16 * wi + g + 8 * (e >> 1), 32 * wgi + 8 * jn + 2 * t4 + (e & 1)};
}

// Sum over the 8 lanes of equal t4 (the rows g of a warp's 16-row block): lanes 0..3 end with the column sums.
__device__ __forceinline__ float col_sum(float x) {
  return lane_sum<4, 32>(x);
}

// The sums over a warp's 16 rows (the lanes of equal t4) of its elements x[jn][u], column 8 jn + 2 t4 + u of a
// 8 NJ-column block, into dst[column] (ADD: added there; the same lanes own the same columns every time): Z's column
// sums (NJ = 4, the warpgroup's 32 columns) and the per-token sums over a warp's 16 keys of a key-row block (NJ = 8).
template <int NJ, bool ADD = false>
__device__ __forceinline__ void put_col_sums(float* dst, const float (&x)[NJ][2], int g, int t4) {
#pragma unroll
  for (int jn = 0; jn < NJ; ++jn)
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const float y = col_sum(x[jn][u]);
      if (g == 0) {
        float& d = dst[8 * jn + 2 * t4 + u];
        d = ADD ? d + y : y;
      }
    }
}

// d (+)= A B over 128 (8 k steps of 16), both operands from shared memory: A [64][128] and B^T [N][128], each two
// swizzled [rows][64] halves 8 KiB apart, at byte offsets a_off, b_off from the descriptor low words a, b. first: d is
// overwritten (accumulate = 0 on the first k step). N = 64 or 32.
template <int N>
__device__ __forceinline__ void mma_ss_k128(float (&d)[N / 2], uint32_t a, uint32_t a_off, uint32_t b, uint32_t b_off,
                                            bool first) {
#pragma unroll
  for (int ks = 0; ks < 8; ++ks) {
    const uint32_t k = uint32_t(ks >> 2) * 8192 + uint32_t(ks & 3) * 32;
    if constexpr (N == 64)
      wg::mma_ss_n64<true>(d, wg::desc_at(a, a_off + k), wg::desc_at(b, b_off + k), first ? ks > 0 : 1);
    else
      wg::mma_ss_n32_bf16(d, wg::desc_at(a, a_off + k), wg::desc_at(b, b_off + k), first ? ks > 0 : 1);
  }
}

// d = A^T B over the chunk's 64 rows, A split (the record's hi and lo tiles, A^T as register fragments by
// ldmatrix.trans), B split with B^T [N][64] at byte offsets hi, lo from the descriptor low word b: (A_lo, B_hi),
// (A_hi, B_lo), (A_hi, B_hi), one wgmma group, waited. N = 64 or 32.
template <int N>
__device__ __forceinline__ void at_times_split(float (&d)[N / 8][4], const unsigned char (&a)[2][8192], uint32_t b,
                                               uint32_t hi, uint32_t lo, int wi, int lane) {
  uint32_t ah[4][4], al[4][4];
  load_t_frags(&a[0][0], 16 * wi, lane, ah);
  load_t_frags(&a[1][0], 16 * wi, lane, al);
  float(&dv)[N / 2] = reinterpret_cast<float(&)[N / 2]>(d);
  const auto mma = [&](const uint32_t(&f)[4], uint32_t off, int acc) {
    if constexpr (N == 64)
      wg::mma_rs_n64<true>(dv, f, wg::desc_at(b, off), acc);
    else
      wg::mma_rs_n32_bf16(dv, f, wg::desc_at(b, off), acc);
  };
  wg::fence();
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) mma(al[kc], hi + kc * 32, kc > 0);
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) mma(ah[kc], lo + kc * 32, 1);
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) mma(ah[kc], hi + kc * 32, 1);
  wg::commit();
  wg::wait0();
}

// One warp's end of an item: lane l holds rows l and l + 32 of dgamma, dbeta and tau (the pass's per-row sums; rows
// past nv zero); dgamma_{n-1} += last (e_n <S0, dS>_F), then dg_r = sum_{j >= r} dgamma_j + sum_{j < r} tau_j, the
// tau terms of gdn-math §7.3 step 3 as an exclusive prefix (no cancellation of O(1) terms where dg is tiny: g = -30),
// stored with dbeta for rows r < nv at dgh / dbh[row0 + r Hv].
__device__ __forceinline__ void store_dg_dbeta(const ChunkBwdArgs& a, int64_t row0, int nv, int lane,
                                               const float (&dgam)[2], const float (&dbeta)[2], const float (&tau)[2],
                                               float last) {
  float tsum[2] = {tau[0], tau[1]}, gsum[2] = {dgam[0], dgam[1]};
  if (lane == ((nv - 1) & 31)) {  // row nv - 1's half by a select (an indexed local array goes to memory)
    if (nv > 32)
      gsum[1] += last;
    else
      gsum[0] += last;
  }
  // rows past nv carry zeros (tau, dgamma: their factors are zero), so the scans run over all 64 rows
#pragma unroll
  for (int m = 1; m < 32; m <<= 1) {  // inclusive prefix (tau) and suffix (dgamma) within each half
    const float tp0 = __shfl_up_sync(0xffffffffu, tsum[0], m), tp1 = __shfl_up_sync(0xffffffffu, tsum[1], m);
    const float gs0 = __shfl_down_sync(0xffffffffu, gsum[0], m), gs1 = __shfl_down_sync(0xffffffffu, gsum[1], m);
    if (lane >= m) tsum[0] += tp0, tsum[1] += tp1;
    if (lane + m < 32) gsum[0] += gs0, gsum[1] += gs1;
  }
  const float t_lo = __shfl_sync(0xffffffffu, tsum[0], 31), g_hi = __shfl_sync(0xffffffffu, gsum[1], 0);
  // exclusive prefixes: the inclusive one of the lane before (no subtraction of tau_r)
  float ex[2] = {__shfl_up_sync(0xffffffffu, tsum[0], 1), __shfl_up_sync(0xffffffffu, tsum[1], 1)};
  if (lane == 0) ex[0] = 0.f, ex[1] = 0.f;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int r = lane + 32 * hr;
    const float pre = ex[hr] + (hr ? t_lo : 0.f), suf = gsum[hr] + (hr ? 0.f : g_hi);
    if (r < nv) {
      a.dgh[row0 + r * a.Hv] = suf + pre;
      a.dbh[row0 + r * a.Hv] = dbeta[hr];
    }
  }
}

}  // namespace gwg

// WALK: the CTA walks its q/k head's a.group value heads (GQA); without it (a.group = 1) the one item compiles
// straight-line. Both instances spill 64 bytes at the 255-register cap (ptxas: the dq / dk accumulators and the
// partial-sum / q copies' addresses live into phase 8's rolled row loop and its l2norm chain); measured with it, the
// pass doing pass 5a's work is the faster form on every shape (H100: the backward -1.7% .. -5.6%).
template <class E, bool WALK>
__global__ void __launch_bounds__(kGradWgThreads, 1) chunk_bwd_grads_wg_kernel(const ChunkBwdArgs a) {
  static_assert(std::is_same_v<E, __nv_bfloat16>, "the wgmma grads pass takes bf16 inputs");
  constexpr int K = 128, V = 128;
  if (a.fused_walk > 0 && fused_on(a)) return;  // launched beside the fused pass: it runs where every beta <= 1
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int hk = int(blockIdx.y);
  // The items' chunk (pass 4's map: a varlen slack slot holds none)
  int64_t n, c;
  const int64_t slot = blockIdx.x;
  if (a.cu_seqlens == nullptr) {
    n = slot / a.nchunk_b, c = slot % a.nchunk_b;
  } else if (!slot_chunk(a, slot, &n, &c)) {
    return;
  }
  int64_t sb, st, len;
  seq_bounds(a, n, &sb, &st, &len);
  const int nv = int(len - kC * c < kC ? len - kC * c : kC);
  const float lam = a.scale;
  {
    auto& s = *reinterpret_cast<GradWgSmem*>(smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023));
    if (threadIdx.x == 0) s.tok[0] = sb, s.tok[1] = st + kC * c;
    __syncthreads();
  }
  const int h_first = WALK ? hk * a.group : hk, h_end = WALK ? h_first + a.group : h_first + 1;
  for (int h = h_first; h < h_end; ++h) {
    const bool first = !WALK || h == h_first;
    const int64_t rec = slot * a.Hv + h;
    // Thread indices and shared-memory addresses are formed anew per item from an opaque tid: hoisted out of the loop
    // they stay live through every phase, and the item (at 255 registers) spilled ~540 bytes.
    int tid = int(threadIdx.x), pad = int((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    asm volatile("mov.b32 %0, %0;" : "+r"(tid));
    asm volatile("mov.b32 %0, %0;" : "+r"(pad));
    auto& s = *reinterpret_cast<GradWgSmem*>(smem_raw + pad);
    const int lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int wgi = __shfl_sync(0xffffffffu, tid >> 7, 0), wi = __shfl_sync(0xffffffffu, (tid >> 5) & 3, 0);
    const auto tok = [&](int i) { return *reinterpret_cast<const volatile int64_t*>(&s.tok[i]); };

    const uint32_t q_a = smem_addr(&s.q[0][0]), k_a = smem_addr(&s.k[0][0]), v_a = smem_addr(&s.v[0][0]);
    const uint32_t do_a = smem_addr(&s.dO[0][0]), a_a = smem_addr(&s.a[0][0]), s0_a = smem_addr(&s.s0[0][0][0]);
    const uint32_t u_a = smem_addr(&s.u[0][0][0]), dut_a = smem_addr(&s.dut[0][0][0]), r_a = smem_addr(&s.r[0][0][0]);
    const uint32_t q_l = wg::desc_lo(q_a), k_l = wg::desc_lo(k_a), v_l = wg::desc_lo(v_a), do_l = wg::desc_lo(do_a);
    const uint32_t a_l = wg::desc_lo(a_a), s0_l = wg::desc_lo(s0_a), u_l = wg::desc_lo(u_a), dut_l = wg::desc_lo(dut_a);
    const uint32_t r_l = wg::desc_lo(r_a);
    // k step ks (16 elements) of a 128-wide operand held as two [64][64] tiles `half` bytes apart
    const auto kstep = [](int ks, uint32_t half) { return uint32_t(ks >> 2) * half + uint32_t(ks & 3) * 32; };

    // ---- phase 0: loads, by cp.async in three groups in the order the phases need them: q, k, dO rows (zeros past
    // nv), U raw (fp32, into r) and the record rows; S0 and dU raw (fp32, into dut); A and v. dS goes to registers
    // (this warpgroup's keys, all values, as A fragments) by plain loads, in flight with the first group.
    {
      const int kv = tid & 15, r0 = tid >> 4;
      const auto rows16 = [&](unsigned char(&dst)[2][8192], const E* src, int64_t rst) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int r = r0 + 16 * i;
          const bool ok = r < nv;
          cp_async16_zfill(&dst[kv >> 3][wg::swz(r, kv & 7)], ok ? src + r * rst + 8 * kv : src, ok);
        }
      };
      // U, dU raw fp32 [64][V] (plain rows): 2048 pieces of 16 bytes, 8 a thread
      const auto raw = [&](unsigned char* dst, const float* src) {
        const auto* g8 = reinterpret_cast<const unsigned char*>(src);
#pragma unroll
        for (int i = 0; i < 8; ++i) cp_async<16>(dst + (tid + 256 * i) * 16, g8 + (tid + 256 * i) * 16);
      };
      const int64_t sb = tok(0), t0 = tok(1);
      rows16(s.q, static_cast<const E*>(a.q) + sb * a.q_sb + hk * a.q_sh + t0 * a.q_st, a.q_st);
      rows16(s.k, static_cast<const E*>(a.k) + sb * a.k_sb + hk * a.k_sh + t0 * a.k_st, a.k_st);
      rows16(s.dO, static_cast<const E*>(a.d_o) + sb * a.do_sb + h * a.do_sh + t0 * a.do_st, a.do_st);
      raw(&s.r[0][0][0], a.U + rec * (kC * V));
      copy_record_rows(s.rows, a.rows, rec, tid);
      cp_async_commit();
      {  // S0: bf16 [K][V]
        const auto* Sg = reinterpret_cast<const unsigned char*>(a.S0 + rec * (K * V));
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const int r = r0 + 16 * i;
          cp_async<16>(&s.s0[r >> 6][kv >> 3][wg::swz(r & 63, kv & 7)], Sg + r * (V * 2) + kv * 16);
        }
      }
      raw(&s.dut[0][0][0], a.dU + rec * (kC * V));
      cp_async_commit();
      {  // A: bf16 hi [64][64], then lo
        const auto* Ag = reinterpret_cast<const unsigned char*>(a.A + rec * (kC * kC));
        const int cc = tid & 7, rr = tid >> 3;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int pp = i >> 1, r = rr + 32 * (i & 1);
          cp_async<16>(&s.a[pp][wg::swz(r, cc)], Ag + pp * 8192 + r * 128 + cc * 16);
        }
      }
      rows16(s.v, static_cast<const E*>(a.v) + sb * a.v_sb + h * a.v_sh + t0 * a.v_st, a.v_st);
      cp_async_commit();
    }
    // dS rows 64 wgi + 16 wi + g (+ 8), values 16 ks + 2 t4 (+ 1) (+ 8): in flight with the first group, split into A
    // fragments once the first products are issued
    float dsf[8][4][2];
    {
      const float* dSg = a.dS + rec * (K * V) + (64 * wgi + 16 * wi + g) * V + 2 * t4;
#pragma unroll
      for (int ks = 0; ks < 8; ++ks)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float2 x = *reinterpret_cast<const float2*>(dSg + (e & 1) * 8 * V + 16 * ks + (e >> 1) * 8);
          dsf[ks][e][0] = x.x, dsf[ks][e][1] = x.y;
        }
    }
    cp_async_wait<2>();
    __syncthreads();  // the first group landed
    {                 // U split into u (rows, value halves)
      const float* Ur = reinterpret_cast<const float*>(&s.r[0][0][0]);
#pragma unroll
      for (int i = 0; i < 4; ++i) {  // 64 rows x 16 chunks of 8 values, 4 chunks a thread
        const int idx = tid + 256 * i, row = idx >> 4, ch = idx & 15;
        const float4 x0 = *reinterpret_cast<const float4*>(Ur + row * V + 8 * ch);
        const float4 x1 = *reinterpret_cast<const float4*>(Ur + row * V + 8 * ch + 4);
        const Split2 p0 = split_pair<false>(x0.x, x0.y), p1 = split_pair<false>(x0.z, x0.w);
        const Split2 p2 = split_pair<false>(x1.x, x1.y), p3 = split_pair<false>(x1.z, x1.w);
        *reinterpret_cast<uint4*>(&s.u[0][ch >> 3][wg::swz(row, ch & 7)]) = make_uint4(p0.hi, p1.hi, p2.hi, p3.hi);
        *reinterpret_cast<uint4*>(&s.u[1][ch >> 3][wg::swz(row, ch & 7)]) = make_uint4(p0.lo, p1.lo, p2.lo, p3.lo);
      }
    }
    // The token decays once per item (the phases read them per accumulator element: 16 expf a thread at each of four
    // sites took ~13% of the pass's instructions); D_rs = e^{gamma_r - gamma_s} stays one expf per entry (§5.8).
    if (tid < kC) {
      s.eg[tid] = tid < nv ? expf(s.rows[0][tid]) : 0.f;
      s.kb[tid] = tid < nv ? expf(s.rows[0][nv - 1] - s.rows[0][tid]) : 0.f;
    }
    wg::fence_async_smem();
    __syncthreads();  // U split; the raw U in r is consumed; the token decays

    // ---- phase 1: dP = dO U^T and Q K^T (columns 32 wgi ..), then dKbar^T = dS U^T
    float dk[8][4], kbar[8][4], dp[4][4], qk[4][4];
    {
      float(&dp16)[16] = reinterpret_cast<float(&)[16]>(dp);
      float(&qk16)[16] = reinterpret_cast<float(&)[16]>(qk);
      wg::fence();
      // (dO, U_lo), (dO, U_hi); B^T = U [s][value], rows 32 wgi ..
      gwg::mma_ss_k128<32>(dp16, do_l, 0, u_l, 16384 + 4096 * wgi, true);
      gwg::mma_ss_k128<32>(dp16, do_l, 0, u_l, 4096 * wgi, false);
      gwg::mma_ss_k128<32>(qk16, q_l, 0, k_l, 4096 * wgi, true);
      wg::commit();
    }
    uint32_t dsh[8][4], dsl[8][4];
#pragma unroll
    for (int ks = 0; ks < 8; ++ks)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const Split2 y = split_pair<false>(dsf[ks][e][0], dsf[ks][e][1]);
        dsh[ks][e] = y.hi, dsl[ks][e] = y.lo;
      }
    {
      float(&kv32)[32] = reinterpret_cast<float(&)[32]>(kbar);
      wg::fence();
      // (dS_lo, U_hi), (dS_hi, U_lo), (dS_hi, U_hi); B^T = U [token][value]
#pragma unroll
      for (int ks = 0; ks < 8; ++ks) wg::mma_rs_n64<true>(kv32, dsl[ks], wg::desc_at(u_l, kstep(ks, 8192)), ks > 0);
#pragma unroll
      for (int ks = 0; ks < 8; ++ks) wg::mma_rs_n64<true>(kv32, dsh[ks], wg::desc_at(u_l, 16384 + kstep(ks, 8192)), 1);
#pragma unroll
      for (int ks = 0; ks < 8; ++ks) wg::mma_rs_n64<true>(kv32, dsh[ks], wg::desc_at(u_l, kstep(ks, 8192)), 1);
      wg::commit();
    }
    wg::wait1();  // dP, Q K^T
    {  // X = scale dP (.) D (lower, diagonal in): R0 = X diag(rho_k) (rows), R1^T = (diag(rho_q) X)^T; Z = X (.) P^
      float r0v[4][4], r1v[4][4], zr[2] = {0.f, 0.f}, zc[4][2] = {};
#pragma unroll
      for (int jn = 0; jn < 4; ++jn)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const auto [r, cc] = gwg::n32_at(wi, wgi, g, t4, jn, e);
          float x = 0.f;
          if (cc <= r) {
            x = lam * dp[jn][e] * expf(s.rows[0][r] - s.rows[0][cc]);
            if (cc < r) {
              const float zz = x * s.rows[1][r] * s.rows[2][cc] * qk[jn][e];
              zr[e >> 1] += zz, zc[jn][e & 1] += zz;
            }
          }
          r0v[jn][e] = x * s.rows[2][cc];
          r1v[jn][e] = x * s.rows[1][r];
        }
      gwg::put_rows<4>(r_a, r_a + 8192, r0v, 4 * wgi, wi, lane);
      gwg::put_transposed<4>(r_a + 16384 + 4096 * wgi, r_a + 24576 + 4096 * wgi, r1v, wi, lane);
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const float x = lane_sum<1, 4>(zr[hr]);
        if (t4 == 0) s.zrow[wgi][16 * wi + g + 8 * hr] = x;
      }
      gwg::put_col_sums<4>(&s.zcol[wi][32 * wgi], zc, g, t4);
    }
    wg::wait0();  // dKbar^T
    {             // dK^T = diag(kb) dKbar^T (column factor kb_t); tau_t = sum over keys of kb_t k^_t . dKbar_t
      float tp[8][2];
#pragma unroll
      for (int jn = 0; jn < 8; ++jn)
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const int t = 8 * jn + 2 * t4 + u;
          const float kbt = s.kb[t], rk = s.rows[2][t];
          float acc = 0.f;
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const int key = 64 * wgi + 16 * wi + g + 8 * hr;
            const float x = kbar[jn][2 * hr + u];
            dk[jn][2 * hr + u] = kbt * x;
            const float kk = widen16(*reinterpret_cast<const E*>(&s.k[key >> 6][gwg::at16(t, key & 63)]));
            acc = fmaf(kk, x, acc);
          }
          tp[jn][u] = kbt * rk * acc;
        }
      gwg::put_col_sums<8>(s.pk[1][4 * wgi + wi], tp, g, t4);
    }
    cp_async_wait<1>();  // S0 and the raw dU (this thread's copies; every thread's after the barrier)
    wg::fence_async_smem();
    __syncthreads();  // R0, R1^T complete; S0 and the raw dU landed
    {                 // <S0, dS>_F per warp (dS as hi + lo: its fp32 value to ~2^-17)
      float acc = 0.f;
#pragma unroll
      for (int ks = 0; ks < 8; ++ks)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = 64 * wgi + 16 * wi + g + (e & 1) * 8, val = 16 * ks + 2 * t4 + (e >> 1) * 8;
          const float2 s2 = chunk_detail::widen_pair<true>(
              *reinterpret_cast<const uint32_t*>(&s.s0[key >> 6][val >> 6][gwg::at16(key & 63, val & 63)]));
          const float2 h2 = chunk_detail::widen_pair<true>(dsh[ks][e]), l2 = chunk_detail::widen_pair<true>(dsl[ks][e]);
          acc = fmaf(s2.x, h2.x + l2.x, fmaf(s2.y, h2.y + l2.y, acc));
        }
      acc = lane_sum<1, 32>(acc);
      if (lane == 0) s.red[tid >> 5] = acc;
    }

    // ---- phase 2: dQ^T = K^T R0^T, dK^T += Q^T R1, S0 dO^T
    float dq[8][4], tq[8][4];
    {
      uint32_t kt[4][4], qt[4][4];
      gwg::load_t_frags(&s.k[wgi][0], 16 * wi, lane, kt);
      gwg::load_t_frags(&s.q[wgi][0], 16 * wi, lane, qt);
      float(&q32)[32] = reinterpret_cast<float(&)[32]>(dq);
      float(&k32)[32] = reinterpret_cast<float(&)[32]>(dk);
      float(&t32)[32] = reinterpret_cast<float(&)[32]>(tq);
      // dK^T = kbt dKbar^T of phase 1, formed before the fence (in the walk ptxas sank it into the group)
      wg::pin(k32);
      wg::fence();
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n64<true>(q32, kt[kc], wg::desc_at(r_l, 8192 + kc * 32), kc > 0);
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n64<true>(q32, kt[kc], wg::desc_at(r_l, kc * 32), 1);
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n64<true>(k32, qt[kc], wg::desc_at(r_l, 24576 + kc * 32), 1);
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n64<true>(k32, qt[kc], wg::desc_at(r_l, 16384 + kc * 32), 1);
      gwg::mma_ss_k128<64>(t32, s0_l, 16384 * wgi, do_l, 0, true);
      wg::commit();
      wg::wait0();
    }
    {  // dQ^T += scale e^gamma_t (S0 dO^T); its dgamma term q^_t . (that term) per token
      float gq[8][2];
#pragma unroll
      for (int jn = 0; jn < 8; ++jn)
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const int t = 8 * jn + 2 * t4 + u;
          const float f = t < nv ? lam * s.eg[t] : 0.f;
          float acc = 0.f;
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const int key = 64 * wgi + 16 * wi + g + 8 * hr;
            const float x = f * tq[jn][2 * hr + u];
            dq[jn][2 * hr + u] += x;
            acc = fmaf(widen16(*reinterpret_cast<const E*>(&s.q[key >> 6][gwg::at16(t, key & 63)])), x, acc);
          }
          gq[jn][u] = s.rows[1][t] * acc;
        }
      gwg::put_col_sums<8>(s.pk[0][4 * wgi + wi], gq, g, t4);
    }
    // dU (raw fp32 in dut) as this thread's accumulator-layout elements of value half wgi: rows 16 wi + g (+ 8)
    float du[8][4];
    {
      const float* Dr = reinterpret_cast<const float*>(&s.dut[0][0][0]);
#pragma unroll
      for (int jn = 0; jn < 8; ++jn)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const float2 x =
              *reinterpret_cast<const float2*>(Dr + (16 * wi + g + 8 * hr) * V + 64 * wgi + 8 * jn + 2 * t4);
          du[jn][2 * hr] = x.x, du[jn][2 * hr + 1] = x.y;
        }
    }
    __syncthreads();  // the raw dU read; R0, R1^T consumed
    // dU^T (value half wgi) into dut, dU (rows, value half wgi) into r
    gwg::put_transposed<8>(dut_a + 8192 * wgi, dut_a + 16384 + 8192 * wgi, du, wi, lane);
    gwg::put_rows<8>(r_a + 8192 * wgi, r_a + 16384 + 8192 * wgi, du, 0, wi, lane);
    cp_async_wait<0>();  // A and v
    wg::fence_async_smem();
    __syncthreads();  // dU^T and dU complete; A and v landed; q, dO, U free

    // ---- phase 3: dV' = A^T dU (value half wgi), dW = -dU S0^T (key half wgi)
    {
      float dv[8][4];  // B^T = dU^T [value][token] of value half wgi
      gwg::at_times_split<64>(dv, s.a, dut_l, 8192 * wgi, 16384 + 8192 * wgi, wi, lane);
      // dv = diag(b) dV' (rows < nv); v . dV' per token; dV' split into u (rows, value half wgi)
      float vp[2] = {0.f, 0.f};
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int t = 16 * wi + g + 8 * hr;
        const float bt = s.rows[3][t];
        E* const o = static_cast<E*>(a.dv) + tok(0) * a.dv_sb + (tok(1) + t) * a.dv_st + h * a.dv_sh + 64 * wgi;
#pragma unroll
        for (int jn = 0; jn < 8; ++jn) {
          const int j = 8 * jn + 2 * t4;
          const float2 vv =
              chunk_detail::widen_pair<true>(*reinterpret_cast<const uint32_t*>(&s.v[wgi][gwg::at16(t, j)]));
          vp[hr] = fmaf(vv.x, dv[jn][2 * hr], fmaf(vv.y, dv[jn][2 * hr + 1], vp[hr]));
          if (t < nv)
            *reinterpret_cast<uint32_t*>(o + j) = Storage<E>::from2(bt * dv[jn][2 * hr], bt * dv[jn][2 * hr + 1]);
        }
      }
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const float x = lane_sum<1, 4>(vp[hr]);
        if (t4 == 0) s.pv[0][wgi][16 * wi + g + 8 * hr] = x;
      }
      gwg::put_rows<8>(u_a + 8192 * wgi, u_a + 16384 + 8192 * wgi, dv, 0, wi, lane);
    }
    {
      float dw[8][4];
      float(&d32)[32] = reinterpret_cast<float(&)[32]>(dw);
      wg::fence();
      // dW = -(dU S0^T): A = dU [token][value] (lo, then hi), B^T = S0 [key][value] of key half wgi
      gwg::mma_ss_k128<64>(d32, r_l, 16384, s0_l, 16384 * wgi, true);
      gwg::mma_ss_k128<64>(d32, r_l, 0, s0_l, 16384 * wgi, false);
      wg::commit();
      wg::wait0();
#pragma unroll
      for (int jn = 0; jn < 8; ++jn)
#pragma unroll
        for (int e = 0; e < 4; ++e) dw[jn][e] = -dw[jn][e];
      gwg::put_rows<8>(q_a + 8192 * wgi, do_a + 8192 * wgi, dw, 0, wi, lane);  // dW hi in q, lo in dO
    }
    wg::fence_async_smem();
    __syncthreads();  // dV' and dW complete

    // ---- phase 4: A^T dW = -(S0 dV'^T)^T (key half wgi); dA (columns 32 wgi ..)
    {
      float tw[8][4], ua[4][4], wk[4][4];
      float(&t32)[32] = reinterpret_cast<float(&)[32]>(tw);
      float(&ua16)[16] = reinterpret_cast<float(&)[16]>(ua);
      float(&wk16)[16] = reinterpret_cast<float(&)[16]>(wk);
      wg::fence();
      // S0 dV'^T: A = S0 [key][value], B^T = dV' [token][value] (lo, then hi)
      gwg::mma_ss_k128<64>(t32, s0_l, 16384 * wgi, u_l, 16384, true);
      gwg::mma_ss_k128<64>(t32, s0_l, 16384 * wgi, u_l, 0, false);
      // dU V^T (dU lo, hi) and dW K^T (dW lo, hi), columns 32 wgi ..
      gwg::mma_ss_k128<32>(ua16, r_l, 16384, v_l, 4096 * wgi, true);
      gwg::mma_ss_k128<32>(ua16, r_l, 0, v_l, 4096 * wgi, false);
      gwg::mma_ss_k128<32>(wk16, do_l, 0, k_l, 4096 * wgi, true);
      gwg::mma_ss_k128<32>(wk16, q_l, 0, k_l, 4096 * wgi, false);
      wg::commit();
      wg::wait0();
      {  // A^T dW = -tw^T: dK^T += b_t e^gamma_t (A^T dW)^T; k^_t . (A^T dW)_t per token
        float kd[8][2];
#pragma unroll
        for (int jn = 0; jn < 8; ++jn)
#pragma unroll
          for (int u = 0; u < 2; ++u) {
            const int t = 8 * jn + 2 * t4 + u;
            const float eg = s.eg[t], f = s.rows[3][t] * eg;
            float acc = 0.f;
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
              const int key = 64 * wgi + 16 * wi + g + 8 * hr;
              const float x = -tw[jn][2 * hr + u];
              dk[jn][2 * hr + u] = fmaf(f, x, dk[jn][2 * hr + u]);
              acc = fmaf(widen16(*reinterpret_cast<const E*>(&s.k[key >> 6][gwg::at16(t, key & 63)])), x, acc);
            }
            kd[jn][u] = s.rows[2][t] * acc;
          }
        gwg::put_col_sums<8>(s.pk[2][4 * wgi + wi], kd, g, t4);
      }
      // dA_rs = b_s (dU_r . v_s) + b_s e^{gamma_s} rho_k,s (dW_r . k_s), strictly lower: dA^T split into dut[0]
#pragma unroll
      for (int jn = 0; jn < 4; ++jn)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const auto [r, cc] = gwg::n32_at(wi, wgi, g, t4, jn, e);
          const float eg = s.eg[cc];
          ua[jn][e] = cc < r ? s.rows[3][cc] * (ua[jn][e] + eg * s.rows[2][cc] * wk[jn][e]) : 0.f;
        }
      gwg::put_transposed<4>(dut_a + 4096 * wgi, dut_a + 8192 + 4096 * wgi, ua, wi, lane);
    }
    wg::fence_async_smem();
    named_barrier<128>(1 + wgi);  // this warpgroup's rows of dA^T (the only ones its Y reads)

    // ---- phase 5: Y = A^T dA (columns 32 wgi ..): (A_lo, dA_hi), (A_hi, dA_lo), (A_hi, dA_hi)
    {
      float y[4][4];  // B^T = dA^T [s][s'], rows 32 wgi ..
      gwg::at_times_split<32>(y, s.a, dut_l, 4096 * wgi, 8192 + 4096 * wgi, wi, lane);
      gwg::put_rows<4>(dut_a + 16384, dut_a + 24576, y, 4 * wgi, wi, lane);  // Y [hi, lo] in dut[1]
    }
    wg::fence_async_smem();
    __syncthreads();  // Y complete

    // ---- phase 6: dL = -StrictLower(Y A^T), E = K^ K^^T (.) D (columns 32 wgi ..)
    {
      float ya[4][4], kk[4][4];
      float(&ya16)[16] = reinterpret_cast<float(&)[16]>(ya);
      float(&kk16)[16] = reinterpret_cast<float(&)[16]>(kk);
      wg::fence();
      // A = Y [token][s'] (lo, hi), B^T = A [s][s'] rows 32 wgi ..: (Y_lo, A_hi), (Y_hi, A_lo), (Y_hi, A_hi)
#pragma unroll
      for (int kc = 0; kc < 4; ++kc)
        wg::mma_ss_n32_bf16(ya16, wg::desc_at(dut_l, 24576 + kc * 32), wg::desc_at(a_l, 4096 * wgi + kc * 32), kc > 0);
#pragma unroll
      for (int kc = 0; kc < 4; ++kc)
        wg::mma_ss_n32_bf16(ya16, wg::desc_at(dut_l, 16384 + kc * 32), wg::desc_at(a_l, 8192 + 4096 * wgi + kc * 32),
                            1);
#pragma unroll
      for (int kc = 0; kc < 4; ++kc)
        wg::mma_ss_n32_bf16(ya16, wg::desc_at(dut_l, 16384 + kc * 32), wg::desc_at(a_l, 4096 * wgi + kc * 32), 1);
      gwg::mma_ss_k128<32>(kk16, k_l, 0, k_l, 4096 * wgi, true);
      wg::commit();
      wg::wait0();
      // dbeta_r += sum_s dL_rs E_rs; Z += dL_b (.) E (dL_b = diag(b) dL); Xf = dL_b (.) D into u (fp32 [64][64],
      // row r's column c at c ^ 4 (r & 7)... rotated by r so that a warp's stores and the transposed reads spread)
      float* Xf = reinterpret_cast<float*>(&s.u[0][0][0]);
      float tb[2] = {0.f, 0.f}, zr[2] = {0.f, 0.f}, zc[4][2] = {};
#pragma unroll
      for (int jn = 0; jn < 4; ++jn)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const auto [r, cc] = gwg::n32_at(wi, wgi, g, t4, jn, e);
          float x = 0.f;
          if (cc < r) {
            const float dl = -ya[jn][e], D = expf(s.rows[0][r] - s.rows[0][cc]);
            const float Ev = s.rows[2][r] * s.rows[2][cc] * kk[jn][e] * D, tt = dl * Ev, br = s.rows[3][r];
            x = br * dl * D;
            zr[e >> 1] += br * tt, zc[jn][e & 1] += br * tt;
            tb[e >> 1] += tt;
          }
          Xf[r * kC + ((cc + r) & (kC - 1))] = x;
        }
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int r = 16 * wi + g + 8 * hr;
        const float x = lane_sum<1, 4>(tb[hr]), z = lane_sum<1, 4>(zr[hr]);
        if (t4 == 0) s.pv[1][wgi][r] = x, s.zrow[wgi][r] += z;
      }
      gwg::put_col_sums<4, true>(&s.zcol[wi][32 * wgi], zc, g, t4);
    }
    __syncthreads();  // Xf complete

    // ---- phase 7: R2 = (Xf + Xf^T) diag(rho_k) split into u[1] (rows); dK^T += K^T R2^T
    {
      const float* Xf = reinterpret_cast<const float*>(&s.u[0][0][0]);
#pragma unroll
      for (int i = 0; i < 2; ++i) {  // 64 rows x 8 chunks of 8 columns, 2 chunks a thread
        const int idx = tid + 256 * i, r = idx >> 3, ch = idx & 7;
        uint32_t hi[4], lo[4];
#pragma unroll
        for (int p = 0; p < 4; ++p) {
          const int c0 = 8 * ch + 2 * p;
          float x[2];
#pragma unroll
          for (int u = 0; u < 2; ++u) {
            const int cc = c0 + u;
            x[u] = (Xf[r * kC + ((cc + r) & (kC - 1))] + Xf[cc * kC + ((r + cc) & (kC - 1))]) * s.rows[2][cc];
          }
          const Split2 y = split_pair<false>(x[0], x[1]);
          hi[p] = y.hi, lo[p] = y.lo;
        }
        *reinterpret_cast<uint4*>(&s.u[1][0][wg::swz(r, ch)]) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
        *reinterpret_cast<uint4*>(&s.u[1][1][wg::swz(r, ch)]) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
      }
    }
    wg::fence_async_smem();
    __syncthreads();  // R2 complete
    {
      uint32_t kt[4][4];
      gwg::load_t_frags(&s.k[wgi][0], 16 * wi, lane, kt);
      float(&k32)[32] = reinterpret_cast<float(&)[32]>(dk);
      const uint32_t r2 = wg::desc_lo(smem_addr(&s.u[1][0][0]));
      wg::fence();
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n64<true>(k32, kt[kc], wg::desc_at(r2, 8192 + kc * 32), 1);
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n64<true>(k32, kt[kc], wg::desc_at(r2, kc * 32), 1);
      wg::commit();
      wg::wait0();
    }

    // ---- phase 8: dq, dk (fp32) through [64 tokens][128 keys] stages (S0 and dut: dead), element (t, i) at column
    // (i + 4 t) % 128, so that a warp's stores and the 16-byte row reads spread over the banks; the row sums; dg,
    // dbeta. An item before the walk's last adds its rows to the partial sums in the scratch (in head order); the last
    // ends pass 5a's work for them: 0 + dq_h0 + dq_h1 + ... (5a's order), the l2norm chain dx = rho (dx^ - (dx^ . x^)
    // x^) of the raw row x (k in its tile, q copied into A) with a row's dot products over a warp's 32 lanes (4 keys a
    // lane: 5a's lanes and order), the io-dtype store. A warp holds one row per step, so `t < nv` is warp-uniform.
    float* const sq = reinterpret_cast<float*>(&s.s0[0][0][0]);
    float* const sk = reinterpret_cast<float*>(&s.dut[0][0][0]);
    const bool last = !WALK || h == h_end - 1;
    // row t's dq / dk scratch (one row per token and q/k head: the sum over the value heads so far)
    const auto qk_at = [&](int t) { return ((tok(0) * a.T + tok(1) + t) * a.dqk_heads + hk) * K; };
    __syncthreads();  // every warp's K^T fragments of phase 7 read
    // By cp.async into dead tiles, in flight under the staging: the value heads' partial sums (L2 hits: this thread
    // stored them) into R and U, each thread its own pieces (read beside the stores below they were eight dependent
    // L2 round trips: a load may not pass the store before it to the same buffer; into registers ahead, spills); for
    // the last item's l2norm chain the raw q rows into A (the q tile holds dW since phase 3; k is still in its tile).
    if (!first) {
#pragma unroll 1
      for (int i = 0; i < 8; ++i) {  // rolled, as the row loop below: the walk's code under the instruction cache
        const int idx = tid + 256 * i, t = idx >> 5, c4 = 4 * (idx & 31);
        if (t < nv) {
          const int64_t o = qk_at(t) + c4;
          cp_async<16>(&s.r[0][0][0] + 16 * idx, a.dqh + o);
          cp_async<16>(&s.u[0][0][0] + 16 * idx, a.dkh + o);
        }
      }
    }
    if (last && a.l2norm) {
      // the copy's addresses from an opaque tid and head: as phase 0's q copy's expressions, ptxas keeps those live
      int ot = tid, oh = hk;
      asm volatile("mov.b32 %0, %0;" : "+r"(ot));
      asm volatile("mov.b32 %0, %0;" : "+r"(oh));
      const E* src = static_cast<const E*>(a.q) + tok(0) * a.q_sb + oh * a.q_sh + tok(1) * a.q_st;
      const int kv = ot & 15, r0 = ot >> 4;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = r0 + 16 * i;
        if (r < nv) cp_async<16>(&s.a[kv >> 3][wg::swz(r, kv & 7)], src + r * a.q_st + 8 * kv);
      }
    }
    cp_async_commit();
    {
#pragma unroll
      for (int jn = 0; jn < 8; ++jn)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = 64 * wgi + 16 * wi + g + 8 * (e >> 1), t = 8 * jn + 2 * t4 + (e & 1);
          sq[t * K + ((key + 4 * t) & (K - 1))] = dq[jn][e];
          sk[t * K + ((key + 4 * t) & (K - 1))] = dk[jn][e];
        }
    }
    cp_async_wait<0>();
    __syncthreads();  // the stages and every thread's copies
#pragma unroll 1
    for (int i = 0; i < 8; ++i) {  // 64 rows x 32 vectors, rolled: unrolled, the pass is ~165 KB of code (past the
                                   // SM's ~128 KB instruction cache) and measured twice as long
      const int idx = tid + 256 * i, t = idx >> 5, c4 = 4 * (idx & 31);
      if (t < nv) {
        const int p = t * K + ((c4 + 4 * t) & (K - 1));
        const float4 yq = *reinterpret_cast<const float4*>(sq + p), yk = *reinterpret_cast<const float4*>(sk + p);
        float4 pq = make_float4(0.f, 0.f, 0.f, 0.f), pk = pq;
        if (!first)
          pq = *reinterpret_cast<const float4*>(&s.r[0][0][0] + 16 * idx),
          pk = *reinterpret_cast<const float4*>(&s.u[0][0][0] + 16 * idx);
        float gq[4] = {pq.x + yq.x, pq.y + yq.y, pq.z + yq.z, pq.w + yq.w};
        float gk[4] = {pk.x + yk.x, pk.y + yk.y, pk.z + yk.z, pk.w + yk.w};
        if (!last) {
          const int64_t o = qk_at(t) + c4;
          *reinterpret_cast<float4*>(a.dqh + o) = make_float4(gq[0], gq[1], gq[2], gq[3]);
          *reinterpret_cast<float4*>(a.dkh + o) = make_float4(gk[0], gk[1], gk[2], gk[3]);
          continue;
        }
        if (a.l2norm) {  // x: keys c4 .. c4 + 3 of row t, 8 bytes of the swizzled bf16 tiles (q: its copy in A)
          const int off = wg::swz(t, (c4 & 63) >> 3) + 2 * (c4 & 7);
          float xq[4], xk[4];
          from_bits4<E>(make_uint4(*reinterpret_cast<const uint32_t*>(&s.a[c4 >> 6][off]),
                                   *reinterpret_cast<const uint32_t*>(&s.a[c4 >> 6][off + 4]), 0u, 0u),
                        xq);
          from_bits4<E>(make_uint4(*reinterpret_cast<const uint32_t*>(&s.k[c4 >> 6][off]),
                                   *reinterpret_cast<const uint32_t*>(&s.k[c4 >> 6][off + 4]), 0u, 0u),
                        xk);
          l2norm_backward4<32>(gq, xq);
          l2norm_backward4<32>(gk, xk);
        }
        const int64_t b = tok(0), tt = tok(1) + t;
        store4(static_cast<E*>(a.dq) + (b * a.dq_sb + tt * a.dq_st + hk * a.dq_sh + c4), gq);
        store4(static_cast<E*>(a.dk) + (b * a.dk_sb + tt * a.dk_st + hk * a.dk_sh + c4), gk);
      }
    }
    if (tid < 32) {  // rows r = lane, lane + 32: dgamma, dbeta, tau (the sums over warps and halves in a fixed order)
      float dgam[2], dbeta[2], tau[2];
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int r = lane + 32 * hr;
        float gq = 0.f, tp = 0.f, kd = 0.f, zc = 0.f;
#pragma unroll
        for (int w = 0; w < 8; ++w) gq += s.pk[0][w][r], tp += s.pk[1][w][r], kd += s.pk[2][w][r];
#pragma unroll
        for (int w = 0; w < 4; ++w) zc += s.zcol[w][r];
        const float zr = s.zrow[0][r] + s.zrow[1][r], eg = s.eg[r], br = s.rows[3][r];
        dgam[hr] = (gq + br * eg * kd) + (zr - zc);
        dbeta[hr] = (eg * kd + (s.pv[0][0][r] + s.pv[0][1][r])) + (s.pv[1][0][r] + s.pv[1][1][r]);
        tau[hr] = tp;
      }
      // dgamma_{n-1} += e_n <S0, dS>_F; dg_r = sum_{j >= r} dgamma_j + sum_{j < r} tau_j (pass 4's order of the sums)
      float sd = 0.f;
      for (int w = 0; w < 8; ++w) sd += s.red[w];
      const float en = expf(s.rows[0][nv - 1]);
      const int64_t row0 = (tok(0) * a.T + tok(1)) * a.Hv + h;
      gwg::store_dg_dbeta(a, row0, nv, lane, dgam, dbeta, tau, en * sd);
    }
    __syncthreads();  // the staged dq, dk and the row sums read: the next item's loads overwrite them
  }
}

}  // namespace flashgdn::cuda::bwd_detail
