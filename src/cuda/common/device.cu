// Device facts for the API layer.
#include <cuda_runtime.h>

#include <atomic>

#include "api/internal.hpp"
#include "cuda/common/cuda_check.cuh"

namespace flashgdn::cuda {

bool device_present() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

int device_sm_count(int dev) {
  static std::atomic<int> cache[64];  // racing first calls store the same value
  if (dev < 0 || dev >= 64) dev = 0;
  int v = cache[dev].load(std::memory_order_relaxed);
  if (v > 0) return v;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || v <= 0) v = 132;
  cache[dev].store(v, std::memory_order_relaxed);
  return v;
}

}  // namespace flashgdn::cuda
