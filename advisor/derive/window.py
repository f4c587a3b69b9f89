"""A bounded, time-ordered store of what the signals read from each page, with an injected clock.

Deltas and rates survive counter resets (a server restart): per series, a value
lower than the one before counts from zero, as PromQL's ``increase`` does.
Histogram quantiles over a window come from bucket deltas, the meaning of
``histogram_quantile(q, rate(x_bucket[w]))``. Scalars (gauges, counters) can be asked
per engine or model (``match``) or aggregated across them.

Nothing is rescanned per cycle. Each page becomes a compact *frame* when it is added:

- scalar series (gauges, counters) as two arrays of floats, the values and a running
  reset-aware sum of each series' increases; the series' names and labels (the *layout*)
  are shared between frames while they do not change;
- each histogram family as one array: the running reset-aware sum of its bucket
  increases over all series (engines, models) merged, which is all the signals read.

A counter's increase over a window is then the difference of two running sums, a
histogram's bucket deltas likewise, and restarts are detected once, when a page arrives.
Memory per frame is a few floats per scalar series and one array per histogram family,
whatever the interval; the window keeps at most ``max_snapshots`` frames.
"""

from __future__ import annotations

import math
import time
from array import array
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from itertools import islice, pairwise
from typing import Any

from advisor.core import names
from advisor.core.model import Family, Histogram, LabelKey, LogEvent, Snapshot, Summary, labels_match
from advisor.plugin import names as pn

Clock = Callable[[], float]

# Counters whose going down means the server restarted.
RESTART_COUNTERS = ("vllm:request_success", "vllm:generation_tokens", "vllm:prompt_tokens")
START_TIME = "process_start_time_seconds"


# The stat-logger plugin's families the window keeps (advisor/plugin, docs/plugin.md): the
# request summaries (not the step-duration one: the fit sums carry the steps), every counter,
# and the identity gauges. Their ``engine`` label is merged away (counters summed, quantiles
# the highest engine's): a frame holds as many plugin numbers for 16 engines as for one.
PLUGIN_SUMMARIES = (
    pn.REQUEST_TTFT,
    pn.REQUEST_TPOT,
    pn.REQUEST_QUEUE,
    pn.REQUEST_PREFILL,
    pn.REQUEST_E2E,
    pn.ITL,
)
PLUGIN_COUNTERS = (
    pn.REQUEST_PROMPT_TOKENS,
    pn.REQUEST_GENERATION_TOKENS,
    pn.REQUEST_CACHED_TOKENS,
    pn.REQUEST_PREEMPTIONS,
    pn.REQUEST_TTFT_ESTIMATED,
    pn.STEPS,
    pn.STEP_PREEMPTIONS,
    pn.STEP_RUNNING_REQUESTS,
    pn.STEP_WAITING_REQUESTS,
    *pn.FIT_NAMES,
)
PLUGIN_GAUGES = (pn.PLUGIN_INFO, pn.WINDOW_SECONDS)
_PLUGIN_KEEP = frozenset((*PLUGIN_SUMMARIES, *PLUGIN_COUNTERS, *PLUGIN_GAUGES))
COUNT_SUFFIX, SUM_SUFFIX = "_count", "_sum"
"""A plugin summary ``X`` is kept as the counters ``X_count`` and ``X_sum`` (running sums like
every counter) and ``X`` itself: its quantile samples, one series per (labels, ``quantile``)."""


def slim(snapshot: Snapshot) -> Snapshot:
    """Drop families the advisor never reads (HTTP and GC series of the API server)."""
    fams = {
        n: f
        for n, f in snapshot.families.items()
        if n.startswith("vllm:") or n in names.KEEP_EXTRA or n in _PLUGIN_KEEP
    }
    return Snapshot(t=snapshot.t, families=fams, warnings=snapshot.warnings)


def _without_engine(key: LabelKey) -> LabelKey:
    return tuple(kv for kv in key if kv[0] != pn.ENGINE_LABEL)


