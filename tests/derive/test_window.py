"""window: reset-aware deltas and rates, histogram quantiles over a window, bounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.core import names
from advisor.core.model import Family, Histogram, Snapshot, label_key
from advisor.derive.window import Window
from advisor.sources.metrics import parse_page
from advisor.sources.session import Session
from tests.pages import page as page_text
from tests.pages import with_engines
from tests.paths import FIXTURES, REPO
from tests.reference_window import Window as ReferenceWindow

SESSIONS = REPO / "advisor" / "data" / "sessions"


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def snap(
    t: float, counter: dict[str, float] | float, hist: Histogram | None = None, gauge: float = 0.0
) -> Snapshot:
    series = counter if isinstance(counter, dict) else {"0": counter}
    fams = {
        names.NUM_PREEMPTIONS: Family(
            names.NUM_PREEMPTIONS, "counter", "", {label_key({"engine": e}): v for e, v in series.items()}
        ),
        names.KV_CACHE_USAGE: Family(names.KV_CACHE_USAGE, "gauge", "", {label_key({"engine": "0"}): gauge}),
    }
    if hist is not None:
        fams[names.TTFT] = Family(names.TTFT, "histogram", "", {label_key({"engine": "0"}): hist})
    return Snapshot(t=t, families=fams)


def h(c1: float, c2: float, c3: float) -> Histogram:
    return Histogram(((1.0, c1), (2.0, c2), (float("inf"), c3)), c3, 0.0)


def test_counter_delta_and_rate_survive_a_reset() -> None:
    clock = Clock(100)
    w = Window(clock=clock)
    for t, v in [(0, 10), (10, 20), (20, 30), (30, 4), (40, 8)]:  # restart between 20 and 30
        w.add_snapshot(snap(t, v))
    assert w.counter_delta(names.NUM_PREEMPTIONS) == 10 + 10 + 4 + 4
    assert w.rate(names.NUM_PREEMPTIONS) == pytest.approx(28 / 40)


def test_counter_delta_per_engine_and_summed() -> None:
    w = Window(clock=Clock(100))
    w.add_snapshot(snap(0, {"0": 1, "1": 5}))
    w.add_snapshot(snap(10, {"0": 4, "1": 6}))
    assert w.counter_delta(names.NUM_PREEMPTIONS) == 4
    assert w.counter_delta(names.NUM_PREEMPTIONS, match={"engine": "1"}) == 1


def test_missing_family_is_unknown_not_zero() -> None:
    w = Window(clock=Clock(100))
    assert w.counter_delta(names.NUM_PREEMPTIONS) is None
    w.add_snapshot(snap(0, 1))
    assert w.counter_delta(names.NUM_PREEMPTIONS) is None  # one snapshot: no delta yet
    w.add_snapshot(snap(10, 1))
    assert w.counter_delta(names.NUM_PREEMPTIONS) == 0
    assert w.counter_delta("vllm:not_there") is None
    assert w.quantile(names.TTFT, 0.5) is None


def test_histogram_delta_quantile_and_reset() -> None:
    w = Window(clock=Clock(100))
    w.add_snapshot(snap(0, 0, h(5, 5, 5)))  # 5 old observations below 1 s
    w.add_snapshot(snap(10, 0, h(5, 8, 10)))  # +3 in (1,2], +2 above 2
    w.add_snapshot(snap(20, 0, h(1, 1, 1)))  # restart: 1 new below 1 s
    d = w.histogram_delta(names.TTFT)
    assert d is not None and d.count == 6
    assert d.buckets == ((1.0, 1.0), (2.0, 4.0), (float("inf"), 6.0))
    # PromQL: rank 3 of 6 falls in (1,2] holding ranks 2..4 -> 1 + (3-1)/(4-1)
    assert d.quantile(0.5) == pytest.approx(1 + 2 / 3)
    assert d.quantile(0.99) == 2.0  # the +Inf bucket returns the highest finite bound


def test_window_bounded_by_age_and_count() -> None:
    clock = Clock(0)
    w = Window(max_age_s=60, max_snapshots=5, clock=clock)
    for t in range(0, 200, 5):
        clock.t = t
        w.add_snapshot(snap(t, t))
    assert len(w.snapshots()) == 5
    clock.t = 195
    assert [s.t for s in w.snapshots(seconds=12)] == [185, 190, 195]
    assert w.counter_delta(names.NUM_PREEMPTIONS, seconds=12) == 10


def test_out_of_order_snapshot_ignored() -> None:
    w = Window(clock=Clock(100))
    w.add_snapshot(snap(10, 5))
    w.add_snapshot(snap(5, 1))
    assert [s.t for s in w.snapshots()] == [10]


def test_gauges_mean_across_engines_over_time() -> None:
    w = Window(clock=Clock(100))
    for t, g in [(0, 0.2), (10, 0.6), (20, 1.0)]:
        w.add_snapshot(snap(t, 0, gauge=g))
    assert w.gauge_avg(names.KV_CACHE_USAGE, agg="mean") == pytest.approx(0.6)
    assert w.gauge_max(names.KV_CACHE_USAGE, agg="mean") == 1.0


def _h200_pages(scenario: str) -> list[Snapshot]:
    """The pages of a session recorded from vLLM 0.25 on an H200 (bundled with the package)."""
    s = Session.load(SESSIONS / scenario)
    return [parse_page(text, t) for t, text in s.iter_scrapes()]


def test_real_h200_run_window_matches_the_run_totals() -> None:
    """Over the whole A_s256 capture: 158 preemptions and 400 requests, as the README says."""
    pages = _h200_pages("h200-A_s256")
    w = Window(max_age_s=10_000, clock=Clock(pages[-1].t))
    for p in pages:
        w.add_snapshot(p)
    assert w.counter_delta(names.NUM_PREEMPTIONS) == 158
    ttft = w.histogram_delta(names.TTFT)
    assert ttft is not None and ttft.count == 400
    # the histogram's p50 lands in the bucket holding the bench's measured p50 (23.1 s)
    assert 20 <= (ttft.quantile(0.5) or 0) <= 25
    assert w.gauge_max(names.KV_CACHE_USAGE, agg="mean") == pytest.approx(1.0, abs=0.01)


# ---------------------------------------------------------------- incremental vs the old window
SESSION_DIRS = [
    *sorted((FIXTURES / "sessions").iterdir()),
    SESSIONS / "h200-A_s256",
]
COUNTERS = [names.NUM_PREEMPTIONS, names.PROMPT_TOKENS, names.GENERATION_TOKENS, names.REQUEST_SUCCESS]
HISTOGRAMS = [names.TTFT, names.ITL, names.TPOT, names.E2E, names.QUEUE_TIME, names.REQUEST_PROMPT_TOKENS]


def _same(a: float | None, b: float | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and a == pytest.approx(b, rel=1e-9))


def _compare(new: Window, old: ReferenceWindow, seconds: float | None) -> None:
    for c in COUNTERS:
        assert _same(new.counter_delta(c, seconds), old.counter_delta(c, seconds)), c
        assert _same(new.rate(c, seconds), old.rate(c, seconds)), c
    assert _same(
        new.rate(names.REQUEST_SUCCESS, seconds, {"finished_reason": "stop"}),
        old.rate(names.REQUEST_SUCCESS, seconds, {"finished_reason": "stop"}),
    )
    for hname in HISTOGRAMS:
        hn, ho = new.histogram_delta(hname, seconds), old.histogram_delta(hname, seconds)
        assert (hn is None) == (ho is None), hname
        if hn is not None and ho is not None:
            assert hn.buckets == ho.buckets and hn.count == ho.count, hname
            assert _same(hn.sum, ho.sum), hname
        for q in (0.5, 0.95, 0.99):
            assert _same(new.quantile(hname, q, seconds), old.quantile(hname, q, seconds)), (hname, q)
    for g, agg in (
        (names.KV_CACHE_USAGE, "mean"),
        (names.NUM_RUNNING, "total"),
        (names.NUM_WAITING, "total"),
    ):
        assert _same(new.gauge_avg(g, seconds, agg), old.gauge_avg(g, seconds, agg)), g
        assert _same(new.gauge_max(g, seconds, agg), old.gauge_max(g, seconds, agg)), g
    assert new.gauge_series(names.NUM_RUNNING, seconds) == old.gauge_series(names.NUM_RUNNING, seconds)
    assert new.restart_times(seconds) == old.restart_times(seconds)
    assert new.duration(seconds) == old.duration(seconds)


@pytest.mark.parametrize("session", SESSION_DIRS, ids=lambda p: p.name)
def test_incremental_window_equals_the_old_one_on_recorded_sessions(session: Path) -> None:
    """After every page of a real recorded session: the same deltas, rates, bucket deltas,
    quantiles, gauges and restarts as the window that rescanned every snapshot."""
    clock = Clock(0)
    new, old = Window(max_age_s=60, clock=clock), ReferenceWindow(max_age_s=60, clock=clock)
    for t, text in Session.load(session).iter_scrapes():
        clock.t = t
        snap = parse_page(text, t)
        new.add_snapshot(snap)
        old.add_snapshot(snap)
        for seconds in (None, 20.0):
            _compare(new, old, seconds)
    t0, t1 = old.snapshots()[0].t, old.snapshots()[-1].t
    mid = (t0 + t1) / 2
    _compare(new.slice(t0, mid), old.slice(t0, mid), None)


def test_restarts_across_counter_resets_and_process_start_times() -> None:
    """Two restarts: counters going down, then a new process start time with counters that
    happen to be higher (found by the start time alone). Detected once, when added; they
    leave the window with the pages that showed them."""
    clock = Clock(0)
    new, old = Window(max_age_s=100, clock=clock), ReferenceWindow(max_age_s=100, clock=clock)

    def page(t: float, success: float, start: float) -> Snapshot:
        fams = {
            names.REQUEST_SUCCESS: Family(
                names.REQUEST_SUCCESS, "counter", "", {label_key({"engine": "0"}): success}
            ),
            "process_start_time_seconds": Family("process_start_time_seconds", "gauge", "", {(): start}),
        }
        return Snapshot(t=t, families=fams)

    seq = [(0, 10, 1.0), (10, 20, 1.0), (20, 2, 15.0), (30, 5, 15.0), (40, 50, 35.0), (50, 60, 35.0)]
    for t, v, start in seq:
        clock.t = t
        new.add_snapshot(page(t, v, start))
        old.add_snapshot(page(t, v, start))
        assert new.restart_times() == old.restart_times()
        assert new.counter_delta(names.REQUEST_SUCCESS) == old.counter_delta(names.REQUEST_SUCCESS)
    assert new.restart_times() == [20, 40]
    assert new.restart_times(seconds=15) == []  # the pair showing the restart is not in the last 15 s
    assert new.counter_delta(names.REQUEST_SUCCESS) == 10 + 2 + 3 + 45 + 10
    clock.t = 125  # the pages before t=25 expire: so does the first restart
    new.add_snapshot(page(125, 61, 35.0))
    old.add_snapshot(page(125, 61, 35.0))
    assert new.restart_times() == old.restart_times() == [40]


def test_series_appearing_and_disappearing_count_as_the_old_window_counted() -> None:
    clock = Clock(100)
    new, old = Window(clock=clock), ReferenceWindow(clock=clock)
    for t, series in [
        (0, {"0": 1}),
        (10, {"0": 3, "1": 5}),
        (20, {"1": 9}),
        (30, {"0": 4, "1": 10}),
        (40, {"0": 6}),
    ]:
        new.add_snapshot(snap(t, series))
        old.add_snapshot(snap(t, series))
        assert new.counter_delta(names.NUM_PREEMPTIONS) == old.counter_delta(names.NUM_PREEMPTIONS)
        assert new.counter_delta(names.NUM_PREEMPTIONS, match={"engine": "1"}) == old.counter_delta(
            names.NUM_PREEMPTIONS, match={"engine": "1"}
        )


def test_memory_per_frame_does_not_grow_with_the_histograms_engines() -> None:
    """Histograms are kept merged over engines (what every signal reads): a frame of a page
    with 16 engines holds as many histogram numbers as a frame of one engine; scalars grow
    by one float pair per series; the number of frames is bounded whatever the interval."""
    text = page_text("h200-0.25-A_s256-peak.prom")
    sizes = {}
    for engines in (1, 16):
        clock = Clock(0)
        w = Window(max_age_s=900, max_snapshots=50, clock=clock)
        body = with_engines(text, engines)
        for i in range(120):  # 0.2 s apart: more pages than max_snapshots
            clock.t = i * 0.2
            w.add_snapshot(parse_page(body, clock.t))
        frames = list(w._frames)
        assert len(frames) == 50
        assert len({id(f.layout) for f in frames}) == 1  # one layout shared by all frames
        sizes[engines] = (len(frames[-1].hist), len(frames[-1].raw))
    assert sizes[16][0] == sizes[1][0]
    assert sizes[16][1] <= 16 * sizes[1][1]
