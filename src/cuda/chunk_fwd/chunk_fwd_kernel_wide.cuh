// The fused chunked-prefill kernel (gdn-math §5), 8 warps per CTA (FLASHGDN_CHUNK_IMPL=wide; no workspace without
// the segment split).
// One CTA owns one (work item, value head, 64-column state tile) and walks the chunks of its range in order; the
// fp32 state lives in registers across chunks and nothing per chunk goes to global memory. Modes
// (ChunkKernelArgs::mode): kModeForward walks whole sequences; kModeForwardSplit one segment of the segment split
// (start state from the scan); kModeSummary the augmented state pass [I | 0] with values [0 | V] over one segment,
// storing [M | N] (gdn-math §6.1). Compared with the first 4-warp kernel (W formed explicitly; removed after the
// H200 comparison of 2026-11-29, bench/results/2026-11-29-h200-kernel-paths.md):
//
//   * U is formed as U = (A diag(b)) R with R = V - diag(e^gamma) K S0 (gdn-math §5.3: (I + L) U =
//     diag(b) (V - Gamma K S0)), so W = (A diag(b e^gamma)) K is never formed (the 64 x K x 64 causal GEMM and its
//     64 fp32 accumulators are gone), and A enters as bf16 hi + lo (with near-identical keys the rounded
//     subdiagonal -|k|^2 otherwise adds a coherent error over the chunk; tests/cuda/standalone_chunk/
//     emulate_numerics.py: identical keys 1.2e-2 -> 3.3e-3, random keys 3.4e-3 -> 2.9e-3).
//   * NW = 8: warp w = (row group rg = w % 4, column half ch = w / 4). Warp (rg, ch) owns chunk rows 16 rg ..
//     16 rg + 15 and state rows rg K/4 .. of the 32 state columns ch * 32 ..; every state-dependent GEMM (K S0,
//     Q S0, U, the state update, P U) is split by columns, so each warp runs half the mma chain of the 4-warp
//     kernel; the ten causal K K^T tiles go 2/2/1/1/1/1/1/1; the inverse's block merges are split by the two
//     8-column halves of each 16x16 block; the two warps of a row group split P = QK^T (.) D by 16-column
//     blocks and exchange them through shared memory (P is the A operand of both halves of P U). Two CTAs per
//     SM at 128 registers (two 8-warp CTAs per SM), 16-28 B of spills (a few L1-resident words per chunk; the
//     K S0 / Q S0 loop is unrolled by 2 only; one CTA per SM without the cap had no spills but ran 1.0-1.4x slower).
// Per chunk (warp (rg, ch); rows r of the chunk are 16 rg + ..):
//   gamma = cumsum(g), optional l2 norm of q, k rows; L = strictlower(diag(b) (KK^T (.) D)) in fp32
//   K S0, Q S0 (state fragments shared);  R = V - diag(e^gamma) K S0 over the warp's rows and columns
//   A = (I + L)^-1 (fp32, as in the default kernel, 3xTF32 merges)
//   U = (A diag(b)) R                                    (A as bf16 hi + lo)
//   P = QK^T (.) D                                       (diagonal included: post-update read)
//   O = scale (diag(e^gamma) Q S0 + P U)                 (P and U as bf16 hi + lo pairs in P U)
//   S <- e^{gamma_n} S + K^T diag(e^{gamma_n - gamma}) U (fp32 accumulation in registers)
#pragma once

#include "cuda/chunk_fwd/chunk_fwd_common.cuh"