def _quantile_key(key: LabelKey, q: float) -> LabelKey:
    return tuple(sorted((*key, (pn.QUANTILE_LABEL, repr(q)))))


@dataclass(frozen=True)
class Outage:
    """A period when the server could not be read (down, restarting, bad page)."""

    t: float
    kind: str
    message: str


class _Layout:
    """Where each scalar family's series sit in a frame's arrays (shared between frames)."""

    __slots__ = ("fams", "idx", "qidx", "sig", "size")

    def __init__(self, sig: tuple[tuple[str, str, tuple[LabelKey, ...]], ...]) -> None:
        self.sig = sig
        self.fams: dict[str, tuple[str, int, tuple[LabelKey, ...], dict[LabelKey, int]]] = {}
        self.idx: dict[tuple[object, ...], list[int]] = {}  # (family, match) -> positions
        self.qidx: dict[tuple[object, ...], list[tuple[int, float]]] = {}  # -> (position, quantile)
        start = 0
        for name, typ, keys in sig:
            self.fams[name] = (typ, start, keys, {k: i for i, k in enumerate(keys)})
            start += len(keys)
        self.size = start


class _HLayout:
    """Where each histogram family sits in a frame's histogram array: bounds and offset."""

    __slots__ = ("fams", "sig")

    def __init__(self, sig: tuple[tuple[str, tuple[float, ...]], ...]) -> None:
        self.sig = sig
        self.fams: dict[str, tuple[tuple[float, ...], int]] = {}
        start = 0
        for name, bounds in sig:
            self.fams[name] = (bounds, start)
            start += len(bounds) + 2  # cumulative bucket counts, count, sum


class _Frame:
    __slots__ = ("adj", "hist", "hlayout", "layout", "raw", "seq", "t")

    def __init__(
        self,
        seq: int,
        t: float,
        layout: _Layout,
        raw: array[float],
        adj: array[float],
        hlayout: _HLayout,
        hist: array[float],
    ) -> None:
        self.seq = seq
        self.t = t
        self.layout = layout
        self.raw = raw
        self.adj = adj
        self.hlayout = hlayout
        self.hist = hist


class _Series:
    """Per-frame aggregates of one scalar family (total, mean or max over matching series),
    kept in step with the frames so that a query reads a slice, not every page again."""

    __slots__ = ("first_seq", "ts", "vals")

    def __init__(self, first_seq: int) -> None:
        self.first_seq = first_seq
        self.ts: list[float] = []
        self.vals: list[float | None] = []


