// The fused gradients pass of the backward (K = V = 128, bf16 inputs; docs/chunk_bwd.md "Fused gradients pass"): one
// CTA of two warpgroups per (walk of `fused_walk` consecutive chunk slots, value head) visits its chunks in reverse,
// carries the chunk-end state gradient dS in its registers from chunk to chunk (gdn-math §7.2: the reverse chain, one
// step per chunk; taken from pass 3's record where a walk or a sequence ends), and forms every gradient of §7.3 per
// chunk from q, k, v, dO, A (prep's split), S0 (pass 2's bf16 record) and dS alone: U, dU, W' and the rest are formed
// here, no U or dU record is read. Out: dv; dq and dk (the l2norm chain run here) without GQA, or with two value heads
// per q/k head from rank 0 of the pair, which adds rank 1's rows; else w.r.t. the normalized q, k per value
// head (fp32 scratch; pass 5a sums the value heads and runs the l2norm chain); dg and dbeta w.r.t. the resolved g,
// beta (fp32 scratch).
//
// Notation per chunk (n <= 64 rows; rows past n zero with g = 0, beta = 0): gamma the chunk-local cumsum of g, e_r =
// e^gamma_r, kb_r = e^(gamma_n - gamma_r), D_rs = e^(gamma_r - gamma_s) (s <= r), q^ = rho_q q, k^ = rho_k k, lam the
// scale; P^ = Q^ K^T (.) D, E = K^ K^T (.) D (s < r), A = (I + StrictLower(diag(b) E))^-1. Per chunk, in order:
//
//   1  dSb = bf16(dS); <S0, dS>; phase 2's Q K^T and K S0 issued; the chunk before's dg, dbeta (warp 7)
//   2  P^ (Q K^T) -> P_lam = lam P^; KS = K S0 -> W' = V - diag(e rho_k) KS, Wb = diag(b) W';
//      C1 dU = diag(kb rho_k) (K dSb); G1 dQ^ = diag(lam e) dO S0^T, dgamma += rho_q q . dQ^
//   3  U = A Wb (-> Ub); dU += P_lam^T dO
//   4  G2 Pm = lam Lower(dO U^T) (.) D -> R0 = Pm diag(rho_k), R1 = diag(rho_q) Pm, Z = Pm (.) P^;
//      G5 dKbar = U dSb^T -> dK^ = diag(kb) dKbar, tau = rowdot(kb k^, dKbar)
//   5  dU -> hi + lo; Ob = diag(lam e rho_q) dO; G3 dQ^ += R0 K (stored); G4 dK^ += R1^T Q
//   6  C2 dV' = A^T dU (A and dU split) -> dv = diag(b) dV', dbeta += rowdot(W', dV'), dgamma -= b e rho_k rowdot(KS,
//      dV') (KS formed again), dVg = -diag(b e rho_k) dV', dV'' = -diag(b e) dV'; G7 dA = StrictLower(dU Wb^T) split
//   7  X = A^T dA; K K^T (E's product); G8 dK^ += dV'' S0^T; C3 dS <- e_n dS + Q^T Ob + K^T dVg (the next chunk's dS)
//   8  dL = -StrictLower(X A^T); E; dbeta += rowsum(dL (.) E); M1 = diag(b) dL (.) D; Z += diag(b) dL (.) E
//   9  G10 dK^ += M1 diag(rho_k) K + (diag(rho_k) M1)^T K (stored); the per-row partial sums of dgamma, dbeta, tau
//      complete (dg = the reverse cumsum of dgamma, and dbeta, go out in the next chunk's phase 1 or after the walk)
//
// Precision (docs/chunk_bwd.md "Fused gradients pass"): every product takes its operands as single bf16 (the inputs
// exact) except C2 (A and dU as hi + lo), G7 (dU hi + lo) and X (dA hi + lo); fp32 accumulation, dS carried in fp32.
// The two warpgroups run in lockstep: warpgroup j takes value half j of the token-row products with V columns, key
// half j of those with K columns (dq, dk) and of dS, columns 32 j .. of the 64 x 64 ones. A CTA barrier separates the
// phases; every wgmma group is waited within its phase (just before its epilogue), but Q K^T and K S0, which phase 1
// issues and phase 2 waits for.
#pragma once

#include <cstddef>

#include "cuda/chunk_bwd/chunk_bwd_grads_wg.cuh"
#include "cuda/common/wgmma.cuh"

