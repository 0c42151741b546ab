/* flashgdn — the one declaration of every op's arguments.
 *
 * Each op is two X-macro lists, in argument order:
 *   FLASHGDN_<OP>_TENSORS(T)  T(name, role, dtypes, layout, "shape; notes")
 *   FLASHGDN_<OP>_SCALARS(S)  S(c++ type, C type, name, default, "notes")
 * and everything else is expanded from them: the C++ params struct (flashgdn.hpp: TensorView / the C++ type,
 * with the default), the C params struct (flashgdn.h: const DLTensor* / the C type, same order, so the two
 * layouts match field for field), the C ABI conversion and its params_init (src/capi/flashgdn_c.cpp), the
 * validation's tensor list (src/api/validate.cpp), the host mirror of exec.check_indices (src/api/ops.cpp) and
 * the positional argument order of the Python module (python/src/flashgdn_ext.cpp: the tensors, then the
 * scalars). Adding a tensor to an op is one line here plus its use.
 *
 *   role    in: read only; out: written; inout: read and written (a state pool).
 *   dtypes  floats: float32, bfloat16 or float16 (float64 too on the CPU backend);
 *           f32: float32 (float64 on the CPU backend); index: int32 or int64.
 *           Relations ("dtype of v") are checked by the op's validation and said in the notes.
 *   layout  dense: on CUDA read (or written) with 16-byte vector accesses: a stride-1 last dim, 16-byte aligned
 *           data and strides; strided: any strides. The Python module copies a dense input whose strides do not
 *           qualify; it never copies an output.
 *   A tensor whose notes say "may be null" may be absent (C: NULL; C++: TensorView with ndim < 0; Python: None).
 *
 * Nothing here is C++ or C specific: the file is included by both public headers.
 */
#ifndef FLASHGDN_OPS_H_
#define FLASHGDN_OPS_H_

/* ---- options shared by the ops ------------------------------------------------------------------------ */

/* How a call executes; the defaults suit production use. */
#define FLASHGDN_EXEC_OPTIONS(S)                                                                                  \
  /* Validate device-resident index tensors (cu_seqlens, slot indices, num_accepted_tokens) on the host. For CUDA \
     tensors this copies them to the host and synchronizes: off the hot path. Without it, kernels clamp every     \
     index so that no value reads or writes out of bounds (out-of-range rows are invalid rows). */                \
  S(bool, int32_t, check_indices, false, "validate device index tensors on the host (syncs)")                     \
  S(bool, int32_t, cpu_fp64, false, "CPU backend: compute in fp64 (the test oracle) instead of fp32")             \
  S(CpuAlgo, int32_t, cpu_algo, CpuAlgo::recurrent, "CPU backend: recurrent or chunked form")                     \
  S(int32_t, int32_t, cpu_threads, 0, "CPU backend threads; 0: all hardware threads")                             \
  /* Kernel overrides of the CUDA backend (tests and A/B benchmarks; the CPU backend ignores them). The defaults  \
     are the plan's choice. */                                                                                    \
  S(RecurrentKernel, int32_t, recurrent_kernel, RecurrentKernel::auto_, "CUDA recurrent kernel override, auto")   \
  S(int32_t, int32_t, chunk_fwd_segments, 0,                                                                      \
    "CUDA chunk_fwd segment split (gdn-math 6): 0 auto, 1 off, P > 1 about P per sequence")                       \
  S(int32_t, int32_t, chunk_bwd_segments, 0,                                                                      \
    "CUDA chunk_bwd chains' segment split (gdn-math 6): 0 auto, 1 off, P > 1 about P per sequence")               \
  S(int32_t, int32_t, mixer_split, 0, "CUDA mixer_decode CTAs per (row, value head): 0 auto, 1, 2 or 4")          \
  S(int32_t, int32_t, chunk_bwd_chains, 0,                                                                        \
    "CUDA chunk_bwd chains: 0 auto, 1 one after the other, 2 both at once (K = V = 128)")                         \
  S(int32_t, int32_t, chunk_bwd_grads, 0,                                                                         \
    "CUDA chunk_bwd gradients pass: 0 auto, 1 mma.sync, 2 wgmma, 3 fused with the reverse chain, 4 fused with "   \
    "the value heads' dq / dk summed by a pass of their own (2-4: K = V = 128, bf16)")                            \
  S(int32_t, int32_t, mixer_kernel, 0,                                                                            \
    "CUDA mixer_decode kernel: 0 auto, 1 clustered (V split: mixer_split), 2 pipe (T = 1, K-major pool)")         \
  S(int32_t, int32_t, chunk_bwd_window, 0,                                                                        \
    "CUDA chunk_bwd dstate chain: 0 auto (with the fused pass: the decay windows of the gradients it reads, "     \
    "exact to below fp32 rounding), 1 every chunk")                                                               \
  S(int32_t, int32_t, chunk_bwd_state, 0,                                                                         \
    "CUDA chunk_bwd chunk start states: 0 auto, 1 the backward's state chain, 2 chunk_fwd's state pass (K = V = " \
    "128, bf16, the fused pass, the chains unsplit)")

