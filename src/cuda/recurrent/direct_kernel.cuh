// The "direct" recurrent kernel family: decode (T = 1), multi-token decode and speculative verify
// (gdn-math §1.2, §8), same semantics and arguments (RecurrentArgs) as recurrent_kernel.cuh; the plan
// (api/plan.cpp) runs it for single-token rows (exec.recurrent_kernel = direct forces it for every call).
//
// Why another kernel: the persistent kernel is latency bound (docs/recurrent.md): 168 registers, 3 CTAs per
// SM, a dependent chain per tile. This one is the simplest bandwidth-bound shape instead:
//   - grid = (Hv V / BV) x N CTAs of 128 threads, one (n, h, V-tile) state tile per CTA, no persistence,
//     no shared-memory staging of the state: the tile goes global -> registers -> global;
//   - T = 1 instantiations are bounded to 64 registers (8+ CTAs = 32+ warps per SM), so many tiles' loads are
//     in flight at once (memory-level parallelism hides the latency instead of a software pipeline);
//   - every thread issues all its 16-byte state loads (and q, k, v, g, beta of the first token) before the
//     first use; the only dependent loads are the index loads (slot, cu_seqlens) that address the state;
//   - T = 1 on a 16-bit pool: the state stays packed (raw 16-byte words, widened at use, direct_packed()), so
//     wide tiles (64 / 128 columns) keep 112-128 KB of state in flight per SM (docs/recurrent.md).
// A tile is owned by exactly one CTA and each thread reads its own state vectors before it writes them (the
// same positions), which keeps protocol A's read-before-write safe (gdn-math §8.2).
//
// Thread layout: the state is stored as vectors of E = 16 / sizeof(ST) elements (4 fp32 or 8 bf16/f16).
// A tile row (one key index i for K-major [K, V], one value index j for V-major [V, K]) is INNER contiguous
// elements = TPR threads x one 16-byte vector; a warp covers 32 / TPR consecutive rows (K-major fp32 BV = 32:
// 8 threads x 128 B per row, 4 rows per warp), the CTA RPP rows per pass, a thread P passes.
//
// Per token, from the pre-update state S (one pass over the registers, two reductions over K):
//   q' = scale q^, k^           (l2norm in fp32, eps inside the sqrt; computed by every warp, no barrier)
//   kS = S^T k^,  qS = S^T q'
//   u  = beta (v - alpha kS)    (2a) on S~ = alpha S
//   o  = alpha qS + (q'.k^) u   (= scale S_t^T q^, the post-update read, gdn-math §1.3)
//   S  = alpha S + k^ u^T       (2b)
// K-major reduces over the thread's rows, then the lanes of the same column group (shuffles), then the 4
// warps through shared memory (double-buffered by token parity: one barrier per token). V-major reduces over
// the TPR lanes of a row (shuffles only). Sums run in a fixed order: bitwise reproducible run to run.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "cuda/common/cuda_check.cuh"
#include "cuda/common/device_util.cuh"
#include "cuda/recurrent/recurrent_args.hpp"

