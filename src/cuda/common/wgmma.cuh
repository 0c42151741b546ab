// Hopper warpgroup MMA (wgmma, sm_90a) building blocks: the 128-byte-swizzled K-major shared-memory layout and its
// descriptor, m64n64k16 with f32 accumulation (A from shared memory or from registers), and
// stmatrix.trans, which stores accumulator fragments transposed into that layout. The GPU suite's K = V = 128 chunk_fwd
// cases check the layouts, descriptors and register forms end to end against the fp64 oracle.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"

namespace flashgdn::cuda::wg {

// Byte offset of 16-byte chunk c (0..7) of row r of a [rows][128 B] region in the 128-byte swizzle (the region is
// 1024-byte aligned): chunk c of row r lives at chunk c ^ (r % 8), so the 8 rows of an ldmatrix / stmatrix hit 8
// different bank groups.
__device__ __forceinline__ uint32_t swz(int r, int c) {
  return uint32_t(r * 128 + ((c ^ (r & 7)) << 4));
}

// Shared-memory matrix descriptor of a K-major, 128-byte-swizzled operand: start address >> 4 (bits 0-13), leading
// byte offset >> 4 (16-29; unused for swizzled K-major: 1), stride byte offset >> 4 (32-45; 1024 B between 8-row
// groups), swizzle mode (62-63; 1 = 128 B). A k-step of 16 elements inside a 128-byte row is +32 bytes.
__device__ __forceinline__ uint64_t desc(uint32_t addr) {
  return uint64_t((addr >> 4) & 0x3fff) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// The same descriptor split in two words, for kernels that issue many wgmma on few operands: build the low word once
// per operand (desc_lo), then each instruction's descriptor is desc_at(lo, byte offset) = one add on the low word and
// a constant high word. Rebuilding desc() per instruction costs ~7 instructions (shift, mask, or, the constant high
// word, two moves to uniform registers); the split keeps the words in uniform registers when the address is uniform.
// The add is volatile asm so that it stays next to its wgmma: as plain C++ the compiler hoists every descriptor of a
// loop (tens of 64-bit values) out of it and spills them. The start-address field cannot carry: shared addresses are
// < 2^18, so (addr + off) >> 4 < 2^14.
constexpr uint32_t kDescHi = (1024 >> 4) | (1u << 30);  // stride byte offset 1024 B, 128-byte swizzle (bits 62-63)
__device__ __forceinline__ uint32_t desc_lo(uint32_t addr) {
  return ((addr >> 4) & 0x3fff) | (1u << 16);
}
__device__ __forceinline__ uint64_t desc_at(uint32_t lo, uint32_t off) {
  uint64_t d;
  asm volatile("{\n.reg .b32 t;\nadd.u32 t, %1, %2;\nmov.b64 %0, {t, %3};\n}\n"
               : "=l"(d)
               : "r"(lo), "r"(off >> 4), "n"(kDescHi));
  return d;
}

// Shared memory written by ordinary stores or cp.async (generic proxy) must be fenced before wgmma reads it
// (async proxy): each writing thread fences, then a barrier.
__device__ __forceinline__ void fence_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wait0() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
// Wait until at most one committed group is still in flight (the newest).
__device__ __forceinline__ void wait1() {
  asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
}
// Wait until at most the two newest committed groups are still in flight.
__device__ __forceinline__ void wait2() {
  asm volatile("wgmma.wait_group.sync.aligned 2;\n" ::: "memory");
}

// The values of x are computed here, in program order with the volatile asm around it (wgmma.fence, the MMAs): an
// empty volatile asm that reads and writes each one, so that the compiler cannot sink their computation into a
// wgmma group, where ptxas would make the group wait on it.
template <int N>
__device__ __forceinline__ void pin(float (&x)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(x[i]));
}

#define FGDN_WG_D32                                                                                           \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),  \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define FGDN_WG_D32_STR                                                                                             \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31}"

#define FGDN_WG_D16                                                                                           \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define FGDN_WG_D16_STR "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"

// d (+)= A B, m64nNk16 (N = 64 or 32), bf16, both operands from shared memory in the 128-byte-swizzled [rows][64]
// tiles above; TA / TB = 1: that operand is MN-major (the tile's rows are the k index: A^T or B as stored, a k step of
// 16 is 16 rows = 2048 bytes), else K-major (rows m or n, a k step 32 bytes). One descriptor form serves both: in an
// MN-major tile the stride between 8-row groups is the same 1024 bytes, and an operand of at most 64 columns needs no
// leading byte offset. Any product of stored tiles thus runs without a transposed copy.
template <int N, int TA, int TB>
__device__ __forceinline__ void mma_ss_t(float (&d)[N / 2], uint64_t da, uint64_t db, int accumulate) {
  static_assert((N == 64 || N == 32) && (TA == 0 || TA == 1) && (TB == 0 || TB == 1), "m64n64 / m64n32, 0 or 1");
  if constexpr (N == 64) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " FGDN_WG_D32_STR ", %32, %33, p, 1, 1, %35, %36;\n}\n"
        : FGDN_WG_D32
        : "l"(da), "l"(db), "r"(accumulate), "n"(TA), "n"(TB));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " FGDN_WG_D16_STR ", %16, %17, p, 1, 1, %19, %20;\n}\n"
        : FGDN_WG_D16
        : "l"(da), "l"(db), "r"(accumulate), "n"(TA), "n"(TB));
  }
}

