// Validation of every params struct (internal.hpp): shapes, dtypes, devices, strides, aliasing, scalar options
// and, where the values live in host memory (or exec.check_indices asks for it), the index values.
// Backends receive only params that passed here, together with the resolved Dims.
//
// Every failure is FGDN_INVALID("<op>: <argument>: expected <what>, got <what>") or, for a valid request this
// build or device cannot run, FGDN_ERROR(unsupported, ...). Nothing here dereferences a non-index tensor, and
// index tensors are read only when they are host memory (ops.cpp mirrors CUDA index tensors to the host for
// exec.check_indices and checks the mirror with check_index_values, the value rules alone).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <unordered_map>
#include <vector>

#include "api/internal.hpp"
#include "api/op_table.hpp"
#include "common/checked.hpp"
#include "common/dtype.hpp"
#include "common/error.hpp"

namespace flashgdn {
namespace {

using detail::str_cat;

// The GPU kernels index token-head rows in int32 (elements in int64): keep every count below 2^31.
constexpr int64_t kInt32Max = 2147483647;
// K * V of one head's state: every backend holds one such state per (sequence, head) in flight (the CPU one
// per thread, in fp32 or fp64: at most 128 MiB). 2^24 = 4096 x 4096, far past any head dim in use.
constexpr int64_t kMaxStateElems = int64_t(1) << 24;

// ---- formatting -------------------------------------------------------------------------------------------

std::string shape_str(const TensorView& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim; ++i) s += str_cat(i ? ", " : "", t.shape[i]);
  return s + "]";
}

std::string strides_str(const TensorView& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim; ++i) s += str_cat(i ? ", " : "", t.strides[i]);
  return s + "]";
}

std::string list_str(std::initializer_list<int64_t> v) {
  std::string s = "[";
  bool first = true;
  for (int64_t x : v) {
    s += str_cat(first ? "" : ", ", x);
    first = false;
  }
  return s + "]";
}

std::string device_str(const TensorView& t) {
  if (t.device == DeviceType::cpu) return "cpu";
  if (t.device == DeviceType::cuda) return str_cat("cuda:", t.device_id);
  return str_cat("device type ", int32_t(t.device));
}

// ---- dtype sets ----------------------------------------------------------------------------------------------

using DSet = uint32_t;
constexpr DSet bit(DType d) {
  return DSet(1) << int32_t(d);
}
constexpr DSet kFloat = bit(DType::f32) | bit(DType::bf16) | bit(DType::f16);  // storage floats
constexpr DSet kF32 = bit(DType::f32);                                         // fp32 state / gate outputs
constexpr DSet kIndex = bit(DType::i32) | bit(DType::i64);

bool valid_dtype(DType d) {
  return int32_t(d) >= int32_t(DType::f32) && int32_t(d) <= int32_t(DType::i64);
}

std::string dset_str(DSet s) {
  std::vector<std::string> names;
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32, DType::i64})
    if (s & bit(d)) names.push_back(dtype_name(d));
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) out += i + 1 == names.size() ? " or " : ", ";
    out += names[i];
  }
  return out;
}

// ---- per-call context ----------------------------------------------------------------------------------------

// One tensor argument of a call, as the op table declares it (api/op_table.hpp).
struct Arg {
  const char* name;
  const TensorView* t;
  Role role;
  DClass dtypes;
  bool dense;  // on CUDA: stride-1 last dim, 16-byte aligned pointer and strides (vectorized loads)
};

// The tensor arguments of a call in table order.
struct ArgList {
  static constexpr size_t kMax = 24;
  std::array<Arg, kMax> a{};
  size_t n = 0;
  const Arg* begin() const { return a.data(); }
  const Arg* end() const { return a.data() + n; }
};

template <class P>
ArgList args_of(const P& p) {
  static_assert(Op<P>::num_tensors <= int(ArgList::kMax), "ArgList::kMax: an op with more tensors");
  ArgList l;
  Op<P>::tensors(
      [&](const TensorSpec& s, const TensorView& t) {
        l.a[l.n++] = {s.name, &t, s.role, s.dtypes, s.layout == Layout::dense};
      },
      p);
  return l;
}

struct Ctx {
  const char* op;
  ArgList args;       // the call's tensors, in table order
  bool cuda = false;  // the call's tensors live on a CUDA device

  template <class P>
  explicit Ctx(const P& p) : op(Op<P>::name), args(args_of(p)) {}

  // fp64 storage is accepted by the CPU backend only.
  DSet floats() const { return cuda ? kFloat : kFloat | bit(DType::f64); }
  DSet f32() const { return cuda ? kF32 : kF32 | bit(DType::f64); }
  DSet of(DClass k) const { return k == DClass::floats ? floats() : k == DClass::f32 ? f32() : kIndex; }
  // Says why float64 is missing from a float set.
  std::string cpu_note(DSet s) const { return cuda && (s & kF32) ? " (on CUDA)" : ""; }
};

// Element count, or -1 when the product overflows int64 (or a size is negative).
int64_t safe_numel(const TensorView& t) {
  return detail::checked_product(t.shape, t.ndim);
}

// Largest element offset (sum of stride * (size - 1)); strides are non-negative here. -1 on overflow.
int64_t max_offset(const TensorView& t) {
  int64_t off = 0;
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] <= 1) continue;
    int64_t term;
    if (__builtin_mul_overflow(t.strides[i], t.shape[i] - 1, &term) || __builtin_add_overflow(off, term, &off))
      return -1;
  }
  return off;
}

// An output must map distinct indices to distinct addresses. Sorted by stride, every stride must exceed the
// largest offset reachable by the dims with smaller strides. (Sufficient, not necessary: a few interleaved
// layouts that happen not to collide are rejected too; no framework produces them.)
bool may_self_alias(const TensorView& t) {
  std::array<std::pair<int64_t, int64_t>, kMaxDims> dims{};  // (stride, size) of dims with size > 1
  int n = 0;
  for (int i = 0; i < t.ndim; ++i)
    if (t.shape[i] > 1) dims[size_t(n++)] = {t.strides[i], t.shape[i]};
  for (int i = 1; i < n; ++i)  // insertion sort by stride: at most kMaxDims entries
    for (int j = i; j > 0 && dims[size_t(j)].first < dims[size_t(j - 1)].first; --j)
      std::swap(dims[size_t(j)], dims[size_t(j - 1)]);
  int64_t reach = 0;  // largest offset reachable by the dims already visited
  for (int i = 0; i < n; ++i) {
    if (dims[size_t(i)].first <= reach) return true;
    reach += dims[size_t(i)].first * (dims[size_t(i)].second - 1);  // cannot overflow: max_offset passed
  }
  return false;
}

// Byte range [lo, hi) touched by a non-empty tensor.
struct Range {
  uintptr_t lo = 0, hi = 0;
  bool empty() const { return hi <= lo; }
};

Range byte_range(const TensorView& t) {
  Range r;
  if (!t.defined() || safe_numel(t) <= 0) return r;
  r.lo = reinterpret_cast<uintptr_t>(t.data);
  r.hi = r.lo + uintptr_t(max_offset(t) + 1) * uintptr_t(dtype_size(t.dtype));
  return r;
}

// ---- generic checks ------------------------------------------------------------------------------------------

Status require(const Ctx& c, const char* name, const TensorView& t, const char* what) {
  if (!t.defined()) return FGDN_INVALID(c.op, ": ", name, ": expected a tensor ", what, ", got none (absent)");
  return Status::OK();
}

Status require_absent(const Ctx& c, const char* name, const TensorView& t, const char* why) {
  if (t.defined()) return FGDN_INVALID(c.op, ": ", name, ": expected absent ", why, ", got a tensor ", shape_str(t));
  return Status::OK();
}

// Exact shape, with the symbolic dims in the message: "expected shape [B, T, Hqk, K] = [1, 8, 2, 16]".
Status check_shape(const Ctx& c, const char* name, const TensorView& t, const char* doc,
                   std::initializer_list<int64_t> want) {
  if (t.ndim != int32_t(want.size()))
    return FGDN_INVALID(c.op, ": ", name, ": expected ", want.size(), " dims ", doc, " = ", list_str(want), ", got ",
                        t.ndim, " dims ", shape_str(t));
  int i = 0;
  for (int64_t w : want) {
    if (t.shape[i] != w)
      return FGDN_INVALID(c.op, ": ", name, ": expected shape ", doc, " = ", list_str(want), ", got ", shape_str(t));
    ++i;
  }
  return Status::OK();
}

