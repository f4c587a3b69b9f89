"""The plugin's record path, fed stand-ins of vLLM's stats objects (tests/plugin/standin.py).

The stand-ins carry exactly the fields each vLLM version's classes have, per the plugin's
version table; the real engine is exercised in test_plugin_realvllm.py. Time comes from an
injected clock: no sleeps.
"""

from __future__ import annotations

import math
import random

import pytest

from advisor.plugin import names as n
from advisor.plugin.config import PluginConfig
from advisor.plugin.recorder import EngineRecorder, Snapshot, band_labels
from advisor.plugin.versions import VERSIONS_CHECKED
from tests.plugin import standin
from tests.plugin.fit import solve3


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def lower_quantile(values: list[float], q: float) -> float:
    """The sample quantile DDSketch approximates: the value at rank floor(q*(n-1))."""
    s = sorted(values)
    return s[math.floor(q * (len(s) - 1))]


def summary(snap: Snapshot, name: str, **labels: str) -> tuple[float, float, dict[float, float]] | None:
    want = set(labels.items())
    for s in snap.summaries:
        if s.name == name and want == set(s.labels):
            return s.count, s.total, dict(s.quantiles)
    return None


def counter(snap: Snapshot, name: str, **labels: str) -> float | None:
    return snap.counters.get((name, tuple(labels.items())))


def req_labels(prompt: str = n.ALL, output: str = n.ALL) -> dict[str, str]:
    return {n.PROMPT_BUCKET_LABEL: prompt, n.OUTPUT_BUCKET_LABEL: output}


@pytest.mark.parametrize("version", VERSIONS_CHECKED)
def test_each_version_shape_exports_what_its_fields_allow(version: str) -> None:
    """Every version's shape records without error; the per-request preemption counter
    exists only where FinishedRequestStats has num_preemptions (0.30+), and engine-timed
    steps only where SchedulerStats has iteration_details (0.26+): missing, never zero."""
    clock = Clock()
    rec = EngineRecorder(PluginConfig(), clock=clock)
    v = version
    rec.record(standin.scheduler(v, running=0, waiting=1), None)
    for i in range(5):
        clock.t += 0.05
        det = standin.details(v, ctx_tokens=100, gen_tokens=3, elapsed_ms=40.0, gen_reqs=3)
        fr = standin.finished(v, prompt=300, output=50, e2e=2.0 + i * 0.1, ttft=0.3, preemptions=1)
        it = standin.iteration(v, generated=4, first_tokens=1, prompt_computed=100, itls=[0.05, 0.05, 0.06])
        it.finished_requests.append(fr)
        rec.record(standin.scheduler(v, running=3, waiting=0, iteration_details=det), it)
    snap = rec.snapshot()

    assert counter(snap, n.STEPS) == 6
    has_preemptions = counter(snap, n.REQUEST_PREEMPTIONS, **req_labels()) is not None
    assert has_preemptions == (v >= "0.30")
    has_details = counter(snap, n.FIT_STEPS, source=n.SOURCE_DETAILS) is not None
    has_frontend = counter(snap, n.FIT_STEPS, source=n.SOURCE_FRONTEND) is not None
    assert has_details == (v != "0.25.0")
    assert has_frontend == (v == "0.25.0")  # the front-end clock only where no engine timing
    ttft = summary(snap, n.REQUEST_TTFT, **req_labels(prompt="0-512"))
    assert ttft is not None and ttft[0] == 5 and ttft[2][0.5] == pytest.approx(0.3, rel=0.01)
    assert summary(snap, n.ITL) is not None