namespace flashgdn::cuda {
namespace direct {

inline constexpr int kThreads = 128;
inline constexpr int kRowsY = 65535;  // rows per grid z slice (the grid's y limit)
inline constexpr int kWarps = kThreads / 32;

// ---- 16-byte state vectors: E elements of the storage type <-> fp32 (stores round to nearest even) ----
__device__ __forceinline__ void load16(const float* p, float (&x)[4]) {
  const float4 v = __ldcg(reinterpret_cast<const float4*>(p));  // .cg: the state is touched once
  x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}
__device__ __forceinline__ void store16(float* p, const float (&x)[4]) {
  *reinterpret_cast<float4*>(p) = make_float4(x[0], x[1], x[2], x[3]);
}
template <class H2>
__device__ __forceinline__ float2 to_float2(uint32_t w) {
  if constexpr (std::is_same_v<H2, __nv_bfloat162>)
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w));
  else
    return __half22float2(*reinterpret_cast<const __half2*>(&w));
}
template <class H2>
__device__ __forceinline__ uint32_t from_float2(float a, float b) {
  H2 h;
  if constexpr (std::is_same_v<H2, __nv_bfloat162>)
    h = __floats2bfloat162_rn(a, b);
  else
    h = __floats2half2_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <class H2>
__device__ __forceinline__ void load16_half(const void* p, float (&x)[8]) {
  const uint4 v = __ldcg(reinterpret_cast<const uint4*>(p));
  const float2 a = to_float2<H2>(v.x), b = to_float2<H2>(v.y), c = to_float2<H2>(v.z), d = to_float2<H2>(v.w);
  x[0] = a.x, x[1] = a.y, x[2] = b.x, x[3] = b.y, x[4] = c.x, x[5] = c.y, x[6] = d.x, x[7] = d.y;
}
template <class H2>
__device__ __forceinline__ void store16_half(void* p, const float (&x)[8]) {
  *reinterpret_cast<uint4*>(p) = make_uint4(from_float2<H2>(x[0], x[1]), from_float2<H2>(x[2], x[3]),
                                            from_float2<H2>(x[4], x[5]), from_float2<H2>(x[6], x[7]));
}
__device__ __forceinline__ void load16(const __nv_bfloat16* p, float (&x)[8]) {
  load16_half<__nv_bfloat162>(p, x);
}
__device__ __forceinline__ void store16(__nv_bfloat16* p, const float (&x)[8]) {
  store16_half<__nv_bfloat162>(p, x);
}
__device__ __forceinline__ void load16(const __half* p, float (&x)[8]) {
  load16_half<__half2>(p, x);
}
__device__ __forceinline__ void store16(__half* p, const float (&x)[8]) {
  store16_half<__half2>(p, x);
}
// Packed 16-bit states (T = 1): the raw 16-byte word stays in registers (half the registers of fp32 values)
// and element e is converted at use (exact: bf16/f16 -> fp32 widening).
__device__ __forceinline__ uint4 load16_raw(const void* p) {
  return __ldcg(reinterpret_cast<const uint4*>(p));
}
// The reduction (USE = 0) and the update (USE = 1) widen with different instructions (shift / and vs byte
// permute), so ptxas cannot merge them and keep the 2 x more fp32 values alive in between.
template <class H2, int USE>
__device__ __forceinline__ float unpack(const uint4& v, int e) {  // e is a compile-time constant after unrolling
  const uint32_t w = e < 2 ? v.x : (e < 4 ? v.y : (e < 6 ? v.z : v.w));
  float f;
  if constexpr (std::is_same_v<H2, __nv_bfloat162>) {  // bf16 -> fp32: the 16 bits moved into the high half
    if constexpr (USE == 0) {
      if (e & 1)
        asm volatile("and.b32 %0, %1, 0xffff0000;" : "=f"(f) : "r"(w));
      else
        asm volatile("shl.b32 %0, %1, 16;" : "=f"(f) : "r"(w));
    } else {
      if (e & 1)
        asm volatile("prmt.b32 %0, %1, 0, 0x3244;" : "=f"(f) : "r"(w));
      else
        asm volatile("prmt.b32 %0, %1, 0, 0x1044;" : "=f"(f) : "r"(w));
    }
  } else {
    if constexpr (USE == 0) {
      const uint16_t hb = (e & 1) ? uint16_t(w >> 16) : uint16_t(w & 0xffffu);
      asm volatile("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(hb));
    } else {
      if (e & 1)
        asm volatile(
            "{.reg .b32 t; .reg .b16 lo, hi; prmt.b32 t, %1, 0, 0x4432; mov.b32 {lo, hi}, t; cvt.f32.f16 %0, lo;}"
            : "=f"(f)
            : "r"(w));
      else
        asm volatile(
            "{.reg .b32 t; .reg .b16 lo, hi; prmt.b32 t, %1, 0, 0x4410; mov.b32 {lo, hi}, t; cvt.f32.f16 %0, lo;}"
            : "=f"(f)
            : "r"(w));
    }
  }
  return f;
}
// A register pin: the value is formed where the pin stands (the compiler sinks address arithmetic to its use
// otherwise, past pdl_start's wait; a pinned value is no longer a constant it could re-read there). Offsets, not
// pointers: a pinned pointer loses its global address space (generic loads).
__device__ __forceinline__ void pin(int64_t& x) {
  asm volatile("" : "+l"(x));
}
__device__ __forceinline__ void pin(uint32_t& x) {
  asm volatile("" : "+r"(x));
}
// The index at byte offset off of an i32 / i64 index tensor.
__device__ __forceinline__ int64_t index_at(const void* base, bool i64, int64_t off) {
  const char* p = static_cast<const char*>(base) + off;
  return i64 ? *reinterpret_cast<const int64_t*>(p) : int64_t(*reinterpret_cast<const int32_t*>(p));
}

template <class ST>
using half2_of = std::conditional_t<std::is_same_v<ST, __half>, __half2, __nv_bfloat162>;

// ---- E contiguous elements of a runtime-dtype tensor (activations, intermediate states) ----
template <int E>
__device__ __forceinline__ void load_n(const void* base, DType dt, int64_t off, float (&x)[E]) {
#pragma unroll
  for (int m = 0; m < E / 4; ++m) {
    float y[4];
    load4(base, dt, off + 4 * m, y);
    x[4 * m] = y[0], x[4 * m + 1] = y[1], x[4 * m + 2] = y[2], x[4 * m + 3] = y[3];
  }
}
template <int E>
__device__ __forceinline__ void store_n(void* base, DType dt, int64_t off, const float (&x)[E]) {
#pragma unroll
  for (int m = 0; m < E / 4; ++m) {
    const float y[4] = {x[4 * m], x[4 * m + 1], x[4 * m + 2], x[4 * m + 3]};
    store4(base, dt, off + 4 * m, y);
  }
}

template <StateLayout L, class ST, int K, int BV>
struct Tile {
  static constexpr bool kmaj = L == StateLayout::k_major;
  static constexpr int E = 16 / int(sizeof(ST));  // elements per 16-byte vector
  static constexpr int INNER = kmaj ? BV : K;     // contiguous extent of a tile row
  static constexpr int OUTER = kmaj ? K : BV;     // tile rows
  static constexpr int TPR = INNER / E;           // threads per tile row
  static constexpr int RPP = kThreads / TPR;      // tile rows per pass of the CTA
  static constexpr int P = OUTER / RPP;           // rows per thread
  static constexpr int VN = kmaj ? E : P;         // v elements a thread needs per token
  static_assert(TPR >= 1 && TPR <= 32 && (TPR & (TPR - 1)) == 0, "a tile row must fit in one warp");
  static_assert(P >= 1 && OUTER % RPP == 0, "tile rows must split evenly over the CTA");
  static_assert(K % 4 == 0 && K / 4 <= 32, "one warp stages q and k (4 elements per lane)");
};

// Raw loads of one token (issued ahead of their use; finished by the token step).
template <int VN>
struct TokLoads {
  float q[4], k[4];  // lane's 4 elements of q and k (lanes < K / 4)
  float v[VN];       // the thread's v elements
  float g, be;       // raw gate / beta (before gate_in_kernel / beta_sigmoid)
  int64_t wslot;     // protocol A: pool slot the state after this token goes to (-1: none)
};
// The same token's loads as bits (load4_bits / load1_bits), widened into TokLoads only after the state's loads are
// issued: every load of the row then goes out in one round trip after the slot.
template <int VN, bool KMAJ>
struct TokBits {
  uint4 q, k;
  uint4 v4[KMAJ ? VN / 4 : 1];  // K-major: 4 consecutive columns per vector
  uint32_t v1[KMAJ ? 1 : VN];   // V-major: one element per row
  uint32_t g, be;
  int64_t wslot;
};

}  // namespace direct

// Resident CTAs per SM the register budget is cut for (65536 / (128 x blocks) registers per thread): T = 1
// gets 64 registers (8 CTAs = 32 warps per SM) except where a thread holds 32 state elements and the tile is
// V-major or 16-bit (the conversions / per-row v): 80 registers (6 CTAs; 96 = 5 CTAs for V-major fp32), where
// 64 or 72 spill. Multi-token instantiations keep the tile plus the next token's loads: 128 registers (4 CTAs).
// 16-bit single-token states are held packed, as raw 16-byte words (half the registers). ptxas (sm_90a), no spills:
// 64 columns 72 registers K-major (7 CTAs/SM x 16 KB of state in flight) and 80 V-major (6 CTAs/SM); 128 columns
// (16-bit pools only) 128 registers (4 CTAs/SM x 32 KB); 16 / 32 columns 64 K-major, 80 V-major.
template <class ST, bool MULTI>
constexpr bool direct_packed() {
  return !MULTI && sizeof(ST) == 2;
}
template <StateLayout L, class ST, int K, int BV, bool MULTI>
constexpr int direct_min_blocks() {
  using G = direct::Tile<L, ST, K, BV>;
  if (MULTI) return 4;
  if (direct_packed<ST, MULTI>())  // P E / 2 words of packed state per thread
    return G::P * G::E >= 128 ? 4 : (G::P * G::E >= 64 && G::kmaj ? 7 : (G::kmaj ? 8 : 6));
  if (G::P * G::E >= 64) return 4;  // BV = 64 (T = 1 only): 64 state elements per thread, 128 registers
  if (G::P * G::E < 32 || (G::kmaj && sizeof(ST) == 4)) return 8;
  return !G::kmaj && sizeof(ST) == 4 ? 5 : 6;  // V-major fp32 (8 rows, 8 v values per thread) spills at 80
}

template <StateLayout L, class ST, int K, int BV, bool MULTI>
__global__ void __launch_bounds__(direct::kThreads, (direct_min_blocks<L, ST, K, BV, MULTI>()))
    recurrent_direct_kernel(const RecurrentArgs a) {
  using G = direct::Tile<L, ST, K, BV>;
  constexpr bool kmaj = G::kmaj;
  constexpr int E = G::E, TPR = G::TPR, RPP = G::RPP, P = G::P, VN = G::VN, NW = direct::kWarps;
  using Tok = direct::TokLoads<VN>;
  using Bits = direct::TokBits<VN, kmaj>;

  __shared__ __align__(16) float s_qk[NW][2][K];       // per warp: [0] q' = scale q^, [1] k^ (current token)
  __shared__ __align__(16) float s_red[2][NW][2][BV];  // K-major cross-warp partial sums, by token parity

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int c = tid % TPR;   // vector index along the tile row
  const int r0 = tid / TPR;  // tile row within a pass
  const bool has_pool = a.pool != nullptr;

  // ---- tile coordinates: grid (Hv V / BV, rows in y and z), x = h (V / BV) + V-tile. The row comes straight from
  // blockIdx (no division before the first index load: at N = 1 the kernel is a latency chain, parameter -> slot
  // -> state -> store), and consecutive CTAs still take consecutive tiles of a row (DRAM locality at large N) ----
  const int64_t n = int64_t(blockIdx.z) * direct::kRowsY + blockIdx.y;
  if (n >= a.N) return;  // the last z slice's rows past N
  // Value head, V-tile and q/k head by host-built dividers (DivU32: a multiply-high each, not a 32- or 64-bit
  // division ahead of the loads). The packed 16-bit instances keep the 32-bit division by V / BV: with a divider
  // there, ptxas spills the 64-column ones (72 / 80 registers).
  const unsigned nvt = unsigned(a.V / BV);
  uint32_t hu;
  if constexpr (direct_packed<ST, MULTI>())
    hu = blockIdx.x / nvt;
  else
    hu = udiv(blockIdx.x, a.vt);  // a.vt.d = V / BV (the launcher checks)
  const int64_t h = hu;
  const int j0 = int(blockIdx.x - hu * nvt) * BV;
  const int64_t hq = udiv(hu, a.gqa);  // GQA: value head h reads q/k head h / (Hv / Hqk) (gdn-math §2)

  // Offset of this thread's p-th vector inside a [K, V] / [V, K] state with row stride rs: tile_off(0, rs) + p RPP rs.
  auto tile_off = [&](int p, int64_t rs) -> int64_t {
    const int row = r0 + p * RPP;
    return kmaj ? int64_t(row) * rs + j0 + E * c : int64_t(j0 + row) * rs + E * c;
  };

  // ---- before pdl_start, every address and bound that needs only the arguments and the CTA: under PDL this overlaps
  // the previous kernel's tail. The chain after the wait (parameter -> slot -> state -> store at N = 1) then reads no
  // parameter whose constant-cache line is cold: the index loads issue from ready addresses, and the slot's arrival
  // needs two compares and one multiply-add before the state's loads. ----
  // The byte offsets of row n's first-level index entries: cu_seqlens[n], slot or accepted count, buffer index; their
  // widths (bit 0: cu_seqlens, 1: state_indices, 2: num_accepted, 3: inter_indices are i64).
  uint32_t i64s = uint32_t(a.cu_i64) | uint32_t(a.si_i64) << 1 | uint32_t(a.na_i64) << 2 | uint32_t(a.ii_i64) << 3;
  const auto width = [&](int bit) -> int64_t { return i64s >> bit & 1 ? 8 : 4; };
  int64_t cu_o = n * width(0), si_o = n * a.si_s[0] * width(1), na_o = n * a.na_s * width(2),
          ib_o = n * a.ii_s * width(3);
  // The state tile's first vector (pool: less the slot term; h0: of row n) and the stride of the thread's vectors (RPP
  // rows), in elements.
  int64_t tile_o = 0, tile_rs = 0;
  if (has_pool) {
    tile_o = h * a.pool_s[1] + tile_off(0, a.pool_s[2]);
    tile_rs = RPP * a.pool_s[2];
  } else {
    tile_o = n * a.h0_s[0] + h * a.h0_s[1] + tile_off(0, a.h0_s[2]);
    tile_rs = RPP * a.h0_s[2];
  }
  if constexpr (!direct_packed<ST, MULTI>()) {  // (the packed 16-bit instances spill with them pinned: left to ptxas)
    direct::pin(i64s), direct::pin(cu_o), direct::pin(si_o), direct::pin(na_o), direct::pin(ib_o);
    direct::pin(tile_o), direct::pin(tile_rs);
  }
  pdl_start();  // every global access below follows the previous kernel in the stream

  // ---- first-level index loads, all independent: cu_seqlens, 1-D slot or accepted count, buffer index ----
  int64_t bos = 0, len = a.T, b = n;
  int64_t idx = n, ib = n;
  if (a.varlen) {  // clamped into [0, T] and monotone: a garbage table stays in bounds
    const int64_t cu0 = direct::index_at(a.cu_seqlens, i64s & 1, cu_o),
                  cu1 = direct::index_at(a.cu_seqlens, i64s & 1, cu_o + width(0));
    bos = cu0 < 0 ? 0 : (cu0 > a.T ? a.T : cu0);
    const int64_t eos = cu1 < bos ? bos : (cu1 > a.T ? a.T : cu1);
    b = 0, len = eos - bos;
  }
  if (has_pool) {
    if (a.T_max > 0)  // 2-D slots: the accepted count a picks column a - 1
      idx = a.num_accepted ? direct::index_at(a.num_accepted, i64s & 4, na_o) : 1;
    else if (a.state_indices)
      idx = direct::index_at(a.state_indices, i64s & 2, si_o);
  }
  if (a.inter && a.inter_indices) ib = direct::index_at(a.inter_indices, i64s & 8, ib_o);

  // ---- one token's loads (row-relative token tr), as bits ----
  auto load_tok = [&](int64_t tr, Bits& x) {
    const int64_t t = bos + tr;
    x.q = x.k = make_uint4(0u, 0u, 0u, 0u);
    if (4 * lane < K) {
      x.q = load4_bits(a.q, a.qk_dtype, b * a.q_s[0] + t * a.q_s[1] + hq * a.q_s[2] + 4 * lane);
      x.k = load4_bits(a.k, a.qk_dtype, b * a.k_s[0] + t * a.k_s[1] + hq * a.k_s[2] + 4 * lane);
    }
    const int64_t v_off = b * a.v_s[0] + t * a.v_s[1] + h * a.v_s[2] + j0;
    if constexpr (kmaj) {
#pragma unroll
      for (int m = 0; m < VN / 4; ++m) x.v4[m] = load4_bits(a.v, a.v_dtype, v_off + E * c + 4 * m);  // j0 + E c + ..
    } else {
#pragma unroll
      for (int p = 0; p < P; ++p) x.v1[p] = load1_bits(a.v, a.v_dtype, v_off + r0 + p * RPP);  // rows j0 + r0 + p RPP
    }
    x.g = a.g ? load1_bits(a.g, a.g_dtype, b * a.g_s[0] + t * a.g_s[1] + h * a.g_s[2]) : 0u;
    x.be = a.beta ? load1_bits(a.beta, a.beta_dtype, b * a.beta_s[0] + t * a.beta_s[1] + h * a.beta_s[2]) : 0u;
    // Protocol A: the state after token tr goes to slot [n, tr] when that slot is valid (and tr < T_max).
    x.wslot = -1;
    if (has_pool && a.commit && a.T_max > 0 && tr < a.T_max) {
      const int64_t s = load_index(a.state_indices, a.si_i64, n * a.si_s[0] + tr * a.si_s[1]);
      x.wslot = slot_ok(s, a.slots, a.null_slot_is_invalid) ? s : -1;
    }
  };
  auto widen = [&](const Bits& x, Tok& y) {
    from_bits4(a.qk_dtype, x.q, y.q);
    from_bits4(a.qk_dtype, x.k, y.k);
    if constexpr (kmaj) {
#pragma unroll
      for (int m = 0; m < VN / 4; ++m) {
        float f[4];
        from_bits4(a.v_dtype, x.v4[m], f);
        y.v[4 * m] = f[0], y.v[4 * m + 1] = f[1], y.v[4 * m + 2] = f[2], y.v[4 * m + 3] = f[3];
      }
    } else {
#pragma unroll
      for (int p = 0; p < P; ++p) y.v[p] = from_bits1(a.v_dtype, x.v1[p]);
    }
    y.g = a.g ? from_bits1(a.g_dtype, x.g) : 0.f;
    y.be = a.beta ? from_bits1(a.beta_dtype, x.be) : 1.f;
    y.wslot = x.wslot;
  };

  // The first token's activations do not depend on the slot: request them before the slot-dependent loads.
  Bits cur_bits;
  if (len > 0) load_tok(0, cur_bits);
  // The head's gate parameters (gate in kernel), as bits: single-token instances request them beside the first
  // token's loads (each was a round trip of its own where g is formed); the multi-token ones, short of registers
  // across the token loop, both together where g is formed.
  uint32_t alog_bits = 0u, dtb_bits = 0u;
  auto load_gate = [&] {
    alog_bits = load1_bits(a.A_log, a.A_log_dtype, h * a.A_log_s);
    if (a.dt_bias) dtb_bits = load1_bits(a.dt_bias, a.dt_bias_dtype, h * a.dt_bias_s);
  };
  if (!MULTI && a.gate_in_kernel) load_gate();

  // ---- the row's start slot and validity (gdn-math §8.1, §8.2) ----
  int64_t slot = -1;
  bool valid = true, load;
  if (has_pool) {
    bool ok = true;
    if (a.T_max > 0) {  // idx is the accepted count
      if (idx < 1 || idx > a.T_max)
        ok = false;
      else
        slot = direct::index_at(a.state_indices, i64s & 2, si_o + (idx - 1) * a.si_s[1] * width(1));
    } else {
      slot = idx;
    }
    valid = ok && slot_ok(slot, a.slots, a.null_slot_is_invalid);
    load = valid && len > 0;
  } else {
    load = a.h0 != nullptr && (len > 0 || a.hT != nullptr);
  }

  // ---- the whole state tile: all 16-byte loads issued before any use ----
  // PACK: raw 16-bit words in sw[] (converted at use by st()), else fp32 values in s[].
  constexpr bool PACK = direct_packed<ST, MULTI>();
  using H2 = direct::half2_of<ST>;
  float s[PACK ? 1 : P][E];
  uint4 sw[PACK ? P : 1];
  if (load) {
    const ST* src = nullptr;
    if (has_pool)
      src = static_cast<const ST*>(a.pool) + slot * a.pool_s[0] + tile_o;
    else if constexpr (std::is_same_v<ST, float>)  // initial/final states are fp32 (the dispatch picks ST)
      src = a.h0 + tile_o;
    else
      __trap();  // unreachable: without a pool the dispatch instantiates ST = float
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if constexpr (PACK)
        sw[p] = direct::load16_raw(static_cast<const ST*>(a.pool) + slot * a.pool_s[0] + h * a.pool_s[1] +
                                   tile_off(p, a.pool_s[2]));  // (as before: the tile_o form spills at 72 registers)
      else
        direct::load16(src + p * tile_rs, s[p]);
    }
  } else {
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if constexpr (PACK) {
        sw[p] = make_uint4(0u, 0u, 0u, 0u);  // +0 in bf16 and f16
      } else {
#pragma unroll
        for (int e = 0; e < E; ++e) s[p][e] = 0.f;
      }
    }
  }

  // (after the state's loads: n_buf's constant-cache line is not on their chain)
  const int64_t ibuf = a.inter && valid && len > 0 && ib >= 0 && ib < a.n_buf ? ib : -1;

  // Element e of the thread's state vector p, as fp32 (USE: see direct::unpack).
  auto st = [&](int p, int e, auto use) -> float {
    if constexpr (PACK)
      return direct::unpack<H2, decltype(use)::value>(sw[p], e);
    else
      return s[p][e];
  };
  using R = std::integral_constant<int, 0>;  // reduction
  using U = std::integral_constant<int, 1>;  // update

  // PACK (T = 1 only): every state write of row vector p (intermediate entry, protocol-A slot, final pool slot)
  // is issued as soon as its fp32 values x are computed; the unpacked path writes after the token's update.
  auto emit = [&](int p, const float(&x)[E], int64_t wslot) {
    if constexpr (PACK) {
      if (ibuf >= 0 && 0 < a.T_buf) {
        const int64_t base = ibuf * a.inter_s[0] + h * a.inter_s[2];  // token 0
        direct::store_n<E>(a.inter, a.inter_dtype, base + tile_off(p, a.inter_s[3]), x);
      }
      if (wslot >= 0)
        direct::store16(static_cast<ST*>(a.pool) + wslot * a.pool_s[0] + h * a.pool_s[1] + tile_off(p, a.pool_s[2]), x);
      if (a.commit && a.T_max == 0)
        direct::store16(static_cast<ST*>(a.pool) + slot * a.pool_s[0] + h * a.pool_s[1] + tile_off(p, a.pool_s[2]), x);
    }
  };

  if (len == 0) {  // touches nothing, except the no-pool final state = initial state (gdn-math §1.5)
    if constexpr (std::is_same_v<ST, float>) {
      if (!has_pool && a.hT) {
        float* dst = a.hT + n * a.hT_s[0] + h * a.hT_s[1];
#pragma unroll
        for (int p = 0; p < P; ++p) direct::store16(dst + tile_off(p, a.hT_s[2]), s[p]);
      }
    }
    return;
  }
  if (!valid) {  // invalid row: exact zeros to its outputs, nothing else written
    const float z[4] = {0.f, 0.f, 0.f, 0.f};
    for (int64_t x = tid; x < len * (BV / 4); x += direct::kThreads) {
      const int64_t t = bos + x / (BV / 4);
      store4(a.o, a.v_dtype, b * a.o_s[0] + t * a.o_s[1] + h * a.o_s[2] + j0 + 4 * (x % (BV / 4)), z);
    }
    return;
  }

  const int64_t ntok = MULTI ? len : 1;  // the T = 1 instantiation only runs with T <= 1
