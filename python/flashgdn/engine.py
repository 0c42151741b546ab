"""Serving-engine entry points: decode, multi-token decode and speculative verify on a state pool (gdn-math §8),
the commit that follows a no-commit verify, and an inference prefill that also writes prefix-caching state
checkpoints. python/README.md maps vLLM's and SGLang's calls onto these.

Hot path: an eager call reads each tensor's address, shape and strides in C++, allocates only `o` (pass `out=`
to skip even that) and enqueues on torch's current stream (or `stream=`); it never synchronizes, so it can be
captured in a CUDA graph. Under torch.compile the same call goes through the registered op flashgdn::recurrent_pool.
"""

from . import _frameworks as _fw
from . import _ops

from .gated_delta_rule import _fp32_state, refuse_autograd

_torch = _fw.torch
if _torch is not None:
    from . import _torch_ops

    _is_compiling = _torch.compiler.is_compiling
    _Tensor = _torch.Tensor


def recurrent_gated_delta_rule_pool(q, k, v, g, beta, state_pool, state_indices=None, *, num_accepted_tokens=None,
                                    intermediate_states=None, intermediate_indices=None, cu_seqlens=None,
                                    commit=True, null_slot_is_invalid=False, scale=None,
                                    use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, A_log=None,
                                    dt_bias=None, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                                    softplus_beta=1.0, softplus_threshold=20.0, state_v_first=False, out=None,
                                    stream=None):
    """One step (or T steps) of the recurrence for N rows, each reading and writing a state-pool slot.

    q, k [B, T, H, K]; v [B, T, HV, V]; g, beta [B, T, HV] or None (g = 0, beta = 1) — or raw a / b with
    use_gate_in_kernel (A_log [HV], dt_bias [HV]) / use_beta_sigmoid_in_kernel. Rows: B sequences of T tokens, or
    B == 1 with cu_seqlens [N + 1].
    state_pool [slots, HV, K, V] (V-major [slots, HV, V, K] with state_v_first), fp32 / bf16 / fp16, in-out.
    state_indices [N] (row n reads and writes slot state_indices[n]), or [N, T_max] (vLLM's speculative slot
      table: the start state is slot state_indices[n, num_accepted_tokens[n] - 1], the state after token t goes to
      slot state_indices[n, t]); None: row n uses slot n.
    A row whose start slot is invalid (< 0, or 0 with null_slot_is_invalid, or >= slots), or whose accepted count
      is outside [1, T_max], gets o = 0 and writes nothing.
    commit=False never writes the pool (verify); intermediate_states [N_buf, T_buf, HV, K, V] then receives the
      state after every token at entry intermediate_indices[n] (None: n); commit_intermediate_states() copies the
      accepted one into the pool afterwards.
    Returns o [B, T, HV, V] in v's dtype (written into `out` when given).
    """
    refuse_autograd("recurrent_gated_delta_rule_pool", (q, k, v, g, beta, A_log, dt_bias),
                    "the state-pool update (inference)")
    fw = _fw.framework_of(q)
    if fw is _fw.TorchFw:
        if _is_compiling() or type(q) is not _Tensor or q.is_meta:
            if out is not None or stream is not None:
                raise ValueError("recurrent_gated_delta_rule_pool: out= and stream= are eager-only")
            return _torch_ops.recurrent_pool(q, k, v, g, beta, A_log, dt_bias, state_pool, state_indices,
                                             num_accepted_tokens, intermediate_states, intermediate_indices,
                                             cu_seqlens, bool(commit), bool(null_slot_is_invalid),
                                             0.0 if scale is None else float(scale),
                                             bool(use_qk_l2norm_in_kernel), bool(use_gate_in_kernel),
                                             bool(use_beta_sigmoid_in_kernel), bool(allow_neg_eigval),
                                             float(softplus_beta), float(softplus_threshold), bool(state_v_first))
    elif fw is None:
        raise TypeError("recurrent_gated_delta_rule_pool: the state pool is updated in place, which needs a "
                        f"mutable array (torch, numpy, CuPy); got {type(q)}")
    gate = _ops._gate(use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, softplus_beta,
                      softplus_threshold)
    return _ops.recurrent_pool(q, k, v, g, beta, state_pool, state_indices, num_accepted_tokens, intermediate_states,
                               intermediate_indices, cu_seqlens, commit, null_slot_is_invalid,
                               0.0 if scale is None else scale, use_qk_l2norm_in_kernel, gate, state_v_first, out,
                               stream, fw, A_log, dt_bias)


