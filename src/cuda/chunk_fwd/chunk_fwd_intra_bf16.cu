// Instantiations of the intra-chunk pass (chunk_fwd_intra.cuh) for bf16 I/O, K = 64, 128.
#include "cuda/chunk_fwd/chunk_fwd_intra.cuh"

namespace flashgdn::cuda {

int launch_chunk_intra_bf16(const ChunkKernelArgs& a, int64_t K, void* stream) {
  using chunk_detail::launch_chunk_intra;
  return K == 64 ? launch_chunk_intra<64, true>(a, stream) : launch_chunk_intra<128, true>(a, stream);
}

}  // namespace flashgdn::cuda
