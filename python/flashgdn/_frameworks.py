"""Array frameworks: where outputs are allocated, which stream a launch uses, and how results go back.

flashgdn computes into buffers it allocates in the framework of the inputs, so that outputs come back as the
caller's type: torch tensors (CPU or CUDA, through torch's caching allocator), numpy arrays, CuPy arrays. Any
other DLPack producer (JAX, ...) is borrowed zero-copy as a torch tensor (or a numpy array without torch),
computed on, and handed back through its own framework's `from_dlpack`.
"""

import importlib
import sys

try:  # torch is optional: the numpy path needs only numpy
    import torch
except ImportError:  # pragma: no cover - exercised on numpy-only installs
    torch = None

# Set by flashgdn/__init__.py: the extension reads torch tensors and torch's current stream through the DLPack C
# exchange API, so the stream argument can stay None (resolved in C++).
TORCH_FAST = False


def _torch_dtype(name):
    return getattr(torch, name)


def _numpy_dtype(np, name):
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError as e:
            raise TypeError("bfloat16 numpy arrays need the ml_dtypes package") from e
        return ml_dtypes.bfloat16
    return np.dtype(name)


class TorchFw:
    """torch tensors: CPU tensors run on the CPU backend, CUDA tensors on the current stream of their device."""

    name = "torch"

    @staticmethod
    def dtype_name(x):
        return str(x.dtype).replace("torch.", "")

    @staticmethod
    def empty(shape, like, dtype=None):
        return torch.empty(shape, dtype=like.dtype if dtype is None else _torch_dtype(dtype), device=like.device)

    @staticmethod
    def empty_like(x):
        # compact, same shape / dtype / device; empty_like is ~4x cheaper than empty(shape, dtype=, device=)
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    @staticmethod
    def zeros(shape, like, dtype=None):
        return torch.zeros(shape, dtype=like.dtype if dtype is None else _torch_dtype(dtype), device=like.device)

    @staticmethod
    def stream(like, stream=None):
        if stream is not None:
            return _stream_handle(stream)
        if TORCH_FAST:
            return None  # the extension asks torch for the current stream of the inputs' device
        if like.is_cuda:
            # The raw handle of torch's current stream; torch.cuda.current_stream() builds a Python object.
            return torch._C._cuda_getCurrentRawStream(like.get_device())
        return 0

    @staticmethod
    def allocator(like, stream=None):
        device = like.device

        def alloc(nbytes):
            ws = torch.empty((nbytes + 3) // 4, dtype=torch.int32, device=device)  # int32: a dtype the binding reads
            if stream is not None and device.type == "cuda":
                # Workspace used on a stream other than the current one: keep the caching allocator from
                # handing its blocks out again before that stream is done with them.
                ws.record_stream(torch.cuda.ExternalStream(_stream_handle(stream), device=device))
            return ws

        return alloc

    @staticmethod
    def wrap(x):
        return x


class NumpyFw:
    """numpy arrays: CPU backend, no stream."""

    name = "numpy"

    @staticmethod
    def dtype_name(x):
        return "bfloat16" if x.dtype.name == "bfloat16" else x.dtype.name

    @staticmethod
    def empty(shape, like, dtype=None):
        np = sys.modules["numpy"]
        return np.empty(shape, dtype=like.dtype if dtype is None else _numpy_dtype(np, dtype))

    @staticmethod
    def empty_like(x):
        return sys.modules["numpy"].empty_like(x, order="C")

    @staticmethod
    def zeros(shape, like, dtype=None):
        np = sys.modules["numpy"]
        return np.zeros(shape, dtype=like.dtype if dtype is None else _numpy_dtype(np, dtype))

    @staticmethod
    def stream(like, stream=None):
        return 0

    @staticmethod
    def allocator(like, stream=None):
        np = sys.modules["numpy"]
        return lambda nbytes: np.empty((nbytes + 3) // 4, dtype=np.int32)

    @staticmethod
    def wrap(x):
        return x


class CupyFw:
    """CuPy arrays: GPU kernels on CuPy's current stream, outputs from CuPy's memory pool."""

    name = "cupy"

    @staticmethod
    def dtype_name(x):
        return x.dtype.name

    @staticmethod
    def empty(shape, like, dtype=None):
        cp = sys.modules["cupy"]
        with cp.cuda.Device(like.device.id):
            return cp.empty(shape, dtype=like.dtype if dtype is None else _numpy_dtype(cp, dtype))

    @staticmethod
    def empty_like(x):
        return sys.modules["cupy"].empty_like(x, order="C")

    @staticmethod
    def zeros(shape, like, dtype=None):
        cp = sys.modules["cupy"]
        with cp.cuda.Device(like.device.id):
            return cp.zeros(shape, dtype=like.dtype if dtype is None else _numpy_dtype(cp, dtype))

    @staticmethod
    def stream(like, stream=None):
        if stream is not None:
            return _stream_handle(stream)
        return sys.modules["cupy"].cuda.get_current_stream().ptr

    @staticmethod
    def allocator(like, stream=None):
        cp = sys.modules["cupy"]
        return lambda nbytes: cp.empty((nbytes + 3) // 4, dtype=cp.int32)

    @staticmethod
    def wrap(x):
        return x


def _stream_handle(stream):
    """An explicit stream= argument: an int handle, a torch.cuda.Stream, or a CuPy stream."""
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr"):
        h = getattr(stream, attr, None)
        if isinstance(h, int):
            return h
    raise TypeError(f"stream: expected an int handle, a torch.cuda.Stream or a cupy Stream, got {type(stream)}")


def compact_copy(x, stream=None):
    """A compact (row-major), freshly allocated copy of array `x` in its own framework, made on `stream` (an int
    handle; None: the framework's current stream), the stream the kernel then reads it on.

    The extension calls this for an input whose strides the kernels cannot take (see python/README.md, "Strides");
    the copy lives until the call returns. A fresh allocation is 16-byte aligned, which a contiguous view with a
    storage offset need not be.
    """
    if torch is not None and isinstance(x, torch.Tensor):
        if stream and x.is_cuda:  # 0 (the default stream) and None: the current stream
            with torch.cuda.stream(torch.cuda.ExternalStream(stream, device=x.device)):
                return torch.empty_like(x, memory_format=torch.contiguous_format).copy_(x)
        return torch.empty_like(x, memory_format=torch.contiguous_format).copy_(x)
    mod = type(x).__module__.partition(".")[0]
    if mod == "cupy" and stream:
        cp = sys.modules["cupy"]
        with cp.cuda.ExternalStream(stream):
            return cp.array(x, order="C", copy=True)
    if mod in ("numpy", "cupy"):
        return sys.modules[mod].array(x, order="C", copy=True)
    raise TypeError(f"cannot copy an array of type {type(x)}: pass a compact (row-major) array")


def framework_of(x):
    """The framework class for array `x` (type checks only: this runs on every call)."""
    if torch is not None and isinstance(x, torch.Tensor):
        return TorchFw
    mod = type(x).__module__.partition(".")[0]
    if mod == "numpy":
        return NumpyFw
    if mod == "cupy":
        return CupyFw
    if not hasattr(x, "__dlpack__"):
        raise TypeError(f"expected a torch tensor, numpy/CuPy array or DLPack-capable array, got {type(x)}")
    return None  # foreign DLPack producer: see borrow()


def borrow(x):
    """A foreign DLPack array as a torch tensor (or numpy array without torch), zero-copy."""
    if x is None:
        return None
    if torch is not None:
        return torch.from_dlpack(x)
    np = importlib.import_module("numpy")
    return np.from_dlpack(x)


def give_back(result, like):
    """Hand a result computed on a borrowed view back in the framework of `like`."""
    if result is None:
        return None
    mod = type(like).__module__.partition(".")[0]
    if mod in ("jax", "jaxlib"):
        import jax.numpy as jnp

        return jnp.from_dlpack(result)
    try:
        fw = importlib.import_module(mod)
        return fw.from_dlpack(result)
    except (ImportError, AttributeError):
        return result
