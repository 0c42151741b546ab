// flashgdn — Gated Delta Rule (Gated DeltaNet) kernels. C++ API.
//
// The operator contract is docs/gdn-math.md:
//   S~_t = exp(g_t) S_{t-1};  u_t = beta_t (v_t - S~_t^T k_t);  S_t = S~_t + k_t u_t^T;  o_t = scale S_t^T q_t
// State S is [K, V] per (sequence, value head), fp32. Value head h reads q/k head h / (Hv / Hqk).
//
// Conventions of this header:
//   * Every op takes one params struct of TensorViews and scalars, and returns a Status. The fields are declared in
//     the op table, flashgdn_ops.h, with their shapes, dtypes and defaults.
//   * A TensorView with ndim < 0 is absent; fields documented "may be null" there accept that.
//   * Strides are in elements (not bytes), int64, non-negative (a dim of size 1 may have any stride); no zero
//     strides (broadcast) on dims of size > 1; an output may not overlap itself, another output or an input.
//   * Tensors on the CPU run on the CPU backend; tensors on CUDA run on the GPU kernels. All tensors of one
//     call live on one device.
//   * GPU launches never allocate and never synchronize with the host (CUDA-graph safe). Scratch memory is
//     the caller's: ask `<op>_workspace_size`, pass a device buffer at least that large.
//   * Nothing here includes Python, torch or CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "flashgdn/flashgdn_ops.h"

#if defined(_WIN32)
#define FLASHGDN_CXX_API __declspec(dllexport)
#else
#define FLASHGDN_CXX_API __attribute__((visibility("default")))
#endif

namespace flashgdn {

enum class DType : int32_t { f32 = 0, f64 = 1, bf16 = 2, f16 = 3, i32 = 4, i64 = 5 };
enum class DeviceType : int32_t { cpu = 0, cuda = 1 };

FLASHGDN_CXX_API const char* dtype_name(DType dt);
FLASHGDN_CXX_API int64_t dtype_size(DType dt);

inline constexpr int kMaxDims = 6;

// A non-owning view of a strided tensor.
struct FLASHGDN_CXX_API TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  DeviceType device = DeviceType::cpu;
  int32_t device_id = 0;
  int32_t ndim = -1;  // < 0: absent
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};  // in elements

  bool defined() const { return ndim >= 0; }
  int64_t numel() const;
  bool is_contiguous() const;  // compact row-major
};

// A compact row-major view of `data` with the given shape.
FLASHGDN_CXX_API TensorView make_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                        DeviceType device = DeviceType::cpu, int32_t device_id = 0);

enum class StatusCode : int32_t {
  ok = 0,
  invalid_argument = 1,  // bad shape, dtype, stride, value; the message names the argument
  unsupported = 2,       // valid request this build or device does not implement
  cuda_error = 3,        // a CUDA runtime call failed
  internal = 4,
  out_of_memory = 5,  // a host allocation failed (every size is bounded by validation first)
};

// Result of every call. The message names the argument, says what was expected and what was found,
// and ends with the source location that raised it: "chunk_fwd: v: expected 4 dims [B, T, Hv, V], got 3
// (src/api/validate.cpp:120)".
class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status OK() { return {}; }
  bool ok() const { return code_ == StatusCode::ok; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::ok;
  std::string message_;
};

enum class StateLayout : int32_t {
  k_major = 0,  // [.., K, V]: S[i, j] at i*V + j (FLA default)
  v_major = 1,  // [.., V, K]: S[i, j] at j*K + i (FLA state_v_first, vLLM / SGLang pools)
};

enum class CpuAlgo : int32_t {
  recurrent = 0,  // token-by-token recurrence (gdn-math §1.2, §7.1)
  chunked = 1,    // WY/UT chunked form (§5, §7.2-7.3), chunk size from the params
};

