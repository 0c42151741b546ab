// The C ABI of include/flashgdn/flashgdn.h: DLTensor -> TensorView, C params -> C++ params, Status -> code plus a
// thread-local message. No C++ exception crosses this boundary.
#include <algorithm>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "common/checked.hpp"
#include "common/error.hpp"
#include "flashgdn/flashgdn.h"
#include "flashgdn/flashgdn.hpp"

namespace flashgdn {
namespace {

// The message of the last failed call on this thread; "" after a success.
thread_local std::string t_last_error;

int finish(const Status& st) {
  t_last_error = st.ok() ? std::string() : st.message();
  return int(st.code());
}

// Runs one entry point: its Status, or an `internal` one for an escaping exception, becomes the return code.
template <class F>
int run_c(const char* op, F&& f) {
  try {
    return finish(f());
  } catch (const std::bad_alloc&) {
    try {
      t_last_error = std::string(op) + ": out of host memory";
    } catch (...) {
      t_last_error.clear();  // no memory even for the message
    }
    return FLASHGDN_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    return finish(FGDN_ERROR(internal, op, ": unexpected exception: ", e.what()));
  } catch (...) {
    return finish(FGDN_ERROR(internal, op, ": unexpected non-standard exception"));
  }
}

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

// The one reader of a caller's DLTensor. A NULL DLTensor pointer is an absent tensor. strides == NULL means
// compact row-major; byte_offset is added to data. Pinned host memory (kDLCUDAHost) is host memory and runs on
// the CPU backend. Everything computed here from caller values is overflow-checked: the shape is not validated
// yet (validate.cpp does that), so its compact strides and data + byte_offset may not fit.
Status to_view(const char* op, const char* name, const DLTensor* t, TensorView* out) {
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
      out->device = DeviceType::cuda;
      out->device_id = t->device.device_id;
      break;
    default:
      return FGDN_INVALID(op, ": ", name, ": expected a device of kDLCPU, kDLCUDAHost or kDLCUDA, got ",
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

ExecOptions to_exec(const flashgdn_exec_options& e) {
  ExecOptions x;
  x.check_indices = e.check_indices != 0;
  x.cpu_fp64 = e.cpu_fp64 != 0;
  x.cpu_algo = static_cast<CpuAlgo>(e.cpu_algo);  // validation rejects values outside the enum
  x.cpu_threads = e.cpu_threads;
  x.recurrent_kernel = static_cast<RecurrentKernel>(e.recurrent_kernel);  // the plan rejects values outside the enum
  x.chunk_fwd_segments = e.chunk_fwd_segments;
  return x;
}

GateOptions to_gate(const flashgdn_gate_options& g) {
  GateOptions x;
  x.use_gate_in_kernel = g.use_gate_in_kernel != 0;
  x.use_beta_sigmoid_in_kernel = g.use_beta_sigmoid_in_kernel != 0;
  x.allow_neg_eigval = g.allow_neg_eigval != 0;
  x.softplus_beta = g.softplus_beta;
  x.softplus_threshold = g.softplus_threshold;
  return x;
}

void init_exec(flashgdn_exec_options* e) {
  std::memset(e, 0, sizeof(*e));
}

void init_gate(flashgdn_gate_options* g) {
  std::memset(g, 0, sizeof(*g));
  g->softplus_beta = 1.0f;
  g->softplus_threshold = 20.0f;
}

Status require_params(const char* op, const void* p) {
  if (!p) return FGDN_INVALID(op, ": params: expected a non-NULL params pointer, got NULL");
  return Status::OK();
}

#define FGDN_VIEW(op, field) FGDN_RETURN_IF_ERROR(to_view(op, #field, c->field, &p->field))

Status convert(const flashgdn_chunk_fwd_params* c, ChunkFwdParams* p) {
  const char* op = "chunk_fwd";
  FGDN_RETURN_IF_ERROR(require_params(op, c));
  FGDN_VIEW(op, q);
  FGDN_VIEW(op, k);
  FGDN_VIEW(op, v);
  FGDN_VIEW(op, g);
  FGDN_VIEW(op, beta);
  FGDN_VIEW(op, A_log);
  FGDN_VIEW(op, dt_bias);
  FGDN_VIEW(op, initial_state);
  FGDN_VIEW(op, cu_seqlens);
  FGDN_VIEW(op, o);
  FGDN_VIEW(op, final_state);
  FGDN_VIEW(op, state_checkpoints);
  p->checkpoint_interval = c->checkpoint_interval;
  p->scale = c->scale;
  p->use_qk_l2norm_in_kernel = c->use_qk_l2norm_in_kernel != 0;
  p->gate = to_gate(c->gate);
  p->state_layout = static_cast<StateLayout>(c->state_layout);
  p->chunk_size = c->chunk_size;
  p->exec = to_exec(c->exec);
  return Status::OK();
}

Status convert(const flashgdn_chunk_bwd_params* c, ChunkBwdParams* p) {
  const char* op = "chunk_bwd";
  FGDN_RETURN_IF_ERROR(require_params(op, c));
  FGDN_VIEW(op, q);
  FGDN_VIEW(op, k);
  FGDN_VIEW(op, v);
  FGDN_VIEW(op, g);
  FGDN_VIEW(op, beta);
  FGDN_VIEW(op, A_log);
  FGDN_VIEW(op, dt_bias);
  FGDN_VIEW(op, initial_state);
  FGDN_VIEW(op, cu_seqlens);
  FGDN_VIEW(op, d_o);
  FGDN_VIEW(op, d_ht);
  FGDN_VIEW(op, dq);
  FGDN_VIEW(op, dk);
  FGDN_VIEW(op, dv);
  FGDN_VIEW(op, dg);
  FGDN_VIEW(op, dbeta);
  FGDN_VIEW(op, dh0);
  FGDN_VIEW(op, dA_log);
  FGDN_VIEW(op, ddt_bias);
  p->scale = c->scale;
  p->use_qk_l2norm_in_kernel = c->use_qk_l2norm_in_kernel != 0;
  p->gate = to_gate(c->gate);
  p->state_layout = static_cast<StateLayout>(c->state_layout);
  p->chunk_size = c->chunk_size;
  p->exec = to_exec(c->exec);
  return Status::OK();
}

Status convert(const flashgdn_gating_params* c, GatingParams* p) {
  const char* op = "gating";
  FGDN_RETURN_IF_ERROR(require_params(op, c));
  FGDN_VIEW(op, A_log);
  FGDN_VIEW(op, a);
  FGDN_VIEW(op, dt_bias);
  FGDN_VIEW(op, b);
  FGDN_VIEW(op, g);
  FGDN_VIEW(op, beta);
  p->gate = to_gate(c->gate);
  p->exec = to_exec(c->exec);
  return Status::OK();
}

Status convert(const flashgdn_recurrent_params* c, RecurrentParams* p) {
  const char* op = "recurrent";
  FGDN_RETURN_IF_ERROR(require_params(op, c));
  FGDN_VIEW(op, q);
  FGDN_VIEW(op, k);
  FGDN_VIEW(op, v);
  FGDN_VIEW(op, g);
  FGDN_VIEW(op, beta);
  FGDN_VIEW(op, A_log);
  FGDN_VIEW(op, dt_bias);
  FGDN_VIEW(op, cu_seqlens);
  FGDN_VIEW(op, o);
  FGDN_VIEW(op, state_pool);
  FGDN_VIEW(op, state_indices);
  FGDN_VIEW(op, num_accepted_tokens);
  FGDN_VIEW(op, intermediate_states);
  FGDN_VIEW(op, intermediate_indices);
  FGDN_VIEW(op, initial_state);
  FGDN_VIEW(op, final_state);
  p->commit = c->commit != 0;
  p->null_slot_is_invalid = c->null_slot_is_invalid != 0;
  p->scale = c->scale;
  p->use_qk_l2norm_in_kernel = c->use_qk_l2norm_in_kernel != 0;
  p->gate = to_gate(c->gate);
  p->state_layout = static_cast<StateLayout>(c->state_layout);
  p->exec = to_exec(c->exec);
  return Status::OK();
}

Status convert(const flashgdn_mixer_decode_params* c, MixerDecodeParams* p) {
  const char* op = "mixer_decode";
  FGDN_RETURN_IF_ERROR(require_params(op, c));
  FGDN_VIEW(op, x);
  FGDN_VIEW(op, z);
  FGDN_VIEW(op, a);
  FGDN_VIEW(op, b);
  FGDN_VIEW(op, A_log);
  FGDN_VIEW(op, dt_bias);
  FGDN_VIEW(op, conv_weight);
  FGDN_VIEW(op, conv_bias);
  FGDN_VIEW(op, norm_weight);
  FGDN_VIEW(op, cu_seqlens);
  FGDN_VIEW(op, conv_state);
  FGDN_VIEW(op, state_pool);
  FGDN_VIEW(op, state_indices);
  FGDN_VIEW(op, num_accepted_tokens);
  FGDN_VIEW(op, intermediate_states);
  FGDN_VIEW(op, intermediate_conv_windows);
  FGDN_VIEW(op, intermediate_indices);
  FGDN_VIEW(op, out);
  p->num_k_heads = c->num_k_heads;
  p->head_k_dim = c->head_k_dim;
  p->commit = c->commit != 0;
  p->null_slot_is_invalid = c->null_slot_is_invalid != 0;
  p->scale = c->scale;
  p->norm_eps = c->norm_eps;
  p->gate = to_gate(c->gate);
  p->state_layout = static_cast<StateLayout>(c->state_layout);
  p->exec = to_exec(c->exec);
  return Status::OK();
}

Status convert(const flashgdn_recurrent_commit_params* c, RecurrentCommitParams* p) {
  const char* op = "recurrent_commit";
  FGDN_RETURN_IF_ERROR(require_params(op, c));
  FGDN_VIEW(op, state_pool);
  FGDN_VIEW(op, state_indices);
  FGDN_VIEW(op, intermediate_states);
  FGDN_VIEW(op, intermediate_indices);
  FGDN_VIEW(op, num_accepted_tokens);
  p->null_slot_is_invalid = c->null_slot_is_invalid != 0;
  p->exec = to_exec(c->exec);
  return Status::OK();
}

#undef FGDN_VIEW

Status require_bytes(const char* op, const size_t* bytes) {
  if (!bytes) return FGDN_INVALID(op, ": bytes: expected a non-NULL pointer, got NULL");
  return Status::OK();
}

}  // namespace
}  // namespace flashgdn

using namespace flashgdn;  // NOLINT: the C entry points below are thin shims over namespace flashgdn

extern "C" {

void flashgdn_chunk_fwd_params_init(flashgdn_chunk_fwd_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof(*p));
  init_gate(&p->gate);
  init_exec(&p->exec);
  p->chunk_size = 64;
}

void flashgdn_chunk_bwd_params_init(flashgdn_chunk_bwd_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof(*p));
  init_gate(&p->gate);
  init_exec(&p->exec);
  p->chunk_size = 64;
}

void flashgdn_gating_params_init(flashgdn_gating_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof(*p));
  init_gate(&p->gate);
  init_exec(&p->exec);
}

