"""transformers' Qwen3-Next end to end on flashgdn (flashgdn.transformers.patch()) against transformers' own torch
path: prefill logits, cached greedy decode, one training step's gradients. A tiny random-weight model (3 layers:
two Gated DeltaNet layers and one attention layer; K = V = 128 head dims; GQA in both layer kinds) on the CPU,
and the same test on CUDA when a GPU is there."""

import copy

import pytest

import flashgdn
from conftest import cuda_ok, torch

transformers = pytest.importorskip("transformers", reason="transformers not installed (scripts/setup.sh installs it)")
import flashgdn.transformers as fgt  # noqa: E402

MODULE = "transformers.models.qwen3_next.modeling_qwen3_next"


def tiny_qwen3_next(device, dtype):
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    cfg = Qwen3NextConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                          linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=128,
                          linear_value_head_dim=128, linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2,
                          moe_intermediate_size=32, shared_expert_intermediate_size=32, decoder_sparse_step=1,
                          layer_types=["linear_attention", "full_attention", "linear_attention"],
                          max_position_embeddings=256, tie_word_embeddings=False)
    torch.manual_seed(1234)
    model = Qwen3NextForCausalLM(cfg)
    # Random gates strong enough that the state carries information across tokens (the defaults decay slowly).
    with torch.no_grad():
        for layer in model.model.layers:
            if hasattr(layer, "linear_attn"):
                layer.linear_attn.A_log.uniform_(-1.0, 1.0)
                layer.linear_attn.dt_bias.normal_(0.0, 0.5)
    return model.to(device=device, dtype=dtype)


def rel(x, ref):
    x, ref = x.detach().double().cpu(), ref.detach().double().cpu()
    return ((x - ref).norm() / ref.norm()).item()


@pytest.fixture
def unpatched():
    fgt.unpatch()
    yield
    fgt.unpatch()


def run_both(fn):
    """fn() under transformers' torch path, then under flashgdn; the GDN calls of the second run are counted."""
    ref = fn()
    calls = []
    counting_patch(calls)
    try:
        got = fn()
    finally:
        fgt.unpatch()
    return ref, got, calls


def cache_kw(model, cache):
    # transformers 5.x renames past_key_values to cache (the old name warns, then goes in 5.40)
    import inspect

    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    return {name: cache, "use_cache": True}


def counting_patch(calls):
    """patch(), and count the GDN calls that reach flashgdn (to be sure the model ran flashgdn's kernels)."""
    import importlib

    fgt.patch(["qwen3_next"])
    mod = importlib.import_module(MODULE)
    for attr in fgt._NAMES:
        inner = getattr(mod, attr)
        setattr(mod, attr, lambda *a, _f=inner, _n=attr, **kw: (calls.append(_n), _f(*a, **kw))[1])


def check_model(device, dtype, tol, train=True):
    model = tiny_qwen3_next(device, dtype)
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(0, 96, (2, 70), generator=gen).to(device)  # 70 tokens: a full chunk of 64 plus a tail

    # prefill logits (no cache: the chunked kernel, two sequences)
    with torch.no_grad():
        ref, got, calls = run_both(lambda: model(ids).logits)
    assert calls.count("torch_chunk_gated_delta_rule") == 2, calls
    assert rel(got, ref) < tol, rel(got, ref)

    # cached greedy decode: prefill with a cache, then single-token steps (the recurrent kernel with the cached
    # state); flashgdn chooses the tokens, the reference is forced along the same ones
    def decode(forced=None):
        cache = transformers.DynamicCache(config=model.config)
        out = model(ids[:, :20], **cache_kw(model, cache))
        logits, toks = [out.logits[:, -1]], []
        for step in range(6):
            tok = logits[-1].argmax(-1, keepdim=True) if forced is None else forced[step]
            toks.append(tok)
            out = model(tok, **cache_kw(model, cache))
            logits.append(out.logits[:, -1])
        return torch.stack(logits, 1), toks

    with torch.no_grad():
        ref_logits, ref_toks = decode()
        calls = []
        counting_patch(calls)
        try:
            got_logits, got_toks = decode()
            # the reference forced along flashgdn's tokens, for bf16 where a near tie can flip an argmax
            fgt.unpatch()
            forced_logits, _ = decode(got_toks)
        finally:
            fgt.unpatch()
    assert calls.count("torch_chunk_gated_delta_rule") == 2 and calls.count("torch_recurrent_gated_delta_rule") == 12
    assert rel(got_logits, forced_logits) < tol, rel(got_logits, forced_logits)
    if dtype == torch.float32:
        assert all(torch.equal(a, b) for a, b in zip(got_toks, ref_toks))
        assert rel(got_logits, ref_logits) < tol

    if not train:
        return
    # one training step: the loss's gradient w.r.t. every parameter
    def grads(m):
        m.zero_grad(set_to_none=True)
        loss = m(ids, labels=ids).loss
        loss.backward()
        return loss.detach(), {n: p.grad.detach().clone() for n, p in m.named_parameters() if p.grad is not None}

    m_ref, m_got = model, copy.deepcopy(model)
    m_ref.train()
    m_got.train()
    loss_ref, g_ref = grads(m_ref)
    calls = []
    counting_patch(calls)
    try:
        loss_got, g_got = grads(m_got)
    finally:
        fgt.unpatch()
    assert calls.count("torch_chunk_gated_delta_rule") == 2
    assert rel(loss_got, loss_ref) < tol
    assert g_ref.keys() == g_got.keys()
    gdn = [n for n in g_ref if "linear_attn" in n]
    assert any("A_log" in n for n in gdn) and any("in_proj_qkvz" in n for n in gdn)
    for n in g_ref:
        assert rel(g_got[n], g_ref[n]) < tol * 10, (n, rel(g_got[n], g_ref[n]))


def test_qwen3_next_cpu(unpatched):
    check_model("cpu", torch.float32, 1e-5)


@pytest.mark.skipif(not cuda_ok(), reason="needs a CUDA GPU and flashgdn built with CUDA")
def test_qwen3_next_cuda(unpatched):
    check_model("cuda", torch.bfloat16, 3e-2, train=False)
    # training needs the CUDA backward: skip visibly in a build without it
    q = torch.randn(1, 64, 1, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(1, 64, 1, 128, device="cuda", dtype=torch.bfloat16)
    g, beta = -torch.rand(1, 64, 1, device="cuda"), torch.rand(1, 64, 1, device="cuda", dtype=torch.bfloat16)
    o, _ = flashgdn.chunk_gated_delta_rule(q, q.detach(), v, g, beta, use_qk_l2norm_in_kernel=True)
    try:
        o.sum().backward()
    except flashgdn.UnsupportedError as e:
        pytest.skip(f"CUDA training step: chunk_bwd is unsupported on CUDA in this build: {e}")
    check_model("cuda", torch.bfloat16, 3e-2, train=True)


def test_patch_covers_every_gdn_model_and_restores(unpatched):
    import importlib

    names = fgt.patch()
    assert MODULE in names and any("qwen3_5" in n for n in names)
    mod = importlib.import_module(MODULE)
    assert mod.torch_chunk_gated_delta_rule is fgt.chunk_gated_delta_rule
    assert fgt.is_patched()
    fgt.unpatch()
    assert mod.torch_chunk_gated_delta_rule is not fgt.chunk_gated_delta_rule
    with pytest.raises(ValueError, match="llama"):
        fgt.patch(["llama"])
