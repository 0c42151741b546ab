// The fused chunked-prefill kernel (gdn-math §5) for Hopper, warp-level tensor cores (mma.sync m16n8k16).
//
// One CTA of 4 warps owns one (work item, value head h, 64-wide column tile of the state) and walks the
// chunks of its range in order. Per chunk of C = 64 tokens (warp w owns chunk rows 16w..16w+15):
//   q, k, v tiles by cp.async, issued during the previous chunk; g, beta one chunk ahead in registers
//   gamma = cumsum(g)                                   (fp32, warp 0); optional l2 norm of q, k rows (fp32)
//   L = strictlower(diag(b) (KK^T (.) D))               (the 10 causal 16x16 tiles of KK^T spread 3/3/2/2
//                                                        over the warps; D_rs = exp(gamma_r - gamma_s), r >= s,
//                                                        selected, never factored)
//   A = (I + L)^-1                                      (fp32: 16x16 diagonal blocks by forward substitution,
//                                                        block merges A_ij = -A_ii sum L_ik A_kj in 3xTF32 mma)
//   W = (A diag(b e^gamma)) K                           (mma; stays in registers as the A operand of W S)
//   U = (A diag(b)) V - W S,  Q S on the same state fragments
//   P = QK^T (.) D                                      (diagonal included: post-update read)
//   S <- e^{gamma_n} S + K^T diag(e^{gamma_n - gamma}) U  (mma into the fp32 state held in registers)
//   O = scale (diag(e^gamma) Q S + P U)                 (P and U as bf16 hi + lo pairs in P U)
// The state S (K x 64 fp32) lives in registers across chunks (warp w owns state rows w*K/4 ..); a bf16 copy
// in shared memory is the B operand of W S and Q S (gdn-math §10.2). Nothing per chunk goes to global memory.
//
// Modes (ChunkKernelArgs::mode): kModeForward walks whole sequences; kModeForwardSplit walks one segment of
// the segment split (start state from the scan); kModeSummary runs the augmented state pass [I | 0] with
// values [0 | V] over one segment and stores [M | N] (gdn-math §6.1): column tiles < K/64 are the M part
// (identity start, zero values), the others the N part (zero start, the values).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "cuda/chunk_fwd/chunk_fwd.hpp"

namespace flashgdn::cuda::chunk_detail {

constexpr int kC = 64;         // chunk size
constexpr int kBV = 64;        // state columns per CTA
constexpr int kThreads = 128;  // 4 warps

template <bool BF16>
struct Elem;
template <>
struct Elem<true> {
  using T = __nv_bfloat16;
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t u) {
    __nv_bfloat162 v = *reinterpret_cast<__nv_bfloat162*>(&u);
    return __bfloat1622float2(v);
  }
};
template <>
struct Elem<false> {
  using T = __half;
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t u) {
    __half2 v = *reinterpret_cast<__half2*>(&u);
    return __half22float2(v);
  }
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ldmatrix x4: four 8x8 b16 matrices; lane l supplies the row address of matrix l / 8.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// 16-byte asynchronous global -> shared copies (the chunk's q, k, v tiles land while other work runs).
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

#ifdef FGDN_CHUNK_PROFILE
#define FGDN_PROF(k)                             \
  do {                                           \
    if (prof_on) {                               \
      const unsigned long long now_ = clock64(); \
      prof_acc[k] += now_ - prof_last;           \
      prof_last = now_;                          \
    }                                            \
  } while (0)
#else
#define FGDN_PROF(k) \
  do {               \
  } while (0)
#endif