#pragma unroll 1
  for (int64_t tr = 0; tr < ntok; ++tr) {
    // The next token's loads fly during this token's math (registers stay in registers across tokens).
    Bits nxt;
    if (MULTI && tr + 1 < ntok) load_tok(tr + 1, nxt);
    Tok cur;
    widen(cur_bits, cur);

    // ---- token staging, redundantly per warp (no barrier): q' = scale q^, k^, q'.k^, alpha, beta ----
    float rq, rk;
    qk_norm_factors(cur.q, cur.k, a.scale, a.l2norm, &rq, &rk);
    float qk = 0.f;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      cur.q[e] *= rq;
      cur.k[e] *= rk;
      qk = fmaf(cur.q[e], cur.k[e], qk);
    }
    qk = lane_sum<1, 32>(qk);  // q'.k^
    if (MULTI) __syncwarp();   // the warp's lanes are done reading the previous token's q', k^
    if (4 * lane < K) {
      *reinterpret_cast<float4*>(&s_qk[warp][0][4 * lane]) = make_float4(cur.q[0], cur.q[1], cur.q[2], cur.q[3]);
      *reinterpret_cast<float4*>(&s_qk[warp][1][4 * lane]) = make_float4(cur.k[0], cur.k[1], cur.k[2], cur.k[3]);
    }
    __syncwarp();
    float g = cur.g;
    if (a.gate_in_kernel) {  // g = -exp(A_log) softplus(a + dt_bias) (gdn-math §4)
      if (MULTI) load_gate();
      g = gate_from_raw(g, from_bits1(a.A_log_dtype, alog_bits),
                        a.dt_bias ? from_bits1(a.dt_bias_dtype, dtb_bits) : 0.f, a.softplus_beta, a.softplus_threshold);
    }
    const float alpha = expf(g);
    const float be = a.beta_sigmoid ? beta_from_raw(cur.be, a.allow_neg_eigval) : cur.be;
    const int64_t o_off = b * a.o_s[0] + (bos + tr) * a.o_s[1] + h * a.o_s[2] + j0;
    const float* qv = s_qk[warp][0];
    const float* kv = s_qk[warp][1];

    if constexpr (kmaj) {
      // Thread holds rows i_p = r0 + p RPP, columns j0 + E c + e. Reduce over i: own rows, then the lanes with
      // the same c (shuffles), then the warps through shared memory.
      float kS[E], qS[E];
#pragma unroll
      for (int e = 0; e < E; ++e) kS[e] = 0.f, qS[e] = 0.f;
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const float ki = kv[r0 + p * RPP], qi = qv[r0 + p * RPP];
#pragma unroll
        for (int e = 0; e < E; ++e) kS[e] = fmaf(st(p, e, R{}), ki, kS[e]), qS[e] = fmaf(st(p, e, R{}), qi, qS[e]);
      }
