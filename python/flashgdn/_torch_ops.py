"""torch custom ops (torch.library) over the runners in _ops.py, with fake-tensor implementations so that
torch.compile(fullgraph=True) traces through them, and autograd for both forwards (chunked and token-by-token)
through chunk_bwd. The pool, commit and gating ops are inference-only: their entry points raise when asked for
gradients.

Each op's arguments are declared once, as its schema below (_Op): the registration, the binding of a call's
arguments to their names (impl, fake, setup_context), the tensors saved for backward and the order of the
gradients all come from it. The impls pass the arguments by name to the runners of _ops.py, whose parameters
carry the same names.

The public entry points call these ops when torch needs them (tracing, fake tensors, torch.compile); a plain eager
call with no gradient goes straight to the runner, and a plain eager differentiable call of the two forwards goes
through _Eager (the registered autograd's setup and backward without torch.library's per-call argument rebuilding),
both of which skip the dispatcher's per-call cost.
"""

import torch

from . import _ops

_LIB = "flashgdn"


class _Op:
    """One custom op's schema: "Type name, ..." in argument order, and what it returns."""

    def __init__(self, name, args, returns):
        self.qualname = f"{_LIB}::{name}"
        self.schema = f"({args}) -> {returns}"
        decls = [a.split() for a in args.split(",")]
        self.names = [d[-1] for d in decls]
        self.tensors = [d[-1] for d in decls if d[0].startswith("Tensor")]
        self.mutates = tuple(d[-1] for d in decls if "!" in d[0])  # Tensor(a!): written in place

    def bind(self, args, kwargs=None):
        """The arguments of a call as {name: value}."""
        a = dict(zip(self.names, args))
        a.update(kwargs or {})
        return a

    def define(self, impl, fake):
        """Registers impl(**arguments) as the op and fake(**arguments) as its fake-tensor implementation."""
        op = torch.library.custom_op(self.qualname, lambda *args, **kw: impl(**self.bind(args, kw)),
                                     mutates_args=self.mutates, schema=self.schema)
        op.register_fake(lambda *args, **kw: fake(**self.bind(args, kw)))
        return op


_SEQ = ("Tensor q, Tensor k, Tensor v, Tensor? g, Tensor? beta, Tensor? A_log, Tensor? dt_bias, "
        "Tensor? initial_state, Tensor? cu_seqlens")
_GATE = "bool use_gate_in_kernel, bool use_beta_sigmoid_in_kernel, bool allow_neg_eigval"
_SOFTPLUS = "float softplus_beta, float softplus_threshold"

CHUNK_FWD = _Op("chunk_fwd", f"{_SEQ}, float scale, bool output_final_state, bool use_qk_l2norm_in_kernel, {_GATE}, "
                f"bool state_v_first, SymInt chunk_size, {_SOFTPLUS}", "(Tensor, Tensor)")
RECURRENT_FWD = _Op("recurrent_fwd", f"{_SEQ}, float scale, bool output_final_state, bool use_qk_l2norm_in_kernel, "
                    f"{_GATE}, bool state_v_first, {_SOFTPLUS}", "(Tensor, Tensor)")
CHUNK_BWD = _Op("chunk_bwd", f"{_SEQ}, Tensor d_o, Tensor? d_ht, float scale, bool use_qk_l2norm_in_kernel, {_GATE}, "
                f"bool state_v_first, SymInt chunk_size, {_SOFTPLUS}", "Tensor[]")
RECURRENT_POOL = _Op("recurrent_pool", "Tensor q, Tensor k, Tensor v, Tensor? g, Tensor? beta, Tensor? A_log, "
                     "Tensor? dt_bias, Tensor(a7!) state_pool, Tensor? state_indices, Tensor? num_accepted_tokens, "
                     "Tensor(a10!)? intermediate_states, Tensor? intermediate_indices, Tensor? cu_seqlens, "
                     f"bool commit, bool null_slot_is_invalid, float scale, bool use_qk_l2norm_in_kernel, {_GATE}, "
                     f"{_SOFTPLUS}, bool state_v_first", "Tensor")
