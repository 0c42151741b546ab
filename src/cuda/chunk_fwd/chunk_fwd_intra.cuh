// The intra-chunk pass of the two-pass prefill (gdn-math §5.2-§5.4): the state-independent part of every chunk,
// for all chunks and heads at once (grid = record slots x Hqk, 4 warps, 52.5 KiB shared memory, 4 CTAs per SM, at
// most 128 registers; the value heads of a GQA group share one CTA and its K K^T, Q K^T products). Per (chunk, value
// head h) it writes one record (chunk_fwd.hpp, kRecBytes = 26 KB) that the state pass (chunk_fwd_state.cuh) reads
// instead of recomputing it on its critical path:
//
//   gamma = cumsum(g) (gate fused: g = -exp(A_log) softplus(a + dt_bias)), beta (sigmoid fused)
//   rho_q, rho_k = 1 / sqrt(|x|^2 + 1e-6) per row (l2norm; 1 without), applied as row scalings in fp32
//   L = strictlower(diag(beta) (diag(rho_k) K K^T diag(rho_k) (.) D))       D_rs = exp(gamma_r - gamma_s), r > s
//   A = (I + L)^-1 (fp32: forward substitution on the diagonal blocks, 3xTF32 block merges; §5.7)
//   A diag(beta)                               -> 16-bit hi + lo A fragments (the operand of U = A diag(b) R), + its
//                                                 rest where the chunk's beta exceeds 1
//   P = scale diag(rho_q) (Q K^T (.) D) diag(rho_k), s <= r  -> 16-bit hi + lo A fragments (the operand of P U)
//   ek = rho_k e^gamma, eq = scale rho_q e^gamma, dk = rho_k e^{gamma_n - gamma}, en = e^{gamma_n}
//
// FLOPs per (chunk, q/k head): K K^T and Q K^T on the ten causal 16x16 blocks, 2 x 10 x 16 x 16 x 2K = 1.3 MFLOP
// at K = 128; per value head ~0.15 MFLOP of 3xTF32 merges. Bytes: q, k rows read once per q/k head (2 x 16 KB),
// 21 KB written per value head (26 KB where the chunk's beta exceeds 1: A diag(beta)'s rest). Nothing here depends on
// the state: every chunk is independent (no chain).
// The pass is latency- and issue-bound (16 warps per SM), so the code keeps the serial phases short and cuts
// instructions: the first head's gates are formed while the q, k rows arrive, the later heads' during the previous
// head's last merge round; the l2 norms come from the diagonals of the products; L and P are built per warp from
// compile-time block positions without branches (one MUFU ex2 per entry, shared by the L and P blocks at the same
// position, the masked diagonal entries selected away); each warp's five product blocks share four operand tiles per
// k-step; each warp inverts the diagonal block of L it built; every block of A leaves for the record as soon as it is
// final. Three CTA barriers and one of warps 2, 3 per value head (one more where the chunk's beta exceeds 1). Measured
// cost: docs/chunk_fwd.md ("Intra-chunk pass").
#pragma once

#include "cuda/chunk_fwd/chunk_fwd_common.cuh"

namespace flashgdn::cuda::chunk_detail {

// 52.5 KiB at K = 128 (four CTAs per SM): A and the merge scratch reuse the q, k tiles, dead once L and P are formed.
template <int K, class E>
struct IntraSmem {
  static constexpr int LDQ = K + 8;   // padded rows: conflict-free ldmatrix
  static constexpr int LDF = kC + 4;  // fp32 64 x 64 matrices
  static constexpr int LDT = 24;      // fp32 16 x 16 scratch blocks: conflict-free as the B operand of mma16_f32
  union {
    struct {
      E q[kC * LDQ];  // [token][K] raw q rows (zero past the sequence end)
      E k[kC * LDQ];  // [token][K] raw k rows
    } in;
    struct {
      float A[kC * LDF];     // A = (I + L)^-1
      float T[4][16 * LDT];  // merge scratch: W_21, W_31, W_20, W_30 (below)
    } inv;
  } x;
  float L[kC * LDF];              // strictly lower L
  float gam[2][kC], beta[2][kC];  // gamma, beta of value head j of the group in [j % 2]: the next head's are formed
                                  // while this head's are still read
  float rq[kC], rk[kC];
  float bmax[2][2];  // the largest beta of rows 0-31, 32-63 of value head j in [j % 2] (the header's slots 193, 194)
};

// e^x as ex2.approx.ftz(x log2 e): the MUFU op of __expf without its denormal-range fixup (results below 2^-126
// flush to zero; they only scale entries of L and P that vanish next to the unit diagonal and the fp32 sums).
__device__ __forceinline__ float exp_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x * 1.4426950408889634f));
  return y;
}