// d += a * b, m16n8k16, fp32 accumulation.
template <bool BF16>
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (BF16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// 3xTF32: x = big + small with both parts tf32; big*big + big*small + small*big is fp32-accurate (~2^-21),
// so the inverse keeps its fp32 accuracy (gdn-math §5.7) while running on the tensor cores.
__device__ __forceinline__ void split_tf32(float x, uint32_t& big, uint32_t& small) {
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(big) : "f"(x));
  const float rest = x - __uint_as_float(big);
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(small) : "f"(rest));
}
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// d (16x16 as two m16n8 tiles) += X Y with X, Y 16x16 fp32 row-major in shared memory (one warp).
__device__ __forceinline__ void mma16_f32(float (&d)[2][4], const float* x, int ldx, const float* y, int ldy, int g,
                                          int t) {
#pragma unroll
  for (int ks = 0; ks < 2; ++ks) {
    const float av[4] = {x[g * ldx + 8 * ks + t], x[(g + 8) * ldx + 8 * ks + t], x[g * ldx + 8 * ks + t + 4],
                         x[(g + 8) * ldx + 8 * ks + t + 4]};
    uint32_t ab[4], as[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) split_tf32(av[e], ab[e], as[e]);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      uint32_t bb0, bs0, bb1, bs1;
      split_tf32(y[(8 * ks + t) * ldy + 8 * nt + g], bb0, bs0);
      split_tf32(y[(8 * ks + t + 4) * ldy + 8 * nt + g], bb1, bs1);
      mma_tf32(d[nt], as, bb0, bb1);
      mma_tf32(d[nt], ab, bs0, bs1);
      mma_tf32(d[nt], ab, bb0, bb1);
    }
  }
}

// Scalar load of a gate / beta / parameter element of DType dt (f32 = 0, f64 = 1, bf16 = 2, f16 = 3).
__device__ __forceinline__ float load_scalar(const void* p, int32_t dt, int64_t off) {
  switch (dt) {
    case 0:
      return static_cast<const float*>(p)[off];
    case 1:
      return static_cast<float>(static_cast<const double*>(p)[off]);
    case 2:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[off]);
    default:
      return __half2float(static_cast<const __half*>(p)[off]);
  }
}

// Sequence n: batch entry, first token and length. cu_seqlens values are clamped to [0, T] and made
// non-decreasing pairwise, so no value reads or writes out of bounds.
__device__ __forceinline__ void seq_bounds(const ChunkKernelArgs& a, int64_t n, int64_t* bidx, int64_t* t0,
                                           int64_t* len) {
  if (a.cu_seqlens == nullptr) {
    *bidx = n;
    *t0 = 0;
    *len = a.T;
    return;
  }
  int64_t s0, s1;
  if (a.cu_i64) {
    s0 = static_cast<const int64_t*>(a.cu_seqlens)[n];
    s1 = static_cast<const int64_t*>(a.cu_seqlens)[n + 1];
  } else {
    s0 = static_cast<const int32_t*>(a.cu_seqlens)[n];
    s1 = static_cast<const int32_t*>(a.cu_seqlens)[n + 1];
  }
  s0 = s0 < 0 ? 0 : (s0 > a.T ? a.T : s0);
  s1 = s1 < 0 ? 0 : (s1 > a.T ? a.T : s1);
  *bidx = 0;
  *t0 = s0;
  *len = s1 > s0 ? s1 - s0 : 0;
}

// A state tile reference: element (i, j) (key i, value j) at p[i * rs + j] (K-major) or p[j * rs + i].
struct StateRef {
  float* p;
  int64_t rs;
  bool vmajor;
  __device__ __forceinline__ int64_t off(int i, int j) const {
    return vmajor ? int64_t(j) * rs + i : int64_t(i) * rs + j;
  }
};

template <int K, class E>
struct Smem {
  static constexpr int LDQ = K + 8;  // padded rows: conflict-free ldmatrix
  static constexpr int LDV = kBV + 8;
  static constexpr int LDF = kC + 4;  // fp32 64x64 matrices
  E q[kC * LDQ];                      // [token][K] q (l2-normalized when asked)
  E k[kC * LDQ];                      // [token][K]
  E v[kC * LDV];                      // [token][64] value tile
  E s[K * LDV];                       // [K][64] the state as a GEMM operand
  union {
    struct {
      E u[kC * LDV];   // [token][64] U = v_new, rounded (hi part)
      E ul[kC * LDV];  // [token][64] U - hi: P U = P hi + P lo keeps the causal sum exact to ~2^-16
      E ub[kC * LDV];  // [token][64] diag(e^{gamma_n - gamma}) U
    } uu;
    float L[kC * LDF];  // strictly lower L, live only between KK^T and the inverse
  } x;
  float A[kC * LDF];  // A = (I + L)^-1, fp32
  float T[4 * 256];   // inverse merge scratch
  float gam[kC];      // gamma (inclusive cumsum of g in the chunk)
  float beta[kC];
  float bg[kC];  // beta e^gamma
};

