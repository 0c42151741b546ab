// The public entry points of flashgdn.hpp: validate, then run on the backend of the tensors' device.
//
//   CPU tensors  -> flashgdn::cpu::<op>   (no workspace, no stream)
//   CUDA tensors -> flashgdn::cuda::<op>  (caller's workspace and stream; launches only)
//
// exec.check_indices on CUDA: the index tensors are copied to the host on the caller's stream (a sync, which is
// why it is opt-in) and the call is validated once more as a host mirror, so CPU and CUDA share one set of value
// checks (validate.cpp). No C++ exception leaves this file, and nothing here keeps state between calls, so any
// number of threads may call at once.
#include <deque>
#include <exception>
#include <new>
#include <stdexcept>
#include <vector>

#include "api/internal.hpp"
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

// The host mirror marks every tensor as CPU memory; only the index tensors, repointed to host copies, are read.
void mark_host(std::initializer_list<TensorView*> ts) {
  for (TensorView* t : ts) {
    t->device = DeviceType::cpu;
    t->device_id = 0;
  }
}

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

// exec.check_indices for CUDA tensors: validate a host mirror whose index tensors are host copies.
Status check_device_indices(const ChunkFwdParams& p, void* stream) {
  if (!p.exec.check_indices || !p.cu_seqlens.defined()) return Status::OK();
  HostMirror mirror(static_cast<cudaStream_t>(stream));
  ChunkFwdParams h = p;
  FGDN_RETURN_IF_ERROR(mirror.copy("chunk_fwd", "cu_seqlens", &h.cu_seqlens));
  mark_host({&h.q, &h.k, &h.v, &h.g, &h.beta, &h.A_log, &h.dt_bias, &h.initial_state, &h.cu_seqlens, &h.o,
             &h.final_state, &h.state_checkpoints});
  ChunkDims d;
  return validate(h, &d);
}

Status check_device_indices(const ChunkBwdParams& p, void* stream) {
  if (!p.exec.check_indices || !p.cu_seqlens.defined()) return Status::OK();
  HostMirror mirror(static_cast<cudaStream_t>(stream));
  ChunkBwdParams h = p;
  FGDN_RETURN_IF_ERROR(mirror.copy("chunk_bwd", "cu_seqlens", &h.cu_seqlens));
  mark_host({&h.q, &h.k, &h.v, &h.g, &h.beta, &h.A_log, &h.dt_bias, &h.initial_state, &h.cu_seqlens, &h.d_o, &h.d_ht,
             &h.dq, &h.dk, &h.dv, &h.dg, &h.dbeta, &h.dh0, &h.dA_log, &h.ddt_bias});
  SeqDims d;
  return validate(h, &d);
}

Status check_device_indices(const RecurrentParams& p, void* stream) {
  if (!p.exec.check_indices) return Status::OK();
  HostMirror mirror(static_cast<cudaStream_t>(stream));
  RecurrentParams h = p;
  FGDN_RETURN_IF_ERROR(mirror.copy("recurrent", "cu_seqlens", &h.cu_seqlens));
  FGDN_RETURN_IF_ERROR(mirror.copy("recurrent", "state_indices", &h.state_indices));
  FGDN_RETURN_IF_ERROR(mirror.copy("recurrent", "num_accepted_tokens", &h.num_accepted_tokens));
  FGDN_RETURN_IF_ERROR(mirror.copy("recurrent", "intermediate_indices", &h.intermediate_indices));
  mark_host({&h.q, &h.k, &h.v, &h.g, &h.beta, &h.A_log, &h.dt_bias, &h.cu_seqlens, &h.o, &h.state_pool,
             &h.state_indices, &h.num_accepted_tokens, &h.intermediate_states, &h.intermediate_indices,
             &h.initial_state, &h.final_state});
  RecurrentDims d;
  return validate(h, &d);
}