def test_request_quantiles_are_exact_within_the_sketch_accuracy() -> None:
    """2,000 requests with skewed latencies: each bucket's p50..p99 is within the relative
    accuracy (1%) of the exact sample quantile of the same requests."""
    rnd = random.Random(7)
    clock = Clock()
    rec = EngineRecorder(PluginConfig(), clock=clock)
    by_bucket: dict[str, list[float]] = {"0-512": [], "513-2048": [], "2049-8192": [], "8193+": []}
    tpots: list[float] = []
    for _ in range(2000):
        prompt = rnd.choice([100, 1000, 4000, 10000])
        ttft = rnd.lognormvariate(math.log(0.05 + prompt / 20000), 0.6)
        tpot = rnd.lognormvariate(math.log(0.03), 0.3)
        out = rnd.randint(2, 400)
        fr = standin.finished("0.32.0", prompt=prompt, output=out, e2e=ttft + tpot * (out - 1), ttft=ttft)
        rec.record(None, standin.iteration("0.32.0", finished_requests=[fr]))
        bucket = next(b for b, hi in zip(by_bucket, (512, 2048, 8192, 10**9), strict=True) if prompt <= hi)
        by_bucket[bucket].append(ttft)
        tpots.append(fr.mean_time_per_output_token)
        clock.t += 0.01  # 20 s in all: inside the 60 s window
    snap = rec.snapshot()
    for bucket, values in by_bucket.items():
        got = summary(snap, n.REQUEST_TTFT, **req_labels(prompt=bucket))
        assert got is not None
        count, total, qs = got
        assert count == len(values) and total == pytest.approx(sum(values))
        for q in n.QUANTILES:
            exact = lower_quantile(values, q)
            assert abs(qs[q] - exact) <= 0.01 * exact + 1e-12, (bucket, q, qs[q], exact)
    got = summary(snap, n.REQUEST_TPOT, **req_labels())
    assert got is not None
    for q in n.QUANTILES:
        exact = lower_quantile(tpots, q)
        assert abs(got[2][q] - exact) <= 0.01 * exact


def test_length_buckets_split_prompt_and_output_separately() -> None:
    """Series by prompt bucket carry output_bucket="all" and the other way round, so either
    split's quantiles are over all its requests (quantiles do not add up across series)."""
    rec = EngineRecorder(PluginConfig(prompt_buckets=(512,), output_buckets=(128,)), clock=Clock())
    frs = [
        standin.finished("0.32.0", prompt=512, output=128, e2e=1.0, ttft=0.1),
        standin.finished("0.32.0", prompt=513, output=129, e2e=3.0, ttft=0.5),
    ]
    rec.record(None, standin.iteration("0.32.0", finished_requests=frs))
    snap = rec.snapshot()
    labelsets = {s.labels for s in snap.summaries if s.name == n.REQUEST_E2E}
    assert labelsets == {
        tuple(req_labels().items()),
        tuple(req_labels(prompt="0-512").items()),
        tuple(req_labels(prompt="513+").items()),
        tuple(req_labels(output="0-128").items()),
        tuple(req_labels(output="129+").items()),
    }
    assert counter(snap, n.REQUEST_PROMPT_TOKENS, **req_labels(prompt="513+")) == 513
    assert counter(snap, n.REQUEST_GENERATION_TOKENS, **req_labels(output="0-128")) == 128


def test_window_forgets_old_requests_but_counters_do_not() -> None:
    """Quantiles cover the last 50-60 s (six 10 s slots); _count and _sum are cumulative."""
    clock = Clock(0.0)
    rec = EngineRecorder(PluginConfig(), clock=clock)
    rec.record(
        None, standin.iteration("0.32.0", finished_requests=[standin.finished("0.32.0", 10, 10, 1.0, 0.2)])
    )
    clock.t = 55.0  # slot 5: the first slot (0-10 s) is still in the window
    rec.record(
        None, standin.iteration("0.32.0", finished_requests=[standin.finished("0.32.0", 10, 10, 9.0, 5.0)])
    )
    got = summary(rec.snapshot(), n.REQUEST_TTFT, **req_labels())
    assert got is not None and got[2][0.5] == pytest.approx(0.2, rel=0.01)  # rank floor(0.5*1): the lower
    clock.t = 61.0  # slot 6 replaces slot 0
    got = summary(rec.snapshot(), n.REQUEST_TTFT, **req_labels())
    assert got is not None and got[2][0.5] == pytest.approx(5.0, rel=0.01)
    assert got[0] == 2 and got[1] == pytest.approx(5.2)
    clock.t = 200.0  # nothing left in the window: no quantile samples, counters stay
    got = summary(rec.snapshot(), n.REQUEST_TTFT, **req_labels())
    assert got is not None and got[2] == {} and got[0] == 2