// check_shape for a tensor that may be absent.
Status check_shape_if(const Ctx& c, const char* name, const TensorView& t, const char* doc,
                      std::initializer_list<int64_t> want) {
  return t.defined() ? check_shape(c, name, t, doc, want) : Status::OK();
}

Status check_ndim(const Ctx& c, const char* name, const TensorView& t, int32_t ndim, const char* doc) {
  if (t.ndim != ndim)
    return FGDN_INVALID(c.op, ": ", name, ": expected ", ndim, " dims ", doc, ", got ", t.ndim, " dims ", shape_str(t));
  return Status::OK();
}

Status check_dtype(const Ctx& c, const char* name, const TensorView& t, DSet allowed) {
  if (!(allowed & bit(t.dtype)))
    return FGDN_INVALID(c.op, ": ", name, ": expected dtype ", dset_str(allowed), c.cpu_note(allowed), ", got ",
                        dtype_name(t.dtype));
  return Status::OK();
}

Status check_same_dtype(const Ctx& c, const char* name, const TensorView& t, const char* ref_name,
                        const TensorView& ref) {
  if (t.dtype != ref.dtype)
    return FGDN_INVALID(c.op, ": ", name, ": expected the dtype of ", ref_name, " (", dtype_name(ref.dtype), "), got ",
                        dtype_name(t.dtype));
  return Status::OK();
}

// A required tensor of a known shape with the dtype of another argument (outputs, gradients).
Status check_like(const Ctx& c, const char* name, const TensorView& t, const char* doc,
                  std::initializer_list<int64_t> want, const char* ref_name, const TensorView& ref) {
  FGDN_RETURN_IF_ERROR(require(c, name, t, doc));
  FGDN_RETURN_IF_ERROR(check_shape(c, name, t, doc, want));
  return check_same_dtype(c, name, t, ref_name, ref);
}

// Per-tensor layout rules that need no shape context, then the device rule over the whole call.
Status check_tensors(Ctx& c) {
  const ArgList& args = c.args;
  const Arg* first = nullptr;
  for (const Arg& a : args) {
    const TensorView& t = *a.t;
    if (!t.defined()) continue;
    if (t.ndim > kMaxDims)
      return FGDN_INVALID(c.op, ": ", a.name, ": expected at most ", kMaxDims, " dims, got ", t.ndim);
    if (!valid_dtype(t.dtype))
      return FGDN_INVALID(c.op, ": ", a.name, ": expected a dtype of flashgdn::DType, got code ", int32_t(t.dtype));
    if (t.device != DeviceType::cpu && t.device != DeviceType::cuda)
      return FGDN_INVALID(c.op, ": ", a.name, ": expected a cpu or cuda tensor, got ", device_str(t));
    // One device per call: the first tensor decides, every other one must match it.
    if (!first) {
      first = &a;
    } else if (t.device != first->t->device || (t.device == DeviceType::cuda && t.device_id != first->t->device_id)) {
      return FGDN_INVALID(c.op, ": ", a.name, ": expected the device of ", first->name, " (", device_str(*first->t),
                          "): all tensors of a call live on one device, got ", device_str(t));
    }
  }
  c.cuda = first && first->t->device == DeviceType::cuda;
#if !FLASHGDN_WITH_CUDA
  if (c.cuda)
    return FGDN_ERROR(unsupported, c.op, ": ", first->name,
                      ": expected a cpu tensor: this build of flashgdn has no CUDA ",
                      "support (configure with -DFLASHGDN_WITH_CUDA=ON), got ", device_str(*first->t));
#endif

  for (const Arg& a : args) {
    const TensorView& t = *a.t;
    if (!t.defined()) continue;
    FGDN_RETURN_IF_ERROR(check_dtype(c, a.name, t, c.of(a.dtypes)));
    for (int i = 0; i < t.ndim; ++i)
      if (t.shape[i] < 0)
        return FGDN_INVALID(c.op, ": ", a.name, ": expected non-negative sizes, got shape ", shape_str(t));
    const int64_t n = safe_numel(t);
    if (n < 0 || n > kInt32Max)
      return FGDN_INVALID(c.op, ": ", a.name, ": expected at most 2^31 - 1 elements (int32 row indexing), got shape ",
                          shape_str(t));
    if (n == 0) continue;  // an empty tensor touches no memory: its pointer and strides do not matter
    if (!t.data) return FGDN_INVALID(c.op, ": ", a.name, ": expected a non-null data pointer, got null");
    // A dim of size 1 is never stepped over, so its stride is free (frameworks put anything there).
    for (int i = 0; i < t.ndim; ++i) {
      if (t.shape[i] <= 1) continue;
      if (t.strides[i] < 0)
        return FGDN_INVALID(c.op, ": ", a.name, ": expected non-negative strides, got strides ", strides_str(t));
      if (t.strides[i] == 0)
        return FGDN_INVALID(c.op, ": ", a.name, ": expected no zero stride on a dim of size > 1 (broadcast is not ",
                            "supported), got strides ", strides_str(t), " for shape ", shape_str(t));
    }
    const int64_t span = max_offset(t);
    const int64_t es = dtype_size(t.dtype);
    int64_t bytes;
    if (span < 0 || span == INT64_MAX || !detail::checked_mul(span + 1, es, &bytes))
      return FGDN_INVALID(c.op, ": ", a.name, ": expected strides whose byte extent fits in int64, got strides ",
                          strides_str(t));
    // Elements are read and written through typed pointers: the address must be a multiple of the element size.
    const uintptr_t lo = reinterpret_cast<uintptr_t>(t.data);
    if (lo % uintptr_t(es) != 0)
      return FGDN_INVALID(c.op, ": ", a.name, ": expected a data pointer (data + byte_offset) aligned to ", es,
                          " bytes (the size of ", dtype_name(t.dtype), "), got address ", t.data);
    uintptr_t hi;
    if (__builtin_add_overflow(lo, uintptr_t(bytes), &hi))
      return FGDN_INVALID(c.op, ": ", a.name, ": expected the tensor's bytes inside the address space, got address ",
                          t.data, " with an extent of ", bytes, " bytes (the end wraps)");
    if (a.role != Role::in && may_self_alias(t))
      return FGDN_INVALID(c.op, ": ", a.name, ": expected output strides that map distinct indices to distinct ",
                          "addresses, got strides ", strides_str(t), " for shape ", shape_str(t));
    if (c.cuda && a.dense && t.ndim > 0) {
      // Vectorized 16-byte loads and stores along the last dim.
      if (t.shape[t.ndim - 1] > 1 && t.strides[t.ndim - 1] != 1)
        return FGDN_INVALID(c.op, ": ", a.name, ": expected a contiguous last dim on CUDA (stride 1), got strides ",
                            strides_str(t));
      if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0)
        return FGDN_INVALID(c.op, ": ", a.name, ": expected a 16-byte aligned data pointer on CUDA, got address ",
                            t.data);
      for (int i = 0; i + 1 < t.ndim; ++i)
        if (t.shape[i] > 1 && (t.strides[i] * es) % 16 != 0)
          return FGDN_INVALID(c.op, ": ", a.name, ": expected every stride except the last to be a multiple of 16 ",
                              "bytes on CUDA, got strides ", strides_str(t), " (elements of ", es, " bytes)");
    }
  }
  return Status::OK();
}

// Outputs may not overlap inputs or other outputs; an in-out tensor (the state pool) is exempt only against
// itself. Inputs may share memory with each other (q and k can be one buffer). The test compares bounding byte
// ranges, so two tensors interleaved in one allocation count as overlapping even when no element collides.
Status check_overlaps(const Ctx& c) {
  const ArgList& args = c.args;
  std::vector<const Arg*> v;
  for (const Arg& a : args)
    if (a.t->defined()) v.push_back(&a);
  for (size_t i = 0; i < v.size(); ++i) {
    for (size_t j = i + 1; j < v.size(); ++j) {
      const Arg* x = v[i];
      const Arg* y = v[j];
      if (x->role == Role::in && y->role == Role::in) continue;
      Range rx = byte_range(*x->t), ry = byte_range(*y->t);
      if (rx.empty() || ry.empty() || rx.hi <= ry.lo || ry.hi <= rx.lo) continue;
      if (x->role == Role::in) std::swap(x, y);  // name the written tensor first
      return FGDN_INVALID(c.op, ": ", x->name, ": expected no memory overlap with ", y->name,
                          " (outputs may not alias inputs or other outputs), got overlapping byte ranges");
    }
  }
  return Status::OK();
}

