"""Framework-generic runners: allocate outputs like the inputs, call flashgdn._C, return the outputs.

These are the bodies of the public entry points and of the torch custom ops. They never synchronize, never
read a device value on the host, and construct nothing per call beyond the output arrays.
"""

import contextlib
import contextvars

from . import _C
from ._frameworks import framework_of

# ExecOptions of the calls in the current context (thread or asyncio task): the leading fields of ExecOptions in
# table order (check_indices, cpu_fp64, cpu_algo, cpu_threads, recurrent_kernel, chunk_fwd_segments, mixer_split),
# or None for the library defaults. Set with exec_options(); a context variable, so one thread's block does not
# change another thread's calls.
_EXEC = contextvars.ContextVar("flashgdn_exec_options", default=None)
_CPU_ALGOS = {"recurrent": 0, "chunked": 1}
_EXEC_FIELDS = tuple(_C.options_fields("exec"))  # the order the extension reads an ExecOptions tuple in


@contextlib.contextmanager
def exec_options(check_indices=False, cpu_fp64=False, cpu_algo="recurrent", cpu_threads=0, chunk_fwd_segments=0,
                 chunk_bwd_segments=0, mixer_split=0, chunk_bwd_chains=0, chunk_bwd_grads=0, mixer_kernel=0,
                 chunk_bwd_window=0, chunk_bwd_state=0):
    """Execution options of the calls inside the block (ExecOptions in flashgdn.hpp).

    check_indices validates device index tensors on the host (synchronizes: tests and debugging only);
    cpu_fp64 makes the CPU backend compute in fp64 (the test oracle); cpu_algo is "recurrent" or "chunked";
    chunk_fwd_segments / chunk_bwd_segments force the CUDA prefill's / training backward's segment split (1 off,
    P > 1 about P segments per sequence; 0: the plan's choice); mixer_split forces the CUDA mixer_decode V split
    (1, 2 or 4 CTAs per value head; 0: the plan's choice); chunk_bwd_chains runs the training backward's two state
    chains one after the other (1) or both at once (K = V = 128: 2 a CTA per chain, 3 one CTA of both; 0: the plan's
    choice); chunk_bwd_grads runs its gradients pass on mma.sync (1), wgmma (2), fused with the reverse chain (3) or
    fused with the value heads' dq / dk summed by a pass of their own (4; 2-4: K = V = 128, bf16; 0: the plan's
    choice); chunk_bwd_window = 1 runs
    the backward's dstate chain over every chunk (0: where the fused pass runs, each gradient it reads comes from
    the chunks of its decay window, exact to below fp32 rounding, where the gates allow); chunk_bwd_state = 2 forms
    the backward's chunk start states by the forward's state pass instead of its own state chain (1; K = V = 128,
    bf16, with the fused pass and the chains unsplit; 0: the plan's choice); mixer_kernel runs
    mixer_decode on the clustered kernel (1) or the pipe kernel (2: one token per row, K-major bf16 or fp32 pool,
    1-D slots, no intermediate states, Kc <= 4; 0: the plan's choice).
    A differentiable forward called inside the block keeps its options for its backward, wherever backward() runs
    (autograd runs CUDA backward on a thread of its own, which does not see this block).
    """
    given = dict(check_indices=bool(check_indices), cpu_fp64=bool(cpu_fp64), cpu_algo=_CPU_ALGOS[cpu_algo],
                 cpu_threads=int(cpu_threads), chunk_fwd_segments=int(chunk_fwd_segments),
                 chunk_bwd_segments=int(chunk_bwd_segments), mixer_split=int(mixer_split),
                 chunk_bwd_chains=int(chunk_bwd_chains), chunk_bwd_grads=int(chunk_bwd_grads),
                 mixer_kernel=int(mixer_kernel), chunk_bwd_window=int(chunk_bwd_window),
                 chunk_bwd_state=int(chunk_bwd_state))
    token = _EXEC.set(tuple(given.get(name, 0) for name in _EXEC_FIELDS))  # fields not named here: 0 (auto)
    try:
        yield
    finally:
        _EXEC.reset(token)


