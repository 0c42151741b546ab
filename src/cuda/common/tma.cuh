// Hopper's tensor memory accelerator (TMA, sm_90): global -> shared copies issued by one thread and completed on an
// mbarrier by byte count, so the copying costs the other threads no instructions and no registers. Device side:
// tiled tensor copies (a box of a tensor map, 128-byte swizzle as wgmma reads it) and flat bulk copies. Host side:
// the tensor maps, encoded per call (a map is a 128-byte kernel parameter, captured by value in a CUDA graph).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"

namespace flashgdn::cuda::tma {

// The phase of `bar` also waits for `bytes` more bytes (this thread's arrival is one of the expected count).
__device__ __forceinline__ void arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

// The box of `map` at coordinates (c0 innermost .. c3) into dst (1024-byte aligned for the 128-byte swizzle);
// elements outside the tensor land as zeros. Completes `bytes of the box` on bar.
__device__ __forceinline__ void load_4d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                        uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar))
      : "memory");
}

// `bytes` contiguous bytes (a multiple of 16; both addresses 16-byte aligned) from src into dst, completed on bar.
__device__ __forceinline__ void load_bulk(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

// The box of `map` at coordinates (c0 innermost .. c3) from src (1024-byte aligned for the 128-byte swizzle) to
// global memory; elements outside the tensor are not written. The writes to src by other threads must be fenced
// (fence.proxy.async) and ordered before this by a barrier. Tracked by this thread's bulk async-group: commit_stores,
// then wait_stores_read before src is overwritten.
__device__ __forceinline__ void store_4d(const CUtensorMap* map, int c0, int c1, int c2, int c3, const void* src) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(smem_addr(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
// The box of `map` at coordinates (c0 innermost .. c4) from src to global memory, as store_4d.
__device__ __forceinline__ void store_5d(const CUtensorMap* map, int c0, int c1, int c2, int c3, int c4,
                                         const void* src) {
  asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(smem_addr(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
               : "memory");
}
__device__ __forceinline__ void commit_stores() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// Every store this thread committed has read its source (which may then be overwritten).
__device__ __forceinline__ void wait_stores_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
// Every store this thread committed but its N most recent groups has read its source: a ring of N + 1 source
// buffers, each rewritten only after the store that read it is N + 1 groups old.
template <int N>
__device__ __forceinline__ void wait_stores_read_but() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// Every store this thread committed is complete.
__device__ __forceinline__ void wait_stores() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

// Host: a rank-d map (rank <= 5) over 16-bit elements, dims[0] innermost (stride 1), strides in elements of dims
// 1 .. rank - 1, the box, the swizzle (the box row then spans it exactly; or none: the shared-memory box is row-major,
// 128-byte aligned). False where the driver or the tensor cannot take it (the strides must be positive multiples of
// 16 bytes, the base 16-byte aligned): the kernel then uses its other path.
bool encode_b16(CUtensorMap* map, const void* base, int rank, const int64_t* dims, const int64_t* strides,
                const uint32_t* box, CUtensorMapSwizzle swizzle);
// The same at rank 4 with the 128-byte swizzle (box[0] * 2 = 128 bytes: the tiles wgmma reads).
bool encode_4d_b16(CUtensorMap* map, const void* base, const int64_t (&dims)[4], const int64_t (&strides)[3],
                   const uint32_t (&box)[4]);

}  // namespace flashgdn::cuda::tma
