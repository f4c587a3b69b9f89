"""What the vLLM server runs with, each value with its provenance: :func:`resolve` merges
five sources, each returning ``{name: Provenanced}``, by :meth:`advisor.core.model.EngineInfo.merge`
(precedence config > cmdline > log > metrics > default):

1. the YAML that ``vllm serve --config`` takes (:mod:`advisor.sources.engine_config`, source
   "config");
2. the argv of the vLLM process (:mod:`advisor.sources.cmdline`; :mod:`advisor.sources.host`
   finds the process with psutil; source "cmdline");
3. start-up facts from the server's log, last run wins (:mod:`advisor.sources.logfacts`,
   source "log");
4. :func:`from_snapshot`: the labels of ``vllm:cache_config_info`` (source "metrics");
5. :func:`defaults`: vLLM's defaults for that version and hardware, via ``knobs`` (source
   "default"); the host's GPUs probed by :mod:`advisor.sources.host`, and the model's own
   facts from its ``config.json`` (:mod:`advisor.sources.modelfacts`).

Secrets never leave the sources: the command line and config keys are redacted before
anything is parsed or kept (:mod:`advisor.core.redact`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from advisor.core import defaults as vllm_defaults
from advisor.core import knobs, names, urls
from advisor.core.model import EngineInfo, LogEvent, Provenanced, Snapshot
from advisor.sources import http as http_src
from advisor.sources.cmdline import (
    from_cmdline,
)
from advisor.sources.engine_config import coerce_value, from_config_file
from advisor.sources.host import HOST_DETAIL
from advisor.sources.logfacts import from_log_events
from advisor.sources.modelfacts import model_facts, read_model_config

# --------------------------------------------------------------------------------------
# 4. metrics

_CACHE_LABELS = {
    "block_size": "block_size",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "enable_prefix_caching": "enable_prefix_caching",
    "kv_cache_memory_bytes": "kv_cache_memory_bytes",
    "num_gpu_blocks": "num_gpu_blocks",
    "num_gpu_blocks_override": "num_gpu_blocks_override",
    "kv_cache_size_tokens": "kv_cache_tokens",
    "kv_cache_max_concurrency": "max_concurrency",
    "cache_dtype": "kv_cache_dtype",
    "swap_space_bytes": "swap_space_bytes",
}
_INT_FACTS = frozenset({"num_gpu_blocks", "kv_cache_tokens", "swap_space_bytes", "engines"})
# cache_config_info's labels that are numbers: a label that is not a finite number from 0 to
# 1e18 (``"N/A"``, ``"abc"``, ``1e308``, ``-1``, ``nan``) leaves its fact unknown (issue 34 G6),
# and so does a knob's value outside the knob's type or bounds (``block_size="1000"``,
# ``gpu_memory_utilization="7"``), as a sidecar's knob series read from Prometheus is
_NUMERIC_CACHE = frozenset(set(_CACHE_LABELS.values()) - {"enable_prefix_caching", "kv_cache_dtype"})
MAX_LABEL_NUMBER = 1e18


def label_number(raw: Any) -> float | None:
    """A label's value as a reading: a finite number from 0 to 1e18, else None."""
    try:
        f = float(raw)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and 0 <= f <= MAX_LABEL_NUMBER else None


def _fact_value(key: str, raw: str) -> Any:
    v = coerce_value(key, raw)
    if isinstance(v, str) and key not in knobs.KNOBS:
        try:
            f = float(v)
        except ValueError:
            return v
        return int(f) if key in _INT_FACTS and f.is_integer() else f
    return v


