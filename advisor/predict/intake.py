"""What the performance model fits from, taken page by page: one row of facts per busy interval
between two pages (steps, decode and prefill tokens per step, batch, queue, KV use, preemptions,
finished requests), appended as each page arrives and expired with the window. Beside the rows,
every interval's arrivals, busy or idle (:class:`Tally`): open arrivals' rate and burstiness are
counted over all of them.

Every row also adds to running sums (the sums the model's means and its least-squares step-time
fit are made of), kept as prefix sums: the aggregate over any span of the window is the
difference of two of them, found by bisection. So the model is fitted from its sums, never by
rescanning the pages, and the cost of a fit does not depend on the window's length.

Pure: no I/O, no clock of its own (the caller's clock decides what has expired).
"""

from __future__ import annotations

import itertools
import math
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from advisor.core import names as n
from advisor.core.model import Snapshot

# A row's terms, in the order of its vector. The fit's x is either the KV tokens the decodes
# read (KV use; scaled by the cache size at fit time) or the decode tokens per step; rows
# without a KV reading use the decode tokens even where the others use the KV.
TERMS = (
    # the model's means (over the rows of a subset)
    "rows",
    "dt",
    "steps",
    "dt_running",
    "decode_steps",
    "prefill_steps",
    "preemptions",
    "finished",
    "kv_dt",  # dt of the rows with a KV reading and a batch
    "kv_per_running_dt",  # kv use / running x dt, those rows
    # the fit, weighted by steps: w, w*t, w*p, w*p*p, w*p*t
    "w",
    "wt",
    "wp",
    "wpp",
    "wpt",
    # ... with x = the decode tokens per step (every row)
    "wd",
    "wdd",
    "wdp",
    "wdt",
    # ... with x = the KV use (rows with a KV reading), and the decode terms of those rows
    "wk",
    "wkk",
    "wkp",
    "wkt",
    "kd_wd",
    "kd_wdd",
    "kd_wdp",
    "kd_wdt",
    # unweighted, for the fit's R^2: 1, t, t*t, p, p*p, p*t; d, d*d, d*p, d*t; k, k*k, k*p, k*t;
    # and the decode terms of the KV rows
    "u",
    "ut",
    "utt",
    "up",
    "upp",
    "upt",
    "ud",
    "udd",
    "udp",
    "udt",
    "uk",
    "ukk",
    "ukp",
    "ukt",
    "kd_ud",
    "kd_udd",
    "kd_udp",
    "kd_udt",
)
_IX = {name: i for i, name in enumerate(TERMS)}
QUEUED = 0.5  # requests waiting per engine (interval mean) for an interval to count as queued


@dataclass(frozen=True)
class Row:
    """One busy interval between two pages, per engine."""

    t: float  # the later page's time
    dt: float
    steps: float
    decode: float  # decode tokens per step
    prefill: float  # prefill tokens per step
    running: float
    waiting: float
    kv_usage: float | None
    preemptions: float
    finished: float
    engines: int
    # waiting + running per engine at the earlier and the later page (running and waiting above
    # are the two pages' mean, for the fit; the arrivals are counted between the pages
    # themselves, advisor/predict/workload.py). None: not known (rows made elsewhere)
    in_system_start: float | None = None
    in_system_end: float | None = None

    @property
    def queued(self) -> bool:
        return self.waiting >= QUEUED

    @property
    def in_system(self) -> float:
        return self.running + self.waiting

    def terms(self) -> list[float]:
        t = self.dt / self.steps
        w, p, d = self.steps, self.prefill, self.decode
        v = [0.0] * len(TERMS)

        def put(name: str, x: float) -> None:
            v[_IX[name]] = x

        put("rows", 1.0)
        put("dt", self.dt)
        put("steps", w)
        put("dt_running", self.dt * self.running)
        put("decode_steps", d * w)
        put("prefill_steps", p * w)
        put("preemptions", self.preemptions)
        put("finished", self.finished)
        for name, x in (("w", w), ("wt", w * t), ("wp", w * p), ("wpp", w * p * p), ("wpt", w * p * t)):
            put(name, x)
        for name, x in (("wd", w * d), ("wdd", w * d * d), ("wdp", w * d * p), ("wdt", w * d * t)):
            put(name, x)
        for name, x in (("u", 1.0), ("ut", t), ("utt", t * t), ("up", p), ("upp", p * p), ("upt", p * t)):
            put(name, x)
        for name, x in (("ud", d), ("udd", d * d), ("udp", d * p), ("udt", d * t)):
            put(name, x)
        k = self.kv_usage
        if k is not None:
            if self.running > 0:
                put("kv_dt", self.dt)
                put("kv_per_running_dt", k / self.running * self.dt)
            for name, x in (("wk", w * k), ("wkk", w * k * k), ("wkp", w * k * p), ("wkt", w * k * t)):
                put(name, x)
            for name, x in (("uk", k), ("ukk", k * k), ("ukp", k * p), ("ukt", k * t)):
                put(name, x)
            for name, x in (
                ("kd_wd", w * d),
                ("kd_wdd", w * d * d),
                ("kd_wdp", w * d * p),
                ("kd_wdt", w * d * t),
                ("kd_ud", d),
                ("kd_udd", d * d),
                ("kd_udp", d * p),
                ("kd_udt", d * t),
            ):
                put(name, x)
        return v


