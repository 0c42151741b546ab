// flashgdn._C — the thin nanobind layer between Python and the C++ API (include/flashgdn/flashgdn.hpp).
//
// Every function takes its tensors positionally (None = absent) and fills one params struct; the Python package
// (python/flashgdn/) allocates the outputs in the caller's framework, picks the stream and owns every default.
// Tensors are read two ways:
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
// Workspace: when the op needs scratch memory, `alloc(nbytes)` (a Python callable) returns a framework tensor
// of at least that many bytes; it is held until the launch has been enqueued. Errors raise the exception class
// of the Status code with the library's message unchanged.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <string>
#include <vector>

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
// with no Python call at all. The structs below mirror that stable ABI, so this file does not depend on the
// version of dlpack.h found at build time. Older torch: the tensor's C-implemented attributes instead.
struct DlDevice {
  int32_t device_type;  // kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLCUDAManaged = 13
  int32_t device_id;
};
struct DlDtype {
  uint8_t code;  // kDLInt = 0, kDLFloat = 2, kDLBfloat = 4
  uint8_t bits;
  uint16_t lanes;
};
struct DlTensor {
  void* data;
  DlDevice device;
  int32_t ndim;
  DlDtype dtype;
  int64_t* shape;
  int64_t* strides;  // may be null: compact row-major
  uint64_t byte_offset;
};
struct DlExchangeApi {
  uint32_t major, minor;  // DLPackExchangeAPIHeader.version
  void* prev_api;
  void* managed_tensor_allocator;
  void* managed_tensor_from_py_object_no_sync;
  void* managed_tensor_to_py_object_no_sync;
  int (*dltensor_from_py_object_no_sync)(void* py_object, DlTensor* out);
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

// Returns whether the fast path (the DLPack C exchange API) is in use.
bool register_torch(nb::handle tensor_type, nb::list dtypes, bool use_exchange_api) {
  if (dtypes.size() != 6) throw nb::value_error("register_torch: expected 6 dtypes");
  Py_INCREF(tensor_type.ptr());
  g_torch.tensor_type = reinterpret_cast<PyTypeObject*>(tensor_type.ptr());
  for (size_t i = 0; i < 6; ++i) g_torch.dtypes[i] = dtypes[i].inc_ref().ptr();
  g_torch.s_data_ptr = PyUnicode_InternFromString("data_ptr");
  g_torch.s_shape = PyUnicode_InternFromString("shape");
  g_torch.s_stride = PyUnicode_InternFromString("stride");
  g_torch.s_dtype = PyUnicode_InternFromString("dtype");
  g_torch.s_is_cuda = PyUnicode_InternFromString("is_cuda");
  g_torch.s_get_device = PyUnicode_InternFromString("get_device");
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

// DLPack (code, bits, lanes) -> DType, or -1 when the library has no such dtype.
int dtype_code(uint8_t code, uint8_t bits, uint16_t lanes) {
  if (lanes != 1) return -1;
  if (code == 2 && bits == 32) return int(DType::f32);
  if (code == 2 && bits == 64) return int(DType::f64);
  if (code == 2 && bits == 16) return int(DType::f16);
  if (code == 4 && bits == 16) return int(DType::bf16);
  if (code == 0 && bits == 32) return int(DType::i32);
  if (code == 0 && bits == 64) return int(DType::i64);
  return -1;
}

TensorView view_of_exchange(const char* op, const char* arg, PyObject* t) {
  DlTensor d{};
  if (g_torch.api->dltensor_from_py_object_no_sync(t, &d) != 0) {
    // torch refuses tensors without memory (meta, fake) or on devices DLPack has no code for: name the argument.
    nb::python_error err;
    raise_arg(op, arg,
              "expected a tensor with CPU or CUDA memory (meta and fake tensors go through torch.compile or the "
              "registered op flashgdn::*), torch said: " +
                  std::string(nb::str(err.value()).c_str()));
  }
  TensorView v;
  int code = dtype_code(d.dtype.code, d.dtype.bits, d.dtype.lanes);
  if (code < 0)
    raise_arg(op, arg,
              "unsupported dtype (DLPack code " + std::to_string(d.dtype.code) + ", bits " +
                  std::to_string(d.dtype.bits) + ")");
  if (d.ndim > kMaxDims) raise_arg(op, arg, "more than 6 dims");
  v.dtype = DType(code);
  v.ndim = d.ndim;
  int64_t compact = 1;
  for (int i = d.ndim - 1; i >= 0; --i) {
    v.shape[i] = d.shape[i];
    v.strides[i] = d.strides ? d.strides[i] : compact;
    compact *= d.shape[i];
  }
  v.data = static_cast<char*>(d.data) + d.byte_offset;
  if (d.device.device_type == 2 || d.device.device_type == 13) {
    v.device = DeviceType::cuda;
    v.device_id = d.device.device_id;
  } else if (d.device.device_type == 1 || d.device.device_type == 3) {
    v.device = DeviceType::cpu;
  } else {
    raise_arg(op, arg, "unsupported device type (DLPack " + std::to_string(d.device.device_type) + ")");
  }
  return v;
}

TensorView view_of_torch(const char* op, const char* arg, PyObject* t) {
  if (g_torch.api) return view_of_exchange(op, arg, t);
  TensorView v;
  nb::object dt = steal_checked(PyObject_GetAttr(t, g_torch.s_dtype));
  int code = -1;
  for (int i = 0; i < 6; ++i)
    if (dt.ptr() == g_torch.dtypes[i]) code = i;
  if (code < 0) raise_arg(op, arg, "unsupported dtype " + std::string(nb::str(dt).c_str()));
  v.dtype = DType(code);
  nb::object shape = steal_checked(PyObject_GetAttr(t, g_torch.s_shape));
  nb::object stride = steal_checked(PyObject_CallMethodNoArgs(t, g_torch.s_stride));
  Py_ssize_t nd = PyTuple_GET_SIZE(shape.ptr());
  if (nd > kMaxDims) raise_arg(op, arg, "more than 6 dims");
  v.ndim = int32_t(nd);
  for (Py_ssize_t i = 0; i < nd; ++i) {
    v.shape[i] = as_i64(PyTuple_GET_ITEM(shape.ptr(), i));
    v.strides[i] = as_i64(PyTuple_GET_ITEM(stride.ptr(), i));
  }
  nb::object ptr = steal_checked(PyObject_CallMethodNoArgs(t, g_torch.s_data_ptr));
  v.data = reinterpret_cast<void*>(uintptr_t(PyLong_AsUnsignedLongLong(ptr.ptr())));
  nb::object is_cuda = steal_checked(PyObject_GetAttr(t, g_torch.s_is_cuda));
  if (is_cuda.ptr() == Py_True) {
    nb::object dev = steal_checked(PyObject_CallMethodNoArgs(t, g_torch.s_get_device));
    v.device = DeviceType::cuda;
    v.device_id = int32_t(as_i64(dev.ptr()));
  } else {
    // CPU tensors only: meta / mps / xpu tensors have no memory this library can touch.
    v.device = DeviceType::cpu;
  }
  return v;
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

TensorView view_of_dlpack(const char* op, const char* arg, nb::handle h, Keep& keep) {
  Array a;
  if (!nb::try_cast<Array>(h, a, /*convert=*/false))
    raise_arg(op, arg,
              "expected a torch tensor or a DLPack-capable array, got " + std::string(nb::type_name(h.type()).c_str()));
  TensorView v;
  nb::dlpack::dtype dt = a.dtype();
  int code = dtype_code(dt.code, dt.bits, dt.lanes);
  if (code < 0)
    raise_arg(op, arg,
              "unsupported dtype (DLPack code " + std::to_string(dt.code) + ", bits " + std::to_string(dt.bits) + ")");
  v.dtype = DType(code);
  if (a.ndim() > size_t(kMaxDims)) raise_arg(op, arg, "more than 6 dims");
  v.ndim = int32_t(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) {
    v.shape[i] = int64_t(a.shape(i));
    v.strides[i] = int64_t(a.stride(i));
  }
  v.data = const_cast<void*>(a.data());
  int dev = a.device_type();
  if (dev == nb::device::cpu::value || dev == nb::device::cuda_host::value) {
    v.device = DeviceType::cpu;
  } else if (dev == nb::device::cuda::value || dev == nb::device::cuda_managed::value) {
    v.device = DeviceType::cuda;
    v.device_id = int32_t(a.device_id());
  } else {
    raise_arg(op, arg, "unsupported device type (DLPack " + std::to_string(dev) + ")");
  }
  keep.arrays.push_back(std::move(a));
  return v;
}

// None -> absent view.
TensorView view(const char* op, const char* arg, nb::handle h, Keep& keep) {
  if (h.is_none()) return TensorView{};
  if (g_torch.tensor_type && PyObject_TypeCheck(h.ptr(), g_torch.tensor_type)) return view_of_torch(op, arg, h.ptr());
  return view_of_dlpack(op, arg, h, keep);
}

// An input: read in place when the kernels can take its strides, else through a compact copy (see the top).
TensorView input_view(const char* op, const char* arg, nb::handle h, nb::handle stream, Keep& keep, bool dense) {
  TensorView v = view(op, arg, h, keep);
  if (!v.defined() || kernel_readable(v, dense) || !g_copier) return v;
  nb::object copy = nb::handle(g_copier)(h, stream);
  keep.copies.push_back(copy);
  return view(op, arg, copy, keep);
}

// The scratch buffer: alloc(nbytes) returns a framework tensor; its address is read like any other tensor.
struct Workspace {
  nb::object owner;
  void* ptr = nullptr;
  size_t bytes = 0;
};

Workspace make_workspace(const char* op, size_t bytes, nb::handle alloc, Keep& keep) {
  Workspace ws;
  if (bytes == 0) return ws;
  if (alloc.is_none()) raise_arg(op, "workspace", "op needs " + std::to_string(bytes) + " bytes but no allocator");
  ws.owner = nb::borrow(alloc)(bytes);
  ws.ptr = view(op, "workspace", ws.owner, keep).data;
  ws.bytes = bytes;
  return ws;
}

StateLayout layout_of(bool state_v_first) {
  return state_v_first ? StateLayout::v_major : StateLayout::k_major;
}

// exec = (check_indices, cpu_fp64, cpu_algo, cpu_threads)
ExecOptions exec_of(nb::handle t) {
  ExecOptions e;
  if (t.is_none()) return e;
  nb::tuple tup = nb::borrow<nb::tuple>(t);
  e.check_indices = nb::cast<bool>(tup[0]);
  e.cpu_fp64 = nb::cast<bool>(tup[1]);
  e.cpu_algo = CpuAlgo(nb::cast<int>(tup[2]));
  e.cpu_threads = nb::cast<int>(tup[3]);
  return e;
}

// gate = (use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, softplus_beta, softplus_threshold)
GateOptions gate_of(nb::handle t) {
  GateOptions g;
  if (t.is_none()) return g;
  nb::tuple tup = nb::borrow<nb::tuple>(t);
  g.use_gate_in_kernel = nb::cast<bool>(tup[0]);
  g.use_beta_sigmoid_in_kernel = nb::cast<bool>(tup[1]);
  g.allow_neg_eigval = nb::cast<bool>(tup[2]);
  g.softplus_beta = nb::cast<float>(tup[3]);
  g.softplus_threshold = nb::cast<float>(tup[4]);
  return g;
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
  PyObject* t;
  Args(const char* op, const nb::args& args, size_t n) : t(args.ptr()) {
    if (size_t(PyTuple_GET_SIZE(t)) != n)
      raise_arg(op, "arguments", "expected " + std::to_string(n) + ", got " + std::to_string(PyTuple_GET_SIZE(t)));
  }
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

// ---- ops -------------------------------------------------------------------------------------------------
// Each op reads its scalars first, then its tensors in argument order (the first bad tensor names itself), then
// the option tuples; the launch runs without the GIL.

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

// workspace_size, the workspace from the Python allocator, then the launch.
template <class P, class SizeFn, class RunFn>
void launch_with_workspace(Views& tv, const P& p, const TensorView& first, nb::handle stream, nb::handle alloc,
                           SizeFn size_fn, RunFn run_fn) {
  size_t bytes = 0;
  Status st = size_fn(p, &bytes);
  if (!st.ok()) raise_status(st);
  Workspace ws = make_workspace(tv.op, bytes, alloc, tv.keep);
  void* s = stream_of(stream, first);
  {
    nb::gil_scoped_release nogil;
    st = run_fn(p, ws.ptr, ws.bytes, s);
  }
  if (!st.ok()) raise_status(st);
}

// An op without a workspace.
template <class P, class RunFn>
void launch(const P& p, const TensorView& first, nb::handle stream, RunFn run_fn) {
  Status st;
  void* s = stream_of(stream, first);
  {
    nb::gil_scoped_release nogil;
    st = run_fn(p, s);
  }
  if (!st.ok()) raise_status(st);
}

// Arguments 0-6 of every op: q, k, v and the gate inputs, in this order.
template <class P>
void read_qkv_gates(Views& tv, P& p) {
  p.q = tv.input(0, "q", true);
  p.k = tv.input(1, "k", true);
  p.v = tv.input(2, "v", true);
  p.g = tv.input(3, "g");
  p.beta = tv.input(4, "beta");
  p.A_log = tv.input(5, "A_log");
  p.dt_bias = tv.input(6, "dt_bias");
}

// Arguments 0-8 of chunk_fwd and chunk_bwd: the sequence inputs, in this order.
template <class P>
void read_seq_inputs(Views& tv, P& p) {
  read_qkv_gates(tv, p);
  p.initial_state = tv.input(7, "initial_state", true);
  p.cu_seqlens = tv.input(8, "cu_seqlens");
}

void chunk_fwd_py(nb::args args) {
  Args in("chunk_fwd", args, 21);
  const int64_t checkpoint_interval = in.i(12);
  const float scale = in.f(13);
  const bool use_qk_l2norm_in_kernel = in.b(14);
  const bool state_v_first = in.b(16);
  const int chunk_size = int(in.i(17));
  Views tv{"chunk_fwd", in, in.h(19)};
  ChunkFwdParams p;
  read_seq_inputs(tv, p);
  p.o = tv(9, "o");
  p.final_state = tv(10, "final_state");
  p.state_checkpoints = tv(11, "state_checkpoints");
  p.checkpoint_interval = checkpoint_interval;
  p.scale = scale;
  p.use_qk_l2norm_in_kernel = use_qk_l2norm_in_kernel;
  p.gate = gate_of(in.h(15));
  p.state_layout = layout_of(state_v_first);
  p.chunk_size = chunk_size;
  p.exec = exec_of(in.h(18));
  launch_with_workspace(
      tv, p, p.q, in.h(19), in.h(20), [](const ChunkFwdParams& x, size_t* n) { return chunk_fwd_workspace_size(x, n); },
      [](const ChunkFwdParams& x, void* w, size_t n, void* s) { return chunk_fwd(x, w, n, s); });
}

void chunk_bwd_py(nb::args args) {
  Args in("chunk_bwd", args, 27);
  const float scale = in.f(19);
  const bool use_qk_l2norm_in_kernel = in.b(20);
  const bool state_v_first = in.b(22);
  const int chunk_size = int(in.i(23));
  Views tv{"chunk_bwd", in, in.h(25)};
  ChunkBwdParams p;
  read_seq_inputs(tv, p);
  p.d_o = tv.input(9, "d_o", true);
  p.d_ht = tv.input(10, "d_ht", true);
  p.dq = tv(11, "dq");
  p.dk = tv(12, "dk");
  p.dv = tv(13, "dv");
  p.dg = tv(14, "dg");
  p.dbeta = tv(15, "dbeta");
  p.dh0 = tv(16, "dh0");
  p.dA_log = tv(17, "dA_log");
  p.ddt_bias = tv(18, "ddt_bias");
  p.scale = scale;
  p.use_qk_l2norm_in_kernel = use_qk_l2norm_in_kernel;
  p.gate = gate_of(in.h(21));
  p.state_layout = layout_of(state_v_first);
  p.chunk_size = chunk_size;
  p.exec = exec_of(in.h(24));
  launch_with_workspace(
      tv, p, p.q, in.h(25), in.h(26), [](const ChunkBwdParams& x, size_t* n) { return chunk_bwd_workspace_size(x, n); },
      [](const ChunkBwdParams& x, void* w, size_t n, void* s) { return chunk_bwd(x, w, n, s); });
}

void gating_py(nb::args args) {
  Args in("gating", args, 9);
  Views tv{"gating", in, in.h(8)};
  GatingParams p;
  p.A_log = tv.input(0, "A_log");
  p.a = tv.input(1, "a");
  p.dt_bias = tv.input(2, "dt_bias");
  p.b = tv.input(3, "b");
  p.g = tv(4, "g");
  p.beta = tv(5, "beta");
  p.gate = gate_of(in.h(6));
  p.exec = exec_of(in.h(7));
  launch(p, p.a, in.h(8), [](const GatingParams& x, void* s) { return gating(x, s); });
}

void recurrent_py(nb::args args) {
  Args in("recurrent", args, 25);
  const bool commit = in.b(16);
  const bool null_slot_is_invalid = in.b(17);
  const float scale = in.f(18);
  const bool use_qk_l2norm_in_kernel = in.b(19);
  const bool state_v_first = in.b(21);
  Views tv{"recurrent", in, in.h(23)};
  RecurrentParams p;
  read_qkv_gates(tv, p);
  p.cu_seqlens = tv.input(7, "cu_seqlens");
  p.o = tv(8, "o");
  p.state_pool = tv(9, "state_pool");
  p.state_indices = tv.input(10, "state_indices");
  p.num_accepted_tokens = tv.input(11, "num_accepted_tokens");
  p.intermediate_states = tv(12, "intermediate_states");
  p.intermediate_indices = tv.input(13, "intermediate_indices");
  p.initial_state = tv.input(14, "initial_state", true);
  p.final_state = tv(15, "final_state");
  p.commit = commit;
  p.null_slot_is_invalid = null_slot_is_invalid;
  p.scale = scale;
  p.use_qk_l2norm_in_kernel = use_qk_l2norm_in_kernel;
  p.gate = gate_of(in.h(20));
  p.state_layout = layout_of(state_v_first);
  p.exec = exec_of(in.h(22));
  launch_with_workspace(
      tv, p, p.q, in.h(23), in.h(24),
      [](const RecurrentParams& x, size_t* n) { return recurrent_workspace_size(x, n); },
      [](const RecurrentParams& x, void* w, size_t n, void* s) { return recurrent(x, w, n, s); });
}

void recurrent_commit_py(nb::args args) {
  Args in("recurrent_commit", args, 8);
  const bool null_slot_is_invalid = in.b(5);
  Views tv{"recurrent_commit", in, in.h(7)};
  RecurrentCommitParams p;
  p.state_pool = tv(0, "state_pool");
  p.state_indices = tv.input(1, "state_indices");
  p.intermediate_states = tv.input(2, "intermediate_states", true);
  p.intermediate_indices = tv.input(3, "intermediate_indices");
  p.num_accepted_tokens = tv.input(4, "num_accepted_tokens");
  p.null_slot_is_invalid = null_slot_is_invalid;
  p.exec = exec_of(in.h(6));
  launch(p, p.state_pool, in.h(7), [](const RecurrentCommitParams& x, void* s) { return recurrent_commit(x, s); });
}

void mixer_decode_py(nb::args args) {
  Args in("mixer_decode", args, 28);
  const int64_t num_k_heads = in.i(18), head_k_dim = in.i(19);
  const bool commit = in.b(20), null_slot_is_invalid = in.b(21);
  const float scale = in.f(22), norm_eps = in.f(23);
  const bool state_v_first = in.b(25);
  Views tv{"mixer_decode", in, in.h(27)};
  MixerDecodeParams p;
  p.x = tv.input(0, "x", true);
  p.z = tv.input(1, "z");
  p.a = tv.input(2, "a");
  p.b = tv.input(3, "b");
  p.A_log = tv.input(4, "A_log");
  p.dt_bias = tv.input(5, "dt_bias");
  p.conv_weight = tv.input(6, "conv_weight");
  p.conv_bias = tv.input(7, "conv_bias");
  p.norm_weight = tv.input(8, "norm_weight");
  p.cu_seqlens = tv.input(9, "cu_seqlens");
  p.conv_state = tv(10, "conv_state");
  p.state_pool = tv(11, "state_pool");
  p.state_indices = tv.input(12, "state_indices");
  p.num_accepted_tokens = tv.input(13, "num_accepted_tokens");
  p.intermediate_states = tv(14, "intermediate_states");
  p.intermediate_conv_windows = tv(15, "intermediate_conv_windows");
  p.intermediate_indices = tv.input(16, "intermediate_indices");
  p.out = tv(17, "out");
  p.num_k_heads = num_k_heads;
  p.head_k_dim = head_k_dim;
  p.commit = commit;
  p.null_slot_is_invalid = null_slot_is_invalid;
  p.scale = scale;
  p.norm_eps = norm_eps;
  p.gate = gate_of(in.h(24));
  p.state_layout = layout_of(state_v_first);
  p.exec = exec_of(in.h(26));
  launch(p, p.x, in.h(27), [](const MixerDecodeParams& x, void* s) { return mixer_decode(x, s); });
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
  m.def("chunk_fwd", &chunk_fwd_py);
  m.def("chunk_bwd", &chunk_bwd_py);
  m.def("gating", &gating_py);
  m.def("recurrent", &recurrent_py);
  m.def("recurrent_commit", &recurrent_commit_py);
  m.def("mixer_decode", &mixer_decode_py);
  m.def("probe_views", &probe_views);
}