def from_snapshot(snapshot: Snapshot) -> dict[str, Provenanced]:
    """Knobs and facts from one ``/metrics`` page (source "metrics"): the labels of
    ``vllm:cache_config_info`` (engine 0 when several), the ``model_name`` label ->
    ``served_model_name``, and the number of engines -> ``engines``."""
    out: dict[str, Provenanced] = {}
    infos = snapshot.info_labels(names.CACHE_CONFIG_INFO)
    if infos:
        infos.sort(key=lambda d: d.get(names.ENGINE_LABEL, ""))
        labels = infos[0]
        eng = labels.get(names.ENGINE_LABEL)
        detail = f"{names.CACHE_CONFIG_INFO}" + (f"{{engine={eng}}}" if eng is not None else "")
        for label, key in _CACHE_LABELS.items():
            if label in labels:
                val = _fact_value(key, labels[label])
                if val is not None and key in _NUMERIC_CACHE and label_number(val) is None:
                    continue  # not a reading: the fact stays unknown
                if val is not None and not knobs.in_range(key, val):
                    continue  # outside the knob's type or bounds (a block_size of 1000): unknown
                if key in _INT_FACTS and val is not None and not isinstance(val, int):
                    continue  # a count that is no whole number (num_gpu_blocks="0.5"): unknown
                if val is not None:
                    out[key] = Provenanced(val, "metrics", detail)
    models = snapshot.label_values(names.MODEL_LABEL)
    if models:
        out["served_model_name"] = Provenanced(",".join(models), "metrics", f"{names.MODEL_LABEL} label")
    engines = snapshot.label_values(names.ENGINE_LABEL)
    if engines:
        out["engines"] = Provenanced(len(engines), "metrics", f"{names.ENGINE_LABEL} label values")
    era = era_of(snapshot)
    if era is not None:
        out["vllm_era"] = Provenanced(era, "metrics", era_detail(snapshot))
    return out


# V0's last release line (V1 became the default in 0.8.0): its defaults stand for "a V0
# engine" when a page's names date it but nothing gives the version.
V0_ERA_VERSION = "0.7.3"


def _source_names(snapshot: Snapshot) -> set[str]:
    return {f.source_name or f.name for f in snapshot.families.values()}


def era_of(snapshot: Snapshot) -> str | None:
    """``"v0"`` when the page carries V0-only family names and no V1-only sign, ``"v1"``
    when it spells the KV gauge V1's way or has an ``engine`` label, else None."""
    src = _source_names(snapshot)
    v1 = names.KV_CACHE_USAGE in src or bool(snapshot.label_values(names.ENGINE_LABEL))
    if v1:
        return "v1"
    return "v0" if src & names.V0_ONLY_FAMILIES else None


def era_detail(snapshot: Snapshot) -> str:
    src = _source_names(snapshot)
    v0 = sorted(src & names.V0_ONLY_FAMILIES)
    if era_of(snapshot) == "v0":
        return "V0-only metric names on the page: " + ", ".join(v0[:3])
    return "V1 metric names on the page"


# --------------------------------------------------------------------------------------
# 5. defaults and the host


def defaults(
    version: str | None,
    device: str | None,
    gpu_memory_gib: float | None,
    gpu_name: str | None,
    usage: str = "api_server",
    *,
    world_size: int = 1,
    max_model_len: int | None = None,
    enable_chunked_prefill: bool | None = None,
) -> dict[str, Provenanced]:
    """vLLM's default of every knob for this version and hardware (source "default").
    ``device``: "cpu", a GPU name, "gpu"/"cuda", or None (unknown)."""
    dev = None if device is None else ("cpu" if device.lower() == "cpu" else "gpu")
    if not gpu_name and device is not None and dev == "gpu" and device.lower() not in ("gpu", "cuda"):
        gpu_name = device
    hw = vllm_defaults.Hardware(
        device=dev,
        gpu_name=gpu_name,
        gpu_memory_gib=gpu_memory_gib,
        world_size=world_size,
        usage=usage,
        max_model_len=max_model_len,
        enable_chunked_prefill=enable_chunked_prefill,
    )
    out: dict[str, Provenanced] = {}
    for name in knobs.KNOBS:
        p = vllm_defaults.default_for(name, version, hw)
        if p.value is not None:
            out[name] = p
    return out


# --------------------------------------------------------------------------------------
# 6. all together


