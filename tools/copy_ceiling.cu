// The bandwidth ceiling for `flashgdn bench`: a plain coalesced 16-byte-per-thread copy kernel. (A memcpy node
// inside a CUDA graph may run on a copy engine, which is slower than the SMs: it would understate the ceiling.)
#include <cuda_runtime.h>

#include <cstddef>

namespace flashgdn::cli {

// Each thread moves 4 vectors per step, all 4 loads issued before the stores (memory-level parallelism).
__global__ void copy_kernel(const float4* __restrict__ src, float4* __restrict__ dst, size_t n) {
  constexpr int kUnroll = 4;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
    float4 r[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) r[u] = __ldcs(src + i + u * stride);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) __stcs(dst + i + u * stride, r[u]);
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

// dst <- src, `bytes` a multiple of 16.
void launch_copy(const void* src, void* dst, size_t bytes, cudaStream_t stream) {
  int sms = 132;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  copy_kernel<<<sms * 4, 512, 0, stream>>>(static_cast<const float4*>(src), static_cast<float4*>(dst), bytes / 16);
}

}  // namespace flashgdn::cli
