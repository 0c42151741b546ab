// The state pass of the two-pass prefill (gdn-math §5.3-§5.5): the chain over the chunks of a sequence (or of a
// segment of the split, §6), with everything state-independent read from the intra pass's records
// (chunk_fwd_intra.cuh). One CTA owns (work item, value head) and V / 64 value tiles of 64 columns: NH = V / 64
// halves of 8 warps, which share the q, k and record tiles in shared memory (one copy for both halves). Warp
// (rg, ch) of a half owns chunk rows 16 rg .. 16 rg + 15 and state columns 32 ch .. 32 ch + 31 of its tile, and
// state rows rg K / 4 .. of those columns in fp32 registers for the whole walk. Per chunk, three barriers:
//
//   phase 1  R = V - diag(ek) (K S0),  O = diag(eq) (Q S0)        (S0: the bf16 copy of the state in shared memory)
//   phase 2  U = (A diag(beta)) R                                   (A diag(beta) and R as hi + lo, + A's rest where
//                                                                   beta exceeds 1; U kept as hi + lo)
//   phase 3  O += P U, stored;  S <- en S + K^T (diag(dk) U)        (diag(dk) U as hi + lo; fp32 accumulation)
//
// with ek = rho_k e^gamma, eq = scale rho_q e^gamma, dk = rho_k e^{gamma_n - gamma}, en = e^{gamma_n} from the
// record (gdn-math §5.3: (I + L) U = diag(b) (V - Gamma K S0); §5.4 the output; §5.5 the state update). All loads
// of chunk c + 1 (q, k, v, the record) are issued by cp.async right after the top barrier of chunk c into the other
// half of double buffers, so a chunk never waits on memory that was requested less than a chunk ago.
//
// Work per chunk and 64-column tile: K S0 and Q S0 2 x 64 x K x 64 x 2, U 64 x 64 x 64 x 2 x 3 (hi + lo terms, causal
// half), P U x 3 (causal half), the update K x 64 x 64 x 2 x 2 (hi + lo): ~6.8 MFLOP at K = 128 of mma.sync m16n8k16 on
// the chain. Bytes per chunk and head: q, k 2 x 16 KB, v 16 KB, the record 21 KB (11 KB in the summary; A's rest, 5 KB,
// only where beta exceeds 1), o 16 KB. Cost (H200, both 64-column tiles, K = 128): ~6.3 us per chunk; the tensor pipe
// 12% busy, the shared-memory pipe 55-60% (Nsight Compute): bound by the ldmatrix traffic of the per-warp operand
// reloads, which wgmma reads once per warpgroup, hence chunk_fwd_state_wg.cuh where K = V = 128; this pass runs where K
// or V is 64.
#pragma once

#include "cuda/chunk_fwd/chunk_fwd_common.cuh"

