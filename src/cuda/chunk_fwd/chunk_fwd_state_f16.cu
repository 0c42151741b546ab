// Instantiations of the state pass (chunk_fwd_state.cuh) for f16 I/O: K = 64, 128 x one or two 64-column value
// tiles per CTA (V = 64, 128).
#include "cuda/chunk_fwd/chunk_fwd_state.cuh"

namespace flashgdn::cuda {

int launch_chunk_state_f16(const ChunkKernelArgs& a, int64_t K, int64_t items, int64_t tiles, void* stream) {
  using chunk_detail::launch_chunk_state;
  if (a.V == 64)
    return K == 64 ? launch_chunk_state<64, false, 1>(a, items, tiles, stream)
                   : launch_chunk_state<128, false, 1>(a, items, tiles, stream);
  return K == 64 ? launch_chunk_state<64, false, 2>(a, items, tiles, stream)
                 : launch_chunk_state<128, false, 2>(a, items, tiles, stream);
}

}  // namespace flashgdn::cuda
