"""Request lengths from vLLM's token histograms: the spread of the lognormal the simulator draws.

Pure: a histogram's cumulative buckets in, a number out.

vLLM's prompt and generation token histograms have coarse buckets (1, 2, 5, 10, 20, 50, ... in
powers of ten), so a quantile interpolated inside a bucket says little: prompts of ~1,024 tokens
put 64% of themselves in (1000, 2000] and read a p95 of ~1,920, twice the truth. The mean is
exact (the histogram's sum over its count), and each bound's share of the requests is a fact.
The lognormal with that mean whose distribution function passes closest to those shares is the
spread they support; where a range of spreads fits them all (every request inside one bucket),
the widest that does, which assumes no more than the buckets say.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

SIGMAS = tuple(0.01 * 1.05**i for i in range(110))  # 0.01 .. ~2.1, 5% apart
FIT = 0.01  # a share within this of every bucket's (and within one request of it) fits


def lognormal_sigma(mean: float, buckets: Sequence[tuple[float, float]], count: float) -> float | None:
    """The sigma of the lognormal with mean ``mean`` that fits the histogram's cumulative buckets
    ((upper bound, requests at or below it), ``+Inf`` allowed) of ``count`` requests: the widest
    whose share at every finite bound is within ``FIT`` (or one request) of the measured one,
    else the closest by least squares. None without requests or finite bounds."""
    return _sigma(mean, tuple((b, c) for b, c in buckets), count)


@functools.lru_cache(maxsize=1024)
def _sigma(mean: float, buckets: tuple[tuple[float, float], ...], count: float) -> float | None:
    """:func:`lognormal_sigma`, remembered: each model of a window fits the same histograms
    again (every candidate scored, every cycle), 110 spreads at every bound each time."""
    if mean <= 0 or count <= 0:
        return None
    points = [(b, c / count) for b, c in buckets if 0 < b < math.inf]
    if not points:
        return None
    tol = max(FIT, 1.0 / count)
    best, best_err, widest = None, math.inf, None
    logs = [(math.log(b), share) for b, share in points]  # each bound's log, taken once
    log_mean, root2 = math.log(mean), math.sqrt(2.0)
    for s in SIGMAS:
        mu = log_mean - s * s / 2
        scale = s * root2
        devs = [0.5 * (1.0 + math.erf((lb - mu) / scale)) - share for lb, share in logs]
        err = sum(d * d for d in devs)
        if err < best_err:
            best, best_err = s, err
        if max(abs(d) for d in devs) <= tol:
            widest = s
    return widest if widest is not None else best