class Sums:
    """The terms of a span of rows, summed (``sums["dt"]``)."""

    __slots__ = ("_v",)

    def __init__(self, v: Iterable[float]) -> None:
        self._v = list(v)

    def __getitem__(self, name: str) -> float:
        return self._v[_IX[name]]

    def moved(self, was: Sequence[Row], now: Sequence[Row]) -> Sums:
        """These sums with the rows ``was`` counted as ``now`` instead (the same rows, changed)."""
        v = list(self._v)
        for a, b in zip(was, now, strict=True):
            for i, (x, y) in enumerate(zip(a.terms(), b.terms(), strict=True)):
                v[i] += y - x
        return Sums(v)


def row_between(prev: Snapshot, cur: Snapshot) -> Row | None:
    """The facts of the interval between two consecutive pages; None unless it was busy
    (requests running at both ends and tokens generated). Counters that went down (a restart)
    count from zero."""
    dt = cur.t - prev.t
    if dt <= 0:
        return None
    r0, r1 = prev.total(n.NUM_RUNNING), cur.total(n.NUM_RUNNING)
    if not r0 or not r1:
        return None
    gen = _delta(prev, cur, n.GENERATION_TOKENS)
    if gen is None or gen <= 0:
        return None
    e = max(1, len(cur.label_values(n.ENGINE_LABEL)))
    it = _count_sum_delta(prev, cur, n.ITERATION_TOKENS)
    running = (r0 + r1) / 2 / e
    if it is not None and it[0] > 0:
        steps, total = it[0] / e, it[1] / e
    else:  # no step counter: every running request decodes one token a step, and computes its
        # prompt less what it found in the prefix cache
        steps = gen / e / max(running, 1.0)
        prompt = (_delta(prev, cur, n.PROMPT_TOKENS) or 0.0) - (_delta(prev, cur, n.PREFIX_CACHE_HITS) or 0.0)
        total = (gen + max(0.0, prompt)) / e
    if steps <= 0:
        return None
    decode = gen / e / steps
    w0, w1 = prev.total(n.NUM_WAITING) or 0.0, cur.total(n.NUM_WAITING) or 0.0
    k0, k1 = prev.mean(n.KV_CACHE_USAGE), cur.mean(n.KV_CACHE_USAGE)
    return Row(
        t=cur.t,
        dt=dt,
        steps=steps,
        decode=decode,
        prefill=max(0.0, total / steps - decode),
        running=running,
        waiting=(w0 + w1) / 2 / e,
        kv_usage=(k0 + k1) / 2 if k0 is not None and k1 is not None else None,
        preemptions=max(0.0, _delta(prev, cur, n.NUM_PREEMPTIONS) or 0.0) / e,
        finished=max(0.0, _delta(prev, cur, n.REQUEST_SUCCESS) or 0.0) / e,
        engines=e,
        in_system_start=(r0 + w0) / e,
        in_system_end=(r1 + w1) / e,
    )


@dataclass(frozen=True, slots=True)
class Tally:
    """The requests that arrived (all engines) between two consecutive pages, busy or not:
    finished + the change of waiting + running between the pages. Open arrivals are counted
    over every interval, the idle ones between bursts included (a bursty load that its server
    drains between scrapes has few busy intervals: their rate alone is the bursts')."""

    t: float  # the later page's time
    dt: float
    arrived: float
    engines: int