template <int K, bool BF16>
__global__ void __launch_bounds__(kThreads, 2) chunk_fwd_kernel(const ChunkKernelArgs a) {
  using E = typename Elem<BF16>::T;
  using P = Elem<BF16>;
  using Sm = Smem<K, E>;
  constexpr int LDQ = Sm::LDQ, LDV = Sm::LDV, LDF = Sm::LDF;
  constexpr int MT = K / 64;  // 16-row state m-tiles per warp (warp owns K/4 state rows)
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Sm& sm = *reinterpret_cast<Sm*>(smem_raw);

  const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g8 = lane >> 2, t4 = lane & 3;
  const int h = blockIdx.y, tile = blockIdx.z;
  const int64_t item = blockIdx.x;
  const int hk = h / a.group;

  // ---- resolve the work of this CTA
  int64_t n, bidx, t0, len;
  int64_t c_begin = 0, c_end = 0;
  int seg = 0, nseg = 1;
  if (a.mode == kModeForward) {
    n = item;
    seq_bounds(a, n, &bidx, &t0, &len);
    c_end = (len + kC - 1) / kC;
  } else {
    const ChunkWorkItem it = a.items[item];
    if (it.n < 0) return;
    seg = it.seg;
    nseg = it.nseg;
    if (a.mode == kModeSummary && seg == nseg - 1) return;  // the last segment's summary is not needed
    n = it.n;
    seq_bounds(a, n, &bidx, &t0, &len);
    c_begin = it.c_begin;
    c_end = it.c_end;
  }
  const bool summary = a.mode == kModeSummary;
  const bool has_output = !summary;
  const bool m_tile = summary && tile < K / 64;  // augmented columns of M: identity start, zero values
  const bool has_values = !m_tile;
  const int vcol0 = summary ? (tile - K / 64) * kBV : tile * kBV;  // value column of this tile
  const int64_t mn_stride = int64_t(K) * (K + a.V);                // one [K, K + V] summary

  // ---- start state into registers (fp32) and shared memory (GEMM operand)
  const int rw = w * (K / 4);  // first state row of this warp
  float sacc[MT][8][4];
  {
    StateRef src{nullptr, 0, false};
    if (!summary) {
      if (seg == 0) {
        if (a.h0) src = StateRef{const_cast<float*>(a.h0) + n * a.h0_sn + h * a.h0_sh, a.h0_sr, a.state_vmajor != 0};
      } else {  // the scan stored the start state of this segment in the N part of the previous item
        src = StateRef{a.mn + ((item - 1) * a.Hv + h) * mn_stride + K, K + a.V, false};
      }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = rw + mt * 16 + g8 + (e >> 1) * 8, j = nt * 8 + 2 * t4 + (e & 1);
          float val = 0.f;
          if (m_tile)
            val = (i == tile * kBV + j) ? 1.f : 0.f;
          else if (src.p)
            val = src.p[src.off(i, vcol0 + j)];
          sacc[mt][nt][e] = val;
        }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const int i = rw + mt * 16 + g8, j = nt * 8 + 2 * t4;
        *reinterpret_cast<uint32_t*>(&sm.s[i * LDV + j]) = P::pack(sacc[mt][nt][0], sacc[mt][nt][1]);
        *reinterpret_cast<uint32_t*>(&sm.s[(i + 8) * LDV + j]) = P::pack(sacc[mt][nt][2], sacc[mt][nt][3]);
      }
  }

  // per-head gate parameters
  float neg_exp_alog = 0.f, dtb = 0.f;
  if (a.gate_in_kernel) {
    neg_exp_alog = a.A_log ? -__expf(load_scalar(a.A_log, a.alog_dtype, h * a.alog_s)) : -1.f;
    dtb = a.dt_bias ? load_scalar(a.dt_bias, a.dtb_dtype, h * a.dtb_s) : 0.f;
  }

  const E* qbase = static_cast<const E*>(a.q) + bidx * a.q_sb + hk * a.q_sh;
  const E* kbase = static_cast<const E*>(a.k) + bidx * a.k_sb + hk * a.k_sh;
  const E* vbase = static_cast<const E*>(a.v) + bidx * a.v_sb + h * a.v_sh + vcol0;
  E* obase = static_cast<E*>(a.o) + bidx * a.o_sb + h * a.o_sh + vcol0;

  const int r0 = 16 * w + g8, r1 = r0 + 8;  // the two chunk rows of this thread in C fragments

  // Asynchronous tile loads of chunk ck (rows past the sequence end are zero-filled with plain stores).
  auto issue_qk = [&](E* dst, const E* base, int64_t st, int64_t ck) {
    constexpr int VPR = K / 8, RPP = kThreads / VPR, NP = kC / RPP;
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
    const int64_t nv = len - ck * kC;
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const int r = p * 16 + (tid >> 3), vec = tid & 7;
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
  // g = -exp(A_log) softplus(a + dt_bias) (softplus with beta and threshold) and beta = c sigmoid(b) (gdn-math §4)
  auto gate_beta = [&](float graw, float braw, bool valid, float* g, float* b) {
    if (a.gate_in_kernel && a.g) {
      const float xs = (graw + dtb) * a.sp_beta;
      const float sp = xs <= a.sp_threshold ? log1pf(__expf(xs)) / a.sp_beta : graw + dtb;
      graw = neg_exp_alog * sp;
    }
    if (a.beta_sigmoid && a.beta) braw = a.beta_mult / (1.f + __expf(-braw));
    *g = valid ? graw : 0.f;  // padded rows: g = 0, beta = 0
    *b = valid ? braw : 0.f;
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
    }
    if (c == c_begin) issue_qk(sm.k, kbase, a.k_st, c);  // later chunks: prefetched during the previous one
    cp_async_commit();

    // ---- g, beta and gamma = cumsum(g) (warp 0; padded rows: g = 0, beta = 0), while the copies fly
    if (w == 0) {
      if (c == c_begin) load_gb(c);
      float gv[2], bv[2];
      gate_beta(g_next[0], b_next[0], 2 * lane < nvalid, &gv[0], &bv[0]);
      gate_beta(g_next[1], b_next[1], 2 * lane + 1 < nvalid, &gv[1], &bv[1]);
      float s = gv[0] + gv[1];
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const float y = __shfl_up_sync(0xffffffffu, s, off);
        if (lane >= off) s += y;
      }
      const float ex = s - (gv[0] + gv[1]);
      const float ga = ex + gv[0], gb = ex + gv[0] + gv[1];
      sm.gam[2 * lane] = ga;
      sm.gam[2 * lane + 1] = gb;
      sm.beta[2 * lane] = bv[0];
      sm.beta[2 * lane + 1] = bv[1];
      sm.bg[2 * lane] = bv[0] * __expf(ga);
      sm.bg[2 * lane + 1] = bv[1] * __expf(gb);
      if (c + 1 < c_end) load_gb(c + 1);  // in flight until the next chunk
    }

    cp_async_wait_all();
    __syncthreads();
    FGDN_PROF(0);

    // ---- optional l2 norm of q and k rows in fp32: x / sqrt(sum x^2 + 1e-6) (gdn-math §1.4)
    if (a.l2norm) {
      constexpr int VPR = K / 8, RPP = kThreads / VPR, NP = kC / RPP;
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
          float ss = 0.f;
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float2 f = P::unpack(u[e]);
            ss = fmaf(f.x, f.x, fmaf(f.y, f.y, ss));
          }
