"""The window's key series over time, for the page's charts: KV cache use, running and waiting
requests, preemptions/s, token throughput, and the TTFT and ITL quantiles, each point what the
window held at that page.

Plain values out (:class:`Charts`); the drawing is ``advisor/outputs/charts.py``. Gauges are
the value on each page (summed over engines, KV use averaged over them, as the signals read
them); rates and quantiles are over a short trailing span ending at each page (``span_s``: 30 s,
or three intervals where pages are further apart), rates from counter increases, quantiles from
histogram bucket increases (the PromQL ``histogram_quantile(rate(...[span]))`` meaning). Missing
is unknown: a page without the family, or a span in which no request finished, leaves a gap,
never a zero. Each line names the signal it resolves in time (``signal``) and, where the
performance model predicts it, the prediction's metric (``predicted``), so that the page can
draw a rule's thresholds and the predicted level beside the measured line.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from statistics import median

from advisor.core import names as n
from advisor.core.model import EngineInfo
from advisor.derive.window import Window

MAX_POINTS = 240  # per line: pages beyond this are thinned evenly (a 15-minute window at 1 s)
MIN_SPAN_S = 30.0  # the trailing span of a rate or a quantile point
SPAN_INTERVALS = 3  # ... or this many intervals, where pages are further apart


@dataclass(frozen=True)
class Line:
    """One series of a chart: (time, value) points, oldest first, gaps left out."""

    label: str
    points: tuple[tuple[float, float], ...]
    signal: str  # the signal this line resolves in time (advisor/derive/signals.py)
    predicted: str | None = None  # the performance model's metric for it (predict/perfmodel.py)


@dataclass(frozen=True)
class Level:
    """A horizontal line: a target, a limit of the engine, a rule's threshold, a prediction.
    A chart writes the value after the label, but for a limit (its label says it)."""

    label: str
    value: float
    kind: str  # target | limit | threshold | predicted


@dataclass(frozen=True)
class Chart:
    key: str  # kv | requests | preemptions | throughput | ttft | itl
    title: str
    signal: str  # the signal whose unit the axis is in (advisor/derive/signals.py CATALOG)
    lines: tuple[Line, ...]
    levels: tuple[Level, ...] = ()
    note: str = ""  # how each point is computed
    fixed_max: float | None = None  # the axis's top when the quantity has one (KV use: 100%)


@dataclass(frozen=True)
class Charts:
    """The window's charts over [t0, t1], with when vLLM could not be read and when it restarted."""

    t0: float
    t1: float
    charts: tuple[Chart, ...]
    outages: tuple[tuple[float, float], ...] = ()  # [start, end): vLLM could not be read
    restarts: tuple[float, ...] = ()  # pages taken just after an engine restart
    span_s: float = MIN_SPAN_S

    def chart(self, key: str) -> Chart | None:
        return next((c for c in self.charts if c.key == key), None)


def _thin(idx: list[int], limit: int = MAX_POINTS) -> list[int]:
    if len(idx) <= limit:
        return idx
    step = (len(idx) - 1) / (limit - 1)
    return [idx[round(i * step)] for i in range(limit)]


