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
  if (g_torch.api->dltensor_from_py_object_no_sync(t, &d) != 0) throw nb::python_error();
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

// Tensors read through DLPack stay referenced here until the op has returned.
struct Keep {
  std::vector<Array> arrays;
};

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
void chunk_fwd_py(nb::args args) {
  Args in("chunk_fwd", args, 21);
  nb::handle q = in.h(0);
  nb::handle k = in.h(1);
  nb::handle v = in.h(2);
  nb::handle g = in.h(3);
  nb::handle beta = in.h(4);
  nb::handle A_log = in.h(5);
  nb::handle dt_bias = in.h(6);
  nb::handle initial_state = in.h(7);
  nb::handle cu_seqlens = in.h(8);
  nb::handle o = in.h(9);
  nb::handle final_state = in.h(10);
  nb::handle state_checkpoints = in.h(11);
  int64_t checkpoint_interval = in.i(12);
  float scale = in.f(13);
  bool use_qk_l2norm_in_kernel = in.b(14);
  nb::handle gate = in.h(15);
  bool state_v_first = in.b(16);
  int chunk_size = int(in.i(17));
  nb::handle exec = in.h(18);
  nb::handle stream = in.h(19);
  nb::handle alloc = in.h(20);
  const char* op = "chunk_fwd";
  Keep keep;
  ChunkFwdParams p;
  p.q = view(op, "q", q, keep);
  p.k = view(op, "k", k, keep);
  p.v = view(op, "v", v, keep);
  p.g = view(op, "g", g, keep);
  p.beta = view(op, "beta", beta, keep);
  p.A_log = view(op, "A_log", A_log, keep);
  p.dt_bias = view(op, "dt_bias", dt_bias, keep);
  p.initial_state = view(op, "initial_state", initial_state, keep);
  p.cu_seqlens = view(op, "cu_seqlens", cu_seqlens, keep);
  p.o = view(op, "o", o, keep);
  p.final_state = view(op, "final_state", final_state, keep);
  p.state_checkpoints = view(op, "state_checkpoints", state_checkpoints, keep);
  p.checkpoint_interval = checkpoint_interval;
  p.scale = scale;
  p.use_qk_l2norm_in_kernel = use_qk_l2norm_in_kernel;
  p.gate = gate_of(gate);
  p.state_layout = layout_of(state_v_first);
  p.chunk_size = chunk_size;
  p.exec = exec_of(exec);
  size_t bytes = 0;
  Status st = chunk_fwd_workspace_size(p, &bytes);
  if (!st.ok()) raise_status(st);
  Workspace ws = make_workspace(op, bytes, alloc, keep);
  void* s = stream_of(stream, p.q);
  {
    nb::gil_scoped_release nogil;
    st = chunk_fwd(p, ws.ptr, ws.bytes, s);
  }
  if (!st.ok()) raise_status(st);
}