def arrivals_between(prev: Snapshot, cur: Snapshot) -> Tally | None:
    """The interval's tally; None where a page lacks the gauges or the finished counter."""
    dt = cur.t - prev.t
    if dt <= 0:
        return None
    ends = []
    for snap in (prev, cur):
        running, waiting = snap.total(n.NUM_RUNNING), snap.total(n.NUM_WAITING)
        if running is None:
            return None
        ends.append(running + (waiting or 0.0))
    finished = _delta(prev, cur, n.REQUEST_SUCCESS)
    if finished is None:
        return None
    e = max(1, len(cur.label_values(n.ENGINE_LABEL)))
    return Tally(cur.t, dt, max(0.0, finished + ends[1] - ends[0]), e)


def tallies_of(snapshots: Sequence[Snapshot]) -> list[Tally]:
    """Every interval's tally of consecutive pages (the open arrivals are fitted from them)."""
    return [x for a, b in itertools.pairwise(snapshots) if (x := arrivals_between(a, b)) is not None]


def rows_of(snapshots: Sequence[Snapshot]) -> list[Row]:
    """The busy rows of consecutive pages (the simulator's load is fitted from them)."""
    return [r for a, b in itertools.pairwise(snapshots) if (r := row_between(a, b)) is not None]


def _delta(a: Snapshot, b: Snapshot, name: str) -> float | None:
    x, y = a.total(name), b.total(name)
    if x is None or y is None:
        return None
    return y - x if y >= x else y


def _count_sum_delta(a: Snapshot, b: Snapshot, name: str) -> tuple[float, float] | None:
    """A histogram's (count, sum) increase between two pages (after a reset: since it)."""
    x, y = a.histogram(name), b.histogram(name)
    if x is None or y is None:
        return None
    if y.count < x.count:
        return y.count, y.sum
    return y.count - x.count, y.sum - x.sum


class _Prefix:
    """Prefix sums of the rows' terms (one subset), with the rows' start and end times, expiring
    from the left."""

    __slots__ = ("_off", "cum", "ends", "rows", "starts")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.rows: list[Row] = []  # the rows themselves (the simulator's load is fitted from them)
        self.cum: list[array[float]] = [array("d", [0.0] * len(TERMS))]
        self._off = 0  # rows dropped from the front (kept until compacted)

    def add(self, row: Row, terms: list[float]) -> None:
        last = self.cum[-1]
        self.starts.append(row.t - row.dt)
        self.ends.append(row.t)
        self.rows.append(row)
        self.cum.append(array("d", [a + b for a, b in zip(last, terms, strict=True)]))

    def drop_before(self, horizon: float) -> None:
        """Forget the rows that started before ``horizon`` (their first page left the window)."""
        self._off = bisect_left(self.starts, horizon, lo=self._off)
        if self._off > 256 and self._off * 2 > len(self.starts):
            del self.starts[: self._off]
            del self.ends[: self._off]
            del self.rows[: self._off]
            del self.cum[: self._off]
            self._off = 0

    def between(self, t0: float, t1: float) -> tuple[Sums, int, tuple[Row, ...]]:
        """The rows between two pages taken in [t0, t1]: their sums, their count, the rows."""
        i = bisect_left(self.starts, t0, lo=self._off)
        j = max(i, bisect_right(self.ends, t1, lo=self._off))
        a, b = self.cum[i], self.cum[j]
        return Sums(y - x for x, y in zip(a, b, strict=True)), j - i, tuple(self.rows[i:j])

    def __len__(self) -> int:
        return len(self.starts) - self._off


class _RunningMax:
    """The highest value over a span of a time series: a monotonic stack (bisected) answers a
    span that reaches the last point; an earlier span (an experiment's before-window) is scanned."""

    __slots__ = ("stack_t", "stack_v", "ts", "vs")

    def __init__(self) -> None:
        self.ts: list[float] = []
        self.vs: list[float] = []
        self.stack_t: list[float] = []
        self.stack_v: list[float] = []

    def add(self, t: float, v: float) -> None:
        self.ts.append(t)
        self.vs.append(v)
        while self.stack_v and self.stack_v[-1] <= v:
            self.stack_v.pop()
            self.stack_t.pop()
        self.stack_t.append(t)
        self.stack_v.append(v)

    def max_between(self, t0: float, t1: float) -> float | None:
        if not self.ts:
            return None
        if t1 >= self.ts[-1]:
            i = bisect_left(self.stack_t, t0)
            return self.stack_v[i] if i < len(self.stack_v) else None
        i, j = bisect_left(self.ts, t0), bisect_right(self.ts, t1)
        return max(self.vs[i:j]) if i < j else None

    def drop_before(self, horizon: float) -> None:
        for ts, vs in ((self.ts, self.vs), (self.stack_t, self.stack_v)):
            k = bisect_left(ts, horizon)
            if k:
                del ts[:k]
                del vs[:k]


