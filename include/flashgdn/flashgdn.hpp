// flashgdn — Gated Delta Rule (Gated DeltaNet) kernels. C++ API.
//
// The operator contract is docs/gdn-math.md (the project copy of ../shared/docs/gdn-math.md):
//   S~_t = exp(g_t) S_{t-1};  u_t = beta_t (v_t - S~_t^T k_t);  S_t = S~_t + k_t u_t^T;  o_t = scale S_t^T q_t
// State S is [K, V] per (sequence, value head), fp32. Value head h reads q/k head h / (Hv / Hqk).
//
// Conventions of this header:
//   * Every op takes one params struct of TensorViews and scalars, and returns a Status.
//   * A TensorView with ndim < 0 is absent; fields documented "may be absent" accept that.
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

// How a call executes; the defaults suit production use.
struct ExecOptions {
  // Validate device-resident index tensors (cu_seqlens, slot indices, num_accepted_tokens) on the host.
  // For CUDA tensors this copies them to the host and synchronizes: off the hot path. Without it, kernels
  // clamp every index so that no value reads or writes out of bounds (out-of-range rows are invalid rows).
  bool check_indices = false;
  // CPU backend: compute in fp64 (the test oracle) instead of fp32.
  bool cpu_fp64 = false;
  CpuAlgo cpu_algo = CpuAlgo::recurrent;
  int32_t cpu_threads = 0;  // 0: all hardware threads
};

// Gate and beta as given, or raw projections turned into them inside the op (gdn-math §4):
//   g = -exp(A_log) * softplus(a + dt_bias),  beta = sigmoid(b) (x2 with allow_neg_eigval).
struct GateOptions {
  bool use_gate_in_kernel = false;          // `g` holds raw `a`; A_log required, dt_bias may be absent
  bool use_beta_sigmoid_in_kernel = false;  // `beta` holds raw `b`
  bool allow_neg_eigval = false;            // beta = 2 sigmoid(b); needs use_beta_sigmoid_in_kernel
  float softplus_beta = 1.0f;
  float softplus_threshold = 20.0f;
};

// ---------------------------------------------------------------------------------------------------------
// chunk_fwd: chunked prefill / inference forward (gdn-math §5, §6).
// Fixed length: B sequences of T tokens. Varlen: B == 1 and cu_seqlens gives N sequences (length 0 allowed).
struct ChunkFwdParams {
  TensorView q;              // [B, T, Hqk, K]  f32/bf16/f16 (f64 on CPU)
  TensorView k;              // [B, T, Hqk, K]  same dtype as q
  TensorView v;              // [B, T, Hv, V]   same dtype as q
  TensorView g;              // [B, T, Hv]      natural-log decay (or raw a); may be absent (g = 0)
  TensorView beta;           // [B, T, Hv]      (or raw b); may be absent (beta = 1)
  TensorView A_log;          // [Hv] may be absent (required with use_gate_in_kernel)
  TensorView dt_bias;        // [Hv] may be absent
  TensorView initial_state;  // [N, Hv, K, V] (k_major) or [N, Hv, V, K] (v_major); may be absent (zeros)
  TensorView cu_seqlens;     // [N + 1] i32/i64; may be absent
  TensorView o;              // [B, T, Hv, V]   output, dtype of v (varlen rows past cu_seqlens[N] unwritten)
  TensorView final_state;    // [N, Hv, K, V] or [N, Hv, V, K] f32 output; may be absent
  // State after every `checkpoint_interval` tokens of each sequence (prefix caching):
  // [N, C_max, Hv, K, V] or [N, C_max, Hv, V, K] f32, entry c = state after (c + 1) * interval tokens;
  // entries past a sequence's length are not written. May be absent.
  TensorView state_checkpoints;
  int64_t checkpoint_interval = 0;  // a positive multiple of chunk_size when state_checkpoints is given

  float scale = 0.0f;                    // 0: K^-1/2
  bool use_qk_l2norm_in_kernel = false;  // q, k <- x / sqrt(sum x^2 + 1e-6), fp32
  GateOptions gate;
  StateLayout state_layout = StateLayout::k_major;
  int32_t chunk_size = 64;  // 16, 32 or 64 (the GPU kernels use 64)
  ExecOptions exec;
};

FLASHGDN_CXX_API Status chunk_fwd_workspace_size(const ChunkFwdParams& p, size_t* bytes);
FLASHGDN_CXX_API Status chunk_fwd(const ChunkFwdParams& p, void* workspace = nullptr, size_t workspace_bytes = 0,
                                  void* stream = nullptr);

// ---------------------------------------------------------------------------------------------------------
// chunk_bwd: training backward (gdn-math §7). Inputs are the forward's; outputs are the gradients of the
// inputs as given: with use_qk_l2norm_in_kernel dq/dk are w.r.t. the raw q/k, with use_gate_in_kernel dg is
// w.r.t. raw a, with use_beta_sigmoid_in_kernel dbeta is w.r.t. raw b.
struct ChunkBwdParams {
  TensorView q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens;  // as in ChunkFwdParams
  TensorView d_o;                                                          // [B, T, Hv, V]
  TensorView d_ht;      // [N, Hv, K, V] / [N, Hv, V, K]; may be absent (zero)
  TensorView dq;        // [B, T, Hqk, K] output
  TensorView dk;        // [B, T, Hqk, K] output
  TensorView dv;        // [B, T, Hv, V] output
  TensorView dg;        // [B, T, Hv] output; may be absent
  TensorView dbeta;     // [B, T, Hv] output; may be absent
  TensorView dh0;       // like initial_state, f32 output; may be absent
  TensorView dA_log;    // [Hv] f32 output; may be absent (only with use_gate_in_kernel)
  TensorView ddt_bias;  // [Hv] f32 output; may be absent (only with use_gate_in_kernel)