#pragma unroll
      for (int e = 0; e < E; ++e) kS[e] = lane_sum<TPR, 32>(kS[e]), qS[e] = lane_sum<TPR, 32>(qS[e]);
      float(*red)[2][BV] = s_red[tr & 1];
      if (lane < TPR) {
#pragma unroll
        for (int e = 0; e < E; e += 4) {
          *reinterpret_cast<float4*>(&red[warp][0][E * c + e]) = make_float4(kS[e], kS[e + 1], kS[e + 2], kS[e + 3]);
          *reinterpret_cast<float4*>(&red[warp][1][E * c + e]) = make_float4(qS[e], qS[e + 1], qS[e + 2], qS[e + 3]);
        }
      }
      __syncthreads();  // one barrier per token; the parity buffer makes the next token's writes safe
      float u[E], o[E];
#pragma unroll
      for (int e = 0; e < E; e += 4) {
        float4 ks = *reinterpret_cast<const float4*>(&red[0][0][E * c + e]);
        float4 qs = *reinterpret_cast<const float4*>(&red[0][1][E * c + e]);
#pragma unroll
        for (int w = 1; w < NW; ++w) {  // fixed order: bitwise reproducible
          const float4 x = *reinterpret_cast<const float4*>(&red[w][0][E * c + e]);
          const float4 y = *reinterpret_cast<const float4*>(&red[w][1][E * c + e]);
          ks.x += x.x, ks.y += x.y, ks.z += x.z, ks.w += x.w;
          qs.x += y.x, qs.y += y.y, qs.z += y.z, qs.w += y.w;
        }
        const float kk[4] = {ks.x, ks.y, ks.z, ks.w}, qq[4] = {qs.x, qs.y, qs.z, qs.w};
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          u[e + m] = be * (cur.v[e + m] - alpha * kk[m]);  // u = beta (v - alpha S^T k^)
          o[e + m] = fmaf(qk, u[e + m], alpha * qq[m]);    // o = alpha S^T q' + (q'.k^) u
        }
      }
      if (tid < TPR) direct::store_n<E>(a.o, a.v_dtype, o_off + E * c, o);
