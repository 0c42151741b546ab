// flashgdn — Gated Delta Rule (Gated DeltaNet) kernels. C++ API.
//
// The operator contract is docs/gdn-math.md:
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
};
FLASHGDN_CXX_API const char* recurrent_kernel_name(RecurrentKernel k);                   // "auto", "persistent", ...
FLASHGDN_CXX_API bool recurrent_kernel_from_name(const char* name, RecurrentKernel* k);  // false: no such kernel

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
  // Kernel overrides of the CUDA backend (tests and A/B benchmarks; the CPU backend ignores them). The defaults are
  // the plan's choice.
  RecurrentKernel recurrent_kernel = RecurrentKernel::auto_;  // recurrent
  int32_t chunk_fwd_segments = 0;  // chunk_fwd segment split (gdn-math §6): 0 auto, 1 off, P > 1 about P per sequence
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
// The plan a chunk_fwd call runs (kernels, grids, segment split, workspace) and why, as text; the params are
// validated as by the call. sm_count = 0: for the tensors' device (CPU tensors: the CPU backend); sm_count > 0: the
// CUDA plan for a GPU with that many SMs, whatever the tensors' device (the plan reads shapes and flags only).
FLASHGDN_CXX_API Status chunk_fwd_plan(const ChunkFwdParams& p, std::string* out, int32_t sm_count = 0);
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
// The plan a recurrent call runs (kernel, V-tile, grid) and why, as text; sm_count as for chunk_fwd_plan.
FLASHGDN_CXX_API Status recurrent_plan(const RecurrentParams& p, std::string* out, int32_t sm_count = 0);
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
  TensorView x;                          // [B, T, C] mixed qkv before the conv, f32/bf16/f16
  TensorView z;                          // [B, T, Hv, V] output gate, dtype of x
  TensorView a;                          // [B, T, Hv] decay input (raw)
  TensorView b;                          // [B, T, Hv] beta input (raw)
  TensorView A_log;                      // [Hv]
  TensorView dt_bias;                    // [Hv]; may be absent
  TensorView conv_weight;                // [C, Kc] depthwise taps; tap Kc - 1 multiplies the current input
  TensorView conv_bias;                  // [C]; may be absent
  TensorView norm_weight;                // [V] gated RMSNorm weight
  TensorView cu_seqlens;                 // [N + 1] i32/i64; may be absent
  TensorView conv_state;                 // [slots, C, L] in-out, dtype of x; L >= Kc - 1 (1-D), >= Kc - 2 + T_max (2-D)
  TensorView state_pool;                 // [slots, Hv, K, V] / [slots, Hv, V, K] f32/bf16/f16 in-out
  TensorView state_indices;              // [N] or [N, T_max] i32/i64; may be absent (row n uses slot n)
  TensorView num_accepted_tokens;        // [N] i32/i64; may be absent; needs 2-D state_indices
  TensorView intermediate_states;        // [N_buf, T_buf, Hv, K, V] / [.., V, K] output; may be absent
  TensorView intermediate_conv_windows;  // [N_buf, T_buf, C, Kc - 1] output, dtype of x; may be absent
  TensorView intermediate_indices;       // [N] i32/i64; may be absent (row n uses entry n)
  TensorView out;                        // [B, T, Hv, V] output, dtype of x

  int64_t num_k_heads = 0;  // Hqk
  int64_t head_k_dim = 0;   // K
  bool commit = true;
  bool null_slot_is_invalid = false;  // also treat slot 0 as invalid (vLLM NULL_BLOCK_ID)
  float scale = 0.0f;                 // 0: K^-1/2
  float norm_eps = 1e-6f;
  GateOptions gate;  // softplus_beta, softplus_threshold, allow_neg_eigval are read (a and b are always raw)
  StateLayout state_layout = StateLayout::k_major;
  ExecOptions exec;
};

FLASHGDN_CXX_API Status mixer_decode(const MixerDecodeParams& p, void* stream = nullptr);

// Library facts.
FLASHGDN_CXX_API const char* version();
FLASHGDN_CXX_API bool cuda_available();  // built with CUDA and a device is visible

}  // namespace flashgdn