class Intake:
    """The model's facts over the window: busy rows, their prefix sums for every row and for
    the queued ones, and the highest offered load of the queued rows. Fed by :meth:`add` with
    each page; :meth:`expire_before` keeps it to the window's span (the window decides)."""

    def __init__(self) -> None:
        self._prev: Snapshot | None = None
        self.busy = _Prefix()
        self.queued = _Prefix()
        self._offered = _RunningMax()
        self._tallies: list[Tally] = []
        self._tally_starts: list[float] = []
        self.last_t: float | None = None

    @classmethod
    def of(cls, snapshots: Iterable[Snapshot]) -> Intake:
        """An intake of a list of pages at once (a recording, a test): nothing expires."""
        it = cls()
        for s in snapshots:
            it.add(s)
        return it

    def add(self, snap: Snapshot) -> Row | None:
        """A page: the row of the interval since the last one (if busy) joins the sums."""
        prev, self._prev = self._prev, snap
        if prev is not None and snap.t < prev.t:
            self._prev = prev  # out of order: ignored, as the window does
            return None
        self.last_t = snap.t
        tally = arrivals_between(prev, snap) if prev is not None else None
        if tally is not None:
            self._tallies.append(tally)
            self._tally_starts.append(tally.t - tally.dt)
        row = row_between(prev, snap) if prev is not None else None
        if row is not None:
            terms = row.terms()
            self.busy.add(row, terms)
            if row.queued:
                self.queued.add(row, terms)
                self._offered.add(row.t - row.dt, row.in_system)
        return row

    def expire_before(self, horizon: float) -> None:
        """Forget the intervals that began before ``horizon`` (the window's oldest page)."""
        self.busy.drop_before(horizon)
        self.queued.drop_before(horizon)
        self._offered.drop_before(horizon)
        k = bisect_left(self._tally_starts, horizon)
        if k:
            del self._tallies[:k]
            del self._tally_starts[:k]

    def view(self, t0: float = -math.inf, t1: float = math.inf) -> IntakeView:
        """The facts of the intervals between pages taken in [t0, t1]."""
        busy, nb, rows = self.busy.between(t0, t1)
        queued, nq, _ = self.queued.between(t0, t1)
        i = bisect_left(self._tally_starts, t0)
        tallies = tuple(x for x in self._tallies[i:] if x.t <= t1)
        return IntakeView(busy, nb, queued, nq, self._offered.max_between(t0, t1), rows, tallies)


@dataclass(frozen=True)
class IntakeView:
    """The sums of a span: every busy row, and the queued ones with their highest offered load."""

    busy: Sums
    busy_rows: int
    queued: Sums
    queued_rows: int
    offered_max: float | None  # requests waiting + running per engine, highest queued interval
    rows: tuple[Row, ...] = ()  # the busy rows themselves, in time order (the simulator's load)
    tallies: tuple[Tally, ...] = ()  # every interval's arrivals, in time order (open arrivals' rate)

    def as_mapping(self) -> Mapping[str, float]:
        return {name: self.busy[name] for name in TERMS}

    def with_recompute(self, tokens_per_preemption: float) -> IntakeView:
        """The span with the prefill its counters hide: each interval's preemptions times the
        tokens a preempted request computes again. vLLM counts a prompt's tokens once, when its
        first token comes, so a preempted request's recompute is in the steps' time and not in
        their tokens, and a step fit to the counters prices it as decode (decode-kv.before, 486
        preemptions: its own fit simulated TTFT p50 +112%; with its recompute counted, +2%)."""
        if tokens_per_preemption <= 0:
            return self
        was = [r for r in self.rows if r.preemptions > 0 and r.steps > 0]
        if not was:
            return self
        now = [replace(r, prefill=r.prefill + r.preemptions * tokens_per_preemption / r.steps) for r in was]
        swap = {id(a): b for a, b in zip(was, now, strict=True)}
        queued = [(a, b) for a, b in zip(was, now, strict=True) if a.queued]
        return replace(
            self,
            busy=self.busy.moved(was, now),
            queued=self.queued.moved([a for a, _ in queued], [b for _, b in queued]),
            rows=tuple(swap.get(id(r), r) for r in self.rows),
        )
