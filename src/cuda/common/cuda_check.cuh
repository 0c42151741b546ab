// CUDA error -> Status, with file:line. Launchers return FGDN_CUDA_CHECK(cudaGetLastError()) after a launch.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <utility>

#include "common/error.hpp"

namespace flashgdn::cuda {
// SM count of device `dev`, queried once per device and cached (132 if the query fails):
// launch heuristics only (grid sizes, tile widths, the segment split), never correctness. device.cu.
int device_sm_count(int dev);

// Host side of a launcher: opt the kernel in to `smem` bytes of dynamic shared memory and the whole L1 / shared
// carveout (so the occupancy it was sized for is reached), once per device (bit `dev` of done_mask; a launch path
// then costs one cudaGetDevice). Returns 0 or a cudaError_t.
template <class Kernel>
int prepare_launch(Kernel kernel, size_t smem, std::atomic<uint64_t>& done_mask) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return static_cast<int>(e);
  const uint64_t bit = uint64_t(1) << (dev & 63);
  if (done_mask.load(std::memory_order_acquire) & bit) return 0;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e == cudaSuccess) e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
  if (e != cudaSuccess) return static_cast<int>(e);
  done_mask.fetch_or(bit, std::memory_order_acq_rel);
  return 0;
}
// Resident CTAs per SM of `kernel` at `threads` and `smem` bytes of dynamic shared memory (the occupancy API, after
// prepare_launch), into *per_sm: queried once per device `dev` and kept in per_dev[dev] (0: not queried yet), so a
// launch path costs a load. A persistent grid is sized from it. Returns a cudaError_t.
template <class Kernel>
cudaError_t resident_ctas_per_sm(Kernel kernel, int threads, size_t smem, int dev, std::atomic<int> (&per_dev)[64],
                                 int* per_sm) {
  *per_sm = per_dev[dev & 63].load(std::memory_order_relaxed);
  if (*per_sm > 0) return cudaSuccess;
  const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, kernel, threads, smem);
  if (e != cudaSuccess) return e;
  if (*per_sm < 1) return cudaErrorInvalidConfiguration;
  per_dev[dev & 63].store(*per_sm, std::memory_order_relaxed);
  return cudaSuccess;
}
// Programmatic dependent launch allowed (cudaLaunchAttributeProgrammaticStreamSerialization): the kernel may be
// scheduled before the previous kernel in the stream completes. Only for kernels that call pdl_start (ptx.cuh)
// before their first global access. Decode kernels run a few microseconds at one request; the launch latency and
// prologue that this overlaps are a measured share of a step (docs/recurrent.md). Captured into CUDA graphs as
// programmatic edges.
inline cudaLaunchAttribute pdl_attribute() {
  cudaLaunchAttribute a = {};
  a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a.val.programmaticStreamSerializationAllowed = 1;
  return a;
}
template <class... KArgs, class... Args>
cudaError_t launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                       Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = stream;
  cudaLaunchAttribute attr[1] = {pdl_attribute()};
  cfg.attrs = attr, cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}
}  // namespace flashgdn::cuda

#define FGDN_CUDA_CHECK(expr)                                                                    \
  do {                                                                                           \
    cudaError_t _fgdn_e = (expr);                                                                \
    if (_fgdn_e != cudaSuccess)                                                                  \
      return FGDN_ERROR(cuda_error, "CUDA error in ", #expr, ": ", cudaGetErrorString(_fgdn_e)); \
  } while (0)