// The head-independent products of warp w: five of the twenty causal 16 x 16 blocks (ten of K K^T for L, ten of
// Q K^T for P), chosen so that they need only four 16-row operand tiles per k-step (ldmatrix x4 each: 16 loads per
// k-step per CTA where one load pair per block needs 40). A tile of k rows loaded in the A-operand layout is also
// the B operand of any block in that block column: its matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15) are m0, m1, m2,
// m3, and n-tile 0 of the B operand is (m0, m2), n-tile 1 is (m1, m3).
//   warp 0: tiles k0 k1 q0 q1   L00 L10 P00 P10 P11
//   warp 1: tiles k2 k3 q2 q3   L22 L32 P22 P32 P33
//   warp 2: tiles k0 k1 k2 q2   L20 L21 P20 P21 L11
//   warp 3: tiles k0 k1 k3 q3   L30 L31 P30 P31 L33
// Blocks 0, 1 are L, 2, 3 are P, block 4 is P (warps 0, 1) or L (warps 2, 3); every L and P block once.
struct ProductTile {
  bool q;   // q rows (else k rows)
  int row;  // block row: rows 16 row .. 16 row + 15
};
struct ProductBlock {
  int i, j;    // block (i, j), i >= j
  int fa, fb;  // its A and B operands among the warp's four tiles
};
struct WarpProducts {
  ProductTile tile[4];
  ProductBlock blk[5];
};
inline constexpr WarpProducts kWarpProducts[4] = {
    {{{false, 0}, {false, 1}, {true, 0}, {true, 1}},
     {{0, 0, 0, 0}, {1, 0, 1, 0}, {0, 0, 2, 0}, {1, 0, 3, 0}, {1, 1, 3, 1}}},
    {{{false, 2}, {false, 3}, {true, 2}, {true, 3}},
     {{2, 2, 0, 0}, {3, 2, 1, 0}, {2, 2, 2, 0}, {3, 2, 3, 0}, {3, 3, 3, 1}}},
    {{{false, 0}, {false, 1}, {false, 2}, {true, 2}},
     {{2, 0, 2, 0}, {2, 1, 2, 1}, {2, 0, 3, 0}, {2, 1, 3, 1}, {1, 1, 1, 1}}},
    {{{false, 0}, {false, 1}, {false, 3}, {true, 3}},
     {{3, 0, 2, 0}, {3, 1, 2, 1}, {3, 0, 3, 0}, {3, 1, 3, 1}, {3, 3, 2, 2}}},
};
// Causal block indices i (i + 1) / 2 + j of warp w's five blocks, four bits each (block b at bits 4b): the layout of
// the head loop (selects, no table in local memory).
constexpr unsigned warp_block_code(int w) {
  return w == 0 ? 0x21010u : (w == 1 ? 0x98585u : (w == 2 ? 0x24343u : 0x97676u));
}
// Whether warp w's block b is one of L (K K^T) or of P (Q K^T).
constexpr bool is_L_block(int w, int b) {
  return b < 2 || (b == 4 && w >= 2);
}
__device__ __forceinline__ int warp_block_idx(int w, int b) {
  return static_cast<int>((warp_block_code(w) >> (4 * b)) & 15u);
}
// The plan is checked where it is compiled: operand tiles of the right rows and kind, block codes that match, every
// L and every P block exactly once.
constexpr bool warp_products_valid() {
  int seen_L[10] = {}, seen_P[10] = {};
  for (int w = 0; w < 4; ++w)
    for (int b = 0; b < 5; ++b) {
      const ProductBlock& pb = kWarpProducts[w].blk[b];
      const ProductTile& ta = kWarpProducts[w].tile[pb.fa];
      const ProductTile& tb = kWarpProducts[w].tile[pb.fb];
      const bool is_L = is_L_block(w, b);
      const int idx = pb.i * (pb.i + 1) / 2 + pb.j;
      if (pb.j > pb.i || ta.row != pb.i || ta.q == is_L || tb.q || tb.row != pb.j) return false;
      if (static_cast<int>((warp_block_code(w) >> (4 * b)) & 15u) != idx) return false;
      ++(is_L ? seen_L : seen_P)[idx];
    }
  for (int idx = 0; idx < 10; ++idx)
    if (seen_L[idx] != 1 || seen_P[idx] != 1) return false;
  return true;
}
static_assert(warp_products_valid(), "kWarpProducts: every L and P block once, from the right operand tiles");

// The diagonal block of L among warp w's blocks (kWarpProducts: each warp builds exactly one), which the warp then
// inverts itself (no barrier between L and the diagonal inverses), and whose diagonal entries |k_r|^2 give rho_k.
constexpr int warp_diag_block(int w) {
  return w == 0 ? 0 : (w == 1 ? 2 : (w == 2 ? 1 : 3));
}
constexpr int warp_diag_slot(int w) {
  return w < 2 ? 0 : 4;
}  // its block index among the warp's five
// The q tiles of warp w whose Q Q^T diagonal block the warp also forms (rho_q): q0, q1 (warp 0), q2 (warp 2), q3
// (warp 3), as operand tile indices (-1: none). Every q tile once; the tiles are already loaded for P.
constexpr int warp_qq_tile(int w, int n) {
  return w == 0 ? (n == 0 ? 2 : 3) : (w >= 2 && n == 0 ? 3 : -1);
}
constexpr bool warp_norm_blocks_valid() {
  int seen_q[4] = {};
  for (int w = 0; w < 4; ++w) {
    int diag = 0;
    for (int b = 0; b < 5; ++b) {
      const ProductBlock& pb = kWarpProducts[w].blk[b];
      const bool is_L = b < 2 || (b == 4 && w >= 2);
      if (is_L && pb.i == pb.j && (pb.i != warp_diag_block(w) || b != warp_diag_slot(w))) return false;
      if (is_L && pb.i == pb.j) ++diag;
    }
    if (diag != 1) return false;
    for (int n = 0; n < 2; ++n) {
      const int f = warp_qq_tile(w, n);
      if (f < 0) continue;
      if (!kWarpProducts[w].tile[f].q) return false;
      ++seen_q[kWarpProducts[w].tile[f].row];
    }
  }
  for (int r = 0; r < 4; ++r)
    if (seen_q[r] != 1) return false;
  return true;
}
static_assert(
    warp_norm_blocks_valid(),
    "each warp builds exactly one diagonal block of L (warp_diag_block, warp_diag_slot); every q tile's Q Q^T "
    "diagonal block once");

// rho = 1 / sqrt(d + 1e-6) (gdn-math §1.4) of the diagonal entries d of a 16 x 16 Gram block (two m16n8 C fragments
// c: entry (r, s) = (g8 + 8 hf, 8 nt + 2 t4 + e), on the diagonal where hf = nt and g8 = 2 t4 + e), to rho[0..15]:
// lanes with g8 / 2 = t4 hold rows g8 and g8 + 8.
__device__ __forceinline__ void store_diag_rnorm(const float (&c)[2][4], float* rho, int g8, int t4) {
  if ((g8 >> 1) != t4) return;
  const bool odd = g8 & 1;
#pragma unroll
  for (int h = 0; h < 2; ++h) rho[g8 + 8 * h] = l2_rnorm(odd ? c[h][2 * h + 1] : c[h][2 * h]);
}