void flashgdn_recurrent_params_init(flashgdn_recurrent_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof(*p));
  init_gate(&p->gate);
  init_exec(&p->exec);
  p->commit = 1;
}

void flashgdn_mixer_decode_params_init(flashgdn_mixer_decode_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof(*p));
  init_gate(&p->gate);
  init_exec(&p->exec);
  p->commit = 1;
  p->norm_eps = 1e-6f;
}

void flashgdn_recurrent_commit_params_init(flashgdn_recurrent_commit_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof(*p));
  init_exec(&p->exec);
}

int flashgdn_chunk_fwd_workspace_size(const flashgdn_chunk_fwd_params* c, size_t* bytes) {
  return run_c("chunk_fwd_workspace_size", [&]() -> Status {
    ChunkFwdParams p;
    FGDN_RETURN_IF_ERROR(convert(c, &p));
    FGDN_RETURN_IF_ERROR(require_bytes("chunk_fwd_workspace_size", bytes));
    return chunk_fwd_workspace_size(p, bytes);
  });
}

int flashgdn_chunk_fwd(const flashgdn_chunk_fwd_params* c, void* workspace, size_t workspace_bytes, void* stream) {
  return run_c("chunk_fwd", [&]() -> Status {
    ChunkFwdParams p;
    FGDN_RETURN_IF_ERROR(convert(c, &p));
    return chunk_fwd(p, workspace, workspace_bytes, stream);
  });
}