// d (+)= A B, m64n64k16, A [64][16] and B^T [64][16] from shared memory (K-major descriptors). The accumulator of
// warp w of the warpgroup: d[4 jn + e] is row 16 w + lane / 4 + 8 (e / 2), column 8 jn + 2 (lane % 4) + e % 2
// (jn = 0..7). accumulate = 0 overwrites d: a fresh accumulator needs no zeroing instructions, which would otherwise
// sit inside a wgmma group and make ptxas serialize it.
template <bool BF16>
__device__ __forceinline__ void mma_ss_n64(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
  if constexpr (BF16) {
    mma_ss_t<64, 0, 0>(d, da, db, accumulate);
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " FGDN_WG_D32_STR ", %32, %33, p, 1, 1, 0, 0;\n}\n"
        : FGDN_WG_D32
        : "l"(da), "l"(db), "r"(accumulate));
  }
}

// d (+)= A B, m64n64k16, A from registers (mma.m16n8k16 A fragments of the warp's 16 rows), B^T from shared memory.
template <bool BF16>
__device__ __forceinline__ void mma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t db, int accumulate) {
  if constexpr (BF16) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " FGDN_WG_D32_STR
        ", {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
        : FGDN_WG_D32
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " FGDN_WG_D32_STR
        ", {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
        : FGDN_WG_D32
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
  }
}

// m64n32k16, bf16 operands, f32 accumulation: the n64 forms' layouts with 4 column groups (d[4 jn + e], jn = 0..3);
// B^T [32][16] K-major from shared memory. A from shared memory (mma_ss_n32) or from registers (mma_rs_n32).
__device__ __forceinline__ void mma_ss_n32_bf16(float (&d)[16], uint64_t da, uint64_t db, int accumulate) {
  mma_ss_t<32, 0, 0>(d, da, db, accumulate);
}
__device__ __forceinline__ void mma_rs_n32_bf16(float (&d)[16], const uint32_t (&a)[4], uint64_t db, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " FGDN_WG_D16_STR
      ", {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
      : FGDN_WG_D16
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}

#undef FGDN_WG_D16
#undef FGDN_WG_D16_STR
#undef FGDN_WG_D32
#undef FGDN_WG_D32_STR

// stmatrix x4 .trans: four 8x8 16-bit matrices held as ldmatrix / mma-accumulator fragments (register i: row
// lane / 4, columns 2 (lane % 4), + 1 of matrix i) are stored transposed; lane l supplies the address of stored row
// l % 8 (= column l % 8 of the fragment) of matrix l / 8, 16 contiguous bytes.
__device__ __forceinline__ void stsm_x4_t(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

// stmatrix x4 (not transposed): the four matrices stored as they are; lane l supplies the address of row l % 8 of
// matrix l / 8, 16 contiguous bytes.
__device__ __forceinline__ void stsm_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

}  // namespace flashgdn::cuda::wg