// The operand tiles of warp w's blocks in the A (b_operand false) or B role, one bit per tile.
constexpr unsigned warp_tiles_as(int w, bool b_operand) {
  unsigned m = 0;
  for (int b = 0; b < 5; ++b) m |= 1u << (b_operand ? kWarpProducts[w].blk[b].fb : kWarpProducts[w].blk[b].fa);
  return m;
}

// acc[b] = the products of warp W's block b, unscaled: k_r . k_s (L) or q_r . k_s (P). With l2norm, also the norms
// rho_k of the warp's diagonal L block (its |k_r|^2) and rho_q of its Q Q^T diagonal blocks (warp_qq_tile; two more
// mma per block and k-step on tiles the warp loads anyway) into rk, rq: the squared norms come from the tensor cores
// (the 16-bit products exact, fp32 sums), not from a pass of their own over the rows.
// A tile is loaded once per role: in the A layout (matrices rows 0-7 | 8-15 x k 0-7 | 8-15 as m0 m1 m2 m3) and, where
// it is a B operand, in the order m0 m2 m1 m3, so that each n-tile's register pair (m0, m2), (m1, m3) is adjacent as
// the mma instruction takes it (one pair from the A-layout registers costs two moves per pair and k-step).
template <int W, int K, int LDQ, bool BF16, bool NOP, class E>
__device__ __forceinline__ void warp_products(float (&acc)[5][2][4], const E* q, const E* k, float* rq, float* rk,
                                              bool l2norm, int lane) {
  constexpr WarpProducts wp = kWarpProducts[W];
  constexpr int NQ = (warp_qq_tile(W, 0) >= 0) + (warp_qq_tile(W, 1) >= 0);
  constexpr unsigned as_a = warp_tiles_as(W, false), as_b = warp_tiles_as(W, true);
  const int g8 = lane >> 2, t4 = lane & 3;
  const E* tile_a[4];
  const E* tile_b[4];
#pragma unroll
  for (int f = 0; f < 4; ++f) {
    const E* const base = (wp.tile[f].q ? q : k) + 16 * wp.tile[f].row * LDQ;
    tile_a[f] = base + (lane & 15) * LDQ + (lane >> 4) * 8;
    tile_b[f] = base + ((lane & 7) + ((lane >> 4) & 1) * 8) * LDQ + ((lane >> 3) & 1) * 8;
  }
  float qq[NQ > 0 ? NQ : 1][2][4];
#pragma unroll
  for (int b = 0; b < 5; ++b)
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[b][nt][e] = 0.f;
#pragma unroll
  for (int n = 0; n < NQ; ++n)
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) qq[n][nt][e] = 0.f;
#pragma unroll
  for (int ks = 0; ks < K / 16; ++ks) {
    uint32_t fra[4][4], frb[4][4];  // A layout; B order (m0 m2 m1 m3)
#pragma unroll
    for (int f = 0; f < 4; ++f) {
      if ((as_a >> f) & 1u) ldsm_x4(fra[f], tile_a[f] + ks * 16);
      if ((as_b >> f) & 1u) ldsm_x4(frb[f], tile_b[f] + ks * 16);
    }
#pragma unroll
    for (int b = 0; b < 5; ++b) {
      if (NOP && !is_L_block(W, b)) continue;
      const uint32_t(&fa)[4] = fra[wp.blk[b].fa];
      const uint32_t(&fb)[4] = frb[wp.blk[b].fb];
      mma_m16n8k16<BF16>(acc[b][0], fa, fb[0], fb[1]);
      mma_m16n8k16<BF16>(acc[b][1], fa, fb[2], fb[3]);
    }
    if (l2norm) {
#pragma unroll
      for (int n = 0; n < NQ; ++n) {
        const int f = warp_qq_tile(W, n);  // a q tile: an A operand only, above
        uint32_t fq[4];
        ldsm_x4(fq, tile_b[f] + ks * 16);
        mma_m16n8k16<BF16>(qq[n][0], fra[f], fq[0], fq[1]);
        mma_m16n8k16<BF16>(qq[n][1], fra[f], fq[2], fq[3]);
      }
    }
  }
  if (l2norm) {
    store_diag_rnorm(acc[warp_diag_slot(W)], rk + 16 * warp_diag_block(W), g8, t4);
#pragma unroll
    for (int n = 0; n < NQ; ++n) store_diag_rnorm(qq[n], rq + 16 * wp.tile[warp_qq_tile(W, n)].row, g8, t4);
  }
}

// The norms as row scalings of warp W's products: rho_k,r rho_k,s (k_r . k_s) (L) or scale rho_q,r rho_k,s
// (q_r . k_s) (P).
template <int W, bool NOP>
__device__ __forceinline__ void scale_products(float (&acc)[5][2][4], const float* rq, const float* rk, float scale,
                                               int lane) {
  constexpr WarpProducts wp = kWarpProducts[W];
  const int g8 = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int b = 0; b < 5; ++b) {
    const bool is_L = is_L_block(W, b);
    if (NOP && !is_L) continue;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const float2 rs = *reinterpret_cast<const float2*>(&rk[16 * wp.blk[b].j + nt * 8 + 2 * t4]);
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int r = 16 * wp.blk[b].i + g8 + hf * 8;
        const float rr = is_L ? rk[r] : scale * rq[r];
        acc[b][nt][2 * hf] *= rr * rs.x;
        acc[b][nt][2 * hf + 1] *= rr * rs.y;
      }
    }
  }
}

