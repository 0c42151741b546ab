// Device facts for the API layer.
#include <cuda_runtime.h>

#include "api/internal.hpp"

namespace flashgdn::cuda {

bool device_present() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

}  // namespace flashgdn::cuda
