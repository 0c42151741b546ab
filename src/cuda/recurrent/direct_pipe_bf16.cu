// Instantiations of the pipelined single-token direct kernel (direct_pipe_kernel.cuh) for k-major bf16 pools (one
// file per storage type so they compile in parallel).
#include "cuda/recurrent/direct_pipe_kernel.cuh"

namespace flashgdn::cuda {
FGDN_INSTANTIATE_RECURRENT_DIRECT_PIPE(__nv_bfloat16, 128)
}  // namespace flashgdn::cuda