namespace flashgdn::cuda::chunk_detail {

// d (one m16n8 tile: columns 8 nt .. 8 nt + 7 of a 16x16 result) += X Y, X and Y 16x16 fp32 row-major in
// shared memory, 3xTF32 (fp32-accurate, as mma16_f32).
__device__ __forceinline__ void mma16_f32_half(float (&d)[4], const float* x, int ldx, const float* y, int ldy, int nt,
                                               int g, int t) {
#pragma unroll
  for (int ks = 0; ks < 2; ++ks) {
    const float av[4] = {x[g * ldx + 8 * ks + t], x[(g + 8) * ldx + 8 * ks + t], x[g * ldx + 8 * ks + t + 4],
                         x[(g + 8) * ldx + 8 * ks + t + 4]};
    uint32_t ab[4], as[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) split_tf32(av[e], ab[e], as[e]);
    uint32_t bb0, bs0, bb1, bs1;
    split_tf32(y[(8 * ks + t) * ldy + 8 * nt + g], bb0, bs0);
    split_tf32(y[(8 * ks + t + 4) * ldy + 8 * nt + g], bb1, bs1);
    mma_tf32(d, as, bb0, bb1);
    mma_tf32(d, ab, bs0, bs1);
    mma_tf32(d, ab, bb0, bb1);
  }
}

// Named barrier 1 + rg over the 64 threads of the two warps of row group rg (immediate ids: ptxas then
// reserves 5 barriers, not 16).
__device__ __forceinline__ void pair_barrier(int rg) {
  switch (rg) {
    case 0:
      asm volatile("bar.sync 1, 64;\n" ::: "memory");
      break;
    case 1:
      asm volatile("bar.sync 2, 64;\n" ::: "memory");
      break;
    case 2:
      asm volatile("bar.sync 3, 64;\n" ::: "memory");
      break;
    default:
      asm volatile("bar.sync 4, 64;\n" ::: "memory");
      break;
  }
}

// The ten causal 16x16 tiles (i, j), i >= j, of K K^T in a fixed order; warp w takes tiles w, w + NW, ...
__device__ __forceinline__ void causal_tile(int idx, int* ti, int* tj) {
  // (0,0) (1,0) (1,1) (2,0) (2,1) (2,2) (3,0) (3,1) (3,2) (3,3)
  const int i = idx >= 6 ? 3 : (idx >= 3 ? 2 : (idx >= 1 ? 1 : 0));
  *ti = i;
  *tj = idx - i * (i + 1) / 2;
}

// 8 warps, two CTAs per SM (128 registers; one CTA per SM without the cap had no spills but ran 1.0-1.4x slower).
template <int K, bool BF16>
__global__ void __launch_bounds__(256, 2) chunk_fwd_kernel_wide(const ChunkKernelArgs a) {
  constexpr int NW = 8;
  using E = typename Elem<BF16>::T;
  using P = Elem<BF16>;
  using Sm = Smem<K, E>;
  constexpr int NTH = NW * 32;
  constexpr int CS = NW / 4;      // column splits of the 64-column tile
  constexpr int NCOL = kBV / CS;  // state / value columns per warp
  constexpr int NT = NCOL / 8;    // m16n8 tiles per warp row block
  constexpr int NP2 = NT / 2;     // 16-column ldmatrix.x4.trans groups
  constexpr int LDQ = Sm::LDQ, LDV = Sm::LDV, LDF = Sm::LDF;
  constexpr int MT = K / 64;  // 16-row state m-tiles per warp (warp owns K/4 state rows)
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Sm& sm = *reinterpret_cast<Sm*>(smem_raw);

  const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g8 = lane >> 2, t4 = lane & 3;
  const int rg = w & 3, ch = w >> 2, cb = ch * NCOL;
  const int h = blockIdx.y, tile = blockIdx.z;
  const int64_t item = blockIdx.x;
  const int hk = h / a.group;

  ChunkWork wk;
  if (!resolve_work(a, item, &wk)) return;
  const int64_t bidx = wk.bidx, t0 = wk.t0, len = wk.len, c_begin = wk.c_begin, c_end = wk.c_end;
  const bool summary = a.mode == kModeSummary;
  const bool has_output = !summary;
  const bool m_tile = summary && tile < K / 64;  // augmented columns of M: identity start, zero values
  const bool has_values = !m_tile;
  const int vcol0 = summary ? (tile - K / 64) * kBV : tile * kBV;  // value column of this tile

  // ---- start state into registers (fp32) and shared memory (GEMM operand)
  const int rw = rg * (K / 4);  // first state row of this warp
  float sacc[MT][NT][4];
  load_start_state(start_state(a, wk, item, h, K), m_tile, true, tile, vcol0, sacc, rw, cb, g8, t4);
  store_state_copy<P>(sm.s, LDV, sacc, rw, cb, g8, t4);

  const GateHead gh = gate_head(a, h);  // per-head gate parameters

  const E* qbase = static_cast<const E*>(a.q) + bidx * a.q_sb + hk * a.q_sh;
  const E* kbase = static_cast<const E*>(a.k) + bidx * a.k_sb + hk * a.k_sh;
  const E* vbase = static_cast<const E*>(a.v) + bidx * a.v_sb + h * a.v_sh + vcol0;
  E* obase = static_cast<E*>(a.o) + bidx * a.o_sb + h * a.o_sh + vcol0;

  const int r0 = 16 * rg + g8, r1 = r0 + 8;  // the two chunk rows of this thread in C fragments

  // Asynchronous tile loads of chunk ck (rows past the sequence end are zero-filled with plain stores).
  auto issue_qk = [&](E* dst, const E* base, int64_t st, int64_t ck) {
    constexpr int VPR = K / 8, RPP = NTH / VPR, NP = kC / RPP;
    const int lrow = tid / VPR, lvec = tid % VPR;
    const int64_t nv = len - ck * kC;
#pragma unroll
    for (int p = 0; p < NP; ++p) {
      const int r = p * RPP + lrow;
      E* d = &dst[r * LDQ + lvec * 8];
      if (r < nv)
        cp_async16(d, base + (t0 + ck * kC + r) * st + lvec * 8);
      else
        *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
    }
  };
  auto issue_v = [&](int64_t ck) {
    constexpr int RPP = NTH / 8, NP = kC / RPP;
    const int64_t nv = len - ck * kC;
#pragma unroll
    for (int p = 0; p < NP; ++p) {
      const int r = p * RPP + (tid >> 3), vec = tid & 7;
      E* d = &sm.v[r * LDV + vec * 8];
      if (r < nv)
        cp_async16(d, vbase + (t0 + ck * kC + r) * a.v_st + vec * 8);
      else
        *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
    }
  };
  // Raw g and beta of chunk ck for tokens 2 lane, 2 lane + 1 (warp 0), loaded one chunk ahead so the global
  // latency is off the chain; the gate and the sigmoid are applied when the chunk starts (gate_beta).
  float g_next[2] = {0.f, 0.f}, b_next[2] = {1.f, 1.f};
  auto load_gb = [&](int64_t ck) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int r = 2 * lane + e;
      if (r < len - ck * kC) {
        const int64_t t = t0 + ck * kC + r;
        if (a.g) g_next[e] = load_scalar(a.g, a.g_dtype, bidx * a.g_sb + t * a.g_st + h * a.g_sh);
        if (a.beta) b_next[e] = load_scalar(a.beta, a.b_dtype, bidx * a.b_sb + t * a.b_st + h * a.b_sh);
      }
    }
  };
