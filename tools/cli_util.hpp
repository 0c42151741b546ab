// Helpers shared by the CLI subcommands: device buffers, host<->device copies of HostTensors, timing.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "flashgdn/flashgdn.hpp"
#include "test_util.hpp"

#if FLASHGDN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace flashgdn::cli {

using test::HostTensor;

inline double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Fails loudly in the CLI (never in the library).
inline void check(const Status& st, const char* what) {
  if (!st.ok()) {
    std::fprintf(stderr, "flashgdn: %s failed: %s\n", what, st.message().c_str());
    throw std::runtime_error(st.message());
  }
}

#if FLASHGDN_WITH_CUDA
inline void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "flashgdn: %s: %s\n", what, cudaGetErrorString(e));
    throw std::runtime_error(cudaGetErrorString(e));
  }
}

// An owning device allocation holding a tensor of a given dtype and shape.
struct DeviceTensor {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceTensor() = default;
  DeviceTensor(DType dt, std::vector<int64_t> shp) : dtype(dt), shape(std::move(shp)) {
    int64_t n = 1;
    for (auto s : shape) n *= s;
    bytes = size_t(n * dtype_size(dt));
    if (bytes) cuda_check(cudaMalloc(&ptr, bytes), "cudaMalloc");
  }
  explicit DeviceTensor(const HostTensor& h) : DeviceTensor(h.dtype, h.shape) { upload(h); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  DeviceTensor(DeviceTensor&& o) noexcept { *this = std::move(o); }
  DeviceTensor& operator=(DeviceTensor&& o) noexcept {
    std::swap(dtype, o.dtype);
    std::swap(shape, o.shape);
    std::swap(ptr, o.ptr);
    std::swap(bytes, o.bytes);
    return *this;
  }
  ~DeviceTensor() {
    if (ptr) cudaFree(ptr);
  }
  void upload(const HostTensor& h) {
    if (bytes) cuda_check(cudaMemcpy(ptr, h.data(), bytes, cudaMemcpyHostToDevice), "upload");
  }
  HostTensor download() const {
    HostTensor h(dtype, shape);
    if (bytes) cuda_check(cudaMemcpy(h.data(), ptr, bytes, cudaMemcpyDeviceToHost), "download");
    return h;
  }
  void fill_nan() {
    if (bytes) cuda_check(cudaMemset(ptr, 0xff, bytes), "memset");  // all-ones bits: NaN for every float type
  }
  TensorView view() const {
    if (shape.empty()) return TensorView{};
    TensorView v;
    v.data = ptr;
    v.dtype = dtype;
    v.device = DeviceType::cuda;
    v.ndim = int32_t(shape.size());
    int64_t st = 1;
    for (int i = v.ndim - 1; i >= 0; --i) {
      v.shape[i] = shape[size_t(i)];
      v.strides[i] = st;
      st *= shape[size_t(i)];
    }
    return v;
  }
};

// Upload a host tensor that may be absent (empty shape -> absent device tensor).
inline DeviceTensor to_device(const HostTensor& h) {
  return h.shape.empty() ? DeviceTensor{} : DeviceTensor(h);
}
#endif

}  // namespace flashgdn::cli
