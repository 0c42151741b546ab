"""torch custom ops (torch.library) over the runners in _ops.py, with fake-tensor implementations so that
torch.compile(fullgraph=True) traces through them, and autograd for both forwards (chunked and token-by-token)
through chunk_bwd. The pool, commit and gating ops are inference-only: their entry points raise when asked for
gradients.

The public entry points call these ops when torch needs them (autograd, tracing); a plain eager call with no
gradient goes straight to the runner, which skips the dispatcher's per-call cost.
"""

from typing import List, Optional, Tuple

import torch
from torch import Tensor

from . import _ops

_LIB = "flashgdn"


def _empty0(like):
    # Stand-in for an absent output: custom ops return tensors, not None.
    return like.new_empty((0,))


# ---- chunk forward -----------------------------------------------------------------------------------------
@torch.library.custom_op(f"{_LIB}::chunk_fwd", mutates_args=())
def chunk_fwd(q: Tensor, k: Tensor, v: Tensor, g: Optional[Tensor], beta: Optional[Tensor],
              A_log: Optional[Tensor], dt_bias: Optional[Tensor], initial_state: Optional[Tensor],
              cu_seqlens: Optional[Tensor], scale: float, output_final_state: bool, use_qk_l2norm_in_kernel: bool,
              use_gate_in_kernel: bool, use_beta_sigmoid_in_kernel: bool, allow_neg_eigval: bool,
              state_v_first: bool, chunk_size: int, softplus_beta: float,
              softplus_threshold: float) -> Tuple[Tensor, Tensor]:
    o, ht = _ops.chunk_fwd(q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                           cu_seqlens, use_gate_in_kernel, A_log, dt_bias, use_beta_sigmoid_in_kernel,
                           allow_neg_eigval, state_v_first, chunk_size, softplus_beta, softplus_threshold,
                           fw=_ops.framework_of(q))
    return o, (ht if ht is not None else _empty0(q).float())


def _state_dtype(q):
    return torch.float64 if q.dtype == torch.float64 else torch.float32


@chunk_fwd.register_fake
def _(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, scale, output_final_state,
      use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, state_v_first,
      chunk_size, softplus_beta, softplus_threshold):
    o = torch.empty_like(v, memory_format=torch.contiguous_format)
    if not output_final_state:
        return o, q.new_empty((0,), dtype=torch.float32)
    n = q.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
    shape = _ops.state_shape(n, v.shape[2], q.shape[3], v.shape[3], state_v_first)
    return o, q.new_empty(shape, dtype=_state_dtype(q))


# ---- chunk backward ----------------------------------------------------------------------------------------
@torch.library.custom_op(f"{_LIB}::chunk_bwd", mutates_args=())
def chunk_bwd(q: Tensor, k: Tensor, v: Tensor, g: Optional[Tensor], beta: Optional[Tensor],
              A_log: Optional[Tensor], dt_bias: Optional[Tensor], initial_state: Optional[Tensor],
              cu_seqlens: Optional[Tensor], d_o: Tensor, d_ht: Optional[Tensor], scale: float,
              use_qk_l2norm_in_kernel: bool, use_gate_in_kernel: bool, use_beta_sigmoid_in_kernel: bool,
              allow_neg_eigval: bool, state_v_first: bool, chunk_size: int, softplus_beta: float,
              softplus_threshold: float) -> List[Tensor]:
    grads = _ops.chunk_bwd(q, k, v, g, beta, scale, initial_state, use_qk_l2norm_in_kernel, cu_seqlens,
                           use_gate_in_kernel, A_log, dt_bias, use_beta_sigmoid_in_kernel, allow_neg_eigval,
                           state_v_first, chunk_size, d_o, d_ht, softplus_beta, softplus_threshold,
                           fw=_ops.framework_of(q))
    return [x if x is not None else _empty0(q) for x in grads]