#ifdef FGDN_CHUNK_PROFILE
  const bool prof_on = a.prof != nullptr && tid == 0 && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0;
  unsigned long long prof_acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  unsigned long long prof_last = clock64();
#endif

  for (int64_t c = c_begin; c < c_end; ++c) {
    const int64_t tok0 = c * kC;  // first token of the chunk, relative to the sequence start
    const int64_t nvalid = (len - tok0) < kC ? (len - tok0) : kC;
    __syncthreads();  // the previous chunk is done with every shared buffer

    // ---- q, k, v tiles by cp.async (for every chunk but the first they were issued during the previous one);
    // padded rows are zero-filled
    if (c == c_begin) {
      if (has_output) issue_qk(sm.q, qbase, a.q_st, c);
      if (has_values) issue_v(c);
      issue_qk(sm.k, kbase, a.k_st, c);  // later chunks: prefetched during the previous one
    }
    cp_async_commit();

    // ---- g, beta and gamma = cumsum(g) (warp 0; padded rows: g = 0, beta = 0), while the copies fly
    if (w == 0) {
      if (c == c_begin) load_gb(c);
      float gv[2], bv[2];
      gate_beta(a, gh, g_next[0], b_next[0], 2 * lane < nvalid, &gv[0], &bv[0]);
      gate_beta(a, gh, g_next[1], b_next[1], 2 * lane + 1 < nvalid, &gv[1], &bv[1]);
      store_gamma_beta(gv, bv, lane, sm.gam, sm.beta);
      if (c + 1 < c_end) load_gb(c + 1);  // in flight until the next chunk
    }

    cp_async_wait_all();
    __syncthreads();
    FGDN_PROF(0);

    // ---- optional l2 norm of q and k rows in fp32: x / sqrt(sum x^2 + 1e-6) (gdn-math §1.4)
    if (a.l2norm) {
      constexpr int VPR = K / 8, RPP = NTH / VPR, NP = kC / RPP;
      const int lrow = tid / VPR, lvec = tid % VPR;
#pragma unroll
      for (int which = 0; which < 2; ++which) {
        if (which == 0 && !has_output) continue;
        E* dst = which == 0 ? sm.q : sm.k;
#pragma unroll
        for (int p = 0; p < NP; ++p) {
          uint4* cell = reinterpret_cast<uint4*>(&dst[(p * RPP + lrow) * LDQ + lvec * 8]);
          uint4 val = *cell;
          uint32_t* u = reinterpret_cast<uint32_t*>(&val);
          const float rho = row_rnorm<P, VPR>(u);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float2 f = P::unpack(u[e]);
            u[e] = P::pack(f.x * rho, f.y * rho);
          }
          *cell = val;
        }
      }
      __syncthreads();
    }

    // ---- L = strictlower(diag(b) (KK^T (.) D)) to shared memory in fp32, by 16x16 tiles (i >= j): warp w takes
    // causal tiles w, w + NW. D_rs = exp(gamma_r - gamma_s) only where r >= s, selected, never factored (§5.8).
