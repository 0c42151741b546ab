"""transformers' Qwen3-Next (or Qwen3.5, ...) with its Gated DeltaNet layers on flashgdn: one line,
`flashgdn.transformers.patch()`.

    python3 examples/qwen3_next_transformers.py                  # a tiny random-weight Qwen3-Next (offline)
    python3 examples/qwen3_next_transformers.py --model DIR      # a local checkpoint, e.g. Qwen3-Next-80B-A3B

It generates greedily with transformers' own GDN path and with flashgdn's, prints both continuations and the
largest logit difference of the prompt, and exits non-zero if the continuations differ (fp32 on the CPU; on a GPU
in bf16 a near tie can flip a token, which is reported, not failed).
"""

import argparse
import sys

import torch
import transformers

import flashgdn.transformers


def tiny_model():
    cfg = transformers.Qwen3NextConfig(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=128, linear_value_head_dim=128, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=32, shared_expert_intermediate_size=32,
        layer_types=["linear_attention", "full_attention", "linear_attention"])
    torch.manual_seed(0)
    return transformers.Qwen3NextForCausalLM(cfg)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="a local transformers checkpoint (default: a tiny random Qwen3-Next)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() and flashgdn.cuda_available() else "cpu")
    ap.add_argument("--new-tokens", type=int, default=12)
    args = ap.parse_args()

    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    if args.model:
        model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype)
    else:
        model = tiny_model().to(dtype)
    model = model.to(args.device).eval()
    ids = torch.randint(0, model.config.vocab_size, (1, 80), generator=torch.Generator().manual_seed(1))
    ids = ids.to(args.device)

    def run():
        with torch.no_grad():
            logits = model(ids).logits
            out = model.generate(ids, max_new_tokens=args.new_tokens, do_sample=False)
        return logits, out[0, ids.shape[1]:].tolist()

    ref_logits, ref_tokens = run()                      # transformers' own GDN kernels (FLA or torch)
    patched = flashgdn.transformers.patch()             # <- the one line
    got_logits, got_tokens = run()
    flashgdn.transformers.unpatch()

    print(f"patched: {', '.join(m.split('.')[2] for m in patched)}")
    print(f"transformers: {ref_tokens}")
    print(f"flashgdn:     {got_tokens}")
    err = ((got_logits - ref_logits).float().norm() / ref_logits.float().norm()).item()
    print(f"prompt logits: relative difference {err:.2e}")
    if got_tokens != ref_tokens and dtype == torch.float32:
        sys.exit("the continuations differ")


if __name__ == "__main__":
    main()