#pragma unroll
          for (int off = VPR / 2; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
          const float rho = rsqrtf(ss + 1e-6f);
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

    // ---- L = strictlower(diag(b) (KK^T (.) D)) to shared memory in fp32, by 16x16 tiles (i >= j): the ten
    // causal tiles are spread 3/3/2/2 over the warps. D_rs = exp(gamma_r - gamma_s) only where r >= s,
    // selected, never factored (gdn-math §5.8).
#pragma unroll
    for (int tt = 0; tt < 3; ++tt) {
      // warp 0: (0,0) (3,3) (3,0); warp 1: (1,0) (1,1) (3,1); warp 2: (2,0) (2,1); warp 3: (2,2) (3,2)
      int ti, tj;
      if (w == 0)
        ti = tt == 0 ? 0 : 3, tj = tt == 1 ? 3 : 0;
      else if (w == 1)
        ti = tt == 2 ? 3 : 1, tj = tt == 0 ? 0 : 1;
      else if (w == 2)
        ti = tt == 2 ? -1 : 2, tj = tt;
      else
        ti = tt == 2 ? -1 : 2 + tt, tj = 2;
      if (ti < 0) continue;
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
    __syncthreads();
    FGDN_PROF(1);

    // ---- A = (I + L)^-1 in fp32 (gdn-math §5.7, blocked with substitution on the diagonal blocks)
    // Diagonal block w, right-looking forward substitution: lane c owns column c; once x_r is final,
    // acc_r' -= L_r'r x_r for r' > r (a dependent chain of 16 FMAs, not 136).
    if (lane < 16) {
      const int cc = lane, o = 16 * w;
      float acc[16];
#pragma unroll
      for (int r = 0; r < 16; ++r) acc[r] = r == cc ? 1.f : 0.f;
#pragma unroll
      for (int r = 0; r < 16; ++r) {
        const float xr = acc[r];
        sm.A[(o + r) * LDF + o + cc] = xr;
#pragma unroll
        for (int r2 = r + 1; r2 < 16; ++r2) acc[r2] = fmaf(-sm.x.L[(o + r2) * LDF + o + r], xr, acc[r2]);
      }
    }
    __syncthreads();
    // Off-diagonal blocks by distance d = i - j, warp w taking block (w + d, w):
    //   T = sum_{k=j}^{i-1} L_ik A_kj,  A_ij = -A_ii T   (16x16 products on the tensor cores in 3xTF32)
#pragma unroll
    for (int d = 1; d < 4; ++d) {
      if (w < 4 - d) {
        const int i = w + d, j = w;
        float tacc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        for (int kb = j; kb < i; ++kb)
          mma16_f32(tacc, &sm.x.L[16 * i * LDF + 16 * kb], LDF, &sm.A[16 * kb * LDF + 16 * j], LDF, g8, t4);
        float* tw = &sm.T[w * 256];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          tw[g8 * 16 + 8 * nt + 2 * t4] = tacc[nt][0];
          tw[g8 * 16 + 8 * nt + 2 * t4 + 1] = tacc[nt][1];
          tw[(g8 + 8) * 16 + 8 * nt + 2 * t4] = tacc[nt][2];
          tw[(g8 + 8) * 16 + 8 * nt + 2 * t4 + 1] = tacc[nt][3];
        }
        __syncwarp();
        float racc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        mma16_f32(racc, &sm.A[16 * i * LDF + 16 * i], LDF, tw, 16, g8, t4);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          float* a0 = &sm.A[(16 * i + g8) * LDF + 16 * j + 8 * nt + 2 * t4];
          float* a1 = &sm.A[(16 * i + g8 + 8) * LDF + 16 * j + 8 * nt + 2 * t4];
          *reinterpret_cast<float2*>(a0) = make_float2(-racc[nt][0], -racc[nt][1]);
          *reinterpret_cast<float2*>(a1) = make_float2(-racc[nt][2], -racc[nt][3]);
        }
      }
      __syncthreads();
    }
    FGDN_PROF(2);

    // ---- W = (A diag(b e^gamma)) K for rows 16w.. (registers), then U = (A diag(b)) V - W S
    constexpr int NW = K / 8;
    uint32_t wf[K / 16][4];  // -W as A fragments
    {
      float wacc[NW][4];
#pragma unroll
      for (int nt = 0; nt < NW; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) wacc[nt][e] = 0.f;
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) {
        if (kc > w) continue;  // A is lower triangular
        const int s0 = 16 * kc + 2 * t4;
        const float2 a00 = *reinterpret_cast<const float2*>(&sm.A[r0 * LDF + s0]);
        const float2 a10 = *reinterpret_cast<const float2*>(&sm.A[r1 * LDF + s0]);
        const float2 a01 = *reinterpret_cast<const float2*>(&sm.A[r0 * LDF + s0 + 8]);
        const float2 a11 = *reinterpret_cast<const float2*>(&sm.A[r1 * LDF + s0 + 8]);
        const float bg0 = sm.bg[s0], bg1 = sm.bg[s0 + 1], bg8 = sm.bg[s0 + 8], bg9 = sm.bg[s0 + 9];
        const uint32_t af[4] = {P::pack(a00.x * bg0, a00.y * bg1), P::pack(a10.x * bg0, a10.y * bg1),
                                P::pack(a01.x * bg8, a01.y * bg9), P::pack(a11.x * bg8, a11.y * bg9)};
#pragma unroll
        for (int np = 0; np < K / 16; ++np) {
          uint32_t b[4];
          ldsm_x4_t(b, &sm.k[(16 * kc + (lane & 7) + ((lane >> 3) & 1) * 8) * LDQ + 16 * np + (lane >> 4) * 8]);
          mma<BF16>(wacc[2 * np], af, b[0], b[1]);
          mma<BF16>(wacc[2 * np + 1], af, b[2], b[3]);
        }
      }
