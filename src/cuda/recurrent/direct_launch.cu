// Dispatch of the direct recurrent kernel family (direct_kernel.cuh) over (layout, storage dtype, K, V-tile).
// It covers every case the persistent kernel covers (same RecurrentArgs, same K, V in {64, 128}), so there is
// no fallback; recurrent.cu routes here when FLASHGDN_RECURRENT_DIRECT=1. Instantiations: direct_<layout>_<dtype>.cu.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdlib>
#include <cstring>

#include "cuda/common/cuda_check.cuh"
#include "cuda/recurrent/recurrent_args.hpp"

// FGDN_REC_DIRECT_WIDE=0 keeps single-token launches at 32 columns (a build switch for the comparison).
#ifndef FGDN_REC_DIRECT_WIDE
#define FGDN_REC_DIRECT_WIDE 1
#endif
// FGDN_REC_DIRECT_PACK=0: 16-bit single-token states as fp32 registers, no 128-column tile (comparison build).
#ifndef FGDN_REC_DIRECT_PACK
#define FGDN_REC_DIRECT_PACK 1
#endif

namespace flashgdn::cuda {

template <StateLayout L, class ST, int K, int BV>
cudaError_t launch_recurrent_direct(const RecurrentArgs& a, cudaStream_t stream);

namespace {

template <StateLayout L, class ST, int K>
cudaError_t direct_bv(const RecurrentArgs& a, int bv, cudaStream_t s) {
  if (bv == 128) return launch_recurrent_direct<L, ST, K, 128>(a, s);
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
  // One token, a K-major 16-bit pool and a large batch (>= 2 waves of 4 CTAs per SM): 128 columns, the packed
  // state at 4 CTAs/SM x 32 KB in flight (H200, N = 256, bf16: 160 us vs 169 us at 64 columns; V-major measured
  // 207 vs 185 us and keeps 64; docs/recurrent.md).
  const bool pool16 = a.pool != nullptr && a.pool_dtype != DType::f32;
  if (a.T <= 1 && FGDN_REC_DIRECT_WIDE && FGDN_REC_DIRECT_PACK && pool16 && a.layout == StateLayout::k_major &&
      a.V % 128 == 0 && heads * (a.V / 128) >= 8 * int64_t(sms))
    return 128;
  // One token and a large batch (>= 2 waves of 4 CTAs per SM): 64 columns, twice the state bytes in flight per
  // CTA (H200, N = 256: fp32 pool 279 vs 298 us, bf16 pool 169 vs 215 us packed; docs/recurrent.md).
  if (a.T <= 1 && FGDN_REC_DIRECT_WIDE && a.V % 64 == 0 && heads * (a.V / 64) >= 8 * int64_t(sms)) return 64;
  if (a.V % 32 == 0 && heads * (a.V / 32) >= 4 * int64_t(sms)) return 32;
  return 16;
}

// FLASHGDN_RECURRENT_PDL=1 (read once): the dispatch launches the direct kernel as a programmatic dependent launch.
// Off by default: H200 graph replay of back-to-back decode launches (docs/recurrent.md) measured N = 1 slower
// (6.59 vs 5.38 us fp32, 7.30 vs 5.32 us bf16) and N = 8 1.4-2.5% faster (fp32 12.82 vs 13.15 us); large N not
// measured.
bool recurrent_direct_pdl_default(const RecurrentArgs&) {
  static const bool on = [] {
    const char* e = std::getenv("FLASHGDN_RECURRENT_PDL");
    return e != nullptr && std::strcmp(e, "1") == 0;
  }();
  return on;
}

Status recurrent_launch_direct(const RecurrentArgs& a, int bv, void* stream) {
  if (a.K != 64 && a.K != 128) return FGDN_ERROR(unsupported, "recurrent: K = ", a.K, " on CUDA; expected 64 or 128");
  if (a.V != 64 && a.V != 128) return FGDN_ERROR(unsupported, "recurrent: V = ", a.V, " on CUDA; expected 64 or 128");
  if (a.Hqk <= 0 || a.Hv % a.Hqk != 0)
    return FGDN_INVALID("recurrent: Hv = ", a.Hv, " not a multiple of Hqk = ", a.Hqk);
  if (bv == 0) bv = recurrent_direct_default_bv(a);
  // The 128-column tile exists for single-token launches on 16-bit pools, the 64-column one for single-token
  // launches; other requests are narrowed.
  const bool pool16 = a.pool != nullptr && a.pool_dtype != DType::f32;
  if (bv == 128 && (a.T > 1 || a.V % 128 != 0 || !pool16 || !FGDN_REC_DIRECT_PACK)) bv = 64;
  if (bv == 64 && (a.T > 1 || a.V % 64 != 0)) bv = 32;
  if (bv != 16 && bv != 32 && bv != 64 && bv != 128)
    return FGDN_INVALID("recurrent: V-tile ", bv, "; expected 16, 32, 64 or 128");
  auto s = static_cast<cudaStream_t>(stream);
  FGDN_CUDA_CHECK(a.layout == StateLayout::k_major ? direct_dtype<StateLayout::k_major>(a, bv, s)
                                                   : direct_dtype<StateLayout::v_major>(a, bv, s));
  return Status::OK();
}

}  // namespace flashgdn::cuda
