#!/usr/bin/env python3
"""Build a tiny Llama-architecture model directory for vLLM --load-format dummy.

No weights are written: vLLM fills them with random values (--load-format dummy).
What is written:
  config.json              LlamaForCausalLM, 4 layers, hidden 512, 8 heads / 4 kv heads
  generation_config.json
  tokenizer.json           byte-level BPE trained locally on Python's stdlib sources
  tokenizer_config.json    PreTrainedTokenizerFast, bos/eos/pad/unk + tiny chat template
  special_tokens_map.json

Usage: python build_tiny_model.py OUT_DIR [--vocab 8192] [--max-files 400] [--shape qwen3-moe]

--shape qwen3-moe writes a Qwen3MoeForCausalLM config instead (same tokenizer, attention and
layers; every MLP an MoE block of --experts experts, --experts-per-tok routed per token): a
tiny MoE-shaped model for the expert-parallelism rules.
Needs only the `tokenizers` package (installed with vllm). Deterministic for a
given Python stdlib (files are sorted, training is single-pass BPE).

Copied from the CPU lab (shared/vllm-lab). Why this shape: no model can be
downloaded here, so the architecture is a plain Llama (which vLLM's CPU backend
supports) small enough to serve fast on 2 cores (20.2 M params, fp32), with a real
tokenizer so `vllm bench serve --dataset-name random` can build prompts of exact
lengths. torch_dtype says bfloat16 (Llama's default) but the harness serves with
--dtype float32: bf16 on AVX2 falls back to torch linear and is ~2x slower.
"""

import argparse
import glob
import json
import os
import sys
import sysconfig
from collections.abc import Iterator


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--max-files", type=int, default=400)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=1408)
    ap.add_argument("--max-pos", type=int, default=4096)
    ap.add_argument(
        "--shape",
        choices=("llama", "qwen3-moe"),
        default="llama",
        help="llama (dense); qwen3-moe: Qwen3MoeForCausalLM, --experts experts of "
        "--moe-intermediate, --experts-per-tok routed per token",
    )
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--experts-per-tok", type=int, default=2)
    ap.add_argument("--moe-intermediate", type=int, default=256)
    args = ap.parse_args()

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    os.makedirs(args.out, exist_ok=True)

    # ---- training corpus: Python's own stdlib sources (always present) ----
    stdlib = sysconfig.get_paths()["stdlib"]
    files = sorted(glob.glob(os.path.join(stdlib, "*.py")))[: args.max_files]
    if not files:
        print(f"no .py files under {stdlib}", file=sys.stderr)
        return 1

    def corpus() -> Iterator[str]:
        for f in files:
            try:
                with open(f, encoding="utf-8", errors="ignore") as fh:
                    yield fh.read()
            except OSError:
                continue

    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=args.vocab,
        min_frequency=2,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer, length=len(files))
    bos_id = tok.token_to_id("<s>")
    # prepend BOS like Llama tokenizers do
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos_id)]
    )
    tok.save(os.path.join(args.out, "tokenizer.json"))
    vocab_size = tok.get_vocab_size()
    # round vocab up to a multiple of 64 for the embedding (extra rows are unused)
    model_vocab = (vocab_size + 63) // 64 * 64

    chat_template = (
        "{% for m in messages %}{{ '<s>' + m['role'] + ': ' + m['content'] + '\\n' }}"
        "{% endfor %}{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
    )
    tok_cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": args.max_pos,
        "chat_template": chat_template,
    }
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as fh:
        json.dump(tok_cfg, fh, indent=2)
    with open(os.path.join(args.out, "special_tokens_map.json"), "w") as fh:
        json.dump(
            {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"},
            fh,
            indent=2,
        )

    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": model_vocab,
        "hidden_size": args.hidden,
        "intermediate_size": args.intermediate,
        "num_hidden_layers": args.layers,
        "num_attention_heads": args.heads,
        "num_key_value_heads": args.kv_heads,
        "head_dim": args.hidden // args.heads,
        "hidden_act": "silu",
        "max_position_embeddings": args.max_pos,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "initializer_range": 0.02,
        "bos_token_id": bos_id,
        "eos_token_id": tok.token_to_id("</s>"),
        "pad_token_id": tok.token_to_id("<pad>"),
        "torch_dtype": "bfloat16",
        "use_cache": True,
    }
    if args.shape == "qwen3-moe":
        config.update(
            {
                "architectures": ["Qwen3MoeForCausalLM"],
                "model_type": "qwen3_moe",
                "num_experts": args.experts,
                "num_experts_per_tok": args.experts_per_tok,
                "moe_intermediate_size": args.moe_intermediate,
                "decoder_sparse_step": 1,
                "mlp_only_layers": [],
                "norm_topk_prob": True,
                "output_router_logits": False,
                "router_aux_loss_coef": 0.001,
            }
        )
        for k in ("mlp_bias", "attention_bias"):
            config.pop(k, None)
    with open(os.path.join(args.out, "config.json"), "w") as fh:
        json.dump(config, fh, indent=2)
    with open(os.path.join(args.out, "generation_config.json"), "w") as fh:
        json.dump(
            {
                "bos_token_id": config["bos_token_id"],
                "eos_token_id": config["eos_token_id"],
                "pad_token_id": config["pad_token_id"],
            },
            fh,
            indent=2,
        )

    mlp = (
        3 * args.hidden * args.moe_intermediate * args.experts + args.hidden * args.experts
        if args.shape == "qwen3-moe"
        else 3 * args.hidden * args.intermediate
    )
    n_params = 2 * model_vocab * args.hidden + args.layers * (
        2 * args.hidden * args.hidden
        + 2 * args.hidden * (args.hidden // args.heads) * args.kv_heads
        + mlp
        + 2 * args.hidden
    )
    enc = tok.encode("def hello_world():\n    print('hello')\n")
    print(
        json.dumps(
            {
                "out": args.out,
                "train_files": len(files),
                "tokenizer_vocab": vocab_size,
                "model_vocab": model_vocab,
                "approx_params": n_params,
                "sample_ids": enc.ids[:16],
                "roundtrip": tok.decode(enc.ids, skip_special_tokens=True),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
