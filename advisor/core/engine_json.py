"""An :class:`EngineInfo` as JSON (``engine.json`` of a session, the diagnosis's ``engine``)
and back: knobs and other facts apart, each with its provenance, keys sorted, JSON-safe."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from advisor.core import knobs
from advisor.core.model import EngineInfo, Provenanced
from advisor.core.redact import REDACTED


class EngineJsonError(ValueError):
    """A malformed engine document; the message names the part."""


_TOP_FACTS = ("vllm_version", "model", "served_model_name", "device", "gpu_count", "gpu_memory_gib")


def _json_safe(v: Any) -> Any:
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        return v if v == v and v not in (float("inf"), float("-inf")) else str(v)
    if isinstance(v, Mapping):
        return {str(k): _json_safe(x) for k, x in v.items()}
    if isinstance(v, list | tuple | set):
        return [_json_safe(x) for x in v]
    return str(v)


def to_json(info: EngineInfo) -> dict[str, Any]:
    """``{"knobs": {name: {"value", "source", "detail"}}, "facts": {...}, "vllm_version": ...}``:
    knobs (names in ``knobs.KNOBS``) and other facts apart, keys sorted, JSON-safe."""
    kn: dict[str, Any] = {}
    facts: dict[str, Any] = {}
    for name in sorted(info.values):
        p = info.values[name]
        entry = {"value": _json_safe(p.value), "source": p.source, "detail": p.detail}
        (kn if name in knobs.KNOBS else facts)[name] = entry
    out: dict[str, Any] = {"knobs": kn, "facts": facts}
    for f in _TOP_FACTS:
        out[f] = _json_safe(info.get(f))
    return out


def from_json(data: Mapping[str, Any]) -> EngineInfo:
    """The inverse of :func:`to_json` (an ``engine.json`` of a recorded session).
    Raises EngineJsonError on a malformed document."""
    if not isinstance(data, Mapping):
        raise EngineJsonError("engine JSON must be an object")
    values: dict[str, Provenanced] = {}
    for section in ("knobs", "facts"):
        sec = data.get(section)
        if sec is None:
            continue
        if not isinstance(sec, Mapping):
            raise EngineJsonError(f"engine JSON: {section!r} must be an object")
        for name, entry in sec.items():
            if entry == REDACTED:  # a secret-named entry (--api-key) redacted whole when written
                values[str(name)] = Provenanced(REDACTED, "cmdline", "redacted")
                continue
            if not isinstance(entry, Mapping) or "value" not in entry:
                raise EngineJsonError(f"engine JSON: {section}.{name} needs a 'value'")
            values[str(name)] = Provenanced(
                entry["value"], str(entry.get("source", "default")), str(entry.get("detail", ""))
            )
    return EngineInfo(values)
