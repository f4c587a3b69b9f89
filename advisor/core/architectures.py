"""Facts of model families from vLLM's model registry that a knob depends on: which
architectures are mixture-of-experts, and which support encoder data parallelism
(``--mm-encoder-tp-mode data``), by vLLM version.
"""

from __future__ import annotations

import re

# --------------------------------------------------------------------------------------
# model families (vLLM's model registry)

ENCODER_TP_DATA_SINCE = "0.32.0"
ENCODER_TP_DATA_ARCHITECTURES: frozenset[str] = frozenset(
    {
        # vLLM 0.32.0: the architectures of vllm/model_executor/models/registry.py whose class
        # (or a base class) sets ``supports_encoder_tp_data = True`` (read from the source, base
        # classes followed): the families where --mm-encoder-tp-mode data is honoured; for the
        # others vLLM logs a warning and keeps "weights".
        "CohereCompassForConditionalGeneration",
        "ColQwen3",
        "ColQwen3_5",
        "Cosmos3EdgeForConditionalGeneration",
        "Cosmos3ForConditionalGeneration",
        "DotsOCRForCausalLM",
        "Eagle2_5_VLForConditionalGeneration",
        "Exaone4_5_ForConditionalGeneration",
        "Glm4vForConditionalGeneration",
        "Glm4vMoeForConditionalGeneration",
        "GlmOcrForConditionalGeneration",
        "H2OVLChatModel",
        "InternS1ProForConditionalGeneration",
        "InternS2MobiusForConditionalGeneration",
        "InternS2PreviewForConditionalGeneration",
        "InternVLChatModel",
        "IsaacForConditionalGeneration",
        "JinaVLForRanking",
        "KimiK25ForConditionalGeneration",
        "KimiVLForConditionalGeneration",
        "Llama4ForConditionalGeneration",
        "MiniCPMO",
        "MiniCPMV",
        "MiniCPMV4_6ForConditionalGeneration",
        "MiniCPMV4_7ForConditionalGeneration",
        "NVLM_D",
        "OpenCUAForConditionalGeneration",
        "OpsColQwen3Model",
        "QianfanOCRForConditionalGeneration",
        "Qwen2VLForConditionalGeneration",
        "Qwen2_5_VLForConditionalGeneration",
        "Qwen3VLForConditionalGeneration",
        "Qwen3VLMoeForConditionalGeneration",
        "Qwen3VLNemotronEmbedModel",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Step3VLForConditionalGeneration",
        "Step3p7ForConditionalGeneration",
        "StepVLForConditionalGeneration",
    }
)

# Architecture names of mixture-of-experts families, for when only the name is known (the
# "Resolved architecture" log line); a readable config.json (expert counts) wins over this.
_MOE_ARCH_RE = re.compile(
    r"moe|mixtral|deepseekv[23]|deepseek_v[23]|deepseekv32|llama4|gptoss|dbrx|jamba|arctic|"
    r"kimik2|kimi_k2|kimik25|minimax|grok",
    re.IGNORECASE,
)


def architecture_is_moe(architecture: str) -> bool:
    """Whether an architecture name is a mixture-of-experts family (by name only)."""
    return bool(_MOE_ARCH_RE.search(architecture or ""))


def supports_encoder_tp_data(architecture: str) -> bool:
    """Whether vLLM (0.32.0) honours ``--mm-encoder-tp-mode data`` for this architecture."""
    return architecture in ENCODER_TP_DATA_ARCHITECTURES