namespace flashgdn::cuda::chunk_detail {

template <int K, class E, int NH>
struct StateSmem {
  static constexpr int LDQ = K + 8;    // padded rows: conflict-free ldmatrix
  static constexpr int LDV = kBV + 8;  // padded rows: conflict-free ldmatrix.trans
  static constexpr int RECW = static_cast<int>(kRecCopyBytes / 4);
  E q[2][kC * LDQ];       // [buffer][token][K]
  E k[2][kC * LDQ];       // [buffer][token][K]
  uint32_t rec[2][RECW];  // [buffer] the chunk's record (header | A diag(beta) | P)
  E v[2][NH][kC * LDV];   // [buffer][half][token][64] value tile, overwritten by R
  // [half][max(K, 128)][64] the state as a GEMM operand (bf16, gdn-math §10.2); in phase 3, rows 0-63 diag(dk) U
  // (hi), rows 64-127 its lo part (K = 64: rows the state does not use)
  E s[NH][(K > 2 * kC ? K : 2 * kC) * LDV];
  E u[NH][kC * LDV];   // [half][token][64] U rounded (hi)
  E ul[NH][kC * LDV];  // [half][token][64] U - hi (lo): P U = P_hi U_hi + P_lo U_hi + P_hi U_lo
  E rl[NH][kC * LDV];  // [half][token][64] R - hi (lo; hi is the value tile): U = A'_hi R_hi + A'_lo R_hi + A'_hi R_lo
};

template <int K, bool BF16, int NH>
__global__ void __launch_bounds__(NH * 256, 1) chunk_fwd_state_kernel(const ChunkKernelArgs a) {
  using E = typename Elem<BF16>::T;
  using P = Elem<BF16>;
  using Sm = StateSmem<K, E, NH>;
  constexpr int NTH = NH * 256;
  constexpr int NCOL = 32, NT = NCOL / 8, NP2 = NT / 2;  // columns per warp, m16n8 tiles, ldmatrix.x4 groups
  constexpr int LDQ = Sm::LDQ, LDV = Sm::LDV;
  constexpr int MT = K / 64;  // 16-row state m-tiles per warp (a warp owns K / 4 state rows)
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Sm& sm = *reinterpret_cast<Sm*>(smem_raw);

  const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g8 = lane >> 2, t4 = lane & 3;
  // Warp w runs on SM sub-partition w % 4. The causal phases (U, P U) cost row group rg about (rg + 1) units, so
  // the row groups rotate with (half, column half): each sub-partition gets one warp of every row group (NH = 2)
  // instead of four warps of one (w % 4 = rg put all the rg = 3 work on one sub-partition).
  const int hf = w >> 3, ch = (w >> 2) & 1, rg = (w + (w >> 2)) & 3, cb = ch * NCOL;
  const int h = blockIdx.y, tile = blockIdx.z * NH + hf;
  const int64_t item = blockIdx.x;
  const int hk = h / a.group;

  ChunkWork wk;
  if (!resolve_work(a, item, h, &wk)) return;
  if (!summary_walks(wk, blockIdx.z * NH, NH, K)) wk.c_end = wk.c_begin;
  const int64_t n = wk.n, bidx = wk.bidx, t0 = wk.t0, len = wk.len, c_begin = wk.c_begin, c_end = wk.c_end;
  const bool summary = a.mode == kModeSummary;
  const bool has_output = !summary;
  const int ntiles = summary ? (K + static_cast<int>(a.V)) / 64 : static_cast<int>(a.V) / 64;
  const bool active = tile < ntiles;             // a CTA's last half may have no tile (summary, odd count)
  const bool m_tile = summary && tile < K / 64;  // augmented columns of M: identity start, zero values
  const bool has_values = active && !m_tile;
  // the tile runs the chain; an M tile of a decay window does not (M = 0: its zero start state is its result)
  const bool computes = active && !(m_tile && wk.drop_m);
  const int vcol0 = summary ? (tile - K / 64) * kBV : tile * kBV;  // value column of this tile

  // ---- start state into registers (fp32) and shared memory (GEMM operand)
  const int rw = rg * (K / 4);  // first state row of this warp
  float sacc[MT][NT][4];
  load_start_state(start_state(a, wk, item, h, K), m_tile && !wk.drop_m, active, tile, vcol0, sacc, rw, cb, g8, t4);
  store_state_copy<P>(sm.s[hf], LDV, sacc, rw, cb, g8, t4);

  const E* qbase = static_cast<const E*>(a.q) + bidx * a.q_sb + hk * a.q_sh;
  const E* kbase = static_cast<const E*>(a.k) + bidx * a.k_sb + hk * a.k_sh;
  const E* vbase = static_cast<const E*>(a.v) + bidx * a.v_sb + h * a.v_sh + vcol0;
  E* obase = static_cast<E*>(a.o) + bidx * a.o_sb + h * a.o_sh + vcol0;
  const int r0 = 16 * rg + g8, r1 = r0 + 8;  // the two chunk rows of this thread in C fragments

  // Every load of chunk ck into buffer bf: the record (header and A diag(beta); P too when there is an output),
  // k and q rows (all threads), the value tile of each half (that half's threads). Rows past the sequence end are
  // zero-filled with plain stores (ordered before their readers by the next top barrier).
  auto issue = [&](int64_t ck, int bf) {
    const int64_t nv = len - ck * kC;
    const int64_t tok = t0 + ck * kC;
    copy_record<NTH>(a, n, t0, ck, h, sm.rec[bf], has_output ? kRecCopyBytes : kRecHdrBytes + kRecABytes, tid);
    constexpr int VPR = K / 8, RPP = NTH / VPR, NP = kC / RPP;
    const int lrow = tid / VPR, lvec = tid % VPR;
#pragma unroll
    for (int p = 0; p < NP; ++p) {
      const int r = p * RPP + lrow;
      E* dk = &sm.k[bf][r * LDQ + lvec * 8];
      E* dq = &sm.q[bf][r * LDQ + lvec * 8];
      if (r < nv) {
        cp_async<16>(dk, kbase + (tok + r) * a.k_st + lvec * 8);
        if (has_output) cp_async<16>(dq, qbase + (tok + r) * a.q_st + lvec * 8);
      } else {
        *reinterpret_cast<uint4*>(dk) = make_uint4(0, 0, 0, 0);
        if (has_output) *reinterpret_cast<uint4*>(dq) = make_uint4(0, 0, 0, 0);
      }
    }
    if (has_values)  // this half's value tile over its 256 threads
      copy_value_tile(reinterpret_cast<uint16_t*>(sm.v[bf][hf]), LDV, vbase + tok * a.v_st, a.v_st, nv, tid & 255);
  };

  if (c_begin < c_end) issue(c_begin, 0);
  cp_async_commit();

  for (int64_t c = c_begin; c < c_end; ++c) {
    const int bf = static_cast<int>((c - c_begin) & 1);
    const int64_t tok0 = c * kC;
    const int64_t nvalid = (len - tok0) < kC ? (len - tok0) : kC;
    cp_async_wait_all();
    __syncthreads();  // B0: chunk c's tiles have landed; chunk c - 1 is done with every buffer of c + 1
    if (c + 1 < c_end) issue(c + 1, bf ^ 1);
    cp_async_commit();

    const float* hdr = reinterpret_cast<const float*>(sm.rec[bf]);
    const uint4* afr = reinterpret_cast<const uint4*>(sm.rec[bf] + kRecHdrBytes / 4);
    const uint4* pfr = reinterpret_cast<const uint4*>(sm.rec[bf] + (kRecHdrBytes + kRecABytes) / 4);
    E* vt = sm.v[bf][hf];
    const E* kt = sm.k[bf];

    // ---- phase 1: K S0 and Q S0 on the same state fragments; R = V - diag(ek) K S0 over this warp's rows and
    // columns, in place of V; O = diag(eq) Q S0
    float oacc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) oacc[nt][e] = 0.f;
    if (computes) {
      float racc[NT][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) racc[nt][e] = 0.f;
#pragma unroll 4
      for (int kd = 0; kd < K / 16; ++kd) {
        uint32_t ak[4], aq[4];
        ldsm_x4(ak, &kt[(16 * rg + (lane & 15)) * LDQ + kd * 16 + (lane >> 4) * 8]);
        if (has_output) ldsm_x4(aq, &sm.q[bf][(16 * rg + (lane & 15)) * LDQ + kd * 16 + (lane >> 4) * 8]);
#pragma unroll
        for (int np = 0; np < NP2; ++np) {
          uint32_t b[4];
          ldsm_x4_t(b,
                    &sm.s[hf][(16 * kd + (lane & 7) + ((lane >> 3) & 1) * 8) * LDV + cb + 16 * np + (lane >> 4) * 8]);
          mma_m16n8k16<BF16>(racc[2 * np], ak, b[0], b[1]);
          mma_m16n8k16<BF16>(racc[2 * np + 1], ak, b[2], b[3]);
          if (has_output) {
            mma_m16n8k16<BF16>(oacc[2 * np], aq, b[0], b[1]);
            mma_m16n8k16<BF16>(oacc[2 * np + 1], aq, b[2], b[3]);
          }
        }
      }
      const float ek0 = hdr[r0], ek1 = hdr[r1], eq0 = hdr[64 + r0], eq1 = hdr[64 + r1];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int j = cb + nt * 8 + 2 * t4;
        uint32_t* p0 = reinterpret_cast<uint32_t*>(&vt[r0 * LDV + j]);
        uint32_t* p1 = reinterpret_cast<uint32_t*>(&vt[r1 * LDV + j]);
        float2 v0 = make_float2(0.f, 0.f), v1 = make_float2(0.f, 0.f);
        if (has_values) v0 = P::unpack(*p0), v1 = P::unpack(*p1);  // M tiles of the summary: zero values
        // R as hi (over V) + lo: near beta = 2 with (nearly) parallel keys U = A diag(beta) R sums R's rows
        // against an A diag(beta) that alternates in sign, and one 16-bit rounding of R would grow the state's
        // error by ~1% a chunk (docs/chunk_fwd.md "Numerics")
        const float x00 = v0.x - ek0 * racc[nt][0], x01 = v0.y - ek0 * racc[nt][1];
        const float x10 = v1.x - ek1 * racc[nt][2], x11 = v1.y - ek1 * racc[nt][3];
        *p0 = P::pack(x00, x01);
        *p1 = P::pack(x10, x11);
        const float2 f0 = P::unpack(*p0), f1 = P::unpack(*p1);
        *reinterpret_cast<uint32_t*>(&sm.rl[hf][r0 * LDV + j]) = P::pack(x00 - f0.x, x01 - f0.y);
        *reinterpret_cast<uint32_t*>(&sm.rl[hf][r1 * LDV + j]) = P::pack(x10 - f1.x, x11 - f1.y);
        oacc[nt][0] *= eq0;
        oacc[nt][1] *= eq0;
        oacc[nt][2] *= eq1;
        oacc[nt][3] *= eq1;
      }
    }
    __syncthreads();  // B1: every row of R is written

