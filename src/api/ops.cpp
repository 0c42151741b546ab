// The public entry points of flashgdn.hpp, one generic body for every op (run_op, workspace_size_op, plan_text_op;
// Types<P> and the overload sets make_plan, workspace_of, run_cpu, run_cuda say what differs): validate once, then
// run on the backend of the tensors' device.
//
//   CPU tensors  -> flashgdn::cpu::<op>   (no workspace, no stream)
//   CUDA tensors -> flashgdn::cuda::<op>  (the plan, built once per call; caller's workspace and stream; launches only)
//
// exec.check_indices on CUDA: the index tensors are copied to the host on the caller's stream (a sync, which is
// why it is opt-in) and their values are checked by validation's value rules (check_index_values), so CPU and CUDA
// share one set of value checks (validate.cpp) and a call is validated once. No C++ exception leaves this file, and
// nothing here keeps state between calls, so any number of threads may call at once.
#include <deque>
#include <exception>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "api/internal.hpp"
#include "api/op_table.hpp"
#include "api/plan.hpp"
#include "common/error.hpp"

#if FLASHGDN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace flashgdn {
namespace {

// Every entry point runs inside this: a C++ exception becomes an `internal` Status.
template <class F>
Status guarded(const char* op, F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return FGDN_ERROR(out_of_memory, op, ": out of host memory");
  } catch (const std::length_error& e) {  // a container past max_size(): an allocation no memory can hold
    return FGDN_ERROR(out_of_memory, op, ": out of host memory (", e.what(), ")");
  } catch (const std::exception& e) {
    return FGDN_ERROR(internal, op, ": unexpected exception: ", e.what());
  } catch (...) {
    return FGDN_ERROR(internal, op, ": unexpected non-standard exception");
  }
}

Status check_bytes_ptr(const char* op, const size_t* bytes) {
  if (!bytes) return FGDN_INVALID(op, "_workspace_size: bytes: expected a non-null pointer, got null");
  return Status::OK();
}

#if FLASHGDN_WITH_CUDA

// Makes the tensors' device current for the duration of a call and restores the caller's device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int32_t device) {
    if (cudaGetDevice(&prev_) != cudaSuccess) {
      status_ = FGDN_ERROR(cuda_error, "cudaGetDevice failed: ", cudaGetErrorString(cudaGetLastError()));
      return;
    }
    if (prev_ != device) {
      cudaError_t e = cudaSetDevice(device);
      if (e != cudaSuccess) {
        status_ = FGDN_ERROR(cuda_error, "cudaSetDevice(", device, ") failed: ", cudaGetErrorString(e));
        return;
      }
      switched_ = true;
    }
  }
  ~DeviceGuard() {
    if (switched_) cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  const Status& status() const { return status_; }

 private:
  int prev_ = 0;
  bool switched_ = false;
  Status status_;
};

// Host copies of device index tensors, owned for the duration of one call.
class HostMirror {
 public:
  explicit HostMirror(cudaStream_t stream) : stream_(stream) {}

  // Copies the bytes `t` spans into host memory and repoints `t` there (strides kept). Validation has already
  // checked that the strides are non-negative on every dim of size > 1.
  Status copy(const char* op, const char* name, TensorView* t) {
    if (!t->defined() || t->numel() == 0) return Status::OK();
    int64_t span = 0;
    for (int i = 0; i < t->ndim; ++i)
      if (t->shape[i] > 1) span += t->strides[i] * (t->shape[i] - 1);
    const size_t bytes = size_t(span + 1) * size_t(dtype_size(t->dtype));
    std::vector<uint8_t>& buf = bufs_.emplace_back(bytes);
    cudaError_t e = cudaMemcpyAsync(buf.data(), t->data, bytes, cudaMemcpyDeviceToHost, stream_);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
    if (e != cudaSuccess)
      return FGDN_ERROR(cuda_error, op, ": ", name, ": copying the index tensor to the host for exec.check_indices ",
                        "failed: ", cudaGetErrorString(e));
    t->data = buf.data();
    return Status::OK();
  }

 private:
  cudaStream_t stream_;
  std::deque<std::vector<uint8_t>> bufs_;  // a deque keeps earlier buffers in place
};