namespace flashgdn::cuda::bwd_detail {

constexpr int kFusedThreads = 256;                 // two warpgroups
constexpr int kFusedMaxWalk = 32;                  // chunk slots per walk, at most (the plan's fused_walk)
constexpr int kTailWarp = kFusedThreads / 32 - 1;  // forms a chunk's dg and dbeta (warps 0 and 1 form the factors)
constexpr float kLog2e = 1.4426950408889634f;

// Shared memory: every tile 64 rows x 128 bytes, 128-byte swizzled, 1024-byte aligned. Dead tiles are reused as
// the comments say (phase numbers of the header).
struct alignas(1024) FusedSmem {
  unsigned char q[2][8192];      // q [key half]
  unsigned char k[2][2][8192];   // k [buffer][key half]: chunk c's and the next chunk's (in flight from phase 7)
  unsigned char v[2][8192];      // v [value half]; dVg from phase 6
  unsigned char dO[2][8192];     // dO [value half]; Ob from phase 5
  unsigned char a[2][8192];      // A [hi, lo] [64 t][64 s]
  unsigned char s0[2][2][8192];  // S0 [key half][value half]
  unsigned char x1[2][2][8192];  // dSb [key half][value half] (1-4); dU [hi, lo][value half] (5-6)
  unsigned char x2[2][8192];     // Wb [value half] (2-6); M1 diag(rho_k), diag(rho_k) M1 (8-9)
  unsigned char x3[2][8192];     // Ub [value half] (3-4); dV'' [value half] (6-7)
  unsigned char x5[8192];        // P_lam (2-3); dA hi (6-7)
  unsigned char x6[8192];        // R0 (4-5); dA lo (6-7)
  unsigned char x7[8192];        // R1 (4-5); X (7-8)
  float rows[2][4][kC];          // [buffer] the record's gamma, rho_q, rho_k, beta (buffered with k)
  float f[6][kC];                // per token: e, kb, kb rho_k, lam e rho_q, b e (0 past the chunk end); gamma log2(e)
  // per token b e rho_k, and <S0, dS> per warp, [buffer] (with k): the chunk's dg / dbeta are formed in the next
  // chunk's phase 1, which writes the other buffer
  float fbg[2][kC], red[2][8];
  // per-token partial sums (index [warpgroup] or [warp of the columns' warpgroup]), complete after phase 9
  float g1[2][kC], tau[2][kC], kap[2][kC], dbv[2][kC], dbl[2][kC], zrow[2][kC], zcol[4][kC];
  float ldot[2][kC];  // without GQA: per token and key half, dx^ . x (the l2norm chain of dq, dk)
  // the walk: per slot its sequence (-1: no chunk), chunk, rows, batch entry and first token
  int32_t wn[kFusedMaxWalk], wc[kFusedMaxWalk], wnv[kFusedMaxWalk];
  int64_t wsb[kFusedMaxWalk], wt0[kFusedMaxWalk];
  int32_t item[2];  // this CTA's ticket (with pairs) and value head (fused_item)
};
static_assert(sizeof(FusedSmem) + 1024 <= 227 * 1024, "fused grads: one CTA's shared memory");

namespace fz {

// Offset of k step ks (16) of a K-major operand whose 128-wide k range is two adjacent [64][64] tiles.
__device__ __forceinline__ uint32_t kmaj(int ks) {
  return uint32_t(ks >> 2) * 8192 + uint32_t(ks & 3) * 32;
}
// Offset of k step ks of an MN-major operand whose 128 k rows run on through two tiles 16 KiB apart ([key half][value
// half] tiles: S0, dSb).
__device__ __forceinline__ uint32_t mnmaj(int ks) {
  return uint32_t(ks >> 2) * 16384 + uint32_t(ks & 3) * 2048;
}

// d (+)= A B over KS k steps: A, B from the descriptor low words a, b at offsets fa(ks), fb(ks). first: d is
// overwritten by the first step.
template <int N, int TA, int TB, int KS, class FA, class FB>
__device__ __forceinline__ void mma(float (&d)[N / 8][4], uint32_t a, FA fa, uint32_t b, FB fb, bool first) {
  float(&dv)[N / 2] = reinterpret_cast<float(&)[N / 2]>(d);
#pragma unroll
  for (int ks = 0; ks < KS; ++ks)
    wg::mma_ss_t<N, TA, TB>(dv, wg::desc_at(a, fa(ks)), wg::desc_at(b, fb(ks)), first ? ks > 0 : 1);
}

// An accumulator's rows as hi + lo into the tiles at hi, lo (gwg::put_rows), or rounded once into the tile at `at`,
// two column groups at a time: the packed halves of one pair live at once, not the whole accumulator's.
template <int NJ>
__device__ __forceinline__ void put_rows(uint32_t hi, uint32_t lo, const float (&d)[NJ][4], int c0, int wi, int lane) {
#pragma unroll
  for (int np = 0; np < NJ / 2; ++np) {
    uint32_t xh[2][2], xl[2][2];
    const float(&dp)[2][4] = *reinterpret_cast<const float(*)[2][4]>(&d[2 * np][0]);
    chunk_detail::split_acc<true>(dp, xh, xl);
    gwg::store_rows_at<2>(hi, xh, c0 + 2 * np, wi, lane);
    gwg::store_rows_at<2>(lo, xl, c0 + 2 * np, wi, lane);
  }
}
template <int NJ>
__device__ __forceinline__ void put_rows(uint32_t at, const float (&d)[NJ][4], int c0, int wi, int lane) {
#pragma unroll
  for (int np = 0; np < NJ / 2; ++np) {
    uint32_t x[2][2];
    const float(&dp)[2][4] = *reinterpret_cast<const float(*)[2][4]>(&d[2 * np][0]);
    chunk_detail::pack_acc<true, 2>(dp, x);
    gwg::store_rows_at<2>(at, x, c0 + 2 * np, wi, lane);
  }
}

// -diag(f) d rounded once into the tile at `at` (f: a per-row table of the chunk, rows 16 wi + lane / 4 (+ 8)), two
// column groups at a time.
template <int NJ>
__device__ __forceinline__ void put_rows_neg_scaled(uint32_t at, const float (&d)[NJ][4], const float* f, int wi,
                                                    int lane) {
  const float f0 = -f[16 * wi + (lane >> 2)], f1 = -f[16 * wi + (lane >> 2) + 8];
#pragma unroll
  for (int np = 0; np < NJ / 2; ++np) {
    uint32_t x[2][2];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      x[u][0] = chunk_detail::Elem<true>::pack(f0 * d[2 * np + u][0], f0 * d[2 * np + u][1]);
      x[u][1] = chunk_detail::Elem<true>::pack(f1 * d[2 * np + u][2], f1 * d[2 * np + u][3]);
    }
    gwg::store_rows_at<2>(at, x, 2 * np, wi, lane);
  }
}

// A key-half accumulator of dq^ or dk^ (rows: tokens 16 wi + lane / 4 (+ 8) < nv; columns: keys 64 wgi + ..) into the
// per-value-head fp32 scratch at dst + (row0 + r Hv) K (pass 5a sums the heads and runs the l2norm chain).
__device__ __forceinline__ void store_key_rows(float* dst, const float (&d)[8][4], int64_t row0, int64_t Hv, int nv,
                                               int wgi, int wi, int lane) {
  constexpr int K = 128;
#pragma unroll
  for (int jn = 0; jn < 8; ++jn)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = 16 * wi + (lane >> 2) + 8 * hr;
      if (r < nv)
        *reinterpret_cast<float2*>(dst + (row0 + r * Hv) * K + 64 * wgi + 8 * jn + 2 * (lane & 3)) =
            make_float2(d[jn][2 * hr], d[jn][2 * hr + 1]);
    }
}

// d += the key-half rows that store_key_rows wrote from another value head's CTA at src + (row0 + r Hv) K (rows < nv),
// every load issued before the first add.
__device__ __forceinline__ void add_key_rows(float (&d)[8][4], const float* src, int64_t row0, int64_t Hv, int nv,
                                             int wgi, int wi, int lane) {
  constexpr int K = 128;
  float2 x[8][2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int r = 16 * wi + (lane >> 2) + 8 * hr;
#pragma unroll
    for (int jn = 0; jn < 8; ++jn)
      x[jn][hr] = r < nv
                      ? *reinterpret_cast<const float2*>(src + (row0 + r * Hv) * K + 64 * wgi + 8 * jn + 2 * (lane & 3))
                      : make_float2(0.f, 0.f);
  }
#pragma unroll
  for (int jn = 0; jn < 8; ++jn)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) d[jn][2 * hr] += x[jn][hr].x, d[jn][2 * hr + 1] += x[jn][hr].y;
}

// A per-token table's values at this thread's rows (16 wi + g, + 8) and columns (32 wgi + 8 jn + 2 t4, + 1) of an
// m64n32 accumulator (gwg::n32_at), read once per epilogue instead of once per element: 2 + 4 loads for 16 elements.
struct Tok32 {
  float r[2];
  float2 c[4];
  __device__ __forceinline__ float row(int e) const { return r[e >> 1]; }
  __device__ __forceinline__ float col(int jn, int e) const { return e & 1 ? c[jn].y : c[jn].x; }
};
__device__ __forceinline__ Tok32 tok32(const float* f, int wi, int wgi, int g, int t4) {
  Tok32 t;
  t.r[0] = f[16 * wi + g], t.r[1] = f[16 * wi + g + 8];
#pragma unroll
  for (int jn = 0; jn < 4; ++jn) t.c[jn] = *reinterpret_cast<const float2*>(f + 32 * wgi + 8 * jn + 2 * t4);
  return t;
}

// The sum over the four lanes of a quad (one row's columns in an accumulator) of x; lane t4 == 0 stores it.
__device__ __forceinline__ void put_row_sum(float* dst, int r, float x, int t4) {
  x = lane_sum<1, 4>(x);
  if (t4 == 0) dst[r] = x;
}