class Window:
    """Frames and events of the last ``max_age_s`` seconds (and at most ``max_snapshots`` frames)."""

    def __init__(
        self,
        max_age_s: float = 900.0,
        max_snapshots: int = 1000,
        max_events: int = 20000,
        clock: Clock = time.time,
    ) -> None:
        self.max_age_s = max_age_s
        self.max_snapshots = max_snapshots
        self.clock = clock
        self._frames: deque[_Frame] = deque()
        self._events: deque[LogEvent] = deque(maxlen=max_events)
        self._outages: deque[Outage] = deque(maxlen=1000)
        self._latest: Snapshot | None = None
        self._seq = 0
        self._restarts: deque[float] = deque()
        # running state of the histograms: last raw series per family, merged running sums
        self._hlast: dict[str, dict[LabelKey, tuple[tuple[float, ...], list[float]]]] = {}
        self._hacc: dict[str, tuple[tuple[float, ...], list[float]]] = {}
        self._aggs: dict[tuple[object, ...], _Series] = {}
        # quantile series of the plugin's summaries seen so far, per family, in a fixed order:
        # a page whose window lacks some of them gets NaN there, so the layout does not churn
        self._qknown: dict[str, dict[LabelKey, None]] = {}
        # memo of derived values, valid while no snapshot is added and the clock stands still
        self._memo: dict[tuple[object, ...], object] = {}
        self._memo_at: tuple[float, float] | None = None

    # ---------------------------------------------------------------- input
    def add_snapshot(self, snapshot: Snapshot) -> None:
        if self._frames and snapshot.t < self._frames[-1].t:
            return  # out of order: ignore rather than corrupt deltas
        snap = self._plugin(slim(snapshot))
        prev = self._frames[-1] if self._frames else None
        frame = self._frame(snap, prev)
        if prev is not None and _restarted(prev, frame):
            self._restarts.append(frame.t)
        self._frames.append(frame)
        self._latest = snap
        self._memo.clear()
        self._expire()

    def _plugin(self, snap: Snapshot) -> Snapshot:
        """The plugin's families made compact: engines merged, each summary split into its
        ``_count`` and ``_sum`` counters and its quantile series (NaN where the plugin's window
        holds no value now but did before)."""
        if not any(n.startswith(pn.PREFIX) for n in snap.families):
            return snap
        fams: dict[str, Family] = {}
        for name, fam in snap.families.items():
            if not name.startswith(pn.PREFIX) or name in PLUGIN_GAUGES:
                fams[name] = fam
                continue
            if name in PLUGIN_SUMMARIES:
                counts: dict[LabelKey, float] = {}
                sums: dict[LabelKey, float] = {}
                quants: dict[LabelKey, float] = {}
                for key, sm in fam.series.items():
                    if not isinstance(sm, Summary):
                        continue
                    k = _without_engine(key)
                    counts[k] = counts.get(k, 0.0) + sm.count
                    sums[k] = sums.get(k, 0.0) + sm.sum
                    for q, v in sm.quantiles:
                        qk = _quantile_key(k, q)
                        quants[qk] = max(v, quants.get(qk, v))
                fams[name + COUNT_SUFFIX] = Family(name + COUNT_SUFFIX, "counter", "", counts)
                fams[name + SUM_SUFFIX] = Family(name + SUM_SUFFIX, "counter", "", sums)
                known = self._qknown.setdefault(name, {})
                if any(k not in known for k in quants):
                    known.update(dict.fromkeys(sorted(quants)))
                if known:
                    fams[name] = Family(name, "summary", "", {k: quants.get(k, math.nan) for k in known})
            else:  # a counter
                merged: dict[LabelKey, float] = {}
                for key, v in fam.series.items():
                    if isinstance(v, int | float):
                        k = _without_engine(key)
                        merged[k] = merged.get(k, 0.0) + v
                fams[name] = Family(name, fam.type, "", merged)
        return Snapshot(t=snap.t, families=fams, warnings=snap.warnings)

    def _frame(self, snap: Snapshot, prev: _Frame | None) -> _Frame:
        scal = [(n, f) for n, f in snap.families.items() if f.type not in ("histogram", "gaugehistogram")]
        sig = tuple((n, f.type, tuple(f.series)) for n, f in scal)
        layout = prev.layout if prev is not None and prev.layout.sig == sig else _Layout(sig)
        raw = array(
            "d", [v if isinstance(v, float) else float(v) for _, f in scal for v in f.series.values()]
        )
        if prev is not None and prev.layout is layout:
            adj = array(
                "d", [a + (c - p if c >= p else c) for a, c, p in zip(prev.adj, raw, prev.raw, strict=True)]
            )
        else:
            adj = self._adj_slow(layout, raw)
        hlayout, hist = self._histograms(snap, prev)
        self._seq += 1
        return _Frame(self._seq, snap.t, layout, raw, adj, hlayout, hist)

    def _adj_slow(self, layout: _Layout, raw: array[float]) -> array[float]:
        """Running sums when the series changed: per family, against the last frame holding it;
        a series new since then starts from its last known running sum (or its value)."""
        adj = array("d", raw)
        for name, (_typ, start, keys, _index) in layout.fams.items():
            last = next((f for f in reversed(self._frames) if name in f.layout.fams), None)
            for i, key in enumerate(keys):
                cur = raw[start + i]
                if last is not None:
                    _t, s0, _k, index = last.layout.fams[name]
                    j = index.get(key)
                    if j is not None:
                        p = last.raw[s0 + j]
                        adj[start + i] = last.adj[s0 + j] + (cur - p if cur >= p else cur)
                        continue
                base = self._last_adj(name, key)
                adj[start + i] = cur if base is None else base
        return adj

    def _last_adj(self, name: str, key: LabelKey) -> float | None:
        for f in reversed(self._frames):
            fam = f.layout.fams.get(name)
            if fam is not None and key in fam[3]:
                return f.adj[fam[1] + fam[3][key]]
        return None

    def _histograms(self, snap: Snapshot, prev: _Frame | None) -> tuple[_HLayout, array[float]]:
        """Merge each histogram family's reset-aware bucket increases into its running sum."""
        parts: list[tuple[str, tuple[float, ...], list[float]]] = []
        for name, fam in snap.families.items():
            if fam.type not in ("histogram", "gaugehistogram"):
                continue
            last = self._hlast.setdefault(name, {})
            entry = self._hacc.get(name)
            for key, h in fam.series.items():
                if not isinstance(h, Histogram) or not h.buckets:
                    continue
                bounds = tuple([b for b, _ in h.buckets])
                counts = [c for _, c in h.buckets]
                counts.append(h.count)
                counts.append(h.sum)
                if entry is None:
                    entry = self._hacc[name] = (bounds, [0.0] * (len(bounds) + 2))
                p = last.get(key)
                last[key] = (bounds, counts)
                if p is None:
                    continue  # a series' first reading is its baseline
                inc = counts
                if bounds == p[0] and h.count >= p[1][-2]:
                    inc = [c - pc for c, pc in zip(counts, p[1], strict=True)]
                    if min(inc[:-1]) < 0:
                        inc = counts  # a bucket went down: a reset after all
                acc_bounds, acc = entry
                if bounds != acc_bounds:  # other bounds than the family's first series: a step function
                    step = Histogram(tuple(zip(bounds, inc, strict=False)), 0.0, 0.0)
                    inc = [step.cumulative(b) for b in acc_bounds] + inc[-2:]
                acc[:] = [a + x for a, x in zip(acc, inc, strict=True)]
            if entry is not None:
                parts.append((name, entry[0], entry[1]))
        sig = tuple((n, b) for n, b, _ in parts)
        hlayout = prev.hlayout if prev is not None and prev.hlayout.sig == sig else _HLayout(sig)
        return hlayout, array("d", [x for _, _, acc in parts for x in acc])

    def memo(self, key: tuple[object, ...], compute: Callable[[], object]) -> object:
        """``compute()``, remembered while no page is added and the clock stands still."""
        return self._cached(key, compute)

    def _cached(self, key: tuple[object, ...], compute: Callable[[], object]) -> object:
        stamp = (self._frames[-1].t if self._frames else 0.0, self.now())
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
        while self._frames and (self._frames[0].t < horizon or len(self._frames) > self.max_snapshots):
            self._frames.popleft()
        first = self._frames[0].t if self._frames else math.inf
        while self._restarts and self._restarts[0] <= first:
            self._restarts.popleft()
        while self._events and self._events[0].t is not None and self._events[0].t < horizon:
            self._events.popleft()

    def now(self) -> float:
        return self.clock()

    def slice(self, t0: float, t1: float) -> Window:
        """A window over the snapshots taken in [t0, t1], its clock standing at t1."""
        frames = [f for f in self._frames if t0 <= f.t <= t1]
        w = Window(max_age_s=float("inf"), max_snapshots=max(1, len(frames)), clock=lambda: t1)
        w._frames.extend(frames)
        if frames:
            w._restarts.extend(r for r in self._restarts if frames[0].t < r <= frames[-1].t)
            w._latest = self._latest if self._latest is not None and self._latest.t == frames[-1].t else None
        return w

    # ---------------------------------------------------------------- selection
    def _start(self, seconds: float | None) -> int:
        """Index of the first frame of the last ``seconds``."""
        if seconds is None:
            return 0
        return bisect_left(self._frames, self.now() - seconds, key=lambda f: f.t)

    def _in(self, seconds: float | None) -> list[_Frame]:
        i = self._start(seconds)
        return list(islice(self._frames, i, None)) if i else list(self._frames)

    @property
    def oldest_t(self) -> float | None:
        """The time of the oldest page the window still holds."""
        return self._frames[0].t if self._frames else None

    @property
    def latest(self) -> Snapshot | None:
        if self._latest is not None and self._frames and self._latest.t == self._frames[-1].t:
            return self._latest
        return _snapshot_of(self._frames[-1]) if self._frames else None

    def snapshots(self, seconds: float | None = None) -> list[Snapshot]:
        """Snapshots of the last ``seconds`` (relative to the clock), oldest first, rebuilt from
        the frames: the scalar families (gauges, counters, info) as scraped, and each histogram
        merged over engines as running totals (see ``_snapshot_of``). The plugin's series are left
        out (``latest`` has them; read them with ``quantiles_at``, ``counter_between`` and
        ``counter_steps``): rebuilding them for every page would double the cost."""
        return [_snapshot_of(f, plugin=False) for f in self._in(seconds)]

    def times(self, seconds: float | None = None) -> list[float]:
        return [f.t for f in self._in(seconds)]

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
        i = self._start(seconds)
        n = len(self._frames) - i
        return self._frames[-1].t - self._frames[i].t if n >= 2 else 0.0

    # ---------------------------------------------------------------- counters
    def _ends(self, name: str, seconds: float | None) -> tuple[_Frame, _Frame, int] | None:
        """First and last frame of the window holding a scalar family, and the first's index."""
        i = self._start(seconds)
        n = len(self._frames)
        last = self._frames[-1] if n else None
        if last is None or name not in last.layout.fams:
            last = next((f for f in reversed(self._frames) if name in f.layout.fams), None)
        if last is None:
            return None
        for j in range(i, n):
            f = self._frames[j]
            if name in f.layout.fams:
                return (f, last, j) if f is not last else None
        return None

    @staticmethod
    def _indices(layout: _Layout, name: str, match: Mapping[str, str] | None) -> list[int]:
        k = (name, tuple(sorted(match.items())) if match else None)
        idx = layout.idx.get(k)
        if idx is None:
            _t, start, keys, _ = layout.fams[name]
            idx = layout.idx[k] = [start + i for i, key in enumerate(keys) if labels_match(key, match)]
        return idx

    def counter_delta(
        self, name: str, seconds: float | None = None, match: Mapping[str, str] | None = None
    ) -> float | None:
        """Increase of a counter over the window, summed over matching series; resets
        count from zero. None when the family is absent or fewer than two snapshots."""
        ends = self._ends(name, seconds)
        if ends is None:
            return None
        first, last, i = ends
        if first.layout is last.layout:
            idx = self._indices(last.layout, name, match)
            a0, a1 = first.adj, last.adj
            return sum(a1[j] for j in idx) - sum(a0[j] for j in idx)
        # the series changed inside the window: per series, its first and last frame in it
        first_adj: dict[LabelKey, float] = {}
        last_adj: dict[LabelKey, float] = {}
        for j in range(i, len(self._frames)):
            f = self._frames[j]
            fam = f.layout.fams.get(name)
            if fam is None:
                continue
            _t, start, keys, _ = fam
            for k, key in enumerate(keys):
                if labels_match(key, match):
                    first_adj.setdefault(key, f.adj[start + k])
                    last_adj[key] = f.adj[start + k]
        return sum(last_adj[k] - first_adj[k] for k in last_adj)

    def rate(
        self, name: str, seconds: float | None = None, match: Mapping[str, str] | None = None
    ) -> float | None:
        ends = self._ends(name, seconds)
        if ends is None or ends[1].t <= ends[0].t:
            return None
        delta = self.counter_delta(name, seconds, match)
        return None if delta is None else delta / (ends[1].t - ends[0].t)

    # ---------------------------------------------------------------- histograms
    def histogram_delta(self, name: str, seconds: float | None = None) -> Histogram | None:
        """Bucket increases over the window, all series (engines, models) merged, reset-aware."""
        out = self._cached(("hist", name, seconds), lambda: self._histogram_delta(name, seconds))
        return out if isinstance(out, Histogram) else None

    def _histogram_delta(self, name: str, seconds: float | None) -> Histogram | None:
        i = self._start(seconds)
        frames = [f for f in islice(self._frames, i, None) if name in f.hlayout.fams]
        if len(frames) < 2:
            return None
        first, last = frames[0], frames[-1]
        bounds, s1 = last.hlayout.fams[name]
        b0, s0 = first.hlayout.fams[name]
        n = len(bounds)
        h1 = last.hist[s1 : s1 + n + 2]
        h0 = first.hist[s0 : s0 + len(b0) + 2]
        if b0 == bounds:
            counts = [h1[k] - h0[k] for k in range(n)]
        else:
            start = Histogram(tuple(zip(b0, h0[: len(b0)], strict=True)), 0.0, 0.0)
            counts = [h1[k] - start.cumulative(b) for k, b in enumerate(bounds)]
        return Histogram(tuple(zip(bounds, counts, strict=True)), h1[n] - h0[-2], h1[n + 1] - h0[-1])

    def quantile(self, name: str, q: float, seconds: float | None = None) -> float | None:
        h = self.histogram_delta(name, seconds)
        return h.quantile(q) if h is not None and h.count > 0 else None

    # ---------------------------------------------------------------- summaries (the plugin's)
    def _at(self, t: float | None, name: str) -> int | None:
        """Index of the last frame at or before ``t`` (None: the last) holding ``name``."""
        n = len(self._frames)
        i = n - 1 if t is None else bisect_right(self._frames, t, key=lambda f: f.t) - 1
        while i >= 0 and name not in self._frames[i].layout.fams:
            i -= 1
        return i if i >= 0 else None

    def frame_time(self, t: float | None = None, name: str | None = None) -> float | None:
        """Time of the last page at or before ``t`` (None: the last page), holding ``name``."""
        if not self._frames:
            return None
        if name is None:
            i = len(self._frames) - 1 if t is None else bisect_right(self._frames, t, key=lambda f: f.t) - 1
        else:
            j = self._at(t, name)
            i = -1 if j is None else j
        return self._frames[i].t if i >= 0 else None

    def quantiles_at(
        self, name: str, match: Mapping[str, str] | None = None, t: float | None = None
    ) -> tuple[float, dict[float, float]] | None:
        """A summary's quantile samples (``match``: its labels other than ``quantile``; engines
        merged) on the last page at or before ``t`` (None: the last page) holding the family,
        as (page time, {q: value}); quantiles the page lacks are left out."""
        i = self._at(t, name)
        if i is None:
            return None
        f = self._frames[i]
        k = (name, tuple(sorted(match.items())) if match else None)
        pos = f.layout.qidx.get(k)
        if pos is None:
            _t, start, keys, _ = f.layout.fams[name]
            want = dict(match or {})
            pos = f.layout.qidx[k] = []
            for j, key in enumerate(keys):
                d = dict(key)
                qtext = d.pop(pn.QUANTILE_LABEL, None)
                if qtext is not None and d == want:
                    pos.append((start + j, float(qtext)))
        out: dict[float, float] = {}
        for j, level in pos:
            v = f.raw[j]
            if v == v:
                out[level] = v
        return f.t, out

    def counter_between(
        self, name: str, t0: float, t1: float, match: Mapping[str, str] | None = None
    ) -> float | None:
        """Increase of a counter seen within [t0, t1]: from the first page at or after ``t0`` to
        the last at or before ``t1`` (reset-aware, summed over matching series). A series that
        first appears after that first page counts from zero (the plugin exports a series once it
        has data). None when no page in [t0, t1] holds the family."""
        i1 = self._at(t1, name)
        if i1 is None:
            return None
        i0 = bisect_left(self._frames, t0, key=lambda f: f.t)
        if i0 > i1:
            return None
        if i0 == i1:
            return 0.0
        f0, f1 = self._frames[i0], self._frames[i1]
        idx = self._indices(f1.layout, name, match)
        if f0.layout is f1.layout:
            return sum(f1.adj[j] for j in idx) - sum(f0.adj[j] for j in idx)
        _t, start1, keys1, _ = f1.layout.fams[name]
        fam0 = f0.layout.fams.get(name)
        total = 0.0
        for j in idx:
            key = keys1[j - start1]
            k0 = fam0[3].get(key) if fam0 is not None else None
            if fam0 is not None and k0 is not None:
                total += f1.adj[j] - f0.adj[fam0[1] + k0]
                continue
            # first seen after the first page: from zero, at the first page that has it
            prev = f0.layout
            for i in range(i0 + 1, i1 + 1):
                f = self._frames[i]
                if f.layout is prev:
                    continue
                prev = f.layout
                fam = f.layout.fams.get(name)
                k = fam[3].get(key) if fam is not None else None
                if fam is not None and k is not None:
                    total += f1.adj[j] - (f.adj[fam[1] + k] - f.raw[fam[1] + k])
                    break
        return total

    def counter_steps(
        self, name: str, seconds: float | None = None, match: Mapping[str, str] | None = None
    ) -> list[tuple[float, float, float]]:
        """(t0, t1, increase) of a counter between each two consecutive pages of the last
        ``seconds`` that hold it (reset-aware, summed over matching series). A series new on the
        later page counts from zero, and so does the family on the first page that holds it
        when an earlier page of the window did not (the plugin exports a series once it has
        data): that interval starts at the page before."""
        out: list[tuple[float, float, float]] = []
        prev: _Frame | None = None  # the last page holding the family
        before: _Frame | None = None  # the last page of the window
        for f in self._in(seconds):
            fam = f.layout.fams.get(name)
            if fam is None:
                before = f
                continue
            if prev is not None and prev.layout is f.layout:
                idx = self._indices(f.layout, name, match)
                out.append((prev.t, f.t, sum(f.adj[j] for j in idx) - sum(prev.adj[j] for j in idx)))
            elif prev is not None or before is not None:
                old = prev.layout.fams.get(name) if prev is not None else None
                _t, s1, keys, _ = fam
                d = 0.0
                for k, key in enumerate(keys):
                    if labels_match(key, match):
                        j0 = old[3].get(key) if old is not None else None
                        if prev is not None and old is not None and j0 is not None:
                            d += f.adj[s1 + k] - prev.adj[old[1] + j0]
                        else:
                            d += f.raw[s1 + k]
                start = prev if prev is not None else before
                assert start is not None
                out.append((start.t, f.t, d))
            prev = before = f
        return out

    # ---------------------------------------------------------------- gauges
    def _per_frame(self, name: str, match: Mapping[str, str] | None, agg: str) -> _Series:
        """Per-frame aggregate of a family, extended with the frames added since last asked."""
        key = (name, tuple(sorted(match.items())) if match else None, agg)
        first_seq = self._frames[0].seq if self._frames else self._seq + 1
        s = self._aggs.get(key)
        if s is None or s.first_seq > first_seq:
            s = self._aggs[key] = _Series(first_seq)
        drop = first_seq - s.first_seq
        if drop > 0:
            del s.ts[:drop]
            del s.vals[:drop]
            s.first_seq = first_seq
        for f in islice(self._frames, len(s.vals), None):
            s.ts.append(f.t)
            s.vals.append(self._frame_value(f, name, match, agg))
        return s

    def _frame_value(self, f: _Frame, name: str, match: Mapping[str, str] | None, agg: str) -> float | None:
        if name not in f.layout.fams:
            return None
        idx = self._indices(f.layout, name, match)
        if not idx:
            return None
        raw = f.raw
        if agg == "max":
            return max(raw[j] for j in idx)
        total = sum(raw[j] for j in idx)
        return total / len(idx) if agg == "mean" else total

    def _values(
        self, name: str, seconds: float | None, match: Mapping[str, str] | None, agg: str
    ) -> tuple[_Series, int]:
        s = self._per_frame(name, match, agg)
        i = 0 if seconds is None else bisect_left(s.ts, self.now() - seconds)
        return s, i

    def gauge_series(
        self,
        name: str,
        seconds: float | None = None,
        match: Mapping[str, str] | None = None,
        agg: str = "total",
    ) -> list[tuple[float, float]]:
        """(t, value) per snapshot; engines aggregated by ``total`` (counts), ``mean``
        (ratios) or ``max`` (the highest engine)."""
        s, i = self._values(name, seconds, match, agg)
        return [(t, v) for t, v in zip(s.ts[i:], s.vals[i:], strict=True) if v is not None]

    def gauge_avg(
        self, name: str, seconds: float | None = None, agg: str = "total", **kw: str
    ) -> float | None:
        s, i = self._values(name, seconds, kw or None, agg)
        vals = [v for v in s.vals[i:] if v is not None]
        return sum(vals) / len(vals) if vals else None

    def gauge_max(
        self, name: str, seconds: float | None = None, agg: str = "total", **kw: str
    ) -> float | None:
        s, i = self._values(name, seconds, kw or None, agg)
        vals = [v for v in s.vals[i:] if v is not None]
        return max(vals) if vals else None

    def totals(self, name: str, seconds: float | None = None) -> list[tuple[float, float | None]]:
        """(t, sum over series) per snapshot, None where the page lacked the family."""
        s, i = self._values(name, seconds, None, "total")
        return list(zip(s.ts[i:], s.vals[i:], strict=True))

    # ---------------------------------------------------------------- restarts
    def restart_times(self, seconds: float | None = None) -> list[float]:
        """Times of snapshots taken after a server restart: the API server's
        ``process_start_time_seconds`` changed, or request counters went down (detected once,
        when each page was added)."""
        i = self._start(seconds)
        if i >= len(self._frames):
            return []
        first = self._frames[i].t
        return [t for t in self._restarts if t > first]


