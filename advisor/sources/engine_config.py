"""The engine's arguments as vLLM spells them: a key normalised to its ``EngineArgs`` field name
(``--max-num-seqs``, ``max-num-seqs``, ``-tp``), a value coerced to the knob's type, and the
YAML that ``vllm serve --config`` takes (source "config"). Secret-named keys are redacted
before anything is kept.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from advisor.core import knobs, yamlsafe
from advisor.core.model import Provenanced
from advisor.core.redact import REDACTED, redact_obj


class EngineSourceError(ValueError):
    """A source could not be read (bad YAML, unreadable file): a clear message, never a crash."""


# --------------------------------------------------------------------------------------
# secrets


# --------------------------------------------------------------------------------------
# value normalisation


def normalize_key(key: str) -> str:
    """``--max-num-seqs`` / ``max-num-seqs`` / ``-tp`` -> the EngineArgs field name."""
    k = knobs.knob_for_flag(key)
    if k is not None:
        return k.name
    return key.strip().lstrip("-").replace("-", "_")


def coerce_value(name: str, value: Any) -> Any:
    """Known knobs get their type (bad values kept as given, never a crash); ``"None"`` -> None."""
    if name in knobs.KNOBS:
        try:
            return knobs.coerce(name, value)
        except ValueError:
            return value
    if isinstance(value, str):
        s = value.strip()
        if s in ("None", "null", ""):
            return None
        if s in ("True", "true"):
            return True
        if s in ("False", "false"):
            return False
    return value


# facts other sources call differently
FACT_ALIASES = {
    "max_seq_len": "max_model_len",
    "model_tag": "model",
    "kv_cache_size_tokens": "kv_cache_tokens",
    "kv_cache_max_concurrency": "max_concurrency",
    "cache_dtype": "kv_cache_dtype",
    "version": "vllm_version",
    "spec_tokens": "num_speculative_tokens",  # EngineArgs.spec_tokens (--spec-tokens, 0.22+)
}


# --------------------------------------------------------------------------------------
# 1. config file


def read_yaml_mapping(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The engine config's mapping, read by the one bounded YAML reader (core/yamlsafe.py)."""
    try:
        data = yamlsafe.load_file(path)
    except OSError as e:
        raise EngineSourceError(f"cannot read engine config {path}: {e.strerror or e}") from e
    except yamlsafe.YamlError as e:
        raise EngineSourceError(f"engine config {path} is not valid YAML: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise EngineSourceError(
            f"engine config {path} must be a mapping of engine arguments, got {type(data).__name__}"
        )
    return data


def config_values(data: Mapping[str, Any], source: str, detail: str) -> dict[str, Provenanced]:
    out: dict[str, Provenanced] = {}
    for raw_key, raw_val in redact_obj({str(k): v for k, v in data.items()}).items():
        key = normalize_key(raw_key)
        key = FACT_ALIASES.get(key, key)
        val = raw_val if raw_val == REDACTED else coerce_value(key, raw_val)
        out[key] = Provenanced(val, source, detail)
    return out


def from_config_file(path: str | os.PathLike[str]) -> dict[str, Provenanced]:
    """The YAML ``vllm serve --config`` takes (keys with dashes or underscores), source
    "config", detail = the path. Raises :class:`EngineSourceError` on a bad file."""
    return config_values(read_yaml_mapping(path), "config", str(path))