/* Gate and beta as given, or raw projections turned into them inside the op (gdn-math 4):
 *   g = -exp(A_log) * softplus(a + dt_bias),  beta = sigmoid(b) (x2 with allow_neg_eigval). */
#define FLASHGDN_GATE_OPTIONS(S)                                                                        \
  S(bool, int32_t, use_gate_in_kernel, false, "`g` holds raw `a`; A_log required, dt_bias may be null") \
  S(bool, int32_t, use_beta_sigmoid_in_kernel, false, "`beta` holds raw `b`")                           \
  S(bool, int32_t, allow_neg_eigval, false, "beta = 2 sigmoid(b); needs use_beta_sigmoid_in_kernel")    \
  S(float, float, softplus_beta, 1.0f, "softplus(x) = log(1 + exp(softplus_beta x)) / softplus_beta")   \
  S(float, float, softplus_threshold, 20.0f, "softplus(x) = x where softplus_beta x > softplus_threshold")

/* q, k, v and the gate inputs: the first tensors of chunk_fwd, chunk_bwd and recurrent. */
#define FLASHGDN_QKV_GATE_TENSORS(T)                                                         \
  T(q, in, floats, dense, "[B, T, Hqk, K]")                                                  \
  T(k, in, floats, dense, "[B, T, Hqk, K]; dtype of q")                                      \
  T(v, in, floats, dense, "[B, T, Hv, V]; dtype of q")                                       \
  T(g, in, floats, strided, "[B, T, Hv] natural-log decay (or raw a); may be null (g = 0)")  \
  T(beta, in, floats, strided, "[B, T, Hv] (or raw b); may be null (beta = 1)")              \
  T(A_log, in, floats, strided, "[Hv]; may be null (required with gate.use_gate_in_kernel)") \
  T(dt_bias, in, floats, strided, "[Hv]; may be null")

/* ... then the start state and the varlen offsets: the inputs of chunk_fwd and chunk_bwd. */
#define FLASHGDN_SEQ_INPUT_TENSORS(T)                                                                         \
  FLASHGDN_QKV_GATE_TENSORS(T)                                                                                \
  T(initial_state, in, f32, dense, "[N, Hv, K, V] (k_major) or [N, Hv, V, K] (v_major); may be null (zeros)") \
  T(cu_seqlens, in, index, strided, "[N + 1]; may be null (fixed length)")

