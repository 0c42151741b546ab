// STUB until the recurrent kernels land (issue 4).
#include "api/internal.hpp"
namespace flashgdn::cuda {
size_t recurrent_workspace_size(const RecurrentParams&, const RecurrentDims&) { return 0; }
Status recurrent(const RecurrentParams&, const RecurrentDims&, void*, size_t, void*) {
  return FGDN_ERROR(unsupported, "recurrent: no CUDA kernel yet");
}
Status recurrent_commit(const RecurrentCommitParams&, const CommitDims&, void*) {
  return FGDN_ERROR(unsupported, "recurrent_commit: no CUDA kernel yet");
}
Status gating(const GatingParams&, const GatingDims&, void*) {
  return FGDN_ERROR(unsupported, "gating: no CUDA kernel yet");
}
bool device_present() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
}  // namespace flashgdn::cuda