def _gate(use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, softplus_beta, softplus_threshold):
    if not (use_gate_in_kernel or use_beta_sigmoid_in_kernel or allow_neg_eigval) and softplus_beta == 1.0 and \
            softplus_threshold == 20.0:
        return None
    return (bool(use_gate_in_kernel), bool(use_beta_sigmoid_in_kernel), bool(allow_neg_eigval),
            float(softplus_beta), float(softplus_threshold))


def _state_dtype(fw, q):
    # fp32 state everywhere; the CPU oracle (fp64 inputs) keeps fp64.
    return "float64" if fw.dtype_name(q) == "float64" else "float32"


def _num_seqs(q, cu_seqlens):
    return q.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1


def state_shape(n, v_heads, k_dim, v_dim, state_v_first):
    """[N, Hv, K, V] (K-major) or [N, Hv, V, K] (V-major)."""
    return (n, v_heads, v_dim, k_dim) if state_v_first else (n, v_heads, k_dim, v_dim)


def _final_state_shape(q, v, cu_seqlens, state_v_first):
    if len(q.shape) != 4 or len(v.shape) != 4:
        return (0,)  # malformed inputs: the library's validation names the argument
    return state_shape(_num_seqs(q, cu_seqlens), v.shape[2], q.shape[3], v.shape[3], state_v_first)


def chunk_fwd(q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel, cu_seqlens,
              use_gate_in_kernel, A_log, dt_bias, use_beta_sigmoid_in_kernel, allow_neg_eigval, state_v_first,
              chunk_size, softplus_beta=1.0, softplus_threshold=20.0, state_checkpoints=None,
              checkpoint_interval=0, stream=None, fw=None, out=None):
    """-> (o [B, T, Hv, V], final_state [N, Hv, K, V] (or V-major) or None); o is written into `out` when given."""
    fw = fw or framework_of(q)
    o = fw.empty_like(v) if out is None else out
    final_state = None
    if output_final_state:
        final_state = fw.empty(_final_state_shape(q, v, cu_seqlens, state_v_first), q, _state_dtype(fw, q))
    _C.chunk_fwd(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, o, final_state, state_checkpoints,
                 checkpoint_interval, 0.0 if scale is None else float(scale), use_qk_l2norm_in_kernel,
                 _gate(use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, softplus_beta,
                       softplus_threshold), state_v_first, chunk_size, _EXEC.get(), fw.stream(q, stream),
                 fw.allocator(q, stream))
    return o, final_state


def chunk_bwd(q, k, v, g, beta, scale, initial_state, use_qk_l2norm_in_kernel, cu_seqlens, use_gate_in_kernel,
              A_log, dt_bias, use_beta_sigmoid_in_kernel, allow_neg_eigval, state_v_first, chunk_size, d_o, d_ht,
              softplus_beta=1.0, softplus_threshold=20.0, stream=None, fw=None):
    """-> (dq, dk, dv, dg, dbeta, dh0, dA_log, ddt_bias); entries for absent inputs are None.

    Gradients are w.r.t. the inputs as given (raw q/k with the in-kernel l2norm, raw a / b with the in-kernel
    gate / sigmoid), in each input's dtype; dh0, dA_log, ddt_bias in the state dtype.
    """
    fw = fw or framework_of(q)
    sdt = _state_dtype(fw, q)
    dq = fw.empty_like(q)
    dk = fw.empty_like(k)
    dv = fw.empty_like(v)
    dg = None if g is None else fw.empty_like(g)
    dbeta = None if beta is None else fw.empty_like(beta)
    dh0 = None if initial_state is None else fw.empty(initial_state.shape, q, sdt)
    dA_log = None if (A_log is None or not use_gate_in_kernel) else fw.empty(A_log.shape, q, sdt)
    ddt_bias = None if (dt_bias is None or not use_gate_in_kernel) else fw.empty(dt_bias.shape, q, sdt)
    _C.chunk_bwd(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, d_o, d_ht, dq, dk, dv, dg, dbeta, dh0,
                 dA_log, ddt_bias, 0.0 if scale is None else float(scale), use_qk_l2norm_in_kernel,
                 _gate(use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, softplus_beta,
                       softplus_threshold), state_v_first, chunk_size, _EXEC.get(), fw.stream(q, stream),
                 fw.allocator(q, stream))
    return dq, dk, dv, dg, dbeta, dh0, dA_log, ddt_bias