// The dg and dbeta of walk slot i (its partial sums, its buffer pb of the record rows, b e rho_k and <S0, dS>) by one
// warp, lane l taking rows l and l + 32: dgamma, dbeta, tau summed in a fixed order, then gwg::store_dg_dbeta.
__device__ __forceinline__ void store_dg_dbeta(const ChunkBwdArgs& a, const FusedSmem& s, int i, int pb, int h,
                                               int lane) {
  const int nv = s.wnv[i];
  float dgam[2], dbeta[2], tau[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int r = lane + 32 * hr;
    float zc = 0.f;
#pragma unroll
    for (int w = 0; w < 4; ++w) zc += s.zcol[w][r];
    dgam[hr] =
        (s.g1[0][r] + s.g1[1][r]) - s.fbg[pb][r] * (s.kap[0][r] + s.kap[1][r]) + ((s.zrow[0][r] + s.zrow[1][r]) - zc);
    dbeta[hr] = (s.dbv[0][r] + s.dbv[1][r]) + (s.dbl[0][r] + s.dbl[1][r]);
    tau[hr] = s.tau[0][r] + s.tau[1][r];
  }
  float sd = 0.f;
  for (int w = 0; w < 8; ++w) sd += s.red[pb][w];
  const float en = expf(s.rows[pb][0][nv - 1]);
  gwg::store_dg_dbeta(a, (s.wsb[i] * a.T + s.wt0[i]) * a.Hv + h, nv, lane, dgam, dbeta, tau, en * sd);
}

// The shared-memory block at the first 1024-byte boundary of the dynamic allocation (its swizzled tiles need it).
__device__ __forceinline__ FusedSmem& smem_at(unsigned char* raw) {
  return *reinterpret_cast<FusedSmem*>(raw + ((1024 - (smem_addr(raw) & 1023)) & 1023));
}

// This CTA's item: value head `head`, walk `walk` of a.fused_walk chunk slots; `pair` the index of its (walk, unit)
// (its exchange flags); `rank` among the unit's value heads (0: the one that sums their dq, dk); `last`: the last
// item (ticket or linear index).
struct FusedItem {
  int head, walk, pair, rank;
  bool last;
};

// With pairs (cs value heads of a q/k head exchanging rows), each CTA takes the next ticket t as it starts
// (ChunkBwdArgs::order): pair p = t / cs, rank cs - 1 - t % cs in it, so that the rank that waits for the others'
// rows (0) starts after them and never holds an SM that they need. Without pairs no CTA waits on another of its grid
// and t is the CTA's linear index (rows are dispatched in order, so the first to run still take the first units; no
// atomic and barrier at the start). Unit u = p / walks (following the chains: the unit of queue entry p / walks, which
// thread 0 waits for), walk p % walks, value head u cs + rank. Following the chains, the CTAs that run first take the
// units whose chains ended first, and thread 0's acquire of the entry and the barrier after it order every thread's
// reads of the unit's records after their stores.
__device__ __forceinline__ FusedItem fused_item(const ChunkBwdArgs& a, FusedSmem& s) {
  const int cs = a.fused_cluster > 1 ? a.fused_cluster : 1, walks = int(gridDim.x);
  int t = int(blockIdx.y) * walks + int(blockIdx.x);
  if (cs > 1) {
    if (threadIdx.x == 0) s.item[0] = atom_add_acq_rel_gpu(a.order + 1, 1);
    __syncthreads();
    t = s.item[0];
  }
  const int p = t / cs, rank = cs - 1 - t % cs;
  if (threadIdx.x == 0) {
    int32_t u = p / walks + 1;
    if (a.follow) {
      const int32_t* q = a.order + 2 + a.Hv / cs + p / walks;
      while ((u = ld_acquire_gpu(q)) == 0) __nanosleep(256);
    }
    s.item[1] = (u - 1) * cs + rank;
  }
  __syncthreads();
  return {s.item[1], p % walks, p, rank, t == walks * int(gridDim.y) - 1};
}

// The exchange of a pair's dq^ / dk^ rows (fused_cluster > 1): a warp of a rank above 0 publishes its rows with one
// count on its flag (every lane's fence, then lane 0's add after the warp's barrier); the same warp of rank 0 waits
// until the flag holds n counts of each other rank (every lane polls: each lane's own acquire orders its loads).
__device__ __forceinline__ void publish_rows(int32_t* flag, int lane) {
  __threadfence();
  __syncwarp();
  if (lane == 0) atom_add_acq_rel_gpu(flag, 1);
}
__device__ __forceinline__ void await_rows(const int32_t* flag, int32_t n) {
  while (ld_acquire_gpu(flag) < n) __nanosleep(32);
}

}  // namespace fz

