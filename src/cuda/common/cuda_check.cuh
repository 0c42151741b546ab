// CUDA error -> Status, with file:line. Launchers return FGDN_CUDA_CHECK(cudaGetLastError()) after a launch.
#pragma once

#include <cuda_runtime.h>

#include "common/error.hpp"

namespace flashgdn::cuda {
// SM count of device `dev` / of the current device, queried once per device and cached (132 if the query fails):
// launch heuristics only (grid sizes, tile widths, the segment split), never correctness. device.cu.
int device_sm_count(int dev);
int current_sm_count();
}  // namespace flashgdn::cuda

#define FGDN_CUDA_CHECK(expr)                                                                    \
  do {                                                                                           \
    cudaError_t _fgdn_e = (expr);                                                                \
    if (_fgdn_e != cudaSuccess)                                                                  \
      return FGDN_ERROR(cuda_error, "CUDA error in ", #expr, ": ", cudaGetErrorString(_fgdn_e)); \
  } while (0)