def recurrent(q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel, cu_seqlens,
              use_gate_in_kernel, A_log, dt_bias, use_beta_sigmoid_in_kernel, allow_neg_eigval, state_v_first,
              softplus_beta=1.0, softplus_threshold=20.0, stream=None, fw=None):
    """FLA's fused_recurrent contract (no pool) -> (o, final_state or None)."""
    fw = fw or framework_of(q)
    o = fw.empty_like(v)
    final_state = None
    if output_final_state:
        final_state = fw.empty(_final_state_shape(q, v, cu_seqlens, state_v_first), q, _state_dtype(fw, q))
    _C.recurrent(q, k, v, g, beta, A_log, dt_bias, cu_seqlens, o, None, None, None, None, None, initial_state,
                 final_state, True, False, 0.0 if scale is None else float(scale), use_qk_l2norm_in_kernel,
                 _gate(use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, softplus_beta,
                       softplus_threshold), state_v_first, _EXEC.get(), fw.stream(q, stream), fw.allocator(q, stream))
    return o, final_state


def recurrent_pool(q, k, v, g, beta, state_pool, state_indices, num_accepted_tokens, intermediate_states,
                   intermediate_indices, cu_seqlens, commit, null_slot_is_invalid, scale, use_qk_l2norm_in_kernel,
                   gate, state_v_first, out=None, stream=None, fw=None, A_log=None, dt_bias=None):
    """Decode / multi-token / verify on a state pool; `gate` is the packed GateOptions tuple (or None)."""
    fw = fw or framework_of(q)
    o = fw.empty_like(v) if out is None else out
    _C.recurrent(q, k, v, g, beta, A_log, dt_bias, cu_seqlens, o, state_pool, state_indices, num_accepted_tokens,
                 intermediate_states, intermediate_indices, None, None, commit, null_slot_is_invalid, scale,
                 use_qk_l2norm_in_kernel, gate, state_v_first, _EXEC.get(), fw.stream(q, stream), fw.allocator(q, stream))
    return o


def recurrent_commit(state_pool, state_indices, intermediate_states, num_accepted_tokens, intermediate_indices,
                     null_slot_is_invalid, stream=None, fw=None):
    fw = fw or framework_of(state_pool)
    _C.recurrent_commit(state_pool, state_indices, intermediate_states, intermediate_indices, num_accepted_tokens,
                        null_slot_is_invalid, _EXEC.get(), fw.stream(state_pool, stream))


def gating(A_log, a, b, dt_bias, softplus_beta, softplus_threshold, allow_neg_eigval, stream=None, fw=None):
    """-> (g, beta): g fp32 (fp64 for fp64 CPU input), beta in b's dtype (None without b); shapes of a."""
    fw = fw or framework_of(a)
    g = fw.empty(a.shape, a, "float64" if fw.dtype_name(a) == "float64" else "float32")
    beta = None if b is None else fw.empty_like(b)
    _C.gating(A_log, a, dt_bias, b, g, beta, (False, False, bool(allow_neg_eigval), float(softplus_beta),
                                                float(softplus_threshold)), _EXEC.get(), fw.stream(a, stream))
    return g, beta


def mixer_decode(x, z, a, b, A_log, dt_bias, conv_weight, conv_bias, norm_weight, cu_seqlens, conv_state,
                 state_pool, state_indices, num_accepted_tokens, intermediate_states, intermediate_conv_windows,
                 intermediate_indices, num_k_heads, head_k_dim, commit, null_slot_is_invalid, scale, norm_eps, gate,
                 state_v_first, out=None, stream=None, fw=None):
    """The fused GDN mixer decode step (flashgdn.hpp, MixerDecodeParams) -> out [B, T, HV, V] in x's dtype."""
    fw = fw or framework_of(x)
    o = fw.empty_like(z) if out is None else out
    _C.mixer_decode(x, z, a, b, A_log, dt_bias, conv_weight, conv_bias, norm_weight, cu_seqlens, conv_state,
                    state_pool, state_indices, num_accepted_tokens, intermediate_states, intermediate_conv_windows,
                    intermediate_indices, o, int(num_k_heads), int(head_k_dim), bool(commit),
                    bool(null_slot_is_invalid), float(scale), float(norm_eps), gate, bool(state_v_first), _EXEC.get(),
                    fw.stream(x, stream))
    return o
