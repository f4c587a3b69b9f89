"""The spread of the request lengths fitted to vLLM's token histograms (advisor/predict/lengths.py),
on buckets made from known length distributions."""

from __future__ import annotations

import math
import random

import pytest

from advisor.predict.lengths import FIT, lognormal_sigma

BOUNDS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, math.inf)  # vLLM's 1-2-5


def _buckets(lengths: list[int]) -> list[tuple[float, float]]:
    return [(b, float(sum(1 for x in lengths if x <= b))) for b in BOUNDS]


def _cdf(x: float, mean: float, s: float) -> float:
    mu = math.log(mean) - s * s / 2
    return 0.5 * (1 + math.erf((math.log(x) - mu) / (s * math.sqrt(2))))


def test_lengths_within_ten_percent_of_1024_fit_a_narrow_spread() -> None:
    """The H200 runs' prompts: ~1,024 tokens +-10% (64% in (1000, 2000]); the interpolated p95
    reads ~1,920 and made the spread sigma ~0.4; the buckets say ~0.06."""
    rng = random.Random(1)
    lengths = [rng.randint(922, 1126) for _ in range(500)]
    s = lognormal_sigma(sum(lengths) / 500, _buckets(lengths), 500)
    assert s is not None and 0.03 < s < 0.12


def test_a_wide_spread_is_found_where_the_buckets_show_one() -> None:
    rng = random.Random(2)
    lengths = [max(1, round(rng.lognormvariate(math.log(300), 0.8))) for _ in range(3000)]
    s = lognormal_sigma(sum(lengths) / 3000, _buckets(lengths), 3000)
    assert s == pytest.approx(0.8, rel=0.15)


def test_every_request_in_one_bucket_gets_the_widest_spread_that_keeps_them_there() -> None:
    """All in (100, 200] with mean 128: any sigma up to ~0.1 fits; the widest is taken, which
    assumes no more than the buckets say (a constant length would make a closed loop's clients
    finish in lock-step waves)."""
    lengths = [128] * 240
    mean = 128.0
    s = lognormal_sigma(mean, _buckets(lengths), 240)
    assert s is not None and s > 0.05
    for b, c in _buckets(lengths):
        if b < math.inf:
            assert abs(_cdf(b, mean, s) - c / 240) <= FIT + 1e-9
    assert abs(_cdf(100, mean, s * 1.1) - 0) > FIT  # a wider one would not keep them there


def test_two_humps_no_lognormal_fits_get_the_closest() -> None:
    lengths = [64] * 300 + [3950] * 300
    s = lognormal_sigma(sum(lengths) / 600, _buckets(lengths), 600)
    assert s is not None and s > 1.0  # least squares: a wide one, the short and the long in it


def test_nothing_to_fit_is_none() -> None:
    assert lognormal_sigma(100.0, [(math.inf, 10.0)], 10) is None
    assert lognormal_sigma(100.0, [(200.0, 0.0)], 0) is None
    assert lognormal_sigma(0.0, [(200.0, 5.0)], 5) is None
