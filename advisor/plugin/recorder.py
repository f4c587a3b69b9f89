"""The record path: vLLM's per-step stats objects -> sketches and running sums.

``EngineRecorder.record`` is called once per engine step (the front-end's output handler
calls every stat logger with the step's ``SchedulerStats`` and ``IterationStats``), so it
does constant work per step plus ~15 sketch adds per finished request; the expensive part
(merging sketches into quantiles) happens at scrape time in ``snapshot``.

Every field is read with ``getattr`` and a default (the stats classes change between vLLM
versions, see ``versions.py``); a series exists only once the fields it is built from have
been seen, so a field a version lacks leaves its series out instead of exporting zeros.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ddsketch import DDSketch

from advisor.plugin import names as n
from advisor.plugin.config import PluginConfig, bucket_labels
from advisor.plugin.sketch import WindowedSketch

_SKIPPED_REASONS = frozenset({"abort", "error"})
"""Aborted and failed requests' latencies are cut short: they would bias the quantiles."""

_FIRST_TOKEN_SWEEP = 4096
_FIRST_TOKEN_HORIZON_S = 3600.0
"""A first token's TTFT waits at most this long for its request to finish."""

# indexes into a source's list of running sums (names.FIT_NAMES, in this order)
_FIT_LEN = len(n.FIT_NAMES)

SummaryKey = tuple[str, tuple[tuple[str, str], ...]]
"""(series name, ((label, value), ...)) of one summary series."""
CellKey = tuple[str, str | None, str | None]
"""(series name, prompt bucket, output bucket); None where the length was not reported."""


@dataclass(frozen=True)
class SummarySnapshot:
    """One summary series at scrape time: its window quantiles and cumulative counters."""

    name: str
    labels: tuple[tuple[str, str], ...]
    count: float
    total: float
    quantiles: list[tuple[float, float]]


@dataclass(frozen=True)
class Snapshot:
    """Everything one engine's recorder exports, copied under its lock."""

    engine: str
    summaries: list[SummarySnapshot]
    counters: dict[tuple[str, tuple[tuple[str, str], ...]], float]


