"""window: reset-aware deltas and rates, histogram quantiles over a window, bounds."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from advisor import names
from advisor.model import Family, Histogram, Snapshot, label_key
from advisor.sources.metrics import parse_page
from advisor.window import Window

DEMO_SESSION = Path(__file__).resolve().parents[1] / "advisor" / "data" / "sessions"


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
    """Every page of the bundled H200 session (the whole capture, a page every 2 s)."""
    out = []
    for f in sorted((DEMO_SESSION / f"h200-{scenario}" / "metrics").glob("*.prom.gz")):
        t = int(f.name.split(".")[0]) / 1000
        out.append(parse_page(gzip.decompress(f.read_bytes()).decode(), t))
    return out


def test_real_h200_run_window_matches_the_run_totals() -> None:
    """Over the whole A_s256 capture (39 pages): 158 preemptions and 400 requests, as the README says."""
    pages = _h200_pages("A_s256")
    assert len(pages) == 39
    w = Window(max_age_s=10_000, clock=Clock(pages[-1].t))
    for p in pages:
        w.add_snapshot(p)
    assert w.counter_delta(names.NUM_PREEMPTIONS) == 158
    ttft = w.histogram_delta(names.TTFT)
    assert ttft is not None and ttft.count == 400
    # the histogram's p50 lands in the bucket holding the bench's measured p50 (23.1 s)
    assert 20 <= (ttft.quantile(0.5) or 0) <= 25
    assert w.gauge_max(names.KV_CACHE_USAGE, agg="mean") == pytest.approx(1.0, abs=0.01)