Status check_exec(const Ctx& c, const ExecOptions& e) {
  if (e.cpu_algo != CpuAlgo::recurrent && e.cpu_algo != CpuAlgo::chunked)
    return FGDN_INVALID(c.op, ": exec.cpu_algo: expected recurrent (0) or chunked (1), got ", int32_t(e.cpu_algo));
  if (e.cpu_threads < 0)
    return FGDN_INVALID(c.op, ": exec.cpu_threads: expected >= 0 (0: all hardware threads), got ", e.cpu_threads);
  return Status::OK();
}

Status check_softplus(const Ctx& c, const GateOptions& g) {
  if (!(g.softplus_beta > 0.f) || !std::isfinite(g.softplus_beta))
    return FGDN_INVALID(c.op, ": gate.softplus_beta: expected a finite value > 0, got ", g.softplus_beta);
  if (std::isnan(g.softplus_threshold))
    return FGDN_INVALID(c.op, ": gate.softplus_threshold: expected a number, got NaN");
  return Status::OK();
}

Status check_layout_enum(const Ctx& c, StateLayout l) {
  if (l != StateLayout::k_major && l != StateLayout::v_major)
    return FGDN_INVALID(c.op, ": state_layout: expected k_major (0) or v_major (1), got ", int32_t(l));
  return Status::OK();
}

// Shape of a [lead..., Hv, K, V] state tensor in the given layout.
const char* state_doc(StateLayout l, int which) {
  // which: 0 = [N, ...], 1 = [slots, ...], 2 = [N, C_max, ...], 3 = [N_buf, T_buf, ...]
  static constexpr const char* k_docs[] = {"[N, Hv, K, V] (k_major)", "[slots, Hv, K, V] (k_major)",
                                           "[N, C_max, Hv, K, V] (k_major)", "[N_buf, T_buf, Hv, K, V] (k_major)"};
  static constexpr const char* v_docs[] = {"[N, Hv, V, K] (v_major)", "[slots, Hv, V, K] (v_major)",
                                           "[N, C_max, Hv, V, K] (v_major)", "[N_buf, T_buf, Hv, V, K] (v_major)"};
  return l == StateLayout::k_major ? k_docs[which] : v_docs[which];
}

int64_t inner0(StateLayout l, int64_t K, int64_t V) {
  return l == StateLayout::k_major ? K : V;
}
int64_t inner1(StateLayout l, int64_t K, int64_t V) {
  return l == StateLayout::k_major ? V : K;
}

Status check_state(const Ctx& c, const char* name, const TensorView& t, StateLayout l, int64_t N, int64_t Hv, int64_t K,
                   int64_t V) {
  if (!t.defined()) return Status::OK();
  return check_shape(c, name, t, state_doc(l, 0), {N, Hv, inner0(l, K, V), inner1(l, K, V)});
}

// On CUDA the kernels are instantiated for head dims 64 and 128 only.
Status check_cuda_head_dims(const Ctx& c, const char* k_name, int64_t K, const char* v_name, int64_t V) {
  if (!c.cuda) return Status::OK();
  if (K != 64 && K != 128)
    return FGDN_ERROR(unsupported, c.op, ": ", k_name, ": expected head dim K in {64, 128} on CUDA, got K = ", K);
  if (V != 64 && V != 128)
    return FGDN_ERROR(unsupported, c.op, ": ", v_name, ": expected head dim V in {64, 128} on CUDA, got V = ", V);
  return Status::OK();
}

// Index tensors are read only by the *_values functions, which run on host memory: a CPU call's tensors, or the host
// mirror of a CUDA call (ops.cpp, exec.check_indices).
int64_t index_at(const TensorView& t, int64_t i) {
  return detail::load_index(t.data, t.dtype, i * t.strides[0]);
}
int64_t index_at(const TensorView& t, int64_t i, int64_t j) {
  return detail::load_index(t.data, t.dtype, i * t.strides[0] + j * t.strides[1]);
}

// cu_seqlens values (gdn-math §3.2): cu[0] == 0, non-decreasing, cu[N] <= T. Fills the per-row lengths.
Status check_cu_values(const Ctx& c, const TensorView& cu, int64_t T, std::vector<int64_t>* lens) {
  const int64_t N = cu.shape[0] - 1;
  if (index_at(cu, 0) != 0)
    return FGDN_INVALID(c.op, ": cu_seqlens: expected cu_seqlens[0] == 0, got ", index_at(cu, 0));
  lens->resize(size_t(N));
  for (int64_t n = 0; n < N; ++n) {
    const int64_t a = index_at(cu, n), b = index_at(cu, n + 1);
    if (b < a)
      return FGDN_INVALID(c.op, ": cu_seqlens: expected non-decreasing values, got cu_seqlens[", n, "] = ", a,
                          " > cu_seqlens[", n + 1, "] = ", b);
    (*lens)[size_t(n)] = b - a;
  }
  if (index_at(cu, N) > T)
    return FGDN_INVALID(c.op, ": cu_seqlens: expected cu_seqlens[N] <= T = ", T, " (total tokens), got ",
                        index_at(cu, N));
  return Status::OK();
}

// The product of `dims` (each >= 0) is at most `limit`; checked without forming an overflowing product.
Status check_bounded_product(const Ctx& c, const char* name, const char* what, std::initializer_list<int64_t> dims,
                             int64_t limit) {
  const int64_t n = detail::checked_product(dims);
  if (n < 0 || n > limit)
    return FGDN_INVALID(c.op, ": ", name, ": expected at most ", limit, " ", what, ", got ", list_str(dims),
                        n < 0 ? std::string(" (past 2^63 - 1)") : str_cat(" = ", n));
  return Status::OK();
}

// ---- the shared token-major part of chunk_fwd, chunk_bwd and recurrent ---------------------------------------

