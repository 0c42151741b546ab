// CUDA error -> Status, with file:line. Launchers return FGDN_CUDA_CHECK(cudaGetLastError()) after a launch.
#pragma once

#include <cuda_runtime.h>

#include "common/error.hpp"

#define FGDN_CUDA_CHECK(expr)                                                                    \
  do {                                                                                           \
    cudaError_t _fgdn_e = (expr);                                                                \
    if (_fgdn_e != cudaSuccess)                                                                  \
      return FGDN_ERROR(cuda_error, "CUDA error in ", #expr, ": ", cudaGetErrorString(_fgdn_e)); \
  } while (0)