#pragma unroll
      for (int kd = 0; kd < K / 16; ++kd) {
        wf[kd][0] = P::pack(-wacc[2 * kd][0], -wacc[2 * kd][1]);
        wf[kd][1] = P::pack(-wacc[2 * kd][2], -wacc[2 * kd][3]);
        wf[kd][2] = P::pack(-wacc[2 * kd + 1][0], -wacc[2 * kd + 1][1]);
        wf[kd][3] = P::pack(-wacc[2 * kd + 1][2], -wacc[2 * kd + 1][3]);
      }
    }
    float oacc[8][4];  // Q S, computed in the W S loop (shared B fragments of the state)
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) oacc[nt][e] = 0.f;
    {
      float uacc[8][4];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) uacc[nt][e] = 0.f;
      if (has_values) {
#pragma unroll
        for (int kc = 0; kc < 4; ++kc) {
          if (kc > w) continue;
          const int s0 = 16 * kc + 2 * t4;
          const float2 a00 = *reinterpret_cast<const float2*>(&sm.A[r0 * LDF + s0]);
          const float2 a10 = *reinterpret_cast<const float2*>(&sm.A[r1 * LDF + s0]);
          const float2 a01 = *reinterpret_cast<const float2*>(&sm.A[r0 * LDF + s0 + 8]);
          const float2 a11 = *reinterpret_cast<const float2*>(&sm.A[r1 * LDF + s0 + 8]);
          const float b0 = sm.beta[s0], b1 = sm.beta[s0 + 1], b8 = sm.beta[s0 + 8], b9 = sm.beta[s0 + 9];
          const uint32_t af[4] = {P::pack(a00.x * b0, a00.y * b1), P::pack(a10.x * b0, a10.y * b1),
                                  P::pack(a01.x * b8, a01.y * b9), P::pack(a11.x * b8, a11.y * b9)};
#pragma unroll
          for (int np = 0; np < 4; ++np) {
            uint32_t b[4];
            ldsm_x4_t(b, &sm.v[(16 * kc + (lane & 7) + ((lane >> 3) & 1) * 8) * LDV + 16 * np + (lane >> 4) * 8]);
            mma<BF16>(uacc[2 * np], af, b[0], b[1]);
            mma<BF16>(uacc[2 * np + 1], af, b[2], b[3]);
          }
        }
      }
      // U -= W S, and O = Q S on the same state fragments
