// Dispatch of the wy recurrent kernel family (wy_kernel.cuh: chunked WY form over a row's tokens) over
// (storage dtype, K, V-tile). It covers K-major states in a pool with K, V in {64, 128}; V-major states and the
// pool-less initial/final contract fall back to the persistent kernel (recurrent_kernel.cuh), so
// recurrent_launch_wy implements the whole contract.
// Instantiations: wy_<dtype>.cu (CUDA-core reductions), wy_mma_<dtype>.cu (tensor-core reductions).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdlib>
#include <cstring>

#include "cuda/common/cuda_check.cuh"
#include "cuda/recurrent/recurrent_args.hpp"

namespace flashgdn::cuda {

template <class ST, int K, int BV, bool MMA>
cudaError_t launch_recurrent_wy(const RecurrentArgs& a, int sms, cudaStream_t stream);

namespace {

// K = 64 always takes BV = 32 (V is 64 or 128): with 16 columns a thread would hold 2 rows and the
// instantiation spills at the 128-register budget.
template <class ST, int K, bool MMA>
cudaError_t wy_bv(const RecurrentArgs& a, int bv, cudaStream_t s) {
  const int sms = current_sm_count();
  if constexpr (K == 128)
    if (bv == 16) return launch_recurrent_wy<ST, K, 16, MMA>(a, sms, s);
  return launch_recurrent_wy<ST, K, 32, MMA>(a, sms, s);
}

template <class ST>
cudaError_t wy_k(const RecurrentArgs& a, int bv, bool mma, cudaStream_t s) {
  if (mma) return a.K == 64 ? wy_bv<ST, 64, true>(a, bv, s) : wy_bv<ST, 128, true>(a, bv, s);
  return a.K == 64 ? wy_bv<ST, 64, false>(a, bv, s) : wy_bv<ST, 128, false>(a, bv, s);
}

}  // namespace

// K-major states in a pool. V-major states and the pool-less initial/final contract go to the persistent kernel.
bool recurrent_wy_supported(const RecurrentArgs& a) {
  return a.layout == StateLayout::k_major && a.pool != nullptr && (a.K == 64 || a.K == 128) &&
         (a.V == 64 || a.V == 128);
}

int recurrent_wy_default_bv(const RecurrentArgs& a) {
  // One CTA per tile: 32 columns once that gives >= 2 CTAs per SM; a small batch (N = 1: 32 heads) is spread
  // over more SMs with 16 (half the rows per thread: a shorter chain).
  const int sms = current_sm_count();
  const int64_t heads = a.N * a.Hv;
  if (a.V % 32 == 0 && heads * (a.V / 32) >= 2 * int64_t(sms)) return 32;
  return 16;
}

// FLASHGDN_RECURRENT_WY_MMA (read once): "1" runs the wy kernel's reductions and closed-form update on tensor
// cores (3xTF32 mma.sync), "0" on CUDA cores; unset: FGDN_WY_MMA_DEFAULT.
#ifndef FGDN_WY_MMA_DEFAULT
#define FGDN_WY_MMA_DEFAULT 0
#endif
bool recurrent_wy_mma_enabled() {
  static const bool v = [] {
    const char* e = std::getenv("FLASHGDN_RECURRENT_WY_MMA");
    if (e == nullptr) return bool(FGDN_WY_MMA_DEFAULT);
    return std::strcmp(e, "0") != 0;
  }();
  return v;
}

Status recurrent_launch_wy(const RecurrentArgs& a, int bv, void* stream) {
  return recurrent_launch_wy_engine(a, bv, recurrent_wy_mma_enabled(), stream);
}

Status recurrent_launch_wy_engine(const RecurrentArgs& a, int bv, bool mma, void* stream) {
  if (!recurrent_wy_supported(a)) return recurrent_launch_persistent(a, bv, stream);  // V-major, no pool
  if (a.Hqk <= 0 || a.Hv % a.Hqk != 0)
    return FGDN_INVALID("recurrent: Hv = ", a.Hv, " not a multiple of Hqk = ", a.Hqk);
  if (bv == 0) bv = recurrent_wy_default_bv(a);
  if (bv != 16 && bv != 32) return FGDN_INVALID("recurrent: V-tile ", bv, "; expected 16 or 32");
  auto s = static_cast<cudaStream_t>(stream);
  cudaError_t e;
  switch (a.pool_dtype) {
    case DType::bf16:
      e = wy_k<__nv_bfloat16>(a, bv, mma, s);
      break;
    case DType::f16:
      e = wy_k<__half>(a, bv, mma, s);
      break;
    default:
      e = wy_k<float>(a, bv, mma, s);
      break;
  }
  FGDN_CUDA_CHECK(e);
  return Status::OK();
}

}  // namespace flashgdn::cuda
