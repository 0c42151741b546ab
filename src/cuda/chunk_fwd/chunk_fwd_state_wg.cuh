// The state pass of the two-pass prefill on Hopper warpgroup MMA (wgmma), K = V = 128 (the default there):
// the same chain and the same rounding points as chunk_fwd_state.cuh (gdn-math §5.3-§5.5, records from
// chunk_fwd_intra.cuh), with every product on wgmma (m64n64k16) and the 16-bit operands
// in the 128-byte-swizzled K-major layout (cuda/common/wgmma.cuh).
//
// One CTA owns (work item, value head) and both 64-column value halves hf. Warpgroup hf owns its 64 value columns
// (one warpgroup per half, 256 threads) and runs the whole chain for them
// with no other warpgroup involved (only the double-buffered q, k, v and record tiles are shared, through mbarriers,
// not a CTA barrier); its state, 128 keys x 64 columns in fp32, is two m64 accumulators (key blocks) in registers for
// the whole walk. Per chunk:
//
//   phase 1  K S0 and Q S0 (8 wgmma each, two groups, A = k / q [token][key], B = S0^T [value][key] from shared
//            memory); R = V - diag(ek) K S0 -> R^T (stmatrix.trans; + its lo part over U^T_lo where the chunk's
//            beta exceeds 1) while Q S0 runs, O = diag(eq) Q S0 kept in registers
//   phase 2  U = (A diag(beta)) R, A diag(beta) hi + lo from the record's m16n8k16 fragments as register A operands
//            (8 wgmma: A_hi R_hi, A_lo R_hi; + 8 for A_hi R_lo, A_rest R_hi where the chunk's beta exceeds 1);
//            (diag(dk) U)^T as hi + lo over the dead S0^T
//   phase 3  S <- en S + K^T (diag(dk) U)_hi + K^T (diag(dk) U)_lo per key block (16 wgmma, K^T by ldmatrix.trans
//            of the swizzled k tile); U^T_hi, U^T_lo and O += P_hi U_hi + P_hi U_lo + P_lo U_hi (12 wgmma, P from
//            registers), O stored; S0^T for the next chunk
//
// Loads: the first thread of each warpgroup copies its share of a chunk's q, k, v tiles and record by TMA (every thread
// by cp.async where the chunk ends inside the tensor, whose rows past the end must land as zeros); o leaves by TMA
// stores where the chunk is full or ends the tensor. Synchronization per chunk: wait for the chunk's
// tiles (full), release them (empty, every thread after its own last read), named barriers per warpgroup (R^T, diag(dk)
// U^T, U^T complete; the update read; S0^T complete). The causal zero blocks of A diag(beta) and P are multiplied as
// zeros (a warpgroup instruction cannot skip one warp's block). Work per chunk and CTA: 104 m64n64k16 = 13.6 MFLOP,
// ~3.3k cycles at the SM's dense rate. The chain of one chunk step and its cost: docs/chunk_fwd.md "State pass".
// compute-sanitizer racecheck: clean (the 32-column form).
#pragma once

#include "cuda/chunk_fwd/chunk_fwd_common.cuh"
#include "cuda/common/mbarrier.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/common/wgmma.cuh"