#pragma unroll
    for (int tt = 0; tt < (10 + NW - 1) / NW; ++tt) {
      const int idx = w + tt * NW;
      if (idx >= 10) continue;
      int ti, tj;
      causal_tile(idx, &ti, &tj);
      float kk[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
      for (int ks = 0; ks < K / 16; ++ks) {
        uint32_t ak[4], b[4];
        ldsm_x4(ak, &sm.k[(16 * ti + (lane & 15)) * LDQ + ks * 16 + (lane >> 4) * 8]);
        ldsm_x4(b, &sm.k[(16 * tj + (lane & 7) + ((lane >> 4) << 3)) * LDQ + ks * 16 + ((lane >> 3) & 1) * 8]);
        mma<BF16>(kk[0], ak, b[0], b[1]);
        mma<BF16>(kk[1], ak, b[2], b[3]);
      }
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = 16 * ti + g8 + (e >> 1) * 8, s2 = 16 * tj + nt * 8 + 2 * t4 + (e & 1);
          const float dec = s2 < r ? __expf(sm.gam[r] - sm.gam[s2]) : 0.f;
          sm.x.L[r * LDF + s2] = s2 < r ? sm.beta[r] * kk[nt][e] * dec : 0.f;
        }
    }

    // ---- K S0 and Q S0 for rows 16 rg.., columns cb.. on the same state fragments; R = V - diag(e^gamma) K S0
    // replaces this warp's part of the value tile (read by U after the inverse's barriers)
    float oacc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) oacc[nt][e] = 0.f;
    {
      float racc[NT][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) racc[nt][e] = 0.f;
#pragma unroll 2  // partly rolled at 128 registers: no spills
      for (int kd = 0; kd < K / 16; ++kd) {
        uint32_t ak[4], aq[4];
        ldsm_x4(ak, &sm.k[(16 * rg + (lane & 15)) * LDQ + kd * 16 + (lane >> 4) * 8]);
        if (has_output) ldsm_x4(aq, &sm.q[(16 * rg + (lane & 15)) * LDQ + kd * 16 + (lane >> 4) * 8]);
#pragma unroll
        for (int np = 0; np < NP2; ++np) {
          uint32_t b[4];
          ldsm_x4_t(b, &sm.s[(16 * kd + (lane & 7) + ((lane >> 3) & 1) * 8) * LDV + cb + 16 * np + (lane >> 4) * 8]);
          mma<BF16>(racc[2 * np], ak, b[0], b[1]);
          mma<BF16>(racc[2 * np + 1], ak, b[2], b[3]);
          if (has_output) {
            mma<BF16>(oacc[2 * np], aq, b[0], b[1]);
            mma<BF16>(oacc[2 * np + 1], aq, b[2], b[3]);
          }
        }
      }
      const float e0 = __expf(sm.gam[r0]), e1 = __expf(sm.gam[r1]);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int j = cb + nt * 8 + 2 * t4;
        uint32_t* p0 = reinterpret_cast<uint32_t*>(&sm.v[r0 * LDV + j]);
        uint32_t* p1 = reinterpret_cast<uint32_t*>(&sm.v[r1 * LDV + j]);
        float2 v0 = make_float2(0.f, 0.f), v1 = make_float2(0.f, 0.f);
        if (has_values) v0 = P::unpack(*p0), v1 = P::unpack(*p1);  // M tiles of the summary: zero values
        *p0 = P::pack(v0.x - e0 * racc[nt][0], v0.y - e0 * racc[nt][1]);
        *p1 = P::pack(v1.x - e1 * racc[nt][2], v1.y - e1 * racc[nt][3]);
      }
    }
    __syncthreads();
    FGDN_PROF(1);

    // ---- A = (I + L)^-1 in fp32 (gdn-math §5.7, blocked with substitution on the diagonal blocks)
    // Diagonal block w (warps 0..3) by substitution (diag_inverse16)
    if (w < 4) diag_inverse16(sm.x.L, sm.A, LDF, 16 * w, lane);
    __syncthreads();
    // Off-diagonal blocks by distance d = i - j, warp (rg, ch) taking block (rg + d, rg) (columns 8 ch .. when
    // NW = 8: the two 8-column halves of a block are independent):
    //   T = sum_{k=j}^{i-1} L_ik A_kj,  A_ij = -A_ii T   (16x16 products on the tensor cores in 3xTF32)