#pragma unroll
      for (int p = 0; p < P; ++p) {  // S = alpha S + k^ u^T
        const float ki = kv[r0 + p * RPP];
        if constexpr (PACK) {
          float x[E];
#pragma unroll
          for (int e = 0; e < E; ++e) x[e] = fmaf(ki, u[e], alpha * st(p, e, U{}));
          emit(p, x, cur.wslot);
        } else {
#pragma unroll
          for (int e = 0; e < E; ++e) s[p][e] = fmaf(ki, u[e], alpha * s[p][e]);
        }
      }
    } else {
      // Thread holds rows j_p = j0 + r0 + p RPP (value index), keys i = E c + e. Reduce over i inside the TPR
      // lanes of a row: no shared memory, no barrier.
      float kc[E], qc[E];
#pragma unroll
      for (int e = 0; e < E; e += 4) {
        const float4 k4 = *reinterpret_cast<const float4*>(&kv[E * c + e]);
        const float4 q4 = *reinterpret_cast<const float4*>(&qv[E * c + e]);
        kc[e] = k4.x, kc[e + 1] = k4.y, kc[e + 2] = k4.z, kc[e + 3] = k4.w;
        qc[e] = q4.x, qc[e + 1] = q4.y, qc[e + 2] = q4.z, qc[e + 3] = q4.w;
      }
#pragma unroll
      for (int p = 0; p < P; ++p) {
        float kS = 0.f, qS = 0.f;
#pragma unroll
        for (int e = 0; e < E; ++e) kS = fmaf(st(p, e, R{}), kc[e], kS), qS = fmaf(st(p, e, R{}), qc[e], qS);
        kS = lane_sum<1, TPR>(kS);
        qS = lane_sum<1, TPR>(qS);
        const float u = be * (cur.v[p] - alpha * kS);  // u = beta (v - alpha S^T k^)
        // o = alpha S^T q' + (q'.k^) u, stored by one lane of the row (spread over lanes by p)
        if (c == p % TPR) store1(a.o, a.v_dtype, o_off + r0 + p * RPP, fmaf(qk, u, alpha * qS));
        if constexpr (PACK) {  // S^v = alpha S^v + u k^T
          float x[E];
#pragma unroll
          for (int e = 0; e < E; ++e) x[e] = fmaf(u, kc[e], alpha * st(p, e, U{}));
          emit(p, x, cur.wslot);
        } else {
#pragma unroll
          for (int e = 0; e < E; ++e) s[p][e] = fmaf(u, kc[e], alpha * s[p][e]);  // S^v = alpha S^v + u k^T
        }
      }
    }

    // ---- per-token state writes: intermediate entry (protocol B), pool slot [n, tr] (protocol A) ----
    if constexpr (!PACK) {  // (PACK wrote them in the update loop, emit())
      if (ibuf >= 0 && tr < a.T_buf) {
        const int64_t base = ibuf * a.inter_s[0] + tr * a.inter_s[1] + h * a.inter_s[2];
#pragma unroll
        for (int p = 0; p < P; ++p) direct::store_n<E>(a.inter, a.inter_dtype, base + tile_off(p, a.inter_s[3]), s[p]);
      }
      if (cur.wslot >= 0) {
        ST* dst = static_cast<ST*>(a.pool) + cur.wslot * a.pool_s[0] + h * a.pool_s[1];
#pragma unroll
        for (int p = 0; p < P; ++p) direct::store16(dst + tile_off(p, a.pool_s[2]), s[p]);
      }
    }
    if constexpr (MULTI) cur_bits = nxt;
  }

  // ---- final state: pool[slot] (1-D slots, commit) or final_state[n] (no pool) ----
  if (has_pool) {
    if constexpr (!PACK) {  // (PACK: written by emit())
      if (a.commit && a.T_max == 0) {
        ST* dst = static_cast<ST*>(a.pool) + slot * a.pool_s[0] + h * a.pool_s[1];
#pragma unroll
        for (int p = 0; p < P; ++p) direct::store16(dst + tile_off(p, a.pool_s[2]), s[p]);
      }
    }
  } else if constexpr (std::is_same_v<ST, float>) {
    if (a.hT) {
      float* dst = a.hT + n * a.hT_s[0] + h * a.hT_s[1];
#pragma unroll
      for (int p = 0; p < P; ++p) direct::store16(dst + tile_off(p, a.hT_s[2]), s[p]);
    }
  }
}