def charts(
    window: Window,
    engine: EngineInfo | None = None,
    targets: Mapping[str, float] | None = None,
    seconds: float | None = None,
) -> Charts:
    """The key series of the last ``seconds`` of ``window`` (None: all it holds). ``engine``
    gives the cap drawn on the running batch (max_num_seqs per engine); ``targets`` the TTFT
    and ITL p95 targets drawn on their charts."""
    targets = dict(targets or {})
    ts = window.times(seconds)
    outages = window.outages(seconds)
    t1 = max([*ts[-1:], *(o.t for o in outages[-1:])], default=window.now())
    t0 = ts[0] if ts else min((o.t for o in outages), default=t1)
    gaps = [b - a for a, b in pairwise(ts) if b > a]
    interval = median(gaps) if gaps else 0.0
    span = max(MIN_SPAN_S, SPAN_INTERVALS * interval)
    pick = _thin(list(range(len(ts))))

    def gauge(name: str, agg: str = "total") -> tuple[tuple[float, float], ...]:
        vals = dict(window.gauge_series(name, seconds, agg=agg))
        return tuple((ts[i], vals[ts[i]]) for i in pick if ts[i] in vals)

    picked = {ts[i] for i in pick}

    def rate(name: str) -> tuple[tuple[float, float], ...]:
        return tuple(window.trailing_rates(name, span, picked, seconds))

    def quantiles(name: str, qs: tuple[float, ...]) -> list[tuple[tuple[float, float], ...]]:
        """The quantiles ``qs`` from one set of bucket increases per point."""
        out: list[list[tuple[float, float]]] = [[] for _ in qs]
        for t, h in window.trailing_histograms(name, span, picked, seconds):
            if h.count <= 0:
                continue  # no request finished in the span: unknown, a gap
            for k, q in enumerate(qs):
                v = h.quantile(q)
                if v is not None:
                    out[k].append((t, v))
        return [tuple(x) for x in out]

    ttft50, ttft95 = quantiles(n.TTFT, (0.5, 0.95))
    itl50, itl95 = quantiles(n.ITL, (0.5, 0.95))
    per_span = f"over the {span:.0f} s before each page"
    cap_levels: tuple[Level, ...] = ()
    cap = engine.get("max_num_seqs") if engine is not None else None
    latest = window.latest
    engines = max(1, len(latest.label_values(n.ENGINE_LABEL))) if latest is not None else 1
    if isinstance(cap, int | float) and cap > 0:
        label = f"max_num_seqs {cap:g}" + (f" x {engines} engines" if engines > 1 else "")
        cap_levels = (Level(label, float(cap) * engines, "limit"),)

    def target(key: str, label: str) -> tuple[Level, ...]:
        v = targets.get(key)
        return (Level(label, float(v), "target"),) if isinstance(v, int | float) else ()

    out = (
        Chart(
            "kv",
            "KV cache usage",
            "kv_cache_usage_ratio_avg",
            (
                Line(
                    "KV cache usage (mean over engines)",
                    gauge(n.KV_CACHE_USAGE, "mean"),
                    "kv_cache_usage_ratio_max",
                ),
            ),
            note="vllm:kv_cache_usage_perc on each page (blocks in use, mean over engines)",
            fixed_max=1.0,
        ),
        Chart(
            "requests",
            "Requests running and waiting",
            "requests_running_avg",
            (
                Line("running", gauge(n.NUM_RUNNING), "requests_running_avg", "running"),
                Line("waiting", gauge(n.NUM_WAITING), "requests_waiting_avg"),
            ),
            cap_levels,
            note="on each page, summed over engines",
        ),
        Chart(
            "preemptions",
            "Preemptions",
            "preemptions_per_second",
            (
                Line(
                    "preemptions/s",
                    rate(n.NUM_PREEMPTIONS),
                    "preemptions_per_second",
                    "preemptions_per_second",
                ),
            ),
            note=f"rate {per_span}",
        ),
        Chart(
            "throughput",
            "Token throughput",
            "generation_tokens_per_second",
            (
                Line(
                    "output tokens/s",
                    rate(n.GENERATION_TOKENS),
                    "generation_tokens_per_second",
                    "output_tokens_per_second",
                ),
                Line("prompt tokens/s", rate(n.PROMPT_TOKENS), "prompt_tokens_per_second"),
            ),
            note=f"rate {per_span}",
        ),
        Chart(
            "ttft",
            "Time to first token",
            "ttft_seconds_p95",
            (
                Line("TTFT p50", ttft50, "ttft_seconds_p50", "ttft_seconds_p50"),
                Line("TTFT p95", ttft95, "ttft_seconds_p95", "ttft_seconds_p95"),
            ),
            target("ttft_p95_seconds", "TTFT p95 target"),
            note=f"quantiles of vLLM's histogram buckets {per_span}",
        ),
        Chart(
            "itl",
            "Inter-token latency",
            "itl_seconds_p95",
            (
                Line("ITL p50", itl50, "itl_seconds_p50"),
                Line("ITL p95", itl95, "itl_seconds_p95", "itl_seconds_p95"),
            ),
            target("itl_p95_seconds", "ITL p95 target"),
            note=f"quantiles of vLLM's histogram buckets {per_span}",
        ),
    )
    return Charts(
        t0, t1, out, _outage_spans(ts, [o.t for o in outages], t1), tuple(window.restart_times(seconds)), span
    )


def _outage_spans(ts: list[float], failed: list[float], t1: float) -> tuple[tuple[float, float], ...]:
    """Failed scrapes as spans: from the first failure to the next page read (or ``t1``)."""
    spans: list[tuple[float, float]] = []
    for t in sorted(failed):
        i = bisect_right(ts, t)
        end = ts[i] if i < len(ts) else t1
        if spans and spans[-1][1] == end:
            continue  # the same outage: it ends at the same page
        spans.append((t, end))
    return tuple(spans)