Status check_workspace(const char* op, size_t required, const void* ws, size_t ws_bytes) {
  if (required == 0) return Status::OK();
  if (!ws)
    return FGDN_INVALID(op, ": workspace: expected a device buffer of at least ", required, " bytes (ask ", op,
                        "_workspace_size), got null");
  if (ws_bytes < required)
    return FGDN_INVALID(op, ": workspace_bytes: expected at least ", required, " bytes (ask ", op,
                        "_workspace_size), got ", ws_bytes);
  return Status::OK();
}

// exec.check_indices for CUDA tensors: check the index values of a host mirror of the validated call, whose index
// tensors (the table's index dtype class: cu_seqlens, slot indices, num_accepted_tokens) are host copies and whose
// every tensor is marked CPU memory (only the index tensors are read). A call without index tensors has no values to
// check.
template <class P, class D>
Status check_device_indices(const P& p, const D& d, void* stream) {
  if (!p.exec.check_indices) return Status::OK();
  bool any = false;
  Op<P>::tensors([&](const TensorSpec& s, const TensorView& t) { any |= s.dtypes == DClass::index && t.defined(); }, p);
  if (!any) return Status::OK();
  HostMirror mirror(static_cast<cudaStream_t>(stream));
  P h = p;
  Status st;
  Op<P>::tensors(
      [&](const TensorSpec& s, TensorView& t) {
        if (st.ok() && s.dtypes == DClass::index) st = mirror.copy(Op<P>::name, s.name, &t);
        t.device = DeviceType::cpu;
        t.device_id = 0;
      },
      h);
  FGDN_RETURN_IF_ERROR(st);
  return check_index_values(h, d);
}

#endif  // FLASHGDN_WITH_CUDA

// A workspace query does not depend on index values: never sync for it.
template <class P>
P without_index_check(const P& p) {
  P q = p;
  q.exec.check_indices = false;
  return q;
}

// The device facts a plan reads: the tensors' device, or a GPU of `sm_count` SMs (the <op>_plan functions).
DeviceFacts device_facts(int32_t device_id, int32_t sm_count = 0) {
  DeviceFacts f;
  f.sms = sm_count;
#if FLASHGDN_WITH_CUDA
  if (f.sms <= 0) f.sms = cuda::device_sm_count(device_id);
#endif
  return f;
}

// The tensor that decides the call's device: the first present one in table order (validation's rule).
template <class P>
const TensorView& first_tensor(const P& p) {
  const TensorView* first = nullptr;
  Op<P>::tensors(
      [&](const TensorSpec&, const TensorView& t) {
        if (!first && t.defined()) first = &t;
      },
      p);
  static const TensorView kAbsent;
  return first ? *first : kAbsent;
}

// ---- what differs between the ops ---------------------------------------------------------------------------
// The Dims each op's validation resolves and its plan (NoPlan where the op has no kernel choice to make); the plan,
// the workspace it needs, and the two backends as overload sets over the params type.
struct NoPlan {};

// The plan type of an op's params.
template <class P>
using PlanOf = std::conditional_t<
    std::is_same_v<P, ChunkFwdParams>, ChunkFwdPlan,
    std::conditional_t<
        std::is_same_v<P, ChunkBwdParams>, ChunkBwdPlan,
        std::conditional_t<std::is_same_v<P, RecurrentParams>, RecurrentPlan,
                           std::conditional_t<std::is_same_v<P, MixerDecodeParams>, MixerDecodePlan, NoPlan>>>>;

template <class P>
struct Types;
#define FGDN_TYPES(stem, Params, DimsT) \
  template <>                           \
  struct Types<Params> {                \
    using Dims = DimsT;                 \
    using Plan = PlanOf<Params>;        \
  };
FGDN_OP_DIMS(FGDN_TYPES)
#undef FGDN_TYPES

Status make_plan(const ChunkFwdParams& p, const ChunkDims& d, const DeviceFacts& f, ChunkFwdPlan* pl) {
  return plan_chunk_fwd(p, d, f, pl);
}
Status make_plan(const ChunkBwdParams& p, const SeqDims& d, const DeviceFacts& f, ChunkBwdPlan* pl) {
  return plan_chunk_bwd(p, d, f, pl);
}
Status make_plan(const RecurrentParams& p, const RecurrentDims& d, const DeviceFacts& f, RecurrentPlan* pl) {
  return plan_recurrent(p, d, f, pl);
}
Status make_plan(const MixerDecodeParams& p, const MixerDims& d, const DeviceFacts& f, MixerDecodePlan* pl) {
  return plan_mixer_decode(p, d, f, pl);
}
template <class P, class D>
Status make_plan(const P&, const D&, const DeviceFacts&, NoPlan*) {
  return Status::OK();
}