template <StateLayout L, class ST, int K, int BV, bool MULTI>
cudaError_t launch_direct_grid(const RecurrentArgs& a, dim3 grid, cudaStream_t stream) {
  return launch_pdl(recurrent_direct_kernel<L, ST, K, BV, MULTI>, grid, dim3(direct::kThreads), 0, stream, a);
}

// One CTA per (row, value head, V tile); T <= 1 takes the 64-register instantiation. BV = 64 exists for T <= 1 only
// (twice the state bytes in flight per CTA for 16-bit pools); the dispatch never asks for it with more tokens.
template <StateLayout L, class ST, int K, int BV>
cudaError_t launch_recurrent_direct(const RecurrentArgs& a, cudaStream_t stream) {
  const int64_t tiles = a.Hv * (a.V / BV), zs = (a.N + direct::kRowsY - 1) / direct::kRowsY;
  if (a.N == 0 || tiles == 0) return cudaSuccess;
  if (tiles > 0x7fffffff || zs > 65535) return cudaErrorInvalidConfiguration;  // grid limits (x, z)
  if (a.vt.d != uint32_t(a.V / BV)) return cudaErrorInvalidConfiguration;      // the divider of this tile width
  const dim3 grid{unsigned(tiles), unsigned(a.N < direct::kRowsY ? a.N : direct::kRowsY), unsigned(zs)};
  if constexpr (BV == 128) {  // 16-bit states, T = 1 only (packed: 64 registers of state per thread)
    if constexpr (sizeof(ST) == 2) {
      if (a.T > 1) return cudaErrorInvalidConfiguration;
      return launch_direct_grid<L, ST, K, BV, false>(a, grid, stream);
    } else {
      return cudaErrorInvalidConfiguration;
    }
  } else if constexpr (BV == 64) {
    if (a.T > 1) return cudaErrorInvalidConfiguration;
    return launch_direct_grid<L, ST, K, BV, false>(a, grid, stream);
  } else {
    if (a.T <= 1) return launch_direct_grid<L, ST, K, BV, false>(a, grid, stream);
    return launch_direct_grid<L, ST, K, BV, true>(a, grid, stream);
  }
}

// One translation unit per (layout, storage type) instantiates every (K, BV): they compile in parallel.
#define FGDN_INSTANTIATE_RECURRENT_DIRECT(L, ST)                                                    \
  template cudaError_t launch_recurrent_direct<L, ST, 64, 16>(const RecurrentArgs&, cudaStream_t);  \
  template cudaError_t launch_recurrent_direct<L, ST, 64, 32>(const RecurrentArgs&, cudaStream_t);  \
  template cudaError_t launch_recurrent_direct<L, ST, 128, 16>(const RecurrentArgs&, cudaStream_t); \
  template cudaError_t launch_recurrent_direct<L, ST, 128, 32>(const RecurrentArgs&, cudaStream_t); \
  template cudaError_t launch_recurrent_direct<L, ST, 64, 64>(const RecurrentArgs&, cudaStream_t);  \
  template cudaError_t launch_recurrent_direct<L, ST, 128, 64>(const RecurrentArgs&, cudaStream_t); \
  template cudaError_t launch_recurrent_direct<L, ST, 64, 128>(const RecurrentArgs&, cudaStream_t); \
  template cudaError_t launch_recurrent_direct<L, ST, 128, 128>(const RecurrentArgs&, cudaStream_t);

}  // namespace flashgdn::cuda