/* The scale and the in-kernel options of chunk_fwd, chunk_bwd and recurrent. */
#define FLASHGDN_SEQ_SCALARS(S)                                                              \
  S(float, float, scale, 0.0f, "0: K^-1/2")                                                  \
  S(bool, int32_t, use_qk_l2norm_in_kernel, false, "q, k <- x / sqrt(sum x^2 + 1e-6), fp32") \
  S(GateOptions, flashgdn_gate_options, gate, {}, "in-kernel gate and beta")                 \
  S(StateLayout, int32_t, state_layout, StateLayout::k_major, "k_major [.., K, V] or v_major [.., V, K]")

/* ---- chunk_fwd: chunked prefill / inference forward (gdn-math 5, 6) ----------------------------------- */
#define FLASHGDN_CHUNK_FWD_TENSORS(T)                                                                      \
  FLASHGDN_SEQ_INPUT_TENSORS(T)                                                                            \
  T(o, out, floats, dense, "[B, T, Hv, V] dtype of v (varlen rows past cu_seqlens[N] unwritten)")          \
  T(final_state, out, f32, dense, "[N, Hv, K, V] / [N, Hv, V, K]; may be null")                            \
  /* State after every checkpoint_interval tokens of each sequence (prefix caching): entry c = state after \
     (c + 1) * interval tokens; entries past a sequence's length are not written. */                       \
  T(state_checkpoints, out, f32, dense, "[N, C_max, Hv, K, V] / [N, C_max, Hv, V, K]; may be null")

#define FLASHGDN_CHUNK_FWD_SCALARS(S)                                                                     \
  S(int64_t, int64_t, checkpoint_interval, 0, "a positive multiple of chunk_size with state_checkpoints") \
  FLASHGDN_SEQ_SCALARS(S)                                                                                 \
  S(int32_t, int32_t, chunk_size, 64, "16, 32 or 64 (the CUDA kernels use 64)")                           \
  S(ExecOptions, flashgdn_exec_options, exec, {}, "how the call executes")

/* ---- chunk_bwd: training backward (gdn-math 7) --------------------------------------------------------- */
#define FLASHGDN_CHUNK_BWD_TENSORS(T)                                                   \
  FLASHGDN_SEQ_INPUT_TENSORS(T)                                                         \
  T(d_o, in, floats, dense, "[B, T, Hv, V] dtype of v")                                 \
  T(d_ht, in, f32, dense, "[N, Hv, K, V] / [N, Hv, V, K]; may be null (zero)")          \
  T(dq, out, floats, dense, "[B, T, Hqk, K] dtype of q")                                \
  T(dk, out, floats, dense, "[B, T, Hqk, K] dtype of k")                                \
  T(dv, out, floats, dense, "[B, T, Hv, V] dtype of v")                                 \
  T(dg, out, floats, strided, "[B, T, Hv]; may be null")                                \
  T(dbeta, out, floats, strided, "[B, T, Hv]; may be null")                             \
  T(dh0, out, f32, dense, "like initial_state; may be null")                            \
  T(dA_log, out, f32, strided, "[Hv]; may be null (only with gate.use_gate_in_kernel)") \
  T(ddt_bias, out, f32, strided, "[Hv]; may be null (only with gate.use_gate_in_kernel)")

#define FLASHGDN_CHUNK_BWD_SCALARS(S)                                           \
  FLASHGDN_SEQ_SCALARS(S)                                                       \
  S(int32_t, int32_t, chunk_size, 64, "16, 32 or 64 (the CUDA kernels use 64)") \
  S(ExecOptions, flashgdn_exec_options, exec, {}, "how the call executes")

/* ---- gating: g, beta from raw projections (gdn-math 4; vLLM fused_gdn_gating) ------------------------- */
#define FLASHGDN_GATING_TENSORS(T)                               \
  T(A_log, in, floats, strided, "[Hv]")                          \
  T(a, in, floats, strided, "[..., Hv]")                         \
  T(dt_bias, in, floats, strided, "[Hv]; may be null")           \
  T(b, in, floats, strided, "[..., Hv] shape of a; may be null") \
  T(g, out, f32, strided, "[..., Hv] shape of a")                \
  T(beta, out, floats, strided, "[..., Hv] shape of a; written when b is given; may be null (then b must be too)")

