"""flashgdn.mixer_decode against transformers' Qwen3-Next GatedDeltaNet decode step, built from the layer's own
pieces: its projections and `fix_query_key_value_ordering`, a causal conv1d update with SiLU (the conv state in
transformers' [B, C, Kc] layout), its gate formula, `torch_recurrent_gated_delta_rule` with the in-kernel l2norm,
and its `Qwen3NextRMSNormGated`. Several decode steps in a row, so the conv and recurrent states carry; GQA 2
and 3; fp32 on the CPU, bf16 on CUDA (vLLM's V-major bf16 pool and SGLang's conv layout as strided views)."""

import pytest

import flashgdn
from conftest import cuda_ok, torch

transformers = pytest.importorskip("transformers", reason="transformers not installed (scripts/setup.sh installs it)")
mq = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")


def layer_of(r, seed=0):
    from transformers import Qwen3NextConfig

    cfg = Qwen3NextConfig(hidden_size=64, linear_num_key_heads=2, linear_num_value_heads=2 * r, linear_key_head_dim=128,
                          linear_value_head_dim=128, linear_conv_kernel_dim=4, num_hidden_layers=1,
                          layer_types=["linear_attention"])
    torch.manual_seed(seed)
    layer = mq.Qwen3NextGatedDeltaNet(cfg, layer_idx=0)
    with torch.no_grad():
        layer.A_log.uniform_(-1.0, 1.0)
        layer.dt_bias.normal_(0.0, 0.5)
        layer.norm.weight.uniform_(0.5, 1.5)
    return layer


def reference_step(layer, h, conv_state, state):
    """One decode token of transformers' layer (everything up to out_proj). conv_state [B, C, Kc] and state
    [B, HV, K, V] fp32 are updated in place."""
    qkvz, ba = layer.in_proj_qkvz(h), layer.in_proj_ba(h)
    q, k, v, z, b, a = layer.fix_query_key_value_ordering(qkvz, ba)
    x = torch.cat([t.reshape(t.shape[0], t.shape[1], -1) for t in (q, k, v)], dim=-1)  # [B, 1, C]
    conv_state.copy_(torch.cat([conv_state[:, :, 1:], x.transpose(1, 2).to(conv_state.dtype)], dim=-1))
    w = layer.conv1d.weight.squeeze(1)  # [C, Kc]
    y = torch.nn.functional.silu((conv_state.float() * w.float()).sum(-1)).to(x.dtype)[:, None]  # [B, 1, C]
    kd, vd = layer.key_dim, layer.value_dim
    q, k, v = torch.split(y, [kd, kd, vd], dim=-1)
    q = q.reshape(q.shape[0], 1, -1, layer.head_k_dim)
    k = k.reshape(k.shape[0], 1, -1, layer.head_k_dim)
    v = v.reshape(v.shape[0], 1, -1, layer.head_v_dim)
    r = layer.num_v_heads // layer.num_k_heads  # value head h reads key head h // r (repeat_interleave)
    q, k = q.repeat_interleave(r, dim=2), k.repeat_interleave(r, dim=2)
    beta = b.sigmoid()
    g = -layer.A_log.float().exp() * torch.nn.functional.softplus(a.float() + layer.dt_bias)
    o, s = mq.torch_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=state, output_final_state=True,
                                               use_qk_l2norm_in_kernel=True)
    state.copy_(s)
    zz = z.reshape(-1, z.shape[-1])
    out = layer.norm(o.reshape(-1, o.shape[-1]).to(zz.dtype), zz).reshape(z.shape)
    return x, z, a, b, out


def run(device, dtype, r, steps=3, B=3, v_major=False, pool_dtype=None):
    layer = layer_of(r).to(device=device, dtype=dtype)
    C, Kc, HV = layer.conv_dim, layer.conv_kernel_size, layer.num_v_heads
    torch.manual_seed(7)
    conv_ref = torch.randn(B, C, Kc, device=device, dtype=dtype)
    state_ref = 0.1 * torch.randn(B, HV, 128, 128, device=device, dtype=torch.float32)
    # flashgdn's copies: slot n + 1 holds row n (slot 0 is vLLM's null block); SGLang-style [slots, C, Kc - 1].
    conv_pool = torch.zeros(B + 1, C, Kc - 1, device=device, dtype=dtype)
    conv_pool[1:] = conv_ref[:, :, 1:]
    pool = torch.zeros(B + 1, HV, 128, 128, device=device, dtype=pool_dtype or torch.float32)
    pool[1:] = state_ref.transpose(-1, -2) if v_major else state_ref
    slots = torch.arange(1, B + 1, device=device, dtype=torch.int32)
    for step in range(steps):
        h = torch.randn(B, 1, layer.hidden_size, device=device, dtype=dtype)
        with torch.no_grad():
            x, z, a, b, want = reference_step(layer, h, conv_ref, state_ref)
            got = flashgdn.mixer_decode(
                x, z, a, b, conv_weight=layer.conv1d.weight.squeeze(1), conv_state=conv_pool, state_pool=pool,
                A_log=layer.A_log, dt_bias=layer.dt_bias, norm_weight=layer.norm.weight, num_k_heads=layer.num_k_heads,
                head_k_dim=layer.head_k_dim, state_indices=slots, null_slot_is_invalid=True, norm_eps=layer.norm.variance_epsilon,
                state_v_first=v_major)
        yield step, got, want, conv_pool[1:], conv_ref[:, :, 1:], (pool[1:].transpose(-1, -2) if v_major else pool[1:]), state_ref