// check_tensors, then the rules of the tensors and scalars chunk_fwd, chunk_bwd and recurrent share.
template <class P>
Status check_seq(Ctx& c, const P& p, SeqDims* d) {
  FGDN_RETURN_IF_ERROR(check_tensors(c));
  const GateOptions& gate = p.gate;
  FGDN_RETURN_IF_ERROR(require(c, "q", p.q, "[B, T, Hqk, K]"));
  FGDN_RETURN_IF_ERROR(require(c, "k", p.k, "[B, T, Hqk, K]"));
  FGDN_RETURN_IF_ERROR(require(c, "v", p.v, "[B, T, Hv, V]"));
  FGDN_RETURN_IF_ERROR(check_ndim(c, "q", p.q, 4, "[B, T, Hqk, K]"));
  const int64_t B = p.q.shape[0], T = p.q.shape[1], Hqk = p.q.shape[2], K = p.q.shape[3];
  FGDN_RETURN_IF_ERROR(check_shape(c, "k", p.k, "[B, T, Hqk, K]", {B, T, Hqk, K}));
  FGDN_RETURN_IF_ERROR(check_ndim(c, "v", p.v, 4, "[B, T, Hv, V]"));
  const int64_t Hv = p.v.shape[2], V = p.v.shape[3];
  FGDN_RETURN_IF_ERROR(check_shape(c, "v", p.v, "[B, T, Hv, V]", {B, T, Hv, V}));
  if (K <= 0) return FGDN_INVALID(c.op, ": q: expected head dim K > 0 (q.shape[3]), got ", K);
  if (V <= 0) return FGDN_INVALID(c.op, ": v: expected head dim V > 0 (v.shape[3]), got ", V);
  if (Hqk <= 0) return FGDN_INVALID(c.op, ": q: expected Hqk > 0 heads (q.shape[2]), got ", Hqk);
  if (Hv <= 0 || Hv % Hqk != 0)
    return FGDN_INVALID(c.op, ": v: expected Hv (v.shape[2]) a positive multiple of Hqk = ", Hqk,
                        " (each q/k head serves Hv / Hqk value heads), got Hv = ", Hv);

  FGDN_RETURN_IF_ERROR(check_same_dtype(c, "k", p.k, "q", p.q));
  FGDN_RETURN_IF_ERROR(check_same_dtype(c, "v", p.v, "q", p.q));

  FGDN_RETURN_IF_ERROR(check_shape_if(c, "g", p.g, "[B, T, Hv]", {B, T, Hv}));
  FGDN_RETURN_IF_ERROR(check_shape_if(c, "beta", p.beta, "[B, T, Hv]", {B, T, Hv}));
  FGDN_RETURN_IF_ERROR(check_shape_if(c, "A_log", p.A_log, "[Hv]", {Hv}));
  FGDN_RETURN_IF_ERROR(check_shape_if(c, "dt_bias", p.dt_bias, "[Hv]", {Hv}));

  // Gate options (gdn-math §4).
  if (gate.use_gate_in_kernel) {
    FGDN_RETURN_IF_ERROR(require(c, "A_log", p.A_log, "[Hv] (gate.use_gate_in_kernel is set)"));
    FGDN_RETURN_IF_ERROR(require(c, "g", p.g, "[B, T, Hv] holding raw a (gate.use_gate_in_kernel is set)"));
  }
  if (gate.use_beta_sigmoid_in_kernel)
    FGDN_RETURN_IF_ERROR(
        require(c, "beta", p.beta, "[B, T, Hv] holding raw b (gate.use_beta_sigmoid_in_kernel is set)"));
  if (gate.allow_neg_eigval && !gate.use_beta_sigmoid_in_kernel)
    return FGDN_INVALID(c.op, ": gate.allow_neg_eigval: expected gate.use_beta_sigmoid_in_kernel to be set too ",
                        "(beta = 2 sigmoid(b) is formed in the kernel), got use_beta_sigmoid_in_kernel = false");
  FGDN_RETURN_IF_ERROR(check_softplus(c, gate));

  if (!std::isfinite(p.scale)) return FGDN_INVALID(c.op, ": scale: expected a finite value (0: K^-1/2), got ", p.scale);
  FGDN_RETURN_IF_ERROR(check_layout_enum(c, p.state_layout));
  FGDN_RETURN_IF_ERROR(check_exec(c, p.exec));

  // Varlen: B == 1, N = cu_seqlens.size - 1.
  int64_t N = B;
  if (p.cu_seqlens.defined()) {
    FGDN_RETURN_IF_ERROR(check_ndim(c, "cu_seqlens", p.cu_seqlens, 1, "[N + 1]"));
    if (p.cu_seqlens.shape[0] < 1)
      return FGDN_INVALID(c.op, ": cu_seqlens: expected at least 1 entry [N + 1], got ", shape_str(p.cu_seqlens));
    if (B != 1)
      return FGDN_INVALID(c.op, ": cu_seqlens: expected batch B == 1 with cu_seqlens (varlen packs the sequences ",
                          "on the token axis), got B = ", B);
    N = p.cu_seqlens.shape[0] - 1;
  }

  // Bounds on the dims and on every product of them a backend forms, before any is formed: a tensor with a zero
  // dim has no elements whatever its other dims say, so the per-tensor element limit does not bound them.
  FGDN_RETURN_IF_ERROR(check_bounded_product(c, "v", "B * T * Hv token-head rows (int32 row indexing)",
                                             {B, T, std::max(Hv, Hqk)}, kInt32Max));
  FGDN_RETURN_IF_ERROR(check_bounded_product(c, p.cu_seqlens.defined() ? "cu_seqlens" : "v",
                                             "N * Hv (sequence, value head) pairs", {N, Hv}, kInt32Max));
  FGDN_RETURN_IF_ERROR(check_bounded_product(c, "v", "Hv value heads", {Hv}, kInt32Max));
  FGDN_RETURN_IF_ERROR(check_bounded_product(
      c, "v", "K * V elements of one head's state (K = q.shape[3], V = v.shape[3])", {K, V}, kMaxStateElems));

  FGDN_RETURN_IF_ERROR(check_cuda_head_dims(c, "q", K, "v", V));

  d->B = B;
  d->T = T;
  d->N = N;
  d->Hqk = Hqk;
  d->Hv = Hv;
  d->K = K;
  d->V = V;
  d->varlen = p.cu_seqlens.defined();
  d->scale = p.scale == 0.f ? float(1.0 / std::sqrt(double(K))) : p.scale;
  return Status::OK();
}

Status check_chunk_size(const Ctx& c, int32_t chunk_size) {
  if (chunk_size != 16 && chunk_size != 32 && chunk_size != 64)
    return FGDN_INVALID(c.op, ": chunk_size: expected 16, 32 or 64, got ", chunk_size);
  return Status::OK();
}

// Per-row token counts: T for every row (fixed length) or from cu_seqlens (host memory).
// Returns false when the rows are B fixed-length rows of no token: they touch nothing, so there is nothing to check,
// and B (not bounded by any tensor's memory then) must not size an allocation.
bool row_lengths(const SeqDims& d, const TensorView& cu, std::vector<int64_t>* lens, const Ctx& c, Status* st) {
  if (!d.varlen) {
    if (d.T == 0) return false;
    lens->assign(size_t(d.N), d.T);  // N = B <= B * T * Hv <= 2^31 - 1 rows of v
    return true;
  }
  *st = check_cu_values(c, cu, d.T, lens);
  return true;
}

// The index values of chunk_fwd and chunk_bwd: cu_seqlens holds valid offsets.
Status chunked_values(const Ctx& c, const TensorView& cu, const SeqDims& d) {
  if (!d.varlen) return Status::OK();
  std::vector<int64_t> lens;
  return check_cu_values(c, cu, d.T, &lens);
}

// The last rules of chunk_fwd and chunk_bwd: no output overlaps another argument, and cu_seqlens in host memory
// holds valid offsets. Then the resolved dims are the call's.
template <class D>
Status finish_chunked(const Ctx& c, const TensorView& cu, const D& dims, D* d) {
  FGDN_RETURN_IF_ERROR(check_overlaps(c));
  if (!c.cuda) FGDN_RETURN_IF_ERROR(chunked_values(c, cu, dims));
  *d = dims;
  return Status::OK();
}

}  // namespace

// ---- chunk_fwd -----------------------------------------------------------------------------------------------

Status validate(const ChunkFwdParams& p, ChunkDims* d) {
  Ctx c(p);
  ChunkDims dims;
  FGDN_RETURN_IF_ERROR(check_seq(c, p, &dims));
  const int64_t B = dims.B, T = dims.T, N = dims.N, Hv = dims.Hv, K = dims.K, V = dims.V;
  FGDN_RETURN_IF_ERROR(check_chunk_size(c, p.chunk_size));

  FGDN_RETURN_IF_ERROR(check_like(c, "o", p.o, "[B, T, Hv, V]", {B, T, Hv, V}, "v", p.v));
  FGDN_RETURN_IF_ERROR(check_state(c, "initial_state", p.initial_state, p.state_layout, N, Hv, K, V));
  FGDN_RETURN_IF_ERROR(check_state(c, "final_state", p.final_state, p.state_layout, N, Hv, K, V));

  if (p.state_checkpoints.defined()) {
    const TensorView& s = p.state_checkpoints;
    const char* doc = state_doc(p.state_layout, 2);
    FGDN_RETURN_IF_ERROR(check_ndim(c, "state_checkpoints", s, 5, doc));
    dims.num_checkpoints = s.shape[1];
    FGDN_RETURN_IF_ERROR(check_shape(c, "state_checkpoints", s, doc,
                                     {N, s.shape[1], Hv, inner0(p.state_layout, K, V), inner1(p.state_layout, K, V)}));
    if (p.checkpoint_interval <= 0 || p.checkpoint_interval % p.chunk_size != 0)
      return FGDN_INVALID(c.op, ": checkpoint_interval: expected a positive multiple of chunk_size = ", p.chunk_size,
                          " (state_checkpoints is given), got ", p.checkpoint_interval);
  }

  return finish_chunked(c, p.cu_seqlens, dims, d);
}

// ---- chunk_bwd -----------------------------------------------------------------------------------------------