#pragma unroll
      for (int kd = 0; kd < K / 16; ++kd) {
        uint32_t aq[4];
        if (has_output) ldsm_x4(aq, &sm.q[(16 * w + (lane & 15)) * LDQ + kd * 16 + (lane >> 4) * 8]);
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          uint32_t b[4];
          ldsm_x4_t(b, &sm.s[(16 * kd + (lane & 7) + ((lane >> 3) & 1) * 8) * LDV + 16 * np + (lane >> 4) * 8]);
          mma<BF16>(uacc[2 * np], wf[kd], b[0], b[1]);
          mma<BF16>(uacc[2 * np + 1], wf[kd], b[2], b[3]);
          if (has_output) {
            mma<BF16>(oacc[2 * np], aq, b[0], b[1]);
            mma<BF16>(oacc[2 * np + 1], aq, b[2], b[3]);
          }
        }
      }
      // U and Ubar = diag(e^{gamma_n - gamma}) U to shared (gamma_n = gamma at row 63: padded g = 0)
      const float gn = sm.gam[kC - 1];
      const float dn0 = __expf(gn - sm.gam[r0]), dn1 = __expf(gn - sm.gam[r1]);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const int j = nt * 8 + 2 * t4;
        const uint32_t h0 = P::pack(uacc[nt][0], uacc[nt][1]), h1 = P::pack(uacc[nt][2], uacc[nt][3]);
        const float2 f0 = P::unpack(h0), f1 = P::unpack(h1);
        *reinterpret_cast<uint32_t*>(&sm.x.uu.u[r0 * LDV + j]) = h0;
        *reinterpret_cast<uint32_t*>(&sm.x.uu.u[r1 * LDV + j]) = h1;
        *reinterpret_cast<uint32_t*>(&sm.x.uu.ul[r0 * LDV + j]) = P::pack(uacc[nt][0] - f0.x, uacc[nt][1] - f0.y);
        *reinterpret_cast<uint32_t*>(&sm.x.uu.ul[r1 * LDV + j]) = P::pack(uacc[nt][2] - f1.x, uacc[nt][3] - f1.y);
        *reinterpret_cast<uint32_t*>(&sm.x.uu.ub[r0 * LDV + j]) = P::pack(uacc[nt][0] * dn0, uacc[nt][1] * dn0);
        *reinterpret_cast<uint32_t*>(&sm.x.uu.ub[r1 * LDV + j]) = P::pack(uacc[nt][2] * dn1, uacc[nt][3] * dn1);
      }
    }

    FGDN_PROF(3);
    // ---- O = scale (diag(e^gamma) Q S + P U): Q S is done, scale its rows
    if (has_output) {
      const float e0 = __expf(sm.gam[r0]), e1 = __expf(sm.gam[r1]);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        oacc[nt][0] *= e0;
        oacc[nt][1] *= e0;
        oacc[nt][2] *= e1;
        oacc[nt][3] *= e1;
      }
    }
    // ---- P = QK^T (.) D (diagonal included: post-update read) as bf16 hi + lo A fragments
    uint32_t pf[4][4], pl[4][4];
    if (has_output) {
      float qk[8][4];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) qk[nt][e] = 0.f;
