// flashgdn._C — the thin nanobind layer between Python and the C++ API (include/flashgdn/flashgdn.hpp).
//
// Every op is one call_op: its arguments come positionally in the op table's order (include/flashgdn/flashgdn_ops.h,
// through api/op_table.hpp): every tensor (None = absent), every scalar, then the stream and, for an op with a
// workspace, the allocator; _C.signature(op) lists the names. The Python package (python/flashgdn/) allocates the
// outputs in the caller's framework, picks the stream and owns every default. Tensors are found two ways, and every
// one becomes a DLTensor read by the library's one reader (flashgdn/dlpack.hpp), the C ABI's:
//   * torch.Tensor: through torch's DLPack C exchange API (about 0.1 us per tensor, no Python call), or, on a
//     torch without it, through the tensor's C-implemented attributes (about 1 us); torch's __dlpack__ is a
//     Python method and costs about 10 us;
//   * anything else (numpy, CuPy, ...): through DLPack (nb::ndarray), which keeps the producer alive for the
//     duration of the call.
// Strides: an input whose strides the kernels cannot take (a zero or negative stride on a dim of size > 1; on
// CUDA, for the inputs read with 16-byte vector loads, a last-dim stride != 1, an unaligned pointer or a stride
// that is not a multiple of 16 bytes) is replaced by a compact copy made by the registered copier (the input's own
// framework), held until the call returns. Outputs and in-out tensors are never copied: a copy would lose the
// write, so the library's validation rejects them with the argument's name.
// Stream: an int handle from Python, or None = torch's current stream of the inputs' device (asked in C++).
// Workspace: when the op's plan needs scratch memory, the op asks `alloc(nbytes)` (a Python callable, through a
// WorkspaceProvider) for a framework tensor of at least that many bytes; it is held until the launch has been
// enqueued. So an eager call validates and plans once. Errors raise the exception class
// of the Status code with the library's message unchanged.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "api/op_table.hpp"
#include "flashgdn/dlpack.hpp"
#include "flashgdn/flashgdn.hpp"

namespace nb = nanobind;
using namespace flashgdn;

