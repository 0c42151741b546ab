// Dispatch of the direct recurrent kernel family (direct_kernel.cuh) over (layout, storage dtype, K, V-tile).
// It covers every case the persistent kernel covers (same RecurrentArgs, same K, V in {64, 128}), so there is
// no fallback; recurrent.cu routes here when FLASHGDN_RECURRENT_DIRECT=1. Instantiations: direct_<layout>_<dtype>.cu.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/cuda_check.cuh"
#include "cuda/recurrent/recurrent_args.hpp"

// FGDN_REC_DIRECT_WIDE=0 keeps single-token launches at 32 columns (a build switch for the comparison).
#ifndef FGDN_REC_DIRECT_WIDE
#define FGDN_REC_DIRECT_WIDE 1
#endif

namespace flashgdn::cuda {

template <StateLayout L, class ST, int K, int BV>
cudaError_t launch_recurrent_direct(const RecurrentArgs& a, cudaStream_t stream);

namespace {

template <StateLayout L, class ST, int K>
cudaError_t direct_bv(const RecurrentArgs& a, int bv, cudaStream_t s) {
  if (bv == 64) return launch_recurrent_direct<L, ST, K, 64>(a, s);
  return bv == 16 ? launch_recurrent_direct<L, ST, K, 16>(a, s) : launch_recurrent_direct<L, ST, K, 32>(a, s);
}

template <StateLayout L, class ST>
cudaError_t direct_k(const RecurrentArgs& a, int bv, cudaStream_t s) {
  return a.K == 64 ? direct_bv<L, ST, 64>(a, bv, s) : direct_bv<L, ST, 128>(a, bv, s);
}

template <StateLayout L>
cudaError_t direct_dtype(const RecurrentArgs& a, int bv, cudaStream_t s) {
  if (!a.pool) return direct_k<L, float>(a, bv, s);  // initial/final state are fp32
  switch (a.pool_dtype) {
    case DType::bf16:
      return direct_k<L, __nv_bfloat16>(a, bv, s);
    case DType::f16:
      return direct_k<L, __half>(a, bv, s);
    default:
      return direct_k<L, float>(a, bv, s);
  }
}

}  // namespace

int recurrent_direct_default_bv(const RecurrentArgs& a) {
  // One CTA per tile, no persistence: 32 columns (128 B fp32 rows) once that gives >= 4 CTAs per SM; a small
  // batch (N = 1: 32 heads) is spread over more SMs with 16.
  const int sms = current_sm_count();
  const int64_t heads = a.N * a.Hv;
  // One token and a large batch (>= 2 waves of 4 CTAs per SM): 64 columns, twice the state bytes in flight per
  // CTA (H200, N = 256: fp32 pool 279 vs 298 us, bf16 pool 213 vs 250 us; docs/recurrent.md).
  if (a.T <= 1 && FGDN_REC_DIRECT_WIDE && a.V % 64 == 0 && heads * (a.V / 64) >= 8 * int64_t(sms)) return 64;
  if (a.V % 32 == 0 && heads * (a.V / 32) >= 4 * int64_t(sms)) return 32;
  return 16;
}

Status recurrent_launch_direct(const RecurrentArgs& a, int bv, void* stream) {
  if (a.K != 64 && a.K != 128) return FGDN_ERROR(unsupported, "recurrent: K = ", a.K, " on CUDA; expected 64 or 128");
  if (a.V != 64 && a.V != 128) return FGDN_ERROR(unsupported, "recurrent: V = ", a.V, " on CUDA; expected 64 or 128");
  if (a.Hqk <= 0 || a.Hv % a.Hqk != 0)
    return FGDN_INVALID("recurrent: Hv = ", a.Hv, " not a multiple of Hqk = ", a.Hqk);
  if (bv == 0) bv = recurrent_direct_default_bv(a);
  if (bv == 64 && (a.T > 1 || a.V % 64 != 0)) bv = 32;  // the 64-column tile exists for single-token launches
  if (bv != 16 && bv != 32 && bv != 64) return FGDN_INVALID("recurrent: V-tile ", bv, "; expected 16, 32 or 64");
  auto s = static_cast<cudaStream_t>(stream);
  FGDN_CUDA_CHECK(a.layout == StateLayout::k_major ? direct_dtype<StateLayout::k_major>(a, bv, s)
                                                   : direct_dtype<StateLayout::v_major>(a, bv, s));
  return Status::OK();
}

}  // namespace flashgdn::cuda
