// Tensor-core products of the CUDA backward: mma.sync m16n8k16, bf16 operands, fp32 accumulation (the forward's
// chunk_detail::mma and Elem). An fp32 operand x enters as x = hi + lo, both bf16 (|lo| <= 2^-9 |x|): the product
// hi*hi + hi*lo + lo*hi leaves out only lo*lo (~2^-18 relative), so a split product keeps the fp32 result at the
// scale of the error bounds (gdn-math §10.3) while running on the tensor cores. An operand that is bf16 already
// (EXACT) has lo = 0, and its MMA is skipped.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/chunk_fwd/chunk_fwd_common.cuh"

namespace flashgdn::cuda::bwd_detail {

using chunk_detail::Split2;  // a pair's bf16 split, hi + lo (chunk_fwd_common.cuh)
using chunk_detail::split_pair;

// ---- operands as 16-bit tiles in shared memory, fragments by ldmatrix ------------------------------------------
// A tile holds a matrix M row-major at p[r * ld + c], ld = 8 (mod 64) elements: the eight 16-byte rows of an
// ldmatrix 8x8 read then fall in eight distinct bank quads (conflict-free), and every row start is 16-byte aligned.
// An fp32 operand is materialized once (scale factors applied) as two bf16 tiles, hi and lo (SplitTile); a
// 16-bit input is used as stored (InTile): bf16 is exact (no lo), f16 is split into bf16 hi + lo in registers
// (exact: f16 has 11 significant bits).
constexpr int tile_ld(int cols) {
  return cols + 8;
}
struct SplitTile {
  static constexpr bool kExact = false;
  const __nv_bfloat16 *hi, *lo;
  int ld;
};
template <class E>
struct InTile {
  static constexpr bool kExact = std::is_same_v<E, __nv_bfloat16>;
  const E* p;
  int ld;
};

// x = hi + lo into the two tiles at element offset o (two adjacent columns).
__device__ __forceinline__ void store_split2(__nv_bfloat16* hi, __nv_bfloat16* lo, int o, float x0, float x1) {
  const Split2 s = split_pair<false>(x0, x1);
  *reinterpret_cast<uint32_t*>(hi + o) = s.hi;
  *reinterpret_cast<uint32_t*>(lo + o) = s.lo;
}

// x rounded to bf16 into the tile at element offset o (two adjacent columns): an operand that gdn-math §10.2
// allows in bf16 (P in prep), used as an exact tile.
__device__ __forceinline__ void store_bf2(__nv_bfloat16* t, int o, float x0, float x1) {
  *reinterpret_cast<uint32_t*>(t + o) = chunk_detail::Elem<true>::pack(x0, x1);
}

// A fragment pair (hi, lo) of an operand at element offset o of the lane (the lane's row address, below): the
// four 8x8 matrices by ldmatrix (load_frag: issue only), then made ready for the MMAs (ready_frag). An f16 input
// loads its one tile raw and is split into bf16 hi + lo at ready_frag, so a prefetched fragment's conversion waits
// on its ldmatrix only when the fragment is used, not when it is issued.
template <bool TRANS>
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const void* p) {
  if constexpr (TRANS)
    ldsm_x4_t(r, p);
  else
    ldsm_x4(r, p);
}
template <bool TRANS>
__device__ __forceinline__ void load_frag(const SplitTile& t, int o, uint32_t (&h)[4], uint32_t (&l)[4]) {
  ldsm4<TRANS>(h, t.hi + o);
  ldsm4<TRANS>(l, t.lo + o);
}
template <bool TRANS, class E>
__device__ __forceinline__ void load_frag(const InTile<E>& t, int o, uint32_t (&h)[4], uint32_t (&)[4]) {
  ldsm4<TRANS>(h, t.p + o);
}
template <class O>
__device__ __forceinline__ void ready_frag(const O&, uint32_t (&)[4], uint32_t (&)[4]) {}
__device__ __forceinline__ void ready_frag(const InTile<__half>&, uint32_t (&h)[4], uint32_t (&l)[4]) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float2 x = chunk_detail::Elem<false>::unpack(h[q]);
    const Split2 s = split_pair<false>(x.x, x.y);
    h[q] = s.hi, l[q] = s.lo;
  }
}

