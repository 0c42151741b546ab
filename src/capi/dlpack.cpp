// The DLTensor reader of include/flashgdn/dlpack.hpp.
#include "flashgdn/dlpack.hpp"

#include <cstring>
#include <string>

#include "common/checked.hpp"
#include "common/error.hpp"

namespace flashgdn {
namespace {

const char* dl_device_name(int32_t type) {
  switch (type) {
    case kDLCPU:
      return "kDLCPU";
    case kDLCUDA:
      return "kDLCUDA";
    case kDLCUDAHost:
      return "kDLCUDAHost";
    case kDLOpenCL:
      return "kDLOpenCL";
    case kDLVulkan:
      return "kDLVulkan";
    case kDLMetal:
      return "kDLMetal";
    case kDLVPI:
      return "kDLVPI";
    case kDLROCM:
      return "kDLROCM";
    case kDLROCMHost:
      return "kDLROCMHost";
    case kDLExtDev:
      return "kDLExtDev";
    case kDLCUDAManaged:
      return "kDLCUDAManaged";
  }
  return "unknown";
}

// DLPack dtype -> DType: kDLFloat 16/32/64, kDLBfloat 16, kDLInt 32/64, one lane.
bool to_dtype(DLDataType t, DType* out) {
  if (t.lanes != 1) return false;
  if (t.code == kDLFloat && t.bits == 32)
    *out = DType::f32;
  else if (t.code == kDLFloat && t.bits == 64)
    *out = DType::f64;
  else if (t.code == kDLFloat && t.bits == 16)
    *out = DType::f16;
  else if (t.code == kDLBfloat && t.bits == 16)
    *out = DType::bf16;
  else if (t.code == kDLInt && t.bits == 32)
    *out = DType::i32;
  else if (t.code == kDLInt && t.bits == 64)
    *out = DType::i64;
  else
    return false;
  return true;
}

// A DLPack dtype as its framework name: "uint8", "float16", "bfloat16", "complex64", "float32x4" (lanes > 1).
std::string dl_dtype_name(DLDataType t) {
  static constexpr const char* kCodes[] = {"int", "uint", "float", "opaque_handle", "bfloat", "complex", "bool"};
  std::string s = t.code < sizeof(kCodes) / sizeof(kCodes[0]) ? std::string(kCodes[t.code])
                                                              : detail::str_cat("dlpack_code", int(t.code), "_");
  s += std::to_string(int(t.bits));
  if (t.lanes != 1) s += detail::str_cat("x", int(t.lanes));
  return s;
}

// The device type as the integer it holds: a value outside DLDeviceType must not be read through the enum
// (loading an out-of-range value of an enum without a fixed underlying type is undefined behaviour in C++).
int32_t dl_device_code(const DLDevice& d) {
  static_assert(sizeof(d.device_type) == sizeof(int32_t), "DLDeviceType is an int-sized C enum");
  int32_t code;
  std::memcpy(&code, &d.device_type, sizeof(code));
  return code;
}

}  // namespace

Status view_of_dlpack(const DLTensor* t, const char* op, const char* name, TensorView* out) {
  *out = TensorView{};
  if (!t) return Status::OK();
  if (t->ndim < 0 || t->ndim > kMaxDims)
    return FGDN_INVALID(op, ": ", name, ": expected 0 to ", kMaxDims, " dims, got ndim = ", t->ndim);
  if (t->ndim > 0 && !t->shape) return FGDN_INVALID(op, ": ", name, ": expected a shape array, got shape == NULL");
  if (!to_dtype(t->dtype, &out->dtype))
    return FGDN_INVALID(op, ": ", name, ": expected a DLPack dtype of float16/32/64, bfloat16, int32 or int64 with ",
                        "lanes == 1, got ", dl_dtype_name(t->dtype));
  const int32_t device = dl_device_code(t->device);
  switch (device) {
    case kDLCPU:
    case kDLCUDAHost:
      out->device = DeviceType::cpu;
      out->device_id = 0;
      break;
    case kDLCUDA:
    case kDLCUDAManaged:
      out->device = DeviceType::cuda;
      out->device_id = t->device.device_id;
      break;
    default:
      return FGDN_INVALID(op, ": ", name, ": expected a device of kDLCPU, kDLCUDAHost, kDLCUDA or kDLCUDAManaged, got ",
                          dl_device_name(device), " (", device, ")");
  }
  out->ndim = t->ndim;
  int64_t compact = 1;  // product of the dims after d: the compact stride of dim d
  for (int d = t->ndim - 1; d >= 0; --d) {
    out->shape[d] = t->shape[d];
    if (t->strides) {
      out->strides[d] = t->strides[d];
    } else {
      out->strides[d] = compact;
      if (!detail::checked_mul(compact, t->shape[d], &compact))
        return FGDN_INVALID(op, ": ", name, ": expected a shape whose compact strides fit in int64 (strides == NULL), ",
                            "got dims ", d, ".. of ", name, " whose product exceeds 2^63 - 1");
    }
  }
  if (t->data) {
    uintptr_t p;
    if (__builtin_add_overflow(reinterpret_cast<uintptr_t>(t->data), t->byte_offset, &p))
      return FGDN_INVALID(op, ": ", name,
                          ": expected data + byte_offset inside the address space, got data = ", t->data,
                          " and byte_offset = ", t->byte_offset, " (the sum wraps)");
    out->data = reinterpret_cast<void*>(p);
  }
  return Status::OK();
}

}  // namespace flashgdn
