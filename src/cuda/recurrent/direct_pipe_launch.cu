// Dispatch of the pipelined single-token direct kernel (direct_pipe_kernel.cuh) over (storage dtype, K, V-tile,
// stages). It covers fixed T = 1 launches on a K-major pool with 1-D (or absent) state_indices and no intermediate
// states; everything else (V-major, varlen, protocol A, intermediate states, no pool, other tile widths) falls back
// to the direct kernel (recurrent_launch_direct), so recurrent_launch_pipe implements the whole contract.
// Instantiations: direct_pipe_<dtype>.cu.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdlib>
#include <cstring>

#include "cuda/common/cuda_check.cuh"
#include "cuda/recurrent/recurrent_args.hpp"

// Where the dispatch (recurrent.cu) prefers this kernel over the direct one, by pool width, from the H200
// measurements in docs/recurrent.md (graph replay, same process as the direct kernel): 16-bit pools yes (bf16,
// 2 stages x 128 threads: N = 256 158.3 vs 164.7 us, N = 128 84.3 vs 86.7 us; N = 32, below the batch threshold,
// 28.2 vs 27.2 us), fp32 pools no (N = 256 297.6 vs 283.7 us). FLASHGDN_RECURRENT_PIPE=1 / =0 overrides both.
#ifndef FGDN_REC_PIPE_DEFAULT16
#define FGDN_REC_PIPE_DEFAULT16 1
#endif
#ifndef FGDN_REC_PIPE_DEFAULT32
#define FGDN_REC_PIPE_DEFAULT32 0
#endif
// Stages of the shared-memory ring (2: 3 CTAs/SM, 3: 2 CTAs/SM at K = 128) and threads per CTA the dispatch uses
// (bf16 N = 256: 2 x 128 158.3 us, 3 x 128 168.6 us, 3 x 256 192.7 us).
#ifndef FGDN_REC_PIPE_STAGES
#define FGDN_REC_PIPE_STAGES 2
#endif
#ifndef FGDN_REC_PIPE_THREADS
#define FGDN_REC_PIPE_THREADS 128
#endif

namespace flashgdn::cuda {

template <class ST, int K, int BV, int S, int NT>
cudaError_t launch_recurrent_direct_pipe(const RecurrentArgs& a, int max_ctas, cudaStream_t stream);

namespace {

template <class ST, int BV, int S, int NT>
cudaError_t pipe_k(const RecurrentArgs& a, int max_ctas, cudaStream_t s) {
  return a.K == 64 ? launch_recurrent_direct_pipe<ST, 64, BV, S, NT>(a, max_ctas, s)
                   : launch_recurrent_direct_pipe<ST, 128, BV, S, NT>(a, max_ctas, s);
}

template <class ST, int BV>
cudaError_t pipe_cfg(const RecurrentArgs& a, int stages, int threads, int max_ctas, cudaStream_t s) {
  if (threads == 256) return pipe_k<ST, BV, 3, 256>(a, max_ctas, s);  // 3 stages only (2 spills at 3 CTAs/SM)
  return stages == 3 ? pipe_k<ST, BV, 3, 128>(a, max_ctas, s) : pipe_k<ST, BV, 2, 128>(a, max_ctas, s);
}

}  // namespace

bool recurrent_pipe_supported(const RecurrentArgs& a) {
  // 256-byte tile rows: 128 columns of a 16-bit pool, 64 of an fp32 pool.
  const int bv = a.pool_dtype == DType::f32 ? 64 : 128;
  return a.pool != nullptr && a.layout == StateLayout::k_major && !a.varlen && a.T == 1 && a.T_max == 0 &&
         a.inter == nullptr && (a.K == 64 || a.K == 128) && a.V % bv == 0 && a.Hqk > 0 && a.Hv % a.Hqk == 0;
}

int recurrent_pipe_default_bv(const RecurrentArgs& a) {
  return a.pool_dtype == DType::f32 ? 64 : 128;
}

Status recurrent_launch_pipe_config(const RecurrentArgs& a, int bv, int stages, int threads, int max_ctas,
                                    void* stream) {
  const int requested = bv;
  if (bv == 0) bv = recurrent_pipe_default_bv(a);
  if (stages == 0) stages = FGDN_REC_PIPE_STAGES;
  if (threads == 0) threads = FGDN_REC_PIPE_THREADS;
  if (!recurrent_pipe_supported(a) || bv != recurrent_pipe_default_bv(a) || (stages != 2 && stages != 3) ||
      (threads != 128 && !(threads == 256 && stages == 3)))
    return recurrent_launch_direct(a, requested, stream);
  auto s = static_cast<cudaStream_t>(stream);
  cudaError_t e;
  if (a.pool_dtype == DType::bf16)
    e = pipe_cfg<__nv_bfloat16, 128>(a, stages, threads, max_ctas, s);
  else if (a.pool_dtype == DType::f16)
    e = pipe_cfg<__half, 128>(a, stages, threads, max_ctas, s);
  else
    e = pipe_cfg<float, 64>(a, stages, threads, max_ctas, s);
  FGDN_CUDA_CHECK(e);
  return Status::OK();
}

// FLASHGDN_RECURRENT_PIPE (read once): "1" takes the pipelined kernel for every supported launch, "0" never;
// unset: large batches (>= 8 tiles per SM at the default width) on the pool widths enabled above.
bool recurrent_pipe_preferred(const RecurrentArgs& a) {
  static const int force = [] {
    const char* e = std::getenv("FLASHGDN_RECURRENT_PIPE");
    if (e == nullptr) return -1;
    return std::strcmp(e, "1") == 0 ? 1 : 0;
  }();
  if (!recurrent_pipe_supported(a) || force == 0) return false;
  if (force == 1) return true;
  const bool pool16 = a.pool_dtype != DType::f32;
  if (!(pool16 ? FGDN_REC_PIPE_DEFAULT16 : FGDN_REC_PIPE_DEFAULT32)) return false;
  return a.N * a.Hv * (a.V / recurrent_pipe_default_bv(a)) >= 8 * int64_t(current_sm_count());
}

Status recurrent_launch_pipe(const RecurrentArgs& a, int bv, void* stream) {
  return recurrent_launch_pipe_config(a, bv, 0, 0, 0, stream);
}

}  // namespace flashgdn::cuda