Status check_device_indices(const RecurrentCommitParams& p, void* stream) {
  if (!p.exec.check_indices) return Status::OK();
  HostMirror mirror(static_cast<cudaStream_t>(stream));
  RecurrentCommitParams h = p;
  FGDN_RETURN_IF_ERROR(mirror.copy("recurrent_commit", "state_indices", &h.state_indices));
  FGDN_RETURN_IF_ERROR(mirror.copy("recurrent_commit", "num_accepted_tokens", &h.num_accepted_tokens));
  FGDN_RETURN_IF_ERROR(mirror.copy("recurrent_commit", "intermediate_indices", &h.intermediate_indices));
  mark_host({&h.state_pool, &h.state_indices, &h.intermediate_states, &h.intermediate_indices, &h.num_accepted_tokens});
  CommitDims d;
  return validate(h, &d);
}

// mixer_decode's index tensors are recurrent's: check them through its recurrent view.
Status check_device_indices(const MixerDecodeParams& p, void* stream) {
  if (!p.exec.check_indices) return Status::OK();
  return check_device_indices(mixer_recurrent_view(p), stream);
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

const char* cpu_algo_name(const ExecOptions& e) {
  return e.cpu_algo == CpuAlgo::chunked ? "chunked" : "recurrent";
}

}  // namespace

// ---- chunk_fwd -----------------------------------------------------------------------------------------------

Status chunk_fwd_workspace_size(const ChunkFwdParams& p, size_t* bytes) {
  return guarded("chunk_fwd_workspace_size", [&]() -> Status {
    FGDN_RETURN_IF_ERROR(check_bytes_ptr("chunk_fwd", bytes));
    ChunkDims d;
    FGDN_RETURN_IF_ERROR(validate(without_index_check(p), &d));
    if (p.q.device == DeviceType::cpu) {
      *bytes = 0;
      return Status::OK();
    }
#if FLASHGDN_WITH_CUDA
    DeviceGuard guard(p.q.device_id);
    FGDN_RETURN_IF_ERROR(guard.status());
    ChunkFwdPlan plan;
    FGDN_RETURN_IF_ERROR(plan_chunk_fwd(p, d, device_facts(p.q.device_id), &plan));
    *bytes = plan.workspace_bytes;
    return Status::OK();
#else
    return FGDN_ERROR(internal, "chunk_fwd_workspace_size: a CUDA tensor passed validation in a CPU-only build");
#endif
  });
}

Status chunk_fwd_plan(const ChunkFwdParams& p, std::string* out, int32_t sm_count) {
  return guarded("chunk_fwd_plan", [&]() -> Status {
    if (!out) return FGDN_INVALID("chunk_fwd_plan: out: expected a non-null pointer, got null");
    ChunkDims d;
    FGDN_RETURN_IF_ERROR(validate(without_index_check(p), &d));
    if (p.q.device == DeviceType::cpu && sm_count <= 0) {
      *out = detail::str_cat("chunk_fwd on the CPU backend: ", p.exec.cpu_fp64 ? "fp64" : "fp32", ", ",
                             cpu_algo_name(p.exec), " form, no workspace\n");
      return Status::OK();
    }
    ChunkFwdPlan plan;
    FGDN_RETURN_IF_ERROR(plan_chunk_fwd(p, d, device_facts(p.q.device_id, sm_count), &plan));
    *out = describe(plan, d);
    return Status::OK();
  });
}

Status chunk_fwd(const ChunkFwdParams& p, void* workspace, size_t workspace_bytes, void* stream) {
  return guarded("chunk_fwd", [&]() -> Status {
    ChunkDims d;
    FGDN_RETURN_IF_ERROR(validate(p, &d));
    if (p.q.device == DeviceType::cpu) return cpu::chunk_fwd(p, d);
#if FLASHGDN_WITH_CUDA
    DeviceGuard guard(p.q.device_id);
    FGDN_RETURN_IF_ERROR(guard.status());
    FGDN_RETURN_IF_ERROR(check_device_indices(p, stream));
    ChunkFwdPlan plan;
    FGDN_RETURN_IF_ERROR(plan_chunk_fwd(p, d, device_facts(p.q.device_id), &plan));
    FGDN_RETURN_IF_ERROR(check_workspace("chunk_fwd", plan.workspace_bytes, workspace, workspace_bytes));
    return cuda::chunk_fwd(p, d, plan, workspace, workspace_bytes, stream);
#else
    return FGDN_ERROR(internal, "chunk_fwd: a CUDA tensor passed validation in a CPU-only build");
#endif
  });
}