// Kernel of a CUDA recurrent call (gdn-math §8). `auto_` is the plan's choice (flashgdn::recurrent_plan prints it
// and why); the others force one kernel for tests and A/B benchmarks, and a call whose shape that kernel cannot
// take is rejected (unsupported) with the kernel's requirement in the message. docs/recurrent.md has the kernels.
enum class RecurrentKernel : int32_t {
  auto_ = 0,
  persistent = 1,   // persistent CTAs over (row, head, V-tile) tiles, tokens staged in shared memory: any call
  direct = 2,       // one CTA per state tile, every load in flight: any call
  direct_pipe = 3,  // single-token, persistent CTAs with a 2-stage cp.async ring of state tiles: fixed T = 1 on a
                    // K-major pool, 1-D state_indices, no intermediate_states
  wy = 4,           // chunked WY form over a row's tokens: K-major states in a pool
  wy_mma = 5,       // the WY form on the tensor cores, final state only: multi-token rows on a K-major pool, 16-bit
                    // q, k, v, no intermediate_states, no per-token commit (2-D state_indices with commit)
};
FLASHGDN_CXX_API const char* recurrent_kernel_name(RecurrentKernel k);                   // "auto", "persistent", ...
FLASHGDN_CXX_API bool recurrent_kernel_from_name(const char* name, RecurrentKernel* k);  // false: no such kernel

// The fields of every options and params struct below are expanded from the op table, flashgdn_ops.h: each field
// with its type, default, shape and notes ("may be null": may be absent) is declared there, once.
#define FLASHGDN_CXX_TENSOR_FIELD(name, role, dtypes, layout, doc) TensorView name;
#define FLASHGDN_CXX_SCALAR_FIELD(type, c_type, name, init, doc) type name = init;

// How a call executes; the defaults suit production use (FLASHGDN_EXEC_OPTIONS).
struct ExecOptions {
  FLASHGDN_EXEC_OPTIONS(FLASHGDN_CXX_SCALAR_FIELD)
};

// Gate and beta as given, or raw projections turned into them inside the op (gdn-math §4):
//   g = -exp(A_log) * softplus(a + dt_bias),  beta = sigmoid(b) (x2 with allow_neg_eigval).
struct GateOptions {
  FLASHGDN_GATE_OPTIONS(FLASHGDN_CXX_SCALAR_FIELD)
};

// Scratch memory on request, for callers that allocate it per call (the Python module): an op given a provider
// validates and plans once, calls `alloc(ctx, bytes)` for the plan's workspace (never for 0 bytes, never for a CPU
// call), then launches. `alloc` returns a device buffer of at least `bytes` bytes that stays valid until the launch
// is enqueued, or null when it cannot (the call then fails with invalid_argument naming the workspace).
struct WorkspaceProvider {
  void* (*alloc)(void* ctx, size_t bytes) = nullptr;
  void* ctx = nullptr;
};

// ---------------------------------------------------------------------------------------------------------
// chunk_fwd: chunked prefill / inference forward (gdn-math §5, §6).
// Fixed length: B sequences of T tokens. Varlen: B == 1 and cu_seqlens gives N sequences (length 0 allowed).
struct ChunkFwdParams {
  FLASHGDN_CHUNK_FWD_TENSORS(FLASHGDN_CXX_TENSOR_FIELD)
  FLASHGDN_CHUNK_FWD_SCALARS(FLASHGDN_CXX_SCALAR_FIELD)
};

FLASHGDN_CXX_API Status chunk_fwd_workspace_size(const ChunkFwdParams& p, size_t* bytes);
// The plan a chunk_fwd call runs (kernels, grids, segment split, workspace) and why, as text; the params are
// validated as by the call. sm_count = 0: for the tensors' device (CPU tensors: the CPU backend); sm_count > 0: the
// CUDA plan for a GPU with that many SMs, whatever the tensors' device (the plan reads shapes and flags only).
FLASHGDN_CXX_API Status chunk_fwd_plan(const ChunkFwdParams& p, std::string* out, int32_t sm_count = 0);
FLASHGDN_CXX_API Status chunk_fwd(const ChunkFwdParams& p, void* workspace = nullptr, size_t workspace_bytes = 0,
                                  void* stream = nullptr);
FLASHGDN_CXX_API Status chunk_fwd(const ChunkFwdParams& p, const WorkspaceProvider& workspace, void* stream = nullptr);