// The cpu::<op> of every op.
#define FGDN_RUN_CPU(stem, Params, DimsT)           \
  Status run_cpu(const Params& p, const DimsT& d) { \
    return cpu::stem(p, d);                         \
  }
FGDN_OP_DIMS(FGDN_RUN_CPU)
#undef FGDN_RUN_CPU

#if FLASHGDN_WITH_CUDA
size_t workspace_of(const ChunkFwdParams&, const ChunkDims&, const ChunkFwdPlan& pl) {
  return pl.workspace_bytes;
}
size_t workspace_of(const ChunkBwdParams& p, const SeqDims& d, const ChunkBwdPlan& pl) {
  return cuda::chunk_bwd_workspace_size(p, d, pl);
}
template <class P, class D, class Plan>
size_t workspace_of(const P&, const D&, const Plan&) {
  return 0;  // no kernel of the other ops takes a workspace
}

// cuda::<op> with the arguments it takes of (params, dims, plan, workspace, bytes, stream).
template <class F, class P, class D, class Plan>
Status call_cuda(F* f, const P& p, const D& d, const Plan& pl, void* ws, size_t n, void* s) {
  if constexpr (std::is_invocable_v<F*, const P&, const D&, const Plan&, void*, size_t, void*>)
    return f(p, d, pl, ws, n, s);
  else if constexpr (std::is_invocable_v<F*, const P&, const D&, const Plan&, void*>)
    return f(p, d, pl, s);
  else if constexpr (std::is_invocable_v<F*, const P&, const D&, void*, size_t, void*>)
    return f(p, d, ws, n, s);
  else
    return f(p, d, s);
}
#define FGDN_RUN_CUDA(stem, Params, DimsT)                                                                       \
  Status run_cuda(const Params& p, const DimsT& d, const Types<Params>::Plan& pl, void* ws, size_t n, void* s) { \
    return call_cuda(&cuda::stem, p, d, pl, ws, n, s);                                                           \
  }
FGDN_OP_DIMS(FGDN_RUN_CUDA)
#undef FGDN_RUN_CUDA
#endif

// ---- the generic entry points ------------------------------------------------------------------------------

// Where a call's workspace comes from: the caller's buffer, or a provider asked for the plan's size.
struct WorkspaceSource {
  void* ptr = nullptr;
  size_t bytes = 0;
  const WorkspaceProvider* provider = nullptr;
};

// Validate once, then run on the tensors' backend; on CUDA plan once, and the workspace check and the launch read
// that plan.
template <class P>
Status run_op(const P& p, const WorkspaceSource& ws, void* stream) {
  using B = Types<P>;
  const char* op = Op<P>::name;
  return guarded(op, [&]() -> Status {
    typename B::Dims d;
    FGDN_RETURN_IF_ERROR(validate(p, &d));
    const TensorView& dev = first_tensor(p);
    if (dev.device == DeviceType::cpu) return run_cpu(p, d);
#if FLASHGDN_WITH_CUDA
    DeviceGuard guard(dev.device_id);
    FGDN_RETURN_IF_ERROR(guard.status());
    FGDN_RETURN_IF_ERROR(check_device_indices(p, d, stream));
    typename B::Plan plan;
    FGDN_RETURN_IF_ERROR(make_plan(p, d, device_facts(dev.device_id), &plan));
    const size_t need = workspace_of(p, d, plan);
    void* ptr = ws.ptr;
    size_t bytes = ws.bytes;
    if (ws.provider && need > 0) {
      if (!ws.provider->alloc)
        return FGDN_INVALID(op, ": workspace: expected a WorkspaceProvider with an alloc function, got null");
      ptr = ws.provider->alloc(ws.provider->ctx, need);
      bytes = ptr ? need : 0;
    }
    FGDN_RETURN_IF_ERROR(check_workspace(op, need, ptr, bytes));
    return run_cuda(p, d, plan, ptr, bytes, stream);
#else
    (void)ws;
    (void)stream;
    return FGDN_ERROR(internal, op, ": a CUDA tensor passed validation in a CPU-only build");
#endif
  });
}