template <class E>
__global__ void __launch_bounds__(kFusedThreads, 1) chunk_bwd_fused_kernel(const ChunkBwdArgs a) {
  static_assert(std::is_same_v<E, __nv_bfloat16>, "the fused gradients pass takes bf16 inputs");
  constexpr int K = 128, V = 128;
  if (!fused_on(a)) {  // a beta above 1: pass 4 on wgmma instead, launched after this grid, reads the chains' records
    if (a.follow) pdl_wait();
    return;
  }
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const fz::FusedItem it = fz::fused_item(a, fz::smem_at(smem_raw));
  const int h = it.head;
  const int64_t s_lo = int64_t(it.walk) * a.fused_walk;
  const int nw = int(a.slots - s_lo < a.fused_walk ? a.slots - s_lo : a.fused_walk);
  const float lam = a.scale;
  {
    auto& s = fz::smem_at(smem_raw);
    const int tid = int(threadIdx.x);
    if (tid < nw) {
      int64_t n = 0, c = 0, sb = 0, st = 0, len = 0;
      const bool ok = slot_chunk(a, s_lo + tid, &n, &c);
      if (ok) seq_bounds(a, n, &sb, &st, &len);
      s.wn[tid] = ok ? int32_t(n) : -1;
      s.wc[tid] = int32_t(c);
      s.wnv[tid] = ok ? int32_t(len - kC * c < kC ? len - kC * c : kC) : 0;
      s.wsb[tid] = sb;
      s.wt0[tid] = st + kC * c;
    }
    __syncthreads();
  }
  constexpr uint32_t o_q = offsetof(FusedSmem, q), o_k = offsetof(FusedSmem, k), o_v = offsetof(FusedSmem, v);
  constexpr uint32_t o_do = offsetof(FusedSmem, dO), o_a = offsetof(FusedSmem, a), o_s0 = offsetof(FusedSmem, s0);
  constexpr uint32_t o_x1 = offsetof(FusedSmem, x1), o_x2 = offsetof(FusedSmem, x2), o_x3 = offsetof(FusedSmem, x3);
  constexpr uint32_t o_x5 = offsetof(FusedSmem, x5), o_x6 = offsetof(FusedSmem, x6), o_x7 = offsetof(FusedSmem, x7);
  enum : int { kLdQVO = 1, kLdS0 = 2, kLdA = 4, kLdKR = 8 };
  // dS (fp32, registers): key 64 wgi + 16 wi + g (+ 8), value 64 vh + 8 jn + 2 t4 (+ 1), m64n64 layout per half
  float ds[2][8][4];
  int i = nw - 1;
  while (i >= 0 && fz::smem_at(smem_raw).wn[i] < 0) --i;
  bool carry = false, first = true;
  int pend = -1;  // the slot whose dg and dbeta are still to be formed (in the next chunk's phase 1, or at the end)
  int kbuf = 0;   // this chunk's k and record-row buffer; the next chunk's go into the other one
  // With fused_cluster (GQA): this CTA's rank among its q/k head's value heads, its warp's exchange flag and the
  // exchanges so far
  const int rank = it.rank;
  int32_t* const xflag =
      a.order + 2 + 2 * (a.Hv / (a.fused_cluster > 1 ? a.fused_cluster : 1)) + 8 * it.pair + int(threadIdx.x >> 5);
  int32_t xn = 0;
  while (i >= 0) {
    // Thread indices and shared addresses formed anew per chunk from an opaque tid and base: formed once before the
    // loop, every address derived from them (hoisted by the compiler) stays live through all phases and spills.
    int tid = int(threadIdx.x), pad = int((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    asm volatile("mov.b32 %0, %0;" : "+r"(tid));
    asm volatile("mov.b32 %0, %0;" : "+r"(pad));
    auto& s = *reinterpret_cast<FusedSmem*>(smem_raw + pad);
    const int lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int wgi = __shfl_sync(0xffffffffu, tid >> 7, 0), wi = __shfl_sync(0xffffffffu, (tid >> 5) & 3, 0);
    // one shared address and one descriptor low word for every tile: each operand and store adds its tile's offset
    // (an immediate)
    // buf: kbuf through a shuffle from lane 0, which ptxas knows to be warp-uniform, so that the k tile's descriptors
    // stay in uniform registers
    const int buf = __shfl_sync(0xffffffffu, kbuf, 0);
    const uint32_t sa = smem_addr(&s), sl = wg::desc_lo(sa), slk = wg::desc_lo(sa + o_k + 16384u * buf);
    // Loads of slot i's inputs (cp.async, one group): parts as they free up in the chunk before; k and the record rows
    // into buffer kb.
    const auto load = [&](int i, int parts, int kb) {
      const int nv = s.wnv[i];
      const int64_t sb = s.wsb[i], t0 = s.wt0[i], rec = (s_lo + i) * a.Hv + h;
      const int kv = tid & 15, r0 = tid >> 4;  // 16-byte piece kv of rows r0 + 16 j
      const auto rows16 = [&](unsigned char(&dst)[2][8192], const E* src, int64_t rst) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int r = r0 + 16 * j;
          const bool ok = r < nv;
          cp_async16_zfill(&dst[kv >> 3][wg::swz(r, kv & 7)], ok ? src + r * rst + 8 * kv : src, ok);
        }
      };
      const int hk = h / a.group;
      if (parts & kLdQVO) {
        rows16(s.q, static_cast<const E*>(a.q) + sb * a.q_sb + hk * a.q_sh + t0 * a.q_st, a.q_st);
        rows16(s.v, static_cast<const E*>(a.v) + sb * a.v_sb + h * a.v_sh + t0 * a.v_st, a.v_st);
        rows16(s.dO, static_cast<const E*>(a.d_o) + sb * a.do_sb + h * a.do_sh + t0 * a.do_st, a.do_st);
      }
      if (parts & kLdS0) {  // bf16 [K][V]
        const auto* Sg = reinterpret_cast<const unsigned char*>(a.S0 + rec * (K * V));
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int r = r0 + 16 * j;
          cp_async<16>(&s.s0[r >> 6][kv >> 3][wg::swz(r & 63, kv & 7)], Sg + r * (V * 2) + kv * 16);
        }
      }
      if (parts & kLdA) {  // bf16 hi [64][64], then lo
        const auto* Ag = reinterpret_cast<const unsigned char*>(a.A + rec * (kC * kC));
        const int cc = tid & 7, rr = tid >> 3;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int p = j >> 1, r = rr + 32 * (j & 1);
          cp_async<16>(&s.a[p][wg::swz(r, cc)], Ag + p * 8192 + r * 128 + cc * 16);
        }
      }
      if (parts & kLdKR) {
        rows16(s.k[kb], static_cast<const E*>(a.k) + sb * a.k_sb + hk * a.k_sh + t0 * a.k_st, a.k_st);
        copy_record_rows(s.rows[kb], a.rows, rec, tid);
      }
      cp_async_commit();
    };

    const auto load_ds = [&](int i) {  // pass 3's record: the gradient w.r.t. the chunk's end state, K-major
      const float* src = a.dS + ((s_lo + i) * a.Hv + h) * (K * V) + (64 * wgi + 16 * wi + g) * V + 2 * t4;
#pragma unroll
      for (int vh = 0; vh < 2; ++vh)
#pragma unroll
        for (int jn = 0; jn < 8; ++jn)
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const float2 x = *reinterpret_cast<const float2*>(src + hr * 8 * V + 64 * vh + 8 * jn);
            ds[vh][jn][2 * hr] = x.x, ds[vh][jn][2 * hr + 1] = x.y;
          }
    };

    if (first) {  // two groups, as every chunk's loads below: A is waited for only before phase 3
      load(i, kLdQVO | kLdS0 | kLdKR, buf);
      load(i, kLdA, buf);
      first = false;
    }
    int i2 = i - 1;  // the walk's next chunk (the one before in the sequence, when it continues)
    while (i2 >= 0 && s.wn[i2] < 0) --i2;
    const bool cont = i2 >= 0 && s.wn[i2] == s.wn[i] && s.wc[i2] == s.wc[i] - 1;
    const int nv = s.wnv[i];
    const int64_t sb = s.wsb[i], t0 = s.wt0[i];
    const int hk = h / a.group;
    if (!carry) load_ds(i);
    cp_async_wait<1>();
    wg::fence_async_smem();  // this thread's landed copies, visible to the async proxy (wgmma) after the barrier
    __syncthreads();         // slot i's inputs but A landed (every thread's copies)

    // ---- phase 1: dSb = bf16(dS); <S0, dS>; per-token factors
    float pq[4][4], ks[8][4];  // phase 2's Q K^T and K S0, issued in phase 1
    {
      float acc = 0.f;
#pragma unroll
      for (int vh = 0; vh < 2; ++vh) {
        fz::put_rows<8>(sa + o_x1 + 16384 * wgi + 8192 * vh, ds[vh], 0, wi, lane);
#pragma unroll
        for (int jn = 0; jn < 8; ++jn)
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const int key = 16 * wi + g + 8 * hr, val = 8 * jn + 2 * t4;
            const float2 s2 =
                chunk_detail::widen_pair<true>(*reinterpret_cast<const uint32_t*>(&s.s0[wgi][vh][gwg::at16(key, val)]));
            acc = fmaf(s2.x, ds[vh][jn][2 * hr], fmaf(s2.y, ds[vh][jn][2 * hr + 1], acc));
          }
      }
      // Phase 2's products of the inputs alone (Q K^T, K S0) go out here, under the rest of phase 1 (none of it reads
      // their results; they read none of its stores). Not before dS's reads above: ptxas does not follow wgmma groups
      // across the loop's back edge and would wait for these two at the first read of dS (C3's accumulator); the pin
      // keeps the compiler from sinking the dot's FMAs below them.
      asm volatile("" : "+f"(acc));
      wg::fence();
      gwg::mma_ss_k128<32>(reinterpret_cast<float(&)[16]>(pq), sl, o_q, slk, 4096 * wgi, true);
      wg::commit();
      fz::mma<64, 0, 1, 8>(
          ks, slk, [](int j) { return fz::kmaj(j); }, sl,
          [&](int j) { return o_s0 + uint32_t(8192 * wgi) + fz::mnmaj(j); }, true);
      wg::commit();
      if (tid < kC) {
        const float(&rw)[4][kC] = s.rows[buf];
        const float gn = rw[0][nv - 1], gm = rw[0][tid], rq = rw[1][tid], rk = rw[2][tid];
        const float b = rw[3][tid], e = tid < nv ? expf(gm) : 0.f, kb = tid < nv ? expf(gn - gm) : 0.f;
        s.f[0][tid] = e, s.f[1][tid] = kb, s.f[2][tid] = kb * rk, s.f[3][tid] = lam * e * rq;
        s.fbg[buf][tid] = b * e * rk, s.f[4][tid] = b * e;
        s.f[5][tid] = gm * kLog2e;  // D_rs = e^(gamma_r - gamma_s) = 2^(gl_r - gl_s): one FADD and one EX2 an entry
      }
      acc = lane_sum<1, 32>(acc);
      if (lane == 0) s.red[buf][tid >> 5] = acc;
      // the chunk before's dg and dbeta (its partial sums are rewritten from phase 4 on), under Q K^T and K S0
      if (tid >= kTailWarp * 32 && pend >= 0) fz::store_dg_dbeta(a, s, pend, buf ^ 1, h, lane);
    }
    wg::fence_async_smem();
    __syncthreads();
    const float* fe = s.f[0];
    const float* fkb = s.f[1];
    const float* fkr = s.f[2];
    const float* fqg = s.f[3];
    const float* fbg = s.fbg[buf];
    const float* fbe = s.f[4];
    const float* gl = s.f[5];
    const float* gam = s.rows[buf][0];
    const float* rq = s.rows[buf][1];
    const float* rk = s.rows[buf][2];
    const float* bt = s.rows[buf][3];
    // Without GQA: dx = rho (dx^ - (dx^ . x^) x^) = rho (dx^ - rho^2 (dx^ . x) x) for a key-half accumulator of dx^
    // (gdn-math §7.6; x the raw row in its tile, rho = 1 without the l2norm), stored in the io dtype for rows < nv.
    // The row dot spans both warpgroups' keys: partial sums, a CTA barrier, then the stores.
    const auto finish_rows = [&](const float(&d)[8][4], const unsigned char(&xt)[2][8192], const float* rho, void* out,
                                 int64_t o_sb, int64_t o_st, int64_t o_sh) {
      float p[2] = {0.f, 0.f};
#pragma unroll
      for (int jn = 0; jn < 8; ++jn)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const float2 x = chunk_detail::widen_pair<true>(
              *reinterpret_cast<const uint32_t*>(&xt[wgi][gwg::at16(16 * wi + g + 8 * hr, 8 * jn + 2 * t4)]));
          p[hr] = fmaf(d[jn][2 * hr], x.x, fmaf(d[jn][2 * hr + 1], x.y, p[hr]));
        }
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) fz::put_row_sum(s.ldot[wgi], 16 * wi + g + 8 * hr, p[hr], t4);
      __syncthreads();
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int r = 16 * wi + g + 8 * hr;
        if (r >= nv) continue;
        const float rr = rho[r], c = a.l2norm ? rr * rr * (s.ldot[0][r] + s.ldot[1][r]) : 0.f;
        E* const o = static_cast<E*>(out) + sb * o_sb + (t0 + r) * o_st + hk * o_sh + 64 * wgi;