// Diagonal block o..o+15 of A = (I + L)^-1 (gdn-math §5.7), one warp, lane c owning column c, by rows:
// x_r = delta_rc - sum_{s<r} L_rs x_s. Row r of L is read as r / 4 rounded up 16-byte vectors (36 loads in all,
// against 120 scalar ones column by column); the critical path stays one FMA per row, since the partial sums of
// every later row proceed as soon as each x_s is final. Lanes 16..31 repeat lanes 0..15 (the loads are broadcasts)
// and store nothing: no divergent region, so the warp's other work of the phase can be scheduled around it. Needs
// 16-byte aligned rows: ld and o multiples of 4.
__device__ __forceinline__ void diag_inverse16_rows(const float* L, float* A, int ld, int o, int lane) {
  const int col = lane & 15;
  float x[16];
#pragma unroll
  for (int r = 0; r < 16; ++r) {
    float acc = r == col ? 1.f : 0.f;
#pragma unroll
    for (int s4 = 0; s4 < r; s4 += 4) {
      const float4 l4 = *reinterpret_cast<const float4*>(&L[(o + r) * ld + o + s4]);
      const float lv[4] = {l4.x, l4.y, l4.z, l4.w};
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (s4 + e < r) acc = fmaf(-lv[e], x[s4 + e], acc);
    }
    x[r] = acc;
    if (lane < 16) A[(o + r) * ld + o + col] = acc;
  }
}

// The decays D_rs = e^{gamma_r - gamma_s} of causal block (I, J) in this lane's C fragment layout (d[nt][2 hf + e]:
// row 16 I + g8 + 8 hf, column 16 J + 8 nt + 2 t4 + e). Every entry is evaluated, the masked ones of a diagonal
// block (s > r) too: the callers select them away.
template <int I, int J>
__device__ __forceinline__ void block_decays(float (&d)[2][4], const float* gam, int g8, int t4) {
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    const float2 gs = *reinterpret_cast<const float2*>(&gam[16 * J + nt * 8 + 2 * t4]);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const float gr = gam[16 * I + g8 + hf * 8];
      d[nt][2 * hf] = exp_ftz(gr - gs.x);
      d[nt][2 * hf + 1] = exp_ftz(gr - gs.y);
    }
  }
}

// L_rs = beta_r kk_rs D_rs, s < r, of causal block (I, J) into the fp32 matrix L (leading dimension LDF); the
// products c from warp_products.
template <int I, int J, int LDF>
__device__ __forceinline__ void build_L_block(float* L, const float (&c)[2][4], const float (&d)[2][4],
                                              const float* beta, int g8, int t4) {
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    const int s0 = 16 * J + nt * 8 + 2 * t4;
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int r = 16 * I + g8 + hf * 8;
      const float br = beta[r];
      float v0 = br * c[nt][2 * hf] * d[nt][2 * hf], v1 = br * c[nt][2 * hf + 1] * d[nt][2 * hf + 1];
      if constexpr (I == J) {  // off-diagonal blocks have s < r everywhere
        v0 = s0 < r ? v0 : 0.f;
        v1 = s0 + 1 < r ? v1 : 0.f;
      }
      *reinterpret_cast<float2*>(&L[r * LDF + s0]) = make_float2(v0, v1);
    }
  }
}

// P_rs = qk_rs D_rs, s <= r, of causal block (I, J) to the record (its fragment slot at dst) as hi + lo.
template <int I, int J, class P>
__device__ __forceinline__ void build_P_block(unsigned char* rec_p, const float (&c)[2][4], const float (&d)[2][4],
                                              int lane) {
  const int g8 = lane >> 2, t4 = lane & 3;
  float cf[2][4];
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    const int s0 = 16 * J + nt * 8 + 2 * t4;
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int r = 16 * I + g8 + hf * 8;
      cf[nt][2 * hf] = c[nt][2 * hf] * d[nt][2 * hf];
      cf[nt][2 * hf + 1] = c[nt][2 * hf + 1] * d[nt][2 * hf + 1];
      if constexpr (I == J) {
        cf[nt][2 * hf] = s0 <= r ? cf[nt][2 * hf] : 0.f;
        cf[nt][2 * hf + 1] = s0 + 1 <= r ? cf[nt][2 * hf + 1] : 0.f;
      }
    }
  }
  store_afrag<P>(reinterpret_cast<uint4*>(rec_p + (I * (I + 1) / 2 + J) * kRecBlockBytes), cf, lane);
}

// Warp W's part of L (into shared memory) and P (to the record, P fragments at rec_p) for one value head from the
// products acc (warp_products) and the head's gamma and beta. Blocks 0, 1 (L) and 2, 3 (P) are the same two blocks
// (kWarpProducts), so their decays are evaluated once: three blocks of decays per warp, not five.
template <int W, int LDF, class P, bool NOP>
__device__ __forceinline__ void build_LP(const float (&acc)[5][2][4], float* L, unsigned char* rec_p, const float* gam,
                                         const float* beta, int lane) {
  constexpr WarpProducts wp = kWarpProducts[W];
  static_assert(wp.blk[0].i == wp.blk[2].i && wp.blk[0].j == wp.blk[2].j && wp.blk[1].i == wp.blk[3].i &&
                    wp.blk[1].j == wp.blk[3].j,
                "blocks 0, 1 of L and 2, 3 of P coincide");
  const int g8 = lane >> 2, t4 = lane & 3;
  float d[2][4];
  block_decays<wp.blk[0].i, wp.blk[0].j>(d, gam, g8, t4);
  build_L_block<wp.blk[0].i, wp.blk[0].j, LDF>(L, acc[0], d, beta, g8, t4);
  if constexpr (!NOP) build_P_block<wp.blk[0].i, wp.blk[0].j, P>(rec_p, acc[2], d, lane);
  if constexpr (W >= 2) {
    block_decays<wp.blk[4].i, wp.blk[4].j>(d, gam, g8, t4);
    build_L_block<wp.blk[4].i, wp.blk[4].j, LDF>(L, acc[4], d, beta, g8, t4);
  } else if constexpr (!NOP) {
    block_decays<wp.blk[4].i, wp.blk[4].j>(d, gam, g8, t4);
    build_P_block<wp.blk[4].i, wp.blk[4].j, P>(rec_p, acc[4], d, lane);
  }
  block_decays<wp.blk[1].i, wp.blk[1].j>(d, gam, g8, t4);
  build_L_block<wp.blk[1].i, wp.blk[1].j, LDF>(L, acc[1], d, beta, g8, t4);
  if constexpr (!NOP) build_P_block<wp.blk[1].i, wp.blk[1].j, P>(rec_p, acc[3], d, lane);
}

