// Instantiations of the mma.sync state pass (chunk_fwd_state.cuh) for f16 I/O where K or V is 64: K = 64, 128 x one
// 64-column value tile per CTA (V = 64), K = 64 x two (V = 128). K = V = 128 is the wgmma pass's
// (chunk_fwd_state_wg.cuh).
#include "cuda/chunk_fwd/chunk_fwd_state.cuh"

namespace flashgdn::cuda {

int launch_chunk_state_f16(const ChunkKernelArgs& a, int64_t K, int64_t items, int64_t tiles, void* stream) {
  using chunk_detail::launch_chunk_state;
  if (a.V == 64)
    return K == 64 ? launch_chunk_state<64, false, 1>(a, items, tiles, stream)
                   : launch_chunk_state<128, false, 1>(a, items, tiles, stream);
  return launch_chunk_state<64, false, 2>(a, items, tiles, stream);
}

}  // namespace flashgdn::cuda