namespace flashgdn::cuda::chunk_detail {

struct StateWgSmem {
  unsigned char q[2][2][8192];         // [buffer][key half][64 tokens x 64 keys], swizzled
  unsigned char k[2][2][8192];         // [buffer][key half][64 tokens x 64 keys], swizzled
  unsigned char v[2][2][8192];         // [buffer][value half][64 tokens x 64 values], swizzled
  unsigned char st[2][2][8192];        // [value half][key half][64 values x 64 keys]: S0^T (16-bit, gdn-math §10.2)
  unsigned char rt[2][8192];           // [value half][64 values x 64 tokens]: R^T
  unsigned char ut[2][2][8192];        // [value half][hi, lo][64 values x 64 tokens]: U^T
  uint32_t rec[2][kRecCopyBytes / 4];  // [buffer] the chunk's record (header | A diag(beta) | P; not A's rest)
  uint64_t full[2];                    // [buffer] its tiles landed: one arrival per thread (+ the TMA bytes)
  uint64_t empty[2];                   // [buffer] every thread is done reading it: one arrival per thread
};

// The tensor maps of the q, k and v tiles (ChunkStateMaps, chunk_fwd.hpp: boxes of 64 tokens x 64 elements of one
// head, 128-byte swizzle, the layout of the shared-memory tiles above), as the CUtensorMap values they hold.
static_assert(sizeof(CUtensorMap) == sizeof(ChunkStateMaps::q) && alignof(CUtensorMap) == 128);
__device__ __forceinline__ const CUtensorMap* tensor_map(const unsigned char (&m)[128]) {
  return reinterpret_cast<const CUtensorMap*>(m);
}

// Store a warp's 16-row block of an accumulator of NJ 8-column groups (the layout of store_transposed) as it is: row r
// of the block becomes row 16 wi + r of a swizzled [64 rows][NJ * 8 columns] region at `region`.
template <int NJ>
__device__ __forceinline__ void store_rows(uint32_t region, const uint32_t (&x)[NJ][2], int wi, int lane) {
  const int mi = lane >> 3, row = 16 * wi + (mi & 1) * 8 + (lane & 7);
#pragma unroll
  for (int np = 0; np < NJ / 2; ++np)
    wg::stsm_x4(region + wg::swz(row, 2 * np + (mi >> 1)), x[2 * np][0], x[2 * np][1], x[2 * np + 1][0],
                x[2 * np + 1][1]);
}

// Store a warp's 16-row block of an accumulator of NJ 8-column groups (rows 16 wi .., packed 16-bit pairs: x[jn][0]
// row lane / 4, x[jn][1] row lane / 4 + 8, columns 8 jn + 2 (lane % 4)) transposed: column c of the block becomes
// row c of a swizzled [columns][64 rows] region (`region`: the shared-memory address of the region's row of column
// 0; its row index is a multiple of 8, so the swizzle phase is that of c).
template <int NJ>
__device__ __forceinline__ void store_transposed(uint32_t region, const uint32_t (&x)[NJ][2], int wi, int lane) {
  const int mi = lane >> 3, rho = lane & 7;
#pragma unroll
  for (int np = 0; np < NJ / 2; ++np) {
    const int col = 16 * np + 8 * (mi >> 1) + rho;
    wg::stsm_x4_t(region + wg::swz(col, 2 * wi + (mi & 1)), x[2 * np][0], x[2 * np][1], x[2 * np + 1][0],
                  x[2 * np + 1][1]);
  }
}

// Store a warpgroup's fp32 state, key block mb of `s` (keys 64 mb + 16 wi + g8 (+ 8), columns 8 jn + 2 t4 (+ 1) of
// its 64 columns, which start at column j0 of dst), through the shared-memory tiles stage[mb] ([64 rows][64 floats]
// each, rows keys (K-major) or columns (V-major)), so that every global store is a 16-byte vector of one row: a warp
// writes two whole 256-byte row pieces per instruction. The API keeps the states dense (unit last stride, 16-byte
// aligned pointer and strides), so the vectors are aligned. Stored from the fragments directly, each warp
// instruction would write 4 bytes in each of 8 rows (64 stores per thread), and those hold the LSU queue at the end
// of every CTA (ncu, varlen 64 x 512, 8 chunks a CTA: 8.7% of the pass's stall samples). A row's 16-byte chunk c
// sits at c ^ (row & 7): the staging writes (8-byte pairs K-major, 4-byte V-major) and the vector reads are free of
// bank conflicts. The caller orders every earlier use of the tiles before the call; between the staging writes and
// the reads the warpgroup meets at its named barrier `bar`.
template <int NJ>
__device__ __forceinline__ void store_state_vec(const StateRef& dst, const float (&s)[2][NJ][4],
                                                float* const (&stage)[2], int j0, int wi, int g8, int t4, int t128,
                                                int bar) {
  auto at = [](float* t, int row, int col) { return t + row * 64 + ((((col >> 2) ^ (row & 7)) << 2) | (col & 3)); };
#pragma unroll
  for (int mb = 0; mb < 2; ++mb)
#pragma unroll
    for (int jn = 0; jn < NJ; ++jn)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {  // rows g8, g8 + 8 of the warp's 16 keys
        const int key = 16 * wi + g8 + 8 * hr, col = 8 * jn + 2 * t4;
        const float x0 = s[mb][jn][2 * hr], x1 = s[mb][jn][2 * hr + 1];
        if (dst.vmajor) {
          *at(stage[mb], col, key) = x0;
          *at(stage[mb], col + 1, key) = x1;
        } else {
          *reinterpret_cast<float2*>(at(stage[mb], key, col)) = make_float2(x0, x1);
        }
      }
  named_barrier<128>(bar);
#pragma unroll
  for (int mb = 0; mb < 2; ++mb)
#pragma unroll
    for (int u = 0; u < 8; ++u) {  // 64 rows x 16 vectors a tile, 128 threads
      const int idx = t128 + 128 * u, row = idx >> 4, c4 = 4 * (idx & 15);
      const float4 x = *reinterpret_cast<const float4*>(at(stage[mb], row, c4));
      const int64_t off = dst.vmajor ? dst.off(64 * mb + c4, j0 + row) : dst.off(64 * mb + row, j0 + c4);
      *reinterpret_cast<float4*>(dst.p + off) = x;
    }
}

// The two 16-bit values of a packed pair (low half first) as fp32, exactly. bf16 is the top half of an fp32, so
// one shift and one mask (the library conversion compiles to a PRMT and a shift per value here, ~50 extra
// instructions per chunk step); fp16 by the conversion.
template <bool BF16>
__device__ __forceinline__ float2 widen_pair(uint32_t u) {
  if constexpr (BF16)
    return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
  else
    return Elem<false>::unpack(u);
}

// x = d rounded to 16 bits (hi), y = the rounding error rounded (lo): hi + lo is d to ~2^-16 relative.
template <bool BF16, int NJ>
__device__ __forceinline__ void split_acc(const float (&d)[NJ][4], uint32_t (&x)[NJ][2], uint32_t (&y)[NJ][2]) {
#pragma unroll
  for (int jn = 0; jn < NJ; ++jn)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      x[jn][hr] = Elem<BF16>::pack(d[jn][2 * hr], d[jn][2 * hr + 1]);
      const float2 f = widen_pair<BF16>(x[jn][hr]);
      y[jn][hr] = Elem<BF16>::pack(d[jn][2 * hr] - f.x, d[jn][2 * hr + 1] - f.y);
    }
}

template <bool BF16, int NJ>
__device__ __forceinline__ void pack_acc(const float (&d)[NJ][4], uint32_t (&x)[NJ][2]) {
#pragma unroll
  for (int jn = 0; jn < NJ; ++jn) {
    x[jn][0] = Elem<BF16>::pack(d[jn][0], d[jn][1]);
    x[jn][1] = Elem<BF16>::pack(d[jn][2], d[jn][3]);
  }
}

// S <- en S on this thread's state fragments (both key blocks).
template <int NJ>
__device__ __forceinline__ void scale_state(float (&sacc)[2][NJ][4], float en) {
#pragma unroll
  for (int mb = 0; mb < 2; ++mb)
#pragma unroll
    for (int jn = 0; jn < NJ; ++jn)
#pragma unroll
      for (int e = 0; e < 4; ++e) sacc[mb][jn][e] *= en;
}

// The m16n8k16 A fragments of this warp's row block wi of a causal 64 x 64 record matrix (fr: the hi part, fr + 32:
// the lo part; BS = 64 uint4 a block; the rest, one part: BS = 32), k-steps kc > wi zero.
template <int BS = 64>
__device__ __forceinline__ void load_causal_frags(const uint4* fr, int wi, int lane, uint32_t (&f)[4][4]) {
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) {
    uint4 x = make_uint4(0, 0, 0, 0);
    if (kc <= wi) x = fr[(wi * (wi + 1) / 2 + kc) * BS + lane];
    f[kc][0] = x.x, f[kc][1] = x.y, f[kc][2] = x.z, f[kc][3] = x.w;
  }
}

// The A fragments of K^T for keys rw .. rw + 15: ldmatrix.trans of the swizzled k tile [token][key].
__device__ __forceinline__ void load_kt_frags(const unsigned char (&kt)[2][8192], int rw, int lane,
                                              uint32_t (&f)[4][4]) {
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) {
    const int tr = 16 * kc + (lane & 7) + ((lane >> 4) & 1) * 8;  // token row of this lane's address
    const int key = rw + ((lane >> 3) & 1) * 8;                   // first key of its 16-byte chunk
    ldsm_x4_t(f[kc], &kt[key >> 6][wg::swz(tr, (key & 63) >> 3)]);
  }
}

