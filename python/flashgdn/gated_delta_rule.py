"""FLA-compatible entry points (fla.ops.gated_delta_rule) and vLLM's fused_gdn_gating.

Names, argument names, defaults, shapes and return values follow FLA 0.6 (FLA's fla/ops/gated_delta_rule):
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
    _Tensor = _torch.Tensor
    _HALF = (_torch.bfloat16, _torch.float16)


def _needs_torch_op(tensors):
    """Autograd, tracing, or tensors without memory: go through the registered op (fake implementations serve
    meta / fake tensors); a plain eager call skips the dispatcher."""
    q = tensors[0]
    if _is_compiling() or type(q) is not _Tensor or q.is_meta:
        return True
    if not _grad_enabled():
        return False
    return any(t is not None and t.requires_grad for t in tensors)


def _requires_grad(tensors):
    return _grad_enabled() and any(
        t is not None and isinstance(t, _Tensor) and t.requires_grad for t in tensors)


def refuse_autograd(op, tensors, why):
    """Raise for an inference-only op asked to differentiate (it would otherwise drop the gradients silently)."""
    if _torch is not None and _requires_grad(tensors):
        raise RuntimeError(f"{op}: {why} has no autograd: call it under torch.no_grad() / torch.inference_mode(), "
                           "or use chunk_gated_delta_rule / fused_recurrent_gated_delta_rule, which differentiate")


def _same_device(x, q):
    # cu_seqlens often lives on the host while q is on the GPU: a non-blocking copy, no sync.
    if x is not None and _torch is not None and isinstance(x, _torch.Tensor) and x.device != q.device:
        return x.to(q.device, non_blocking=True)
    return x


def _fp32_state(h):
    """FLA accepts a bf16 / fp16 initial state (its docstring example passes one); the kernels read fp32 states, so
    the state is widened (an input: a copy of N * HV * K * V * 4 bytes; under autograd its gradient flows back
    through the cast in the state's dtype). The final state is fp32, as FLA's."""
    if _torch is not None and isinstance(h, _Tensor):
        return h.float() if h.dtype in _HALF else h
    name = getattr(getattr(h, "dtype", None), "name", "")  # numpy / CuPy; foreign arrays once borrowed
    return h.astype("float32") if name in ("bfloat16", "float16") else h


def _borrow_all(args):
    return [(_fw.borrow(a) if a is not None and not isinstance(a, (bool, int, float)) else a) for a in args]


# ---- keywords of other libraries' signatures ----------------------------------------------------------------
# FLA 0.6 (fla.ops.gated_delta_rule) and vLLM's in-tree copy (vllm/model_executor/layers/fla/ops) name keywords
# that flashgdn's signatures do not: each entry point resolves them here, in one place, into flashgdn's
# arguments; a keyword neither library names is a TypeError, as in Python.

def _state_layout_alias(kw, state_v_first, op):
    """FLA's deprecated transpose_state_layout= is state_v_first (popped from kw)."""
    if "transpose_state_layout" not in kw:
        return state_v_first
    alias = bool(kw.pop("transpose_state_layout"))
    if state_v_first and not alias:
        raise ValueError(f"{op}: state_v_first=True and transpose_state_layout=False disagree")
    return state_v_first or alias


def _chunk_extras(kwargs, state_v_first):
    """-> (state_v_first, core_attn_out) from chunk_gated_delta_rule's **kwargs."""
    kw = dict(kwargs)
    state_v_first = _state_layout_alias(kw, state_v_first, "chunk_gated_delta_rule")
    if kw.pop("head_first", False):  # vLLM's copy still names it (False); FLA removed it
        raise ValueError("chunk_gated_delta_rule: head_first=True is not supported (FLA removed it): pass "
                         "[B, T, H, K] tensors")
    # vLLM's precomputed chunk metadata: the library derives its own from cu_seqlens.
    kw.pop("prebuilt_meta", None)
    kw.pop("chunk_offsets", None)
    core_attn_out = kw.pop("core_attn_out", None)  # vLLM: the output buffer (o is written into its first elements)
    if kw:
        raise TypeError(f"chunk_gated_delta_rule: unexpected keyword arguments {sorted(kw)} (neither FLA 0.6 nor "
                        "vLLM's copy names them)")
    return state_v_first, core_attn_out


def _recurrent_extras(kwargs, state_v_first):
    """-> (state_v_first, vllm) from fused_recurrent_gated_delta_rule's **kwargs; `vllm` is None, or a dict of
    vLLM's pool keywords (inplace_final_state, ssm_state_indices, num_accepted_tokens, out) when any was passed."""
    kw = dict(kwargs)
    state_v_first = _state_layout_alias(kw, state_v_first, "fused_recurrent_gated_delta_rule")
    vllm = {name: kw.pop(name) for name in ("inplace_final_state", "ssm_state_indices", "num_accepted_tokens", "out")
            if name in kw}
    if kw:
        raise TypeError(f"fused_recurrent_gated_delta_rule: unexpected keyword arguments {sorted(kw)} (neither FLA "
                        "0.6 nor vLLM's copy names them)")
    return state_v_first, (vllm or None)


def _flat_output(buf, like, op, name):
    """vLLM's output buffer: o is written into the first like.numel() elements of `buf`, viewed as like's shape.
    Written in place, so it is never copied: a buffer that cannot be viewed flat is an error."""
    if buf.dtype != like.dtype or buf.device != like.device:
        raise ValueError(f"{op}: {name}: expected {like.dtype} on {like.device} (v's), got {buf.dtype} on "
                         f"{buf.device}")
    if buf.numel() < like.numel():
        raise ValueError(f"{op}: {name}: expected at least {like.numel()} elements (v's), got {buf.numel()}")
    if not buf.is_contiguous():
        raise ValueError(f"{op}: {name}: expected a contiguous buffer (it is written in place, so flashgdn does not "
                         f"copy it), got strides {tuple(buf.stride())}")
    return buf.view(-1)[:like.numel()].view(like.shape)


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
    metadata) are accepted and unused: the library derives its own. Any strides; a bf16 / fp16 initial_state is
    read as fp32. vLLM's keywords: core_attn_out (output buffer), chunk_offsets / prebuilt_meta (ignored).
    """
    state_v_first, core_attn_out = _chunk_extras(kwargs, state_v_first)
    if cp_context is not None:
        raise NotImplementedError("chunk_gated_delta_rule: cp_context (FLA context parallelism) is not supported")
    initial_state = _fp32_state(initial_state)
    fw = _fw.framework_of(q)
    if fw is _fw.TorchFw:
        cu_seqlens = _same_device(cu_seqlens, q)
        if _needs_torch_op((q, k, v, g, beta, initial_state, A_log, dt_bias)):
            if core_attn_out is not None:
                raise ValueError("chunk_gated_delta_rule: core_attn_out (vLLM's output buffer) is eager inference "
                                 "only: not under autograd, torch.compile or fake tensors")
            o, ht = _torch_ops.differentiable("chunk_fwd", q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens,
                                              0.0 if scale is None else float(scale), bool(output_final_state),
                                              bool(use_qk_l2norm_in_kernel), bool(use_gate_in_kernel),
                                              bool(use_beta_sigmoid_in_kernel), bool(allow_neg_eigval),
                                              bool(state_v_first), int(chunk_size), float(softplus_beta),
                                              float(softplus_threshold))
            return o, (ht if output_final_state else None)
        if core_attn_out is not None:
            core_attn_out = _flat_output(core_attn_out, v, "chunk_gated_delta_rule", "core_attn_out")
    elif fw is None:  # foreign DLPack arrays (JAX, ...): borrow, compute, hand back
        if core_attn_out is not None:
            raise TypeError("chunk_gated_delta_rule: core_attn_out needs a mutable torch tensor")
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
    elif core_attn_out is not None:
        raise TypeError("chunk_gated_delta_rule: core_attn_out needs a torch tensor")
    return _ops.chunk_fwd(q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                          cu_seqlens, use_gate_in_kernel, A_log, dt_bias, use_beta_sigmoid_in_kernel,
                          allow_neg_eigval, state_v_first, chunk_size, softplus_beta, softplus_threshold, fw=fw,
                          out=core_attn_out)


def fused_recurrent_gated_delta_rule(q, k, v, g=None, beta=None, scale=None, initial_state=None,
                                     output_final_state=False, use_qk_l2norm_in_kernel=False, cu_seqlens=None, *,
                                     gk=None, gv=None, use_gate_in_kernel=False, A_log=None, dt_bias=None,
                                     use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                                     state_v_first=False, softplus_beta=1.0, softplus_threshold=20.0, **kwargs):
    """Token-by-token Gated Delta Rule forward (FLA's fused_recurrent contract); differentiable under torch
    autograd (the backward is the chunk backward: same function, same gradients).

    `beta` is the 5th positional argument, as vLLM's and transformers' callers pass it (FLA itself puts gk, gv
    before beta: here they are keyword-only). Returns (o, final_state fp32 or None). vLLM's call form
    (inplace_final_state=True with initial_state = the state pool, ssm_state_indices, num_accepted_tokens, out)
    runs recurrent_gated_delta_rule_pool and returns (o, the pool).
    """
    state_v_first, vllm = _recurrent_extras(kwargs, state_v_first)
    if gk is not None or gv is not None:
        raise NotImplementedError("fused_recurrent_gated_delta_rule: per-channel gates gk / gv are not supported")
    if vllm is not None:
        return _vllm_recurrent(q, k, v, g, beta, scale, initial_state, use_qk_l2norm_in_kernel, cu_seqlens,
                               use_gate_in_kernel, A_log, dt_bias, use_beta_sigmoid_in_kernel, allow_neg_eigval,
                               state_v_first, softplus_beta, softplus_threshold, **vllm)
    initial_state = _fp32_state(initial_state)
    fw = _fw.framework_of(q)
    if fw is _fw.TorchFw:
        cu_seqlens = _same_device(cu_seqlens, q)
        if _needs_torch_op((q, k, v, g, beta, initial_state, A_log, dt_bias)):
            o, ht = _torch_ops.differentiable("recurrent_fwd", q, k, v, g, beta, A_log, dt_bias, initial_state,
                                              cu_seqlens, 0.0 if scale is None else float(scale),
                                              bool(output_final_state), bool(use_qk_l2norm_in_kernel),
                                              bool(use_gate_in_kernel), bool(use_beta_sigmoid_in_kernel),
                                              bool(allow_neg_eigval), bool(state_v_first), float(softplus_beta),
                                              float(softplus_threshold))
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


def _vllm_recurrent(q, k, v, g, beta, scale, initial_state, use_qk_l2norm_in_kernel, cu_seqlens, use_gate_in_kernel,
                    A_log, dt_bias, use_beta_sigmoid_in_kernel, allow_neg_eigval, state_v_first, softplus_beta,
                    softplus_threshold, inplace_final_state=True, ssm_state_indices=None, num_accepted_tokens=None,
                    out=None):
    """vLLM's fused_recurrent call: `initial_state` is the state pool, updated in place -> (o, the pool)."""
    from .engine import recurrent_gated_delta_rule_pool

    op = "fused_recurrent_gated_delta_rule"
    if not inplace_final_state:
        raise NotImplementedError(f"{op}: vLLM's inplace_final_state=False (a per-token state buffer) is not "
                                  "supported: use recurrent_gated_delta_rule_pool(intermediate_states=...)")
    if initial_state is None:
        raise ValueError(f"{op}: inplace_final_state=True: expected initial_state (the state pool it updates)")
    o = recurrent_gated_delta_rule_pool(q, k, v, g, beta, initial_state, ssm_state_indices,
                                        num_accepted_tokens=num_accepted_tokens, cu_seqlens=cu_seqlens,
                                        scale=scale, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                                        use_gate_in_kernel=use_gate_in_kernel, A_log=A_log, dt_bias=dt_bias,
                                        use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel,
                                        allow_neg_eigval=allow_neg_eigval, softplus_beta=softplus_beta,
                                        softplus_threshold=softplus_threshold, state_v_first=state_v_first,
                                        out=out)
    return o, initial_state


def fused_gdn_gating(A_log, a, b, dt_bias, beta=1.0, threshold=20.0):
    """vLLM's fused_gdn_gating: g = -exp(A_log) * softplus(a + dt_bias), beta_out = sigmoid(b).

    softplus(x) = log(1 + exp(beta x)) / beta where beta x <= threshold, else x. a, b [tokens, HV] ->
    (g [1, tokens, HV] fp32, beta_out [1, tokens, HV] in b's dtype).
    """
    refuse_autograd("fused_gdn_gating", (A_log, a, b, dt_bias), "vLLM's gating (inference)")
    fw = _fw.framework_of(a)
    if fw is None:
        like = a
        A_log, a, b, dt_bias = _borrow_all((A_log, a, b, dt_bias))
        g, bo = fused_gdn_gating(A_log, a, b, dt_bias, beta, threshold)
        return _fw.give_back(g, like), _fw.give_back(bo, like)
    if fw is _fw.TorchFw and (_is_compiling() or type(a) is not _Tensor or a.is_meta):
        g, bo = _torch_ops.gating(A_log, a, b, dt_bias, float(beta), float(threshold), False)
        bo = bo if b is not None else None
    else:
        g, bo = _ops.gating(A_log, a, b, dt_bias, beta, threshold, False, fw=fw)
    if a.ndim == 2:  # vLLM's layout: a leading batch dim of 1
        g = g.reshape((1,) + tuple(a.shape))
        bo = None if bo is None else bo.reshape((1,) + tuple(b.shape))
    return g, bo


# FLA's short names (fla.ops.gated_delta_rule exports both).
chunk_gdn = chunk_gated_delta_rule
fused_recurrent_gdn = fused_recurrent_gated_delta_rule
