// Dispatch of the wy recurrent kernel family (wy_kernel.cuh: chunked WY form over a row's tokens) over
// (storage dtype, K, V-tile). It covers K-major states in a pool with K, V in {64, 128}; V-major states and the
// pool-less initial/final contract fall back to the persistent kernel (recurrent_kernel.cuh), so
// recurrent_launch_wy implements the whole contract.
// Instantiations: wy_<dtype>.cu.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/cuda_check.cuh"
#include "cuda/recurrent/recurrent_args.hpp"

namespace flashgdn::cuda {

template <class ST, int K, int BV>
cudaError_t launch_recurrent_wy(const RecurrentArgs& a, int sms, cudaStream_t stream);

namespace {

// K = 64 always takes BV = 32 (V is 64 or 128): with 16 columns a thread would hold 2 rows and the
// instantiation spills at the 128-register budget.
template <class ST, int K>
cudaError_t wy_bv(const RecurrentArgs& a, int bv, cudaStream_t s) {
  const int sms = current_sm_count();
  if constexpr (K == 128)
    if (bv == 16) return launch_recurrent_wy<ST, K, 16>(a, sms, s);
  return launch_recurrent_wy<ST, K, 32>(a, sms, s);
}

template <class ST>
cudaError_t wy_k(const RecurrentArgs& a, int bv, cudaStream_t s) {
  return a.K == 64 ? wy_bv<ST, 64>(a, bv, s) : wy_bv<ST, 128>(a, bv, s);
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

Status recurrent_launch_wy(const RecurrentArgs& a, int bv, void* stream) {
  if (!recurrent_wy_supported(a)) return recurrent_launch_persistent(a, bv, stream);  // V-major, no pool
  if (a.Hqk <= 0 || a.Hv % a.Hqk != 0)
    return FGDN_INVALID("recurrent: Hv = ", a.Hv, " not a multiple of Hqk = ", a.Hqk);
  if (bv == 0) bv = recurrent_wy_default_bv(a);
  if (bv != 16 && bv != 32) return FGDN_INVALID("recurrent: V-tile ", bv, "; expected 16 or 32");
  auto s = static_cast<cudaStream_t>(stream);
  cudaError_t e;
  switch (a.pool_dtype) {
    case DType::bf16:
      e = wy_k<__nv_bfloat16>(a, bv, s);
      break;
    case DType::f16:
      e = wy_k<__half>(a, bv, s);
      break;
    default:
      e = wy_k<float>(a, bv, s);
      break;
  }
  FGDN_CUDA_CHECK(e);
  return Status::OK();
}

}  // namespace flashgdn::cuda
