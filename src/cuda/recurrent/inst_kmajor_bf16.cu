// Instantiations of the recurrent kernel for k-major bf16 storage (one file per (layout, dtype) so
// they compile in parallel).
#include "cuda/recurrent/recurrent_kernel.cuh"

namespace flashgdn::cuda {
FGDN_INSTANTIATE_RECURRENT(StateLayout::k_major, __nv_bfloat16)
}  // namespace flashgdn::cuda
