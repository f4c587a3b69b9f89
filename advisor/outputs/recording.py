"""Recording rules: every signal whose PromQL twin can be grouped gets one, aggregated
``by (instance, job, model_name)`` (:func:`group_twin` rewrites the twins' ``sum(...)`` into
``sum by (...) (...)`` in one place). Twins that read the advisor's
``vllm_advisor_engine_knob`` (or ``_engine_fact``) through ``scalar()`` are joined ``on (instance)``: the scrape
configs shipped in ``deploy/`` give a vLLM server and its advisor the same ``instance``
label (the host or pod, without the port).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from advisor.core import names
from advisor.derive.signals import CATALOG, Signal, promql
from advisor.outputs.alert_config import GROUP_LABELS, RECORD_WINDOW, with_selector

# ---------------------------------------------------------------- grouping the PromQL twins
_AGG_RE = re.compile(r"\b(sum|avg|max|min|count)\s*(?:by\s*\(([^)]*)\)\s*)?\(")
_SCALAR_KNOB_RE = re.compile(
    r"scalar\((sum|avg|max|min) by \([^)]*\) \((("
    + re.escape(names.output_name("engine_knob"))
    + "|"
    + re.escape(names.output_name("engine_fact"))
    + r")\{[^}]*\})\)\)"
)


class UngroupableError(ValueError):
    """A PromQL twin that cannot be aggregated by the grouping labels."""


def group_twin(expr: str, by: Sequence[str] = GROUP_LABELS, join_on: str = "instance") -> str:
    """Rewrite every aggregation of ``expr`` to keep ``by`` labels.

    ``sum(x)`` -> ``sum by (instance, job, model_name) (x)``; ``sum by (le) (x)`` -> ``sum by
    (le, instance, job, model_name) (x)``; ``scalar(max(vllm_advisor_engine_knob{...}))`` (a
    knob of the server; the same for ``vllm_advisor_engine_fact``) -> ``on (instance) group_left max by (instance) (...)``. Raises
    :class:`UngroupableError` when a ``scalar()`` or ``vector()`` remains.
    """

    def agg(m: re.Match[str]) -> str:
        have = [x.strip() for x in (m.group(2) or "").split(",") if x.strip()]
        labels = list(dict.fromkeys([*have, *by]))
        return f"{m.group(1)} by ({', '.join(labels)}) ("

    out = _AGG_RE.sub(agg, expr)
    out = _SCALAR_KNOB_RE.sub(
        lambda m: f"on ({join_on}) group_left {m.group(1)} by ({join_on}) ({m.group(2)})", out
    )
    if re.search(r"\b(scalar|vector)\(", out):
        raise UngroupableError(f"cannot group {expr!r} by {', '.join(by)}")
    return out


RECORD_LEVEL = "instance_model"


def recording_name(sig: Signal, window: str = RECORD_WINDOW) -> str:
    """``level:metric:operations`` for a signal's recording rule, e.g.
    ``instance_model:vllm_preemptions:rate5m``, ``instance_model:vllm_ttft_seconds:p95_5m``."""
    name, twin = sig.name, sig.promql or ""
    m = re.match(r"^(.*)_(p\d\d)$", name)
    if sig.per == "config":
        metric, ops = name, "max"
    elif m:
        metric, ops = m.group(1), f"{m.group(2)}_{window}"
    elif name.endswith("_mean"):
        metric, ops = name[: -len("_mean")], f"mean{window}"
    elif name.endswith("_avg") and "avg_over_time" in twin:
        metric, ops = name[: -len("_avg")], f"avg{window}"
    elif name.endswith("_max") and "max_over_time" in twin:
        metric, ops = name[: -len("_max")], f"max{window}"
    elif "rate(" in twin and sig.unit in ("per_second", "tokens_per_second", "cores"):
        metric, ops = name.removesuffix("_per_second"), f"rate{window}"
    elif "increase(" in twin and sig.unit == "count":
        metric, ops = name, f"increase{window}"
    elif sig.unit == "ratio":
        metric, ops = name.removesuffix("_ratio"), f"ratio{window}"
    elif twin.startswith("count("):
        metric, ops = name, "count"
    else:
        metric, ops = name, window
    return f"{RECORD_LEVEL}:vllm_{metric}:{ops}"


def recording_rules(
    catalog: Mapping[str, Signal] | None = None, window: str = RECORD_WINDOW, vllm_selector: str | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """(recording rules, names of signals with a twin that cannot be grouped), catalog order.
    ``vllm_selector``: matchers added to every ``vllm:`` series the twins read."""
    rules: list[dict[str, Any]] = []
    skipped: list[str] = []
    seen: dict[str, str] = {}
    for sig in (catalog or CATALOG).values():
        twin = promql(sig, window)
        if twin is None:
            continue
        if vllm_selector:
            twin = with_selector(twin, vllm_selector)
        try:
            expr = group_twin(twin)
        except UngroupableError:
            skipped.append(sig.name)
            continue
        record = recording_name(sig, window)
        if record in seen:  # pragma: no cover - a naming collision is a bug in recording_name
            raise ValueError(f"recording rule {record} for both {seen[record]} and {sig.name}")
        seen[record] = sig.name
        rules.append({"record": record, "expr": expr, "labels": {"signal": sig.name}})
    return rules, skipped


def recording_for(signal: str) -> str:
    """The recording rule's name for ``signal`` (KeyError when it has none)."""
    rules, _ = recording_rules()
    for r in rules:
        if r["labels"]["signal"] == signal:
            return str(r["record"])
    raise KeyError(signal)