// slot_chunk and seq_bounds (chunk_fwd_common.cuh) with the varlen search done by the warp at once: the chunk c of
// sequence n in record slot `slot`, and the sequence's batch entry, first token and length. The sequence is the
// largest n with first(n) = n + floor(s_n / 64) <= slot (s_n = cu_seqlens[n] clamped to [0, T]); slot_chunk's
// binary search takes log2(N) dependent global loads (six at N = 64, each an L2 round trip) and seq_bounds one
// more before the q, k rows can even be requested; at 64 x 512 tokens that search held ~9% of the pass's warp
// samples. Here lane l loads s_m for m = l + 32 j <= N (j < 4, N < 128) in one round of independent loads, the
// answer is the count of probes m < N with first(m) <= slot, minus one (first() increases with m for any
// non-decreasing cu_seqlens, so those probes are m = 0 .. answer), and s_n, s_{n + 1} come from the lanes that
// loaded them (shuffles). The same results as slot_chunk and seq_bounds for every valid table; for a garbage one some
// n in [0, N), as there. N >= 128 (and fixed length): slot_chunk and seq_bounds themselves. Every lane of the warp
// must call it (ballots, shuffles); the results are warp-uniform.
__device__ __forceinline__ bool chunk_of_slot(const ChunkKernelArgs& a, int64_t slot, int lane, int64_t* n, int64_t* c,
                                              int64_t* bidx, int64_t* t0, int64_t* len) {
  constexpr int kProbes = 4;  // per lane: s_0 .. s_N, N < 128, in one round
  if (a.cu_seqlens == nullptr || a.N <= 0 || a.N >= 32 * kProbes) {
    if (!slot_chunk(a, slot, n, c)) return false;
    seq_bounds(a, *n, bidx, t0, len);
    return true;
  }
  int64_t s[kProbes];  // s_m, m = lane + 32 j (0 past N)
  int cnt = 0;         // probes m < N with first(m) <= slot
#pragma unroll
  for (int j = 0; j < kProbes; ++j) {
    const int m = lane + 32 * j;
    int64_t v = 0;
    if (m <= a.N)
      v = a.cu_i64 ? static_cast<const int64_t*>(a.cu_seqlens)[m] : static_cast<const int32_t*>(a.cu_seqlens)[m];
    s[j] = v < 0 ? 0 : (v > a.T ? a.T : v);
    cnt += __popc(__ballot_sync(0xffffffffu, m < a.N && m + s[j] / kC <= slot));
  }
  // s_m of the lane that loaded it (m <= N, warp-uniform)
  const auto s_at = [&](int m) {
    const int j = m >> 5;
    return __shfl_sync(0xffffffffu, j == 0 ? s[0] : (j == 1 ? s[1] : (j == 2 ? s[2] : s[3])), m & 31);
  };
  if (cnt == 0 || s_at(0) / kC > slot) return false;  // a slot before sequence 0 (slot_chunk's first test)
  const int m = cnt - 1;
  const int64_t s0 = s_at(m), s1 = s_at(m + 1);
  *n = m;
  *c = slot - (m + s0 / kC);
  *bidx = 0;
  *t0 = s0;
  *len = s1 > s0 ? s1 - s0 : 0;
  return *c >= 0 && *c * kC < *len;
}

// chunk_bwd's records of value head h (BWD: ChunkKernelArgs::bwd_A, bwd_rows) from A complete in shared memory (Am,
// leading dimension LDF; above the diagonal blocks not read: zeros go out) and the rows: the split of A, hi = bf16(A)
// and lo = bf16(A - hi), 8 columns of a row a thread and step in 16-byte stores; gamma, rho_q, rho_k (0 past the chunk
// end, as chunk_bwd's prep has them), beta.
template <int LDF>
__device__ __forceinline__ void store_bwd_records(const ChunkKernelArgs& a, int64_t rec, const float* Am,
                                                  const float* gam, const float* rq, const float* rk, const float* bet,
                                                  int nvalid, int tid) {
  uint4* const dst = reinterpret_cast<uint4*>(a.bwd_A + rec * (kC * kC));  // hi: 512 pieces of 8 columns, then lo
#pragma unroll 1
  for (int e = tid; e < kC * kC / 8; e += 128) {
    const int r = e >> 3, c0 = 8 * (e & 7);
    uint32_t hi[4] = {0u, 0u, 0u, 0u}, lo[4] = {0u, 0u, 0u, 0u};
    if ((c0 >> 4) <= (r >> 4)) {  // a block on or below the diagonal
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 x = *reinterpret_cast<const float2*>(&Am[r * LDF + c0 + 2 * i]);
        const Split2 v = split_pair<false>(x.x, x.y);
        hi[i] = v.hi, lo[i] = v.lo;
      }
    }
    dst[e] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    dst[kC * kC / 8 + e] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
  }
  if (tid < kC) {
    float* const rw = a.bwd_rows + rec * (4 * kC);
    const bool valid = tid < nvalid;
    rw[tid] = gam[tid];
    rw[kC + tid] = valid ? rq[tid] : 0.f;
    rw[2 * kC + tid] = valid ? rk[tid] : 0.f;
    rw[3 * kC + tid] = bet[tid];
  }
}