#define FLASHGDN_GATING_SCALARS(S)                                                                                \
  S(GateOptions, flashgdn_gate_options, gate, {}, "softplus_beta, softplus_threshold, allow_neg_eigval are read") \
  S(ExecOptions, flashgdn_exec_options, exec, {}, "how the call executes")

/* ---- recurrent: decode / multi-token decode / verify on a state pool, or FLA's fused_recurrent --------- */
#define FLASHGDN_RECURRENT_TENSORS(T)                                                                         \
  FLASHGDN_QKV_GATE_TENSORS(T)                                                                                \
  T(cu_seqlens, in, index, strided, "[N + 1]; may be null (fixed length)")                                    \
  T(o, out, floats, dense, "[B, T, Hv, V] dtype of v")                                                        \
  T(state_pool, inout, floats, dense, "[slots, Hv, K, V] / [slots, Hv, V, K]; may be null")                   \
  T(state_indices, in, index, strided, "[N] or [N, T_max]; may be null (row n uses slot n)")                  \
  T(num_accepted_tokens, in, index, strided, "[N]; may be null; needs 2-D state_indices")                     \
  T(intermediate_states, out, floats, dense, "[N_buf, T_buf, Hv, K, V] / [.., V, K]; may be null")            \
  T(intermediate_indices, in, index, strided, "[N]; may be null (row n uses entry n)")                        \
  T(initial_state, in, f32, dense, "[N, Hv, K, V] / [N, Hv, V, K]; only without a pool; may be null (zeros)") \
  T(final_state, out, f32, dense, "[N, Hv, K, V] / [N, Hv, V, K]; only without a pool; may be null")

#define FLASHGDN_RECURRENT_SCALARS(S)                                                                \
  S(bool, int32_t, commit, true, "write the pool (false: a verify that leaves it untouched)")        \
  S(bool, int32_t, null_slot_is_invalid, false, "also treat slot 0 as invalid (vLLM NULL_BLOCK_ID)") \
  FLASHGDN_SEQ_SCALARS(S)                                                                            \
  S(ExecOptions, flashgdn_exec_options, exec, {}, "how the call executes")

/* ---- recurrent_commit: the accepted intermediate state into the pool (gdn-math 8.2 B) ------------------ */
#define FLASHGDN_RECURRENT_COMMIT_TENSORS(T)                                           \
  T(state_pool, inout, floats, dense, "[slots, Hv, K, V] / [slots, Hv, V, K]")         \
  T(state_indices, in, index, strided, "[N]")                                          \
  T(intermediate_states, in, floats, dense, "[N_buf, T_buf, Hv, K, V] / [.., V, K]")   \
  T(intermediate_indices, in, index, strided, "[N]; may be null (row n uses entry n)") \
  T(num_accepted_tokens, in, index, strided, "[N]")

#define FLASHGDN_RECURRENT_COMMIT_SCALARS(S)                                                         \
  S(bool, int32_t, null_slot_is_invalid, false, "also treat slot 0 as invalid (vLLM NULL_BLOCK_ID)") \
  S(ExecOptions, flashgdn_exec_options, exec, {}, "how the call executes")