def rel(x, ref):
    x, ref = x.detach().double().cpu(), ref.detach().double().cpu()
    return ((x - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("r", [2, 3])
def test_mixer_decode_matches_transformers_cpu(r):
    for step, got, want, conv, conv_want, st, st_want in run("cpu", torch.float32, r):
        assert rel(got, want) < 1e-5, step
        assert torch.equal(conv, conv_want), step
        assert rel(st, st_want) < 1e-5, step


@pytest.mark.skipif(not cuda_ok(), reason="needs a CUDA GPU and flashgdn built with CUDA")
@pytest.mark.parametrize("v_major", [False, True])
@pytest.mark.parametrize("split", [0, 1, 2, 4])  # exec.mixer_split: the plan's choice, then each V split forced
def test_mixer_decode_matches_transformers_cuda(v_major, split):
    with flashgdn.exec_options(mixer_split=split):
        for step, got, want, conv, conv_want, st, st_want in run("cuda", torch.bfloat16, 2, v_major=v_major):
            assert rel(got, want) < 2e-2, step
            assert torch.equal(conv, conv_want), step
            assert rel(st, st_want) < 1e-2, step


@pytest.mark.skipif(not cuda_ok(), reason="needs a CUDA GPU and flashgdn built with CUDA")
@pytest.mark.parametrize("pool", ["bfloat16", "float32"])
def test_mixer_decode_pipe_kernel_matches_transformers_cuda(pool):
    # exec.mixer_kernel=2: the pipe kernel (one token per row on a K-major pool); the reference keeps its state in
    # fp32, a bf16 pool rounds every step
    with flashgdn.exec_options(mixer_kernel=2):
        for step, got, want, conv, conv_want, st, st_want in run("cuda", torch.bfloat16, 2,
                                                                 pool_dtype=getattr(torch, pool)):
            assert rel(got, want) < 2e-2, step
            assert torch.equal(conv, conv_want), step
            assert rel(st, st_want) < (2e-2 if pool == "bfloat16" else 1e-2), step


@pytest.mark.skipif(not cuda_ok(), reason="needs a CUDA GPU and flashgdn built with CUDA")
def test_mixer_decode_split_too_wide_for_a_cluster_is_rejected():
    with flashgdn.exec_options(mixer_split=4), pytest.raises(flashgdn.UnsupportedError, match="exec.mixer_split"):
        next(run("cuda", torch.bfloat16, 3))  # 3 value heads per key head x 4 CTAs > 8


def test_mixer_decode_sentinel_row_writes_nothing():
    layer = layer_of(2)
    B, C, Kc, HV = 2, layer.conv_dim, layer.conv_kernel_size, layer.num_v_heads
    x, z = torch.randn(B, 1, C), torch.randn(B, 1, HV, 128)
    a, b = torch.randn(B, 1, HV), torch.randn(B, 1, HV)
    conv, pool = torch.randn(3, C, Kc - 1), torch.randn(3, HV, 128, 128)
    conv0, pool0 = conv.clone(), pool.clone()
    with torch.no_grad():
        out = flashgdn.mixer_decode(x, z, a, b, conv_weight=layer.conv1d.weight.squeeze(1), conv_state=conv,
                                    state_pool=pool, A_log=layer.A_log, dt_bias=layer.dt_bias,
                                    norm_weight=layer.norm.weight, num_k_heads=2, head_k_dim=128,
                                    state_indices=torch.tensor([-1, 0], dtype=torch.int32), null_slot_is_invalid=True)
    assert torch.equal(out, torch.zeros_like(out))
    assert torch.equal(conv, conv0) and torch.equal(pool, pool0)
    with torch.no_grad(), pytest.raises(flashgdn.InvalidArgumentError, match="x: expected C"):
        flashgdn.mixer_decode(x[..., 1:], z, a, b, conv_weight=layer.conv1d.weight.squeeze(1), conv_state=conv,
                              state_pool=pool, A_log=layer.A_log, norm_weight=layer.norm.weight, num_k_heads=2,
                              head_k_dim=128)