// One CTA per (chunk slot, q/k head): the products K K^T and Q K^T (and the l2 norms) are computed once and kept in
// registers, then every value head of the GQA group (group = Hv / Hqk) builds its own L, inverse and P from them
// with its own gates. Warp w holds five blocks (kWarpProducts: 2 or 3 of L, 3 or 2 of P) through the head loop.
// BWD: chunk_bwd's records too (store_bwd_records; its own instance, so that the prefill's carries none of it), and no
// P: chunk_bwd's state pass stores S0, not o, and reads the record's header and A alone (no Q K^T products, 10 KiB
// less of record a chunk and value head).
template <int K, bool BF16, bool BWD>
__global__ void __launch_bounds__(128, 4) chunk_fwd_intra_kernel(const ChunkKernelArgs a) {
  using E = typename Elem<BF16>::T;
  using P = Elem<BF16>;
  using Sm = IntraSmem<K, E>;
  constexpr int LDQ = Sm::LDQ, LDF = Sm::LDF;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Sm& sm = *reinterpret_cast<Sm*>(smem_raw);

  const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g8 = lane >> 2, t4 = lane & 3;
  const int hk = static_cast<int>(blockIdx.x % a.Hqk);
  const int64_t slot = blockIdx.x / a.Hqk;
  int64_t n, c;
  int64_t bidx, t0, len;
  if (!chunk_of_slot(a, slot, lane, &n, &c, &bidx, &t0, &len)) return;  // a varlen slot without a chunk
  const int64_t tok = t0 + c * kC;                                      // first token of the chunk
  const int nvalid = static_cast<int>((len - c * kC) < kC ? (len - c * kC) : kC);

  // ---- q, k rows by cp.async, rows past the end zero-filled by the same copy (src-size 0, the source clamped to row
  // 0, which every chunk has). The row pointers are formed once and stepped: kernel parameters are reread after
  // every asm with a memory clobber, so an address formed from them in the loop is recomputed (64-bit) per row.
  {
    constexpr int VPR = K / 8, RPP = 128 / VPR, NP = kC / RPP;
    const int lrow = tid / VPR, lvec = tid % VPR;
    const int64_t q_st = a.q_st, k_st = a.k_st;
    const E* const q0 = static_cast<const E*>(a.q) + bidx * a.q_sb + hk * a.q_sh + tok * q_st + lvec * 8;
    const E* const k0 = static_cast<const E*>(a.k) + bidx * a.k_sb + hk * a.k_sh + tok * k_st + lvec * 8;
    int64_t qo = lrow * q_st, ko = lrow * k_st;  // element offsets of this thread's row from row 0
    E* dq = &sm.x.in.q[lrow * LDQ + lvec * 8];
    E* dk = &sm.x.in.k[lrow * LDQ + lvec * 8];
#pragma unroll
    for (int p = 0; p < NP; ++p) {
      const bool valid = p * RPP + lrow < nvalid;
      cp_async16_zfill(dq + p * RPP * LDQ, q0 + (valid ? qo : 0), valid);
      cp_async16_zfill(dk + p * RPP * LDQ, k0 + (valid ? ko : 0), valid);
      qo += RPP * q_st;
      ko += RPP * k_st;
    }
    cp_async_commit();
  }

  // raw g and beta of value head h for tokens 2 lane, 2 lane + 1 (warp 0; loaded one head ahead)
  float g_raw[2] = {0.f, 0.f}, b_raw[2] = {1.f, 1.f};
  auto load_gb = [&](int h) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int r = 2 * lane + e;
      g_raw[e] = 0.f;
      b_raw[e] = 1.f;
      if (r < nvalid) {
        const int64_t t = tok + r;
        if (a.g) g_raw[e] = load_scalar(a.g, a.g_dtype, bidx * a.g_sb + t * a.g_st + h * a.g_sh);
        if (a.beta) b_raw[e] = load_scalar(a.beta, a.b_dtype, bidx * a.b_sb + t * a.b_st + h * a.b_sh);
      }
    }
  };
  const int h0 = hk * a.group;
  // warp 0: gamma = cumsum(g) and beta of head h0 + j into buffer j % 2 (padded rows g = 0, beta = 0) from the raw
  // values in g_raw, b_raw, its decay-table entry, then the raw values of head h0 + j + 1 in flight. Head 0's runs
  // here while the q, k rows arrive; head j + 1's in round 3 of head j's inverse.
  const auto gate_step = [&](int j) {
    const int h = h0 + j;
    float* const gam = sm.gam[j & 1];
    const GateHead gh = gate_head(a, h);
    float gv[2], bv[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) gate_beta(a, gh, g_raw[e], b_raw[e], 2 * lane + e < nvalid, &gv[e], &bv[e]);
    store_gamma_beta(gv, bv, lane, gam, sm.beta[j & 1]);
    if (a.dec) {
      // the decay table of the split's summaries (chunk_fwd.hpp, decay_window_start): gamma_n where every
      // transition of the chunk is a contraction times e^g (unit keys, beta in [0, 2]; padded rows have beta = 0),
      // else unbounded. A NaN beta fails the range test.
      const bool in_range = bv[0] >= 0.f && bv[0] <= 2.f && bv[1] >= 0.f && bv[1] <= 2.f;
      const bool bounded = __all_sync(0xffffffffu, in_range) && a.l2norm;
      __syncwarp();  // gamma of row 63 (lane 31) is in shared memory
      if (lane == 0) a.dec[h * a.rec_slots + slot] = bounded ? gam[kC - 1] : kDecayUnbounded;
    }
    if (j + 1 < a.group) load_gb(h + 1);
  };
  if (w == 0) {
    load_gb(h0);
    gate_step(0);
  }
  cp_async_wait_all();
  __syncthreads();

  // Warp-specialized phases: f(std::integral_constant<int, w>) (compile-time block positions, kWarpProducts).
  const auto per_warp = [w](auto&& f) {
    switch (w) {
      case 0:
        f(std::integral_constant<int, 0>{});
        break;
      case 1:
        f(std::integral_constant<int, 1>{});
        break;
      case 2:
        f(std::integral_constant<int, 2>{});
        break;
      default:
        f(std::integral_constant<int, 3>{});
        break;
    }
  };

  // ---- the head-independent products of the warp's five blocks (kWarpProducts) and, with l2norm, rho = 1 / sqrt(|x|^2
  // + 1e-6) of the q and k rows (gdn-math §1.4) from the diagonals of K K^T and Q Q^T; then the norms as fp32 row
  // scalings of the products (never applied to the 16-bit rows). C fragments in registers for the whole head loop.
  float acc5[5][2][4];
  per_warp([&](auto wc) {
    warp_products<decltype(wc)::value, K, LDQ, BF16, BWD>(acc5, sm.x.in.q, sm.x.in.k, sm.rq, sm.rk, a.l2norm != 0,
                                                          lane);
  });
  if (!a.l2norm && tid < kC) {
    sm.rq[tid] = 1.f;
    sm.rk[tid] = 1.f;
  }
  __syncthreads();  // rho in shared memory; q, k dead: A and T reuse them
  per_warp([&](auto wc) { scale_products<decltype(wc)::value, BWD>(acc5, sm.rq, sm.rk, a.scale, lane); });

  for (int j = 0; j < a.group; ++j) {
    const int h = h0 + j;
    const float* const gam = sm.gam[j & 1];
    const float* const bet = sm.beta[j & 1];
    unsigned char* rec = a.rec + (slot * a.Hv + h) * kRecBytes;
    // ---- header: ek, eq, dk, en (gamma_n = gamma at row 63 = the last valid token: padded g = 0), by warps 2, 3
    // (warps 0, 1 build one more P block than they; the work per warp and head is balanced: kWarpProducts, the
    // rounds below)
    if (tid >= kC) {
      const int r = tid - kC;
      const float bm = store_rec_header(reinterpret_cast<float*>(rec), r, gam, sm.rq, sm.rk, bet, a.scale);
      if ((r & 31) == 0) sm.bmax[j & 1][r >> 5] = bm;
    }
    // ---- L_rs = beta_r kk_rs exp(gamma_r - gamma_s), s < r, into shared memory (fp32); P_rs = qk_rs exp(gamma_r -
    // gamma_s), s <= r (diagonal included: the output reads the post-update state), to the record as fragments.
    // The decay only where r >= s, never factored (§5.8). Branch-free: every entry's exponential is evaluated and the
    // masked ones (s > r, only in diagonal blocks) are selected away, so an overflow there never reaches L or P.
    // Then A = (I + L)^-1 in fp32 (gdn-math §5.7): each warp inverts the diagonal block of L it built itself, so only
    // its own stores have to be visible (__syncwarp), and the warps that finish L first start their inverse.
    unsigned char* const rec_p = rec + kRecHdrBytes + kRecABytes;
    per_warp([&](auto wc) { build_LP<decltype(wc)::value, LDF, P, BWD>(acc5, sm.L, rec_p, gam, bet, lane); });
    __syncwarp();
    diag_inverse16_rows(sm.L, sm.x.inv.A, LDF, 16 * warp_diag_block(w), lane);
    __syncthreads();
    // Off-diagonal blocks in two levels, A_ij = -A_ii sum_{k=j}^{i-1} L_ik A_kj (16 x 16 products on the tensor cores
    // in 3xTF32). The 32 x 32 diagonal halves first, then the lower-left half as A_(23),(01) = -A_(23) W with
    // W = L_(23),(01) A_(01): six products on the longest warp's path instead of nine by distance (2 + 3 + 4), in
    // three rounds (round 3's barrier is the end of the head's). Every block goes to the record as soon as it is final:
    // the merged ones from the registers that hold them, the diagonal ones from shared memory by warp 2 beside round 1
    // and warps 0, 1 beside round 3 (where warp 0 also forms the next head's gamma and beta), so no pass of its own
    // follows the inverse, and the four warps carry about the same number of instructions per head (warp w of every CTA
    // is expected on SM sub-partition w, which it shares with warp w of the SM's other CTAs).
    //   round 1: A_10 = -A_11 (L_10 A_00) (warp 0), A_32 = -A_33 (L_32 A_22) (warp 1), W_21 = L_21 A_11 (warp 2),
    //            W_31 = L_31 A_11 (warp 3)
    //   round 2: A_21 = -A_22 W_21 (warp 0), A_31 = -(A_32 W_21 + A_33 W_31) (warp 1),
    //            W_20 = L_20 A_00 + L_21 A_10 (warp 2), W_30 = L_30 A_00 + L_31 A_10 (warp 3)
    //   round 3: A_20 = -A_22 W_20 (warp 2), A_30 = -(A_32 W_20 + A_33 W_30) (warp 3)
    {
      constexpr int LDT = Sm::LDT;
      float* const Am = sm.x.inv.A;
      float(&W)[4][16 * LDT] = sm.x.inv.T;  // scratch: W_21, W_31, W_20, W_30
      const auto Lb = [&](int bi, int bj) { return &sm.L[16 * bi * LDF + 16 * bj]; };
      const auto Ab = [&](int bi, int bj) { return &Am[16 * bi * LDF + 16 * bj]; };
      const auto put = [&](float* dst, int ld, const float(&c)[2][4], float sgn) {
        put_block16<true>(dst, ld, c, sgn, g8, t4);  // LDF, LDT even
      };
      float acc[2][4], tmp[2][4];
      const auto zero = [](float(&c)[2][4]) {
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) c[nt][e] = 0.f;
      };
      // A diag(beta) of causal block idx as hi + lo fragments to the record, from C fragments (sgn c: the block) or
      // from A in shared memory (c null)
      const auto emit = [&](int idx, const float(*c)[4], float sgn, bool rest = false) {
        int bi, bj;
        causal_block(idx, &bi, &bj);
        float cf[2][4];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          const int s0 = 16 * bj + nt * 8 + 2 * t4;
          const float2 bs = *reinterpret_cast<const float2*>(&bet[s0]);
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            const float2 av = c ? make_float2(sgn * c[nt][2 * hf], sgn * c[nt][2 * hf + 1])
                                : *reinterpret_cast<const float2*>(&Am[(16 * bi + g8 + hf * 8) * LDF + s0]);
            cf[nt][2 * hf] = av.x * bs.x;
            cf[nt][2 * hf + 1] = av.y * bs.y;
          }
        }
        if (rest)
          store_arest<P>(reinterpret_cast<uint4*>(rec + kRecCopyBytes + idx * kRecRestBlockBytes), cf, lane);
        else
          store_afrag<P>(reinterpret_cast<uint4*>(rec + kRecHdrBytes + idx * kRecBlockBytes), cf, lane);
      };
      // Where the chunk's largest beta exceeds 1 (the header's condition; the same value in every thread) A diag(beta)
      // also goes to the record as a third part, c - hi - lo: there the chunk transition along the keys is near +-1
      // only by cancellation and the state pass's U = A diag(beta) R needs A diag(beta) to ~2^-24 (docs/chunk_fwd.md
      // "Numerics"). The lower-left blocks that no product reads are then put into A in shared memory as well, and
      // after round 3 the warps emit the rests from there (formed at the emits above, beside the merges' fragments,
      // the pass spilled at 128 registers).
      const auto a_rest = [&] { return fmaxf(sm.bmax[j & 1][0], sm.bmax[j & 1][1]) > 1.f; };
      // round 1
      zero(acc);
      if (w < 2) {  // A_(2w+1),(2w) = -A_ii (L_ij A_jj), W_(2w+2) as the warp's scratch (written in round 2)
        const int bi = 2 * w + 1, bj = 2 * w;
        mma16_f32<false>(acc, Lb(bi, bj), LDF, Ab(bj, bj), LDF, g8, t4);
        put(W[2 + w], LDT, acc, 1.f);
        __syncwarp();
        zero(tmp);
        mma16_f32<false>(tmp, Ab(bi, bi), LDF, W[2 + w], LDT, g8, t4);
        put(Ab(bi, bj), LDF, tmp, -1.f);
        emit(w == 0 ? 1 : 8, tmp, -1.f);  // A_10, A_32
      } else {                            // W_21 (warp 2), W_31 (warp 3)
        mma16_f32<false>(acc, Lb(w, 1), LDF, Ab(1, 1), LDF, g8, t4);
        put(W[w - 2], LDT, acc, 1.f);
        if (w == 2) {  // the diagonal blocks A_00, A_11 from shared memory (final since the inverse's barrier)
          emit(0, nullptr, 1.f);
          emit(2, nullptr, 1.f);
        }
      }
      __syncthreads();
      // A_2j = -A_22 W_2j and A_3j = -(A_32 W_2j + A_33 W_3j): rounds 2 (j = 1) and 3 (j = 0); W_2j, W_3j in the
      // scratch slots 2 - 2j, 3 - 2j. No later product reads A_21, A_31, A_20, A_30: they go to the record only.
      const auto lower_left = [&](int bi, int bj) {  // acc zeroed by the caller
        if (bi == 3) mma16_f32<false>(acc, Ab(3, 2), LDF, W[2 - 2 * bj], LDT, g8, t4);
        mma16_f32<false>(acc, Ab(bi, bi), LDF, W[bi - 2 * bj], LDT, g8, t4);
        emit(bi * (bi + 1) / 2 + bj, acc, -1.f);
        if (BWD || a_rest()) put(Ab(bi, bj), LDF, acc, -1.f);
      };
      // round 2
      zero(acc);
      if (w == 0) {
        lower_left(2, 1);
      } else if (w == 1) {
        lower_left(3, 1);
      } else {  // W_20 (warp 2), W_30 (warp 3)
        mma16_f32<false>(acc, Lb(w, 0), LDF, Ab(0, 0), LDF, g8, t4);
        mma16_f32<false>(acc, Lb(w, 1), LDF, Ab(1, 0), LDF, g8, t4);
        put(W[w], LDT, acc, 1.f);
      }
      // Round 3 reads from round 2 only W_20 (warp 2's, read by warp 3) and W_30 (warp 3's own): a barrier of warps 2,
      // 3 alone, so warps 0, 1 go on to their part of round 3 at once.
      if (w >= 2) named_barrier<64>(1);
      // round 3, the diagonal blocks A_22 (warp 0), A_33 (warp 1) from shared memory and the next head's gates (warp 0)
      zero(acc);
      if (w < 2) {
        emit(w == 0 ? 5 : 9, nullptr, 1.f);
        if (w == 0 && j + 1 < a.group) gate_step(j + 1);  // buffer (j + 1) % 2: its last reader was head j - 1
      } else {
        lower_left(w, 0);
      }
      if (BWD || a_rest()) __syncthreads();  // A complete in shared memory (a_rest: uniform over the CTA)
      if (a_rest())
        for (int idx = w; idx < 10; idx += 4) emit(idx, nullptr, 1.f, true);
      if constexpr (BWD) store_bwd_records<LDF>(a, slot * a.Hv + h, Am, gam, sm.rq, sm.rk, bet, nvalid, tid);
    }
    __syncthreads();  // the next head rewrites gamma, beta, L and A
  }
}