void chunk_bwd_py(nb::args args) {
  Args in("chunk_bwd", args, 27);
  nb::handle q = in.h(0);
  nb::handle k = in.h(1);
  nb::handle v = in.h(2);
  nb::handle g = in.h(3);
  nb::handle beta = in.h(4);
  nb::handle A_log = in.h(5);
  nb::handle dt_bias = in.h(6);
  nb::handle initial_state = in.h(7);
  nb::handle cu_seqlens = in.h(8);
  nb::handle d_o = in.h(9);
  nb::handle d_ht = in.h(10);
  nb::handle dq = in.h(11);
  nb::handle dk = in.h(12);
  nb::handle dv = in.h(13);
  nb::handle dg = in.h(14);
  nb::handle dbeta = in.h(15);
  nb::handle dh0 = in.h(16);
  nb::handle dA_log = in.h(17);
  nb::handle ddt_bias = in.h(18);
  float scale = in.f(19);
  bool use_qk_l2norm_in_kernel = in.b(20);
  nb::handle gate = in.h(21);
  bool state_v_first = in.b(22);
  int chunk_size = int(in.i(23));
  nb::handle exec = in.h(24);
  nb::handle stream = in.h(25);
  nb::handle alloc = in.h(26);
  const char* op = "chunk_bwd";
  Keep keep;
  ChunkBwdParams p;
  p.q = view(op, "q", q, keep);
  p.k = view(op, "k", k, keep);
  p.v = view(op, "v", v, keep);
  p.g = view(op, "g", g, keep);
  p.beta = view(op, "beta", beta, keep);
  p.A_log = view(op, "A_log", A_log, keep);
  p.dt_bias = view(op, "dt_bias", dt_bias, keep);
  p.initial_state = view(op, "initial_state", initial_state, keep);
  p.cu_seqlens = view(op, "cu_seqlens", cu_seqlens, keep);
  p.d_o = view(op, "d_o", d_o, keep);
  p.d_ht = view(op, "d_ht", d_ht, keep);
  p.dq = view(op, "dq", dq, keep);
  p.dk = view(op, "dk", dk, keep);
  p.dv = view(op, "dv", dv, keep);
  p.dg = view(op, "dg", dg, keep);
  p.dbeta = view(op, "dbeta", dbeta, keep);
  p.dh0 = view(op, "dh0", dh0, keep);
  p.dA_log = view(op, "dA_log", dA_log, keep);
  p.ddt_bias = view(op, "ddt_bias", ddt_bias, keep);
  p.scale = scale;
  p.use_qk_l2norm_in_kernel = use_qk_l2norm_in_kernel;
  p.gate = gate_of(gate);
  p.state_layout = layout_of(state_v_first);
  p.chunk_size = chunk_size;
  p.exec = exec_of(exec);
  size_t bytes = 0;
  Status st = chunk_bwd_workspace_size(p, &bytes);
  if (!st.ok()) raise_status(st);
  Workspace ws = make_workspace(op, bytes, alloc, keep);
  void* s = stream_of(stream, p.q);
  {
    nb::gil_scoped_release nogil;
    st = chunk_bwd(p, ws.ptr, ws.bytes, s);
  }
  if (!st.ok()) raise_status(st);
}

void gating_py(nb::args args) {
  Args in("gating", args, 9);
  nb::handle A_log = in.h(0);
  nb::handle a = in.h(1);
  nb::handle dt_bias = in.h(2);
  nb::handle b = in.h(3);
  nb::handle g = in.h(4);
  nb::handle beta = in.h(5);
  nb::handle gate = in.h(6);
  nb::handle exec = in.h(7);
  nb::handle stream = in.h(8);
  const char* op = "gating";
  Keep keep;
  GatingParams p;
  p.A_log = view(op, "A_log", A_log, keep);
  p.a = view(op, "a", a, keep);
  p.dt_bias = view(op, "dt_bias", dt_bias, keep);
  p.b = view(op, "b", b, keep);
  p.g = view(op, "g", g, keep);
  p.beta = view(op, "beta", beta, keep);
  p.gate = gate_of(gate);
  p.exec = exec_of(exec);
  Status st;
  void* s = stream_of(stream, p.a);
  {
    nb::gil_scoped_release nogil;
    st = gating(p, s);
  }
  if (!st.ok()) raise_status(st);
}