#pragma unroll
      for (int ks = 0; ks < K / 16; ++ks) {
        uint32_t aq[4];
        ldsm_x4(aq, &sm.q[(16 * w + (lane & 15)) * LDQ + ks * 16 + (lane >> 4) * 8]);
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          if (np > w) continue;
          uint32_t b[4];
          ldsm_x4(b, &sm.k[(16 * np + (lane & 7) + ((lane >> 4) << 3)) * LDQ + ks * 16 + ((lane >> 3) & 1) * 8]);
          mma<BF16>(qk[2 * np], aq, b[0], b[1]);
          mma<BF16>(qk[2 * np + 1], aq, b[2], b[3]);
        }
      }
      const float gr[2] = {sm.gam[r0], sm.gam[r1]};
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int hf = e >> 1, r = hf ? r1 : r0, s2 = nt * 8 + 2 * t4 + (e & 1);
          const float dec = (nt <= 2 * w + 1 && s2 <= r) ? __expf(gr[hf] - sm.gam[s2]) : 0.f;
          qk[nt][e] = (nt <= 2 * w + 1 && s2 <= r) ? qk[nt][e] * dec : 0.f;
        }
      }
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) {
#pragma unroll
        for (int q2 = 0; q2 < 4; ++q2) {
          const int nt = 2 * kc + (q2 >> 1), e0 = (q2 & 1) * 2;
          pf[kc][q2] = P::pack(qk[nt][e0], qk[nt][e0 + 1]);
          const float2 f = P::unpack(pf[kc][q2]);
          pl[kc][q2] = P::pack(qk[nt][e0] - f.x, qk[nt][e0 + 1] - f.y);
        }
      }
    }
    FGDN_PROF(4);
    __syncthreads();  // U complete; every read of the old state operand done
    FGDN_PROF(5);
    // q and v of this chunk are dead: prefetch the next chunk's into the same tiles
    if (c + 1 < c_end) {
      if (has_output) issue_qk(sm.q, qbase, a.q_st, c + 1);
      if (has_values) issue_v(c + 1);
      cp_async_commit();
    }

    // ---- S <- e^{gamma_n} S + K^T Ubar  (fp32 accumulation in registers)
    {
      const float en = __expf(sm.gam[kC - 1]);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
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
        for (int np = 0; np < 4; ++np) {
          uint32_t b[4];
          ldsm_x4_t(b, &sm.x.uu.ub[(16 * kc + (lane & 7) + ((lane >> 3) & 1) * 8) * LDV + 16 * np + (lane >> 4) * 8]);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma<BF16>(sacc[mt][2 * np], ak[mt], b[0], b[1]);
            mma<BF16>(sacc[mt][2 * np + 1], ak[mt], b[2], b[3]);
          }
        }
      }
      // bf16 copy for the next chunk's W S and Q S (nobody reads sm.s until after the next load barrier)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          const int i = rw + mt * 16 + g8, j = nt * 8 + 2 * t4;
          *reinterpret_cast<uint32_t*>(&sm.s[i * LDV + j]) = P::pack(sacc[mt][nt][0], sacc[mt][nt][1]);
          *reinterpret_cast<uint32_t*>(&sm.s[(i + 8) * LDV + j]) = P::pack(sacc[mt][nt][2], sacc[mt][nt][3]);
        }
    }

    // ---- state checkpoint after (c + 1) * C tokens when that is a multiple of the interval
    if (a.ckpt && !summary) {
      const int64_t done = (c + 1) * kC;
      if (done <= len && done % a.ckpt_interval == 0) {
        const int64_t idx = done / a.ckpt_interval - 1;
        if (idx < a.num_ckpt) {
          const StateRef dst{a.ckpt + n * a.ck_sn + idx * a.ck_sc + h * a.ck_sh, a.ck_sr, a.state_vmajor != 0};
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < 8; ++nt)
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                const int i = rw + mt * 16 + g8 + (e >> 1) * 8, j = nt * 8 + 2 * t4 + (e & 1);
                dst.p[dst.off(i, vcol0 + j)] = sacc[mt][nt][e];
              }
        }
      }
    }
    __syncthreads();  // every warp is done with k: prefetch the next chunk's
    FGDN_PROF(6);
    if (c + 1 < c_end) {
      issue_qk(sm.k, kbase, a.k_st, c + 1);
      cp_async_commit();
    }

    // ---- O += P U (causal, U as hi + lo), scaled, to global
    if (has_output) {
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) {
        if (kc > w) continue;  // P is causal
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          uint32_t b[4];
          const int off = (16 * kc + (lane & 7) + ((lane >> 3) & 1) * 8) * LDV + 16 * np + (lane >> 4) * 8;
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
          for (int nt = 0; nt < 8; ++nt)
            *reinterpret_cast<uint32_t*>(orow + nt * 8 + 2 * t4) =
                P::pack(a.scale * oacc[nt][2 * hf], a.scale * oacc[nt][2 * hf + 1]);
        }
      }
    }

    FGDN_PROF(7);
  }

