// Instantiations of the wy recurrent kernel's tensor-core path (MMA = true, K-major) for f32 storage (one file
// per storage type and path so they compile in parallel).
#include "cuda/recurrent/wy_kernel.cuh"

namespace flashgdn::cuda {
FGDN_INSTANTIATE_RECURRENT_WY(float, true)
}  // namespace flashgdn::cuda