Status validate(const ChunkBwdParams& p, SeqDims* d) {
  Ctx c(p);
  SeqDims dims;
  FGDN_RETURN_IF_ERROR(check_seq(c, p, &dims));
  const int64_t B = dims.B, T = dims.T, N = dims.N, Hqk = dims.Hqk, Hv = dims.Hv, K = dims.K, V = dims.V;
  FGDN_RETURN_IF_ERROR(check_chunk_size(c, p.chunk_size));
  // The GQA reduction keeps dq and dk per value head before summing them over the group.
  FGDN_RETURN_IF_ERROR(
      check_bounded_product(c, "v", "B * T * Hv * K elements of the per-value-head dq, dk", {B, T, Hv, K}, kInt32Max));
  FGDN_RETURN_IF_ERROR(check_state(c, "initial_state", p.initial_state, p.state_layout, N, Hv, K, V));

  FGDN_RETURN_IF_ERROR(check_like(c, "d_o", p.d_o, "[B, T, Hv, V]", {B, T, Hv, V}, "v", p.v));
  FGDN_RETURN_IF_ERROR(check_state(c, "d_ht", p.d_ht, p.state_layout, N, Hv, K, V));

  FGDN_RETURN_IF_ERROR(check_like(c, "dq", p.dq, "[B, T, Hqk, K]", {B, T, Hqk, K}, "q", p.q));
  FGDN_RETURN_IF_ERROR(check_like(c, "dk", p.dk, "[B, T, Hqk, K]", {B, T, Hqk, K}, "k", p.k));
  FGDN_RETURN_IF_ERROR(check_like(c, "dv", p.dv, "[B, T, Hv, V]", {B, T, Hv, V}, "v", p.v));
  FGDN_RETURN_IF_ERROR(check_shape_if(c, "dg", p.dg, "[B, T, Hv]", {B, T, Hv}));
  FGDN_RETURN_IF_ERROR(check_shape_if(c, "dbeta", p.dbeta, "[B, T, Hv]", {B, T, Hv}));
  FGDN_RETURN_IF_ERROR(check_state(c, "dh0", p.dh0, p.state_layout, N, Hv, K, V));
  using Named = std::pair<const char*, const TensorView*>;
  for (auto [name, t] : std::initializer_list<Named>{{"dA_log", &p.dA_log}, {"ddt_bias", &p.ddt_bias}}) {
    if (!t->defined()) continue;
    if (!p.gate.use_gate_in_kernel)
      return FGDN_INVALID(c.op, ": ", name, ": expected absent without gate.use_gate_in_kernel (no gate parameters ",
                          "are used), got a tensor ", shape_str(*t));
    FGDN_RETURN_IF_ERROR(check_shape(c, name, *t, "[Hv]", {Hv}));
  }

  return finish_chunked(c, p.cu_seqlens, dims, d);
}

// ---- gating --------------------------------------------------------------------------------------------------

Status validate(const GatingParams& p, GatingDims* d) {
  Ctx c(p);
  FGDN_RETURN_IF_ERROR(check_tensors(c));
  FGDN_RETURN_IF_ERROR(require(c, "a", p.a, "[..., Hv]"));
  if (p.a.ndim < 1) return FGDN_INVALID(c.op, ": a: expected at least 1 dim [..., Hv], got 0 dims []");
  const int64_t Hv = p.a.shape[p.a.ndim - 1];
  if (Hv <= 0) return FGDN_INVALID(c.op, ": a: expected Hv > 0 (the last dim), got shape ", shape_str(p.a));
  FGDN_RETURN_IF_ERROR(require(c, "A_log", p.A_log, "[Hv]"));
  FGDN_RETURN_IF_ERROR(check_shape(c, "A_log", p.A_log, "[Hv]", {Hv}));
  FGDN_RETURN_IF_ERROR(check_shape_if(c, "dt_bias", p.dt_bias, "[Hv]", {Hv}));
  // b, g and beta have the shape of a.
  auto same_shape_as_a = [&](const char* name, const TensorView& t) -> Status {
    bool same = t.ndim == p.a.ndim;
    for (int i = 0; same && i < t.ndim; ++i) same = t.shape[i] == p.a.shape[i];
    if (!same)
      return FGDN_INVALID(c.op, ": ", name, ": expected the shape of a [..., Hv] = ", shape_str(p.a), ", got ",
                          shape_str(t));
    return Status::OK();
  };
  FGDN_RETURN_IF_ERROR(require(c, "g", p.g, "[..., Hv] (output)"));
  FGDN_RETURN_IF_ERROR(same_shape_as_a("g", p.g));
  if (p.b.defined() != p.beta.defined()) {
    if (p.b.defined())
      return FGDN_INVALID(c.op, ": beta: expected a tensor [..., Hv] (output) since b is given, got none (absent)");
    return FGDN_INVALID(c.op, ": beta: expected absent since b is absent (beta = sigmoid(b)), got a tensor ",
                        shape_str(p.beta));
  }
  if (p.b.defined()) {
    FGDN_RETURN_IF_ERROR(same_shape_as_a("b", p.b));
    FGDN_RETURN_IF_ERROR(same_shape_as_a("beta", p.beta));
  }
  FGDN_RETURN_IF_ERROR(check_softplus(c, p.gate));
  FGDN_RETURN_IF_ERROR(check_exec(c, p.exec));
  FGDN_RETURN_IF_ERROR(check_overlaps(c));
  d->Hv = Hv;
  d->rows = safe_numel(p.a) / Hv;
  return Status::OK();
}

// ---- recurrent -----------------------------------------------------------------------------------------------

namespace {

bool invalid_slot(int64_t slot, int64_t slots, bool null_slot_is_invalid) {
  return slot < 0 || (null_slot_is_invalid && slot == 0) || slot >= slots;
}

// exec.check_indices: the index values a kernel would otherwise clamp become errors (gdn-math §8).
Status check_recurrent_indices(const Ctx& c, const RecurrentParams& p, const RecurrentDims& d,
                               const std::vector<int64_t>& lens) {
  const TensorView& si = p.state_indices;
  const bool two_d = si.defined() && si.ndim == 2;
  std::unordered_map<int64_t, int64_t> start_owner;  // valid start slot -> row
  for (int64_t n = 0; n < d.N; ++n) {
    if (lens[size_t(n)] == 0) continue;  // a length-0 row touches nothing
    int64_t a = 1;
    if (p.num_accepted_tokens.defined()) {
      a = index_at(p.num_accepted_tokens, n);
      if (a < 1 || a > d.T_max)
        return FGDN_INVALID(c.op, ": num_accepted_tokens: expected values in [1, T_max = ", d.T_max,
                            "] (exec.check_indices), got num_accepted_tokens[", n, "] = ", a);
    }
    if (p.state_pool.defined()) {
      if (si.defined()) {
        const int64_t cols = two_d ? d.T_max : 1;
        for (int64_t t = 0; t < cols; ++t) {
          const int64_t slot = two_d ? index_at(si, n, t) : index_at(si, n);
          if (slot >= d.slots)
            return FGDN_INVALID(c.op, ": state_indices: expected slots < state_pool.shape[0] = ", d.slots,
                                " or an invalid-slot sentinel (exec.check_indices), got state_indices[", n,
                                two_d ? str_cat(", ", t) : std::string(), "] = ", slot);
        }
      }
      const int64_t start = !si.defined() ? n : two_d ? index_at(si, n, a - 1) : index_at(si, n);
      if (!invalid_slot(start, d.slots, p.null_slot_is_invalid)) {
        auto [it, fresh] = start_owner.emplace(start, n);
        if (!fresh)
          return FGDN_INVALID(c.op, ": state_indices: expected distinct valid start slots (duplicates race, gdn-math ",
                              "§8.1; exec.check_indices), got slot ", start, " for rows ", it->second, " and ", n);
      }
    }
    if (p.intermediate_states.defined() && p.intermediate_indices.defined()) {
      const int64_t buf = index_at(p.intermediate_indices, n);
      if (buf >= d.n_buf)
        return FGDN_INVALID(c.op, ": intermediate_indices: expected values < intermediate_states.shape[0] = ", d.n_buf,
                            " (exec.check_indices), got intermediate_indices[", n, "] = ", buf);
    }
  }
  return Status::OK();
}

// The index values of recurrent (host memory). cu_seqlens is always checked (cheap); the slot-like indices only
// with exec.check_indices, because out-of-range slots are legal at run time (they mark invalid rows).
Status recurrent_values(const Ctx& c, const RecurrentParams& p, const RecurrentDims& d) {
  std::vector<int64_t> lens;
  Status st;
  if (row_lengths(d, p.cu_seqlens, &lens, c, &st)) {
    FGDN_RETURN_IF_ERROR(st);
    for (int64_t n = 0; n < d.N; ++n) {
      const int64_t len = lens[size_t(n)];
      if (d.T_max > 0 && len > d.T_max)
        return FGDN_INVALID(c.op, ": cu_seqlens: expected rows of at most T_max = ", d.T_max,
                            " tokens (state_indices columns), got ", len, " tokens in row ", n);
      if (p.intermediate_states.defined() && len > d.T_buf)
        return FGDN_INVALID(c.op, ": cu_seqlens: expected rows of at most T_buf = ", d.T_buf,
                            " tokens (intermediate_states entries), got ", len, " tokens in row ", n);
    }
    if (p.exec.check_indices) FGDN_RETURN_IF_ERROR(check_recurrent_indices(c, p, d, lens));
  }
  return Status::OK();
}

}  // namespace

