// Instantiations of the direct recurrent kernel for v-major f32 storage (one file per (layout, dtype) so
// they compile in parallel).
#include "cuda/recurrent/direct_kernel.cuh"

namespace flashgdn::cuda {
FGDN_INSTANTIATE_RECURRENT_DIRECT(StateLayout::v_major, float)
}  // namespace flashgdn::cuda
