// Instantiations of the fused kernel (chunk_fwd_kernel_wide.cuh, FLASHGDN_CHUNK_IMPL=wide) for f16 I/O, K = 64, 128.
#include "cuda/chunk_fwd/chunk_fwd_kernel_wide.cuh"

namespace flashgdn::cuda {

int launch_chunk_kernel_wide_f16(const ChunkKernelArgs& a, int64_t K, int64_t items, int64_t tiles, void* stream) {
  using chunk_detail::launch_chunk_kernel_wide;
  return K == 64 ? launch_chunk_kernel_wide<64, false>(a, items, tiles, stream)
                 : launch_chunk_kernel_wide<128, false>(a, items, tiles, stream);
}

}  // namespace flashgdn::cuda