template <int K, bool BF16, bool BWD>
int launch_intra(const ChunkKernelArgs& a, void* stream) {
  using E = typename Elem<BF16>::T;
  const size_t smem = sizeof(IntraSmem<K, E>);
  static std::atomic<uint64_t> done_mask{0};
  if (const int e = prepare_launch(chunk_fwd_intra_kernel<K, BF16, BWD>, smem, done_mask)) return e;
  if (a.rec_slots <= 0 || a.Hv <= 0) return 0;
  const int64_t ctas = a.rec_slots * a.Hqk;  // one CTA per (slot, q/k head), the GQA group inside
  if (ctas > 0x7fffffff) return static_cast<int>(cudaErrorInvalidConfiguration);
  const auto kernel = chunk_fwd_intra_kernel<K, BF16, BWD>;
  kernel<<<static_cast<unsigned>(ctas), 128, smem, static_cast<cudaStream_t>(stream)>>>(a);
  return static_cast<int>(cudaGetLastError());
}

// chunk_bwd's records (a.bwd_A, a.bwd_rows) only where chunk_bwd takes its start states from these passes: K = 128,
// bf16 (chunk_fwd_states' condition)
template <int K, bool BF16>
int launch_chunk_intra(const ChunkKernelArgs& a, void* stream) {
  if constexpr (K == 128 && BF16)
    if (a.bwd_A && a.bwd_rows) return launch_intra<K, BF16, true>(a, stream);
  if (a.bwd_A || a.bwd_rows) return static_cast<int>(cudaErrorInvalidValue);
  return launch_intra<K, BF16, false>(a, stream);
}

}  // namespace flashgdn::cuda::chunk_detail