Status validate(const RecurrentParams& p, RecurrentDims* d) {
  Ctx c(p);
  const StateLayout l = p.state_layout;
  RecurrentDims dims;
  FGDN_RETURN_IF_ERROR(check_seq(c, p, &dims));
  const int64_t B = dims.B, T = dims.T, N = dims.N, Hv = dims.Hv, K = dims.K, V = dims.V;

  FGDN_RETURN_IF_ERROR(check_like(c, "o", p.o, "[B, T, Hv, V]", {B, T, Hv, V}, "v", p.v));

  if (p.state_pool.defined()) {
    const TensorView& pool = p.state_pool;
    FGDN_RETURN_IF_ERROR(check_ndim(c, "state_pool", pool, 4, state_doc(l, 1)));
    dims.slots = pool.shape[0];
    FGDN_RETURN_IF_ERROR(
        check_shape(c, "state_pool", pool, state_doc(l, 1), {dims.slots, Hv, inner0(l, K, V), inner1(l, K, V)}));
    FGDN_RETURN_IF_ERROR(require_absent(c, "initial_state", p.initial_state,
                                        "when state_pool is given (the pool holds the start states)"));
    FGDN_RETURN_IF_ERROR(require_absent(c, "final_state", p.final_state,
                                        "when state_pool is given (the pool receives the final states)"));
    const TensorView& si = p.state_indices;
    if (si.defined()) {
      if (si.ndim != 1 && si.ndim != 2)
        return FGDN_INVALID(c.op, ": state_indices: expected 1 dim [N] or 2 dims [N, T_max], got ", si.ndim, " dims ",
                            shape_str(si));
      if (si.shape[0] != N)
        return FGDN_INVALID(c.op, ": state_indices: expected ", si.ndim == 1 ? "[N]" : "[N, T_max]", " with N = ", N,
                            " rows, got ", shape_str(si));
      if (si.ndim == 2) {
        dims.T_max = si.shape[1];
        if (dims.T_max < 1)
          return FGDN_INVALID(c.op, ": state_indices: expected T_max >= 1 columns [N, T_max], got ", shape_str(si));
        // Token t of a row writes column t: a fixed-length row of T tokens needs T columns.
        if (!dims.varlen && T > dims.T_max)
          return FGDN_INVALID(c.op, ": state_indices: expected T_max >= T = ", T,
                              " (token t writes slot column t), got ", shape_str(si));
      }
    } else if (dims.slots < N) {
      return FGDN_INVALID(c.op, ": state_pool: expected at least N = ", N,
                          " slots (state_indices is absent: row n uses slot n), got ", shape_str(pool));
    }
    if (p.num_accepted_tokens.defined()) {
      if (!si.defined() || si.ndim != 2)
        return FGDN_INVALID(c.op, ": num_accepted_tokens: expected only with 2-D state_indices [N, T_max] (it picks ",
                            "the start column), got state_indices ", si.defined() ? shape_str(si) : "absent");
      FGDN_RETURN_IF_ERROR(check_shape(c, "num_accepted_tokens", p.num_accepted_tokens, "[N]", {N}));
    }
  } else {
    FGDN_RETURN_IF_ERROR(require_absent(c, "state_indices", p.state_indices, "without state_pool"));
    FGDN_RETURN_IF_ERROR(require_absent(c, "num_accepted_tokens", p.num_accepted_tokens, "without state_pool"));
    FGDN_RETURN_IF_ERROR(check_state(c, "initial_state", p.initial_state, l, N, Hv, K, V));
    FGDN_RETURN_IF_ERROR(check_state(c, "final_state", p.final_state, l, N, Hv, K, V));
  }

  if (p.intermediate_states.defined()) {
    const TensorView& is = p.intermediate_states;
    FGDN_RETURN_IF_ERROR(check_ndim(c, "intermediate_states", is, 5, state_doc(l, 3)));
    dims.n_buf = is.shape[0];
    dims.T_buf = is.shape[1];
    FGDN_RETURN_IF_ERROR(check_shape(c, "intermediate_states", is, state_doc(l, 3),
                                     {dims.n_buf, dims.T_buf, Hv, inner0(l, K, V), inner1(l, K, V)}));
    if (!dims.varlen && T > dims.T_buf)
      return FGDN_INVALID(c.op, ": intermediate_states: expected T_buf >= T = ", T,
                          " (the state after token t goes to entry t), got ", shape_str(is));
    if (p.intermediate_indices.defined()) {
      FGDN_RETURN_IF_ERROR(check_shape(c, "intermediate_indices", p.intermediate_indices, "[N]", {N}));
    } else if (dims.n_buf < N) {
      return FGDN_INVALID(c.op, ": intermediate_states: expected at least N = ", N,
                          " rows N_buf (intermediate_indices is absent: row n uses entry n), got ", shape_str(is));
    }
  } else {
    FGDN_RETURN_IF_ERROR(
        require_absent(c, "intermediate_indices", p.intermediate_indices, "without intermediate_states"));
  }

  FGDN_RETURN_IF_ERROR(check_overlaps(c));

  if (!c.cuda) FGDN_RETURN_IF_ERROR(recurrent_values(c, p, dims));
  *d = dims;
  return Status::OK();
}

// ---- recurrent_commit ----------------------------------------------------------------------------------------

namespace {

// The index values of recurrent_commit (host memory), with exec.check_indices.
Status commit_values(const Ctx& c, const RecurrentCommitParams& p, const CommitDims& d) {
  if (!p.exec.check_indices) return Status::OK();
  // Rows with an invalid slot or a count outside [1, T_buf] are skipped by contract (SGLang passes a <= 0
  // to mean skip), so only slots past the pool, counts past the buffer and buffer rows past N_buf are errors.
  std::unordered_map<int64_t, int64_t> owner;
  for (int64_t n = 0; n < d.N; ++n) {
    const int64_t slot = index_at(p.state_indices, n);
    const int64_t a = index_at(p.num_accepted_tokens, n);
    if (slot >= d.slots)
      return FGDN_INVALID(c.op, ": state_indices: expected slots < state_pool.shape[0] = ", d.slots,
                          " or an invalid-slot sentinel (exec.check_indices), got state_indices[", n, "] = ", slot);
    if (a > d.T_buf)
      return FGDN_INVALID(c.op, ": num_accepted_tokens: expected values <= T_buf = ", d.T_buf,
                          " (exec.check_indices), got num_accepted_tokens[", n, "] = ", a);
    const int64_t buf = p.intermediate_indices.defined() ? index_at(p.intermediate_indices, n) : n;
    if (buf >= d.n_buf)
      return FGDN_INVALID(c.op, ": intermediate_indices: expected values < intermediate_states.shape[0] = ", d.n_buf,
                          " (exec.check_indices), got intermediate_indices[", n, "] = ", buf);
    if (invalid_slot(slot, d.slots, p.null_slot_is_invalid) || a < 1) continue;
    auto [it, fresh] = owner.emplace(slot, n);
    if (!fresh)
      return FGDN_INVALID(c.op, ": state_indices: expected distinct valid slots (duplicates race; ",
                          "exec.check_indices), got slot ", slot, " for rows ", it->second, " and ", n);
  }
  return Status::OK();
}

}  // namespace