void recurrent_py(nb::args args) {
  Args in("recurrent", args, 25);
  nb::handle q = in.h(0);
  nb::handle k = in.h(1);
  nb::handle v = in.h(2);
  nb::handle g = in.h(3);
  nb::handle beta = in.h(4);
  nb::handle A_log = in.h(5);
  nb::handle dt_bias = in.h(6);
  nb::handle cu_seqlens = in.h(7);
  nb::handle o = in.h(8);
  nb::handle state_pool = in.h(9);
  nb::handle state_indices = in.h(10);
  nb::handle num_accepted_tokens = in.h(11);
  nb::handle intermediate_states = in.h(12);
  nb::handle intermediate_indices = in.h(13);
  nb::handle initial_state = in.h(14);
  nb::handle final_state = in.h(15);
  bool commit = in.b(16);
  bool null_slot_is_invalid = in.b(17);
  float scale = in.f(18);
  bool use_qk_l2norm_in_kernel = in.b(19);
  nb::handle gate = in.h(20);
  bool state_v_first = in.b(21);
  nb::handle exec = in.h(22);
  nb::handle stream = in.h(23);
  nb::handle alloc = in.h(24);
  const char* op = "recurrent";
  Keep keep;
  RecurrentParams p;
  p.q = view(op, "q", q, keep);
  p.k = view(op, "k", k, keep);
  p.v = view(op, "v", v, keep);
  p.g = view(op, "g", g, keep);
  p.beta = view(op, "beta", beta, keep);
  p.A_log = view(op, "A_log", A_log, keep);
  p.dt_bias = view(op, "dt_bias", dt_bias, keep);
  p.cu_seqlens = view(op, "cu_seqlens", cu_seqlens, keep);
  p.o = view(op, "o", o, keep);
  p.state_pool = view(op, "state_pool", state_pool, keep);
  p.state_indices = view(op, "state_indices", state_indices, keep);
  p.num_accepted_tokens = view(op, "num_accepted_tokens", num_accepted_tokens, keep);
  p.intermediate_states = view(op, "intermediate_states", intermediate_states, keep);
  p.intermediate_indices = view(op, "intermediate_indices", intermediate_indices, keep);
  p.initial_state = view(op, "initial_state", initial_state, keep);
  p.final_state = view(op, "final_state", final_state, keep);
  p.commit = commit;
  p.null_slot_is_invalid = null_slot_is_invalid;
  p.scale = scale;
  p.use_qk_l2norm_in_kernel = use_qk_l2norm_in_kernel;
  p.gate = gate_of(gate);
  p.state_layout = layout_of(state_v_first);
  p.exec = exec_of(exec);
  size_t bytes = 0;
  Status st = recurrent_workspace_size(p, &bytes);
  if (!st.ok()) raise_status(st);
  Workspace ws = make_workspace(op, bytes, alloc, keep);
  void* s = stream_of(stream, p.q);
  {
    nb::gil_scoped_release nogil;
    st = recurrent(p, ws.ptr, ws.bytes, s);
  }
  if (!st.ok()) raise_status(st);
}

void recurrent_commit_py(nb::args args) {
  Args in("recurrent_commit", args, 8);
  nb::handle state_pool = in.h(0);
  nb::handle state_indices = in.h(1);
  nb::handle intermediate_states = in.h(2);
  nb::handle intermediate_indices = in.h(3);
  nb::handle num_accepted_tokens = in.h(4);
  bool null_slot_is_invalid = in.b(5);
  nb::handle exec = in.h(6);
  nb::handle stream = in.h(7);
  const char* op = "recurrent_commit";
  Keep keep;
  RecurrentCommitParams p;
  p.state_pool = view(op, "state_pool", state_pool, keep);
  p.state_indices = view(op, "state_indices", state_indices, keep);
  p.intermediate_states = view(op, "intermediate_states", intermediate_states, keep);
  p.intermediate_indices = view(op, "intermediate_indices", intermediate_indices, keep);
  p.num_accepted_tokens = view(op, "num_accepted_tokens", num_accepted_tokens, keep);
  p.null_slot_is_invalid = null_slot_is_invalid;
  p.exec = exec_of(exec);
  Status st;
  void* s = stream_of(stream, p.state_pool);
  {
    nb::gil_scoped_release nogil;
    st = recurrent_commit(p, s);
  }
  if (!st.ok()) raise_status(st);
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
  m.def("torch_fast_path", []() { return g_torch.api != nullptr; });
  m.def("chunk_fwd", &chunk_fwd_py);
  m.def("chunk_bwd", &chunk_bwd_py);
  m.def("gating", &gating_py);
  m.def("recurrent", &recurrent_py);
  m.def("recurrent_commit", &recurrent_commit_py);
  m.def("probe_views", &probe_views);
}
