// Instantiations of the direct recurrent kernel for k-major bf16 storage (one file per (layout, dtype) so
// they compile in parallel).
#include "cuda/recurrent/direct_kernel.cuh"

namespace flashgdn::cuda {
FGDN_INSTANTIATE_RECURRENT_DIRECT(StateLayout::k_major, __nv_bfloat16)
}  // namespace flashgdn::cuda