namespace {

// ---- exception classes (created in the module init) ------------------------------------------------------
PyObject* g_invalid_argument = nullptr;  // InvalidArgumentError(ValueError)
PyObject* g_unsupported = nullptr;       // UnsupportedError(NotImplementedError)
PyObject* g_cuda_error = nullptr;        // CudaError(RuntimeError)
PyObject* g_internal = nullptr;          // InternalError(RuntimeError)

[[noreturn]] void raise_status(const Status& s) {
  PyObject* cls = g_internal;
  switch (s.code()) {
    case StatusCode::invalid_argument:
      cls = g_invalid_argument;
      break;
    case StatusCode::unsupported:
      cls = g_unsupported;
      break;
    case StatusCode::cuda_error:
      cls = g_cuda_error;
      break;
    case StatusCode::out_of_memory:  // a host allocation failed: Python's own class for it
      cls = PyExc_MemoryError;
      break;
    default:
      break;
  }
  PyErr_SetString(cls, s.message().c_str());
  throw nb::python_error();
}

[[noreturn]] void raise_arg(const char* op, const char* arg, const std::string& what) {
  PyErr_SetString(g_invalid_argument, (std::string(op) + ": " + arg + ": " + what).c_str());
  throw nb::python_error();
}

// ---- torch fast path -------------------------------------------------------------------------------------
// torch.Tensor publishes the DLPack C exchange API (DLPack >= 1.2, `__dlpack_c_exchange_api__` on the type): a
// C function fills a non-owning DLTensor from the Python object, and another returns torch's current stream,
// with no Python call at all. The struct below mirrors that stable ABI (the DLTensor it fills is dlpack.h's), so this
// file does not need a dlpack.h recent enough to declare it. Older torch: the tensor's C-implemented attributes.
struct DlExchangeApi {
  uint32_t major, minor;  // DLPackExchangeAPIHeader.version
  void* prev_api;
  void* managed_tensor_allocator;
  void* managed_tensor_from_py_object_no_sync;
  void* managed_tensor_to_py_object_no_sync;
  int (*dltensor_from_py_object_no_sync)(void* py_object, DLTensor* out);
  int (*current_work_stream)(int32_t device_type, int32_t device_id, void** out_stream);
};

struct TorchRefs {
  PyTypeObject* tensor_type = nullptr;
  const DlExchangeApi* api = nullptr;  // null: attribute path
  PyObject* dtypes[6] = {};            // indexed by DType: float32, float64, bfloat16, float16, int32, int64
  PyObject* s_data_ptr = nullptr;
  PyObject* s_shape = nullptr;
  PyObject* s_stride = nullptr;
  PyObject* s_dtype = nullptr;
  PyObject* s_is_cuda = nullptr;
  PyObject* s_get_device = nullptr;
};
TorchRefs g_torch;

// Returns whether the fast path (the DLPack C exchange API) is in use. The references are taken on the first call
// (they live as long as the module); a later call only chooses the reading path again.
bool register_torch(nb::handle tensor_type, nb::list dtypes, bool use_exchange_api) {
  if (dtypes.size() != 6) throw nb::value_error("register_torch: expected 6 dtypes");
  if (g_torch.tensor_type == nullptr) {
    Py_INCREF(tensor_type.ptr());
    g_torch.tensor_type = reinterpret_cast<PyTypeObject*>(tensor_type.ptr());
    for (size_t i = 0; i < 6; ++i) g_torch.dtypes[i] = dtypes[i].inc_ref().ptr();
    g_torch.s_data_ptr = PyUnicode_InternFromString("data_ptr");
    g_torch.s_shape = PyUnicode_InternFromString("shape");
    g_torch.s_stride = PyUnicode_InternFromString("stride");
    g_torch.s_dtype = PyUnicode_InternFromString("dtype");
    g_torch.s_is_cuda = PyUnicode_InternFromString("is_cuda");
    g_torch.s_get_device = PyUnicode_InternFromString("get_device");
  } else if (g_torch.tensor_type != reinterpret_cast<PyTypeObject*>(tensor_type.ptr())) {
    throw nb::value_error("register_torch: torch.Tensor is registered already");
  }
  g_torch.api = nullptr;
  if (use_exchange_api && nb::hasattr(tensor_type, "__dlpack_c_exchange_api__")) {
    nb::object cap = tensor_type.attr("__dlpack_c_exchange_api__");
    auto* api = static_cast<const DlExchangeApi*>(PyCapsule_GetPointer(cap.ptr(), "dlpack_exchange_api"));
    if (!api) {
      PyErr_Clear();
    } else if (api->major == 1 && api->dltensor_from_py_object_no_sync && api->current_work_stream) {
      g_torch.api = api;
    }
  }
  return g_torch.api != nullptr;
}

int64_t as_i64(PyObject* o) {
  long long x = PyLong_AsLongLong(o);
  if (x == -1 && PyErr_Occurred()) throw nb::python_error();
  return int64_t(x);
}

nb::object steal_checked(PyObject* o) {
  if (!o) throw nb::python_error();
  return nb::steal(o);
}

// Every tensor, whichever path found it, becomes a DLTensor read by the library's one reader (flashgdn/dlpack.hpp),
// so the Python module accepts exactly the tensors the C ABI accepts.
TensorView read_dltensor(const char* op, const char* arg, const DLTensor& d) {
  TensorView v;
  Status st = view_of_dlpack(&d, op, arg, &v);
  if (!st.ok()) raise_status(st);
  return v;
}

TensorView view_of_exchange(const char* op, const char* arg, PyObject* t) {
  DLTensor d{};
  if (g_torch.api->dltensor_from_py_object_no_sync(t, &d) != 0) {
    // torch refuses tensors without memory (meta, fake) or on devices DLPack has no code for: name the argument.
    nb::python_error err;
    raise_arg(op, arg,
              "expected a tensor with CPU or CUDA memory (meta and fake tensors go through torch.compile or the "
              "registered op flashgdn::*), torch said: " +
                  std::string(nb::str(err.value()).c_str()));
  }
  return read_dltensor(op, arg, d);
}

// The DLPack dtypes of the torch dtypes registered in g_torch.dtypes, in DType order.
constexpr DLDataType kDlDtypes[6] = {{kDLFloat, 32, 1}, {kDLFloat, 64, 1}, {kDLBfloat, 16, 1},
                                     {kDLFloat, 16, 1}, {kDLInt, 32, 1},   {kDLInt, 64, 1}};

TensorView view_of_torch(const char* op, const char* arg, PyObject* t) {
  if (g_torch.api) return view_of_exchange(op, arg, t);
  nb::object dt = steal_checked(PyObject_GetAttr(t, g_torch.s_dtype));
  int code = -1;
  for (int i = 0; i < 6; ++i)
    if (dt.ptr() == g_torch.dtypes[i]) code = i;
  if (code < 0)
    raise_arg(op, arg,
              "expected a dtype of float16/32/64, bfloat16, int32 or int64, got " + std::string(nb::str(dt).c_str()));
  nb::object shape = steal_checked(PyObject_GetAttr(t, g_torch.s_shape));
  nb::object stride = steal_checked(PyObject_CallMethodNoArgs(t, g_torch.s_stride));
  const Py_ssize_t nd = PyTuple_GET_SIZE(shape.ptr());
  if (nd > kMaxDims) raise_arg(op, arg, "expected 0 to 6 dims, got " + std::to_string(nd));
  int64_t sizes[kMaxDims] = {}, strides[kMaxDims] = {};
  for (Py_ssize_t i = 0; i < nd; ++i) {
    sizes[i] = as_i64(PyTuple_GET_ITEM(shape.ptr(), i));
    strides[i] = as_i64(PyTuple_GET_ITEM(stride.ptr(), i));
  }
  nb::object ptr = steal_checked(PyObject_CallMethodNoArgs(t, g_torch.s_data_ptr));
  DLTensor d{};
  d.data = reinterpret_cast<void*>(uintptr_t(PyLong_AsUnsignedLongLong(ptr.ptr())));
  d.ndim = int32_t(nd);
  d.dtype = kDlDtypes[code];
  d.shape = sizes;
  d.strides = strides;
  d.device = {kDLCPU, 0};  // CPU tensors only: meta / mps / xpu tensors have no memory this library can touch
  nb::object is_cuda = steal_checked(PyObject_GetAttr(t, g_torch.s_is_cuda));
  if (is_cuda.ptr() == Py_True) {
    nb::object dev = steal_checked(PyObject_CallMethodNoArgs(t, g_torch.s_get_device));
    d.device = {kDLCUDA, int32_t(as_i64(dev.ptr()))};
  }
  return read_dltensor(op, arg, d);
}

using Array = nb::ndarray<nb::ro>;

// Tensors read through DLPack, and the compact copies of inputs, stay referenced here until the op has returned.
struct Keep {
  std::vector<Array> arrays;
  std::vector<nb::object> copies;
};

// copier(x, stream) -> a compact, freshly allocated copy of x in x's framework, made on the launch's stream (None:
// the framework's current one) so that the kernel reads it after it is written (flashgdn/_frameworks.py).
// Held for the life of the process (like the torch refs): no destructor runs after the interpreter is gone.
PyObject* g_copier = nullptr;

// Whether the kernels can read input `v` with its strides (the rules of check_tensors in src/api/validate.cpp).
// `dense`: the input is read with 16-byte vector loads on CUDA.
bool kernel_readable(const TensorView& v, bool dense) {
  for (int i = 0; i < v.ndim; ++i)
    if (v.shape[i] == 0) return true;  // an empty tensor touches no memory
  for (int i = 0; i < v.ndim; ++i)
    if (v.shape[i] > 1 && v.strides[i] <= 0) return false;  // broadcast (zero) or reversed (negative) dims
  if (!dense || v.device != DeviceType::cuda || v.ndim == 0) return true;
  const int64_t es = dtype_size(v.dtype);
  if (v.shape[v.ndim - 1] > 1 && v.strides[v.ndim - 1] != 1) return false;
  if (reinterpret_cast<uintptr_t>(v.data) % 16 != 0) return false;
  for (int i = 0; i + 1 < v.ndim; ++i)
    if (v.shape[i] > 1 && (v.strides[i] * es) % 16 != 0) return false;
  return true;
}

TensorView view_of_ndarray(const char* op, const char* arg, nb::handle h, Keep& keep) {
  Array a;
  if (!nb::try_cast<Array>(h, a, /*convert=*/false))
    raise_arg(op, arg,
              "expected a torch tensor or a DLPack-capable array, got " + std::string(nb::type_name(h.type()).c_str()));
  DLTensor d{};
  d.data = const_cast<void*>(a.data());
  d.device = {static_cast<DLDeviceType>(a.device_type()), int32_t(a.device_id())};
  d.ndim = int32_t(a.ndim());
  const nb::dlpack::dtype dt = a.dtype();
  d.dtype = {dt.code, dt.bits, dt.lanes};
  d.shape = const_cast<int64_t*>(a.shape_ptr());
  d.strides = const_cast<int64_t*>(a.stride_ptr());
  TensorView v = read_dltensor(op, arg, d);
  keep.arrays.push_back(std::move(a));
  return v;
}

// None -> absent view.
TensorView view(const char* op, const char* arg, nb::handle h, Keep& keep) {
  if (h.is_none()) return TensorView{};
  if (g_torch.tensor_type && PyObject_TypeCheck(h.ptr(), g_torch.tensor_type)) return view_of_torch(op, arg, h.ptr());
  return view_of_ndarray(op, arg, h, keep);
}

// An input: read in place when the kernels can take its strides, else through a compact copy (see the top).
TensorView input_view(const char* op, const char* arg, nb::handle h, nb::handle stream, Keep& keep, bool dense) {
  TensorView v = view(op, arg, h, keep);
  if (!v.defined() || kernel_readable(v, dense) || !g_copier) return v;
  nb::object copy = nb::handle(g_copier)(h, stream);
  keep.copies.push_back(copy);
  return view(op, arg, copy, keep);
}

// The stream of a launch: an int handle from Python, or None for the current stream of the inputs' framework
// (torch's, through the exchange API; Python passes an int for every other case).
void* stream_of(nb::handle h, const TensorView& first) {
  if (!h.is_none()) {
    unsigned long long x = PyLong_AsUnsignedLongLong(h.ptr());
    if (x == (unsigned long long)-1 && PyErr_Occurred()) throw nb::python_error();
    return reinterpret_cast<void*>(uintptr_t(x));
  }
  if (first.device != DeviceType::cuda || !g_torch.api) return nullptr;
  void* s = nullptr;
  if (g_torch.api->current_work_stream(2, first.device_id, &s) != 0) throw nb::python_error();
  return s;
}

// Positional arguments of one call, read straight from the tuple (None stays None: an absent tensor).
struct Args {
  const char* op;
  PyObject* t;  // a tuple
  Args(const char* op_, const nb::args& args, size_t n) : op(op_), t(args.ptr()) {
    if (size() != n) raise_arg(op, "arguments", "expected " + std::to_string(n) + ", got " + std::to_string(size()));
  }
  Args(const char* op_, PyObject* tuple) : op(op_), t(tuple) {}
  size_t size() const { return size_t(PyTuple_GET_SIZE(t)); }
  nb::handle h(size_t i) const { return PyTuple_GET_ITEM(t, i); }
  bool b(size_t i) const {
    int r = PyObject_IsTrue(PyTuple_GET_ITEM(t, i));
    if (r < 0) throw nb::python_error();
    return r != 0;
  }
  float f(size_t i) const {
    double x = PyFloat_AsDouble(PyTuple_GET_ITEM(t, i));
    if (x == -1.0 && PyErr_Occurred()) throw nb::python_error();
    return float(x);
  }
  int64_t i(size_t k) const { return as_i64(PyTuple_GET_ITEM(t, k)); }
};

// Scalar argument k, read as the type of its params field (the op table gives both). Flags take any object with a
// truth value; state_layout takes the Python flag state_v_first (v_major = 1); an options struct is a tuple of its
// leading fields in table order, or None for the defaults.
void read_scalar(const Args& in, size_t k, bool* x) {
  *x = in.b(k);
}
void read_scalar(const Args& in, size_t k, float* x) {
  *x = in.f(k);
}
void read_scalar(const Args& in, size_t k, int64_t* x) {
  *x = in.i(k);
}
void read_scalar(const Args& in, size_t k, int32_t* x) {
  *x = int32_t(in.i(k));
}
template <class E, std::enable_if_t<std::is_enum_v<E>, int> = 0>
void read_scalar(const Args& in, size_t k, E* x) {
  *x = E(int32_t(in.i(k)));
}
template <class O, class = decltype(Options<O>{})>
void read_scalar(const Args& in, size_t k, O* x) {
  nb::handle h = in.h(k);
  if (h.is_none()) return;
  if (!PyTuple_Check(h.ptr())) raise_arg(in.op, "options", "expected a tuple or None");
  const Args fields(in.op, h.ptr());
  size_t f = 0;
  Options<O>::scalars(
      [&](const char*, auto& v) {
        if (f < fields.size()) read_scalar(fields, f, &v);
        ++f;
      },
      *x);
}

// Tensor argument k of a call, viewed under its name; the views' sources stay alive in `keep` until the call returns.
struct Views {
  const char* op;
  const Args& in;
  nb::handle stream;  // the call's stream argument (int handle or None): where input copies are made
  Keep keep;
  // An output or in-out tensor: read as given (never copied).
  TensorView operator()(size_t k, const char* name) { return view(op, name, in.h(k), keep); }
  // An input: copied when its strides do not suit the kernels; `dense` as in kernel_readable.
  TensorView input(size_t k, const char* name, bool dense = false) {
    return input_view(op, name, in.h(k), stream, keep, dense);
  }
};

// The workspace provider of a Python call: alloc(nbytes) returns a framework tensor, held in `keep` until the
// launch has been enqueued. It runs inside the op, without the GIL: it takes the GIL for the Python call, and a
// Python error becomes the pending exception (the op then fails and the binding raises it).
struct PyWorkspace {
  Views* tv;
  nb::handle alloc;
  static void* get(void* ctx, size_t bytes) {
    auto* self = static_cast<PyWorkspace*>(ctx);
    nb::gil_scoped_acquire gil;
    try {
      if (self->alloc.is_none())
        raise_arg(self->tv->op, "workspace", "op needs " + std::to_string(bytes) + " bytes but no allocator");
      nb::object owner = nb::borrow(self->alloc)(bytes);
      self->tv->keep.copies.push_back(owner);
      return view(self->tv->op, "workspace", owner, self->tv->keep).data;
    } catch (nb::python_error& e) {
      e.restore();
      return nullptr;
    }
  }
};

// One op P called from Python: arguments in table order (every tensor, then every scalar), then the stream and,
// for an op with a workspace (one `run` accepts a WorkspaceProvider), the allocator. The op validates and plans
// once, without the GIL.
template <class P, class Run>
void call_op(const nb::args& args, Run run) {
  constexpr bool with_workspace = std::is_invocable_v<Run, const P&, const WorkspaceProvider&, void*>;
  const char* op = Op<P>::name;
  size_t num_scalars = 0;
  P p;
  Op<P>::scalars([&](const char*, auto&) { ++num_scalars; }, p);
  const size_t nt = size_t(Op<P>::num_tensors);
  Args in(op, args, nt + num_scalars + (with_workspace ? 2 : 1));
  size_t k = nt;
  Op<P>::scalars([&](const char*, auto& v) { read_scalar(in, k++, &v); }, p);
  const nb::handle stream = in.h(nt + num_scalars);
  Views tv{op, in, stream};
  size_t t = 0;
  Op<P>::tensors(
      [&](const TensorSpec& s, TensorView& v) {
        v = s.role == Role::in ? tv.input(t, s.name, s.layout == Layout::dense) : tv(t, s.name);
        ++t;
      },
      p);
  TensorView first;
  Op<P>::tensors(
      [&](const TensorSpec&, const TensorView& v) {
        if (!first.defined()) first = v;
      },
      p);
  void* s = stream_of(stream, first);
  Status st;
  if constexpr (with_workspace) {
    PyWorkspace ws{&tv, in.h(nt + num_scalars + 1)};
    const WorkspaceProvider provider{&PyWorkspace::get, &ws};
    {
      nb::gil_scoped_release nogil;
      st = run(p, provider, s);
    }
  } else {
    nb::gil_scoped_release nogil;
    st = run(p, s);
  }
  if (PyErr_Occurred()) throw nb::python_error();
  if (!st.ok()) raise_status(st);
}

// The argument names of op P in the order call_op reads them: what python/flashgdn/_ops.py passes.
template <class P>
nb::list signature(bool with_workspace) {
  nb::list names;
  P p;
  Op<P>::tensors([&](const TensorSpec& s, const TensorView&) { names.append(s.name); }, p);
  Op<P>::scalars([&](const char* name,
                     const auto&) { names.append(std::string(name) == "state_layout" ? "state_v_first" : name); },
                 p);
  names.append("stream");
  if (with_workspace) names.append("alloc");
  return names;
}

// The field names of an options struct in the order read_scalar reads its tuple.
template <class O>
nb::list options_fields() {
  nb::list names;
  O o;
  Options<O>::scalars([&](const char* name, const auto&) { names.append(name); }, o);
  return names;
}

// Host cost of reading one call's tensors (bench/side_by_side.py reports it next to the full eager call).
int64_t probe_views(nb::args tensors) {
  Keep keep;
  int64_t n = 0;
  for (nb::handle h : tensors) n += view("probe_views", "tensor", h, keep).ndim;
  return n;
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "flashgdn C++ API bindings (thin; use the flashgdn package)";
  g_invalid_argument = PyErr_NewException("flashgdn.InvalidArgumentError", PyExc_ValueError, nullptr);
  g_unsupported = PyErr_NewException("flashgdn.UnsupportedError", PyExc_NotImplementedError, nullptr);
  g_cuda_error = PyErr_NewException("flashgdn.CudaError", PyExc_RuntimeError, nullptr);
  g_internal = PyErr_NewException("flashgdn.InternalError", PyExc_RuntimeError, nullptr);
  m.attr("InvalidArgumentError") = nb::handle(g_invalid_argument);
  m.attr("UnsupportedError") = nb::handle(g_unsupported);
  m.attr("CudaError") = nb::handle(g_cuda_error);
  m.attr("InternalError") = nb::handle(g_internal);

  m.def("version", []() { return std::string(version()); });
  m.def("cuda_available", []() { return cuda_available(); });
  m.def("built_with_cuda", []() { return bool(FLASHGDN_WITH_CUDA); });
  m.def("register_torch", &register_torch);
  m.def("register_copier", [](nb::handle fn) {
    Py_XDECREF(g_copier);
    g_copier = fn.inc_ref().ptr();
  });
  m.def("torch_fast_path", []() { return g_torch.api != nullptr; });
  m.def("chunk_fwd", [](nb::args a) {
    call_op<ChunkFwdParams>(
        a, [](const ChunkFwdParams& p, const WorkspaceProvider& w, void* s) { return chunk_fwd(p, w, s); });
  });
  m.def("chunk_bwd", [](nb::args a) {
    call_op<ChunkBwdParams>(
        a, [](const ChunkBwdParams& p, const WorkspaceProvider& w, void* s) { return chunk_bwd(p, w, s); });
  });
  m.def("gating",
        [](nb::args a) { call_op<GatingParams>(a, [](const GatingParams& p, void* s) { return gating(p, s); }); });
  m.def("recurrent", [](nb::args a) {
    call_op<RecurrentParams>(
        a, [](const RecurrentParams& p, const WorkspaceProvider& w, void* s) { return recurrent(p, w, s); });
  });
  m.def("recurrent_commit", [](nb::args a) {
    call_op<RecurrentCommitParams>(a, [](const RecurrentCommitParams& p, void* s) { return recurrent_commit(p, s); });
  });
  m.def("mixer_decode", [](nb::args a) {
    call_op<MixerDecodeParams>(a, [](const MixerDecodeParams& p, void* s) { return mixer_decode(p, s); });
  });
  // The positional argument names of each op (the op table's order): python/flashgdn/_ops.py passes them so.
  m.def("signature", [](const std::string& op) -> nb::list {
    if (op == "chunk_fwd") return signature<ChunkFwdParams>(true);
    if (op == "chunk_bwd") return signature<ChunkBwdParams>(true);
    if (op == "gating") return signature<GatingParams>(false);
    if (op == "recurrent") return signature<RecurrentParams>(true);
    if (op == "recurrent_commit") return signature<RecurrentCommitParams>(false);
    if (op == "mixer_decode") return signature<MixerDecodeParams>(false);
    throw nb::value_error(("signature: no op " + op).c_str());
  });
  m.def("options_fields", [](const std::string& which) -> nb::list {
    if (which == "exec") return options_fields<ExecOptions>();
    if (which == "gate") return options_fields<GateOptions>();
    throw nb::value_error(("options_fields: no options struct " + which).c_str());
  });
  m.def("probe_views", &probe_views);
}