// ---- chunk_bwd -----------------------------------------------------------------------------------------------

Status chunk_bwd_workspace_size(const ChunkBwdParams& p, size_t* bytes) {
  return guarded("chunk_bwd_workspace_size", [&]() -> Status {
    FGDN_RETURN_IF_ERROR(check_bytes_ptr("chunk_bwd", bytes));
    SeqDims d;
    FGDN_RETURN_IF_ERROR(validate(without_index_check(p), &d));
    if (p.q.device == DeviceType::cpu) {
      *bytes = 0;
      return Status::OK();
    }
#if FLASHGDN_WITH_CUDA
    DeviceGuard guard(p.q.device_id);
    FGDN_RETURN_IF_ERROR(guard.status());
    *bytes = cuda::chunk_bwd_workspace_size(p, d);
    return Status::OK();
#else
    return FGDN_ERROR(internal, "chunk_bwd_workspace_size: a CUDA tensor passed validation in a CPU-only build");
#endif
  });
}

Status chunk_bwd(const ChunkBwdParams& p, void* workspace, size_t workspace_bytes, void* stream) {
  return guarded("chunk_bwd", [&]() -> Status {
    SeqDims d;
    FGDN_RETURN_IF_ERROR(validate(p, &d));
    if (p.q.device == DeviceType::cpu) return cpu::chunk_bwd(p, d);
#if FLASHGDN_WITH_CUDA
    DeviceGuard guard(p.q.device_id);
    FGDN_RETURN_IF_ERROR(guard.status());
    FGDN_RETURN_IF_ERROR(check_device_indices(p, stream));
    FGDN_RETURN_IF_ERROR(
        check_workspace("chunk_bwd", cuda::chunk_bwd_workspace_size(p, d), workspace, workspace_bytes));
    return cuda::chunk_bwd(p, d, workspace, workspace_bytes, stream);
#else
    return FGDN_ERROR(internal, "chunk_bwd: a CUDA tensor passed validation in a CPU-only build");
#endif
  });
}

// ---- gating --------------------------------------------------------------------------------------------------

Status gating(const GatingParams& p, void* stream) {
  return guarded("gating", [&]() -> Status {
    GatingDims d;
    FGDN_RETURN_IF_ERROR(validate(p, &d));
    if (p.a.device == DeviceType::cpu) return cpu::gating(p, d);
#if FLASHGDN_WITH_CUDA
    DeviceGuard guard(p.a.device_id);
    FGDN_RETURN_IF_ERROR(guard.status());
    return cuda::gating(p, d, stream);
#else
    return FGDN_ERROR(internal, "gating: a CUDA tensor passed validation in a CPU-only build");
#endif
  });
}

// ---- recurrent -----------------------------------------------------------------------------------------------

Status recurrent_workspace_size(const RecurrentParams& p, size_t* bytes) {
  return guarded("recurrent_workspace_size", [&]() -> Status {
    FGDN_RETURN_IF_ERROR(check_bytes_ptr("recurrent", bytes));
    RecurrentDims d;
    FGDN_RETURN_IF_ERROR(validate(without_index_check(p), &d));
    if (p.q.device == DeviceType::cpu) {
      *bytes = 0;
      return Status::OK();
    }
#if FLASHGDN_WITH_CUDA
    DeviceGuard guard(p.q.device_id);
    FGDN_RETURN_IF_ERROR(guard.status());
    RecurrentPlan plan;  // no kernel takes a workspace; the plan still rejects what the call would
    FGDN_RETURN_IF_ERROR(plan_recurrent(p, d, device_facts(p.q.device_id), &plan));
    *bytes = 0;
    return Status::OK();
#else
    return FGDN_ERROR(internal, "recurrent_workspace_size: a CUDA tensor passed validation in a CPU-only build");
#endif
  });
}

