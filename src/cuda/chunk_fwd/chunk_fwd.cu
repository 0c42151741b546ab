// STUB until the chunk_fwd kernels land (issue 5).
#include "api/internal.hpp"
namespace flashgdn::cuda {
size_t chunk_fwd_workspace_size(const ChunkFwdParams&, const ChunkDims&) { return 0; }
Status chunk_fwd(const ChunkFwdParams&, const ChunkDims&, void*, size_t, void*) {
  return FGDN_ERROR(unsupported, "chunk_fwd: no CUDA kernel yet");
}
}  // namespace flashgdn::cuda