    // ---- phase 2: U = (A diag(beta)) R for rows 16 rg.., columns cb.. (A causal: blocks kc <= rg)
    if (computes) {
      float uacc[NT][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) uacc[nt][e] = 0.f;
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) {
        if (kc > rg) continue;
        const int blk = rg * (rg + 1) / 2 + kc;
        const uint4 h4 = afr[blk * 64 + lane], l4 = afr[blk * 64 + 32 + lane];
        const uint32_t ah[4] = {h4.x, h4.y, h4.z, h4.w}, al[4] = {l4.x, l4.y, l4.z, l4.w};
#pragma unroll
        for (int np = 0; np < NP2; ++np) {
          uint32_t b[4];
          ldsm_x4_t(b, &vt[(16 * kc + (lane & 7) + ((lane >> 3) & 1) * 8) * LDV + cb + 16 * np + (lane >> 4) * 8]);
          mma_m16n8k16<BF16>(uacc[2 * np], ah, b[0], b[1]);
          mma_m16n8k16<BF16>(uacc[2 * np + 1], ah, b[2], b[3]);
          mma_m16n8k16<BF16>(uacc[2 * np], al, b[0], b[1]);
          mma_m16n8k16<BF16>(uacc[2 * np + 1], al, b[2], b[3]);
        }
      }
      // uacc += x R_kc, x one 16-bit A fragment of a row block, R_kc the 16 token rows at 16 kc of the tile r
      const auto acc_rows = [&](const uint4& x4, const E* r, int kc) {
        const uint32_t x[4] = {x4.x, x4.y, x4.z, x4.w};
#pragma unroll
        for (int np = 0; np < NP2; ++np) {
          uint32_t b[4];
          ldsm_x4_t(b, &r[(16 * kc + (lane & 7) + ((lane >> 3) & 1) * 8) * LDV + cb + 16 * np + (lane >> 4) * 8]);
          mma_m16n8k16<BF16>(uacc[2 * np], x, b[0], b[1]);
          mma_m16n8k16<BF16>(uacc[2 * np + 1], x, b[2], b[3]);
        }
      };
      // + A'_hi R_lo, a loop of its own (inside the one above it spilled at 128 registers)
#pragma unroll
      for (int kc = 0; kc < 4; ++kc)
        if (kc <= rg) acc_rows(afr[(rg * (rg + 1) / 2 + kc) * 64 + lane], sm.rl[hf], kc);
      // + A'_rest R_hi where the chunk's largest beta exceeds 1 (uniform), A' = A diag(beta): its third part
      // (record_rest says why)
      if (beta_above_one(hdr)) {
        const uint4* rfr = record_rest(a, n, t0, c, h);
#pragma unroll 1
        for (int kc = 0; kc <= rg; ++kc)  // a loop, not unrolled: unrolled it spilled at 128 registers
          acc_rows(rfr[(rg * (rg + 1) / 2 + kc) * 32 + lane], vt, kc);
      }
      const float dk0 = hdr[128 + r0], dk1 = hdr[128 + r1];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int j = cb + nt * 8 + 2 * t4;
        const uint32_t h0 = P::pack(uacc[nt][0], uacc[nt][1]), h1 = P::pack(uacc[nt][2], uacc[nt][3]);
        const float2 f0 = P::unpack(h0), f1 = P::unpack(h1);
        *reinterpret_cast<uint32_t*>(&sm.u[hf][r0 * LDV + j]) = h0;
        *reinterpret_cast<uint32_t*>(&sm.u[hf][r1 * LDV + j]) = h1;
        *reinterpret_cast<uint32_t*>(&sm.ul[hf][r0 * LDV + j]) = P::pack(uacc[nt][0] - f0.x, uacc[nt][1] - f0.y);
        *reinterpret_cast<uint32_t*>(&sm.ul[hf][r1 * LDV + j]) = P::pack(uacc[nt][2] - f1.x, uacc[nt][3] - f1.y);
        // diag(dk) U for the state update as hi (rows 0-63 of the S0 copy; its last reader, phase 1, is before B1)
        // + lo (rows 64-127): with near-identical keys K^T diag(dk) U telescopes over U's rows, and 64 independent
        // 16-bit roundings of the rows add up to ~1e-2 in the final state (docs/chunk_fwd.md "Numerics")
        const float d00 = dk0 * uacc[nt][0], d01 = dk0 * uacc[nt][1], d10 = dk1 * uacc[nt][2], d11 = dk1 * uacc[nt][3];
        const uint32_t e0 = P::pack(d00, d01), e1 = P::pack(d10, d11);
        const float2 g0 = P::unpack(e0), g1 = P::unpack(e1);
        *reinterpret_cast<uint32_t*>(&sm.s[hf][r0 * LDV + j]) = e0;
        *reinterpret_cast<uint32_t*>(&sm.s[hf][r1 * LDV + j]) = e1;
        *reinterpret_cast<uint32_t*>(&sm.s[hf][(kC + r0) * LDV + j]) = P::pack(d00 - g0.x, d01 - g0.y);
        *reinterpret_cast<uint32_t*>(&sm.s[hf][(kC + r1) * LDV + j]) = P::pack(d10 - g1.x, d11 - g1.y);
      }
    }
    __syncthreads();  // B2: every row of U and diag(dk) U is written; every read of R is done

    if (computes) {
      // ---- phase 3a: O += P U (causal; P and U as hi + lo), to global
      if (has_output) {
#pragma unroll
        for (int kc = 0; kc < 4; ++kc) {
          if (kc > rg) continue;
          const int blk = rg * (rg + 1) / 2 + kc;
          const uint4 h4 = pfr[blk * 64 + lane], l4 = pfr[blk * 64 + 32 + lane];
          const uint32_t pf[4] = {h4.x, h4.y, h4.z, h4.w}, pl[4] = {l4.x, l4.y, l4.z, l4.w};
#pragma unroll
          for (int np = 0; np < NP2; ++np) {
            uint32_t b[4];
            const int off = (16 * kc + (lane & 7) + ((lane >> 3) & 1) * 8) * LDV + cb + 16 * np + (lane >> 4) * 8;
            ldsm_x4_t(b, &sm.u[hf][off]);
            mma_m16n8k16<BF16>(oacc[2 * np], pf, b[0], b[1]);
            mma_m16n8k16<BF16>(oacc[2 * np + 1], pf, b[2], b[3]);
            mma_m16n8k16<BF16>(oacc[2 * np], pl, b[0], b[1]);
            mma_m16n8k16<BF16>(oacc[2 * np + 1], pl, b[2], b[3]);
            ldsm_x4_t(b, &sm.ul[hf][off]);
            mma_m16n8k16<BF16>(oacc[2 * np], pf, b[0], b[1]);
            mma_m16n8k16<BF16>(oacc[2 * np + 1], pf, b[2], b[3]);
          }
        }
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int r = hr ? r1 : r0;
          if (r < nvalid) {
            E* orow = obase + (t0 + tok0 + r) * a.o_st;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
              *reinterpret_cast<uint32_t*>(orow + cb + nt * 8 + 2 * t4) =
                  P::pack(oacc[nt][2 * hr], oacc[nt][2 * hr + 1]);
          }
        }
      }

      // ---- phase 3b: S <- en S + K^T (diag(dk) U)_hi + K^T (diag(dk) U)_lo (rows rw.., columns cb..). K^T's A
      // fragments come from ldmatrix.trans of the k tile; diag(dk) U was split in phase 2 (over the dead S0 copy).
      const float en = hdr[192];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) sacc[mt][nt][e] *= en;
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) {
        uint32_t ak[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          ldsm_x4_t(ak[mt],
                    &kt[(16 * kc + (lane & 7) + ((lane >> 4) & 1) * 8) * LDQ + rw + 16 * mt + ((lane >> 3) & 1) * 8]);
#pragma unroll
        for (int part = 0; part < 2; ++part)  // hi, lo
#pragma unroll
          for (int np = 0; np < NP2; ++np) {
            uint32_t b[4];
            ldsm_x4_t(b, &sm.s[hf][(kC * part + 16 * kc + (lane & 7) + ((lane >> 3) & 1) * 8) * LDV + cb + 16 * np +
                                   (lane >> 4) * 8]);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
              mma_m16n8k16<BF16>(sacc[mt][2 * np], ak[mt], b[0], b[1]);
              mma_m16n8k16<BF16>(sacc[mt][2 * np + 1], ak[mt], b[2], b[3]);
            }
          }
      }
      // the 16-bit copy for the next chunk's K S0 and Q S0, over diag(dk) U: the four warps of this column half
      // (the only readers of those columns) must be done with it
      named_barrier<128>(1 + (w >> 2));
      store_state_copy<P>(sm.s[hf], LDV, sacc, rw, cb, g8, t4);

      store_checkpoint(a, wk, c, h, vcol0, sacc, rw, cb, g8, t4);
    }
  }
  cp_async_wait_all();  // no copy may be in flight at exit

  // ---- final state (a zero-length sequence stores its start state unchanged); summary columns from tile 0
  if (!active) return;
  const StateRef dst = end_state(a, wk, item, h, K);
  if (dst.p) store_state(dst, sacc, rw, cb, summary ? tile * kBV : vcol0, g8, t4);
}

