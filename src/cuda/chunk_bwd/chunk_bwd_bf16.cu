// The chunk passes of chunk_bwd (chunk_bwd_kernels.cuh) for bf16 q, k, v.
#include "cuda/chunk_bwd/chunk_bwd_kernels.cuh"

namespace flashgdn::cuda {

int launch_chunk_bwd_passes_bf16(const ChunkBwdArgs& a, int64_t K, int64_t V, PassRange r, void* stream) {
  return bwd_detail::launch_passes_for<__nv_bfloat16>(a, K, V, r, stream);
}

int chunk_bwd_state_wg_ctas_per_sm_bf16(int stages, int* ctas) {
  return stages == 1 ? bwd_detail::state_wg_ctas_per_sm<__nv_bfloat16, 1>(ctas)
                     : bwd_detail::state_wg_ctas_per_sm<__nv_bfloat16, 2>(ctas);
}

}  // namespace flashgdn::cuda