RECURRENT_COMMIT = _Op("recurrent_commit", "Tensor(a0!) state_pool, Tensor state_indices, Tensor intermediate_states, "
                       "Tensor num_accepted_tokens, Tensor? intermediate_indices, bool null_slot_is_invalid", "()")
GATING = _Op("gating", f"Tensor A_log, Tensor a, Tensor? b, Tensor? dt_bias, {_SOFTPLUS}, bool allow_neg_eigval",
             "(Tensor, Tensor)")

# chunk_bwd's outputs: the gradient of each of these forward inputs, in this order.
_GRADS_OF = ("q", "k", "v", "g", "beta", "initial_state", "A_log", "dt_bias")


def _empty0(like):
    # Stand-in for an absent output: custom ops return tensors, not None.
    return like.new_empty((0,))


def _state_dtype(q):
    return torch.float64 if q.dtype == torch.float64 else torch.float32


# ---- the forwards: chunked and token-by-token (FLA fused_recurrent contract, no pool) ------------------------
def _forward(runner):
    def impl(**a):
        o, ht = runner(**a, fw=_ops.framework_of(a["q"]))
        return o, (ht if ht is not None else _empty0(a["q"]).float())
    return impl


def _fake_forward(q, v, cu_seqlens, output_final_state, state_v_first, **_):
    o = torch.empty_like(v, memory_format=torch.contiguous_format)
    if not output_final_state:
        return o, q.new_empty((0,), dtype=torch.float32)
    n = q.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
    return o, q.new_empty(_ops.state_shape(n, v.shape[2], q.shape[3], v.shape[3], state_v_first),
                          dtype=_state_dtype(q))


chunk_fwd = CHUNK_FWD.define(_forward(_ops.chunk_fwd), _fake_forward)
recurrent_fwd = RECURRENT_FWD.define(_forward(_ops.recurrent), _fake_forward)


# ---- chunk backward ----------------------------------------------------------------------------------------
def _chunk_bwd(**a):
    grads = _ops.chunk_bwd(**a, fw=_ops.framework_of(a["q"]))
    return [x if x is not None else _empty0(a["q"]) for x in grads]


def _fake_chunk_bwd(q, A_log, dt_bias, initial_state, use_gate_in_kernel, **a):
    sdt = _state_dtype(q)

    def like(x, dtype=None, need=True):
        if x is None or not need:
            return q.new_empty((0,))
        return x.new_empty(x.shape, dtype=dtype or x.dtype)

    return [like(q), like(a["k"]), like(a["v"]), like(a["g"]), like(a["beta"]), like(initial_state, sdt),
            like(A_log, sdt, use_gate_in_kernel), like(dt_bias, sdt, use_gate_in_kernel)]


chunk_bwd = CHUNK_BWD.define(_chunk_bwd, _fake_chunk_bwd)


# ---- autograd of both forwards through chunk_bwd -------------------------------------------------------------
def _save(ctx, op, a):
    """What the backward needs, from a forward's arguments bound to their names (a)."""
    ctx.save_for_backward(*(a[n] for n in op.tensors))
    ctx.inputs = op.tensors
    ctx.names = op.names
    # chunk_bwd's scalars from the forward's. The token-by-token forward computes the chunked forward's function,
    # so the chunk backward (at the default chunk size) is its exact gradient.
    ctx.scalars = {n: a[n] for n in CHUNK_BWD.names if n not in CHUNK_BWD.tensors and n in a}
    ctx.scalars.setdefault("chunk_size", 64)
    ctx.output_final_state = a["output_final_state"]
    # The forward's exec_options govern its backward: autograd runs a CUDA graph's backward on its own device
    # thread, where the block around backward() (a context variable of the calling thread) is not visible.
    ctx.exec_options = _ops._EXEC.get()


def _setup_context(op):
    def setup(ctx, inputs, output):
        _save(ctx, op, op.bind(inputs))
    return setup


