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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice, pairwise
from typing import Any

from advisor.core import names
from advisor.core.model import (
    Family,
    Histogram,
    LabelKey,
    LogEvent,
    ParseWarning,
    Snapshot,
    Summary,
    labels_match,
)
from advisor.plugin import names as pn

Clock = Callable[[], float]

# Counters whose going down (all of them) means the server restarted.
RESTART_COUNTERS = ("vllm:request_success", "vllm:generation_tokens", "vllm:prompt_tokens")
START_TIME = "process_start_time_seconds"
# What the frames may hold in all: scalar series values (and, for a frame whose series differ
# from the one before, as much again for their labels) plus histogram numbers. A 16-engine page
# costs ~1,500 a frame (1.5 M for 1,000 frames); labels that change on every page (a new series
# per page) would otherwise grow the window to frames x series: past this, the oldest go.
MAX_CELLS = 4_000_000
BAD_SAMPLES_KEPT = 5_000  # bad samples remembered (their time and what was wrong)
KEY_COST = 12  # a series' labels cost about this many cells in a frame whose series are new
MAX_REMEMBERED = 8_192  # last readings remembered per family of series no longer on the page


# The stat-logger plugin's families the window keeps (advisor/plugin, docs/plugin.md): the
# request summaries (not the step-duration one: the fit sums carry the steps), every counter,
# and the identity gauges. Their ``engine`` label is merged away (counters summed, quantiles
# the highest engine's): a frame holds as many plugin numbers for 16 engines as for one.
PLUGIN_SUMMARIES = tuple(n for n in pn.SUMMARY_NAMES if n != pn.STEP_DURATION)
PLUGIN_GAUGES = pn.GAUGE_NAMES
_PLUGIN_KEEP = frozenset((*PLUGIN_SUMMARIES, *pn.COUNTER_NAMES, *PLUGIN_GAUGES))
COUNT_SUFFIX, SUM_SUFFIX = "_count", "_sum"
"""A plugin summary ``X`` is kept as the counters ``X_count`` and ``X_sum`` (running sums like
every counter) and ``X`` itself: its quantile samples, one series per (labels, ``quantile``)."""


