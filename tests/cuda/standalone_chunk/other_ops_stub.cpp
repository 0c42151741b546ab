// Device-harness only (not built by CMake): the CUDA entry points of the other ops, so that the GPU gtest of
// chunk_fwd links against just src/api, src/cpu, src/cuda/chunk_fwd and src/cuda/common/device.cu on the device
// machine.
#include <cuda_runtime.h>

#include "api/internal.hpp"

namespace flashgdn::cuda {
size_t recurrent_workspace_size(const RecurrentParams&, const RecurrentDims&) {
  return 0;
}
Status recurrent(const RecurrentParams&, const RecurrentDims&, void*, size_t, void*) {
  return FGDN_ERROR(unsupported, "recurrent: not linked into the chunk_fwd harness");
}
Status recurrent_commit(const RecurrentCommitParams&, const CommitDims&, void*) {
  return FGDN_ERROR(unsupported, "recurrent_commit: not linked into the chunk_fwd harness");
}
Status gating(const GatingParams&, const GatingDims&, void*) {
  return FGDN_ERROR(unsupported, "gating: not linked into the chunk_fwd harness");
}
}  // namespace flashgdn::cuda
