"""The plugin's sketch quantiles compared A vs B (verify.samples.SketchSample): the interval
from the request counts and the spread between the exported quantiles, widened by the sketch's
relative accuracy.

The calibration test draws both sides from one distribution many times (seeded) and takes each
side's exact sample quantiles at the plugin's levels, as an exact sketch would: a 95% interval
must call "significant" rarely; and it must find a real 30% shift at the counts a bucket has.
"""

from __future__ import annotations

import math
import random

from advisor.verify.differences import compare_metric, quantile, sketch_estimate
from advisor.verify.samples import MEAN_Q, MetricSpec, Settings, SketchSample

LEVELS = (0.5, 0.9, 0.95, 0.99)
SPEC = {q: MetricSpec(f"ttft_p{q * 100:g}", f"TTFT p{q * 100:g}", "ttft", q, "s", "lower") for q in LEVELS}


def sample_of(values: list[float], batches: int = 1, accuracy: float = 0.0) -> SketchSample:
    """Split into disjoint batches (plugin windows), each with its exact quantiles at the levels
    (rank floor(q(n-1)), the sample DDSketch returns within its accuracy)."""
    size = len(values) // batches
    out = []
    for i in range(batches):
        part = sorted(values[i * size : (i + 1) * size])
        out.append((float(len(part)), {q: part[math.floor(q * (len(part) - 1))] for q in LEVELS}))
    return SketchSample(tuple(out), accuracy, sum(values) / len(values))


def draws(rng: random.Random, n: int, scale: float = 1.0) -> list[float]:
    return [scale * rng.lognormvariate(-1.0, 0.6) for _ in range(n)]


def mixture(rng: random.Random, n: int, scale: float = 1.0) -> list[float]:
    """Short and long prompts' TTFTs in one bucket: two modes."""
    return [
        scale * (rng.lognormvariate(-2, 0.3) if rng.random() < 0.6 else rng.lognormvariate(-0.5, 0.3))
        for _ in range(n)
    ]


def test_same_distribution_is_rarely_significant_and_a_real_shift_is_found() -> None:
    rng = random.Random(7)
    settings = Settings()
    for dist in (draws, mixture):
        for q, n in ((0.5, 40), (0.9, 60), (0.95, 60), (0.5, 200), (0.95, 200), (0.99, 300)):
            false = sum(
                compare_metric(
                    SPEC[q], sample_of(dist(rng, n)), sample_of(dist(rng, n)), settings
                ).significant
                for _ in range(200)
            )
            assert false <= 0.08 * 200, (dist.__name__, q, n, false)  # a 95% interval: 5% nominal
    for q, n in ((0.5, 100), (0.9, 200)):
        found = sum(
            compare_metric(
                SPEC[q], sample_of(draws(rng, n)), sample_of(draws(rng, n, 1.6)), settings
            ).significant
            for _ in range(100)
        )
        assert found >= 80, (q, n, found)


def test_batches_add_up_to_one_estimate_with_a_smaller_error() -> None:
    rng = random.Random(1)
    values = draws(rng, 600)
    one = sketch_estimate(sample_of(values[:200]), 0.5)
    three = sketch_estimate(sample_of(values, batches=3), 0.5)
    assert one is not None and three is not None
    assert three[1] < one[1]
    exact = quantile(sorted(values), 0.5)
    assert abs(three[0] - exact) < 3 * three[1]


def test_the_sketchs_accuracy_widens_the_interval() -> None:
    """However many requests, a change smaller than the sketches' accuracy is never significant."""
    a = SketchSample(((100000.0, {0.5: 1.0, 0.9: 1.2}),), 0.01)
    b = SketchSample(((100000.0, {0.5: 1.015, 0.9: 1.22}),), 0.01)
    d = compare_metric(SPEC[0.5], a, b, Settings(min_effect=0.0))
    assert d.ci_low is not None and d.ci_low < 0 < (d.ci_high or 0)
    assert not d.significant
    exact = compare_metric(
        SPEC[0.5], SketchSample(a.batches, 0.0), SketchSample(b.batches, 0.0), Settings(min_effect=0.0)
    )
    assert exact.significant


def test_too_few_requests_and_a_tail_beyond_the_count_are_insufficient() -> None:
    rng = random.Random(3)
    few = compare_metric(SPEC[0.5], sample_of(draws(rng, 12)), sample_of(draws(rng, 12)), Settings())
    assert few.status == "insufficient" and "fewer than 20" in few.note
    tail = compare_metric(SPEC[0.99], sample_of(draws(rng, 60)), sample_of(draws(rng, 60)), Settings())
    assert tail.status == "insufficient" and "p99 needs 300 requests" in tail.note
    missing = compare_metric(SPEC[0.5], SketchSample(()), sample_of(draws(rng, 60)), Settings())
    assert missing.status == "missing"


def test_means_are_exact_and_judged_against_a_floor() -> None:
    spec = MetricSpec("ttft_mean", "TTFT mean", "ttft", MEAN_Q, "s", "lower")
    a = SketchSample(((50.0, {0.5: 1.0, 0.9: 2.0}),), 0.01, mean=1.2)
    b = SketchSample(((50.0, {0.5: 1.0, 0.9: 2.0}),), 0.01, mean=0.9)
    d = compare_metric(spec, a, b, Settings())
    assert (d.a, d.b) == (1.2, 0.9) and d.significant and d.method == "sketch"