#pragma unroll
        for (int jn = 0; jn < 8; ++jn) {
          const float2 x = chunk_detail::widen_pair<true>(
              *reinterpret_cast<const uint32_t*>(&xt[wgi][gwg::at16(r, 8 * jn + 2 * t4)]));
          *reinterpret_cast<uint32_t*>(o + 8 * jn + 2 * t4) =
              Storage<E>::from2(rr * (d[jn][2 * hr] - c * x.x), rr * (d[jn][2 * hr + 1] - c * x.y));
        }
      }
    };

    // With GQA, dq^ or dk^ of this value head (d) to the scratch (fp32, per value head: pass 5a sums the heads), or
    // in a pair (fused_cluster): a rank above 0 stores it and publishes it (it runs ahead: every exchange has rows of
    // its own); rank 0 waits for the others' rows, adds them and returns true: it then holds the q/k head's sum and
    // ends the work (the l2norm chain, the store). Rank 0 summing both dq and dk measured faster than the ranks taking
    // turns, where each CTA waits for the other once a chunk.
    const auto hand_over = [&](float(&d)[8][4], float* scratch) {
      const int64_t row0 = (sb * a.T + t0) * a.Hv + h;
      if (rank > 0 || a.fused_cluster <= 1) {
        fz::store_key_rows(scratch, d, row0, a.Hv, nv, wgi, wi, lane);
        if (a.fused_cluster > 1) fz::publish_rows(xflag, lane);
        return false;
      }
      fz::await_rows(xflag, ++xn * (a.fused_cluster - 1));
      for (int p = 1; p < a.fused_cluster; ++p) fz::add_key_rows(d, scratch, row0 + p, a.Hv, nv, wgi, wi, lane);
      return true;
    };

    // ---- phase 2: C1 K dS (its own group, behind Q K^T and K S0 from phase 1); the epilogues of all three
    float ph[4][4], du[8][4];
    {
      wg::fence();
      fz::mma<64, 0, 1, 8>(
          du, slk, [](int j) { return fz::kmaj(j); }, sl,
          [&](int j) { return o_x1 + uint32_t(8192 * wgi) + fz::mnmaj(j); }, true);
      wg::commit();
      wg::wait2();  // Q K^T (K S0 and C1 in flight under P's epilogue)
      {             // P^ = rho_q rho_k (Q K^T) (.) D (s <= r), P_lam = lam P^ (rows, columns 32 wgi ..)
        uint32_t x[4][2];
        const fz::Tok32 tq = fz::tok32(rq, wi, wgi, g, t4), tk = fz::tok32(rk, wi, wgi, g, t4),
                        tg = fz::tok32(gl, wi, wgi, g, t4);
#pragma unroll
        for (int jn = 0; jn < 4; ++jn)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const auto [r, c] = gwg::n32_at(wi, wgi, g, t4, jn, e);
            const float p = tq.row(e) * tk.col(jn, e) * pq[jn][e] * exp2f(tg.row(e) - tg.col(jn, e));
            ph[jn][e] = c <= r ? p : 0.f;
          }
#pragma unroll
        for (int jn = 0; jn < 4; ++jn)
#pragma unroll
          for (int hr = 0; hr < 2; ++hr)
            x[jn][hr] = chunk_detail::Elem<true>::pack(lam * ph[jn][2 * hr], lam * ph[jn][2 * hr + 1]);
        gwg::store_rows_at<4>((sa + o_x5), x, 4 * wgi, wi, lane);
      }
      wg::wait1();  // K S0
      {             // W' = V - diag(e rho_k) KS, Wb = diag(b) W' (value half wgi): hi into x2, lo into x6 / x7 (for U)
#pragma unroll
        for (int jn = 0; jn < 8; ++jn)
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const int r = 16 * wi + g + 8 * hr, c = 8 * jn + 2 * t4;
            const float2 vv =
                chunk_detail::widen_pair<true>(*reinterpret_cast<const uint32_t*>(&s.v[wgi][gwg::at16(r, c)]));
            const float f = fe[r] * rk[r], b = bt[r];
            ks[jn][2 * hr] = b * (vv.x - f * ks[jn][2 * hr]);
            ks[jn][2 * hr + 1] = b * (vv.y - f * ks[jn][2 * hr + 1]);
          }
        fz::put_rows<8>((sa + o_x2) + 8192 * wgi, (sa + o_x6) + 8192 * wgi, ks, 0, wi, lane);
      }
      wg::wait0();