def test_ttft_is_vllms_own_found_by_arrival_time() -> None:
    """vLLM hands a finished request's e2e latency, not its TTFT; the plugin keeps each first
    token's TTFT under its arrival time (stamp - TTFT) and finds it again at the finish
    (stamp - e2e). Only a request whose first token it never saw falls back to
    e2e - decode_time, which misses the front-end's lag on the first token (0.05 s here)."""
    v = "0.32.0"
    rec = EngineRecorder(PluginConfig(), clock=Clock())
    arrivals = [1_700_000_000.123456 + i * 0.000137 for i in range(50)]  # 137 us apart
    ttfts = [0.2 + 0.01 * i for i in range(50)]
    for i in range(50):  # one step per first token
        rec.record(None, standin.iteration(v, stamp=arrivals[i] + ttfts[i], ttfts=[ttfts[i]]))
    for group in range(10):  # finished five per step, newest first
        members = [49 - 5 * group - k for k in range(5)]
        stamp = arrivals[members[0]] + 5.0
        frs = [
            standin.finished(v, 100, 20, e2e=stamp - arrivals[i], ttft=ttfts[i], first_token_lag=0.05)
            for i in members
        ]
        rec.record(None, standin.iteration(v, stamp=stamp, finished_requests=frs))
    # a request whose first token came before the plugin loaded
    late = standin.finished(v, 100, 20, e2e=3.0, ttft=1.0, first_token_lag=0.05)
    rec.record(None, standin.iteration(v, stamp=arrivals[0] + 100.0, finished_requests=[late]))
    snap = rec.snapshot()
    got = summary(snap, n.REQUEST_TTFT, **req_labels())
    assert got is not None and got[0] == 51
    assert got[1] == pytest.approx(sum(ttfts) + 0.95)  # the exact ones, plus 1.0 - 0.05 estimated
    assert counter(snap, n.REQUEST_TTFT_ESTIMATED, **req_labels()) == 1
    assert rec._first_tokens == {}


def test_aborted_and_failed_requests_are_left_out() -> None:
    rec = EngineRecorder(PluginConfig(), clock=Clock())
    frs = [
        standin.finished("0.32.0", 10, 10, 1.0, 0.1, reason=standin.FinishReason.ABORT),
        standin.finished("0.32.0", 10, 10, 1.0, 0.1, reason=standin.FinishReason.ERROR),
    ]
    rec.record(None, standin.iteration("0.32.0", finished_requests=frs))
    assert summary(rec.snapshot(), n.REQUEST_E2E, **req_labels()) is None


def test_objects_without_any_known_field_export_nothing_but_steps() -> None:
    """A future vLLM that renamed everything: no exception, no made-up zeros."""
    rec = EngineRecorder(PluginConfig(), clock=Clock())
    rec.record(object(), object())
    snap = rec.snapshot()
    assert snap.summaries == [] and snap.counters == {(n.STEPS, ()): 1.0}


def test_frontend_step_clock_times_only_busy_intervals() -> None:
    """Without iteration_details a step's time is the interval since the previous step's
    stats, counted only when that step left requests running or waiting (else the engine
    idled in between)."""
    clock = Clock(0.0)
    rec = EngineRecorder(PluginConfig(), clock=clock)
    v = "0.25.0"
    rec.record(standin.scheduler(v, running=0), None)  # idle engine
    clock.t = 5.0  # 5 s of idleness: not a step time
    rec.record(
        standin.scheduler(v, running=2),
        standin.iteration(v, generated=2, first_tokens=2, prompt_computed=600),
    )
    clock.t = 5.03
    rec.record(standin.scheduler(v, running=2), standin.iteration(v, generated=2, itls=[0.03, 0.03]))
    clock.t = 5.08
    it = standin.iteration(v, generated=3, first_tokens=1, prompt_computed=200, itls=[0.05, 0.05])
    rec.record(standin.scheduler(v, running=3), it)
    snap = rec.snapshot()
    src = {n.SOURCE_LABEL: n.SOURCE_FRONTEND}
    assert counter(snap, n.FIT_STEPS, **src) == 2
    assert counter(snap, n.FIT_SECONDS, **src) == pytest.approx(0.08)
    assert counter(snap, n.FIT_DECODE_TOKENS, **src) == 4  # 2 + (3 - 1 first token)
    assert counter(snap, n.FIT_PREFILL_TOKENS, **src) == 200
    assert counter(snap, n.FIT_SECONDS_PREFILL_TOKENS, **src) == pytest.approx(0.05 * 200)
    assert counter(snap, n.STEP_RUNNING_REQUESTS) == 7
    decode = summary(snap, n.STEP_DURATION, source=n.SOURCE_FRONTEND, phase=n.PHASE_DECODE, batch="2-4")
    mixed = summary(snap, n.STEP_DURATION, source=n.SOURCE_FRONTEND, phase=n.PHASE_MIXED, batch="2-4")
    assert decode is not None and decode[0] == 1 and decode[1] == pytest.approx(0.03)
    assert mixed is not None and mixed[0] == 1
    itl = summary(snap, n.ITL)
    assert itl is not None and itl[0] == 4 and itl[1] == pytest.approx(0.16)