def _total(f: _Frame, name: str) -> float | None:
    fam = f.layout.fams.get(name)
    if fam is None or not fam[2]:
        return None
    start = fam[1]
    return sum(f.raw[start : start + len(fam[2])])


def _restarted(prev: _Frame, cur: _Frame) -> bool:
    a, b = _total(prev, START_TIME), _total(cur, START_TIME)
    if a is not None and b is not None and abs(a - b) > 1.0:
        return True
    for name in RESTART_COUNTERS:
        a, b = _total(prev, name), _total(cur, name)
        if a is not None and b is not None and b < a:
            return True
    return False


def _snapshot_of(f: _Frame, plugin: bool = True) -> Snapshot:
    """A frame as a Snapshot: the scalar series as scraped, and each histogram as ONE series
    (every engine and model merged) of running, reset-aware totals since the window's first
    page, so that the difference of two snapshots' histograms is the increase between them."""
    fams: dict[str, Family] = {}
    for name, (typ, start, keys, _) in f.layout.fams.items():
        if not plugin and name.startswith(pn.PREFIX):
            continue
        series: dict[LabelKey, Any] = {k: f.raw[start + i] for i, k in enumerate(keys)}
        fams[name] = Family(name=name, type=typ, help="", series=series)
    for name, (bounds, start) in f.hlayout.fams.items():
        n = len(bounds)
        h = f.hist[start : start + n + 2]
        merged = Histogram(tuple(zip(bounds, h[:n], strict=True)), h[n], h[n + 1])
        fams[name] = Family(name=name, type="histogram", help="", series={(): merged})
    return Snapshot(t=f.t, families=fams)


def _pairs(snaps: list[Snapshot]) -> Iterator[tuple[Snapshot, Snapshot]]:
    return pairwise(snaps)


def family_of(snapshot: Snapshot, name: str) -> Family | None:
    return snapshot.families.get(name)
