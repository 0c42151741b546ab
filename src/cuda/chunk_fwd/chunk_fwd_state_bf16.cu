// Instantiations of the mma.sync state pass (chunk_fwd_state.cuh) for bf16 I/O.
#include "cuda/chunk_fwd/chunk_fwd_state.cuh"

namespace flashgdn::cuda {

int launch_chunk_state_bf16(const ChunkKernelArgs& a, int64_t K, int64_t items, int64_t tiles, void* stream) {
  return chunk_detail::launch_chunk_state_for<true>(a, K, items, tiles, stream);
}

}  // namespace flashgdn::cuda