#pragma unroll
    for (int d = 1; d < 4; ++d) {
      if (rg < 4 - d) {
        const int i = rg + d, j = rg;
        float* tw = &sm.T[rg * 256];
        // this warp's 8 columns (8 ch ..) of the block; tw columns 8 ch .. are written and read by it only
        float tacc[4] = {0.f, 0.f, 0.f, 0.f};
        for (int kb = j; kb < i; ++kb)
          mma16_f32_half(tacc, &sm.x.L[16 * i * LDF + 16 * kb], LDF, &sm.A[16 * kb * LDF + 16 * j], LDF, ch, g8, t4);
        tw[g8 * 16 + 8 * ch + 2 * t4] = tacc[0];
        tw[g8 * 16 + 8 * ch + 2 * t4 + 1] = tacc[1];
        tw[(g8 + 8) * 16 + 8 * ch + 2 * t4] = tacc[2];
        tw[(g8 + 8) * 16 + 8 * ch + 2 * t4 + 1] = tacc[3];
        __syncwarp();
        float racc[4] = {0.f, 0.f, 0.f, 0.f};
        mma16_f32_half(racc, &sm.A[16 * i * LDF + 16 * i], LDF, tw, 16, ch, g8, t4);
        float* a0 = &sm.A[(16 * i + g8) * LDF + 16 * j + 8 * ch + 2 * t4];
        float* a1 = &sm.A[(16 * i + g8 + 8) * LDF + 16 * j + 8 * ch + 2 * t4];
        *reinterpret_cast<float2*>(a0) = make_float2(-racc[0], -racc[1]);
        *reinterpret_cast<float2*>(a1) = make_float2(-racc[2], -racc[3]);
      }
      __syncthreads();
    }
    FGDN_PROF(2);

    // ---- U = (A diag(b)) R for rows 16 rg.., columns cb.., A split into bf16 hi + lo
    {
      float uacc[NT][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) uacc[nt][e] = 0.f;
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) {
        if (kc > rg) continue;  // A is lower triangular
        const int s0 = 16 * kc + 2 * t4;
        const float2 a00 = *reinterpret_cast<const float2*>(&sm.A[r0 * LDF + s0]);
        const float2 a10 = *reinterpret_cast<const float2*>(&sm.A[r1 * LDF + s0]);
        const float2 a01 = *reinterpret_cast<const float2*>(&sm.A[r0 * LDF + s0 + 8]);
        const float2 a11 = *reinterpret_cast<const float2*>(&sm.A[r1 * LDF + s0 + 8]);
        const float b0 = sm.beta[s0], b1 = sm.beta[s0 + 1], b8 = sm.beta[s0 + 8], b9 = sm.beta[s0 + 9];
        const float x[4][2] = {
            {a00.x * b0, a00.y * b1}, {a10.x * b0, a10.y * b1}, {a01.x * b8, a01.y * b9}, {a11.x * b8, a11.y * b9}};
        uint32_t ah[4], al[4];
#pragma unroll
        for (int q2 = 0; q2 < 4; ++q2) {
          ah[q2] = P::pack(x[q2][0], x[q2][1]);
          const float2 f = P::unpack(ah[q2]);
          al[q2] = P::pack(x[q2][0] - f.x, x[q2][1] - f.y);
        }
#pragma unroll
        for (int np = 0; np < NP2; ++np) {
          uint32_t b[4];
          ldsm_x4_t(b, &sm.v[(16 * kc + (lane & 7) + ((lane >> 3) & 1) * 8) * LDV + cb + 16 * np + (lane >> 4) * 8]);
          mma<BF16>(uacc[2 * np], ah, b[0], b[1]);
          mma<BF16>(uacc[2 * np + 1], ah, b[2], b[3]);
          mma<BF16>(uacc[2 * np], al, b[0], b[1]);
          mma<BF16>(uacc[2 * np + 1], al, b[2], b[3]);
        }
      }
      // U (hi, lo) and Ubar = diag(e^{gamma_n - gamma}) U to shared (gamma_n = gamma at row 63: padded g = 0)
      const float gn = sm.gam[kC - 1];
      const float dn0 = __expf(gn - sm.gam[r0]), dn1 = __expf(gn - sm.gam[r1]);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int j = cb + nt * 8 + 2 * t4;
        const uint32_t h0 = P::pack(uacc[nt][0], uacc[nt][1]), h1 = P::pack(uacc[nt][2], uacc[nt][3]);
        const float2 f0 = P::unpack(h0), f1 = P::unpack(h1);
        *reinterpret_cast<uint32_t*>(&sm.x.uu.u[r0 * LDV + j]) = h0;
        *reinterpret_cast<uint32_t*>(&sm.x.uu.u[r1 * LDV + j]) = h1;
        *reinterpret_cast<uint32_t*>(&sm.x.uu.ul[r0 * LDV + j]) = P::pack(uacc[nt][0] - f0.x, uacc[nt][1] - f0.y);
        *reinterpret_cast<uint32_t*>(&sm.x.uu.ul[r1 * LDV + j]) = P::pack(uacc[nt][2] - f1.x, uacc[nt][3] - f1.y);
        // Ubar as hi (sm.x.uu.ub) + lo (rows 0-63 of the dead state operand, last read before the inverse's
        // barriers): with near-identical keys K^T Ubar telescopes over U's rows, and 64 independent 16-bit
        // roundings of the rows add up to ~1e-2 in the final state (docs/chunk_fwd.md "Numerics")
        const float d00 = uacc[nt][0] * dn0, d01 = uacc[nt][1] * dn0, d10 = uacc[nt][2] * dn1, d11 = uacc[nt][3] * dn1;
        const uint32_t b0 = P::pack(d00, d01), b1 = P::pack(d10, d11);
        const float2 c0 = P::unpack(b0), c1 = P::unpack(b1);
        *reinterpret_cast<uint32_t*>(&sm.x.uu.ub[r0 * LDV + j]) = b0;
        *reinterpret_cast<uint32_t*>(&sm.x.uu.ub[r1 * LDV + j]) = b1;
        *reinterpret_cast<uint32_t*>(&sm.s[r0 * LDV + j]) = P::pack(d00 - c0.x, d01 - c0.y);
        *reinterpret_cast<uint32_t*>(&sm.s[r1 * LDV + j]) = P::pack(d10 - c1.x, d11 - c1.y);
      }
    }

    FGDN_PROF(3);
    // ---- O = scale (diag(e^gamma) Q S + P U): Q S is done, scale its rows
    if (has_output) {
      const float e0 = __expf(sm.gam[r0]), e1 = __expf(sm.gam[r1]);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        oacc[nt][0] *= e0;
        oacc[nt][1] *= e0;
        oacc[nt][2] *= e1;
        oacc[nt][3] *= e1;
      }
    }
    // ---- P = QK^T (.) D (diagonal included: post-update read) as bf16 hi + lo A fragments (all 64 columns:
    // both column halves of P U need them)
    // NW = 8: the two warps of a row group split P's 16-column blocks (warp ch takes blocks kc = ch, ch + 2) and
    // exchange them through this row group's (now dead) rows of A in shared memory, as A fragments: pbuf[0, 512)
    // hi, [512, 1024) lo, index (kc * 4 + q2) * 32 + lane (4 KB <= 16 rows x LDF floats).
    uint32_t* pbuf = reinterpret_cast<uint32_t*>(&sm.A[16 * rg * LDF]);
    uint32_t pf[4][4], pl[4][4];
    if (has_output) {
      // the pair's U has read its rows of A (only this row group reads them): named barrier of its 64 threads
      pair_barrier(rg);
      // one 16-column block of P at a time (8 accumulators live, not 32: no spills at 128 registers)
      const float gr[2] = {sm.gam[r0], sm.gam[r1]};
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) {
        if ((kc & 1) != ch) continue;  // the other warp of the row group computes this block
        float qk[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        if (kc <= rg) {  // P is causal: blocks right of the diagonal stay zero
#pragma unroll
          for (int ks = 0; ks < K / 16; ++ks) {
            uint32_t aq[4], b[4];
            ldsm_x4(aq, &sm.q[(16 * rg + (lane & 15)) * LDQ + ks * 16 + (lane >> 4) * 8]);
            ldsm_x4(b, &sm.k[(16 * kc + (lane & 7) + ((lane >> 4) << 3)) * LDQ + ks * 16 + ((lane >> 3) & 1) * 8]);
            mma<BF16>(qk[0], aq, b[0], b[1]);
            mma<BF16>(qk[1], aq, b[2], b[3]);
          }
#pragma unroll
          for (int n2 = 0; n2 < 2; ++n2)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int hf = e >> 1, r = hf ? r1 : r0, s2 = 16 * kc + n2 * 8 + 2 * t4 + (e & 1);
              const float dec = s2 <= r ? __expf(gr[hf] - sm.gam[s2]) : 0.f;
              qk[n2][e] = s2 <= r ? qk[n2][e] * dec : 0.f;
            }
        }
#pragma unroll
        for (int q2 = 0; q2 < 4; ++q2) {
          const int n2 = q2 >> 1, e0 = (q2 & 1) * 2;
          pf[kc][q2] = P::pack(qk[n2][e0], qk[n2][e0 + 1]);
          const float2 f = P::unpack(pf[kc][q2]);
          pl[kc][q2] = P::pack(qk[n2][e0] - f.x, qk[n2][e0 + 1] - f.y);
          if (kc <= rg) {
            pbuf[(kc * 4 + q2) * 32 + lane] = pf[kc][q2];
            pbuf[512 + (kc * 4 + q2) * 32 + lane] = pl[kc][q2];
          }
        }
      }
    }
    FGDN_PROF(4);
    __syncthreads();  // U complete; every read of the old state operand and of R (in sm.v) done
    FGDN_PROF(5);
    // q and v of this chunk are dead: prefetch the next chunk's into the same tiles
    if (c + 1 < c_end) {
      if (has_output) issue_qk(sm.q, qbase, a.q_st, c + 1);
      if (has_values) issue_v(c + 1);
      cp_async_commit();
    }

    // ---- O += P U (causal, U as hi + lo), scaled, to global. Before the state update, so that P (32 registers)
    // and O die before the state fragments are loaded (no spills at 8 warps x 2 CTAs per SM)
    if (has_output) {
      // both halves of P from the exchange buffer (written before the mid barrier)
#pragma unroll
      for (int kc = 0; kc < 4; ++kc)
#pragma unroll
        for (int q2 = 0; q2 < 4; ++q2) {
          pf[kc][q2] = kc <= rg ? pbuf[(kc * 4 + q2) * 32 + lane] : 0u;
          pl[kc][q2] = kc <= rg ? pbuf[512 + (kc * 4 + q2) * 32 + lane] : 0u;
        }
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) {
        if (kc > rg) continue;  // P is causal
#pragma unroll
        for (int np = 0; np < NP2; ++np) {
          uint32_t b[4];
          const int off = (16 * kc + (lane & 7) + ((lane >> 3) & 1) * 8) * LDV + cb + 16 * np + (lane >> 4) * 8;
          ldsm_x4_t(b, &sm.x.uu.u[off]);
          mma<BF16>(oacc[2 * np], pf[kc], b[0], b[1]);
          mma<BF16>(oacc[2 * np + 1], pf[kc], b[2], b[3]);
          mma<BF16>(oacc[2 * np], pl[kc], b[0], b[1]);
          mma<BF16>(oacc[2 * np + 1], pl[kc], b[2], b[3]);
          ldsm_x4_t(b, &sm.x.uu.ul[off]);
          mma<BF16>(oacc[2 * np], pf[kc], b[0], b[1]);
          mma<BF16>(oacc[2 * np + 1], pf[kc], b[2], b[3]);
        }
      }
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int r = hf ? r1 : r0;
        if (r < nvalid) {
          E* orow = obase + (t0 + tok0 + r) * a.o_st;
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
            *reinterpret_cast<uint32_t*>(orow + cb + nt * 8 + 2 * t4) =
                P::pack(a.scale * oacc[nt][2 * hf], a.scale * oacc[nt][2 * hf + 1]);
        }
      }
    }

    // ---- S <- e^{gamma_n} S + K^T Ubar_hi + K^T Ubar_lo  (fp32 accumulation in registers; rows rw.., columns cb..)
    {
      const float en = __expf(sm.gam[kC - 1]);
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
                    &sm.k[(16 * kc + (lane & 7) + ((lane >> 4) & 1) * 8) * LDQ + rw + 16 * mt + ((lane >> 3) & 1) * 8]);
