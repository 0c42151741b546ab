// Host emulation of the CUDA features the chunk_bwd kernels use: one std::thread per CUDA thread, blocks one at a
// time, __syncthreads as a std::barrier (threads that return drop out of it), __shfl_xor_sync as a block-wide
// exchange (every shuffle in these kernels is reached by all live threads of the block). It checks the kernels'
// index math, barriers and numerics against the CPU oracle on a machine without a GPU; it says nothing about
// warp-level timing, races between barriers or the device's shared-memory limit.
#pragma once
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __launch_bounds__(x)
#define __forceinline__ inline
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <barrier>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

inline unsigned __cvta_generic_to_shared(const void*) {
  return 0;
}
alignas(16) inline unsigned char g_smem[240000];
inline thread_local dim3 threadIdx, blockIdx;
inline std::barrier<>* g_bar = nullptr;
inline float g_xch[1024];
inline void __syncthreads() {
  g_bar->arrive_and_wait();
}
inline float __shfl_xor_sync(unsigned, float x, int m) {
  g_xch[threadIdx.x] = x;
  g_bar->arrive_and_wait();
  const float y = g_xch[threadIdx.x ^ unsigned(m)];
  g_bar->arrive_and_wait();
  return y;
}
inline float rsqrtf(float x) {
  return 1.f / std::sqrt(x);
}
template <class Kern, class... Args>
void emu_launch(Kern kernel, dim3 grid, unsigned block, Args... args) {
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        std::barrier<> bar(block);
        g_bar = &bar;
        std::vector<std::thread> th;
        for (unsigned t = 0; t < block; ++t)
          th.emplace_back([&, t] {
            threadIdx = dim3(t, 0, 0);
            blockIdx = dim3(x, y, z);
            kernel(args...);
            bar.arrive_and_drop();
          });
        for (auto& t : th) t.join();
      }
}
// The runtime calls of the launch paths.
extern "C" {
inline cudaError_t cudaGetLastError() {
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
const char* CUDARTAPI cudaGetErrorString(cudaError_t) {
  return "emulated";
}
cudaError_t CUDARTAPI cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t) {
  std::memset(p, v, n);
  return cudaSuccess;
}
}
template <class T>
cudaError_t cudaFuncSetAttribute(T, enum cudaFuncAttribute, int) {
  return cudaSuccess;
}
