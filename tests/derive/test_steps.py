"""Exact per-interval step sums from the plugin's fit counters (derive/steps.py).

Against the real recording (tests/fixtures/sessions/cpu-plugin-mixed, vLLM 0.32 with
``--enable-logging-iteration-details``: the engine's own step records): the intervals add up to
the plugin's totals, and those to the requests' tokens exactly. Hand-written pages cover a
restart and the least-squares solution.
"""

from __future__ import annotations

import itertools
import math
import random

import pytest
from prometheus_client.parser import text_string_to_metric_families

from advisor.derive import steps
from advisor.derive.window import Window
from advisor.plugin import names as pn
from advisor.sources.metrics import parse_page
from tests.derive.test_sketches import PLAIN, PLUGIN, Clock, replay


def totals(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for f in text_string_to_metric_families(text)
        if f.name.startswith(pn.PREFIX)
        for s in f.samples
    }


def test_the_intervals_add_up_to_the_plugins_totals_and_the_requests_tokens() -> None:
    w, pages = replay(PLUGIN)
    assert steps.default_source(w) == pn.SOURCE_DETAILS
    sums = steps.step_sums(w)
    times = [t for t, _ in pages]
    assert all(t1 > t0 for s in sums for t0, t1 in [(s.t0, s.t1)])
    assert all(b.t0 >= a.t1 for a, b in itertools.pairwise(sums))  # consecutive, no overlap
    assert {s.t1 for s in sums} <= set(times)
    assert all(s.n >= 0 and s.seconds >= 0 and s.prefill >= 0 and s.decode >= 0 for s in sums)
    tot = steps.total(sums)
    assert tot is not None
    last = totals(pages[-1][1])
    src = frozenset({("engine", "0"), ("source", pn.SOURCE_DETAILS)})
    for attr, name in steps._SUMS:
        assert math.isclose(getattr(tot, attr), last[(name + "_total", src)], rel_tol=1e-9), attr
    everything = frozenset({("engine", "0"), ("prompt_bucket", "all"), ("output_bucket", "all")})
    prompt = last[(pn.REQUEST_PROMPT_TOKENS + "_total", everything)]
    cached = last[(pn.REQUEST_CACHED_TOKENS + "_total", everything)]
    generated = last[(pn.REQUEST_GENERATION_TOKENS + "_total", everything)]
    requests = last[(pn.REQUEST_E2E + "_count", everything)]
    assert tot.prefill == prompt - cached  # every scheduled prefill token, once
    assert tot.decode == generated - requests  # every token after each request's first
    # the engine timed its steps: together they fit in the recording (one step may outlast an
    # interval: it is counted on the page after it ended)
    assert 0 < tot.seconds < times[-1] - times[0]


def test_a_window_without_the_plugin_has_no_step_sums() -> None:
    w, _ = replay(PLAIN)
    assert steps.default_source(w) is None and steps.step_sums(w) == []


def fit_page(
    n: float, t: float, p: float, d: float, pp: float, dd: float, pd: float, tt: float, tp: float, td: float
) -> str:
    values = {
        pn.FIT_STEPS: n,
        pn.FIT_SECONDS: t,
        pn.FIT_PREFILL_TOKENS: p,
        pn.FIT_DECODE_TOKENS: d,
        pn.FIT_REQUESTS: d,
        pn.FIT_SECONDS_SQUARED: tt,
        pn.FIT_PREFILL_TOKENS_SQUARED: pp,
        pn.FIT_DECODE_TOKENS_SQUARED: dd,
        pn.FIT_PREFILL_DECODE_TOKENS: pd,
        pn.FIT_SECONDS_PREFILL_TOKENS: tp,
        pn.FIT_SECONDS_DECODE_TOKENS: td,
    }
    body = "".join(
        f'# TYPE {name}_total counter\n{name}_total{{engine="0",source="frontend"}} {v!r}\n'
        for name, v in values.items()
    )
    return "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n" + body


class Steps:
    """Running sums of made-up steps t = 5 ms + 0.5 ms * d + 0.1 ms * p (+ noise), as the plugin keeps them."""

    def __init__(self, noise: float = 0.0, seed: int = 0) -> None:
        self.acc = [0.0] * 10
        self.rng = random.Random(seed)
        self.noise = noise
        self.residuals: list[float] = []

    def step(self) -> None:
        d = float(self.rng.randint(1, 32))
        p = float(self.rng.choice((0, 0, 0, 64, 512)))
        e = self.rng.gauss(0.0, self.noise) if self.noise else 0.0
        t = 0.005 + 0.0005 * d + 0.0001 * p + e
        self.residuals.append(e)
        for i, x in enumerate((1.0, t, p, d, p * p, d * d, p * d, t * t, t * p, t * d)):
            self.acc[i] += x

    def page(self) -> str:
        return fit_page(*self.acc)