  float scale = 0.0f;
  bool use_qk_l2norm_in_kernel = false;
  GateOptions gate;
  StateLayout state_layout = StateLayout::k_major;
  int32_t chunk_size = 64;
  ExecOptions exec;
};

FLASHGDN_CXX_API Status chunk_bwd_workspace_size(const ChunkBwdParams& p, size_t* bytes);
FLASHGDN_CXX_API Status chunk_bwd(const ChunkBwdParams& p, void* workspace = nullptr, size_t workspace_bytes = 0,
                                  void* stream = nullptr);

// ---------------------------------------------------------------------------------------------------------
// gating: g, beta from raw projections (gdn-math §4; vLLM fused_gdn_gating).
struct GatingParams {
  TensorView A_log;    // [Hv]
  TensorView a;        // [..., Hv]
  TensorView dt_bias;  // [Hv]; may be absent
  TensorView b;        // [..., Hv] same shape as a; may be absent
  TensorView g;        // [..., Hv] output, f32 (f64 on CPU)
  TensorView beta;     // [..., Hv] output; written when b is given; may be absent (then b must be too)
  GateOptions gate;    // softplus_beta, softplus_threshold, allow_neg_eigval are read
  ExecOptions exec;
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
  TensorView q;           // [B, T, Hqk, K]
  TensorView k;           // [B, T, Hqk, K]
  TensorView v;           // [B, T, Hv, V]
  TensorView g;           // [B, T, Hv] (or raw a); may be absent (g = 0)
  TensorView beta;        // [B, T, Hv] (or raw b); may be absent (beta = 1)
  TensorView A_log;       // [Hv]; may be absent
  TensorView dt_bias;     // [Hv]; may be absent
  TensorView cu_seqlens;  // [N + 1]; may be absent
  TensorView o;           // [B, T, Hv, V] output, dtype of v

  TensorView state_pool;            // [slots, Hv, K, V] / [slots, Hv, V, K] f32/bf16/f16 in-out; may be absent
  TensorView state_indices;         // [N] or [N, T_max] i32/i64; may be absent (row n uses slot n)
  TensorView num_accepted_tokens;   // [N] i32/i64; may be absent; needs 2-D state_indices
  TensorView intermediate_states;   // [N_buf, T_buf, Hv, K, V] / [.., V, K] f32/bf16/f16 output; may be absent
  TensorView intermediate_indices;  // [N] i32/i64; may be absent (row n uses entry n)
  TensorView initial_state;         // [N, Hv, K, V] / [N, Hv, V, K] f32; only without a pool; may be absent
  TensorView final_state;           // [N, Hv, K, V] / [N, Hv, V, K] f32 output; only without a pool; may be absent

  bool commit = true;
  bool null_slot_is_invalid = false;  // also treat slot 0 as invalid (vLLM NULL_BLOCK_ID)
  float scale = 0.0f;
  bool use_qk_l2norm_in_kernel = false;
  GateOptions gate;
  StateLayout state_layout = StateLayout::k_major;
  ExecOptions exec;
};

FLASHGDN_CXX_API Status recurrent_workspace_size(const RecurrentParams& p, size_t* bytes);
FLASHGDN_CXX_API Status recurrent(const RecurrentParams& p, void* workspace = nullptr, size_t workspace_bytes = 0,
                                  void* stream = nullptr);

// ---------------------------------------------------------------------------------------------------------
// recurrent_commit: after a no-commit verify (gdn-math §8.2 B), copy the accepted intermediate state into
// the pool: pool[state_indices[n]] = intermediate_states[intermediate_indices[n], num_accepted_tokens[n] - 1]
// for every n whose slot is valid and whose count is in [1, T_buf]; other rows are skipped. The pool and the
// buffer share one state layout (the copy is layout-agnostic).
struct RecurrentCommitParams {
  TensorView state_pool;            // [slots, Hv, K, V] / [slots, Hv, V, K] in-out
  TensorView state_indices;         // [N] i32/i64
  TensorView intermediate_states;   // [N_buf, T_buf, Hv, K, V] / [.., V, K]
  TensorView intermediate_indices;  // [N] i32/i64; may be absent (row n uses entry n)
  TensorView num_accepted_tokens;   // [N] i32/i64
  bool null_slot_is_invalid = false;
  ExecOptions exec;
};

FLASHGDN_CXX_API Status recurrent_commit(const RecurrentCommitParams& p, void* stream = nullptr);

// Library facts.
FLASHGDN_CXX_API const char* version();
FLASHGDN_CXX_API bool cuda_available();  // built with CUDA and a device is visible

}  // namespace flashgdn
