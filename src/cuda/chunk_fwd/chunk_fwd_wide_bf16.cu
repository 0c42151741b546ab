// Instantiations of the chunk kernel without the W GEMM (chunk_fwd_kernel_wide.cuh) for bf16 I/O: 4 warps
// (FLASHGDN_CHUNK_IMPL=narrow) and 8 warps at 2 CTAs per SM (the default), K = 64, 128.
#include "cuda/chunk_fwd/chunk_fwd_kernel_wide.cuh"

namespace flashgdn::cuda {

int launch_chunk_kernel_wide_bf16(const ChunkKernelArgs& a, int64_t K, int nwarps, int min_blocks, int64_t items,
                                  int64_t tiles, void* stream) {
  using chunk_detail::launch_chunk_kernel_wide;
  if (nwarps == 8) {
    if (K == 64) return launch_chunk_kernel_wide<64, true, 8, 2>(a, items, tiles, stream);
    return launch_chunk_kernel_wide<128, true, 8, 2>(a, items, tiles, stream);
  }
  if (K == 64) return launch_chunk_kernel_wide<64, true, 4, 2>(a, items, tiles, stream);
  return launch_chunk_kernel_wide<128, true, 4, 2>(a, items, tiles, stream);
}

}  // namespace flashgdn::cuda