// grid = (items, Hv, ceil(tiles / NH)); NH = V / 64 halves per CTA.
template <int K, bool BF16, int NH>
int launch_chunk_state(const ChunkKernelArgs& a, int64_t items, int64_t tiles, void* stream) {
  using E = typename Elem<BF16>::T;
  const size_t smem = sizeof(StateSmem<K, E, NH>);
  static std::atomic<uint64_t> done_mask{0};
  if (const int e = prepare_launch(chunk_fwd_state_kernel<K, BF16, NH>, smem, done_mask)) return e;
  if (items <= 0 || a.Hv <= 0 || tiles <= 0) return 0;
  const dim3 grid(static_cast<unsigned>(items), static_cast<unsigned>(a.Hv),
                  static_cast<unsigned>((tiles + NH - 1) / NH));
  chunk_fwd_state_kernel<K, BF16, NH><<<grid, NH * 256, smem, static_cast<cudaStream_t>(stream)>>>(a);
  return static_cast<int>(cudaGetLastError());
}

// The mma.sync pass's shapes (K = V = 128 is the wgmma pass's, chunk_fwd_state_wg.cuh): K = 64, 128 x one 64-column
// value tile per CTA (V = 64), K = 64 x two (V = 128).
template <bool BF16>
int launch_chunk_state_for(const ChunkKernelArgs& a, int64_t K, int64_t items, int64_t tiles, void* stream) {
  if (a.V == 64)
    return K == 64 ? launch_chunk_state<64, BF16, 1>(a, items, tiles, stream)
                   : launch_chunk_state<128, BF16, 1>(a, items, tiles, stream);
  return launch_chunk_state<64, BF16, 2>(a, items, tiles, stream);
}

}  // namespace flashgdn::cuda::chunk_detail
