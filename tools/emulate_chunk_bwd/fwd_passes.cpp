// chunk_fwd's passes in the host emulation (emu.hpp / emu_sm90.hpp), a translation unit of their own beside a
// harness: the intra-chunk pass, the mma.sync and wgmma state passes and the host code of
// src/cuda/chunk_fwd/chunk_fwd.cu (cuda::chunk_fwd, cuda::chunk_fwd_states). state_wg_harness.cpp checks them against
// the oracle; harness.cpp's chunk_bwd reaches them through its chunk start states from the forward
// (exec.chunk_bwd_state = 2).
#include "emu.hpp"

// The kernels see the emulation above.
#include "chunk_fwd_intra.cuh"
#include "chunk_fwd_state.cuh"
#include "chunk_fwd_state_wg.cuh"
namespace flashgdn::cuda {
int launch_chunk_intra_bf16(const ChunkKernelArgs& a, int64_t K, void* s) {
  return K == 64 ? chunk_detail::launch_chunk_intra<64, true>(a, s) : chunk_detail::launch_chunk_intra<128, true>(a, s);
}
int launch_chunk_intra_f16(const ChunkKernelArgs& a, int64_t K, void* s) {
  return K == 64 ? chunk_detail::launch_chunk_intra<64, false>(a, s)
                 : chunk_detail::launch_chunk_intra<128, false>(a, s);
}
int launch_chunk_state_wg_bf16(const ChunkKernelArgs& a, const ChunkStateMaps& m, int64_t items, int64_t tiles,
                               void* s) {
  return chunk_detail::launch_chunk_state_wg<true>(a, m, items, tiles, s);
}
int launch_chunk_state_wg_f16(const ChunkKernelArgs& a, const ChunkStateMaps& m, int64_t items, int64_t tiles,
                              void* s) {
  return chunk_detail::launch_chunk_state_wg<false>(a, m, items, tiles, s);
}
// The mma.sync state pass (K or V = 64).
int launch_chunk_state_bf16(const ChunkKernelArgs& a, int64_t K, int64_t items, int64_t tiles, void* s) {
  return chunk_detail::launch_chunk_state_for<true>(a, K, items, tiles, s);
}
int launch_chunk_state_f16(const ChunkKernelArgs& a, int64_t K, int64_t items, int64_t tiles, void* s) {
  return chunk_detail::launch_chunk_state_for<false>(a, K, items, tiles, s);
}
}  // namespace flashgdn::cuda
#include "api/plan.hpp"
#include "chunk_fwd_host.inc"
#include "cuda/common/tma.cu"