Status validate(const RecurrentCommitParams& p, CommitDims* d) {
  Ctx c(p);
  FGDN_RETURN_IF_ERROR(check_tensors(c));
  FGDN_RETURN_IF_ERROR(check_exec(c, p.exec));
  // The layout of the pool is not a parameter here: pool and buffer just have to agree on their last dims.
  FGDN_RETURN_IF_ERROR(require(c, "state_pool", p.state_pool, "[slots, Hv, K, V] or [slots, Hv, V, K]"));
  FGDN_RETURN_IF_ERROR(check_ndim(c, "state_pool", p.state_pool, 4, "[slots, Hv, K, V] or [slots, Hv, V, K]"));
  CommitDims dims;
  dims.slots = p.state_pool.shape[0];
  dims.Hv = p.state_pool.shape[1];
  dims.K = p.state_pool.shape[2];  // the two inner dims as stored (K, V for k_major; V, K for v_major)
  dims.V = p.state_pool.shape[3];
  if (dims.Hv <= 0 || dims.K <= 0 || dims.V <= 0)
    return FGDN_INVALID(c.op, ": state_pool: expected positive Hv and head dims, got ", shape_str(p.state_pool));

  const TensorView& is = p.intermediate_states;
  FGDN_RETURN_IF_ERROR(require(c, "intermediate_states", is, "[N_buf, T_buf, Hv, K, V] or [N_buf, T_buf, Hv, V, K]"));
  FGDN_RETURN_IF_ERROR(check_ndim(c, "intermediate_states", is, 5, "[N_buf, T_buf, Hv, K, V] or [.., V, K]"));
  dims.n_buf = is.shape[0];
  dims.T_buf = is.shape[1];
  FGDN_RETURN_IF_ERROR(check_shape(c, "intermediate_states", is, "[N_buf, T_buf, <inner dims of state_pool>]",
                                   {dims.n_buf, dims.T_buf, dims.Hv, dims.K, dims.V}));

  FGDN_RETURN_IF_ERROR(require(c, "state_indices", p.state_indices, "[N]"));
  FGDN_RETURN_IF_ERROR(check_ndim(c, "state_indices", p.state_indices, 1, "[N]"));
  dims.N = p.state_indices.shape[0];
  const int64_t N = dims.N;
  FGDN_RETURN_IF_ERROR(require(c, "num_accepted_tokens", p.num_accepted_tokens, "[N]"));
  FGDN_RETURN_IF_ERROR(check_shape(c, "num_accepted_tokens", p.num_accepted_tokens, "[N]", {N}));
  if (p.intermediate_indices.defined()) {
    FGDN_RETURN_IF_ERROR(check_shape(c, "intermediate_indices", p.intermediate_indices, "[N]", {N}));
  } else if (dims.n_buf < N) {
    return FGDN_INVALID(c.op, ": intermediate_states: expected at least N = ", N,
                        " rows N_buf (intermediate_indices is absent: row n uses entry n), got ", shape_str(is));
  }
  // An empty pool or buffer bounds none of these: bound them as recurrent does.
  FGDN_RETURN_IF_ERROR(
      check_bounded_product(c, "state_indices", "N * Hv (row, value head) pairs", {N, dims.Hv}, kInt32Max));
  FGDN_RETURN_IF_ERROR(check_bounded_product(c, "state_pool", "Hv value heads", {dims.Hv}, kInt32Max));
  FGDN_RETURN_IF_ERROR(check_bounded_product(c, "state_pool", "elements of one head's state (the two inner dims)",
                                             {dims.K, dims.V}, kMaxStateElems));
  FGDN_RETURN_IF_ERROR(check_cuda_head_dims(c, "state_pool", dims.K, "state_pool", dims.V));
  FGDN_RETURN_IF_ERROR(check_overlaps(c));

  if (!c.cuda) FGDN_RETURN_IF_ERROR(commit_values(c, p, dims));
  *d = dims;
  return Status::OK();
}

}  // namespace flashgdn

// ---- mixer_decode --------------------------------------------------------------------------------------------