def commit_intermediate_states(state_pool, state_indices, intermediate_states, num_accepted_tokens,
                               intermediate_indices=None, *, null_slot_is_invalid=False, stream=None):
    """After a commit=False verify: pool[state_indices[n]] = intermediate_states[intermediate_indices[n],
    num_accepted_tokens[n] - 1] for every row whose slot is valid and whose count is in [1, T_buf]."""
    fw = _fw.framework_of(state_pool)
    if fw is _fw.TorchFw and (_is_compiling() or type(state_pool) is not _Tensor or state_pool.is_meta):
        if stream is not None:
            raise ValueError("commit_intermediate_states: stream= is eager-only")
        _torch_ops.recurrent_commit(state_pool, state_indices, intermediate_states, num_accepted_tokens,
                                    intermediate_indices, bool(null_slot_is_invalid))
        return
    if fw is None:
        raise TypeError(f"commit_intermediate_states: the pool must be a mutable array, got {type(state_pool)}")
    _ops.recurrent_commit(state_pool, state_indices, intermediate_states, num_accepted_tokens, intermediate_indices,
                          null_slot_is_invalid, stream, fw)


def chunk_gated_delta_rule_prefill(q, k, v, g, beta, *, scale=None, initial_state=None, output_final_state=True,
                                   cu_seqlens=None, state_checkpoints=None, checkpoint_interval=0,
                                   use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, A_log=None,
                                   dt_bias=None, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                                   softplus_beta=1.0, softplus_threshold=20.0, state_v_first=False, chunk_size=64,
                                   stream=None):
    """Inference prefill (chunk_gated_delta_rule's forward, no autograd) with prefix-caching checkpoints.

    Arguments as chunk_gated_delta_rule's. state_checkpoints [N, C_max, HV, K, V] fp32 ([N, C_max, HV, V, K] with
    state_v_first), written in place: entry c of sequence n receives the state after (c + 1) * checkpoint_interval
    tokens of that sequence, for the entries the sequence reaches; the others are left untouched.
    checkpoint_interval: a positive multiple of chunk_size when state_checkpoints is given.
    Eager only (the checkpoints are written in place): not for torch.compile graphs.
    Returns (o [B, T, HV, V] in v's dtype, final_state [N, HV, K, V] fp32 or None).
    """
    refuse_autograd("chunk_gated_delta_rule_prefill", (q, k, v, g, beta, initial_state, A_log, dt_bias),
                    "the checkpointing prefill (inference)")
    initial_state = _fp32_state(initial_state)
    fw = _fw.framework_of(q)
    if fw is None:
        raise TypeError("chunk_gated_delta_rule_prefill: state checkpoints are written in place, which needs a "
                        f"mutable array (torch, numpy, CuPy); got {type(q)}")
    if fw is _fw.TorchFw:
        if _is_compiling() or type(q) is not _Tensor or q.is_meta:
            raise RuntimeError("chunk_gated_delta_rule_prefill is eager-only (it writes the checkpoints in place) and "
                               "needs tensors with memory; use chunk_gated_delta_rule under torch.compile")
        if cu_seqlens is not None and cu_seqlens.device != q.device:
            cu_seqlens = cu_seqlens.to(q.device)
    return _ops.chunk_fwd(q, k, v, g, beta, scale, initial_state, bool(output_final_state),
                          bool(use_qk_l2norm_in_kernel), cu_seqlens, bool(use_gate_in_kernel), A_log, dt_bias,
                          bool(use_beta_sigmoid_in_kernel), bool(allow_neg_eigval), bool(state_v_first),
                          int(chunk_size), float(softplus_beta), float(softplus_threshold),
                          state_checkpoints=state_checkpoints, checkpoint_interval=int(checkpoint_interval),
                          stream=stream, fw=fw)