// Two warpgroups, one per 64-column value half, 256 threads, up to 255 registers: every operand shared by the
// columns (the k and q tiles of phase 1, the record's fragments, K^T) is read by two warpgroups, the registers hold
// both parts of A diag(beta) and both key blocks' K^T at once (phase 2 and the update each one wgmma group), and
// P U runs as a group of its own behind the update, its wait after the next chunk's S0^T is stored. ptxas: 254
// registers in forward mode, 242 (bf16) / 250 (f16) in summary mode, 252 in the STATES form (bf16), no spills.
constexpr int kStateWgThreads = 256;

// SUMMARY: the summary mode of the split (no q, no output, no P U); STATES: the forward modes with every chunk's
// start state stored in bf16 (a.s0, chunk_bwd's S0 record) instead of o (no q, no P U either: the backward's state
// recompute). Template parameters so that no wgmma group has a data-dependent branch (ptxas serializes wgmma around
// accumulator moves at branch joins).
template <bool BF16, bool SUMMARY, bool STATES>
__global__ void __launch_bounds__(kStateWgThreads, 1)
    chunk_fwd_state_wg_kernel(const ChunkKernelArgs a, const __grid_constant__ ChunkStateMaps maps) {
  static_assert(!(SUMMARY && STATES) && (BF16 || !STATES), "state pass: STATES is a bf16 forward mode");
  using E = typename Elem<BF16>::T;
  using P = Elem<BF16>;
  constexpr int K = 128;
  constexpr int NJ = kBV / 8, NTH = kStateWgThreads, HTH = NTH / 2;
  extern __shared__ unsigned char smem_raw[];
  // Aligned to 1024 bytes (the swizzle) by an offset from smem_raw, not by integer pointer arithmetic: the compiler
  // then still knows every access through `sm` is shared memory (LDS / STS, 32-bit addresses) instead of generic.
  StateWgSmem& sm = *reinterpret_cast<StateWgSmem*>(smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023));

  const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g8 = lane >> 2, t4 = lane & 3;
  // warpgroup wgi = value half hf, warp wi of it. wgi is broadcast from lane 0 so that the compiler sees a
  // warp-uniform value: the wgmma descriptors built from it then stay in uniform registers (no per-instruction R2UR)
  const int wgi = __shfl_sync(0xffffffffu, tid >> 7, 0), hf = wgi, wi = w & 3;
  const int cb = 0;  // first column of this warpgroup's columns in its half
  const int h = blockIdx.y, tile = blockIdx.z * 2 + hf;
  const int64_t item = blockIdx.x;
  const int hk = h / a.group;

  ChunkWork wk;
  if (!resolve_work(a, item, h, &wk)) return;
  if (!summary_walks(wk, blockIdx.z * 2, 2, K)) wk.c_end = wk.c_begin;
  const int64_t n = wk.n, bidx = wk.bidx, t0 = wk.t0, len = wk.len, c_begin = wk.c_begin, c_end = wk.c_end;
  constexpr bool summary = SUMMARY, has_output = !SUMMARY && !STATES;
  const int ntiles = summary ? (K + static_cast<int>(a.V)) / 64 : static_cast<int>(a.V) / 64;
  // the last half may have no tile (summary, odd count); forward mode has V / 64 = 2 tiles in one CTA (grid z = 1),
  // so both halves are active there, known at compile time
  const bool active = !summary || tile < ntiles;
  const bool m_tile = summary && tile < K / 64;  // augmented columns of M: identity start, zero values
  const bool has_values = active && !m_tile;
  // the half runs the chain; an M tile of a decay window does not (M = 0: its zero start state is its result)
  const bool computes = active && !(m_tile && wk.drop_m);
  const int vcol0 = summary ? (tile - K / 64) * kBV : tile * kBV;
  const int r0 = 16 * wi + g8, r1 = r0 + 8;  // chunk rows (phases 1-3a) and key offsets (state) of this thread

  // Shared-memory rows of this warpgroup's column slice in the transposed regions (a row is 128 bytes).
  // (32-bit shared-memory addresses: the stmatrix stores and the wgmma descriptors take them as they are)
  const uint32_t st_slice = smem_addr(sm.st[hf][0] + cb * 128);  // key block 1 at + 8192
  const uint32_t rt_slice = smem_addr(sm.rt[hf] + cb * 128);
  const uint32_t uh_slice = smem_addr(sm.ut[hf][0] + cb * 128);
  const uint32_t ul_slice = uh_slice + 8192;  // sm.ut[hf][1]
  // Low descriptor words (wg::desc_at adds each instruction's byte offset): this slice's S0^T (key block 1 at + 8192;
  // later diag(dk) U^T, lo in key block 0, hi in key block 1), R^T, U^T (hi; lo at + 8192), and buffer 0 of the k and q
  // tiles (key half 1 at + 8192).
  const uint32_t st_lo = wg::desc_lo(st_slice), rt_lo = wg::desc_lo(rt_slice), ut_lo = wg::desc_lo(uh_slice);
  const uint32_t k_lo0 = wg::desc_lo(smem_addr(&sm.k[0][0][0])), q_lo0 = wg::desc_lo(smem_addr(&sm.q[0][0][0]));

  float sacc[2][NJ][4];  // the state: key block mb, keys 64 mb + r0 (+ 8), columns cb + 8 jn + 2 t4 (+ 1)

  const E* qbase = static_cast<const E*>(a.q) + bidx * a.q_sb + hk * a.q_sh;
  const E* kbase = static_cast<const E*>(a.k) + bidx * a.k_sb + hk * a.k_sh;
  const E* vbase = static_cast<const E*>(a.v) + bidx * a.v_sb + h * a.v_sh + vcol0;
  // (no o in the summary and STATES forms: a.o may be null there)
  E* obase = has_output ? static_cast<E*>(a.o) + bidx * a.o_sb + h * a.o_sh + vcol0 + cb : nullptr;
  // STATES: chunk c's start state, key block mb (the packed pairs of its 16-bit copy: rows r0, r1 of the warp's keys),
  // into its S0 record [K][V] (bf16, the rounding of the operand tile S0^T, gdn-math §10.2)
  const auto store_s0 = [&](int64_t c, int mb, const uint32_t(&x)[NJ][2]) {
    if constexpr (STATES) {
      uint16_t* row =
          a.s0 + (chunk_slot(a, n, t0, c) * a.Hv + h) * (K * a.V) + (64 * mb + r0) * a.V + vcol0 + cb + 2 * t4;
#pragma unroll
      for (int jn = 0; jn < NJ; ++jn) {
        *reinterpret_cast<uint32_t*>(row + 8 * jn) = x[jn][0];
        *reinterpret_cast<uint32_t*>(row + 8 * a.V + 8 * jn) = x[jn][1];
      }
    }
  };

  // Every load of chunk ck into buffer bf, by one of two paths; both land the same tiles and complete full[bf] with
  // one arrival per thread. TMA (a chunk of 64 valid rows, or one that ends at the tensor's end, past which the
  // copies read zeros): thread 0 issues the record as one bulk copy and the q, k, v tiles as boxes of the tensor maps,
  // the other threads only arrive. cp.async (a chunk that ends inside the tensor: the next sequence's or slack rows
  // follow, which must land as zeros): every thread copies its share and arrives when its copies have landed. The k
  // and q vector kv of rows kr0 + (NTH / 16) p and the value vector vv of rows vr0 + (HTH / 8) p are this thread's
  // for the whole walk, so a chunk's source addresses are its first row plus fixed steps (a 64-bit add per copy, no
  // multiply); rows at or past nv read the chunk's first row (always valid) and land as zeros.
  const int kr0 = tid >> 4, kv = tid & 15, vr0 = (tid & (HTH - 1)) >> 3, vv = tid & 7;
  constexpr int kRecVec = static_cast<int>((has_output ? kRecCopyBytes : kRecHdrBytes + kRecABytes) / 16);
  const int64_t kstep = (NTH / 16) * a.k_st, qstep = (NTH / 16) * a.q_st, vstep = (HTH / 8) * a.v_st;
  // chunks [c_begin, tma_end) go by TMA: the full ones, and a partial last one where the sequence ends the tensor
  const int64_t tma_end = !maps.on ? 0 : t0 + len == a.T ? c_end : len / kC;
  // chunks [c_begin, tma_o_end) store o by TMA (the same ones: a box past the tensor's end is not written, but one
  // that ends inside it would write the next sequence's rows or the slack rows)
  const int64_t tma_o_end = !has_output || !maps.o_on ? 0 : t0 + len == a.T ? c_end : len / kC;
  const bool o_leader = (tid & (HTH - 1)) == 0;  // the thread of this warpgroup that issues its o stores
  // By TMA, the copies are split over the two warpgroups' first threads (the issue is on their warps' chains): thread
  // 0 the record and the k tiles, thread HTH the q tiles and both halves' value tiles; each expects its own bytes on
  // full[bf] before its copies, and every other thread only arrives.
  auto issue_tma = [&](int64_t ck, int bf) {
    const int r = static_cast<int>(t0 + ck * kC), b = static_cast<int>(bidx);
    if (tid == 0) {
      const unsigned char* rsrc = a.rec + (chunk_slot(a, n, t0, ck) * a.Hv + h) * kRecBytes;
      tma::arrive_expect_tx(&sm.full[bf], 16 * kRecVec + 8192 * 2);
      tma::load_bulk(sm.rec[bf], rsrc, 16 * kRecVec, &sm.full[bf]);
#pragma unroll
      for (int kh = 0; kh < 2; ++kh) tma::load_4d(sm.k[bf][kh], tensor_map(maps.k), 64 * kh, r, hk, b, &sm.full[bf]);
    } else if (tid == HTH) {
      bool half_values[2];  // has_values of each half
      int half_vcol[2];
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        const int t = blockIdx.z * 2 + x;
        half_values[x] = t < ntiles && !(summary && t < K / 64);
        half_vcol[x] = summary ? (t - K / 64) * kBV : t * kBV;
      }
      const uint32_t bytes = 8192 * ((has_output ? 2 : 0) + half_values[0] + half_values[1]);
      if (bytes == 0) {
        mbar::arrive(&sm.full[bf]);
      } else {
        tma::arrive_expect_tx(&sm.full[bf], bytes);
        if (has_output) {
#pragma unroll
          for (int kh = 0; kh < 2; ++kh)
            tma::load_4d(sm.q[bf][kh], tensor_map(maps.q), 64 * kh, r, hk, b, &sm.full[bf]);
        }
#pragma unroll
        for (int x = 0; x < 2; ++x)
          if (half_values[x]) tma::load_4d(sm.v[bf][x], tensor_map(maps.v), half_vcol[x], r, h, b, &sm.full[bf]);
      }
    } else {
      mbar::arrive(&sm.full[bf]);
    }
  };
  auto issue_copy = [&](int64_t ck, int bf) {
    const int64_t tok = t0 + ck * kC;
    const int nv = len - ck * kC < kC ? static_cast<int>(len - ck * kC) : kC;  // the chunk's valid rows
    const unsigned char* rsrc = a.rec + (chunk_slot(a, n, t0, ck) * a.Hv + h) * kRecBytes;
    {  // the record's first kRecVec vectors (copy_record's copies with a trip count independent of tid: unrolled)
      const uint4* src = reinterpret_cast<const uint4*>(rsrc);
      uint4* dst = reinterpret_cast<uint4*>(sm.rec[bf]);
#pragma unroll
      for (int p = 0; p < (kRecVec + NTH - 1) / NTH; ++p) {
        const int i = tid + NTH * p;
        if (kRecVec % NTH == 0 || i < kRecVec) cp_async<16>(dst + i, src + i);
      }
    }
    const E* k0 = kbase + tok * a.k_st + kv * 8;  // row 0 of the chunk
    const E* q0 = qbase + tok * a.q_st + kv * 8;
    const E* kp = k0 + kr0 * a.k_st;
    const E* qp = q0 + kr0 * a.q_st;
#pragma unroll
    for (int p = 0; p < 1024 / NTH; ++p) {  // 64 rows x 16 vectors of 16 bytes per tile
      const int r = kr0 + (NTH / 16) * p;
      const bool valid = r < nv;
      cp_async16_zfill(&sm.k[bf][kv >> 3][wg::swz(r, kv & 7)], valid ? kp : k0, valid);
      if (has_output) cp_async16_zfill(&sm.q[bf][kv >> 3][wg::swz(r, kv & 7)], valid ? qp : q0, valid);
      kp += kstep, qp += qstep;
    }
    if (has_values) {  // this half's value tile (64 rows x 8 vectors) over its HTH threads
      const E* v0 = vbase + tok * a.v_st + vv * 8;
      const E* vp = v0 + vr0 * a.v_st;
#pragma unroll
      for (int p = 0; p < 512 / HTH; ++p) {
        const int r = vr0 + (HTH / 8) * p;
        const bool valid = r < nv;
        cp_async16_zfill(&sm.v[bf][hf][wg::swz(r, vv)], valid ? vp : v0, valid);
        vp += vstep;
      }
    }
    mbar::arrive_cp_async(&sm.full[bf]);
  };

  auto issue = [&](int64_t ck, int bf) { ck < tma_end ? issue_tma(ck, bf) : issue_copy(ck, bf); };

  // ---- the pipeline. Buffer bf = i & 1 holds the q, k, v and record tiles of chunk i = c - c_begin: every thread
  // copies its share (cp.async) and arrives on full[bf] when its copies have landed; every thread arrives on
  // empty[bf] after its last read of the chunk. A warpgroup waits for its chunk's data, and before refilling the other
  // buffer for chunk i + 1 (in chunk i), for the release of chunk i - 1 (its last user). No CTA-wide barrier: the
  // warpgroups drift apart by up to a chunk, so one's tensor-core phases overlap another's epilogues instead of all
  // alternating in lockstep. Phase u of a barrier is awaited with parity u & 1 (buffer bf's u-th chunk).
  if (tid == 0) {
    mbar::init(&sm.full[0], NTH), mbar::init(&sm.full[1], NTH);
    mbar::init(&sm.empty[0], NTH), mbar::init(&sm.empty[1], NTH);
  }
  wg::fence_async_smem();  // the barriers' initialization before the copies complete on them
  __syncthreads();         // the barriers are initialized
  // the first chunk's copies go out before the start state's loads, so that the two latencies overlap
  if (c_begin < c_end) issue(c_begin, 0);

  // ---- start state: fp32 accumulators (key block mb: keys 64 mb + r0 (+ 8), columns cb + 8 jn + 2 t4 (+ 1)) and
  // the transposed 16-bit copy
  {
    const StateRef src = start_state(a, wk, item, h, K);
    const bool ident = m_tile && !wk.drop_m;  // a summary's M tile starts at [I | 0]
#pragma unroll
    for (int mb = 0; mb < 2; ++mb)
#pragma unroll
      for (int jn = 0; jn < NJ; ++jn)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = 64 * mb + r0 + (e >> 1) * 8, j = cb + jn * 8 + 2 * t4 + (e & 1);
          sacc[mb][jn][e] = ident && i == tile * kBV + j ? 1.f : 0.f;
        }
    // A start state in memory (h0, or a segment's start from the scan): the loads from one base per thread, K-major
    // as 8-byte pairs of adjacent columns. Without one (no h0: the common prefill) nothing is loaded, and the
    // per-element address arithmetic (~1000 instructions per warp, as long as the first chunk's copies) is skipped.
    if (src.p && active && !ident) {
      if (!src.vmajor) {
        const float* base = src.p + int64_t(r0) * src.rs + vcol0 + cb + 2 * t4;
#pragma unroll
        for (int mb = 0; mb < 2; ++mb)
#pragma unroll
          for (int jn = 0; jn < NJ; ++jn)
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
              const float2 x = *reinterpret_cast<const float2*>(base + (64 * mb + 8 * hr) * src.rs + 8 * jn);
              sacc[mb][jn][2 * hr] = x.x, sacc[mb][jn][2 * hr + 1] = x.y;
            }
      } else {
        const float* base = src.p + int64_t(vcol0 + cb + 2 * t4) * src.rs + r0;
#pragma unroll
        for (int mb = 0; mb < 2; ++mb)
#pragma unroll
          for (int jn = 0; jn < NJ; ++jn)
#pragma unroll
            for (int e = 0; e < 4; ++e) sacc[mb][jn][e] = base[(8 * jn + (e & 1)) * src.rs + 64 * mb + 8 * (e >> 1)];
      }
    }