#pragma unroll
      for (int jn = 0; jn < 8; ++jn)
#pragma unroll
        for (int e = 0; e < 4; ++e) du[jn][e] *= fkr[16 * wi + g + 8 * (e >> 1)];  // Kbar dS
    }
    cp_async_wait<0>();  // A (this thread's copies; every thread's after the barrier)
    wg::fence_async_smem();
    __syncthreads();

    // ---- phase 3: U = A Wb (A split); dU += P_lam^T dO
    {
      float u[8][4];
      wg::fence();
      fz::mma<64, 0, 1, 4>(
          u, sl, [](int j) { return o_a + uint32_t(32 * j); }, sl,
          [&](int j) { return o_x2 + uint32_t(8192 * wgi + 2048 * j); }, true);
      fz::mma<64, 0, 1, 4>(
          u, sl, [](int j) { return o_a + uint32_t(8192 + 32 * j); }, sl,
          [&](int j) { return o_x2 + uint32_t(8192 * wgi + 2048 * j); }, false);
      fz::mma<64, 0, 1, 4>(
          u, sl, [](int j) { return o_a + uint32_t(32 * j); }, sl,
          [&](int j) { return o_x6 + uint32_t(8192 * wgi + 2048 * j); }, false);
      wg::commit();
      wg::wait0();
      // every warp of this warpgroup done reading its Wb lo tile (each warp's group reads all of B): U lo takes it
      named_barrier<128>(1 + wgi);
      // tau_r = kb rho_k k_r . (U dS^T)_r = U_r . (Kbar dS)_r, from the fp32 U and C1's accumulator (du holds Kbar dS)
      float tp[2] = {0.f, 0.f};
#pragma unroll
      for (int jn = 0; jn < 8; ++jn)
#pragma unroll
        for (int e = 0; e < 4; ++e) tp[e >> 1] = fmaf(u[jn][e], du[jn][e], tp[e >> 1]);
      wg::fence();
      fz::mma<64, 1, 1, 4>(
          du, sl, [](int j) { return o_x5 + uint32_t(2048 * j); }, sl,
          [&](int j) { return o_do + uint32_t(8192 * wgi + 2048 * j); }, false);
      wg::commit();
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) fz::put_row_sum(s.tau[wgi], 16 * wi + g + 8 * hr, tp[hr], t4);
      fz::put_rows<8>((sa + o_x3) + 8192 * wgi, (sa + o_x6) + 8192 * wgi, u, 0, wi, lane);
      wg::wait0();
    }
    wg::fence_async_smem();
    __syncthreads();

    // ---- phase 4: G2 dO U^T -> Pm, R0, R1, Z; G5 U dS^T -> dK^, tau
    float dk[8][4];
    {
      float dp[4][4];
      wg::fence();
      gwg::mma_ss_k128<32>(reinterpret_cast<float(&)[16]>(dp), sl, o_do, sl, o_x3 + 4096 * wgi, true);
      gwg::mma_ss_k128<32>(reinterpret_cast<float(&)[16]>(dp), sl, o_do, sl, o_x6 + 4096 * wgi, false);
      wg::commit();
      gwg::mma_ss_k128<64>(reinterpret_cast<float(&)[32]>(dk), sl, o_x3, sl, o_x1 + 16384 * wgi, true);
      wg::commit();
      wg::wait1();
      {  // Pm = lam Lower(dO U^T) (.) D in place; Z = dP (.) P^ (P^ holds D)
        float zr[2] = {0.f, 0.f}, zc[4][2] = {};
        const fz::Tok32 tg = fz::tok32(gl, wi, wgi, g, t4);
#pragma unroll
        for (int jn = 0; jn < 4; ++jn)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const auto [r, c] = gwg::n32_at(wi, wgi, g, t4, jn, e);
            const float dpl = lam * dp[jn][e];
            const float z = c < r ? dpl * ph[jn][e] : 0.f;
            zr[e >> 1] += z, zc[jn][e & 1] += z;
            const float pm = dpl * exp2f(tg.row(e) - tg.col(jn, e));
            dp[jn][e] = c <= r ? pm : 0.f;
          }
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) fz::put_row_sum(s.zrow[wgi], 16 * wi + g + 8 * hr, zr[hr], t4);
        gwg::put_col_sums<4>(&s.zcol[wi][32 * wgi], zc, g, t4);
      }
      wg::wait0();
#pragma unroll
      for (int jn = 0; jn < 8; ++jn)
#pragma unroll
        for (int e = 0; e < 4; ++e) dk[jn][e] *= fkb[16 * wi + g + 8 * (e >> 1)];  // dK^ = diag(kb) dKbar
      __syncthreads();  // both warpgroups' G2 read U lo (x6, x7): R0 and R1 take x5-x7
      float r0v[4][4];
      uint32_t x1r[4][2];
      const fz::Tok32 tq = fz::tok32(rq, wi, wgi, g, t4), tk = fz::tok32(rk, wi, wgi, g, t4);
