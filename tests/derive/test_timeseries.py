"""The window's series for the page's charts (advisor/derive/timeseries.py), on sessions recorded
from real vLLM servers: each point is what the window held at that page, checked against the
pages themselves (parsed by prometheus_client, not by the advisor) and the window's own
aggregates; gaps stay gaps."""

from __future__ import annotations

from bisect import bisect_left

import pytest
from prometheus_client.parser import text_string_to_metric_families

from advisor.cli.common import DEMO_SESSION
from advisor.core.config import Config
from advisor.core.model import Histogram
from advisor.derive import timeseries
from advisor.derive.window import Outage, Window
from advisor.diagnose.ruleset import load_rules
from advisor.drive.inputs import from_session
from advisor.sources.metrics import parse_page
from advisor.sources.session import Session
from tests.paths import FIXTURES

CFG = Config()


@pytest.fixture(scope="module")
def replayed() -> tuple[timeseries.Charts, list[tuple[float, str]]]:
    adv, _ = from_session(DEMO_SESSION, CFG, load_rules())
    pages = list(Session.load(DEMO_SESSION).iter_scrapes())
    return timeseries.charts(adv.window, adv.engine, CFG.targets), pages


def _sample(text: str, name: str) -> list[float]:
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    fam = fams[name]
    return [s.value for s in fam.samples if s.name in (name, name + "_total")]


def _buckets(text: str, name: str) -> dict[float, float]:
    """A histogram's cumulative bucket counts on a page, summed over its series (engines)."""
    out: dict[float, float] = {}
    for fam in text_string_to_metric_families(text):
        if fam.name == name:
            for s in fam.samples:
                if s.name == name + "_bucket":
                    le = float(s.labels["le"])
                    out[le] = out.get(le, 0.0) + s.value
    return out


def test_gauges_are_the_value_on_each_page(
    replayed: tuple[timeseries.Charts, list[tuple[float, str]]],
) -> None:
    charts, pages = replayed
    kv = charts.chart("kv")
    req = charts.chart("requests")
    assert kv is not None and req is not None
    (kv_line,) = kv.lines
    running, waiting = req.lines
    assert len(kv_line.points) == len(running.points) == len(waiting.points) == len(pages) == 39
    for (t, text), (tk, k), (tr, r), (tw, w) in zip(
        pages, kv_line.points, running.points, waiting.points, strict=True
    ):
        assert t == tk == tr == tw
        usage = _sample(text, "vllm:kv_cache_usage_perc")
        assert k == pytest.approx(sum(usage) / len(usage))
        assert r == sum(_sample(text, "vllm:num_requests_running"))
        assert w == sum(_sample(text, "vllm:num_requests_waiting"))
    assert max(v for _, v in kv_line.points) == pytest.approx(1.0, abs=0.02)  # the KV cache ran full
    assert kv.fixed_max == 1.0 and kv_line.signal == "kv_cache_usage_ratio_max"


def test_rates_are_counter_increases_over_the_trailing_span(
    replayed: tuple[timeseries.Charts, list[tuple[float, str]]],
) -> None:
    charts, pages = replayed
    assert charts.span_s == 30.0  # 2 s pages: the 30 s minimum
    times = [t for t, _ in pages]
    gen = charts.chart("throughput")
    assert gen is not None
    out = gen.lines[0]
    assert out.predicted == "output_tokens_per_second"
    assert len(out.points) == len(pages) - 1  # no rate at the first page
    totals = [sum(_sample(text, "vllm:generation_tokens")) for _, text in pages]
    for t, v in out.points:
        i = times.index(t)
        j = bisect_left(times, t - 30.0)
        assert v == pytest.approx((totals[i] - totals[j]) / (times[i] - times[j]))
    pre = charts.chart("preemptions")
    assert pre is not None and max(v for _, v in pre.lines[0].points) > 2.0  # it preempted


def test_quantiles_come_from_bucket_increases_and_gaps_stay_unknown(
    replayed: tuple[timeseries.Charts, list[tuple[float, str]]],
) -> None:
    charts, pages = replayed
    ttft = charts.chart("ttft")
    assert ttft is not None
    p50, p95 = ttft.lines
    assert [lv.label for lv in ttft.levels] == ["TTFT p95 target"] and ttft.levels[0].value == 2.0
    # before the first request finished its prefill there is no TTFT: no point, never a zero
    assert len(p95.points) < len(pages) - 1 and all(v > 0 for _, v in p95.points)
    times = [t for t, _ in pages]
    buckets = [_buckets(text, "vllm:time_to_first_token_seconds") for _, text in pages]
    for t, v in p95.points:
        i = times.index(t)
        j = bisect_left(times, t - 30.0)
        cum = tuple((le, buckets[i][le] - buckets[j][le]) for le in sorted(buckets[i]))
        delta = Histogram(cum, cum[-1][1], 0.0)
        assert v == pytest.approx(delta.quantile(0.95))
    assert all(a[0] == b[0] for a, b in zip(p50.points, p95.points, strict=True))


def test_trailing_histograms_and_rates_agree_with_slices_of_the_window() -> None:
    adv, _ = from_session(DEMO_SESSION, CFG, load_rules())
    w = adv.window
    ts = w.times()
    name = "vllm:inter_token_latency_seconds"
    hs = dict(w.trailing_histograms(name, 30.0))
    rates = dict(w.trailing_rates("vllm:generation_tokens", 30.0))
    assert ts[0] not in hs and set(hs) == set(ts[1:]) == set(rates)
    for t in ts[1:]:
        j = bisect_left(ts, t - 30.0)
        part = w.slice(ts[j], t)
        assert hs[t] == part.histogram_delta(name)
        assert rates[t] == pytest.approx(part.rate("vllm:generation_tokens"))
    picked = {ts[5], ts[20]}
    assert [t for t, _ in w.trailing_histograms(name, 30.0, at=picked)] == sorted(picked)


def test_the_cap_is_max_num_seqs_times_the_engines(
    replayed: tuple[timeseries.Charts, list[tuple[float, str]]],
) -> None:
    charts, _ = replayed
    req = charts.chart("requests")
    assert req is not None
    assert [(lv.label, lv.value, lv.kind) for lv in req.levels] == [("max_num_seqs 256", 256.0, "limit")]


def test_failed_scrapes_are_spans_up_to_the_next_page_read() -> None:
    """A stand-in for a server that went down: the outages the daemon records between pages
    recorded from a real one (a real server's refusals carry no page)."""
    pages = list(Session.load(FIXTURES / "sessions" / "cpu-healthy").iter_scrapes())[:12]
    clock = [0.0]
    w = Window(max_age_s=900.0, clock=lambda: clock[0])
    down = {5, 6, 7}
    for i, (t, text) in enumerate(pages):
        clock[0] = t
        if i in down:
            w.add_outage(Outage(t, "refused", "connection refused"))
        else:
            w.add_snapshot(parse_page(text, t))
    clock[0] = pages[-1][0] + 6
    for k in (2, 4, 6):
        w.add_outage(Outage(pages[-1][0] + k, "refused", "connection refused"))
    c = timeseries.charts(w)
    assert c.outages == ((pages[5][0], pages[8][0]), (pages[-1][0] + 2, pages[-1][0] + 6))
    assert c.t1 == pages[-1][0] + 6
    kv = c.chart("kv")
    assert kv is not None and len(kv.lines[0].points) == len(pages) - len(down)