class EngineRecorder:
    """Sketches and running sums for one engine (a data-parallel rank gets its own).

    ``frontend_timing`` False turns off the front-end step clock (with several API servers
    each one receives only some steps' stats, so arrival intervals are not step times).
    ``clock`` is injectable for tests; it must be monotonic seconds.
    """

    def __init__(
        self,
        config: PluginConfig,
        engine: str = "0",
        frontend_timing: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.engine = engine
        self.frontend_timing = frontend_timing
        self._clock = clock
        self._lock = threading.Lock()
        self._prompt_edges = config.prompt_buckets
        self._prompt_labels = bucket_labels(config.prompt_buckets)
        self._output_edges = config.output_buckets
        self._output_labels = bucket_labels(config.output_buckets)
        self._band_edges = config.batch_bands
        self._band_labels = band_labels(config.batch_bands)
        self._sketches: dict[SummaryKey, WindowedSketch] = {}
        self._counters: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        # per finished request: one sketch per (series, prompt bucket, output bucket) cell; the
        # exported by-prompt, by-output and overall series are merged from the cells at scrape
        self._cells: dict[CellKey, WindowedSketch] = {}
        self._cell_counts: dict[CellKey, float] = {}
        self._fit: dict[str, list[float]] = {}
        self._prev_arrival: float | None = None
        self._prev_busy = False
        self._details_seen = False
        self._first_tokens: dict[int, float] = {}
        self._first_token_inserts = 0
        self.steps = 0

    # ------------------------------------------------------------------ record path
    def record(self, scheduler_stats: Any, iteration_stats: Any) -> None:
        """Take one engine step's stats (either may be None)."""
        now = self._clock()
        with self._lock:
            if scheduler_stats is not None:
                self._on_step(scheduler_stats, iteration_stats, now)
            if iteration_stats is not None:
                self._on_iteration(iteration_stats, now)

    def _sketch(self, name: str, labels: tuple[tuple[str, str], ...]) -> WindowedSketch:
        key = (name, labels)
        sk = self._sketches.get(key)
        if sk is None:
            cfg = self.config
            sk = WindowedSketch(cfg.window_seconds, cfg.window_slots, cfg.relative_accuracy)
            self._sketches[key] = sk
        return sk

    def _count(self, name: str, labels: tuple[tuple[str, str], ...], value: float) -> None:
        key = (name, labels)
        self._counters[key] = self._counters.get(key, 0.0) + value

    def _on_step(self, s: Any, it: Any, now: float) -> None:
        self.steps += 1
        self._count(n.STEPS, (), 1.0)
        running = getattr(s, "num_running_reqs", None)
        waiting = getattr(s, "num_waiting_reqs", None)
        if running is not None:
            self._count(n.STEP_RUNNING_REQUESTS, (), float(running))
        if waiting is not None:
            self._count(n.STEP_WAITING_REQUESTS, (), float(waiting))
        details = getattr(s, "iteration_details", None)
        if details is not None:
            self._details_seen = True
            self._on_details(details, now)
        elif self.frontend_timing and not self._details_seen:
            prev = self._prev_arrival
            if prev is not None and self._prev_busy:
                p, d = _frontend_tokens(it)
                finished = getattr(it, "finished_requests", None) if it is not None else None
                b = (running or 0) + (len(finished) if finished else 0)
                self._timed(n.SOURCE_FRONTEND, now - prev, p, d, b, now)
        self._prev_arrival = now
        self._prev_busy = (running or 0) + (waiting or 0) > 0

    def _on_details(self, details: Any, now: float) -> None:
        if getattr(details, "is_dummy", False):
            return
        ms = getattr(details, "elapsed_ms", None)
        p = getattr(details, "num_ctx_tokens", None)
        d = getattr(details, "num_generation_tokens", None)
        if ms is None or p is None or d is None:
            return
        b = (getattr(details, "num_ctx_requests", 0) or 0) + (
            getattr(details, "num_generation_requests", 0) or 0
        )
        self._timed(n.SOURCE_DETAILS, ms / 1000.0, int(p), int(d), int(b), now)

    def _timed(self, source: str, t: float, p: int, d: int, b: int, now: float) -> None:
        f = self._fit.get(source)
        if f is None:
            f = self._fit[source] = [0.0] * _FIT_LEN
        f[0] += 1.0
        f[1] += t
        f[2] += p
        f[3] += d
        f[4] += b
        f[5] += t * t
        f[6] += p * p
        f[7] += d * d
        f[8] += p * d
        f[9] += t * p
        f[10] += t * d
        if p and d:
            phase = n.PHASE_MIXED
        elif d:
            phase = n.PHASE_DECODE
        elif p:
            phase = n.PHASE_PREFILL
        else:
            phase = n.PHASE_OTHER
        band = self._band_labels[bisect_left(self._band_edges, b)] if b > 0 else "0"
        labels = ((n.SOURCE_LABEL, source), (n.PHASE_LABEL, phase), (n.BATCH_LABEL, band))
        self._sketch(n.STEP_DURATION, labels).add(t, now)

    def _on_iteration(self, it: Any, now: float) -> None:
        preempted = getattr(it, "num_preempted_reqs", None)
        if preempted is not None:
            self._count(n.STEP_PREEMPTIONS, (), float(preempted))
        itl = getattr(it, "inter_token_latencies_iter", None)
        if itl:
            self._sketch(n.ITL, ()).add_many(itl, now)
        stamp = getattr(it, "iteration_timestamp", None)
        firsts = getattr(it, "time_to_first_tokens_iter", None)
        if stamp is not None and firsts:
            self._remember_first_tokens(stamp, firsts)
        finished = getattr(it, "finished_requests", None)
        if finished:
            for fr in finished:
                self._on_finished(fr, stamp, now)

    def _remember_first_tokens(self, stamp: float, firsts: list[float]) -> None:
        """Keep each first token's TTFT under its request's arrival time (the step's
        wall-clock stamp minus the TTFT, which vLLM computed as stamp - arrival), so the
        request's exact TTFT is found again when it finishes: vLLM hands a finished
        request's e2e latency (stamp - arrival) and lengths, not its TTFT."""
        table = self._first_tokens
        for ttft in firsts:
            table[round((stamp - ttft) * 1e6)] = ttft
        self._first_token_inserts += len(firsts)
        if self._first_token_inserts >= _FIRST_TOKEN_SWEEP:
            # requests that never finish normally (aborted) leave entries: drop old ones
            self._first_token_inserts = 0
            oldest = round((stamp - _FIRST_TOKEN_HORIZON_S) * 1e6)
            for key in [k for k in table if k < oldest]:
                del table[key]

    def _exact_ttft(self, stamp: float | None, e2e: float) -> float | None:
        if stamp is None or not self._first_tokens:
            return None
        key = round((stamp - e2e) * 1e6)  # the arrival time, to the microsecond
        table = self._first_tokens
        for k in (key, key - 1, key + 1):  # float rounding moves it by at most 1 us
            ttft = table.pop(k, None)
            if ttft is not None:
                return ttft
        return None

    def _on_finished(self, fr: Any, stamp: float | None, now: float) -> None:
        reason = getattr(fr, "finish_reason", None)
        if reason is not None and str(reason).lower() in _SKIPPED_REASONS:
            return
        prompt = getattr(fr, "num_prompt_tokens", None)
        out = getattr(fr, "num_generation_tokens", None)
        pb = self._prompt_labels[bisect_left(self._prompt_edges, prompt)] if prompt is not None else None
        ob = self._output_labels[bisect_left(self._output_edges, out)] if out is not None else None
        values: list[tuple[str, float]] = []
        e2e = getattr(fr, "e2e_latency", None)
        estimated = False
        if e2e is not None and e2e >= 0:
            values.append((n.REQUEST_E2E, e2e))
            ttft = self._exact_ttft(stamp, e2e)
            if ttft is None:
                decode = getattr(fr, "decode_time", None)
                if decode is not None and 0 <= decode <= e2e:
                    ttft = e2e - decode
                    estimated = True
            if ttft is not None:
                values.append((n.REQUEST_TTFT, ttft))
        for name, attr in ((n.REQUEST_QUEUE, "queued_time"), (n.REQUEST_PREFILL, "prefill_time")):
            v = getattr(fr, attr, None)
            if v is not None and v >= 0:
                values.append((name, v))
        tpot = getattr(fr, "mean_time_per_output_token", None)
        if tpot is not None and out is not None and out > 1 and tpot > 0:
            values.append((n.REQUEST_TPOT, tpot))

        counts: list[tuple[str, float]] = []
        if prompt is not None:
            counts.append((n.REQUEST_PROMPT_TOKENS, float(prompt)))
        if out is not None:
            counts.append((n.REQUEST_GENERATION_TOKENS, float(out)))
        if estimated:
            counts.append((n.REQUEST_TTFT_ESTIMATED, 1.0))
        for name, attr in (
            (n.REQUEST_CACHED_TOKENS, "num_cached_tokens"),
            (n.REQUEST_PREEMPTIONS, "num_preemptions"),
        ):
            v = getattr(fr, attr, None)
            if v is not None:
                counts.append((name, float(v)))

        cells = self._cells
        for name, v in values:
            sk = cells.get((name, pb, ob))
            if sk is None:
                cfg = self.config
                sk = cells[(name, pb, ob)] = WindowedSketch(
                    cfg.window_seconds, cfg.window_slots, cfg.relative_accuracy
                )
            sk.add(v, now)
        cell_counts = self._cell_counts
        for name, c in counts:
            key = (name, pb, ob)
            cell_counts[key] = cell_counts.get(key, 0.0) + c

    # ------------------------------------------------------------------ scrape path
    def snapshot(self, qs: tuple[float, ...] = n.QUANTILES) -> Snapshot:
        """Quantiles over the window ending now, and every counter. The window sketches are
        copied under the lock; merging cells into the exported series happens outside it."""
        now = self._clock()
        with self._lock:
            summaries = [
                SummarySnapshot(name, labels, sk.count, sk.total, sk.quantiles(now, qs))
                for (name, labels), sk in self._sketches.items()
            ]
            cells = [(key, sk.window(now), sk.count, sk.total) for key, sk in self._cells.items()]
            cell_counts = dict(self._cell_counts)
            counters = dict(self._counters)
            for source, sums in self._fit.items():
                for name, v in zip(n.FIT_NAMES, sums, strict=True):
                    counters[(name, ((n.SOURCE_LABEL, source),))] = v
        summaries.extend(self._request_summaries(cells, qs))
        for (name, pb, ob), value in cell_counts.items():
            for labels in _label_sets(pb, ob):
                counters[(name, labels)] = counters.get((name, labels), 0.0) + value
        return Snapshot(self.engine, summaries, counters)

    def _request_summaries(
        self, cells: list[tuple[CellKey, DDSketch | None, float, float]], qs: tuple[float, ...]
    ) -> list[SummarySnapshot]:
        """Merge the cells into the by-prompt-bucket, by-output-bucket and overall series
        (DDSketches of one accuracy merge exactly)."""
        merged: dict[tuple[str, tuple[tuple[str, str], ...]], list[Any]] = {}
        for (name, pb, ob), window, count, total in cells:
            for labels in _label_sets(pb, ob):
                acc = merged.get((name, labels))
                if acc is None:
                    acc = merged[(name, labels)] = [None, 0.0, 0.0]
                acc[1] += count
                acc[2] += total
                if window is not None:
                    if acc[0] is None:
                        acc[0] = DDSketch(self.config.relative_accuracy)
                    acc[0].merge(window)
        out = []
        for (name, labels), (sketch, count, total) in merged.items():
            quantiles: list[tuple[float, float]] = []
            if sketch is not None:
                for q in qs:
                    v = sketch.get_quantile_value(q)
                    if v is not None:
                        quantiles.append((q, float(v)))
            out.append(SummarySnapshot(name, labels, count, total, quantiles))
        return out


def _label_sets(pb: str | None, ob: str | None) -> list[tuple[tuple[str, str], ...]]:
    """The exported label sets a (prompt bucket, output bucket) cell contributes to."""
    sets: list[tuple[tuple[str, str], ...]] = [
        ((n.PROMPT_BUCKET_LABEL, n.ALL), (n.OUTPUT_BUCKET_LABEL, n.ALL))
    ]
    if pb is not None:
        sets.append(((n.PROMPT_BUCKET_LABEL, pb), (n.OUTPUT_BUCKET_LABEL, n.ALL)))
    if ob is not None:
        sets.append(((n.PROMPT_BUCKET_LABEL, n.ALL), (n.OUTPUT_BUCKET_LABEL, ob)))
    return sets


def band_labels(edges: tuple[int, ...]) -> tuple[str, ...]:
    """Batch-size bands of at least one request: ``(1, 4, 16)`` -> ``("1", "2-4", "5-16", "17+")``."""
    labels = []
    lo = 1
    for e in edges:
        labels.append(str(lo) if lo == e else f"{lo}-{e}")
        lo = e + 1
    labels.append(f"{lo}+")
    return tuple(labels)


def _frontend_tokens(it: Any) -> tuple[int, int]:
    """(prefill, decode) tokens of a step as the front-end sees them: prompt tokens computed
    for requests whose prefill finished in this step, and generated tokens less the first
    token of each such request."""
    if it is None:
        return 0, 0
    gen = getattr(it, "num_generation_tokens", 0) or 0
    firsts = getattr(it, "time_to_first_tokens_iter", None)
    d = max(gen - (len(firsts) if firsts else 0), 0)
    pts = getattr(it, "prompt_token_stats", None)
    p = getattr(pts, "computed", None) if pts is not None else None
    if p is None:
        p = getattr(it, "num_prompt_tokens", 0) or 0
    return int(p), int(d)