#pragma unroll
      for (int jn = 0; jn < 4; ++jn)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          r0v[jn][2 * hr] = dp[jn][2 * hr] * tk.c[jn].x, r0v[jn][2 * hr + 1] = dp[jn][2 * hr + 1] * tk.c[jn].y;
          x1r[jn][hr] = chunk_detail::Elem<true>::pack(tq.r[hr] * dp[jn][2 * hr], tq.r[hr] * dp[jn][2 * hr + 1]);
        }
      fz::put_rows<4>((sa + o_x6), (sa + o_x5), r0v, 4 * wgi, wi, lane);  // R0 = Pm diag(rho_k) as hi + lo
      gwg::store_rows_at<4>((sa + o_x7), x1r, 4 * wgi, wi, lane);         // R1 = diag(rho_q) Pm
    }
    wg::fence_async_smem();
    __syncthreads();

    // ---- phase 5: G1 dQ^ = diag(lam e) dO S0^T, G4 dK^ += R1^T Q (group 1), then G3 dQ^ += R0 K (R0 split);
    // meanwhile dU -> hi + lo
    {
      float dq[8][4];
      wg::fence();
      gwg::mma_ss_k128<64>(reinterpret_cast<float(&)[32]>(dq), sl, o_do, sl, o_s0 + 16384 * wgi, true);
      fz::mma<64, 1, 1, 4>(
          dk, sl, [](int j) { return o_x7 + uint32_t(2048 * j); }, sl,
          [&](int j) { return o_q + uint32_t(8192 * wgi + 2048 * j); }, false);
      wg::commit();
      fz::put_rows<8>((sa + o_x1) + 8192 * wgi, (sa + o_x1) + 16384 + 8192 * wgi, du, 0, wi, lane);
      // G1 and G4 as one group, waited whole: G1 waited alone keeps G4 in flight under dQ^'s scaling and G3, 9
      // registers more and 0.2-0.8% slower (docs/chunk_bwd.md "Fused gradients pass")
      wg::wait0();
      float gq[2] = {0.f, 0.f};  // dgamma += rho_q q . dQ^ of G1 (gdn-math §7.3 step 1)
#pragma unroll
      for (int jn = 0; jn < 8; ++jn)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = 16 * wi + g + 8 * (e >> 1), key = 8 * jn + 2 * t4 + (e & 1);
          dq[jn][e] *= lam * fe[r];
          gq[e >> 1] = fmaf(widen16(*reinterpret_cast<const E*>(&s.q[wgi][gwg::at16(r, key)])), dq[jn][e], gq[e >> 1]);
        }
      wg::fence();
      fz::mma<64, 0, 1, 4>(
          dq, sl, [](int j) { return o_x6 + uint32_t(32 * j); }, slk,
          [&](int j) { return uint32_t(8192 * wgi + 2048 * j); }, false);
      fz::mma<64, 0, 1, 4>(
          dq, sl, [](int j) { return o_x5 + uint32_t(32 * j); }, slk,
          [&](int j) { return uint32_t(8192 * wgi + 2048 * j); }, false);
      wg::commit();
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int r = 16 * wi + g + 8 * hr;
        fz::put_row_sum(s.g1[wgi], r, rq[r] * gq[hr], t4);
      }
      wg::wait0();
      // dQ^ (w.r.t. the normalized q): complete here without GQA or on a cluster's rank 0: its l2norm chain, stored
      if (a.group == 1 || hand_over(dq, a.dqh)) finish_rows(dq, s.q, rq, a.dq, a.dq_sb, a.dq_st, a.dq_sh);
    }
    wg::fence_async_smem();
    __syncthreads();

    // ---- phase 6: C2 dV' = A^T dU (group 1), G7 dA = dU Wb^T (group 2), K S0 again (group 3, waited after dV''s
    // stores) for the row sums that need V, KS and dV' together (dbeta, kappa), which free v for dVg
    {
      float dvp[8][4], ks[8][4];
      {
        float da[4][4];
        wg::fence();
        // (A_lo, dU_hi), (A_hi, dU_lo), (A_hi, dU_hi): A^T and dU MN-major
        fz::mma<64, 1, 1, 4>(
            dvp, sl, [](int j) { return o_a + uint32_t(8192 + 2048 * j); }, sl,
            [&](int j) { return o_x1 + uint32_t(8192 * wgi + 2048 * j); }, true);
        fz::mma<64, 1, 1, 4>(
            dvp, sl, [](int j) { return o_a + uint32_t(2048 * j); }, sl,
            [&](int j) { return o_x1 + uint32_t(16384 + 8192 * wgi + 2048 * j); }, false);
        fz::mma<64, 1, 1, 4>(
            dvp, sl, [](int j) { return o_a + uint32_t(2048 * j); }, sl,
            [&](int j) { return o_x1 + uint32_t(8192 * wgi + 2048 * j); }, false);
        wg::commit();
        gwg::mma_ss_k128<32>(reinterpret_cast<float(&)[16]>(da), sl, o_x1, sl, o_x2 + 4096 * wgi, true);
        gwg::mma_ss_k128<32>(reinterpret_cast<float(&)[16]>(da), sl, o_x1 + 16384, sl, o_x2 + 4096 * wgi, false);
        wg::commit();
        fz::mma<64, 0, 1, 8>(
            ks, slk, [](int j) { return fz::kmaj(j); }, sl,
            [&](int j) { return o_s0 + uint32_t(8192 * wgi) + fz::mnmaj(j); }, true);
        wg::commit();
#pragma unroll
        for (int j = 0; j < 4; ++j) {  // Ob = diag(lam e rho_q) dO in place (dO's last reader was G1): 1024 pieces
          const int p = tid + 256 * j, r = p >> 4, kv = p & 15;
          uint4* at = reinterpret_cast<uint4*>(&s.dO[kv >> 3][wg::swz(r, kv & 7)]);
          uint4 w = *at;
          const float f = fqg[r];
          uint32_t* ww = &w.x;
#pragma unroll
          for (int m = 0; m < 4; ++m) {
            const float2 x = chunk_detail::widen_pair<true>(ww[m]);
            ww[m] = chunk_detail::Elem<true>::pack(f * x.x, f * x.y);
          }
          *at = w;
        }
        wg::wait1();  // C2 and G7 (K S0 in flight under dA's epilogue and dv's stores)
#pragma unroll
        for (int jn = 0; jn < 4; ++jn)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const auto [r, c] = gwg::n32_at(wi, wgi, g, t4, jn, e);
            if (c >= r) da[jn][e] = 0.f;  // strictly lower: the other entries of A do not depend on L
          }
        fz::put_rows<4>(sa + o_x5, sa + o_x6, da, 4 * wgi, wi, lane);
      }
      // dv = diag(b) dV' (rows < nv); dV'' = -diag(b e) dV' into x3 (G8's operand), two column groups at a time
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int r = 16 * wi + g + 8 * hr;
        const float b = bt[r];
        E* const o = static_cast<E*>(a.dv) + sb * a.dv_sb + (t0 + r) * a.dv_st + h * a.dv_sh + 64 * wgi;
        if (r < nv)
