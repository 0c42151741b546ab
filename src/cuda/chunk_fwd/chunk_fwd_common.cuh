// Shared device pieces of the chunked-prefill kernels (the intra-chunk and state passes, gdn-math §5): element
// types, the 3xTF32 16x16 product used by the inverse, scalar loads, the clamped sequence bounds, the state-tile
// reference and the shared-memory plan. The PTX wrappers are cuda/common/ptx.cuh, the gate math cuda/common/gate.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "cuda/chunk_fwd/chunk_fwd.hpp"
#include "cuda/common/cuda_check.cuh"   // prepare_launch
#include "cuda/common/device_util.cuh"  // Storage
#include "cuda/common/gate.cuh"
#include "cuda/common/ptx.cuh"

namespace flashgdn::cuda::chunk_detail {

constexpr int kC = 64;   // chunk size
constexpr int kBV = 64;  // state columns per CTA

// The dynamic shared memory from its first 1024-byte boundary (the 128-byte swizzle's period; the launches allocate
// 1 KiB more than the kernel's tiles). An offset from the extern array, not integer pointer arithmetic: the compiler
// then still knows every access through it is shared memory (LDS / STS, 32-bit addresses) instead of generic.
__device__ __forceinline__ unsigned char* swizzled_smem() {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  return smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
}

// Elem<BF16>: the 16-bit I/O type of a chunk kernel and its packed pair conversions (Storage<T>, device_util.cuh).
template <bool BF16>
struct Elem {
  using T = std::conditional_t<BF16, __nv_bfloat16, __half>;
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) { return Storage<T>::from2(lo, hi); }
  static __device__ __forceinline__ float2 unpack(uint32_t u) { return Storage<T>::to2(u); }
};

// Two fp32 values as their bf16 split, x = hi + lo with |lo| <= 2^-9 |x| (EXACT: lo = 0, for values that are bf16
// already): the operand form of the backward's fp32 GEMM operands, and of the A records the intra pass writes for it.
struct Split2 {
  uint32_t hi, lo;  // two bf16 each: (x0, x1) = hi + lo
};
template <bool EXACT>
__device__ __forceinline__ Split2 split_pair(float x0, float x1) {
  Split2 s;
  s.hi = Elem<true>::pack(x0, x1);
  if constexpr (EXACT) {
    s.lo = 0;
  } else {
    const float2 h = Elem<true>::unpack(s.hi);
    s.lo = Elem<true>::pack(x0 - h.x, x1 - h.y);
  }
  return s;
}

// ---- the records of the intra-chunk pass (chunk_fwd.hpp)
// Store a 16x16 block given as two m16n8 C fragments c[2][4] (this lane's part) as 16-bit hi + lo A fragments.
template <class P>
__device__ __forceinline__ void store_afrag(uint4* dst, const float (&c)[2][4], int lane) {
  uint32_t hi[4], lo[4];
#pragma unroll
  for (int q2 = 0; q2 < 4; ++q2) {  // a0 (g, 2t), a1 (g + 8, 2t), a2 (g, 2t + 8), a3 (g + 8, 2t + 8)
    const int n2 = q2 >> 1, e0 = (q2 & 1) * 2;
    hi[q2] = P::pack(c[n2][e0], c[n2][e0 + 1]);
    const float2 f = P::unpack(hi[q2]);
    lo[q2] = P::pack(c[n2][e0] - f.x, c[n2][e0 + 1] - f.y);
  }
  dst[lane] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
  dst[32 + lane] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
}

// Store the third part of a 16x16 block given as two m16n8 C fragments c[2][4] (this lane's part): c - hi - lo
// (exact in fp32; hi, lo as store_afrag rounds them) rounded to 16 bits, one uint4 per lane.
template <class P>
__device__ __forceinline__ void store_arest(uint4* dst, const float (&c)[2][4], int lane) {
  uint32_t re[4];
#pragma unroll
  for (int q2 = 0; q2 < 4; ++q2) {
    const int n2 = q2 >> 1, e0 = (q2 & 1) * 2;
    const float2 f = P::unpack(P::pack(c[n2][e0], c[n2][e0 + 1]));
    const float r0 = c[n2][e0] - f.x, r1 = c[n2][e0 + 1] - f.y;
    const float2 l = P::unpack(P::pack(r0, r1));
    re[q2] = P::pack(r0 - l.x, r1 - l.y);
  }
  dst[lane] = make_uint4(re[0], re[1], re[2], re[3]);
}