def slim(snapshot: Snapshot) -> Snapshot:
    """Drop families the advisor never reads (``names.READ_FAMILIES`` and the plugin's
    ``pn.READ_FAMILIES``: a page parsed by sources/metrics.py has none left; one rebuilt from
    Prometheus may)."""
    fams = {n: f for n, f in snapshot.families.items() if n in names.READ_FAMILIES or n in _PLUGIN_KEEP}
    return Snapshot(t=snapshot.t, families=fams, warnings=snapshot.warnings, skipped=snapshot.skipped)


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
    __slots__ = ("adj", "cost", "hist", "hlayout", "layout", "raw", "seq", "t")

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
        self.cost = len(raw) + len(hist)  # MAX_CELLS (+ the labels of a new layout: _frame)


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
        # per series: bounds, counts (+ count, sum), the reading before, the increase it added
        self._hlast: dict[str, dict[LabelKey, _HSeries]] = {}
        self._hacc: dict[str, tuple[tuple[float, ...], list[float]]] = {}
        # the last reading of each scalar series when the series last changed (see _adj_slow)
        self._last: dict[str, dict[LabelKey, tuple[int, float, float]]] = {}
        self._family_seq: dict[str, int] = {}  # the last frame holding each scalar family
        self._held: dict[tuple[str, LabelKey], int] = {}  # series whose reading was held (went_down)
        self._cells = 0
        self._bad: deque[tuple[float, ParseWarning]] = deque(maxlen=BAD_SAMPLES_KEPT)
        self._aggs: dict[tuple[object, ...], _Series] = {}
        # quantile series of the plugin's summaries seen so far, per family, in a fixed order:
        # a page whose window lacks some of them gets NaN there, so the layout does not churn
        self._qknown: dict[str, dict[LabelKey, None]] = {}
        # memo of derived values, valid while no snapshot is added and the clock stands still
        self._memo: dict[tuple[object, ...], object] = {}
        self._memo_at: tuple[float, float] | None = None

    # ---------------------------------------------------------------- input
    def add_snapshot(self, snapshot: Snapshot) -> list[ParseWarning]:
        """Add a page. Returns the bad samples only a sequence of pages shows (a counter that went
        down although the engine did not restart, a one-page spike, labels that change on every
        page); they and the page's own warnings are remembered (:meth:`bad_samples`)."""
        if self._frames and snapshot.t < self._frames[-1].t:
            return []  # out of order: ignore rather than corrupt deltas
        snap = self._plugin(slim(snapshot))
        prev = self._frames[-1] if self._frames else None
        found: list[ParseWarning] = []
        frame, restarted = self._frame(snap, prev, found)
        if restarted:
            self._restarts.append(frame.t)
        self._frames.append(frame)
        self._cells += frame.cost
        self._latest = snap
        self._memo.clear()
        for w in (*snapshot.warnings, *found):
            self._bad.append((snap.t, w))
        self._expire()
        return found

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
        return Snapshot(t=snap.t, families=fams, warnings=snap.warnings, skipped=snap.skipped)

    def add_bad_samples(self, t: float, warnings: Sequence[ParseWarning]) -> None:
        """Readings not read that came beside the pages, at ``t`` (a sidecar's knob series
        from Prometheus): remembered and named like a page's own."""
        for w in warnings:
            self._bad.append((t, w))
        if warnings:
            self._memo.clear()

    def bad_samples(self, seconds: float | None = None) -> list[ParseWarning]:
        """What was not read (model.BAD_SAMPLE_KINDS) on the pages of the last ``seconds``."""
        horizon = -math.inf if seconds is None else self.now() - seconds
        first = self._frames[0].t if self._frames else math.inf
        return [w for t, w in self._bad if t >= horizon and t >= first]

    def _frame(self, snap: Snapshot, prev: _Frame | None, found: list[ParseWarning]) -> tuple[_Frame, bool]:
        scal = [  # a family with no series read (all of them bad samples) is not on the page
            (n, f)
            for n, f in snap.families.items()
            if f.type not in ("histogram", "gaugehistogram")
            and f.series
            and not any(isinstance(v, Histogram) for v in f.series.values())
        ]
        sig = tuple((n, f.type, tuple(k for k, v in f.series.items() if _number(v))) for n, f in scal)
        layout = prev.layout if prev is not None and prev.layout.sig == sig else _Layout(sig)
        raw = array("d", [float(v) for _, f in scal for v in f.series.values() if _number(v)])
        restarted = prev is not None and _restarted(prev, layout, raw)
        # a counter that goes down is a restart only where nothing says the engine kept running
        continuity = prev is not None and not restarted and _continued(prev, layout, raw)
        if prev is not None and prev.layout is layout:
            adj = array(
                "d", [a + (c - p if c >= p else c) for a, c, p in zip(prev.adj, raw, prev.raw, strict=True)]
            )
        else:
            adj = self._adj_slow(layout, raw, prev)
            if prev is not None and not restarted:
                self._churn(prev.layout, layout, found)
        if continuity and prev is not None:
            self._repair(prev, layout, raw, adj, found)
        hlayout, hist = self._histograms(snap, prev, continuity, found)
        self._seq += 1
        frame = _Frame(self._seq, snap.t, layout, raw, adj, hlayout, hist)
        if prev is None or prev.layout is not layout:
            frame.cost += KEY_COST * layout.size
        return frame, restarted

    def _adj_slow(self, layout: _Layout, raw: array[float], prev: _Frame | None) -> array[float]:
        """Running sums when the series changed: per family, against the last frame holding it;
        a series not in that frame but seen earlier in the window starts from its last running
        sum (the increase while it was away is not counted), a new one from its value. The last
        reading of every series is folded in here (``_last``), so each is found in O(1) whatever
        the labels did (a family whose labels change on every page cost a scan of every frame
        per new series)."""
        if prev is not None:
            self._fold(prev)
        first_seq = self._frames[0].seq if self._frames else self._seq + 1
        adj = array("d", raw)
        for name, (_typ, start, keys, _index) in layout.fams.items():
            known = self._last.get(name, {})
            fam_seq = self._family_seq.get(name)
            for i, key in enumerate(keys):
                got = known.get(key)
                if got is None or got[0] < first_seq:
                    continue  # new (or last seen before the window): from its value
                seq, p, a = got
                cur = raw[start + i]
                adj[start + i] = a + (cur - p if cur >= p else cur) if seq == fam_seq else a
        return adj

    def _fold(self, f: _Frame) -> None:
        """Remember the last reading of every scalar series of frame ``f`` (before a change)."""
        first_seq = self._frames[0].seq if self._frames else f.seq
        for name, (_typ, start, keys, _index) in f.layout.fams.items():
            known = self._last.setdefault(name, {})
            for i, key in enumerate(keys):
                known[key] = (f.seq, f.raw[start + i], f.adj[start + i])
            self._family_seq[name] = f.seq
            if len(known) > 2 * len(keys) + 1024:  # series gone from the window: forgotten
                kept = {k: v for k, v in known.items() if v[0] >= first_seq}
                if len(kept) > MAX_REMEMBERED:  # labels that change: the most recent only
                    recent = sorted(kept.items(), key=lambda kv: kv[1][0])[-MAX_REMEMBERED:]
                    kept = dict(recent)
                self._last[name] = kept

    def _churn(self, before: _Layout, after: _Layout, found: list[ParseWarning]) -> None:
        """Labels that change: most of a family's series new on this page, many of them."""
        for name, (_typ, _start, keys, _index) in after.fams.items():
            old = before.fams.get(name)
            if old is None or len(keys) < 16:
                continue
            new = sum(1 for k in keys if k not in old[3])
            if new >= 16 and new * 2 >= len(keys):
                found.append(
                    ParseWarning(
                        name,
                        None,
                        f"{new} of its {len(keys)} series are new on this page (labels that change "
                        "on every page): rates of them are unknown",
                        "label_churn",
                    )
                )

    def _repair(
        self, prev: _Frame, layout: _Layout, raw: array[float], adj: array[float], found: list[ParseWarning]
    ) -> None:
        """Counters that went down while the engine kept running (``_continued``): not a restart.

        A reading between two lower ones was a spike: the earlier page's reading is taken back
        (as if that page had not shown the series). A reading below the one before is left out
        and the series held; if the next page is lower still, the series restarted after all
        (counted from zero, as PromQL does). Each is a bad sample."""
        before = self._frames[-2] if len(self._frames) >= 2 else None
        for name, (typ, start, keys, _index) in layout.fams.items():
            if typ != "counter" and name not in names.COUNTERS:
                continue
            pf = prev.layout.fams.get(name)
            if pf is None:
                continue
            p_start, p_index = pf[1], pf[3]
            bf = before.layout.fams.get(name) if before is not None else None
            touched = False
            for i, key in enumerate(keys):
                j = p_index.get(key)
                if j is None:
                    continue
                c, p = raw[start + i], prev.raw[p_start + j]
                if c >= p:
                    self._held.pop((name, key), None)
                    continue
                touched = True
                k = bf[3].get(key) if bf is not None else None
                q = before.raw[bf[1] + k] if before is not None and bf is not None and k is not None else None
                if q is not None and before is not None and bf is not None and k is not None and q <= c:
                    qa = before.adj[bf[1] + k]
                    prev.raw[p_start + j], prev.adj[p_start + j] = q, qa
                    adj[start + i] = qa + (c - q)
                    found.append(
                        ParseWarning(
                            name,
                            None,
                            f"{p:g} on one page between {q:g} and {c:g} (the engine did not restart): "
                            "that reading left out",
                            "spike",
                        )
                    )
                    continue
                if self._held.pop((name, key), 0):
                    adj[start + i] = prev.adj[p_start + j] + c  # lower again: that series restarted
                    what = "lower again: read as a reset of that series"
                else:
                    self._held[(name, key)] = 1
                    raw[start + i], adj[start + i] = p, prev.adj[p_start + j]
                    what = "that reading left out"
                found.append(
                    ParseWarning(
                        name,
                        None,
                        f"went down from {p:g} to {c:g} while the engine did not restart: {what}",
                        "went_down",
                    )
                )
            if touched:
                for agg_key in [k for k in self._aggs if k[0] == name]:
                    del self._aggs[agg_key]  # the earlier frame's reading may have changed

    def _histograms(
        self,
        snap: Snapshot,
        prev: _Frame | None,
        continuity: bool = False,
        found: list[ParseWarning] | None = None,
    ) -> tuple[_HLayout, array[float]]:
        """Merge each histogram family's reset-aware bucket increases into its running sum. With
        ``continuity`` (the engine did not restart), a series whose counts go down is a bad
        sample, handled as :meth:`_repair` handles counters (a spike taken back, a lower reading
        held once)."""
        parts: list[tuple[str, tuple[float, ...], list[float]]] = []
        for name, fam in snap.families.items():
            if fam.type not in ("histogram", "gaugehistogram") and not any(
                isinstance(v, Histogram) for v in fam.series.values()
            ):
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
                acc_bounds, acc = entry
                p = last.get(key)
                if p is None:
                    last[key] = _HSeries(bounds, counts, None, None, self._seq + 1)
                    continue  # a series' first reading is its baseline
                inc = counts
                if bounds == p.bounds and h.count >= p.counts[-2]:
                    inc = [c - pc for c, pc in zip(counts, p.counts, strict=True)]
                    if min(inc[:-1]) >= 0:
                        p.held = False
                    else:
                        inc = counts  # a bucket went down: a reset after all
                went_down = inc is counts
                if went_down and continuity and bounds == p.bounds:
                    applied = self._histogram_went_down(name, key, p, counts, entry, prev, found)
                    if applied is not None:
                        continue
                applied_inc = _to_acc(bounds, inc, acc_bounds)
                acc[:] = [a + x for a, x in zip(acc, applied_inc, strict=True)]
                last[key] = _HSeries(bounds, counts, p.counts, applied_inc, self._seq + 1)
            if len(last) > 2 * len(fam.series) + 64:  # series gone: forgotten (labels that change)
                keep = set(fam.series)
                self._hlast[name] = {k: v for k, v in last.items() if k in keep}
            if entry is not None:
                parts.append((name, entry[0], entry[1]))
        sig = tuple((n, b) for n, b, _ in parts)
        hlayout = prev.hlayout if prev is not None and prev.hlayout.sig == sig else _HLayout(sig)
        return hlayout, array("d", [x for _, _, acc in parts for x in acc])

    def _histogram_went_down(
        self,
        name: str,
        key: LabelKey,
        p: _HSeries,
        counts: list[float],
        entry: tuple[tuple[float, ...], list[float]],
        prev: _Frame | None,
        found: list[ParseWarning] | None,
    ) -> bool | None:
        """A histogram series whose counts went down while the engine kept running. Returns
        True when handled (a spike taken back, or the reading held), None to count it as a
        reset (lower a second time)."""
        acc_bounds, acc = entry
        before = p.before
        note = found if found is not None else []
        if (
            before is not None
            and p.applied is not None
            and prev is not None
            and p.seq == prev.seq  # read by the page just before: its frame holds the increase
            and len(before) == len(counts)
            and all(c >= b for c, b in zip(counts[:-1], before[:-1], strict=True))
        ):
            # the previous reading was a spike: take its increase back, here and in that frame
            acc[:] = [a - x for a, x in zip(acc, p.applied, strict=True)]
            if prev is not None and name in prev.hlayout.fams:
                hb, off = prev.hlayout.fams[name]
                if hb == acc_bounds:
                    for i, x in enumerate(p.applied):
                        prev.hist[off + i] -= x
            inc = [c - b for c, b in zip(counts, before, strict=True)]
            applied = _to_acc(p.bounds, inc, acc_bounds)
            acc[:] = [a + x for a, x in zip(acc, applied, strict=True)]
            self._hlast[name][key] = _HSeries(p.bounds, counts, before, applied, self._seq + 1)
            note.append(
                ParseWarning(
                    name,
                    None,
                    "counts jumped on one page and came back (the engine did not restart): "
                    "that reading left out",
                    "spike",
                )
            )
            self._memo.clear()
            return True
        if not p.held:
            p.held = True  # held: the next reading is compared with the one before this
            note.append(
                ParseWarning(
                    name,
                    None,
                    "counts went down while the engine did not restart: that reading left out",
                    "went_down",
                )
            )
            return True
        note.append(
            ParseWarning(name, None, "counts went down again: read as a reset of that series", "went_down")
        )
        return None

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
        while self._frames and (
            self._frames[0].t < horizon
            or len(self._frames) > self.max_snapshots
            or (self._cells > MAX_CELLS and len(self._frames) > 2)
        ):
            self._cells -= self._frames.popleft().cost
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
        return _hist_diff(frames[0], frames[-1], name)

    def trailing_histograms(
        self, name: str, span_s: float, at: set[float] | None = None, seconds: float | None = None
    ) -> list[tuple[float, Histogram]]:
        """(t, bucket increases over the ``span_s`` before t) at each page of the last ``seconds``
        holding the family (``at``: only at these page times): from the first such page at or
        after ``t - span_s``; none where that is the page itself. One pass over the pages."""
        frames = [f for f in self._in(seconds) if name in f.hlayout.fams]
        out: list[tuple[float, Histogram]] = []
        j = 0
        for i, f in enumerate(frames):
            while frames[j].t < f.t - span_s:
                j += 1
            if j < i and (at is None or f.t in at):
                out.append((f.t, _hist_diff(frames[j], f, name)))
        return out

    def trailing_rates(
        self, name: str, span_s: float, at: set[float] | None = None, seconds: float | None = None
    ) -> list[tuple[float, float]]:
        """(t, a counter's rate over the ``span_s`` before t, summed over its series) at each page
        of the last ``seconds`` holding it (``at``: only at these page times), as
        :meth:`counter_between` counts it. One pass over the pages."""
        frames = [f for f in self._in(seconds) if name in f.layout.fams]

        def total(f: _Frame) -> float:
            return sum(f.adj[k] for k in self._indices(f.layout, name, None))

        out: list[tuple[float, float]] = []
        j = 0
        for i, f in enumerate(frames):
            while frames[j].t < f.t - span_s:
                j += 1
            if j >= i or (at is not None and f.t not in at):
                continue
            f0 = frames[j]
            if f0.layout is f.layout:
                inc: float | None = total(f) - total(f0)
            else:  # the series changed within the span
                inc = self.counter_between(name, f0.t, f.t)
            if inc is not None:
                out.append((f.t, inc / (f.t - f0.t)))
        return out

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