#pragma unroll
    for (int mb = 0; mb < 2; ++mb) {
      uint32_t x[NJ][2];
      pack_acc<BF16>(sacc[mb], x);
      store_transposed(st_slice + 8192 * mb, x, wi, lane);
      if (STATES && c_begin < c_end) store_s0(c_begin, mb, x);
    }
  }

  wg::fence_async_smem();  // the start state's S0^T (stmatrix) before the first wgmma read
  __syncthreads();         // S0^T is complete

  // Chunk c of the walk is its i = c - c_begin-th, in buffer bf = i & 1.
  // Fill buffer bf ^ 1 with chunk c + 1 once every warp has released chunk c - 1 (its last user). By TMA: thread 0
  // and thread HTH wait for the release and copy, under phase 1's products; by cp.async (rare: a chunk that ends inside
  // the tensor) every thread, under K S0 alone (fewer registers are live than under both products).
  auto refill_tma = [&](int64_t c) {
    const int i = static_cast<int>(c - c_begin), bf = i & 1;
    if (c + 1 < c_end && c + 1 < tma_end) {
      if (i > 0 && (tid == 0 || tid == HTH)) mbar::wait(&sm.empty[bf ^ 1], ((i - 1) >> 1) & 1);
      issue_tma(c + 1, bf ^ 1);
    }
  };
  auto refill_copy = [&](int64_t c) {
    const int i = static_cast<int>(c - c_begin), bf = i & 1;
    if (c + 1 < c_end && c + 1 >= tma_end) {
      if (i > 0) mbar::wait(&sm.empty[bf ^ 1], ((i - 1) >> 1) & 1);
      issue_copy(c + 1, bf ^ 1);
    }
  };
  // Chunk c's tiles have landed. Tiles landed by cp.async (generic proxy) need the proxy fence before this thread's
  // wgmma reads them (async proxy); TMA tiles need none (both proxies async, the barrier's completion makes them
  // visible), and the fence would wait for this thread's o stores still in flight (its MEMBAR).
  auto wait_full = [&](int64_t c) {
    const int i = static_cast<int>(c - c_begin);
    mbar::wait(&sm.full[i & 1], (i >> 1) & 1);
    if (c >= tma_end) wg::fence_async_smem();
  };
  // This thread is done reading chunk c's buffer (its wgmma reads included: waited). Every thread releases its own
  // reads: one release-arrive per warpgroup behind a named barrier orders the same reads (bar.sync, then a cumulative
  // release), but compute-sanitizer's racecheck does not follow that chain and reported each refill as a WAR hazard
  // (46 per run); the per-thread arrivals cost nothing measurable (4.79 vs 4.78 us per chunk, H200).
  auto release = [&](int64_t c) { mbar::arrive(&sm.empty[(c - c_begin) & 1]); };

  if (!computes) {  // (the last half of an odd summary, M of a decay window: loads and releases, no reads)
    for (int64_t c = c_begin; c < c_end; ++c) wait_full(c), refill_copy(c), refill_tma(c), release(c);
  } else {
    float o[NJ][4];  // O of a chunk: diag(eq) Q S0 (phase 1), then + P U (phase 3); written by Q S0's first wgmma
    float(&ov)[4 * NJ] = reinterpret_cast<float(&)[4 * NJ]>(o);

    // ---- phase 1 of chunk c: K S0 and Q S0 for this half (64 x 64 each, over the 128 keys), one wgmma group each;
    // R = V - diag(ek) K S0 -> R^T, O = diag(eq) Q S0. `under_ks0` runs while K S0 is in flight and before Q S0 is
    // issued: the previous chunk's wait for P U, its o store and checkpoint, which are then off the state's chain
    // (the walk below runs phase 1 of chunk c + 1 at the end of chunk c's step, so that no wgmma group is in flight
    // across the loop's back edge: ptxas would serialize every wgmma of the loop, C7514).
    auto phase1 = [&](int64_t c, auto&& under_ks0) {
      const int i = static_cast<int>(c - c_begin), bf = i & 1;
      const float* hdr = reinterpret_cast<const float*>(sm.rec[bf]);
      wait_full(c);
      float d[NJ][4];  // written by the first wgmma (accumulate = 0)
      float(&dv)[4 * NJ] = reinterpret_cast<float(&)[4 * NJ]>(d);
      // this thread's values of the chunk (rows r0, r1; packed pairs, zero for the summary's M tiles)
      uint32_t vr[NJ][2];
      auto load_v = [&]() {  // ldmatrix of the swizzled tile: matrices (rows 16 wi (+ 8), columns 8 jn (+ 8))
        const unsigned char* vt = sm.v[bf][hf];
        const int row = 16 * wi + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
        for (int jp = 0; jp < NJ / 2; ++jp) {
          uint32_t f[4] = {0u, 0u, 0u, 0u};
          if (has_values) ldsm_x4(f, vt + wg::swz(row, 2 * jp + (lane >> 4)));
          vr[2 * jp][0] = f[0], vr[2 * jp][1] = f[1], vr[2 * jp + 1][0] = f[2], vr[2 * jp + 1][1] = f[3];
        }
      };
      {
        const uint32_t k_lo = k_lo0 + bf * (sizeof(sm.k[0]) >> 4);
        wg::fence();
#pragma unroll
        for (int ks = 0; ks < K / 16; ++ks) {
          const uint32_t off = (ks >> 2) * 8192 + (ks & 3) * 32;  // key half, 16-key step inside the 128-byte row
          wg::mma_ss_n64<BF16>(dv, wg::desc_at(k_lo, off), wg::desc_at(st_lo, off), ks > 0);
        }
        wg::commit();  // K S0 in its own group: R's epilogue runs while Q S0 is in flight
        under_ks0();
        refill_copy(c);
        if constexpr (has_output) {
          const uint32_t q_lo = q_lo0 + bf * (sizeof(sm.q[0]) >> 4);
          wg::fence();
#pragma unroll
          for (int ks = 0; ks < K / 16; ++ks) {
            const uint32_t off = (ks >> 2) * 8192 + (ks & 3) * 32;
            wg::mma_ss_n64<BF16>(ov, wg::desc_at(q_lo, off), wg::desc_at(st_lo, off), ks > 0);
          }
          wg::commit();
        }
        // the loads of chunk c + 1 are issued while the tensor cores run phase 1 (the issue slots are idle here),
        // and the values are read before the wait
        refill_tma(c), load_v();
        if constexpr (has_output)
          wg::wait1();  // K S0 done, Q S0 may still run
        else
          wg::wait0();
      }
      // R = V - diag(ek) K S0 -> R^T as hi (at R^T) + lo (at U^T_lo, dead until this chunk's U^T: every warp's
      // wait for the previous P U is behind store_o's barrier);  O = diag(eq) Q S0. R needs its lo part: where the
      // keys of a chunk are (nearly) parallel and beta is near 2, A diag(beta) alternates in sign and U = A diag(beta)
      // R sums R's rows against it, while R carries the state's large component along the keys; one 16-bit rounding
      // of R then grows the state's error by ~1% a chunk (host emulation, cases w12 and w13)
      const float ek0 = hdr[r0], ek1 = hdr[r1];
#pragma unroll
      for (int jn = 0; jn < NJ; ++jn) {
        const float2 v0 = widen_pair<BF16>(vr[jn][0]), v1 = widen_pair<BF16>(vr[jn][1]);
        d[jn][0] = v0.x - ek0 * d[jn][0], d[jn][1] = v0.y - ek0 * d[jn][1];
        d[jn][2] = v1.x - ek1 * d[jn][2], d[jn][3] = v1.y - ek1 * d[jn][3];
      }
      const auto finish_o = [&] {
        if constexpr (has_output) {
          const float eq0 = hdr[64 + r0], eq1 = hdr[64 + r1];
          wg::wait0();  // Q S0
#pragma unroll
          for (int jn = 0; jn < NJ; ++jn) o[jn][0] *= eq0, o[jn][1] *= eq0, o[jn][2] *= eq1, o[jn][3] *= eq1;
        }
      };
      // R_lo only where phase 2 reads it (beta_above_one), as two whole paths, each with its own wait for Q S0: with
      // only the lo stores under the branch ptxas formed the lo part (~200 instructions a thread) in every chunk to
      // fill that wait, 9.7% more instructions executed by this pass (ncu) and 4-5% on the GQA prefill shapes
      uint32_t xh[NJ][2];
      if (beta_above_one(hdr)) {
        uint32_t xl[NJ][2];
        split_acc<BF16>(d, xh, xl);
        store_transposed(rt_slice, xh, wi, lane);
        finish_o();
        store_transposed(ul_slice, xl, wi, lane);
      } else {
        pack_acc<BF16>(d, xh);
        store_transposed(rt_slice, xh, wi, lane);
        finish_o();
      }
      wg::fence_async_smem();
    };
    // o of chunk c's valid rows. By TMA: staged at U^T_hi (free once every warp has waited for P U, the barrier), as
    // a 64 x 64 swizzled tile, then stored by o_leader (issue_o). Else every thread its own rows.
    // Its barrier also orders every warp's wait for chunk c's P U before the next chunk's R_lo store over U^T_lo.
    auto store_o = [&](int64_t c) {
      if constexpr (has_output) {
        named_barrier<128>(1 + wgi);
        if (c < tma_o_end) {
          uint32_t x[NJ][2];
          pack_acc<BF16>(o, x);
          store_rows(uh_slice, x, wi, lane);
          return;
        }
        const int64_t tok0 = c * kC;
        const int64_t nvalid = (len - tok0) < kC ? (len - tok0) : kC;
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int r = hr ? r1 : r0;
          if (r < nvalid) {
            E* orow = obase + (t0 + tok0 + r) * a.o_st;
#pragma unroll
            for (int jn = 0; jn < NJ; ++jn)
              *reinterpret_cast<uint32_t*>(orow + jn * 8 + 2 * t4) = P::pack(o[jn][2 * hr], o[jn][2 * hr + 1]);
          }
        }
      }
    };

    auto issue_o = [&](int64_t c) {  // o_leader: the staged o of chunk c
      tma::store_4d(tensor_map(maps.o), vcol0 + cb, static_cast<int>(t0 + c * kC), h, static_cast<int>(bidx),
                    sm.ut[hf][0]);
      tma::commit_stores();
    };

    if (c_begin < c_end) phase1(c_begin, [] {});
    for (int64_t c = c_begin; c < c_end; ++c) {
      const int i = static_cast<int>(c - c_begin), bf = i & 1;
      const float* hdr = reinterpret_cast<const float*>(sm.rec[bf]);
      const uint4* afr = reinterpret_cast<const uint4*>(sm.rec[bf] + kRecHdrBytes / 4);
      const uint4* pfr = reinterpret_cast<const uint4*>(sm.rec[bf] + (kRecHdrBytes + kRecABytes) / 4);
      // the operands of the next products that do not depend on the barriers (the record's fragments, K^T, from
      // the chunk's landed tiles) are loaded before them, so their latency is under the barrier's wait
      uint32_t af[2][4][4];  // A diag(beta): hi, lo
      load_causal_frags(afr, wi, lane, af[0]);
      load_causal_frags(afr + 32, wi, lane, af[1]);
      named_barrier<128>(1 + wgi);  // R^T of this slice complete (its only reader is this warpgroup's wgmma)
      // the previous chunk's staged o (fenced with R^T, before the barrier) to global memory; its source, U^T_hi,
      // is next written after the barrier before the update (o_leader waits for the store's read before it)
      const bool o_issued = has_output && c > c_begin && c - 1 < tma_o_end && o_leader;
      if (o_issued) issue_o(c - 1);

      // ---- phase 2: U = (A diag(beta)) R = A_hi R_hi + A_lo R_hi (+ A_hi R_lo + A_rest R_hi where the chunk's beta
      // exceeds 1: the record's header holds its largest beta; below 1 A diag(beta) does not alternate at full size,
      // |1 - lambda|^n contracts the chain, and one part of R and two of A are enough, "Numerics")
      float u[NJ][4];  // written by the first wgmma (accumulate = 0)
      {
        float(&uv)[4 * NJ] = reinterpret_cast<float(&)[4 * NJ]>(u);
        wg::fence();
#pragma unroll
        for (int part = 0; part < 2; ++part)
#pragma unroll
          for (int kc = 0; kc < 4; ++kc)
            wg::mma_rs_n64<BF16>(uv, af[part][kc], wg::desc_at(rt_lo, kc * 32), part + kc > 0);
        wg::commit();
        // S <- en S while U runs, off the chain (the state's registers are the update's accumulators, not U's:
        // under phase 1 instead ptxas injected a wait for every product in flight there, C7517)
        scale_state(sacc, hdr[192]);
        wg::wait0();
        if (beta_above_one(hdr)) {  // uniform; no group in flight across the branch
          // A' = A diag(beta)'s third part (record_rest says why), from global memory into lo's registers, dead
          // once the group above is waited
          load_causal_frags<32>(record_rest(a, n, t0, c, h), wi, lane, af[1]);
          wg::fence();
#pragma unroll
          for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n64<BF16>(uv, af[0][kc], wg::desc_at(ut_lo, 8192 + kc * 32), 1);
#pragma unroll
          for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n64<BF16>(uv, af[1][kc], wg::desc_at(rt_lo, kc * 32), 1);
          wg::commit();
          wg::wait0();
        }
      }
      // U_hi, U_lo (the B operand of P U) at U^T
      auto store_ut = [&]() {
        uint32_t xh[NJ][2], xl[NJ][2];
        split_acc<BF16>(u, xh, xl);
        store_transposed(uh_slice, xh, wi, lane);
        store_transposed(ul_slice, xl, wi, lane);
      };
      // diag(dk) U (fp32 product) as hi + lo for the state update, over the dead S0^T (hi in key block 1, lo in key
      // block 0; phase 1 was waited by every warp of this warpgroup before R^T's barrier). diag(dk) U needs its lo
      // part: with near-identical keys K^T diag(dk) U is a telescoping sum of U's rows, and 64 independent 16-bit
      // roundings of the rows add up to ~1e-2 in the final state (measured on the H200, tests/cuda
      // CudaChunkFwd.IdenticalKeysFullLastChunk; docs/chunk_fwd.md "Numerics").
      {
        const float dk0 = hdr[128 + r0], dk1 = hdr[128 + r1];
        float du[NJ][4];
#pragma unroll
        for (int jn = 0; jn < NJ; ++jn)
          du[jn][0] = u[jn][0] * dk0, du[jn][1] = u[jn][1] * dk0, du[jn][2] = u[jn][2] * dk1,
          du[jn][3] = u[jn][3] * dk1;
        uint32_t xh[NJ][2], xl[NJ][2];
        split_acc<BF16>(du, xh, xl);
        store_transposed(st_slice + 8192, xh, wi, lane);
        store_transposed(st_slice, xl, wi, lane);
        wg::fence_async_smem();
      }
      uint32_t kt[2][4][4];                                // K^T of key blocks 0, 1
      load_kt_frags(sm.k[bf], r0 - g8, lane, kt[0]);       // keys 16 wi .. (block 0)
      load_kt_frags(sm.k[bf], 64 + r0 - g8, lane, kt[1]);  // keys 64 + 16 wi .. (block 1)
      if (o_issued) tma::wait_stores_read();
      named_barrier<128>(1 + wgi);  // diag(dk) U^T of this half complete

      // ---- phase 3: the state update S <- en S + K^T (diag(dk) U)_hi + K^T (diag(dk) U)_lo per key block (B = the hi
      // part at S0^T's key block 1, the lo part at key block 0) and O += P_hi U_hi + P_hi U_lo + P_lo U_hi (P from
      // registers)
      float(&s0)[4 * NJ] = reinterpret_cast<float(&)[4 * NJ]>(sacc[0]);
      float(&s1)[4 * NJ] = reinterpret_cast<float(&)[4 * NJ]>(sacc[1]);
      // the update (both key blocks) in one group; U^T is stored while it runs, then P U in a second group: the
      // state's chain waits for the update only, and P U runs under the next chunk's S0^T stores
      wg::fence();
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n64<BF16>(s0, kt[0][kc], wg::desc_at(st_lo, 8192 + kc * 32), 1);
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n64<BF16>(s0, kt[0][kc], wg::desc_at(st_lo, kc * 32), 1);
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n64<BF16>(s1, kt[1][kc], wg::desc_at(st_lo, 8192 + kc * 32), 1);
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n64<BF16>(s1, kt[1][kc], wg::desc_at(st_lo, kc * 32), 1);
      wg::commit();
      if constexpr (has_output) {
        store_ut();
        wg::fence_async_smem();
        named_barrier<128>(1 + wgi);  // U^T of this slice complete
        uint32_t p0[4][4], p1[4][4];
        load_causal_frags(pfr, wi, lane, p0);
        load_causal_frags(pfr + 32, wi, lane, p1);
        wg::fence();
#pragma unroll
        for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n64<BF16>(ov, p0[kc], wg::desc_at(ut_lo, kc * 32), 1);
#pragma unroll
        for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n64<BF16>(ov, p0[kc], wg::desc_at(ut_lo, 8192 + kc * 32), 1);
#pragma unroll
        for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n64<BF16>(ov, p1[kc], wg::desc_at(ut_lo, kc * 32), 1);
        wg::commit();
      }
      // this thread's last reads of buffer bf (K^T and P fragments into registers, the header) are behind it; the
      // wgmma in flight read registers and the S0^T / U^T regions only
      release(c);
      if constexpr (has_output)
        wg::wait1();  // the update
      else
        wg::wait0();
      // the 16-bit copy for the next chunk's phase 1, over diag(dk) U^T (hi, lo): every warp of the warpgroup
      // must be past its wait of the update (one warp's wait does not cover the others' halves of the operation)
      named_barrier<128>(1 + wgi);
#pragma unroll
      for (int mb = 0; mb < 2; ++mb) {
        uint32_t x[NJ][2];
        pack_acc<BF16>(sacc[mb], x);
        store_transposed(st_slice + 8192 * mb, x, wi, lane);
        if (STATES && c + 1 < c_end) store_s0(c + 1, mb, x);
      }
      wg::fence_async_smem();
      named_barrier<128>(1 + wgi);  // S0^T complete before the next chunk's phase 1 (no CTA-wide barrier orders it)
#pragma unroll
      for (int mb = 0; mb < 2; ++mb)  // key block mb: rows 64 mb + 16 wi ..
        store_checkpoint(a, wk, c, h, vcol0, reinterpret_cast<const float(&)[1][NJ][4]>(sacc[mb]), 64 * mb + 16 * wi,
                         cb, g8, t4);
      // chunk c + 1's phase 1, and under its K S0 this chunk's wait for P U and its o store
      if (c + 1 < c_end) {
        phase1(c + 1, [&] {
          if constexpr (has_output) wg::wait1();  // P U (K S0 of chunk c + 1 may still run)
          store_o(c);
        });
      } else {
        if constexpr (has_output) wg::wait0();  // P U
        store_o(c);
        if (c < tma_o_end) {  // the last chunk's staged o: no later barrier to issue it after
          wg::fence_async_smem();
          named_barrier<128>(1 + wgi);
          if (o_leader) issue_o(c);
        }
      }
    }
    if (o_leader) tma::wait_stores_read();  // (no bulk store may read shared memory at exit or past here)
  }
  cp_async_commit();    // (the copies are tracked by the barriers, not by groups: commit them to wait for them)
  cp_async_wait_all();  // no copy may be in flight at exit

  // ---- final state (a zero-length sequence stores its start state unchanged); summary columns from tile 0
  if (!active) return;
  StateRef dst = end_state(a, wk, item, h, K);
  if constexpr (summary) dst.vmajor = false;  // (the summaries [M | N] are K-major: one address form)
  if (dst.p) {
    // staged over this half's S0^T and U^T (32 KiB): every wgmma that read them is waited, and the o store's read of
    // U^T is complete (its leader waited above); the barrier orders those before the staging writes
    named_barrier<128>(1 + wgi);
    float* const stage[2] = {reinterpret_cast<float*>(sm.st[hf][0]), reinterpret_cast<float*>(sm.ut[hf][0])};
    store_state_vec<NJ>(dst, sacc, stage, summary ? tile * kBV : vcol0, wi, g8, t4, tid & (HTH - 1), 1 + wgi);
  }
}

