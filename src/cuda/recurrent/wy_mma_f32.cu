// Instantiations of the wy_mma recurrent kernel (K-major) for f32 storage (one file per storage type so they
// compile in parallel).
#include "cuda/recurrent/wy_mma_kernel.cuh"

namespace flashgdn::cuda {
FGDN_INSTANTIATE_RECURRENT_WY_MMA(float)
}  // namespace flashgdn::cuda