// One warp: d[2 j + u] (the 16 x 8 tile at rows m0, columns n0 + NS j + 8 u) += sum_{k < KD} A(m0 + r, k) B(k, c),
// j < NP, with A(m, k) = a[m][k] (or a[k][m]: AKM) and B(k, n) = b[n][k] (or b[k][n]: BKN), fragments by
// ldmatrix (.trans for AKM / BKN); each A fragment serves all 2 NP tiles. Fixed order (k ascending; within a
// step lo*hi, hi*lo, then hi*hi; exact operands skip their lo): deterministic. Lane l addresses row l % 8 of
// matrix l / 8; the matrices are a0..a3 (rows +8 for odd, k +8 for >= 2) and b0, b1 of tile u = 0, then of u = 1.
// The three terms go to dlh (lo*hi), dhl (hi*lo) and dhh (hi*hi): one array for all three is the plain product
// (warp_mma_t); three arrays make three independent MMA chains of KD / 16 steps each instead of one of up to
// 3 KD / 16 (summed by sum_terms, in a fixed order).
//
// The k loop's schedule (MODE; the MMAs and their order per accumulator are the same in every mode, so are the
// results, bitwise):
//  - kMmaLoop: a loop unrolled by two (one step at a time with an f16 operand: its split doubles the fragment
//    registers), each step's fragments loaded just before its MMAs: the fewest registers;
//  - kMmaPipelined: unrolled fully (every fragment address an immediate offset from the lane's base), the
//    fragments double-buffered in registers: the ldmatrix of the next (step, column pair) group is issued before
//    the MMAs of the current one, which then find their operands loaded instead of waiting on the ldmatrix
//    latency (short scoreboard), for one more A and one more B fragment pair in registers.
enum MmaMode { kMmaLoop, kMmaPipelined };
template <bool AKM, bool BKN, int KD, int NP, int NS, MmaMode MODE = kMmaLoop, class OA, class OB>
__device__ __forceinline__ void warp_mma_terms(float (&dlh)[2 * NP][4], float (&dhl)[2 * NP][4],
                                               float (&dhh)[2 * NP][4], const OA& a, const OB& b, int m0, int n0,
                                               int lane) {
  constexpr bool PF = MODE == kMmaPipelined;
  constexpr int KT = KD / 16;
  const int l7 = lane & 7, l8 = 8 * ((lane >> 3) & 1), l16 = 8 * (lane >> 4);
  const int ao = AKM ? (l7 + l16) * a.ld + m0 + l8 : (m0 + l7 + l8) * a.ld + l16;
  const int bo = BKN ? (l7 + l8) * b.ld + n0 + l16 : (n0 + l7 + l16) * b.ld + l8;
  const int astep = AKM ? 16 * a.ld : 16, bstep = BKN ? 16 * b.ld : 16, bj = BKN ? NS : NS * b.ld;
  // The MMAs of one (step ks, column pair j) group from the fragments A (ah, al) and B (bh, bl).
  const auto mma = [&](int j, const uint32_t(&ah)[4], const uint32_t(&al)[4], const uint32_t(&bh)[4],
                       const uint32_t(&bl)[4]) {
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      if constexpr (!OA::kExact) mma_m16n8k16<true>(dlh[2 * j + u], al, bh[2 * u], bh[2 * u + 1]);
      if constexpr (!OB::kExact) mma_m16n8k16<true>(dhl[2 * j + u], ah, bl[2 * u], bl[2 * u + 1]);
      mma_m16n8k16<true>(dhh[2 * j + u], ah, bh[2 * u], bh[2 * u + 1]);
    }
  };
  if constexpr (PF) {
    // Groups g = NP ks + j in order; before group g's MMAs, the ldmatrix of group g + 1 (its B pair, and at a new
    // step its A pair) into the other buffer: A double-buffered by step, B by group.
    uint32_t ah[2][4], al[2][4], bh[2][4], bl[2][4];
    load_frag<AKM>(a, ao, ah[0], al[0]);
    load_frag<BKN>(b, bo, bh[0], bl[0]);
#pragma unroll
    for (int ks = 0; ks < KT; ++ks)
#pragma unroll
      for (int j = 0; j < NP; ++j) {
        const int g = NP * ks + j, n = g + 1, nk = n / NP, nj = n % NP;
        if (n < KT * NP) {
          if (nj == 0) load_frag<AKM>(a, ao + nk * astep, ah[nk & 1], al[nk & 1]);
          load_frag<BKN>(b, bo + nk * bstep + nj * bj, bh[n & 1], bl[n & 1]);
        }
        if (j == 0) ready_frag(a, ah[ks & 1], al[ks & 1]);
        ready_frag(b, bh[g & 1], bl[g & 1]);
        mma(j, ah[ks & 1], al[ks & 1], bh[g & 1], bl[g & 1]);
      }
  } else {
    constexpr int kUnroll = std::is_same_v<OA, InTile<__half>> || std::is_same_v<OB, InTile<__half>> ? 1 : 2;
#pragma unroll(kUnroll)
    for (int ks = 0; ks < KT; ++ks) {
      uint32_t ah[4], al[4];
      load_frag<AKM>(a, ao + ks * astep, ah, al);
      ready_frag(a, ah, al);
#pragma unroll
      for (int j = 0; j < NP; ++j) {
        uint32_t bh[4], bl[4];
        load_frag<BKN>(b, bo + ks * bstep + j * bj, bh, bl);
        ready_frag(b, bh, bl);
        mma(j, ah, al, bh, bl);
      }
    }
  }
}
template <bool AKM, bool BKN, int KD, int NP, int NS, MmaMode MODE = kMmaLoop, class OA, class OB>
__device__ __forceinline__ void warp_mma_t(float (&d)[2 * NP][4], const OA& a, const OB& b, int m0, int n0, int lane) {
  warp_mma_terms<AKM, BKN, KD, NP, NS, MODE>(d, d, d, a, b, m0, n0, lane);
}

// The split accumulators of warp_mma_terms, t[0] (lo*hi), t[1] (hi*lo), t[2] (hi*hi), and their sum, in a fixed
// order: d = t[2] + (t[0] + t[1]).
template <int NT>
__device__ __forceinline__ void sum_terms(float (&d)[NT][4], const float (&t)[3][NT][4]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) d[nt][e] = t[2][nt][e] + (t[0][nt][e] + t[1][nt][e]);
}

// Where lane's accumulator e of tile nt lies: row m0 + g + 8 (e / 2), column n0 + 8 nt + 2t + e % 2.
__device__ __forceinline__ int frag_row(int m0, int lane, int e) {
  return m0 + (lane >> 2) + 8 * (e >> 1);
}
__device__ __forceinline__ int frag_col(int n0, int nt, int lane, int e) {
  return n0 + 8 * nt + 2 * (lane & 3) + (e & 1);
}

}  // namespace flashgdn::cuda::bwd_detail