// grid = (items, Hv, ceil(tiles / 2)): both value halves of V = 128 per CTA.
template <bool BF16, bool SUMMARY, bool STATES = false>
int launch_chunk_state_wg_mode(const ChunkKernelArgs& a, const ChunkStateMaps& maps, int64_t items, int64_t tiles,
                               void* stream) {
  const size_t smem = sizeof(StateWgSmem) + 1024;  // + alignment of the swizzled regions to 1024 bytes
  static std::atomic<uint64_t> done_mask{0};
  if (const int e = prepare_launch(chunk_fwd_state_wg_kernel<BF16, SUMMARY, STATES>, smem, done_mask)) return e;
  if (items <= 0 || a.Hv <= 0 || tiles <= 0) return 0;
  // K = V = 128: the forward modes run both value halves of one CTA (the kernel takes both as active)
  if (a.V != 128 || (!SUMMARY && tiles != 2)) return static_cast<int>(cudaErrorInvalidValue);
  const dim3 grid(static_cast<unsigned>(items), static_cast<unsigned>(a.Hv), static_cast<unsigned>((tiles + 1) / 2));
  const auto kernel = chunk_fwd_state_wg_kernel<BF16, SUMMARY, STATES>;
  kernel<<<grid, kStateWgThreads, smem, static_cast<cudaStream_t>(stream)>>>(a, maps);
  return static_cast<int>(cudaGetLastError());
}

template <bool BF16>
int launch_chunk_state_wg(const ChunkKernelArgs& a, const ChunkStateMaps& maps, int64_t items, int64_t tiles,
                          void* stream) {
  if (a.mode == kModeSummary) return launch_chunk_state_wg_mode<BF16, true>(a, maps, items, tiles, stream);
  if (!a.s0) return launch_chunk_state_wg_mode<BF16, false>(a, maps, items, tiles, stream);
  if constexpr (BF16)
    return launch_chunk_state_wg_mode<BF16, false, true>(a, maps, items, tiles, stream);
  else
    return static_cast<int>(cudaErrorInvalidValue);  // (chunk_bwd's S0 records are bf16)
}

}  // namespace flashgdn::cuda::chunk_detail
