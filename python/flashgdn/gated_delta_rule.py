"""FLA-compatible entry points (fla.ops.gated_delta_rule) and vLLM's fused_gdn_gating.

Names, argument names, defaults, shapes and return values follow FLA 0.5.x (see ../shared/docs/peer-apis.md):
    q, k [B, T, H, K]; v [B, T, HV, V]; g, beta [B, T, HV]; states [N, HV, K, V] ([N, HV, V, K] with
    state_v_first); cu_seqlens [N + 1] with B == 1; scale None -> K ** -0.5; g is the natural-log decay.
Inputs may be torch tensors (CPU or CUDA), numpy arrays or any DLPack array; outputs come back in that framework.
"""

from . import _frameworks as _fw
from . import _ops

_torch = _fw.torch
if _torch is not None:
    from . import _torch_ops

    _is_compiling = _torch.compiler.is_compiling
    _grad_enabled = _torch.is_grad_enabled


def _needs_torch_op(tensors):
    """Autograd or tracing: go through the registered op; a plain eager call skips the dispatcher."""
    if _is_compiling():
        return True
    if not _grad_enabled():
        return False
    return any(t is not None and t.requires_grad for t in tensors)


def _same_device(x, q):
    # cu_seqlens often lives on the host while q is on the GPU: a non-blocking copy, no sync.
    if x is not None and _torch is not None and isinstance(x, _torch.Tensor) and x.device != q.device:
        return x.to(q.device, non_blocking=True)
    return x


def _borrow_all(args):
    return [(_fw.borrow(a) if a is not None and not isinstance(a, (bool, int, float)) else a) for a in args]


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                           state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, chunk_indices=None,
                           cp_context=None, *, use_gate_in_kernel=False, A_log=None, dt_bias=None, chunk_size=64,
                           softplus_beta=1.0, softplus_threshold=20.0, **kwargs):
    """Chunked Gated Delta Rule forward (prefill / training); differentiable under torch autograd.

    The signature is FLA 0.6's, positional order included (FLA's kwargs use_gate_in_kernel, A_log, dt_bias and
    chunk_size are keyword arguments here). Returns (o [B, T, HV, V] in v's dtype, final_state [N, HV, K, V]
    fp32 or None). With use_gate_in_kernel, `g` holds the raw projection `a` and
    g = -exp(A_log) * softplus(a + dt_bias); with use_beta_sigmoid_in_kernel, `beta` holds raw `b` and
    beta = sigmoid(b) (2 sigmoid(b) with allow_neg_eigval). cu_seqlens_cpu and chunk_indices (FLA's precomputed
    metadata) are accepted and unused: the library derives its own.
    """
    if "transpose_state_layout" in kwargs:  # FLA's deprecated name for state_v_first
        state_v_first = state_v_first or bool(kwargs.pop("transpose_state_layout"))
    if kwargs.pop("head_first", False):
        raise ValueError("chunk_gated_delta_rule: head_first=True is not supported (FLA removed it): pass "
                         "[B, T, H, K] tensors")
    if kwargs:
        raise TypeError(f"chunk_gated_delta_rule: unsupported arguments {sorted(kwargs)}")
    if cp_context is not None:
        raise NotImplementedError("chunk_gated_delta_rule: cp_context (FLA context parallelism) is not supported")
    fw = _fw.framework_of(q)
    if fw is _fw.TorchFw:
        cu_seqlens = _same_device(cu_seqlens, q)
        if _needs_torch_op((q, k, v, g, beta, initial_state, A_log, dt_bias)):
            o, ht = _torch_ops.chunk_fwd(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens,
                                         0.0 if scale is None else float(scale), bool(output_final_state),
                                         bool(use_qk_l2norm_in_kernel), bool(use_gate_in_kernel),
                                         bool(use_beta_sigmoid_in_kernel), bool(allow_neg_eigval),
                                         bool(state_v_first), int(chunk_size), float(softplus_beta),
                                         float(softplus_threshold))
            return o, (ht if output_final_state else None)
    elif fw is None:  # foreign DLPack arrays (JAX, ...): borrow, compute, hand back
        like = q
        q, k, v, g, beta, initial_state, cu_seqlens, A_log, dt_bias = _borrow_all(
            (q, k, v, g, beta, initial_state, cu_seqlens, A_log, dt_bias))
        o, ht = chunk_gated_delta_rule(q, k, v, g, beta, scale, initial_state, output_final_state,
                                       use_qk_l2norm_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval,
                                       state_v_first, cu_seqlens, use_gate_in_kernel=use_gate_in_kernel,
                                       A_log=A_log, dt_bias=dt_bias,
                                       chunk_size=chunk_size, softplus_beta=softplus_beta,
                                       softplus_threshold=softplus_threshold)
        return _fw.give_back(o, like), _fw.give_back(ht, like)
    return _ops.chunk_fwd(q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                          cu_seqlens, use_gate_in_kernel, A_log, dt_bias, use_beta_sigmoid_in_kernel,
                          allow_neg_eigval, state_v_first, chunk_size, softplus_beta, softplus_threshold, fw=fw)


