// The chunk passes of chunk_bwd (chunk_bwd_kernels.cuh) for f16 q, k, v.
#include "cuda/chunk_bwd/chunk_bwd_kernels.cuh"

namespace flashgdn::cuda {

int launch_chunk_bwd_passes_f16(const ChunkBwdArgs& a, int64_t K, int64_t V, PassRange r, void* stream) {
  return bwd_detail::launch_passes_for<__half>(a, K, V, r, stream);
}

int chunk_bwd_state_wg_ctas_per_sm_f16(int stages, int* ctas) {
  return stages == 1 ? bwd_detail::state_wg_ctas_per_sm<__half, 1>(ctas)
                     : bwd_detail::state_wg_ctas_per_sm<__half, 2>(ctas);
}

}  // namespace flashgdn::cuda