// Row r of a record's header (ek, eq, dk; e^gamma_n by row 0; the largest beta of r's 32-row half by its first row)
// from the chunk's gamma (gamma_n at row 63: padded rows have g = 0), rho and beta, by the 64 threads of two whole
// warps, r = 0 .. 63. Returns that largest beta: the state pass adds A diag(beta)'s third part only where it exceeds
// 1 (docs/chunk_fwd.md "Numerics").
__device__ __forceinline__ float store_rec_header(float* hdr, int r, const float* gam, const float* rq, const float* rk,
                                                  const float* beta, float scale) {
  const float gr = gam[r], gn = gam[kC - 1];
  hdr[r] = rk[r] * __expf(gr);
  hdr[64 + r] = scale * rq[r] * __expf(gr);
  hdr[128 + r] = rk[r] * __expf(gn - gr);
  if (r == 0) hdr[192] = __expf(gn);
  float bm = beta[r];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) bm = fmaxf(bm, __shfl_xor_sync(0xffffffffu, bm, o));
  if ((r & 31) == 0) hdr[193 + (r >> 5)] = bm;
  return bm;
}

// Causal 16x16 block idx (0..9, order (0,0) (1,0) (1,1) (2,0) ...) -> (i, j), i >= j.
__device__ __forceinline__ void causal_block(int idx, int* i, int* j) {
  *i = idx >= 6 ? 3 : (idx >= 3 ? 2 : (idx >= 1 ? 1 : 0));
  *j = idx - *i * (*i + 1) / 2;
}

// gamma = cumsum(g) over a chunk's 64 rows (lane holds rows 2 lane, 2 lane + 1 of g in gv, beta in bv; one warp, a
// shuffle scan), stored with beta to shared memory.
__device__ __forceinline__ void store_gamma_beta(const float (&gv)[2], const float (&bv)[2], int lane, float* gam,
                                                 float* beta) {
  float s = gv[0] + gv[1];
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const float y = __shfl_up_sync(0xffffffffu, s, off);
    if (lane >= off) s += y;
  }
  const float ex = s - (gv[0] + gv[1]);
  gam[2 * lane] = ex + gv[0];
  gam[2 * lane + 1] = ex + gv[0] + gv[1];
  beta[2 * lane] = bv[0];
  beta[2 * lane + 1] = bv[1];
}

// d (16x16 as two m16n8 tiles) += X Y with X, Y 16x16 fp32 row-major in shared memory (one warp); ROUND_SMALL as in
// split_tf32.
template <bool ROUND_SMALL = true>
__device__ __forceinline__ void mma16_f32(float (&d)[2][4], const float* x, int ldx, const float* y, int ldy, int g,
                                          int t) {
#pragma unroll
  for (int ks = 0; ks < 2; ++ks) {
    const float av[4] = {x[g * ldx + 8 * ks + t], x[(g + 8) * ldx + 8 * ks + t], x[g * ldx + 8 * ks + t + 4],
                         x[(g + 8) * ldx + 8 * ks + t + 4]};
    uint32_t ab[4], as[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) split_tf32<ROUND_SMALL>(av[e], ab[e], as[e]);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      uint32_t bb0, bs0, bb1, bs1;
      split_tf32<ROUND_SMALL>(y[(8 * ks + t) * ldy + 8 * nt + g], bb0, bs0);
      split_tf32<ROUND_SMALL>(y[(8 * ks + t + 4) * ldy + 8 * nt + g], bb1, bs1);
      mma_tf32(d[nt], as, bb0, bb1);
      mma_tf32(d[nt], ab, bs0, bs1);
      mma_tf32(d[nt], ab, bb0, bb1);
    }
  }
}