#pragma unroll
        for (int part = 0; part < 2; ++part)  // hi, lo
#pragma unroll
          for (int np = 0; np < NP2; ++np) {
            const E* ub = part ? sm.s : sm.x.uu.ub;
            uint32_t b[4];
            ldsm_x4_t(b, &ub[(16 * kc + (lane & 7) + ((lane >> 3) & 1) * 8) * LDV + cb + 16 * np + (lane >> 4) * 8]);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
              mma<BF16>(sacc[mt][2 * np], ak[mt], b[0], b[1]);
              mma<BF16>(sacc[mt][2 * np + 1], ak[mt], b[2], b[3]);
            }
          }
      }
      // bf16 copy for the next chunk's K S and Q S, over Ubar_lo: the four warps of this column half (its only
      // readers) must be done with it (nobody else reads sm.s until after the next load barrier)
      if (ch)
        asm volatile("bar.sync 6, 128;\n" ::: "memory");
      else
        asm volatile("bar.sync 5, 128;\n" ::: "memory");
      store_state_copy<P>(sm.s, LDV, sacc, rw, cb, g8, t4);
    }

    store_checkpoint(a, wk, c, h, vcol0, sacc, rw, cb, g8, t4);
    __syncthreads();  // every warp is done with k: prefetch the next chunk's
    FGDN_PROF(6);
    if (c + 1 < c_end) {
      issue_qk(sm.k, kbase, a.k_st, c + 1);
      cp_async_commit();
    }

    FGDN_PROF(7);
  }