int flashgdn_chunk_bwd_workspace_size(const flashgdn_chunk_bwd_params* c, size_t* bytes) {
  return run_c("chunk_bwd_workspace_size", [&]() -> Status {
    ChunkBwdParams p;
    FGDN_RETURN_IF_ERROR(convert(c, &p));
    FGDN_RETURN_IF_ERROR(require_bytes("chunk_bwd_workspace_size", bytes));
    return chunk_bwd_workspace_size(p, bytes);
  });
}

int flashgdn_chunk_bwd(const flashgdn_chunk_bwd_params* c, void* workspace, size_t workspace_bytes, void* stream) {
  return run_c("chunk_bwd", [&]() -> Status {
    ChunkBwdParams p;
    FGDN_RETURN_IF_ERROR(convert(c, &p));
    return chunk_bwd(p, workspace, workspace_bytes, stream);
  });
}

int flashgdn_gating(const flashgdn_gating_params* c, void* stream) {
  return run_c("gating", [&]() -> Status {
    GatingParams p;
    FGDN_RETURN_IF_ERROR(convert(c, &p));
    return gating(p, stream);
  });
}

int flashgdn_recurrent_workspace_size(const flashgdn_recurrent_params* c, size_t* bytes) {
  return run_c("recurrent_workspace_size", [&]() -> Status {
    RecurrentParams p;
    FGDN_RETURN_IF_ERROR(convert(c, &p));
    FGDN_RETURN_IF_ERROR(require_bytes("recurrent_workspace_size", bytes));
    return recurrent_workspace_size(p, bytes);
  });
}

