"""flashgdn: Gated Delta Rule (Gated DeltaNet) kernels — CPU reference backend and Hopper CUDA kernels.

Entry points (see python/README.md):
    chunk_gated_delta_rule, fused_recurrent_gated_delta_rule   FLA-compatible (fla.ops.gated_delta_rule)
    fused_gdn_gating                                           vLLM-compatible gating
    recurrent_gated_delta_rule_pool, commit_intermediate_states   decode / multi-token / verify on a state pool
Inputs: torch tensors (CPU or CUDA), numpy arrays, or any DLPack array; outputs come back in the same framework.
"""

from . import _C
from ._C import CudaError, InternalError, InvalidArgumentError, UnsupportedError
from ._frameworks import compact_copy as _compact_copy
from ._frameworks import torch as _torch

_C.register_copier(_compact_copy)  # inputs whose strides the kernels cannot take are read through a compact copy


def _register_torch(use_exchange_api=True):
    """The C++ layer reads torch tensors through torch's DLPack C exchange API when torch has one (no Python call per
    tensor, and torch's current stream from C), else through the tensors' attributes; use_exchange_api=False forces
    the attribute path (the tests compare the two)."""
    from . import _frameworks

    _frameworks.TORCH_FAST = _C.register_torch(
        _torch.Tensor, [_torch.float32, _torch.float64, _torch.bfloat16, _torch.float16, _torch.int32,
                        _torch.int64], use_exchange_api)


if _torch is not None:
    _register_torch()

from ._ops import exec_options  # noqa: E402
from .engine import (chunk_gated_delta_rule_prefill, commit_intermediate_states, mixer_decode,  # noqa: E402
                     recurrent_gated_delta_rule_pool)
from .gated_delta_rule import (chunk_gated_delta_rule, chunk_gdn, fused_gdn_gating,  # noqa: E402
                               fused_recurrent_gated_delta_rule, fused_recurrent_gdn)

__version__ = _C.version()


def cuda_available():
    """Built with the CUDA kernels and a GPU is visible."""
    return _C.cuda_available()


def built_with_cuda():
    return _C.built_with_cuda()


__all__ = [
    "chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule", "chunk_gdn", "fused_recurrent_gdn",
    "fused_gdn_gating",
    "recurrent_gated_delta_rule_pool", "commit_intermediate_states", "chunk_gated_delta_rule_prefill", "mixer_decode",
    "exec_options", "cuda_available",
    "built_with_cuda", "InvalidArgumentError", "UnsupportedError", "CudaError", "InternalError", "__version__",
]
