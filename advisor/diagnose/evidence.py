"""Evidence from what a user pastes, when there is no time series: one ``/metrics`` page,
or only a log's periodic stats lines. Pure functions; ``inputs`` feeds their output to the
advisor like any page.

* One page: a rate is a difference between two readings, and one page is one reading (the
  file's modification time is when it was copied, not when it was scraped: a clone sets it
  to now). So a lone page has no rates (:data:`NO_RATES`); its gauges (running, waiting, KV
  usage) and its counters read as counts since the process started are what it supports
  (:func:`single_page_verdict`).
* A log: each ``engine_stats`` line (running, waiting, KV usage, throughputs, V0 swapped)
  becomes a page (:func:`pages_from_stats`), throughputs integrated into token counters,
  V0 preemption warnings into the preemption counter.
* :func:`pressure` names what a page shows (a queue, preemptions, a full KV cache): a
  diagnosis may not call such a server healthy or idle.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from advisor.core import names
from advisor.core.model import EngineInfo, Family, LogEvent, Snapshot, label_key
from advisor.diagnose.advise import Diagnosis, engine_json, no_rule_fired

NO_RATES = "one page: no rates; give two pages or --url --window"
"""What a lone page cannot give, and what would (the context line and the verdicts say it)."""


# --------------------------------------------------------------------------- pressure


@dataclass(frozen=True)
class Pressure:
    running: float | None
    waiting: float | None
    kv_usage: float | None
    preemptions_since_start: float | None

    def signs(self) -> list[str]:
        out = []
        if self.waiting is not None and self.waiting >= 1:
            out.append(f"{self.waiting:.0f} waiting")
        if self.preemptions_since_start:
            out.append(f"{self.preemptions_since_start:.0f} preemptions since start")
        if self.kv_usage is not None and self.kv_usage >= 0.9:
            out.append(f"KV cache {self.kv_usage:.0%} full")
        return out

    def missing(self) -> list[str]:
        out = []
        if self.running is None:
            out.append(names.NUM_RUNNING)
        if self.waiting is None:
            out.append(names.NUM_WAITING)
        return out


def pressure(snap: Snapshot) -> Pressure:
    return Pressure(
        running=snap.total(names.NUM_RUNNING),
        waiting=snap.total(names.NUM_WAITING),
        kv_usage=snap.mean(names.KV_CACHE_USAGE),
        preemptions_since_start=snap.total(names.NUM_PREEMPTIONS),
    )


# --------------------------------------------------------------------------- verdicts


def _withhold(d: Diagnosis, status: str, reason: str) -> Diagnosis:
    return replace(d, status=status, reason=reason, recommendation=None)


def single_page_verdict(d: Diagnosis, page: Snapshot) -> Diagnosis:
    """What one page supports: no rates (:data:`NO_RATES`), so no rule that needs one can hold;
    its gauges and its counters as counts since the process started. "healthy" needs the
    running and waiting gauges and no sign of pressure (no queue, no preemption since the
    start, a KV cache not full); otherwise the verdict says what is missing or what the page
    shows."""
    p = pressure(page)
    ctx = {k: v for k, v in d.context.items() if k not in ("window_seconds", "requests_per_second")}
    ctx["single_page"] = {
        "running": p.running,
        "waiting": p.waiting,
        "kv_cache_usage": p.kv_usage,
        "preemptions_since_start": p.preemptions_since_start,
        "note": NO_RATES,
    }
    d = replace(d, context=ctx)
    if d.recommendation is not None:  # a rule that holds on the page's gauges alone
        rec = d.recommendation
        said = "From one page: its gauges, no rates."
        d = replace(d, recommendation=replace(rec, note=f"{rec.note} {said}".strip()))
    quiet = no_rule_fired(d)
    if not quiet and d.status != "insufficient-data":
        return d
    missing = p.missing()
    signs = p.signs()
    if d.status == "insufficient-data" and d.reason.startswith("idle") and (missing or signs):
        # "idle" from a page that lacks the gauges, or whose gauges show work, is no verdict
        what = f"it lacks {', '.join(missing)}" if missing else f"it shows {', '.join(signs)}"
        return _withhold(
            d, "insufficient-data", f"one page cannot tell whether vLLM is idle: {what}; {NO_RATES}"
        )
    if d.status == "insufficient-data" and d.reason.startswith("idle"):  # the gauges, not a window, say it
        return _withhold(
            d, "insufficient-data", f"nothing running or waiting when the page was read ({NO_RATES})"
        )
    if not quiet:
        return d
    if signs:
        return _withhold(
            d,
            "inconclusive",
            f"one page shows {', '.join(signs)}, but no rule can confirm a cause from it ({NO_RATES})",
        )
    if missing:
        return _withhold(
            d,
            "insufficient-data",
            f"one page is not enough to call it healthy: missing {', '.join(missing)} ({NO_RATES})",
        )
    return replace(
        d, reason=f"{d.reason} (one page: its gauges and counts since the process started; {NO_RATES})"
    )


def log_pressure(pages: Sequence[Snapshot]) -> list[str]:
    """Signs of pressure anywhere in a log's stats lines: the longest queue, the fullest KV
    cache, the preemptions the log counted."""

    def peak(name: str, mean: bool = False) -> float | None:
        vals = [v for v in ((p.mean(name) if mean else p.total(name)) for p in pages) if v is not None]
        return max(vals) if vals else None

    waiting, kv = peak(names.NUM_WAITING), peak(names.KV_CACHE_USAGE, mean=True)
    pre = [v for v in (p.total(names.NUM_PREEMPTIONS) for p in pages) if v is not None]
    out = []
    if waiting is not None and waiting >= 1:
        out.append(f"up to {waiting:.0f} waiting")
    if kv is not None and kv >= 0.9:
        out.append(f"the KV cache up to {kv:.0%} full")
    if pre and pre[-1] > 0:
        out.append(f"preemptions (cumulative count {pre[-1]:.0f})")
    return out


def no_stats_diagnosis(engine: EngineInfo, log_file: str, n: int, at: float) -> Diagnosis:
    why = (
        "the log has no periodic stats lines (`Avg prompt throughput: ... Running: ... Waiting: ...`)"
        if n == 0
        else "the log has only one timed stats line"
    )
    return Diagnosis(
        "insufficient-data",
        f"{log_file}: {why}: nothing to diagnose from (add --metrics-file, or log stats: "
        "drop --disable-log-stats)",
        None,
        (),
        engine_json(engine),
        {"source": "log stats lines", "stats_lines": n},
        at,
        {},
    )


def log_stats_verdict(d: Diagnosis, pages: Sequence[Snapshot]) -> Diagnosis:
    """A diagnosis from log stats lines: rules that need latency histograms cannot be
    checked, so "healthy" also needs no sign of pressure in the last lines."""
    ctx: dict[str, Any] = dict(d.context)
    ctx["source"] = "log stats lines"
    ctx["stats_lines"] = len(pages)
    ctx["log_span_seconds"] = pages[-1].t - pages[0].t
    d = replace(d, context=ctx)
    if not no_rule_fired(d):
        return d
    signs = log_pressure(pages)
    if signs:
        return _withhold(
            d,
            "inconclusive",
            f"the log's stats lines show {', '.join(signs)}, but no rule could confirm a cause "
            "from them (a log has no latency histograms: add --metrics-file pages)",
        )
    return d


# --------------------------------------------------------------------------- log stats


def _total(rows: Sequence[dict[str, Any]], key: str) -> float | None:
    vals = [float(r[key]) for r in rows if isinstance(r.get(key), int | float)]
    return sum(vals) if vals else None


def _family(name: str, typ: str, value: float) -> Family:
    return Family(name, typ, "from the log's stats lines", {label_key({"engine": "0"}): value})


def pages_from_stats(events: Iterable[LogEvent], default_interval_s: float = 10.0) -> list[Snapshot]:
    """A page per time with ``engine_stats`` lines (timed lines only; several engines' lines
    of one second are summed). Gauges: running, waiting, swapped, KV usage (mean, as V1's
    ``vllm:kv_cache_usage_perc``); counters: prompt and generation tokens (throughput times
    the time since the line before), preemptions (V0 warnings' cumulative count, V1's
    per-interval ``Preemptions: N`` summed)."""
    by_t: dict[float, list[dict[str, Any]]] = {}
    preempt: float | None = None
    for ev in sorted((e for e in events if e.t is not None), key=lambda e: e.t or 0.0):
        if ev.kind == "preemption":
            cum = ev.fields.get("cumulative")
            preempt = float(cum) if isinstance(cum, int | float) else (preempt or 0.0) + 1.0
        elif ev.kind == "engine_stats" and ev.fields.get("format") in ("v0", "v1"):
            by_t.setdefault(float(ev.t or 0.0), []).append({**ev.fields, "_preempt": preempt})
    # V1 prints "Preemptions: N" (those of the interval) only when N > 0: once a line of the
    # log has it, a line without it counts none
    v1_counts = any("preemptions" in r and r.get("format") == "v1" for rows in by_t.values() for r in rows)
    v1_total = 0.0
    pages: list[Snapshot] = []
    prompt = gen = 0.0
    last_t: float | None = None
    for t in sorted(by_t):
        rows = by_t[t]
        dt = (t - last_t) if last_t is not None else default_interval_s
        last_t = t
        prompt += (_total(rows, "prompt_throughput") or 0.0) * dt
        gen += (_total(rows, "generation_throughput") or 0.0) * dt
        kv = _total(rows, "kv_cache_usage")
        n_kv = sum(1 for r in rows if isinstance(r.get("kv_cache_usage"), int | float))
        pre = rows[-1].get("_preempt")
        if v1_counts:
            v1_total += _total(rows, "preemptions") or 0.0
            pre = v1_total + (pre if isinstance(pre, int | float) else 0.0)
        values: list[tuple[str, str, float | None]] = [
            (names.NUM_RUNNING, "gauge", _total(rows, "running")),
            (names.NUM_WAITING, "gauge", _total(rows, "waiting")),
            (names.NUM_SWAPPED, "gauge", _total(rows, "swapped")),
            (names.KV_CACHE_USAGE, "gauge", kv / n_kv if kv is not None and n_kv else None),
            (names.PROMPT_TOKENS, "counter", prompt),
            (names.GENERATION_TOKENS, "counter", gen),
            (names.NUM_PREEMPTIONS, "counter", float(pre) if isinstance(pre, int | float) else None),
        ]
        fams = {n: _family(n, typ, v) for n, typ, v in values if v is not None}
        pages.append(Snapshot(t=t, families=fams))
    return pages


__all__ = [
    "Pressure",
    "log_stats_verdict",
    "no_stats_diagnosis",
    "pages_from_stats",
    "pressure",
    "single_page_verdict",
]