// sgn c (one warp's two m16n8 C fragments, lane = 4 g + t) into the 16 x 16 fp32 block at dst with leading dimension
// ld: the blocked inverse's scratch and result blocks (mma16_f32's operands). PAIRS: 8-byte stores (ld even), else
// 4-byte ones (an odd ld, which keeps a column's rows in distinct banks).
template <bool PAIRS>
__device__ __forceinline__ void put_block16(float* dst, int ld, const float (&c)[2][4], float sgn, int g, int t) {
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    float* const p0 = dst + g * ld + 8 * nt + 2 * t;  // row g; row g + 8 below
    float* const p1 = dst + (g + 8) * ld + 8 * nt + 2 * t;
    if constexpr (PAIRS) {
      *reinterpret_cast<float2*>(p0) = make_float2(sgn * c[nt][0], sgn * c[nt][1]);
      *reinterpret_cast<float2*>(p1) = make_float2(sgn * c[nt][2], sgn * c[nt][3]);
    } else {
      p0[0] = sgn * c[nt][0], p0[1] = sgn * c[nt][1];
      p1[0] = sgn * c[nt][2], p1[1] = sgn * c[nt][3];
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
// non-decreasing pairwise, so no value reads or writes out of bounds. Args: ChunkKernelArgs or ChunkBwdArgs (the
// backward reads the forward's layout: cu_seqlens, cu_i64, T, N, nchunk_b).
template <class Args>
__device__ __forceinline__ void seq_bounds(const Args& a, int64_t n, int64_t* bidx, int64_t* t0, int64_t* len) {
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

// Record slot of chunk c of sequence n (first token t0) in the two-pass workspace: b ceil(T / 64) + c for fixed
// length (n = b); n + floor((t0 + 64 c) / 64) for varlen. Distinct chunks get distinct slots (for n < n' the
// chunk starts s < s' give floor(s / 64) <= floor(s' / 64)), and every slot is < N + ceil(T / 64) = rec_slots
// because t0 + 64 c <= T - 1 for the clamped bounds of seq_bounds.
template <class Args>
__device__ __forceinline__ int64_t chunk_slot(const Args& a, int64_t n, int64_t t0, int64_t c) {
  return a.cu_seqlens ? n + (t0 + kC * c) / kC : n * a.nchunk_b + c;
}

// The inverse of chunk_slot: the sequence n and chunk c of a slot (false: the slot holds no chunk). Varlen: the
// first slot of sequence n, n + floor(t0_n / 64), increases with n, so a binary search finds n (a garbage
// cu_seqlens table gives some in-bounds answer).
template <class Args>
__device__ __forceinline__ bool slot_chunk(const Args& a, int64_t slot, int64_t* n, int64_t* c) {
  if (a.cu_seqlens == nullptr) {
    if (a.nchunk_b <= 0) return false;
    *n = slot / a.nchunk_b;
    *c = slot % a.nchunk_b;
    return *n < a.N;
  }
  auto first = [&](int64_t m) {
    int64_t s0 = a.cu_i64 ? static_cast<const int64_t*>(a.cu_seqlens)[m] : static_cast<const int32_t*>(a.cu_seqlens)[m];
    s0 = s0 < 0 ? 0 : (s0 > a.T ? a.T : s0);
    return m + s0 / kC;
  };
  if (a.N <= 0 || first(0) > slot) return false;
  int64_t lo = 0, hi = a.N - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (first(mid) <= slot)
      lo = mid;
    else
      hi = mid - 1;
  }
  int64_t bidx, t0, len;
  seq_bounds(a, lo, &bidx, &t0, &len);
  const int64_t cc = slot - first(lo);
  *n = lo;
  *c = cc;
  return cc >= 0 && cc * kC < len;
}

// The state passes' loads of chunk ck (cp.async into double buffers; chunk_fwd_state.cuh, chunk_fwd_state_wg.cuh):
// the first `bytes` of its record (value head h), by threads tid = 0 .. NTH - 1 ...
template <int NTH>
__device__ __forceinline__ void copy_record(const ChunkKernelArgs& a, int64_t n, int64_t t0, int64_t ck, int h,
                                            uint32_t* dst, int64_t bytes, int tid) {
  const int64_t slot = chunk_slot(a, n, t0, ck);
  const uint4* src = reinterpret_cast<const uint4*>(a.rec + (slot * a.Hv + h) * kRecBytes);
  uint4* d = reinterpret_cast<uint4*>(dst);
  for (int i = tid; i < static_cast<int>(bytes / 16); i += NTH) cp_async<16>(d + i, src + i);
}

// ... and, read from global memory by the state passes themselves, the third part of chunk ck's A diag(beta) (its
// rest A' - hi - lo, written by the intra pass only where the chunk's largest beta exceeds 1): 16-bit m16n8k16 A
// fragments, 32 uint4 a causal block. With n identical unit keys the chunk transition along the key is 1 - lambda
// sum_t sum_s A'_ts = (1 - lambda)^n (lambda = beta), near +-1 at beta ~ 2 only by cancellation of entries ~ +-2; A' in
// two parts errs by up to 2^-17 an entry, the same errors in every chunk of such keys, so the state drifted along them
// (docs/chunk_fwd.md "Numerics"). With the rest U = A' R holds A' to ~2^-24.
__device__ __forceinline__ const uint4* record_rest(const ChunkKernelArgs& a, int64_t n, int64_t t0, int64_t ck,
                                                    int h) {
  return reinterpret_cast<const uint4*>(a.rec + (chunk_slot(a, n, t0, ck) * a.Hv + h) * kRecBytes + kRecCopyBytes);
}

// ... and a 64 x 64 16-bit value tile (src: its first row, row stride src_st elements; dst row stride ld elements),
// by 256 threads ht = 0 .. 255; rows at or past nv are zero-filled (plain stores, ordered by the next barrier).
template <class T>
__device__ __forceinline__ void copy_value_tile(uint16_t* dst, int ld, const T* src, int64_t src_st, int64_t nv,
                                                int ht) {
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    const int r = p * 32 + (ht >> 3), vec = ht & 7;
    uint16_t* d = dst + r * ld + vec * 8;
    if (r < nv)
      cp_async<16>(d, src + r * src_st + vec * 8);
    else
      *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
  }
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

// The chunk range of one CTA of a chain kernel: a whole sequence (kModeForward) or one segment of the split.
struct ChunkWork {
  int64_t n = 0, bidx = 0, t0 = 0, len = 0, c_begin = 0, c_end = 0;
  int seg = 0, nseg = 1;
  // summary only: the segment's decay window starts at c_begin (chunk_fwd.hpp, decay_window_start), so its summary
  // is [0 | N(c_begin -> c_end)]: the M tiles are zeros and the value tiles start from zero
  bool drop_m = false;
};

// The chunk where the decay window of work item `it`'s summary starts for value head h (chunk_fwd.hpp,
// decay_window_start), or -1: the full [M | N] summary (no decay table, or no chunk start of the segment decays far
// enough). The summary pass and the scan both ask; the same table and summation order give both the same answer.
__device__ __forceinline__ int64_t summary_window(const ChunkKernelArgs& a, const ChunkWorkItem& it, int h) {
  if (a.dec == nullptr) return -1;
  int64_t bidx, t0, len;
  seq_bounds(a, it.n, &bidx, &t0, &len);
  // the chunks of a sequence have consecutive record slots (chunk_slot), so the table row of chunk c is d[c]
  const float* d = a.dec + int64_t(h) * a.rec_slots + chunk_slot(a, it.n, t0, 0);
  return decay_window_start(d, it.c_begin, it.c_end, kDecayWindowLogTau);
}

// false: the CTA has no work (grid slack past the last segment, or the last segment's summary, never needed).
// Value head h: the summary's decay window is per (segment, head). Every thread of every CTA of the (item, head)
// finds the same window (the same table, the same summation order), so no CTA or thread has to publish it.
__device__ __forceinline__ bool resolve_work(const ChunkKernelArgs& a, int64_t item, int h, ChunkWork* w) {
  if (a.mode == kModeForward) {
    w->n = item;
    seq_bounds(a, w->n, &w->bidx, &w->t0, &w->len);
    w->c_end = (w->len + kC - 1) / kC;
    return true;
  }
  const ChunkWorkItem it = a.items[item];
  if (it.n < 0 || (a.mode == kModeSummary && it.seg == it.nseg - 1)) return false;
  w->n = it.n;
  w->seg = it.seg;
  w->nseg = it.nseg;
  seq_bounds(a, w->n, &w->bidx, &w->t0, &w->len);
  w->c_begin = it.c_begin;
  w->c_end = it.c_end;
  if (a.mode == kModeSummary) {
    const int64_t c = summary_window(a, it, h);
    if (c >= 0) w->c_begin = c, w->drop_m = true;
  }
  return true;
}

// Whether a summary CTA with value tiles [tile0, tile0 + per_cta) walks its chunks: not when the decay window drops
// M and every tile of the CTA is an M tile (tiles [0, K / 64) come first); those CTAs only store zeros.
__device__ __forceinline__ bool summary_walks(const ChunkWork& w, int tile0, int per_cta, int K) {
  return !w.drop_m || tile0 + per_cta > K / kBV;
}

// Where the walk of item `item` starts (value columns of the forward modes): h0 for the first segment (null:
// zeros), else the scan's result in the N part of the previous item. The summary starts from [I | 0] (no ref).
__device__ __forceinline__ StateRef start_state(const ChunkKernelArgs& a, const ChunkWork& w, int64_t item, int h,
                                                int K) {
  if (a.mode == kModeSummary) return StateRef{nullptr, 0, false};
  if (w.seg == 0)
    return a.h0 ? StateRef{const_cast<float*>(a.h0) + w.n * a.h0_sn + h * a.h0_sh, a.h0_sr, a.state_vmajor != 0}
                : StateRef{nullptr, 0, false};
  return StateRef{a.mn + ((item - 1) * a.Hv + h) * int64_t(K) * (K + a.V) + K, K + a.V, false};
}

// Element (key i, value column j of the tile) of a chain kernel's start state: the identity for the augmented M
// columns of the summary, else the start state (zeros without one, or when `load` is false: no tile).
__device__ __forceinline__ float start_value(const StateRef& src, bool m_tile, bool load, int tile, int vcol0, int i,
                                             int j) {
  if (m_tile) return (i == tile * kBV + j) ? 1.f : 0.f;
  return src.p && load ? src.p[src.off(i, vcol0 + j)] : 0.f;
}

// rho = 1 / sqrt(|x|^2 + 1e-6) of a 16-bit row spread over VPR adjacent lanes, 8 elements (four packed pairs u) per
// lane, in fp32 (gdn-math §1.4); every lane of the row gets rho.
template <class P, int VPR>
__device__ __forceinline__ float row_rnorm(const uint32_t* u) {
  float ss = 0.f;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 f = P::unpack(u[e]);
    ss = fmaf(f.x, f.x, fmaf(f.y, f.y, ss));
  }
#pragma unroll
  for (int off = VPR / 2; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  return l2_rnorm(ss);
}

// Visit a warp's state fragments f(mt, nt, e, i, j): element e of m16n8 tile (mt, nt) is state row
// i = rw + 16 mt + g8 (+ 8), column j = cb + 8 nt + 2 t4 (+ 1) (the mma accumulator layout).
template <int MT, int NT, class F>
__device__ __forceinline__ void for_each_state_element(int rw, int cb, int g8, int t4, F&& f) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) f(mt, nt, e, rw + mt * 16 + g8 + (e >> 1) * 8, cb + nt * 8 + 2 * t4 + (e & 1));
}