def resolve(
    config_path: str | os.PathLike[str] | None = None,
    argv: Sequence[str] | None = None,
    events: Iterable[LogEvent] = (),
    snapshot: Snapshot | None = None,
    host: Mapping[str, Provenanced] | None = None,
    usage: str = "api_server",
) -> EngineInfo:
    """Everything known about the server, merged by precedence, with vLLM's defaults for
    its version and hardware filling the gaps. Facts: vllm_version, model, device ("cpu"
    or the GPU name, "gpu" when only that is known), gpu_count, gpu_memory_gib,
    kv_cache_tokens, max_concurrency. ``host``: :func:`host_facts` output (not probed here,
    so that callers and tests choose)."""
    parts: list[Mapping[str, Provenanced]] = []
    if config_path is not None:
        parts.append(from_config_file(config_path))
    if argv is not None:
        parts.append(from_cmdline(argv))
    parts.append(from_log_events(events))
    if snapshot is not None:
        parts.append(from_snapshot(snapshot))
    hostd = dict(host or {})
    known = EngineInfo.merge([*parts, hostd])
    model_part = _model_part(known)
    if model_part:
        parts.append(model_part)
        known = EngineInfo.merge([*parts, hostd])

    device_type = str(known.get("device_type") or known.get("device") or "").lower()
    gpu_name = known.get("gpu_name")
    gpu_count = known.get("gpu_count")
    if device_type == "cpu" or (not device_type and gpu_count == 0):
        device: str | None = "cpu"
    elif gpu_name:
        device = str(gpu_name)
    elif device_type:
        device = "gpu"
    else:
        device = None
    facts: dict[str, Provenanced] = {}
    if device is not None:
        src = known.values.get("device_type") or known.values.get("device") or known.values.get("gpu_name")
        facts["device"] = Provenanced(
            device, src.source if src else "default", src.detail if src else HOST_DETAIL
        )

    def _int(name: str, default: int = 1) -> int:
        try:
            return int(known.get(name, default))
        except (TypeError, ValueError):
            return default

    mml = known.get("max_model_len")
    version = known.get("vllm_version")
    era_version = None
    if not vllm_defaults.parse_version(version) and known.get("vllm_era") == "v0":
        era_version = V0_ERA_VERSION  # a dev build or no version, but V0's names: V0's defaults
    dflt = defaults(
        era_version or (version if vllm_defaults.parse_version(version) else None),
        device,
        known.get("gpu_memory_gib"),
        gpu_name,
        usage,
        world_size=_int("tensor_parallel_size") * _int("pipeline_parallel_size"),
        max_model_len=mml if isinstance(mml, int) else None,
        enable_chunked_prefill=known.get("enable_chunked_prefill"),
    )
    if era_version is not None:
        era = known.values["vllm_era"]
        dflt = {
            k: Provenanced(
                p.value,
                p.source,
                f"V0 era inferred ({era.detail}), defaults of vLLM {era_version}; {p.detail}",
            )
            for k, p in dflt.items()
        }
    return EngineInfo.merge([*parts, facts, hostd, dflt])


def _model_part(known: EngineInfo) -> dict[str, Provenanced]:
    """Model facts for :func:`resolve`: the config.json of a local model directory named on the
    command line or in the engine config when it can be read (source "config", so a recorded
    session keeps them; a path only seen in a log is not read: a replay on another machine
    must not depend on that machine's files), else the logged architecture."""
    arch = known.get("architecture")
    model = known.values.get("model")
    local = model is not None and model.source in ("cmdline", "config")
    read = read_model_config(model.value) if local and model is not None else None
    if read is not None:
        data, path = read
        facts = model_facts(data, source="config", detail=f"model {path}")
        if arch and "architecture" in facts:
            facts.pop("architecture")  # the log says what vLLM resolved
        return facts
    if arch:
        facts = model_facts(None, str(arch), source="log", detail="Resolved architecture line")
        facts.pop("architecture", None)
        return facts
    return {}


def from_api(base_url: str, timeout_s: float = 3.0, http: Any = None) -> dict[str, Provenanced]:
    """The server's own ``GET /version`` (vLLM's OpenAI server has it); ``{}`` when it cannot be
    read. Only the version: the API says nothing about scheduler knobs."""

    url = urls.join(urls.without_path_suffix(base_url), "/version")
    try:
        r = (http or http_src.Client()).get(url, timeout=timeout_s)
        v = r.json().get("version") if r.status_code == 200 else None
    except (http_src.FetchError, ValueError, AttributeError):
        return {}
    if not isinstance(v, str) or not v.strip():
        return {}
    return {"vllm_version": Provenanced(v.strip().removesuffix("+cpu"), "metrics", "GET /version")}