int flashgdn_recurrent(const flashgdn_recurrent_params* c, void* workspace, size_t workspace_bytes, void* stream) {
  return run_c("recurrent", [&]() -> Status {
    RecurrentParams p;
    FGDN_RETURN_IF_ERROR(convert(c, &p));
    return recurrent(p, workspace, workspace_bytes, stream);
  });
}

int flashgdn_recurrent_commit(const flashgdn_recurrent_commit_params* c, void* stream) {
  return run_c("recurrent_commit", [&]() -> Status {
    RecurrentCommitParams p;
    FGDN_RETURN_IF_ERROR(convert(c, &p));
    return recurrent_commit(p, stream);
  });
}

int flashgdn_mixer_decode(const flashgdn_mixer_decode_params* c, void* stream) {
  return run_c("mixer_decode", [&]() -> Status {
    MixerDecodeParams p;
    FGDN_RETURN_IF_ERROR(convert(c, &p));
    return mixer_decode(p, stream);
  });
}

const char* flashgdn_last_error(void) {
  return t_last_error.c_str();
}

size_t flashgdn_copy_last_error(char* buf, size_t size) {
  const size_t n = t_last_error.size();
  if (buf && size > 0) {
    const size_t m = std::min(n, size - 1);
    std::memcpy(buf, t_last_error.data(), m);
    buf[m] = '\0';
  }
  return n;
}

const char* flashgdn_version(void) {
  return flashgdn::version();
}

int flashgdn_cuda_available(void) {
  try {
    return flashgdn::cuda_available() ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

}  // extern "C"