#ifdef FGDN_CHUNK_PROFILE
  if (prof_on) {
    for (int k2 = 0; k2 < 8; ++k2) a.prof[k2] = prof_acc[k2];
    a.prof[8] = static_cast<unsigned long long>(c_end - c_begin);
  }
#endif
  // ---- final state (a zero-length sequence stores its start state unchanged); summary columns from tile 0
  const StateRef dst = end_state(a, wk, item, h, K);
  if (dst.p) store_state(dst, sacc, rw, cb, summary ? tile * kBV : vcol0, g8, t4);
}

template <int K, bool BF16>
int launch_chunk_kernel_wide(const ChunkKernelArgs& a, int64_t items, int64_t tiles, void* stream) {
  using E = typename Elem<BF16>::T;
  const size_t smem = sizeof(Smem<K, E>);
  static std::atomic<uint64_t> done_mask{0};
  if (const int e = prepare_launch(chunk_fwd_kernel_wide<K, BF16>, smem, done_mask)) return e;
  if (items <= 0 || a.Hv <= 0 || tiles <= 0) return 0;
  const dim3 grid(static_cast<unsigned>(items), static_cast<unsigned>(a.Hv), static_cast<unsigned>(tiles));
  chunk_fwd_kernel_wide<K, BF16><<<grid, 256, smem, static_cast<cudaStream_t>(stream)>>>(a);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace flashgdn::cuda::chunk_detail