template <class P>
Status workspace_size_op(const P& p, size_t* bytes) {
  using B = Types<P>;
  const char* op = Op<P>::name;
  return guarded(op, [&]() -> Status {
    FGDN_RETURN_IF_ERROR(check_bytes_ptr(op, bytes));
    typename B::Dims d;
    FGDN_RETURN_IF_ERROR(validate(without_index_check(p), &d));
    const TensorView& dev = first_tensor(p);
    if (dev.device == DeviceType::cpu) {
      *bytes = 0;
      return Status::OK();
    }
#if FLASHGDN_WITH_CUDA
    DeviceGuard guard(dev.device_id);
    FGDN_RETURN_IF_ERROR(guard.status());
    typename B::Plan plan;  // the plan also rejects what the call would
    FGDN_RETURN_IF_ERROR(make_plan(p, d, device_facts(dev.device_id), &plan));
    *bytes = workspace_of(p, d, plan);
    return Status::OK();
#else
    return FGDN_ERROR(internal, op, "_workspace_size: a CUDA tensor passed validation in a CPU-only build");
#endif
  });
}

template <class P>
Status plan_text_op(const P& p, std::string* out, int32_t sm_count) {
  using B = Types<P>;
  const char* op = Op<P>::name;
  return guarded(op, [&]() -> Status {
    if (!out) return FGDN_INVALID(op, "_plan: out: expected a non-null pointer, got null");
    typename B::Dims d;
    FGDN_RETURN_IF_ERROR(validate(without_index_check(p), &d));
    const TensorView& dev = first_tensor(p);
    if (dev.device == DeviceType::cpu && sm_count <= 0) {
      *out = detail::str_cat(op, " on the CPU backend: ", p.exec.cpu_fp64 ? "fp64" : "fp32", ", ",
                             p.exec.cpu_algo == CpuAlgo::chunked ? "chunked" : "recurrent", " form, no workspace\n");
      return Status::OK();
    }
    typename B::Plan plan;
    FGDN_RETURN_IF_ERROR(make_plan(p, d, device_facts(dev.device_id, sm_count), &plan));
    *out = describe(plan, d);
    return Status::OK();
  });
}

}  // namespace

// The entry points of flashgdn.hpp.
#define FGDN_WORKSPACE_OP(op, Params)                                                 \
  Status op##_workspace_size(const Params& p, size_t* bytes) {                        \
    return workspace_size_op(p, bytes);                                               \
  }                                                                                   \
  Status op(const Params& p, void* workspace, size_t workspace_bytes, void* stream) { \
    return run_op(p, {workspace, workspace_bytes, nullptr}, stream);                  \
  }                                                                                   \
  Status op(const Params& p, const WorkspaceProvider& workspace, void* stream) {      \
    return run_op(p, {nullptr, 0, &workspace}, stream);                               \
  }
FGDN_WORKSPACE_OP(chunk_fwd, ChunkFwdParams)
FGDN_WORKSPACE_OP(chunk_bwd, ChunkBwdParams)
FGDN_WORKSPACE_OP(recurrent, RecurrentParams)
#undef FGDN_WORKSPACE_OP

#define FGDN_STREAM_OP(op, Params)           \
  Status op(const Params& p, void* stream) { \
    return run_op(p, {}, stream);            \
  }
FGDN_STREAM_OP(gating, GatingParams)
FGDN_STREAM_OP(recurrent_commit, RecurrentCommitParams)
FGDN_STREAM_OP(mixer_decode, MixerDecodeParams)
#undef FGDN_STREAM_OP

Status chunk_fwd_plan(const ChunkFwdParams& p, std::string* out, int32_t sm_count) {
  return plan_text_op(p, out, sm_count);
}
Status chunk_bwd_plan(const ChunkBwdParams& p, std::string* out, int32_t sm_count) {
  return plan_text_op(p, out, sm_count);
}
Status recurrent_plan(const RecurrentParams& p, std::string* out, int32_t sm_count) {
  return plan_text_op(p, out, sm_count);
}
Status mixer_decode_plan(const MixerDecodeParams& p, std::string* out, int32_t sm_count) {
  return plan_text_op(p, out, sm_count);
}

}  // namespace flashgdn