def window_of(pages: list[str]) -> Window:
    clock = Clock()
    w = Window(max_age_s=math.inf, clock=clock)
    for i, text in enumerate(pages):
        clock.t = 2.0 * i
        w.add_snapshot(parse_page(text, clock.t))
    return w


def test_the_fit_recovers_the_step_time_model_and_its_residual() -> None:
    gen = Steps(noise=0.002)
    pages = []
    for _ in range(6):
        for _ in range(50):
            gen.step()
        pages.append(gen.page())
    w = window_of(pages)
    sums = steps.step_sums(w, source=pn.SOURCE_FRONTEND)
    assert [s.n for s in sums] == [50.0] * 5  # the first page is the baseline
    f = steps.fit(sums)
    assert f is not None and f.steps == 250
    assert f.base_s == pytest.approx(0.005, abs=0.001)
    assert f.per_decode_s == pytest.approx(0.0005, rel=0.1)
    assert f.per_prefill_s == pytest.approx(0.0001, rel=0.05)
    true_rms = math.sqrt(sum(e * e for e in gen.residuals[50:]) / 250)
    assert f.rmse_s == pytest.approx(true_rms, rel=0.05)  # least squares fits a little of the noise
    exact = Steps()
    pages = []
    for _ in range(3):
        for _ in range(20):
            exact.step()
        pages.append(exact.page())
    f0 = steps.fit(steps.step_sums(window_of(pages)))
    assert f0 is not None and f0.rmse_s is not None and f0.rmse_s < 1e-6
    assert (f0.base_s, f0.per_decode_s, f0.per_prefill_s) == pytest.approx((0.005, 0.0005, 0.0001), rel=1e-6)


def test_a_restart_counts_from_zero_and_a_late_family_from_its_first_page() -> None:
    gen = Steps()
    pages = ["# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"]  # before any step
    for _ in range(3):
        for _ in range(10):
            gen.step()
        pages.append(gen.page())
    restarted = Steps(seed=1)
    for _ in range(7):
        restarted.step()
    pages.append(restarted.page())
    sums = steps.step_sums(window_of(pages))
    assert [s.n for s in sums] == [10.0, 10.0, 10.0, 7.0]
    assert math.isclose(sum(s.seconds for s in sums), gen.acc[1] + restarted.acc[1])


def test_fewer_than_three_steps_or_no_spread_fit_what_they_can() -> None:
    assert steps.fit(steps.StepSums(0, 1, "frontend", n=2, seconds=0.02)) is None
    # decode-only steps of one size: only the constant can be fitted
    s = steps.StepSums(
        0,
        1,
        "frontend",
        n=10,
        seconds=0.2,
        decode=80,
        decode_sq=640,
        seconds_sq=0.004,
        seconds_decode=1.6,
        requests=80,
    )
    f = steps.fit(s)
    assert f is not None and f.base_s == pytest.approx(0.02) and f.per_decode_s == 0 and f.per_prefill_s == 0


def test_a_negative_coefficient_is_dropped_and_the_rest_refitted() -> None:
    """Steps that got shorter with more decode tokens (another process leaving the CPU, say):
    no physical model has that; the decode term goes and the rest is fitted without it."""
    points = [(0.03, 1.0, 0.0), (0.02, 2.0, 0.0), (0.01, 3.0, 0.0), (0.05, 1.0, 100.0), (0.04, 2.0, 100.0)]
    s = steps.StepSums(
        0,
        1,
        "frontend",
        n=len(points),
        seconds=sum(t for t, _, _ in points),
        prefill=sum(p for _, _, p in points),
        decode=sum(d for _, d, _ in points),
        seconds_sq=sum(t * t for t, _, _ in points),
        prefill_sq=sum(p * p for _, _, p in points),
        decode_sq=sum(d * d for _, d, _ in points),
        prefill_decode=sum(p * d for _, d, p in points),
        seconds_prefill=sum(t * p for t, _, p in points),
        seconds_decode=sum(t * d for t, d, _ in points),
    )
    f = steps.fit(s)
    assert f is not None and f.per_decode_s == 0 and f.per_prefill_s > 0 and f.base_s > 0
    mean_t = sum(t for t, _, _ in points) / len(points)
    mean_p = sum(p for _, _, p in points) / len(points)
    assert f.at(0.0, mean_p) == pytest.approx(mean_t)  # least squares passes through the means
