"""Facts of the served model from its ``config.json``: MoE or dense, routed experts and experts
per token, a multimodal encoder, the architecture's support for encoder data parallelism.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from advisor.core import architectures
from advisor.core.model import Provenanced

# --------------------------------------------------------------------------------------
# 5b. model facts (MoE or dense, experts, multimodal encoder)

MODEL_CONFIG_MAX_BYTES = 4 * 2**20
_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
_EXPERTS_PER_TOKEN_KEYS = ("num_experts_per_tok", "num_experts_per_token", "moe_topk", "moe_k")
_TEXT_CONFIG_KEYS = ("text_config", "llm_config", "language_config", "thinker_config")
_ENCODER_KEYS = ("vision_config", "audio_config", "vision_tower", "visual", "vit_config")


def _expert_count(cfg: Mapping[str, Any]) -> int | None:
    for key in _EXPERT_KEYS:
        v = cfg.get(key)
        if isinstance(v, list) and v:  # some configs give one count per layer
            v = max((x for x in v if isinstance(x, int)), default=None)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def model_facts(
    config: Mapping[str, Any] | None = None,
    architecture: str | None = None,
    *,
    source: str = "config",
    detail: str = "model config.json",
) -> dict[str, Provenanced]:
    """What the advisor needs to know about the model, from its Hugging Face ``config.json``
    (a mapping) and/or its architecture name (the "Resolved architecture" log line).

    Facts: ``architecture``, ``model_is_moe`` (routed experts > 1, or an MoE family name when
    no config is readable), ``model_num_experts``, ``model_active_experts``,
    ``model_has_mm_encoder`` (a vision/audio sub-config, or a family vLLM knows as multimodal
    encoder-DP capable), ``mm_encoder_tp_data_supported`` (the architecture is one of
    :data:`advisor.knobs.ENCODER_TP_DATA_ARCHITECTURES`), and ``num_attention_heads`` /
    ``num_key_value_heads`` / ``num_layers`` of the language model. Pure; unknown facts are
    left out, never guessed as False from a missing config."""
    out: dict[str, Provenanced] = {}
    cfg = dict(config or {})
    archs = cfg.get("architectures")
    arch = architecture
    if not arch and isinstance(archs, list) and archs and isinstance(archs[0], str):
        arch = archs[0]
    if arch:
        out["architecture"] = Provenanced(arch, source, detail)
    text = cfg
    for key in _TEXT_CONFIG_KEYS:
        sub = cfg.get(key)
        if isinstance(sub, Mapping):
            text = dict(sub)
            break
    if cfg:
        experts = _expert_count(text) or _expert_count(cfg)
        out["model_is_moe"] = Provenanced(bool(experts and experts > 1), source, detail)
        if experts:
            out["model_num_experts"] = Provenanced(experts, source, detail)
        for key in _EXPERTS_PER_TOKEN_KEYS:
            v = text.get(key, cfg.get(key))
            if isinstance(v, int) and not isinstance(v, bool):
                out["model_active_experts"] = Provenanced(v, source, detail)
                break
        has_encoder = any(isinstance(cfg.get(k), Mapping) for k in _ENCODER_KEYS)
        if has_encoder or (arch and architectures.supports_encoder_tp_data(arch)):
            has_encoder = True
        out["model_has_mm_encoder"] = Provenanced(has_encoder, source, detail)
        for fact, keys in (
            ("num_attention_heads", ("num_attention_heads", "n_head")),
            ("num_key_value_heads", ("num_key_value_heads", "num_kv_heads")),
            ("num_layers", ("num_hidden_layers", "n_layer", "num_layers")),
        ):
            for key in keys:
                v = text.get(key)
                if isinstance(v, int) and not isinstance(v, bool):
                    out[fact] = Provenanced(v, source, detail)
                    break
    elif arch:
        moe = architectures.architecture_is_moe(arch)
        out["model_is_moe"] = Provenanced(
            moe, source, f"{detail}: {'an' if moe else 'not an'} MoE family by name"
        )
        if architectures.supports_encoder_tp_data(arch):
            out["model_has_mm_encoder"] = Provenanced(True, source, f"{detail}: a multimodal family")
    if arch:
        out["mm_encoder_tp_data_supported"] = Provenanced(
            architectures.supports_encoder_tp_data(arch),
            source,
            f"{detail}: vLLM {architectures.ENCODER_TP_DATA_SINCE} supports_encoder_tp_data",
        )
    return out


def read_model_config(model: str | os.PathLike[str] | None) -> tuple[dict[str, Any], str] | None:
    """The ``config.json`` of a model given as a local directory (a command-line or engine
    config ``model``), with its path; None for a hub id, a missing or unreadable file, or one
    that is not a JSON object (a model the advisor cannot see is no error)."""

    if not model or not isinstance(model, str | os.PathLike):
        return None
    path = Path(model) / "config.json"
    try:
        if not path.is_file() or path.stat().st_size > MODEL_CONFIG_MAX_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return (data, str(path)) if isinstance(data, dict) else None