@chunk_bwd.register_fake
def _(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, d_o, d_ht, scale, use_qk_l2norm_in_kernel,
      use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, state_v_first, chunk_size, softplus_beta,
      softplus_threshold):
    sdt = _state_dtype(q)

    def like(x, dtype=None, need=True):
        if x is None or not need:
            return q.new_empty((0,))
        return x.new_empty(x.shape, dtype=dtype or x.dtype)

    return [like(q), like(k), like(v), like(g), like(beta), like(initial_state, sdt),
            like(A_log, sdt, use_gate_in_kernel), like(dt_bias, sdt, use_gate_in_kernel)]


_FWD_TENSORS = 9  # q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens: the first arguments of both forwards


def _save(ctx, inputs, flags, output_final_state):
    ctx.save_for_backward(*inputs[:_FWD_TENSORS])
    ctx.flags = flags  # chunk_bwd's scalars: scale, use_qk_l2norm_in_kernel, ..., softplus_threshold
    ctx.output_final_state = output_final_state
    ctx.num_args = len(inputs)


def _setup_chunk(ctx, inputs, output):
    (scale, output_final_state, use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
     allow_neg_eigval, state_v_first, chunk_size, softplus_beta, softplus_threshold) = inputs[_FWD_TENSORS:]
    _save(ctx, inputs, (scale, use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
                        allow_neg_eigval, state_v_first, chunk_size, softplus_beta, softplus_threshold),
          output_final_state)


def _setup_recurrent(ctx, inputs, output):
    # The token-by-token forward computes the chunked forward's function, so the chunk backward (at the default
    # chunk size) is its exact gradient.
    (scale, output_final_state, use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
     allow_neg_eigval, state_v_first, softplus_beta, softplus_threshold) = inputs[_FWD_TENSORS:]
    _save(ctx, inputs, (scale, use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
                        allow_neg_eigval, state_v_first, 64, softplus_beta, softplus_threshold),
          output_final_state)


def _backward(ctx, d_o, d_ht):
    q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens = ctx.saved_tensors
    if not ctx.output_final_state:
        d_ht = None
    # Upstream gradients come as autograd makes them (expanded zero-stride ones from a .sum(), transposes): the
    # extension reads any strides, copying where the kernels cannot take them.
    grads = torch.ops.flashgdn.chunk_bwd(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, d_o, d_ht,
                                         *ctx.flags)
    inputs = (q, k, v, g, beta, initial_state, A_log, dt_bias)
    outs = list(grads)
    for i, (x, dx) in enumerate(zip(inputs, outs)):
        outs[i] = None if x is None or dx.numel() == 0 and x.numel() != 0 else dx.to(x.dtype)
    dq, dk, dv, dg, dbeta, dh0, dA_log, ddt_bias = outs
    return (dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0, None) + (None,) * (ctx.num_args - _FWD_TENSORS)


chunk_fwd.register_autograd(_backward, setup_context=_setup_chunk)


# ---- recurrent (FLA fused_recurrent contract, no pool) -----------------------------------------------------
@torch.library.custom_op(f"{_LIB}::recurrent_fwd", mutates_args=())
def recurrent_fwd(q: Tensor, k: Tensor, v: Tensor, g: Optional[Tensor], beta: Optional[Tensor],
                  A_log: Optional[Tensor], dt_bias: Optional[Tensor], initial_state: Optional[Tensor],
                  cu_seqlens: Optional[Tensor], scale: float, output_final_state: bool,
                  use_qk_l2norm_in_kernel: bool, use_gate_in_kernel: bool, use_beta_sigmoid_in_kernel: bool,
                  allow_neg_eigval: bool, state_v_first: bool, softplus_beta: float,
                  softplus_threshold: float) -> Tuple[Tensor, Tensor]:
    o, ht = _ops.recurrent(q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                           cu_seqlens, use_gate_in_kernel, A_log, dt_bias, use_beta_sigmoid_in_kernel,
                           allow_neg_eigval, state_v_first, softplus_beta, softplus_threshold,
                           fw=_ops.framework_of(q))
    return o, (ht if ht is not None else _empty0(q).float())


