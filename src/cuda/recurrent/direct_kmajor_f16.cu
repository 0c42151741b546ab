// Instantiations of the direct recurrent kernel for k-major f16 storage (one file per (layout, dtype) so
// they compile in parallel).
#include "cuda/recurrent/direct_kernel.cuh"

namespace flashgdn::cuda {
FGDN_INSTANTIATE_RECURRENT_DIRECT(StateLayout::k_major, __half)
}  // namespace flashgdn::cuda