// ---------------------------------------------------------------------------------------------------------
// chunk_bwd: training backward (gdn-math §7). Inputs are the forward's; outputs are the gradients of the
// inputs as given: with use_qk_l2norm_in_kernel dq/dk are w.r.t. the raw q/k, with use_gate_in_kernel dg is
// w.r.t. raw a, with use_beta_sigmoid_in_kernel dbeta is w.r.t. raw b.
struct ChunkBwdParams {
  FLASHGDN_CHUNK_BWD_TENSORS(FLASHGDN_CXX_TENSOR_FIELD)
  FLASHGDN_CHUNK_BWD_SCALARS(FLASHGDN_CXX_SCALAR_FIELD)
};

FLASHGDN_CXX_API Status chunk_bwd_workspace_size(const ChunkBwdParams& p, size_t* bytes);
// The plan a chunk_bwd call runs (passes, grids, the chains' segment split) and why, as text; sm_count as for
// chunk_fwd_plan.
FLASHGDN_CXX_API Status chunk_bwd_plan(const ChunkBwdParams& p, std::string* out, int32_t sm_count = 0);
FLASHGDN_CXX_API Status chunk_bwd(const ChunkBwdParams& p, void* workspace = nullptr, size_t workspace_bytes = 0,
                                  void* stream = nullptr);
FLASHGDN_CXX_API Status chunk_bwd(const ChunkBwdParams& p, const WorkspaceProvider& workspace, void* stream = nullptr);

// ---------------------------------------------------------------------------------------------------------
// gating: g, beta from raw projections (gdn-math §4; vLLM fused_gdn_gating).
struct GatingParams {
  FLASHGDN_GATING_TENSORS(FLASHGDN_CXX_TENSOR_FIELD)
  FLASHGDN_GATING_SCALARS(FLASHGDN_CXX_SCALAR_FIELD)
};

FLASHGDN_CXX_API Status gating(const GatingParams& p, void* stream = nullptr);

// ---------------------------------------------------------------------------------------------------------
// recurrent: decode, multi-token decode and speculative verify on a state pool (gdn-math §8), or FLA's
// fused_recurrent contract (initial_state / final_state, no pool).
//
// Rows: N = B sequences of T tokens, or B == 1 with cu_seqlens [N + 1] (length-0 rows touch nothing).
// Start state of row n:
//   * pool absent: initial_state[n] (zeros if absent);
//   * state_indices [N]:        pool[state_indices[n]];
//   * state_indices [N, T_max]: pool[state_indices[n, a - 1]], a = num_accepted_tokens[n] (1 if absent).
// A row is invalid when its start slot is invalid (slot < 0, or slot == 0 with null_slot_is_invalid, or
// slot >= slots) or a is outside [1, T_max]: its outputs are written as zeros and nothing else is written.
// A length-0 row touches nothing (without a pool, final_state[n] = initial_state[n], as in chunk_fwd).
// Writes of a valid row, when commit is true:
//   * state_indices [N]:        pool[state_indices[n]] = S_T;
//   * state_indices [N, T_max]: pool[state_indices[n, t]] = S_t for every token t whose slot is valid.
// With commit false the pool is never written. Independently, when intermediate_states is given, the
// state after token t goes to intermediate_states[intermediate_indices[n], t] (an invalid buffer index
// skips the row's intermediate writes).
struct RecurrentParams {
  FLASHGDN_RECURRENT_TENSORS(FLASHGDN_CXX_TENSOR_FIELD)
  FLASHGDN_RECURRENT_SCALARS(FLASHGDN_CXX_SCALAR_FIELD)
};

FLASHGDN_CXX_API Status recurrent_workspace_size(const RecurrentParams& p, size_t* bytes);
// The plan a recurrent call runs (kernel, V-tile, grid) and why, as text; sm_count as for chunk_fwd_plan.
FLASHGDN_CXX_API Status recurrent_plan(const RecurrentParams& p, std::string* out, int32_t sm_count = 0);
FLASHGDN_CXX_API Status recurrent(const RecurrentParams& p, void* workspace = nullptr, size_t workspace_bytes = 0,
                                  void* stream = nullptr);
FLASHGDN_CXX_API Status recurrent(const RecurrentParams& p, const WorkspaceProvider& workspace, void* stream = nullptr);

