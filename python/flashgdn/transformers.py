"""Run transformers' Gated DeltaNet models (Qwen3-Next, Qwen3.5, Qwen3.5-MoE, OLMo-Hybrid, ...) on flashgdn.

    import flashgdn.transformers
    flashgdn.transformers.patch()        # before or after the model is built; unpatch() restores

transformers (>= 5) picks a GDN layer's kernels when its modeling module is imported: FLA's
`fla.ops.gated_delta_rule` when `fla` imports, else its own torch reference. Either way the layer's forward calls
two module globals by name, `torch_chunk_gated_delta_rule` (prefill, training) and
`torch_recurrent_gated_delta_rule` (cached single-token decode). patch() rebinds both, in every transformers
modeling module that defines them, to adapters over flashgdn's FLA-compatible entry points, so models already
built switch too. Everything else in the layer (the causal conv1d, the gated RMSNorm, the projections) stays
transformers' (or FLA's, when FLA is installed). Training works through flashgdn's autograd (chunk_bwd).
"""

import functools
import glob
import importlib
import os

from .gated_delta_rule import chunk_gated_delta_rule as _chunk
from .gated_delta_rule import fused_recurrent_gated_delta_rule as _recurrent

_NAMES = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule")
_ORIGINALS = {}  # module name -> {global name: transformers' function}


def chunk_gated_delta_rule(query, key, value, g, beta, chunk_size=64, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, cu_seqlens=None, scale=None, **kwargs):
    """transformers' torch_chunk_gated_delta_rule call form -> flashgdn.chunk_gated_delta_rule.

    The layer forwards its attention keywords (position_ids, cu_seq_lens_k, max_length_q, ...) along; they are not
    GDN inputs and are dropped, as transformers' own FLA wrapper drops what FLA's signature does not name."""
    return _chunk(query, key, value, g, beta, scale=scale, initial_state=initial_state,
                  output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                  cu_seqlens=cu_seqlens, chunk_size=chunk_size)


def recurrent_gated_delta_rule(query, key, value, g, beta, initial_state=None, output_final_state=False,
                               use_qk_l2norm_in_kernel=False, cu_seqlens=None, scale=None, **kwargs):
    """transformers' torch_recurrent_gated_delta_rule call form -> flashgdn.fused_recurrent_gated_delta_rule."""
    return _recurrent(query, key, value, g, beta, scale=scale, initial_state=initial_state,
                      output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                      cu_seqlens=cu_seqlens)


_ADAPTERS = {"torch_chunk_gated_delta_rule": chunk_gated_delta_rule,
             "torch_recurrent_gated_delta_rule": recurrent_gated_delta_rule}


@functools.lru_cache(maxsize=1)
def gdn_modules():
    """Names of transformers' modeling modules that define the GDN kernel globals (found by reading the installed
    sources, so that a model added in a later transformers release is covered without importing every model)."""
    import transformers.models

    found = []
    for root in transformers.models.__path__:
        for path in sorted(glob.glob(os.path.join(root, "*", "modeling_*.py"))):
            with open(path, encoding="utf-8") as f:
                text = f.read()
            if all(f"def {name}(" in text for name in _NAMES):
                model, mod = os.path.basename(os.path.dirname(path)), os.path.basename(path)[:-3]
                found.append(f"transformers.models.{model}.{mod}")
    return tuple(found)


def patch(models=None):
    """Route the GDN layers of transformers' models through flashgdn; returns the patched module names.

    models: None for every GDN model transformers has, or model type names (e.g. ["qwen3_next", "qwen3_5"]).
    Idempotent; unpatch() restores transformers' functions."""
    names = gdn_modules()
    if models is not None:
        wanted = {f".{m}.modeling_{m}" for m in models}
        names = tuple(n for n in names if any(n.endswith(w) for w in wanted))
        missing = set(models) - {n.split(".")[2] for n in names}
        if missing:
            raise ValueError(f"flashgdn.transformers.patch: no Gated DeltaNet layer in transformers' models "
                             f"{sorted(missing)}; these have one: {[n.split('.')[2] for n in gdn_modules()]}")
    for name in names:
        mod = importlib.import_module(name)
        saved = _ORIGINALS.setdefault(name, {})
        for attr, adapter in _ADAPTERS.items():
            saved.setdefault(attr, getattr(mod, attr))
            setattr(mod, attr, adapter)
    return list(names)


def unpatch():
    """Give transformers' own GDN functions back to every patched module."""
    for name, saved in _ORIGINALS.items():
        mod = importlib.import_module(name)
        for attr, fn in saved.items():
            setattr(mod, attr, fn)
    _ORIGINALS.clear()


def is_patched(module_name="transformers.models.qwen3_next.modeling_qwen3_next"):
    return module_name in _ORIGINALS
