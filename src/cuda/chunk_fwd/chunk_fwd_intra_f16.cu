// Instantiations of the intra-chunk pass (chunk_fwd_intra.cuh) for f16 I/O, K = 64, 128.
#include "cuda/chunk_fwd/chunk_fwd_intra.cuh"

namespace flashgdn::cuda {

int launch_chunk_intra_f16(const ChunkKernelArgs& a, int64_t K, void* stream) {
  using chunk_detail::launch_chunk_intra;
  return K == 64 ? launch_chunk_intra<64, false>(a, stream) : launch_chunk_intra<128, false>(a, stream);
}

}  // namespace flashgdn::cuda
