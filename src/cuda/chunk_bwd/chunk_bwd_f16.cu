// The chunk passes of chunk_bwd (chunk_bwd_kernels.cuh) for f16 q, k, v.
#include "cuda/chunk_bwd/chunk_bwd_kernels.cuh"

namespace flashgdn::cuda {

int launch_chunk_bwd_passes_f16(const ChunkBwdArgs& a, int64_t K, int64_t V, void* stream) {
  return bwd_detail::launch_passes_for<__half>(a, K, V, stream);
}

}  // namespace flashgdn::cuda
