// The PTX building blocks every kernel shares (sm_80+ / sm_90a): shared-memory addresses, cp.async copies and
// their groups, 16-byte global stores, named barriers, ldmatrix, mma.sync m16n8k16 (16-bit operands) and the 3xTF32
// m16n8k8 product. wgmma.cuh (Hopper warpgroup MMA) and mbarrier.cuh build on these.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flashgdn::cuda {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- programmatic dependent launch (sm_90; the host side is pdl_attribute, cuda_check.cuh) -------------------
// griddepcontrol.wait blocks until the previous kernel in the stream has completed and its writes are visible (a
// no-op without the PDL attribute); launch_dependents lets the next kernel in the stream be scheduled, so its launch
// and prologue overlap this grid (its own wait still waits for this grid's completion: the trigger's place decides
// speed, never correctness). The two apart serve a kernel that takes its inputs from the kernel before it through
// flags of its own (chunk_bwd's fused pass: a value head's items once that head's chain CTAs have released it) and
// waits for that kernel's completion only where its own completion must imply it.
__device__ __forceinline__ void pdl_wait() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}
__device__ __forceinline__ void pdl_trigger() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}
// A kernel launched with the PDL attribute may start while the previous kernel in the stream still runs; it calls
// pdl_start() before its first global read or write. Triggering before the wait would let a chain of steps launch
// ahead and hold SM slots idle.
__device__ __forceinline__ void pdl_start() {
  pdl_wait();
  pdl_trigger();
}

// ---- flags between CTAs, at GPU scope: a release publishes every write that precedes it (this thread's, and the
// CTA's before a barrier this thread passed), an acquire that reads the released value sees them.
__device__ __forceinline__ int32_t ld_acquire_gpu(const int32_t* p) {
  int32_t v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_gpu(int32_t* p, int32_t v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
// old = *p, *p = old + v, acquire and release
__device__ __forceinline__ int32_t atom_add_acq_rel_gpu(int32_t* p, int32_t v) {
  int32_t old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;\n" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

// ---- cp.async: global -> shared copies that need no registers ------------------------------------------------
// A thread that copies a vector and later reads it back itself needs only the wait, no barrier.
template <int BYTES>
__device__ __forceinline__ void cp_async(void* smem, const void* gmem) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async of 4, 8 or 16 bytes");
  if constexpr (BYTES == 16)  // .cg: cache in L2 only (streamed data)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "n"(BYTES)
                 : "memory");
}
// 16 bytes, or 16 zero bytes when !valid (src-size 0: nothing is read; src must still be a mapped address): padding
// rows then land by the same asynchronous copy as the data, so one completion mechanism covers both.
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Wait until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
  cp_async_wait<0>();
}

// One 16-byte global store of four 32-bit words (st.global.v4: the compiler may split a vector store through a
// cast pointer into narrower ones).
__device__ __forceinline__ void st_global_v4(void* p, uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(x), "r"(y), "r"(z), "r"(w));
}
// One 8-byte global store of two 32-bit words (a uint2 store through a cast __half pointer compiled to two).
__device__ __forceinline__ void st_global_v2(void* p, uint32_t x, uint32_t y) {
  asm volatile("st.global.v2.b32 [%0], {%1, %2};\n" ::"l"(p), "r"(x), "r"(y));
}

// Named barrier `id` (1-15; 0 is __syncthreads) over COUNT threads, a multiple of 32: ordering inside a group of
// warps (a warpgroup, a column half) without stopping the rest of the CTA.
template <int COUNT>
__device__ __forceinline__ void named_barrier(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(COUNT) : "memory");
}

// ---- ldmatrix: four 8x8 b16 matrices; lane l supplies the row address of matrix l / 8 ----------------------------
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

// ---- mma.sync ---------------------------------------------------------------------------------------------------
// d += a * b, m16n8k16, bf16 (BF16) or f16 operands, fp32 accumulation.
template <bool BF16>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
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

// 3xTF32: x = big + small with both parts tf32 (round to nearest); big*big + big*small + small*big is fp32-accurate
// (~2^-21 relative per product) on the tensor cores. ROUND_SMALL = false truncates the small part instead (one AND
// for the second conversion, which sm_90 emulates in four instructions): its error, 2^-10 of a part that is at most
// 2^-11 of x, keeps the product at ~2^-21. It also forms big in integer arithmetic, (bits + 2^12) & ~(2^13 - 1):
// half a tf32 ulp added to the magnitude and the 13 low bits dropped is round to nearest, ties away, the same bits
// as cvt.rna.tf32.f32 for every finite x and +-inf (two instructions against the emulation's four, which adds a
// non-finite guard). A NaN x may give any big, but rest = x - big is NaN, so small and the products stay NaN.
template <bool ROUND_SMALL = true>
__device__ __forceinline__ void split_tf32(float x, uint32_t& big, uint32_t& small) {
  if constexpr (ROUND_SMALL) {
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(big) : "f"(x));
    const float rest = x - __uint_as_float(big);
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(small) : "f"(rest));
  } else {
    big = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
    small = __float_as_uint(x - __uint_as_float(big)) & 0xffffe000u;
  }
}
// d += a b, m16n8k8, tf32 operands, fp32 accumulation.
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace flashgdn::cuda
