// TensorView helpers and library facts.
#include <cmath>

#include "api/internal.hpp"
#include "common/checked.hpp"

namespace flashgdn {

namespace {

// Name and size of each DType, indexed by its value.
struct DTypeFacts {
  const char* name;
  int64_t size;
};
constexpr DTypeFacts kDTypes[] = {{"float32", 4}, {"float64", 8}, {"bfloat16", 2},
                                  {"float16", 2}, {"int32", 4},   {"int64", 8}};
static_assert(sizeof(kDTypes) / sizeof(kDTypes[0]) == size_t(DType::i64) + 1, "one entry per DType");

const DTypeFacts* facts(DType dt) {
  const auto i = static_cast<uint32_t>(dt);  // a value outside the enum (a caller's cast) is no entry
  return i < sizeof(kDTypes) / sizeof(kDTypes[0]) ? &kDTypes[i] : nullptr;
}

}  // namespace

const char* dtype_name(DType dt) {
  const DTypeFacts* f = facts(dt);
  return f ? f->name : "unknown";
}

int64_t dtype_size(DType dt) {
  const DTypeFacts* f = facts(dt);
  return f ? f->size : 0;
}

// -1 when the shape has a negative size or its product does not fit in int64 (only an unvalidated view can).
int64_t TensorView::numel() const {
  if (ndim < 0) return 0;
  return detail::checked_product(shape, ndim < kMaxDims ? ndim : kMaxDims);
}

bool TensorView::is_contiguous() const {
  if (ndim > kMaxDims) return false;
  int64_t expect = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expect) return false;
    if (!detail::checked_mul(expect, shape[i], &expect)) return false;
  }
  return true;
}

TensorView make_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape, DeviceType device,
                       int32_t device_id) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.device_id = device_id;
  // More than kMaxDims dims keep their count (validation rejects it) but only kMaxDims sizes are stored.
  t.ndim = int32_t(shape.size());
  int i = 0;
  for (int64_t s : shape)
    if (i < kMaxDims) t.shape[i++] = s;
  // Compact strides; a product past int64 saturates (validation then rejects the view by its extent).
  int64_t st = 1;
  for (int d = i - 1; d >= 0; --d) {
    t.strides[d] = st;
    if (!detail::checked_mul(st, t.shape[d], &st)) st = INT64_MAX;
  }
  return t;
}

const char* version() {
  return "0.1.0";
}

bool cuda_available() {
#if FLASHGDN_WITH_CUDA
  return cuda::device_present();
#else
  return false;
#endif
}

}  // namespace flashgdn
