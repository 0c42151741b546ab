// Instantiation of the wgmma state pass (chunk_fwd_state_wg.cuh) for bf16 I/O, K = V = 128.
#include "cuda/chunk_fwd/chunk_fwd_state_wg.cuh"

namespace flashgdn::cuda {

int launch_chunk_state_wg_bf16(const ChunkKernelArgs& a, const ChunkStateMaps& maps, int64_t items, int64_t tiles,
                               void* stream) {
  return chunk_detail::launch_chunk_state_wg<true>(a, maps, items, tiles, stream);
}

}  // namespace flashgdn::cuda