def test_frontend_clock_is_off_with_several_api_servers() -> None:
    rec = EngineRecorder(PluginConfig(), frontend_timing=False, clock=Clock())
    for _ in range(3):
        rec.record(standin.scheduler("0.25.0", running=2), standin.iteration("0.25.0", generated=2))
    snap = rec.snapshot()
    assert counter(snap, n.FIT_STEPS, source=n.SOURCE_FRONTEND) is None
    assert counter(snap, n.STEPS) == 3


def test_iteration_details_give_exact_step_records_and_the_fit_recovers_the_model() -> None:
    """Steps whose time is exactly a + b*d + c*p: solving the normal equations built from the
    exported running sums gives a, b and c back (what the advisor's reader will do with
    counter deltas over its window)."""
    a, b, c = 0.004, 0.0007, 0.00009
    rnd = random.Random(3)
    clock = Clock()
    rec = EngineRecorder(PluginConfig(), clock=clock)
    v = "0.32.0"
    for i in range(300):
        d = rnd.randint(0, 64)
        p = rnd.choice([0, 0, 128, 512, 2048])
        if d == 0 and p == 0:
            d = 1
        det = standin.details(
            v, ctx_tokens=p, gen_tokens=d, elapsed_ms=(a + b * d + c * p) * 1000, gen_reqs=d
        )
        clock.t += 0.02
        rec.record(standin.scheduler(v, running=d, iteration_details=det), None)
        if i == 0:  # a dummy step of a data-parallel wave is not a step record
            dummy = standin.details(v, 0, 0, 1.0)
            dummy.is_dummy = True
            rec.record(standin.scheduler(v, running=0, iteration_details=dummy), None)
    snap = rec.snapshot()
    src = {n.SOURCE_LABEL: n.SOURCE_DETAILS}

    def s(name: str) -> float:
        value = counter(snap, name, **src)
        assert value is not None
        return value

    assert s(n.FIT_STEPS) == 300
    # X'X and X'y for X = [1, d, p]
    xtx = [
        [s(n.FIT_STEPS), s(n.FIT_DECODE_TOKENS), s(n.FIT_PREFILL_TOKENS)],
        [s(n.FIT_DECODE_TOKENS), s(n.FIT_DECODE_TOKENS_SQUARED), s(n.FIT_PREFILL_DECODE_TOKENS)],
        [s(n.FIT_PREFILL_TOKENS), s(n.FIT_PREFILL_DECODE_TOKENS), s(n.FIT_PREFILL_TOKENS_SQUARED)],
    ]
    xty = [s(n.FIT_SECONDS), s(n.FIT_SECONDS_DECODE_TOKENS), s(n.FIT_SECONDS_PREFILL_TOKENS)]
    coef = solve3(xtx, xty)
    assert coef == pytest.approx([a, b, c], rel=1e-6)
    assert counter(snap, n.FIT_STEPS, source=n.SOURCE_FRONTEND) is None


def test_batch_bands() -> None:
    assert band_labels((1, 4, 16, 64, 256)) == ("1", "2-4", "5-16", "17-64", "65-256", "257+")
