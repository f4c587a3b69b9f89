"""The engine's settings from its start-up log lines (``non-default args``, the engine config
line, the KV cache size, ...): the last run in the log wins (source "log").
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from typing import Any

from advisor.core.model import LogEvent, Provenanced
from advisor.core.redact import REDACTED, redact_obj
from advisor.sources.engine_config import FACT_ALIASES, coerce_value, normalize_key

# --------------------------------------------------------------------------------------
# 3. log events

RUN_START_FACTS = ("vllm_version", "non_default_args")


def _startup_facts(ev: LogEvent) -> list[tuple[str, Any]]:
    f = ev.fields or {}
    out: list[tuple[str, Any]] = []
    if "fact" in f:
        out.append((str(f["fact"]), f.get("value")))
    for extra in f.get("also") or ():
        if isinstance(extra, Mapping) and "fact" in extra:
            out.append((str(extra["fact"]), extra.get("value")))
    return out


def split_at_restarts(events: Iterable[LogEvent]) -> list[list[LogEvent]]:
    """Events split into server runs: a new run starts when a line whose own fact is one a
    run prints once (the version banner, ``non-default args``) appears again; facts carried
    in ``also`` (the engine config line repeats the version) do not count. Events before
    the first startup fact belong to the first run."""
    runs: list[list[LogEvent]] = [[]]
    seen: set[str] = set()
    for ev in events:
        if ev.kind == "startup":
            primary = (ev.fields or {}).get("fact")
            facts = {str(primary)} & set(RUN_START_FACTS)
            if facts & seen:
                runs.append([])
                seen = set()
            seen |= facts
        runs[-1].append(ev)
    return [r for r in runs if r] or [[]]


def _parse_dict(value: Any) -> dict[str, Any] | None:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str):
        try:
            v = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return None
        return dict(v) if isinstance(v, dict) else None
    return None


def _flatten_scalar(value: Any) -> Any:
    if isinstance(value, list | tuple) and all(isinstance(x, str) for x in value):
        return ",".join(value)
    return value


# Knobs whose engine config line is one engine's view, not the server's: under data parallelism
# each engine core prints its own config (vLLM 0.25, `--data-parallel-size 2`: the line of
# "(EngineCore_DP0 ...)" says data_parallel_size=1), so the user's argument stands.
ARGS_OVER_CONFIG_LINE = ("data_parallel_size",)


def from_log_events(events: Iterable[LogEvent]) -> dict[str, Provenanced]:
    """Knobs and facts from the startup lines of the LAST run in the log (source "log").

    ``non_default_args`` gives the user's arguments (secrets redacted); ``engine_config``
    and the single facts (``max_num_batched_tokens`` from "Chunked prefill is enabled
    with ...", ``kv_cache_tokens``, ``max_concurrency``, ``num_gpu_blocks``, ``vllm_version``,
    ``model``) give what the engine resolved and win over the former."""
    runs = split_at_restarts(events)
    last = runs[-1]
    args: dict[str, Provenanced] = {}
    resolved: dict[str, Provenanced] = {}
    for ev in last:
        if ev.kind != "startup":
            continue
        for fact, value in _startup_facts(ev):
            if fact == "non_default_args":
                d = _parse_dict(value)
                if d is None:
                    continue
                for k, v in redact_obj(d).items():
                    key = FACT_ALIASES.get(normalize_key(str(k)), normalize_key(str(k)))
                    val = v if v == REDACTED else coerce_value(key, _flatten_scalar(v))
                    if val is not None:
                        args[key] = Provenanced(val, "log", "non-default args")
            elif fact == "engine_config":
                d = _parse_dict(value)
                if d is None:
                    continue
                for k, v in redact_obj(d).items():
                    key = FACT_ALIASES.get(str(k), str(k))
                    if key == "device_config":
                        key = "device_type"
                    if isinstance(v, Mapping | list | tuple) and key != "served_model_name":
                        continue
                    val = v if v == REDACTED else coerce_value(key, _flatten_scalar(v))
                    if val is not None:
                        resolved[key] = Provenanced(val, "log", "engine config line")
            else:
                key = FACT_ALIASES.get(fact, fact)
                if isinstance(value, Mapping | list | tuple):
                    continue
                val = coerce_value(key, value)
                if val is None:
                    continue
                resolved[key] = Provenanced(val, "log", ev.line.strip()[:200] if ev.line else fact)
                if key == "max_num_batched_tokens" and "chunked prefill" in (ev.line or "").lower():
                    resolved.setdefault(
                        "enable_chunked_prefill", Provenanced(True, "log", "chunked prefill line")
                    )
    out = dict(args)
    out.update(resolved)
    for name in ARGS_OVER_CONFIG_LINE:
        if name in args:
            out[name] = args[name]
    for name, graph_fact in _graph_facts(out.get("compilation_config")).items():
        if name == "max_cudagraph_capture_size" and name not in args:
            out[name] = graph_fact  # the size vLLM resolved, over what the config line's keys said
        else:
            out.setdefault(name, graph_fact)
    spec = (
        _SPEC_TOKENS_RE.search(str(out["speculative_config"].value)) if "speculative_config" in out else None
    )
    if spec is not None and "num_speculative_tokens" not in args:
        # SpeculativeConfig.__repr__ (0.32): SpeculativeConfig(method='ngram', model=None, num_spec_tokens=5)
        out["num_speculative_tokens"] = Provenanced(
            int(spec.group(1)), "log", "engine config line (speculative_config)"
        )
    free = _free_after_startup(out)
    if free is not None:
        out.setdefault("gpu_memory_free_gib", free)
    if "model" in out and out["model"].value == REDACTED:
        del out["model"]
    return out


_SPEC_TOKENS_RE = re.compile(r"\bnum_spec(?:ulative)?_tokens=(\d+)")
_CAPTURE_SIZE_RE = re.compile(r"""["']max_cudagraph_capture_size["']:\s*(\d+)""")


# the config line's repr (0.12+: 'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>) or
# its JSON (0.11: "cudagraph_mode":[2,1], the sizes in descending order)
_GRAPH_MODE_RE = re.compile(
    r"""["']cudagraph_mode["']:\s*(?:<CUDAGraphMode\.(\w+)|\[\s*(\d)\s*,\s*(\d)\s*\]|(\d)\b)"""
)
_GRAPH_SIZES_RE = re.compile(r"""["']cudagraph_capture_sizes["']:\s*\[([\d,\s]*)\]""")
_MODE_NAMES = {
    "0": "NONE",
    "1": "PIECEWISE",
    "2": "FULL",
    "2,0": "FULL_DECODE_ONLY",
    "2,1": "FULL_AND_PIECEWISE",
}


def _graph_facts(config: Provenanced | None) -> dict[str, Provenanced]:
    """How vLLM captures CUDA graphs, from the engine config line's ``compilation_config={...
    'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, ... 'cudagraph_capture_sizes':
    [1, 2, 4, 8, 16, 24, 32], 'max_cudagraph_capture_size': 32 ...}``: ``cudagraph_mode`` (the
    mode's name), ``cudagraph_capture_sizes`` (the sizes, comma-separated) and
    ``max_cudagraph_capture_size`` (the largest batch captured, 0.12+; 0 where nothing is: eager
    mode, a CPU server); what the line does not say is left out."""
    if config is None:
        return {}
    text, out = str(config.value), {}
    where = "engine config line (compilation_config)"
    largest = _CAPTURE_SIZE_RE.search(text)
    if largest is not None:
        out["max_cudagraph_capture_size"] = Provenanced(int(largest.group(1)), "log", where)
    mode = _GRAPH_MODE_RE.search(text)
    if mode is not None:
        name, decode, mixed, single = mode.groups()
        name = name or _MODE_NAMES.get(f"{decode},{mixed}" if decode else single or "")
        if name:
            out["cudagraph_mode"] = Provenanced(name, "log", where)
    sizes = _GRAPH_SIZES_RE.search(text)
    if sizes is not None:
        listed = [x.strip() for x in sizes.group(1).split(",") if x.strip()]
        out["cudagraph_capture_sizes"] = Provenanced(",".join(listed), "log", where)
    return out


def _gib_of(facts: Mapping[str, Provenanced], name: str) -> float | None:
    p = facts.get(name)
    if p is None or isinstance(p.value, bool):
        return None
    try:
        return float(p.value)
    except (TypeError, ValueError):
        return None


def _free_after_startup(facts: Mapping[str, Provenanced]) -> Provenanced | None:
    """The device memory left free once the engine started, from its start-up lines: the KV
    size vLLM (0.29+) says would fill the device less the KV cache in use; else the initial free
    memory less the weights, the KV cache and the CUDA graphs (activations not counted: their
    peak is not logged there). None when the log does not say enough."""
    kv = _gib_of(facts, "available_kv_cache_memory_gib")
    full = _gib_of(facts, "suggested_kv_cache_memory_bytes")
    if kv is not None and full is not None:
        room = max(0.0, full / 2**30 - kv)
        detail = f"log: --kv-cache-memory={full:.0f} fills the device, {kv:g} GiB of KV cache in use"
        return Provenanced(round(room, 2), "log", detail)
    init = _gib_of(facts, "initial_free_memory_gib")
    weights = _gib_of(facts, "model_weights_gib")
    if kv is None or init is None or weights is None:
        return None
    graphs = _gib_of(facts, "cudagraph_memory_gib") or 0.0
    room = max(0.0, init - weights - kv - graphs)
    detail = (
        f"log: initial free memory {init:g} GiB - weights {weights:g} GiB - KV cache {kv:g} GiB"
        f" - CUDA graphs {graphs:g} GiB (activations not counted)"
    )
    return Provenanced(round(room, 2), "log", detail)