namespace flashgdn {

RecurrentParams mixer_recurrent_view(const MixerDecodeParams& p) {
  RecurrentParams r;
  const int64_t Hqk = p.num_k_heads, K = p.head_k_dim;
  const int64_t es = dtype_size(p.x.dtype);
  // An empty x touches no memory, so its pointer and strides are unchecked (any value, null too): its views keep
  // the pointer and step the channels by 1. Otherwise validation has bounded x's byte extent, and every view lies
  // inside x (channel0 + heads * dim <= C), so the products below fit.
  const bool empty = safe_numel(p.x) == 0;
  const int64_t cs = empty || p.x.shape[2] <= 1 ? 1 : p.x.strides[2];
  auto view = [&](int64_t channel0, int64_t heads, int64_t dim) {
    TensorView t = p.x;
    if (!empty && p.x.data) t.data = static_cast<char*>(p.x.data) + channel0 * cs * es;
    t.ndim = 4;
    t.shape[2] = heads;
    t.shape[3] = dim;
    t.strides[3] = cs;
    t.strides[2] = cs * dim;
    return t;
  };
  const int64_t Hv = p.z.ndim == 4 ? p.z.shape[2] : 0, V = p.z.ndim == 4 ? p.z.shape[3] : 0;
  r.q = view(0, Hqk, K);
  r.k = view(Hqk * K, Hqk, K);
  r.v = view(2 * Hqk * K, Hv, V);
  r.g = p.a;
  r.beta = p.b;
  r.A_log = p.A_log;
  r.dt_bias = p.dt_bias;
  r.cu_seqlens = p.cu_seqlens;
  r.o = p.out;
  r.state_pool = p.state_pool;
  r.state_indices = p.state_indices;
  r.num_accepted_tokens = p.num_accepted_tokens;
  r.intermediate_states = p.intermediate_states;
  r.intermediate_indices = p.intermediate_indices;
  r.commit = p.commit;
  r.null_slot_is_invalid = p.null_slot_is_invalid;
  r.scale = p.scale;
  r.use_qk_l2norm_in_kernel = true;
  r.gate = p.gate;
  r.gate.use_gate_in_kernel = true;
  r.gate.use_beta_sigmoid_in_kernel = true;
  r.state_layout = p.state_layout;
  r.exec = p.exec;
  return r;
}

Status validate(const MixerDecodeParams& p, MixerDims* d) {
  Ctx c(p);
  FGDN_RETURN_IF_ERROR(check_tensors(c));

  // The channel split of x: C = 2 Hqk K + Hv V, with Hv and V from z.
  FGDN_RETURN_IF_ERROR(require(c, "x", p.x, "[B, T, C]"));
  FGDN_RETURN_IF_ERROR(check_ndim(c, "x", p.x, 3, "[B, T, C]"));
  const int64_t B = p.x.shape[0], T = p.x.shape[1], C = p.x.shape[2];
  FGDN_RETURN_IF_ERROR(require(c, "z", p.z, "[B, T, Hv, V]"));
  FGDN_RETURN_IF_ERROR(check_ndim(c, "z", p.z, 4, "[B, T, Hv, V]"));
  const int64_t Hv = p.z.shape[2], V = p.z.shape[3];
  FGDN_RETURN_IF_ERROR(check_shape(c, "z", p.z, "[B, T, Hv, V]", {B, T, Hv, V}));
  FGDN_RETURN_IF_ERROR(check_same_dtype(c, "z", p.z, "x", p.x));
  const int64_t Hqk = p.num_k_heads, K = p.head_k_dim;
  if (Hqk <= 0 || Hqk > kInt32Max) return FGDN_INVALID(c.op, ": num_k_heads: expected Hqk in [1, 2^31 - 1], got ", Hqk);
  if (K <= 0 || K > kInt32Max) return FGDN_INVALID(c.op, ": head_k_dim: expected K in [1, 2^31 - 1], got ", K);
  if (Hv <= 0 || V <= 0) return FGDN_INVALID(c.op, ": z: expected positive Hv and V, got ", shape_str(p.z));
  if (Hv % Hqk != 0)
    return FGDN_INVALID(c.op, ": z: expected Hv (z.shape[2]) a multiple of num_k_heads = ", Hqk,
                        " (each key head serves Hv / Hqk value heads), got Hv = ", Hv);
  // An empty x or z (B = 0 or T = 0) bounds neither C nor Hv V by its element count, so the channel count is formed
  // with checked products: 2 Hqk K fits (Hqk, K < 2^31), Hv V and the sum may not.
  int64_t want = 0, hv_v = 0;
  const bool over = __builtin_mul_overflow(Hv, V, &hv_v) || __builtin_add_overflow(2 * Hqk * K, hv_v, &want);
  if (over || C != want)
    return FGDN_INVALID(c.op, ": x: expected C = 2 Hqk K + Hv V = 2 * ", Hqk, " * ", K, " + ", Hv, " * ", V, " = ",
                        over ? std::string("(past 2^63 - 1)") : std::to_string(want),
                        " channels [q | k | v], got C = ", C);
  FGDN_RETURN_IF_ERROR(require(c, "a", p.a, "[B, T, Hv] (raw decay input)"));
  FGDN_RETURN_IF_ERROR(require(c, "b", p.b, "[B, T, Hv] (raw beta input)"));
  FGDN_RETURN_IF_ERROR(require(c, "A_log", p.A_log, "[Hv]"));
  FGDN_RETURN_IF_ERROR(require(c, "out", p.out, "[B, T, Hv, V]"));
  FGDN_RETURN_IF_ERROR(check_like(c, "out", p.out, "[B, T, Hv, V]", {B, T, Hv, V}, "x", p.x));

  FGDN_RETURN_IF_ERROR(require(c, "conv_weight", p.conv_weight, "[C, Kc]"));
  FGDN_RETURN_IF_ERROR(check_ndim(c, "conv_weight", p.conv_weight, 2, "[C, Kc]"));
  const int64_t Kc = p.conv_weight.shape[1];
  FGDN_RETURN_IF_ERROR(check_shape(c, "conv_weight", p.conv_weight, "[C, Kc]", {C, Kc}));
  if (Kc < 1 || Kc > 8) return FGDN_INVALID(c.op, ": conv_weight: expected Kc in [1, 8] taps, got Kc = ", Kc);
  FGDN_RETURN_IF_ERROR(check_shape_if(c, "conv_bias", p.conv_bias, "[C]", {C}));
  FGDN_RETURN_IF_ERROR(require(c, "norm_weight", p.norm_weight, "[V]"));
  FGDN_RETURN_IF_ERROR(check_shape(c, "norm_weight", p.norm_weight, "[V]", {V}));
  if (!(p.norm_eps > 0.f) || !std::isfinite(p.norm_eps))
    return FGDN_INVALID(c.op, ": norm_eps: expected a finite value > 0, got ", p.norm_eps);

  FGDN_RETURN_IF_ERROR(require(c, "state_pool", p.state_pool, "[slots, Hv, K, V] or [slots, Hv, V, K]"));
  FGDN_RETURN_IF_ERROR(require(c, "conv_state", p.conv_state, "[slots, C, L]"));
  FGDN_RETURN_IF_ERROR(check_ndim(c, "conv_state", p.conv_state, 3, "[slots, C, L]"));
  FGDN_RETURN_IF_ERROR(check_same_dtype(c, "conv_state", p.conv_state, "x", p.x));
  const int64_t L = p.conv_state.shape[2];
  if (p.state_pool.ndim == 4 && p.conv_state.shape[0] != p.state_pool.shape[0])
    return FGDN_INVALID(c.op, ": conv_state: expected the slots of state_pool (", p.state_pool.shape[0],
                        ": one slot index addresses both), got ", shape_str(p.conv_state));
  FGDN_RETURN_IF_ERROR(check_shape(c, "conv_state", p.conv_state, "[slots, C, L]", {p.conv_state.shape[0], C, L}));

  // The recurrence: recurrent's rules (pool, indices, intermediates, gate options, cu_seqlens, aliasing).
  MixerDims dims;
  FGDN_RETURN_IF_ERROR(validate(mixer_recurrent_view(p), static_cast<RecurrentDims*>(&dims)));
  // L >= Kc - 2 + T_max, compared as T_max > L - (Kc - 2): an empty batch leaves T_max (state_indices.shape[1])
  // unbounded, and the sum could overflow.
  if (dims.T_max > 0 && dims.T_max > L - (Kc - 2))
    return FGDN_INVALID(c.op, ": conv_state: expected L >= Kc - 2 + T_max (Kc = ", Kc, ", T_max = ", dims.T_max,
                        ") positions with 2-D state_indices (token t of a row is kept at Kc - 2 + t), got ",
                        shape_str(p.conv_state));
  if (L < Kc - 1)
    return FGDN_INVALID(c.op, ": conv_state: expected L >= Kc - 1 = ", Kc - 1, " positions (the conv window), got ",
                        shape_str(p.conv_state));
  if (p.intermediate_conv_windows.defined()) {
    const TensorView& w = p.intermediate_conv_windows;
    FGDN_RETURN_IF_ERROR(check_ndim(c, "intermediate_conv_windows", w, 4, "[N_buf, T_buf, C, Kc - 1]"));
    if (p.intermediate_states.defined()) {
      FGDN_RETURN_IF_ERROR(check_shape(c, "intermediate_conv_windows", w, "[N_buf, T_buf, C, Kc - 1]",
                                       {dims.n_buf, dims.T_buf, C, Kc - 1}));
    } else {
      dims.n_buf = w.shape[0];
      dims.T_buf = w.shape[1];
      FGDN_RETURN_IF_ERROR(check_shape(c, "intermediate_conv_windows", w, "[N_buf, T_buf, C, Kc - 1]",
                                       {dims.n_buf, dims.T_buf, C, Kc - 1}));
      if (!dims.varlen && T > dims.T_buf)
        return FGDN_INVALID(c.op, ": intermediate_conv_windows: expected T_buf >= T = ", T, ", got ", shape_str(w));
      if (!p.intermediate_indices.defined() && dims.n_buf < dims.N)
        return FGDN_INVALID(c.op, ": intermediate_conv_windows: expected at least N = ", dims.N,
                            " rows N_buf (intermediate_indices is absent: row n uses entry n), got ", shape_str(w));
      if (p.intermediate_indices.defined())
        FGDN_RETURN_IF_ERROR(check_shape(c, "intermediate_indices", p.intermediate_indices, "[N]", {dims.N}));
    }
    FGDN_RETURN_IF_ERROR(check_same_dtype(c, "intermediate_conv_windows", w, "x", p.x));
  }
  if (c.cuda) {
    if (K != 128 || V != 128)
      return FGDN_ERROR(unsupported, c.op, ": head_k_dim: expected K = V = 128 on CUDA (the fused kernel's tile), ",
                        "got K = ", K, ", V = ", V);
    if (Hv / Hqk > 8)
      return FGDN_ERROR(unsupported, c.op, ": z: expected at most 8 value heads per key head on CUDA (one thread ",
                        "block cluster shares a key head's conv), got Hv / Hqk = ", Hv / Hqk);
    if (p.x.dtype == DType::f32)
      return FGDN_ERROR(unsupported, c.op, ": x: expected bf16 or f16 activations on CUDA, got f32");
    if (p.state_pool.dtype == DType::f16)
      return FGDN_ERROR(unsupported, c.op, ": state_pool: expected an f32 or bf16 pool on CUDA, got f16");
    if (p.intermediate_states.defined() && p.intermediate_states.dtype != p.state_pool.dtype)
      return FGDN_ERROR(unsupported, c.op, ": intermediate_states: expected the pool's dtype on CUDA (",
                        dtype_name(p.state_pool.dtype), "), got ", dtype_name(p.intermediate_states.dtype));
    if (dims.N > 65535)
      return FGDN_ERROR(unsupported, c.op, ": x: expected at most 65535 rows on CUDA (grid y), got N = ", dims.N);
  }
  FGDN_RETURN_IF_ERROR(check_overlaps(c));
  dims.C = C;
  dims.Kc = Kc;
  dims.L = L;
  *d = dims;
  return Status::OK();
}

// ---- index values of a host mirror (ops.cpp, exec.check_indices on CUDA) ---------------------------------------

Status check_index_values(const ChunkFwdParams& p, const ChunkDims& d) {
  return chunked_values(Ctx(p), p.cu_seqlens, d);
}
Status check_index_values(const ChunkBwdParams& p, const SeqDims& d) {
  return chunked_values(Ctx(p), p.cu_seqlens, d);
}
Status check_index_values(const GatingParams&, const GatingDims&) {
  return Status::OK();  // no index tensor
}
Status check_index_values(const RecurrentParams& p, const RecurrentDims& d) {
  return recurrent_values(Ctx(p), p, d);
}
Status check_index_values(const RecurrentCommitParams& p, const CommitDims& d) {
  return commit_values(Ctx(p), p, d);
}
Status check_index_values(const MixerDecodeParams& p, const MixerDims& d) {
  return check_index_values(mixer_recurrent_view(p), d);
}

}  // namespace flashgdn
