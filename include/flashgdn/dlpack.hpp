// flashgdn — DLTensor -> TensorView, the one reader of a caller's DLPack tensor. The C ABI (flashgdn.h) reads every
// tensor through it, and so does the Python module (whatever the tensor's framework), so both accept the same
// tensors and reject the rest with the same message.
#pragma once

#include <dlpack/dlpack.h>

#include "flashgdn/flashgdn.hpp"

namespace flashgdn {

// Reads `t` into `*out`; a null `t` is an absent tensor. `op` and `name` name the argument in the error.
//   * dtype: kDLFloat 16/32/64, kDLBfloat 16, kDLInt 32/64, one lane;
//   * device: kDLCPU and kDLCUDAHost (pinned host memory) run on the CPU backend; kDLCUDA and kDLCUDAManaged
//     (unified memory, which the kernels address like device memory) run on the CUDA device t->device.device_id;
//     every other device is rejected;
//   * strides == NULL means compact row-major; data + byte_offset is the first element.
// The shape is not validated here (the op does that), but everything computed from it is overflow-checked: its
// compact strides and data + byte_offset.
FLASHGDN_CXX_API Status view_of_dlpack(const DLTensor* t, const char* op, const char* name, TensorView* out);

}  // namespace flashgdn
