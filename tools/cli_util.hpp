// Helpers shared by the CLI subcommands: device buffers, host<->device copies of HostTensors, timing, a CPU
// chunk_fwd that reports progress.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "flashgdn/flashgdn.hpp"
#include "progress.hpp"
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

// A view of `n` heads from head `h0` along dimension `dim` (strides unchanged); absent stays absent.
inline TensorView head_slice(TensorView t, int dim, int64_t h0, int64_t n) {
  if (!t.defined()) return t;
  t.data = static_cast<char*>(t.data) + h0 * t.strides[dim] * dtype_size(t.dtype);
  t.shape[dim] = n;
  return t;
}

// chunk_fwd on the CPU in at most `max_groups` groups of q/k heads, with progress. Heads are independent (value head h
// reads q/k head h / (Hv / Hqk) and owns its state), so the groups' results are exactly one call's.
inline void chunk_fwd_by_heads(const ChunkFwdParams& p, int64_t Hqk, int64_t Hv, const char* label,
                               int64_t max_groups = 8) {
  int64_t groups = std::min<int64_t>(Hqk, max_groups);
  while (Hqk % groups) --groups;
  const int64_t qh = Hqk / groups, vh = qh * (Hv / Hqk);
  Progress progress(label, groups);
  for (int64_t i = 0; i < groups; ++i) {
    ChunkFwdParams s = p;
    s.q = head_slice(p.q, 2, i * qh, qh), s.k = head_slice(p.k, 2, i * qh, qh);
    s.v = head_slice(p.v, 2, i * vh, vh), s.o = head_slice(p.o, 2, i * vh, vh);
    s.g = head_slice(p.g, 2, i * vh, vh), s.beta = head_slice(p.beta, 2, i * vh, vh);
    s.A_log = head_slice(p.A_log, 0, i * vh, vh), s.dt_bias = head_slice(p.dt_bias, 0, i * vh, vh);
    s.initial_state = head_slice(p.initial_state, 1, i * vh, vh);
    s.final_state = head_slice(p.final_state, 1, i * vh, vh);
    s.state_checkpoints = head_slice(p.state_checkpoints, 2, i * vh, vh);
    check(chunk_fwd(s), label);
    progress.update(i + 1);
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