/* ---- mixer_decode: the GDN mixer step between the input projections and out_proj, in one launch --------- */
#define FLASHGDN_MIXER_DECODE_TENSORS(T)                                                                        \
  T(x, in, floats, dense, "[B, T, C] mixed qkv before the conv, C = 2 Hqk K + Hv V")                            \
  T(z, in, floats, strided, "[B, T, Hv, V] output gate, dtype of x")                                            \
  T(a, in, floats, strided, "[B, T, Hv] decay input (raw)")                                                     \
  T(b, in, floats, strided, "[B, T, Hv] beta input (raw)")                                                      \
  T(A_log, in, floats, strided, "[Hv]")                                                                         \
  T(dt_bias, in, floats, strided, "[Hv]; may be null")                                                          \
  T(conv_weight, in, floats, strided, "[C, Kc] depthwise taps; tap Kc - 1 multiplies the current input")        \
  T(conv_bias, in, floats, strided, "[C]; may be null")                                                         \
  T(norm_weight, in, floats, strided, "[V] gated RMSNorm weight")                                               \
  T(cu_seqlens, in, index, strided, "[N + 1]; may be null (fixed length)")                                      \
  T(conv_state, inout, floats, strided, "[slots, C, L] dtype of x; L >= Kc - 1 (1-D), >= Kc - 2 + T_max (2-D)") \
  T(state_pool, inout, floats, dense, "[slots, Hv, K, V] / [slots, Hv, V, K]")                                  \
  T(state_indices, in, index, strided, "[N] or [N, T_max]; may be null (row n uses slot n)")                    \
  T(num_accepted_tokens, in, index, strided, "[N]; may be null; needs 2-D state_indices")                       \
  T(intermediate_states, out, floats, dense, "[N_buf, T_buf, Hv, K, V] / [.., V, K]; may be null")              \
  T(intermediate_conv_windows, out, floats, strided, "[N_buf, T_buf, C, Kc - 1] dtype of x; may be null")       \
  T(intermediate_indices, in, index, strided, "[N]; may be null (row n uses entry n)")                          \
  T(out, out, floats, strided, "[B, T, Hv, V] dtype of x")

#define FLASHGDN_MIXER_DECODE_SCALARS(S)                                                                  \
  S(int64_t, int64_t, num_k_heads, 0, "Hqk")                                                              \
  S(int64_t, int64_t, head_k_dim, 0, "K")                                                                 \
  S(bool, int32_t, commit, true, "write the pool and the conv state (false: SGLang verify)")              \
  S(bool, int32_t, null_slot_is_invalid, false, "also treat slot 0 as invalid (vLLM NULL_BLOCK_ID)")      \
  S(float, float, scale, 0.0f, "0: K^-1/2")                                                               \
  S(float, float, norm_eps, 1e-6f, "gated RMSNorm epsilon")                                               \
  S(GateOptions, flashgdn_gate_options, gate, {},                                                         \
    "softplus_beta, softplus_threshold, allow_neg_eigval are read (a and b are always raw)")              \
  S(StateLayout, int32_t, state_layout, StateLayout::k_major, "k_major [.., K, V] or v_major [.., V, K]") \
  S(ExecOptions, flashgdn_exec_options, exec, {}, "how the call executes")

/* Every op: O(stem, C++ params type, tensors, scalars). */
#define FLASHGDN_OPS(O)                                                                                            \
  O(chunk_fwd, ChunkFwdParams, FLASHGDN_CHUNK_FWD_TENSORS, FLASHGDN_CHUNK_FWD_SCALARS)                             \
  O(chunk_bwd, ChunkBwdParams, FLASHGDN_CHUNK_BWD_TENSORS, FLASHGDN_CHUNK_BWD_SCALARS)                             \
  O(gating, GatingParams, FLASHGDN_GATING_TENSORS, FLASHGDN_GATING_SCALARS)                                        \
  O(recurrent, RecurrentParams, FLASHGDN_RECURRENT_TENSORS, FLASHGDN_RECURRENT_SCALARS)                            \
  O(recurrent_commit, RecurrentCommitParams, FLASHGDN_RECURRENT_COMMIT_TENSORS, FLASHGDN_RECURRENT_COMMIT_SCALARS) \
  O(mixer_decode, MixerDecodeParams, FLASHGDN_MIXER_DECODE_TENSORS, FLASHGDN_MIXER_DECODE_SCALARS)

#endif /* FLASHGDN_OPS_H_ */