#pragma unroll
          for (int jn = 0; jn < 8; ++jn)
            *reinterpret_cast<uint32_t*>(o + 8 * jn + 2 * t4) =
                Storage<E>::from2(b * dvp[jn][2 * hr], b * dvp[jn][2 * hr + 1]);
      }
      fz::put_rows_neg_scaled<8>(sa + o_x3 + 8192 * wgi, dvp, fbe, wi, lane);  // dV'' = -diag(b e) dV'
      wg::wait0();
      {  // dbeta += rowdot(W', dV'), kappa = rowdot(KS, dV') (W' = V - diag(e rho_k) KS), this value half
        float pb[2] = {0.f, 0.f}, pk[2] = {0.f, 0.f};
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int r = 16 * wi + g + 8 * hr;
          const float f = fe[r] * rk[r];
#pragma unroll
          for (int jn = 0; jn < 8; ++jn) {
            const float2 vv = chunk_detail::widen_pair<true>(
                *reinterpret_cast<const uint32_t*>(&s.v[wgi][gwg::at16(r, 8 * jn + 2 * t4)]));
            const float d0 = dvp[jn][2 * hr], d1 = dvp[jn][2 * hr + 1], k0 = ks[jn][2 * hr], k1 = ks[jn][2 * hr + 1];
            pb[hr] = fmaf(vv.x - f * k0, d0, fmaf(vv.y - f * k1, d1, pb[hr]));
            pk[hr] = fmaf(k0, d0, fmaf(k1, d1, pk[hr]));
          }
          fz::put_row_sum(s.dbv[wgi], r, pb[hr], t4);
          fz::put_row_sum(s.kap[wgi], r, pk[hr], t4);
        }
      }
      __syncwarp();  // this warp's reads of v (its 16 rows of value half wgi) before dVg overwrites them
      fz::put_rows_neg_scaled<8>(sa + o_v + 8192 * wgi, dvp, fbg, wi, lane);  // dVg = -diag(b e rho_k) dV', C3's
    }
    wg::fence_async_smem();
    __syncthreads();

    // ---- phase 7: X = A^T dA (dA split) (group 1); K K^T, G8 dK^ += dV'' S0^T, C3 dS <- e_n dS + Q^T Ob + K^T dVg
    // (group 2)
    // K K^T of the raw keys (columns 32 wgi ..) for phase 8's E, issued with C3 so that phase 8 waits only for Y
    float ee[4][4];
    {
      float xx[4][4];
      // C3 runs in every chunk (no branch inside a wgmma group); where the walk does not continue in the same
      // sequence its result is not used (the next chunk takes pass 3's record)
      const float en = expf(gam[nv - 1]);
#pragma unroll
      for (int vh = 0; vh < 2; ++vh)
#pragma unroll
        for (int jn = 0; jn < 8; ++jn)
#pragma unroll
          for (int e = 0; e < 4; ++e) ds[vh][jn][e] *= en;
      wg::fence();
      fz::mma<32, 1, 1, 4>(
          xx, sl, [](int j) { return o_a + uint32_t(2048 * j); }, sl,
          [&](int j) { return o_x5 + uint32_t(64 * wgi + 2048 * j); }, true);
      fz::mma<32, 1, 1, 4>(
          xx, sl, [](int j) { return o_a + uint32_t(2048 * j); }, sl,
          [&](int j) { return o_x6 + uint32_t(64 * wgi + 2048 * j); }, false);
      wg::commit();
      gwg::mma_ss_k128<32>(reinterpret_cast<float(&)[16]>(ee), slk, 0, slk, 4096 * wgi, true);
      gwg::mma_ss_k128<64>(reinterpret_cast<float(&)[32]>(dk), sl, o_x3, sl, o_s0 + 16384 * wgi, false);
#pragma unroll
      for (int vh = 0; vh < 2; ++vh) {
        fz::mma<64, 1, 1, 4>(
            ds[vh], sl, [&](int j) { return o_q + uint32_t(8192 * wgi + 2048 * j); }, sl,
            [&](int j) { return o_do + uint32_t(8192 * vh + 2048 * j); }, false);
        fz::mma<64, 1, 1, 4>(
            ds[vh], slk, [&](int j) { return uint32_t(8192 * wgi + 2048 * j); }, sl,
            [&](int j) { return o_v + uint32_t(8192 * vh + 2048 * j); }, false);
      }
      wg::commit();
      wg::wait1();
      named_barrier<128>(1 + wgi);  // every warp of this warpgroup done reading its dA columns: X lo takes them
      fz::put_rows<4>((sa + o_x7), (sa + o_x6), xx, 4 * wgi, wi, lane);
      wg::wait0();
    }
    wg::fence_async_smem();
    __syncthreads();
    // q, v, dO (Ob, dVg), S0 read for the last time; k and the rows into the other buffer
    if (i2 >= 0) load(i2, kLdQVO | kLdS0 | kLdKR, buf ^ 1);

    // ---- phase 8: dL = -StrictLower(X A^T), E; dbeta, Z, M1
    {
      float y[4][4];
      wg::fence();
      fz::mma<32, 0, 0, 4>(
          y, sl, [](int j) { return o_x7 + uint32_t(32 * j); }, sl,
          [&](int j) { return o_a + uint32_t(4096 * wgi + 32 * j); }, true);
      fz::mma<32, 0, 0, 4>(
          y, sl, [](int j) { return o_x6 + uint32_t(32 * j); }, sl,
          [&](int j) { return o_a + uint32_t(4096 * wgi + 32 * j); }, false);
      wg::commit();
      wg::wait0();
      uint32_t xm[4][2], xr[4][2];
      float pl[2] = {0.f, 0.f}, zr[2] = {0.f, 0.f}, zc[4][2] = {};
      const fz::Tok32 tk = fz::tok32(rk, wi, wgi, g, t4), tg = fz::tok32(gl, wi, wgi, g, t4);
      const float bt2[2] = {bt[16 * wi + g], bt[16 * wi + g + 8]};
#pragma unroll
      for (int jn = 0; jn < 4; ++jn)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const auto [r, c] = gwg::n32_at(wi, wgi, g, t4, jn, e);
          float m = 0.f;
          if (c < r) {
            const float d = exp2f(tg.row(e) - tg.col(jn, e)), dl = -y[jn][e];
            const float ev = tk.row(e) * tk.col(jn, e) * ee[jn][e] * d;
            const float dlb = bt2[e >> 1] * dl;
            pl[e >> 1] = fmaf(dl, ev, pl[e >> 1]);
            const float z = dlb * ev;
            zr[e >> 1] += z, zc[jn][e & 1] += z;
            m = dlb * d;
          }
          y[jn][e] = m;  // M1 in place
        }
#pragma unroll
      for (int jn = 0; jn < 4; ++jn)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          xm[jn][hr] = chunk_detail::Elem<true>::pack(y[jn][2 * hr] * tk.c[jn].x, y[jn][2 * hr + 1] * tk.c[jn].y);
          xr[jn][hr] = chunk_detail::Elem<true>::pack(tk.r[hr] * y[jn][2 * hr], tk.r[hr] * y[jn][2 * hr + 1]);
        }
      gwg::store_rows_at<4>((sa + o_x2), xm, 4 * wgi, wi, lane);
      gwg::store_rows_at<4>((sa + o_x2) + 8192, xr, 4 * wgi, wi, lane);
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int r = 16 * wi + g + 8 * hr;
        fz::put_row_sum(s.dbl[wgi], r, pl[hr], t4);
        const float x = lane_sum<1, 4>(zr[hr]);
        if (t4 == 0) s.zrow[wgi][r] += x;
      }
      gwg::put_col_sums<4, true>(&s.zcol[wi][32 * wgi], zc, g, t4);
    }
    wg::fence_async_smem();
    __syncthreads();
    if (i2 >= 0) load(i2, kLdA, buf ^ 1);  // A read for the last time

    // ---- phase 9: G10 dK^ += M1 diag(rho_k) K + (diag(rho_k) M1)^T K; dk; dg, dbeta
    {
      wg::fence();
      fz::mma<64, 0, 1, 4>(
          dk, sl, [](int j) { return o_x2 + uint32_t(32 * j); }, slk,
          [&](int j) { return uint32_t(8192 * wgi + 2048 * j); }, false);
      fz::mma<64, 1, 1, 4>(
          dk, sl, [](int j) { return o_x2 + uint32_t(8192 + 2048 * j); }, slk,
          [&](int j) { return uint32_t(8192 * wgi + 2048 * j); }, false);
      wg::commit();
      wg::wait0();
      if (a.group == 1 || hand_over(dk, a.dkh)) finish_rows(dk, s.k[buf], rk, a.dk, a.dk_sb, a.dk_st, a.dk_sh);
    }
    // no barrier here: the partial sums are complete at phase 8's barrier (the next chunk's phase 1 forms dg and
    // dbeta from them), and the partial sums, f and M1 (x2) are written again only after the next chunk's first one
    carry = cont;
    kbuf ^= 1;
    pend = i;
    i = i2;
  }
  if (pend >= 0 && threadIdx.x >= kTailWarp * 32)  // the walk's last chunk
    fz::store_dg_dbeta(a, fz::smem_at(smem_raw), pend, kbuf ^ 1, h, int(threadIdx.x) & 31);
  // Following the chains, one CTA waits for their grid, so that this grid's completion (what the launches after it
  // wait for) implies theirs (dh0; the records): the last item's, whose unit is the last queued (a short wait).
  if (a.follow && it.last) pdl_wait();
}

}  // namespace flashgdn::cuda::bwd_detail