// ---------------------------------------------------------------------------------------------------------
// recurrent_commit: after a no-commit verify (gdn-math §8.2 B), copy the accepted intermediate state into
// the pool: pool[state_indices[n]] = intermediate_states[intermediate_indices[n], num_accepted_tokens[n] - 1]
// for every n whose slot is valid and whose count is in [1, T_buf]; other rows are skipped. The pool and the
// buffer share one state layout (the copy is layout-agnostic).
struct RecurrentCommitParams {
  FLASHGDN_RECURRENT_COMMIT_TENSORS(FLASHGDN_CXX_TENSOR_FIELD)
  FLASHGDN_RECURRENT_COMMIT_SCALARS(FLASHGDN_CXX_SCALAR_FIELD)
};

FLASHGDN_CXX_API Status recurrent_commit(const RecurrentCommitParams& p, void* stream = nullptr);

// ---------------------------------------------------------------------------------------------------------
// mixer_decode: the whole Gated DeltaNet mixer step of Qwen3-Next / Qwen3.5 between the input projections and
// out_proj, in one launch (decode T = 1, multi-token decode and speculative verify T > 1). Per token of row n,
// value head h, key head i = h / (Hv / Hqk), with C = 2 Hqk K + Hv V channels [q | k | v] (head-major):
//   y   = silu(conv_bias + sum_j conv_weight[:, j] w_j)      causal depthwise conv over the window w of the last
//                                                            Kc raw inputs (w_{Kc-1} = x_t), y rounded to x's dtype
//   q, k, v = split(y);  q^ = scale q / |q|,  k^ = k / |k|   (|x| = sqrt(sum x^2 + 1e-6), fp32)
//   g   = -exp(A_log) softplus(a + dt_bias),  beta = sigmoid(b) (x2 with gate.allow_neg_eigval)
//   o   = the recurrence on the state pool, exactly as `recurrent` (rows, slots, sentinels, num_accepted_tokens,
//         commit, intermediate_states), rounded to x's dtype
//   out = o rsqrt(mean_V(o^2) + norm_eps) norm_weight silu(z)     (gated RMSNorm, norm before gate, weight as w)
// The conv state holds raw inputs, oldest first: conv_state[slot, c, i], i < L. Its slot is the row's state slot
// (state_indices[n], or state_indices[n, 0] with 2-D indices: vLLM keeps the conv state in block column 0).
//   * 1-D (or absent) state_indices: the window is positions [0, Kc - 1); after the row they hold the last Kc - 1
//     raw inputs (T decode steps in sequence).
//   * 2-D state_indices (vLLM speculative decode): the window starts at o = num_accepted_tokens[n] - 1; after
//     the row s'[i] = s[o + 1 + i] for i < Kc - 2 and s'[Kc - 2 + t] = x_t (the next step's offset picks the
//     window of the accepted tokens).
// Layouts by strides: vLLM "SD" [blocks, L, C] is conv_state.transpose(1, 2); vLLM "DS" and SGLang
// [slots, C, Kc - 1] pass as they are; transformers' [B, C, Kc] passes as conv_state[:, :, 1:].
// Invalid rows (recurrent's rule) write zero outputs and nothing else; with 2-D indices a row whose conv slot
// (column 0) is invalid starts from a zero window and writes no conv state. commit = false writes neither the
// pool nor the conv state (SGLang verify): the per-token states go to intermediate_states and the per-token
// windows (the last Kc - 1 raw inputs after token t) to intermediate_conv_windows.
struct MixerDecodeParams {
  FLASHGDN_MIXER_DECODE_TENSORS(FLASHGDN_CXX_TENSOR_FIELD)
  FLASHGDN_MIXER_DECODE_SCALARS(FLASHGDN_CXX_SCALAR_FIELD)
};

// The plan a mixer_decode call runs (V split, grid, clusters) and why, as text; sm_count as for chunk_fwd_plan.
FLASHGDN_CXX_API Status mixer_decode_plan(const MixerDecodeParams& p, std::string* out, int32_t sm_count = 0);
FLASHGDN_CXX_API Status mixer_decode(const MixerDecodeParams& p, void* stream = nullptr);

// Library facts.
FLASHGDN_CXX_API const char* version();
FLASHGDN_CXX_API bool cuda_available();  // built with CUDA and a device is visible

#undef FLASHGDN_CXX_TENSOR_FIELD
#undef FLASHGDN_CXX_SCALAR_FIELD

}  // namespace flashgdn
