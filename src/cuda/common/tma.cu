// Tensor-map encoding through the runtime's driver entry point (no link against libcuda).
#include <cudaTypedefs.h>

#include <atomic>

#include "cuda/common/tma.cuh"

namespace flashgdn::cuda::tma {

namespace {
PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static std::atomic<PFN_cuTensorMapEncodeTiled_v12000> fn{nullptr};
  static std::atomic<bool> tried{false};
  if (auto f = fn.load(std::memory_order_acquire)) return f;
  if (tried.load(std::memory_order_acquire)) return nullptr;
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
      q == cudaDriverEntryPointSuccess)
    fn.store(reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p), std::memory_order_release);
  else
    (void)cudaGetLastError();  // not sticky, but leave no error behind for the caller's launch check
  tried.store(true, std::memory_order_release);
  return fn.load(std::memory_order_acquire);
}
}  // namespace

bool encode_b16(CUtensorMap* map, const void* base, int rank, const int64_t* dims, const int64_t* strides,
                const uint32_t* box, CUtensorMapSwizzle swizzle) {
  if (rank < 1 || rank > 5 || reinterpret_cast<uintptr_t>(base) % 16 != 0) return false;
  cuuint64_t gdim[5];
  cuuint64_t gstride[4];
  cuuint32_t bdim[5];
  const cuuint32_t estride[5] = {1, 1, 1, 1, 1};
  for (int i = 0; i < rank; ++i) {
    if (dims[i] <= 0 || dims[i] > (int64_t(1) << 32)) return false;
    gdim[i] = cuuint64_t(dims[i]);
    bdim[i] = box[i];
  }
  int64_t prev = dims[0] * 2;  // bytes
  for (int i = 0; i + 1 < rank; ++i) {
    // a dim of extent 1 is never stepped over: the previous stride stands in for its own (which may be 0)
    const int64_t s = dims[i + 1] == 1 ? prev : strides[i] * 2;
    if (s <= 0 || s % 16 != 0 || s >= (int64_t(1) << 40)) return false;
    gstride[i] = cuuint64_t(s);
    prev = s;
  }
  auto f = encoder();
  if (f == nullptr) return false;
  return f(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, cuuint32_t(rank), const_cast<void*>(base), gdim, gstride, bdim,
           estride, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

bool encode_4d_b16(CUtensorMap* map, const void* base, const int64_t (&dims)[4], const int64_t (&strides)[3],
                   const uint32_t (&box)[4]) {
  return encode_b16(map, base, 4, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B);
}

}  // namespace flashgdn::cuda::tma