Status recurrent_plan(const RecurrentParams& p, std::string* out, int32_t sm_count) {
  return guarded("recurrent_plan", [&]() -> Status {
    if (!out) return FGDN_INVALID("recurrent_plan: out: expected a non-null pointer, got null");
    RecurrentDims d;
    FGDN_RETURN_IF_ERROR(validate(without_index_check(p), &d));
    if (p.q.device == DeviceType::cpu && sm_count <= 0) {
      *out = detail::str_cat("recurrent on the CPU backend: ", p.exec.cpu_fp64 ? "fp64" : "fp32", ", ",
                             cpu_algo_name(p.exec), " form, no workspace\n");
      return Status::OK();
    }
    RecurrentPlan plan;
    FGDN_RETURN_IF_ERROR(plan_recurrent(p, d, device_facts(p.q.device_id, sm_count), &plan));
    *out = describe(plan, d);
    return Status::OK();
  });
}

Status recurrent(const RecurrentParams& p, void* workspace, size_t workspace_bytes, void* stream) {
  return guarded("recurrent", [&]() -> Status {
    RecurrentDims d;
    FGDN_RETURN_IF_ERROR(validate(p, &d));
    if (p.q.device == DeviceType::cpu) return cpu::recurrent(p, d);
#if FLASHGDN_WITH_CUDA
    DeviceGuard guard(p.q.device_id);
    FGDN_RETURN_IF_ERROR(guard.status());
    FGDN_RETURN_IF_ERROR(check_device_indices(p, stream));
    RecurrentPlan plan;
    FGDN_RETURN_IF_ERROR(plan_recurrent(p, d, device_facts(p.q.device_id), &plan));
    return cuda::recurrent(p, d, plan, stream);
#else
    return FGDN_ERROR(internal, "recurrent: a CUDA tensor passed validation in a CPU-only build");
#endif
  });
}

// ---- recurrent_commit ----------------------------------------------------------------------------------------

Status recurrent_commit(const RecurrentCommitParams& p, void* stream) {
  return guarded("recurrent_commit", [&]() -> Status {
    CommitDims d;
    FGDN_RETURN_IF_ERROR(validate(p, &d));
    if (p.state_pool.device == DeviceType::cpu) return cpu::recurrent_commit(p, d);
#if FLASHGDN_WITH_CUDA
    DeviceGuard guard(p.state_pool.device_id);
    FGDN_RETURN_IF_ERROR(guard.status());
    FGDN_RETURN_IF_ERROR(check_device_indices(p, stream));
    return cuda::recurrent_commit(p, d, stream);
#else
    return FGDN_ERROR(internal, "recurrent_commit: a CUDA tensor passed validation in a CPU-only build");
#endif
  });
}

// ---- mixer_decode --------------------------------------------------------------------------------------------

Status mixer_decode(const MixerDecodeParams& p, void* stream) {
  return guarded("mixer_decode", [&]() -> Status {
    MixerDims d;
    FGDN_RETURN_IF_ERROR(validate(p, &d));
    if (p.x.device == DeviceType::cpu) return cpu::mixer_decode(p, d);
#if FLASHGDN_WITH_CUDA
    DeviceGuard guard(p.x.device_id);
    FGDN_RETURN_IF_ERROR(guard.status());
    FGDN_RETURN_IF_ERROR(check_device_indices(p, stream));
    return cuda::mixer_decode(p, d, stream);
#else
    return FGDN_ERROR(internal, "mixer_decode: a CUDA tensor passed validation in a CPU-only build");
#endif
  });
}

}  // namespace flashgdn