@recurrent_fwd.register_fake
def _(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, scale, output_final_state,
      use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, state_v_first,
      softplus_beta, softplus_threshold):
    o = torch.empty_like(v, memory_format=torch.contiguous_format)
    if not output_final_state:
        return o, q.new_empty((0,), dtype=torch.float32)
    n = q.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
    return o, q.new_empty(_ops.state_shape(n, v.shape[2], q.shape[3], v.shape[3], state_v_first),
                          dtype=_state_dtype(q))


recurrent_fwd.register_autograd(_backward, setup_context=_setup_recurrent)


# ---- state pool: decode / multi-token / verify, and the commit -------------------------------------------
@torch.library.custom_op(f"{_LIB}::recurrent_pool", mutates_args=("state_pool", "intermediate_states"))
def recurrent_pool(q: Tensor, k: Tensor, v: Tensor, g: Optional[Tensor], beta: Optional[Tensor],
                   A_log: Optional[Tensor], dt_bias: Optional[Tensor], state_pool: Tensor,
                   state_indices: Optional[Tensor], num_accepted_tokens: Optional[Tensor],
                   intermediate_states: Optional[Tensor], intermediate_indices: Optional[Tensor],
                   cu_seqlens: Optional[Tensor], commit: bool, null_slot_is_invalid: bool, scale: float,
                   use_qk_l2norm_in_kernel: bool, use_gate_in_kernel: bool, use_beta_sigmoid_in_kernel: bool,
                   allow_neg_eigval: bool, softplus_beta: float, softplus_threshold: float,
                   state_v_first: bool) -> Tensor:
    gate = _ops._gate(use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, softplus_beta,
                      softplus_threshold)
    return _ops.recurrent_pool(q, k, v, g, beta, state_pool, state_indices, num_accepted_tokens,
                               intermediate_states, intermediate_indices, cu_seqlens, commit, null_slot_is_invalid,
                               scale, use_qk_l2norm_in_kernel, gate, state_v_first, fw=_ops.framework_of(q),
                               A_log=A_log, dt_bias=dt_bias)


@recurrent_pool.register_fake
def _(q, k, v, g, beta, A_log, dt_bias, state_pool, state_indices, num_accepted_tokens, intermediate_states,
      intermediate_indices, cu_seqlens, commit, null_slot_is_invalid, scale, use_qk_l2norm_in_kernel,
      use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, softplus_beta, softplus_threshold,
      state_v_first):
    return torch.empty_like(v, memory_format=torch.contiguous_format)


@torch.library.custom_op(f"{_LIB}::recurrent_commit", mutates_args=("state_pool",))
def recurrent_commit(state_pool: Tensor, state_indices: Tensor, intermediate_states: Tensor,
                     num_accepted_tokens: Tensor, intermediate_indices: Optional[Tensor],
                     null_slot_is_invalid: bool) -> None:
    _ops.recurrent_commit(state_pool, state_indices, intermediate_states, num_accepted_tokens, intermediate_indices,
                          null_slot_is_invalid, fw=_ops.framework_of(state_pool))


@recurrent_commit.register_fake
def _(state_pool, state_indices, intermediate_states, num_accepted_tokens, intermediate_indices,
      null_slot_is_invalid):
    return None


# ---- gating ------------------------------------------------------------------------------------------------
@torch.library.custom_op(f"{_LIB}::gating", mutates_args=())
def gating(A_log: Tensor, a: Tensor, b: Optional[Tensor], dt_bias: Optional[Tensor], softplus_beta: float,
           softplus_threshold: float, allow_neg_eigval: bool) -> Tuple[Tensor, Tensor]:
    g, beta = _ops.gating(A_log, a, b, dt_bias, softplus_beta, softplus_threshold, allow_neg_eigval,
                          fw=_ops.framework_of(a))
    return g, (beta if beta is not None else _empty0(a))


@gating.register_fake
def _(A_log, a, b, dt_bias, softplus_beta, softplus_threshold, allow_neg_eigval):
    g = a.new_empty(a.shape, dtype=torch.float64 if a.dtype == torch.float64 else torch.float32)
    return g, (b.new_empty(b.shape) if b is not None else a.new_empty((0,)))