def fused_recurrent_gated_delta_rule(q, k, v, g=None, beta=None, scale=None, initial_state=None,
                                     output_final_state=False, use_qk_l2norm_in_kernel=False, cu_seqlens=None, *,
                                     gk=None, gv=None, use_gate_in_kernel=False, A_log=None, dt_bias=None,
                                     use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                                     state_v_first=False, softplus_beta=1.0, softplus_threshold=20.0):
    """Token-by-token Gated Delta Rule forward (FLA's fused_recurrent contract; forward only).

    `beta` is the 5th positional argument, as vLLM's and transformers' callers pass it (FLA itself puts gk, gv
    before beta: here they are keyword-only). Returns (o, final_state fp32 or None).
    """
    if gk is not None or gv is not None:
        raise NotImplementedError("fused_recurrent_gated_delta_rule: per-channel gates gk / gv are not supported")
    fw = _fw.framework_of(q)
    if fw is _fw.TorchFw:
        cu_seqlens = _same_device(cu_seqlens, q)
        if _is_compiling():
            o, ht = _torch_ops.recurrent_fwd(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens,
                                             0.0 if scale is None else float(scale), bool(output_final_state),
                                             bool(use_qk_l2norm_in_kernel), bool(use_gate_in_kernel),
                                             bool(use_beta_sigmoid_in_kernel), bool(allow_neg_eigval),
                                             bool(state_v_first))
            return o, (ht if output_final_state else None)
    elif fw is None:
        like = q
        q, k, v, g, beta, initial_state, cu_seqlens, A_log, dt_bias = _borrow_all(
            (q, k, v, g, beta, initial_state, cu_seqlens, A_log, dt_bias))
        o, ht = fused_recurrent_gated_delta_rule(q, k, v, g, beta, scale, initial_state, output_final_state,
                                                 use_qk_l2norm_in_kernel, cu_seqlens,
                                                 use_gate_in_kernel=use_gate_in_kernel, A_log=A_log,
                                                 dt_bias=dt_bias,
                                                 use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel,
                                                 allow_neg_eigval=allow_neg_eigval, state_v_first=state_v_first,
                                                 softplus_beta=softplus_beta, softplus_threshold=softplus_threshold)
        return _fw.give_back(o, like), _fw.give_back(ht, like)
    return _ops.recurrent(q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                          cu_seqlens, use_gate_in_kernel, A_log, dt_bias, use_beta_sigmoid_in_kernel,
                          allow_neg_eigval, state_v_first, softplus_beta, softplus_threshold, fw=fw)


def fused_gdn_gating(A_log, a, b, dt_bias, beta=1.0, threshold=20.0):
    """vLLM's fused_gdn_gating: g = -exp(A_log) * softplus(a + dt_bias), beta_out = sigmoid(b).

    softplus(x) = log(1 + exp(beta x)) / beta where beta x <= threshold, else x. a, b [tokens, HV] ->
    (g [1, tokens, HV] fp32, beta_out [1, tokens, HV] in b's dtype).
    """
    fw = _fw.framework_of(a)
    if fw is None:
        like = a
        A_log, a, b, dt_bias = _borrow_all((A_log, a, b, dt_bias))
        g, bo = fused_gdn_gating(A_log, a, b, dt_bias, beta, threshold)
        return _fw.give_back(g, like), _fw.give_back(bo, like)
    if fw is _fw.TorchFw and _is_compiling():
        g, bo = _torch_ops.gating(A_log, a, b, dt_bias, float(beta), float(threshold), False)
        bo = bo if b is not None else None
    else:
        g, bo = _ops.gating(A_log, a, b, dt_bias, beta, threshold, False, fw=fw)
    if a.ndim == 2:  # vLLM's layout: a leading batch dim of 1
        g = g.reshape((1,) + tuple(a.shape))
        bo = None if bo is None else bo.reshape((1,) + tuple(b.shape))
    return g, bo
