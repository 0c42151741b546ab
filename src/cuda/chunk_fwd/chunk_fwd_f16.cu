// Instantiations of the fused chunk kernel for f16 I/O (K = 64, 128). One file per dtype keeps each
// translation unit small enough for a 2-core CI build.
#include "cuda/chunk_fwd/chunk_fwd_kernel.cuh"

namespace flashgdn::cuda {

int launch_chunk_kernel_f16(const ChunkKernelArgs& a, int64_t K, int64_t items, int64_t tiles, void* stream) {
  if (K == 64) return chunk_detail::launch_chunk_kernel<64, false>(a, items, tiles, stream);
  return chunk_detail::launch_chunk_kernel<128, false>(a, items, tiles, stream);
}

}  // namespace flashgdn::cuda
