"""The window as it was before it became incremental (commit ff5d0ce), kept verbatim as the
reference the incremental one is checked against on recorded sessions (tests/derive/test_window.py).

A bounded, time-ordered store of snapshots and log events, with an injected clock.

Deltas and rates survive counter resets (a server restart): per series, a value
lower than the one before counts from zero, as PromQL's ``increase`` does.
Histogram quantiles over a window come from bucket deltas, the meaning of
``histogram_quantile(q, rate(x_bucket[w]))``. Everything can be asked per engine
or model (``match``) or aggregated across them.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from itertools import pairwise

from advisor.core.model import Family, Histogram, LabelKey, LogEvent, Snapshot, labels_match

Clock = Callable[[], float]

# Families kept besides vllm:*, so that a snapshot stays small in memory.
KEEP_EXTRA = ("process_start_time_seconds", "process_cpu_seconds", "process_resident_memory_bytes")


def slim(snapshot: Snapshot) -> Snapshot:
    """Drop families the advisor never reads (HTTP and GC series of the API server)."""
    fams = {n: f for n, f in snapshot.families.items() if n.startswith("vllm:") or n in KEEP_EXTRA}
    return Snapshot(t=snapshot.t, families=fams)


@dataclass(frozen=True)
class Outage:
    """A period when the server could not be read (down, restarting, bad page)."""

    t: float
    kind: str
    message: str


class Window:
    """Snapshots and events of the last ``max_age_s`` seconds (and at most ``max_snapshots``)."""

    def __init__(
        self,
        max_age_s: float = 900.0,
        max_snapshots: int = 1000,
        max_events: int = 20000,
        clock: Clock = time.time,
    ) -> None:
        self.max_age_s = max_age_s
        self.clock = clock
        self._snaps: deque[Snapshot] = deque(maxlen=max_snapshots)
        self._events: deque[LogEvent] = deque(maxlen=max_events)
        self._outages: deque[Outage] = deque(maxlen=1000)
        # memo of derived values, valid while no snapshot is added and the clock stands still
        self._memo: dict[tuple[object, ...], object] = {}
        self._memo_at: tuple[float, float] | None = None

    # ---------------------------------------------------------------- input
    def add_snapshot(self, snapshot: Snapshot) -> None:
        if self._snaps and snapshot.t < self._snaps[-1].t:
            return  # out of order: ignore rather than corrupt deltas
        self._snaps.append(slim(snapshot))
        self._memo.clear()
        self._expire()

    def _cached(self, key: tuple[object, ...], compute: Callable[[], object]) -> object:
        stamp = (self._snaps[-1].t if self._snaps else 0.0, self.now())
        if stamp != self._memo_at:
            self._memo.clear()
            self._memo_at = stamp
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def add_event(self, event: LogEvent) -> None:
        self._events.append(event)

    def add_outage(self, outage: Outage) -> None:
        self._outages.append(outage)

    def _expire(self) -> None:
        horizon = self.now() - self.max_age_s
        while self._snaps and self._snaps[0].t < horizon:
            self._snaps.popleft()
        while self._events and self._events[0].t is not None and self._events[0].t < horizon:
            self._events.popleft()

    def now(self) -> float:
        return self.clock()

    def slice(self, t0: float, t1: float) -> Window:
        """A window over the snapshots taken in [t0, t1], its clock standing at t1."""
        snaps = [s for s in self._snaps if t0 <= s.t <= t1]
        w = Window(max_age_s=float("inf"), max_snapshots=max(1, len(snaps)), clock=lambda: t1)
        w._snaps.extend(snaps)
        return w

    # ---------------------------------------------------------------- selection
    @property
    def latest(self) -> Snapshot | None:
        return self._snaps[-1] if self._snaps else None

    def snapshots(self, seconds: float | None = None) -> list[Snapshot]:
        """Snapshots of the last ``seconds`` (relative to the clock), oldest first."""
        if seconds is None:
            return list(self._snaps)

        def select() -> list[Snapshot]:
            horizon = self.now() - seconds
            return [s for s in self._snaps if s.t >= horizon]

        return list(self._cached(("snaps", seconds), select))  # type: ignore[call-overload]

    def events(self, kind: str | None = None, seconds: float | None = None) -> list[LogEvent]:
        horizon = None if seconds is None else self.now() - seconds
        return [
            e
            for e in self._events
            if (kind is None or e.kind == kind) and (horizon is None or e.t is None or e.t >= horizon)
        ]

    def outages(self, seconds: float | None = None) -> list[Outage]:
        horizon = None if seconds is None else self.now() - seconds
        return [o for o in self._outages if horizon is None or o.t >= horizon]

    def duration(self, seconds: float | None = None) -> float:
        snaps = self.snapshots(seconds)
        return snaps[-1].t - snaps[0].t if len(snaps) >= 2 else 0.0

    # ---------------------------------------------------------------- counters
    def counter_delta(
        self, name: str, seconds: float | None = None, match: Mapping[str, str] | None = None
    ) -> float | None:
        """Increase of a counter over the window, summed over matching series; resets
        count from zero. None when the family is absent or fewer than two snapshots."""
        snaps = [s for s in self.snapshots(seconds) if s.has(name)]
        if len(snaps) < 2:
            return None
        total = 0.0
        for prev, cur in _pairs(snaps):
            p = prev.families[name].series
            for key, v in cur.families[name].series.items():
                if isinstance(v, Histogram) or not labels_match(key, match):
                    continue
                before = p.get(key)
                if before is None or isinstance(before, Histogram):
                    continue  # a series new in this window: no baseline
                total += v - before if v >= before else v
        return total

    def rate(
        self, name: str, seconds: float | None = None, match: Mapping[str, str] | None = None
    ) -> float | None:
        snaps = [s for s in self.snapshots(seconds) if s.has(name)]
        if len(snaps) < 2 or snaps[-1].t <= snaps[0].t:
            return None
        delta = self.counter_delta(name, seconds, match)
        return None if delta is None else delta / (snaps[-1].t - snaps[0].t)

    # ---------------------------------------------------------------- histograms
    def histogram_delta(
        self, name: str, seconds: float | None = None, match: Mapping[str, str] | None = None
    ) -> Histogram | None:
        """Bucket increases over the window, merged over matching series (reset-aware)."""
        key = ("hist", name, seconds, tuple(sorted(match.items())) if match else None)
        out = self._cached(key, lambda: self._histogram_delta(name, seconds, match))
        return out if isinstance(out, Histogram) else None

    def _histogram_delta(
        self, name: str, seconds: float | None = None, match: Mapping[str, str] | None = None
    ) -> Histogram | None:
        snaps = [s for s in self.snapshots(seconds) if s.has(name)]
        if len(snaps) < 2:
            return None
        # Per series: split at resets (count went down); each segment contributes its
        # last value minus its base (the value before it, or zero after a reset).
        acc: dict[LabelKey, Histogram] = {}
        first: dict[LabelKey, Histogram] = {}
        last: dict[LabelKey, Histogram] = {}
        for s in snaps:
            for key, h in s.families[name].series.items():
                if not isinstance(h, Histogram) or not labels_match(key, match):
                    continue
                prev = last.get(key)
                if prev is None:
                    first[key] = h  # baseline: the series' first sample in the window
                elif h.count < prev.count:  # reset: close the segment, restart from zero
                    seg = prev.minus(first[key])
                    acc[key] = seg if key not in acc else acc[key].merged(seg)
                    first[key] = Histogram(tuple((b, 0.0) for b, _ in h.buckets), 0.0, 0.0)
                last[key] = h
        for key, h in last.items():
            seg = h.minus(first[key])
            acc[key] = seg if key not in acc else acc[key].merged(seg)
        out: Histogram | None = None
        for h in acc.values():
            out = h if out is None else out.merged(h)
        return out

    def quantile(
        self, name: str, q: float, seconds: float | None = None, match: Mapping[str, str] | None = None
    ) -> float | None:
        h = self.histogram_delta(name, seconds, match)
        return h.quantile(q) if h is not None and h.count > 0 else None

    # ---------------------------------------------------------------- gauges
    def gauge_series(
        self,
        name: str,
        seconds: float | None = None,
        match: Mapping[str, str] | None = None,
        agg: str = "total",
    ) -> list[tuple[float, float]]:
        """(t, value) per snapshot; engines aggregated by ``total`` (counts) or ``mean`` (ratios)."""
        out = []
        for s in self.snapshots(seconds):
            v = s.mean(name, match) if agg == "mean" else s.total(name, match)
            if v is not None:
                out.append((s.t, v))
        return out

    def gauge_avg(
        self, name: str, seconds: float | None = None, agg: str = "total", **kw: str
    ) -> float | None:
        vals = [v for _, v in self.gauge_series(name, seconds, kw or None, agg)]
        return sum(vals) / len(vals) if vals else None

    def gauge_max(
        self, name: str, seconds: float | None = None, agg: str = "total", **kw: str
    ) -> float | None:
        vals = [v for _, v in self.gauge_series(name, seconds, kw or None, agg)]
        return max(vals) if vals else None

    # ---------------------------------------------------------------- restarts
    def restart_times(self, seconds: float | None = None) -> list[float]:
        """Times of snapshots taken after a server restart: the API server's
        ``process_start_time_seconds`` changed, or request counters went down."""
        out = []
        for prev, cur in _pairs(self.snapshots(seconds)):
            a = prev.total("process_start_time_seconds")
            b = cur.total("process_start_time_seconds")
            if (a is not None and b is not None and abs(a - b) > 1.0) or _went_down(prev, cur):
                out.append(cur.t)
        return out


def _went_down(prev: Snapshot, cur: Snapshot) -> bool:
    for name in ("vllm:request_success", "vllm:generation_tokens", "vllm:prompt_tokens"):
        a, b = prev.total(name), cur.total(name)
        if a is not None and b is not None and b < a:
            return True
    return False


def _pairs(snaps: list[Snapshot]) -> Iterator[tuple[Snapshot, Snapshot]]:
    return pairwise(snaps)


def family_of(snapshot: Snapshot, name: str) -> Family | None:
    return snapshot.families.get(name)