// A warp's start-state fragments (the layout of store_state: rows rw + 16 mt + g8 (+ 8), columns cb + 8 nt + 2 t4
// (+ 1)) by start_value.
template <int MT, int NT>
__device__ __forceinline__ void load_start_state(const StateRef& src, bool m_tile, bool load, int tile, int vcol0,
                                                 float (&s)[MT][NT][4], int rw, int cb, int g8, int t4) {
  for_each_state_element<MT, NT>(rw, cb, g8, t4, [&](int mt, int nt, int e, int i, int j) {
    s[mt][nt][e] = start_value(src, m_tile, load, tile, vcol0, i, j);
  });
}

// The 16-bit copy of a warp's state fragments (same layout) in a [K][ld] shared-memory tile: the GEMM operand of the
// next chunk's K S0 and Q S0 (gdn-math §10.2).
template <class P, int MT, int NT, class E>
__device__ __forceinline__ void store_state_copy(E* dst, int ld, const float (&s)[MT][NT][4], int rw, int cb, int g8,
                                                 int t4) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int i = rw + mt * 16 + g8, j = cb + nt * 8 + 2 * t4;
      *reinterpret_cast<uint32_t*>(&dst[i * ld + j]) = P::pack(s[mt][nt][0], s[mt][nt][1]);
      *reinterpret_cast<uint32_t*>(&dst[(i + 8) * ld + j]) = P::pack(s[mt][nt][2], s[mt][nt][3]);
    }
}