def _hist_diff(first: _Frame, last: _Frame, name: str) -> Histogram:
    """A histogram family's bucket increases from frame ``first`` to frame ``last`` (both hold it)."""
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


def _number(v: object) -> bool:
    return isinstance(v, float | int) and not isinstance(v, bool)


class _HSeries:
    """The last reading of one histogram series: its bounds, counts (then count, sum), the
    reading before it and the increase it added to the family's running sum (in the family's
    bounds), and whether a lower reading is being held."""

    __slots__ = ("applied", "before", "bounds", "counts", "held", "seq")

    def __init__(
        self,
        bounds: tuple[float, ...],
        counts: list[float],
        before: list[float] | None,
        applied: list[float] | None,
        seq: int,
    ) -> None:
        self.bounds = bounds
        self.counts = counts
        self.before = before
        self.applied = applied
        self.held = False
        self.seq = seq  # the frame that read it


def _to_acc(bounds: tuple[float, ...], inc: list[float], acc_bounds: tuple[float, ...]) -> list[float]:
    """An increase in a series' bounds -> in the family's (other bounds: a step function)."""
    if bounds == acc_bounds:
        return inc
    step = Histogram(tuple(zip(bounds, inc, strict=False)), 0.0, 0.0)
    return [step.cumulative(b) for b in acc_bounds] + inc[-2:]


