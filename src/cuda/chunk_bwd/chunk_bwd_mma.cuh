// Tensor-core products of the CUDA backward: mma.sync m16n8k16, bf16 operands, fp32 accumulation (the forward's
// chunk_detail::mma and Elem). An fp32 operand x enters as x = hi + lo, both bf16 (|lo| <= 2^-9 |x|): the product
// hi*hi + hi*lo + lo*hi leaves out only lo*lo (~2^-18 relative), so a split product keeps the fp32 result at the
// scale of the error bounds (gdn-math §10.3) while running on the tensor cores. An operand that is bf16 already
// (EXACT) has lo = 0, and its MMA is skipped.
#pragma once

#include <cstdint>

#include "cuda/chunk_fwd/chunk_fwd_common.cuh"

namespace flashgdn::cuda::bwd_detail {

struct Split2 {
  uint32_t hi, lo;  // two bf16 each: (x0, x1) = hi + lo
};
template <bool EXACT>
__device__ __forceinline__ Split2 split_pair(float x0, float x1) {
  Split2 s;
  s.hi = chunk_detail::Elem<true>::pack(x0, x1);
  if constexpr (EXACT) {
    s.lo = 0;
  } else {
    const float2 h = chunk_detail::Elem<true>::unpack(s.hi);
    s.lo = chunk_detail::Elem<true>::pack(x0 - h.x, x1 - h.y);
  }
  return s;
}

// One warp: d[nt] (the 16 x 8 tile at rows m0, columns n0 + 8 nt; lane (g, t) = (lane / 4, lane % 4) holds
// (g, 2t..2t+1) and (g + 8, 2t..2t+1)) += sum_{k < KD} a(m0 + r, k) b(k, n0 + 8 nt + c), the operands read as floats
// through the accessors a(row, k) and b(k, col); each A fragment serves all NT tiles. AEX / BEX: the operand's
// values are bf16 already. Fixed order (k ascending; within a step lo*hi, hi*lo, then hi*hi): deterministic.
template <bool AEX, bool BEX, int KD, int NT, class FA, class FB>
__device__ __forceinline__ void warp_mma(float (&d)[NT][4], FA a, FB b, int m0, int n0, int lane) {
  const int g = lane >> 2, t2 = 2 * (lane & 3);
#pragma unroll 2
  for (int k0 = 0; k0 < KD; k0 += 16) {
    uint32_t ah[4], al[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {  // a[q]: rows g (+8 for q odd), columns 2t (+8 for q >= 2)
      const int row = m0 + g + 8 * (q & 1), col = k0 + t2 + 8 * (q >> 1);
      const Split2 s = split_pair<AEX>(a(row, col), a(row, col + 1));
      ah[q] = s.hi, al[q] = s.lo;
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int col = n0 + 8 * nt + g;
      const Split2 b0 = split_pair<BEX>(b(k0 + t2, col), b(k0 + t2 + 1, col));
      const Split2 b1 = split_pair<BEX>(b(k0 + t2 + 8, col), b(k0 + t2 + 9, col));
      if constexpr (!AEX) mma_m16n8k16<true>(d[nt], al, b0.hi, b1.hi);
      if constexpr (!BEX) mma_m16n8k16<true>(d[nt], ah, b0.lo, b1.lo);
      mma_m16n8k16<true>(d[nt], ah, b0.hi, b1.hi);
    }
  }
}

// Where lane's accumulator e of tile nt lies: row m0 + g + 8 (e / 2), column n0 + 8 nt + 2t + e % 2.
__device__ __forceinline__ int frag_row(int m0, int lane, int e) {
  return m0 + (lane >> 2) + 8 * (e >> 1);
}
__device__ __forceinline__ int frag_col(int n0, int nt, int lane, int e) {
  return n0 + 8 * nt + 2 * (lane & 3) + (e & 1);
}

}  // namespace flashgdn::cuda::bwd_detail