def _backward(ctx, d_o, d_ht, direct=False):
    a = dict(zip(ctx.inputs, ctx.saved_tensors))
    # Upstream gradients come as autograd makes them (expanded zero-stride ones from a .sum(), transposes): the
    # extension reads any strides, copying where the kernels cannot take them.
    a.update(ctx.scalars, d_o=d_o, d_ht=d_ht if ctx.output_final_state else None)
    token = _ops._EXEC.set(ctx.exec_options)
    try:
        if direct:  # plain eager tensors: the runner itself, no dispatcher
            grads = _chunk_bwd(**{n: a[n] for n in CHUNK_BWD.names})
        else:
            grads = torch.ops.flashgdn.chunk_bwd(*(a[n] for n in CHUNK_BWD.names))
    finally:
        _ops._EXEC.reset(token)
    by_input = {}
    for name, dx in zip(_GRADS_OF, grads):
        x = a[name]
        # An absent input, or a gradient the kernel did not produce (an empty stand-in for a non-empty input): None.
        by_input[name] = None if x is None or dx.numel() == 0 and x.numel() != 0 else dx.to(x.dtype)
    return tuple(by_input.get(n) for n in ctx.names)


chunk_fwd.register_autograd(_backward, setup_context=_setup_context(CHUNK_FWD))
recurrent_fwd.register_autograd(_backward, setup_context=_setup_context(RECURRENT_FWD))


class _Eager(torch.autograd.Function):
    """Plain eager autograd of the two forwards: the registered autograd's setup and backward around the runners,
    without the dispatcher. torch.library's autograd kernel rebuilds the op's defaults on every differentiable call
    (torch._library.utils.fill_defaults reads the schema's argument list once per argument: ~80 us of host time a
    call at these ops' 19 arguments, torch 2.11-2.15), a fifth of an eager training step's host time at T = 8K."""

    @staticmethod
    def forward(ctx, spec, impl, *args):
        a = spec.bind(args)  # once: the runner's arguments and what the backward saves
        _save(ctx, spec, a)
        return impl(**a)

    @staticmethod
    def backward(ctx, d_o, d_ht):
        return (None, None) + _backward(ctx, d_o, d_ht, direct=_plain_eager(d_o))


# name: (the registered op, its schema, its runner)
_DIFFERENTIABLE = {"chunk_fwd": (chunk_fwd, CHUNK_FWD, _forward(_ops.chunk_fwd)),
                   "recurrent_fwd": (recurrent_fwd, RECURRENT_FWD, _forward(_ops.recurrent))}


def _plain_eager(t):
    """A plain tensor with memory, in eager mode: not under torch.compile (or compiled autograd), a dispatch mode
    (fake tensors, tracing) or a torch.func transform."""
    return (type(t) is torch.Tensor and not t.is_meta and not torch.compiler.is_compiling()
            and torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is None
            and not torch._C._len_torch_dispatch_stack() and not torch._C._are_functorch_transforms_active())


def differentiable(name, *args):
    """chunk_fwd / recurrent_fwd under autograd: through _Eager for plain tensors in eager mode, else through the
    registered op (torch.compile, fake and meta tensors, subclasses, dispatch modes, torch.func transforms)."""
    op, spec, impl = _DIFFERENTIABLE[name]
    return _Eager.apply(spec, impl, *args) if _plain_eager(args[0]) else op(*args)


# ---- state pool: decode / multi-token / verify, and the commit -------------------------------------------
def _recurrent_pool(use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, softplus_beta,
                    softplus_threshold, **a):
    gate = _ops._gate(use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, softplus_beta,
                      softplus_threshold)
    return _ops.recurrent_pool(**a, gate=gate, fw=_ops.framework_of(a["q"]))


recurrent_pool = RECURRENT_POOL.define(
    _recurrent_pool, lambda v, **_: torch.empty_like(v, memory_format=torch.contiguous_format))
recurrent_commit = RECURRENT_COMMIT.define(
    lambda **a: _ops.recurrent_commit(**a, fw=_ops.framework_of(a["state_pool"])), lambda **_: None)


# ---- gating ------------------------------------------------------------------------------------------------
def _gating(**a):
    g, beta = _ops.gating(**a, fw=_ops.framework_of(a["a"]))
    return g, (beta if beta is not None else _empty0(a["a"]))


def _fake_gating(A_log, a, b, **_):
    g = a.new_empty(a.shape, dtype=torch.float64 if a.dtype == torch.float64 else torch.float32)
    return g, (b.new_empty(b.shape) if b is not None else a.new_empty((0,)))


gating = GATING.define(_gating, _fake_gating)