def _total(f: _Frame, name: str) -> float | None:
    return _layout_total(f.layout, f.raw, name)


def _layout_total(layout: _Layout, raw: array[float], name: str) -> float | None:
    fam = layout.fams.get(name)
    if fam is None or not fam[2]:
        return None
    start = fam[1]
    return sum(raw[start : start + len(fam[2])])


def _restarted(prev: _Frame, layout: _Layout, raw: array[float]) -> bool:
    """The engine restarted between ``prev`` and this page: its process start time moved, or
    (where the page shows none) every request counter went down."""
    a, b = _total(prev, START_TIME), _layout_total(layout, raw, START_TIME)
    if a is not None and b is not None:
        return abs(a - b) > 1.0
    seen = down = 0
    for name in RESTART_COUNTERS:
        a, b = _total(prev, name), _layout_total(layout, raw, name)
        if a is not None and b is not None:
            seen += 1
            down += b < a
    return seen > 0 and down == seen


def _continued(prev: _Frame, layout: _Layout, raw: array[float]) -> bool:
    """Something says the engine kept running between ``prev`` and this page: the same process
    start time, or a request counter that did not go down. Then a counter going down is a bad
    sample, not a restart; with nothing to say either way, it counts from zero (PromQL)."""
    a, b = _total(prev, START_TIME), _layout_total(layout, raw, START_TIME)
    if a is not None and b is not None:
        return abs(a - b) <= 1.0
    for name in RESTART_COUNTERS:
        a, b = _total(prev, name), _layout_total(layout, raw, name)
        if a is not None and b is not None and b >= a:
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
