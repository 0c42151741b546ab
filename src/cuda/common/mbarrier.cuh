// Shared-memory mbarriers (sm_80+ arrive / cp.async arrive, sm_90 try_wait.parity): the completion mechanism of
// pipelines whose warps may drift apart by up to a stage, instead of a CTA-wide barrier per stage.
//
// A barrier completes a phase when its expected number of arrivals has been reached; phase u (0, 1, 2, ..) of a
// barrier is awaited with parity u & 1.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"

namespace flashgdn::cuda::mbar {

__device__ __forceinline__ uint32_t addr(const uint64_t* b) {
  return smem_addr(b);
}
// One thread initializes; a CTA barrier must follow before any other thread uses the barrier.
__device__ __forceinline__ void init(uint64_t* b, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(addr(b)), "r"(count) : "memory");
}
// Arrival with release semantics: this thread's prior shared-memory reads and writes happen before the phase
// completes for every waiter.
__device__ __forceinline__ void arrive(uint64_t* b) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(addr(b)) : "memory");
}
// Arrival triggered when every cp.async this thread issued before it has landed. `noinc`: the arrival is one of the
// barrier's expected count (init count = the number of threads that do this per phase).
__device__ __forceinline__ void arrive_cp_async(uint64_t* b) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(addr(b)) : "memory");
}
// Spin until phase `parity` has completed (acquire: the writes released by the arrivals are visible afterwards).
__device__ __forceinline__ void wait(uint64_t* b, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(addr(b)),
      "r"(parity)
      : "memory");
}

}  // namespace flashgdn::cuda::mbar