// Where it ends: this item's [M | N] (summary; columns from 0), the final state (last segment), or nowhere.
__device__ __forceinline__ StateRef end_state(const ChunkKernelArgs& a, const ChunkWork& w, int64_t item, int h,
                                              int K) {
  if (a.mode == kModeSummary) return StateRef{a.mn + (item * a.Hv + h) * int64_t(K) * (K + a.V), K + a.V, false};
  if (a.ht && w.seg == w.nseg - 1) return StateRef{a.ht + w.n * a.ht_sn + h * a.ht_sh, a.ht_sr, a.state_vmajor != 0};
  return StateRef{nullptr, 0, false};
}

// Store fp32 state fragments (a warp's rows rw + 16 mt + g8 (+ 8), columns cb + 8 nt + 2 t4 (+ 1)) at column
// offset j0 of dst.
template <int MT, int NT>
__device__ __forceinline__ void store_state(const StateRef& dst, const float (&s)[MT][NT][4], int rw, int cb, int j0,
                                            int g8, int t4) {
  for_each_state_element<MT, NT>(
      rw, cb, g8, t4, [&](int mt, int nt, int e, int i, int j) { dst.p[dst.off(i, j0 + j)] = s[mt][nt][e]; });
}

// The checkpoint after chunk c: the state after (c + 1) C tokens when that is a multiple of the interval (entries
// past the sequence end or past C_max are not written).
template <int MT, int NT>
__device__ __forceinline__ void store_checkpoint(const ChunkKernelArgs& a, const ChunkWork& w, int64_t c, int h,
                                                 int vcol0, const float (&s)[MT][NT][4], int rw, int cb, int g8,
                                                 int t4) {
  if (!a.ckpt || a.mode == kModeSummary) return;
  const int64_t done = (c + 1) * kC;
  if (done > w.len || done % a.ckpt_interval != 0) return;
  const int64_t idx = done / a.ckpt_interval - 1;
  if (idx >= a.num_ckpt) return;
  store_state(StateRef{a.ckpt + w.n * a.ck_sn + idx * a.ck_sc + h * a.ck_sh, a.ck_sr, a.state_vmajor != 0}, s, rw, cb,
              vcol0, g8, t4);
}