#ifdef FGDN_CHUNK_PROFILE
  if (prof_on) {
    for (int k2 = 0; k2 < 8; ++k2) a.prof[k2] = prof_acc[k2];
    a.prof[8] = static_cast<unsigned long long>(c_end - c_begin);
  }
#endif
  // ---- final state (a zero-length sequence stores its start state unchanged)
  StateRef dst{nullptr, 0, false};
  int jbase = vcol0;
  if (summary) {
    dst = StateRef{a.mn + (item * a.Hv + h) * mn_stride, K + a.V, false};
    jbase = tile * kBV;
  } else if (a.ht && seg == nseg - 1) {
    dst = StateRef{a.ht + n * a.ht_sn + h * a.ht_sh, a.ht_sr, a.state_vmajor != 0};
  }
  if (dst.p) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = rw + mt * 16 + g8 + (e >> 1) * 8, j = nt * 8 + 2 * t4 + (e & 1);
          dst.p[dst.off(i, jbase + j)] = sacc[mt][nt][e];
        }
  }
}

template <int K, bool BF16>
int launch_chunk_kernel(const ChunkKernelArgs& a, int64_t items, int64_t tiles, void* stream) {
  using E = typename Elem<BF16>::T;
  const size_t smem = sizeof(Smem<K, E>);
  // Opt in to > 48 KB of dynamic shared memory once per device (outside any graph capture in practice:
  // the first call of a process).
  static std::atomic<uint64_t> done_mask{0};
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return static_cast<int>(e);
  const uint64_t bit = uint64_t(1) << (dev & 63);
  if (!(done_mask.load(std::memory_order_acquire) & bit)) {
    e = cudaFuncSetAttribute(chunk_fwd_kernel<K, BF16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem));
    if (e != cudaSuccess) return static_cast<int>(e);
    done_mask.fetch_or(bit, std::memory_order_acq_rel);
  }
  if (items <= 0 || a.Hv <= 0 || tiles <= 0) return 0;
  const dim3 grid(static_cast<unsigned>(items), static_cast<unsigned>(a.Hv), static_cast<unsigned>(tiles));
  chunk_fwd_kernel<K, BF16><<<grid, kThreads, smem, static_cast<cudaStream_t>(stream)>>>(a);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace flashgdn::cuda::chunk_detail