// g = -exp(A_log) softplus(a + dt_bias) (softplus with beta and threshold) and beta = c sigmoid(b) (gdn-math §4)
// for raw values of value head h (cuda/common/gate.cuh); rows past the sequence end get g = 0, beta = 0.
struct GateHead {
  float factor = -1.f, dtb = 0.f;  // -exp(A_log), dt_bias
};
__device__ __forceinline__ GateHead gate_head(const ChunkKernelArgs& a, int h) {
  GateHead gh;
  if (a.gate_in_kernel) {
    if (a.A_log) gh.factor = gate_factor(load_scalar(a.A_log, a.alog_dtype, h * a.alog_s));
    if (a.dt_bias) gh.dtb = load_scalar(a.dt_bias, a.dtb_dtype, h * a.dtb_s);
  }
  return gh;
}
__device__ __forceinline__ void gate_beta(const ChunkKernelArgs& a, const GateHead& gh, float graw, float braw,
                                          bool valid, float* g, float* b) {
  if (a.gate_in_kernel && a.g) graw = gate_from_factor(graw, gh.factor, gh.dtb, a.sp_beta, a.sp_threshold);
  if (a.beta_sigmoid && a.beta) braw = beta_from_raw(braw, a.beta_mult > 1.f);
  *g = valid ? graw : 0.f;
  *b = valid ? braw : 0.f;
}

// Diagonal block o..o+15 of A = (I + L)^-1 (gdn-math §5.7), lanes 0..15 of one warp: right-looking forward
// substitution, lane c owns column c; once x_r is final, acc_r' -= L_r'r x_r for r' > r (a chain of 16 FMAs).
__device__ __forceinline__ void diag_inverse16(const float* L, float* A, int ld, int o, int lane) {
  if (lane >= 16) return;
  float acc[16];
#pragma unroll
  for (int r = 0; r < 16; ++r) acc[r] = r == lane ? 1.f : 0.f;
#pragma unroll
  for (int r = 0; r < 16; ++r) {
    const float xr = acc[r];
    A[(o + r) * ld + o + lane] = xr;
#pragma unroll
    for (int r2 = r + 1; r2 < 16; ++r2) acc[r2] = fmaf(-L[(o + r2) * ld + o + r], xr, acc[r2]);
  }
}

template <int K, class E>
struct Smem {
  static constexpr int LDQ = K + 8;  // padded rows: conflict-free ldmatrix
  static constexpr int LDV = kBV + 8;
  static constexpr int LDF = kC + 4;  // fp32 64x64 matrices
  E q[kC * LDQ];                      // [token][K] q (l2-normalized when asked)
  E k[kC * LDQ];                      // [token][K]
  E v[kC * LDV];                      // [token][64] value tile
  E s[K * LDV];                       // [K][64] the state as a GEMM operand (rows 0-63: Ubar_lo in the update)
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

// Whether a chunk's record asks for the beta > 1 terms of U = A diag(beta) R (R's lo part on the wgmma pass, A
// diag(beta)'s rest on both state passes): its largest beta, which the intra pass writes into the header's slots 193
// and 194 (one per 32 rows), exceeds 1 (docs/chunk_fwd.md "Numerics").
__device__ __forceinline__ bool beta_above_one(const float* hdr) {
  return fmaxf(hdr[193], hdr[194]) > 1.f;
}

}  // namespace flashgdn::cuda::chunk_detail
