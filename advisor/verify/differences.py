"""The difference of one metric between A and B with its confidence interval: a seeded
bootstrap for per-request values, the bucket resolution for histograms, a normal approximation
for reported percentiles and for the plugin's sketch quantiles, a Poisson rate ratio for counts. A difference is *significant* only
when its interval excludes 0 AND its size reaches the minimum effect (default 5%).
"""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Any

from advisor.core.model import Histogram
from advisor.verify.samples import (
    MEAN_Q,
    METRICS,
    PER_REQUEST_QUANTITIES,
    SUMMARY_METRICS,
    CountSample,
    ExperimentError,
    HistogramSample,
    MetricSample,
    MetricSpec,
    ScalarSample,
    Settings,
    SketchSample,
    SummarySample,
    ValuesSample,
)

# --------------------------------------------------------------------------------------------
# Differences
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricDelta:
    """A versus B for one metric. ``change``/``ci_low``/``ci_high`` are fractions (B/A - 1).
    ``status``: ok | insufficient (too few observations) | missing (a side lacks the data)."""

    spec: MetricSpec
    a: float | None
    b: float | None
    change: float | None
    ci_low: float | None
    ci_high: float | None
    significant: bool
    status: str
    method: str
    n_a: float | None = None
    n_b: float | None = None
    note: str = ""
    under_floor: float | None = None  # beyond its interval but within this run-to-run noise floor

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def direction(self) -> str:
        """``better`` / ``worse`` when significant, else ``same``."""
        if not self.significant or self.change is None or self.change == 0:
            return "same"
        lower = self.change < 0
        return "better" if lower == (self.spec.better == "lower") else "worse"

    def worse_by(self) -> float:
        """How much worse (a positive fraction), 0 when not worse."""
        if self.change is None:
            return 0.0
        return max(0.0, self.change if self.spec.better == "lower" else -self.change)

    def describe(self, confidence: float = 0.95) -> str:
        """``ITL p95 242 ms -> 68.4 ms (-72%, 95% CI -75%..-69%)``."""
        if self.a is None or self.b is None:
            side = "A" if self.a is None else "B"
            return f"{self.spec.label} not measured in {side}"
        text = f"{self.spec.label} {fmt_value(self.a, self.spec.unit)} -> {fmt_value(self.b, self.spec.unit)}"
        parts = []
        if self.change is not None:
            parts.append(fmt_pct(self.change))
        if self.ci_low is not None or self.ci_high is not None:
            label = "bucket bounds" if self.method == "histogram" else f"{confidence * 100:.0f}% CI"
            parts.append(f"{label} {fmt_pct(self.ci_low)}..{fmt_pct(self.ci_high)}")
        elif self.method == "run-total":
            parts.append("run total, no CI")
        if self.under_floor is not None:
            parts.append(f"within its run-to-run noise, a factor of {1 + self.under_floor:g}")
        return text + (f" ({', '.join(parts)})" if parts else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "a": _round(self.a),
            "b": _round(self.b),
            "unit": self.spec.unit,
            "better": self.spec.better,
            "change_pct": _pct(self.change),
            "ci_low_pct": _pct(self.ci_low),
            "ci_high_pct": _pct(self.ci_high),
            "significant": self.significant,
            "direction": self.direction,
            "status": self.status,
            "method": self.method,
            "n_a": _round(self.n_a),
            "n_b": _round(self.n_b),
            "note": self.note,
            "under_noise_floor_pct": _pct(self.under_floor),
        }


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile of sorted values (numpy's default, which vLLM's bench uses)."""
    n = len(sorted_values)
    if n == 0:
        raise ExperimentError("quantile of no values")
    h = (n - 1) * min(max(q, 0.0), 1.0)
    lo = math.floor(h)
    if lo + 1 >= n:
        return sorted_values[-1]
    return sorted_values[lo] + (h - lo) * (sorted_values[lo + 1] - sorted_values[lo])


def _seed(settings: Settings, key: str) -> int:
    return (settings.seed * 1_000_003) ^ zlib.crc32(key.encode())


def _bootstrap_quantile(s: ValuesSample, q: float, rng: random.Random) -> float:
    """One bootstrap replicate of the q-quantile of ``s``, drawn in O(1): the k-th order
    statistic of m uniforms is Beta(k, m + 1 - k), mapped through the empirical quantile function.
    Equivalent to resampling m values and taking their quantile, without building the resample."""
    n = len(s.values)
    m = min(n, s.resample_size) if s.resample_size else n
    if m < 2:
        return quantile(s.values, q)
    k = (m - 1) * q + 1
    u = rng.betavariate(k, m + 1 - k)
    return quantile(s.values, u)


def _ci_from(reps: list[float], confidence: float) -> tuple[float, float]:
    reps.sort()
    alpha = (1 - confidence) / 2
    return quantile(reps, alpha), quantile(reps, 1 - alpha)


def student_t(p: float, df: int) -> float:
    """The p-quantile of Student's t with ``df`` degrees of freedom (p > 0.5), by bisection on
    its distribution function (the regularized incomplete beta, :func:`_betainc`): the one
    quantile the comparison needs, written here rather than a dependency on scipy."""
    lo, hi = 0.0, 1e3
    for _ in range(100):
        t = (lo + hi) / 2
        # P(T <= t) for t >= 0
        if 1 - 0.5 * _betainc(df / 2, 0.5, df / (df + t * t)) < p:
            lo = t
        else:
            hi = t
    return (lo + hi) / 2


def spread_floors(
    repeats: Sequence[Sequence[Mapping[str, MetricDelta]]],
    averaged: Sequence[int] | None,
    settings: Settings,
) -> dict[str, float]:
    """Each metric's run-to-run noise floor measured from repeated measurements of two sides.
    ``repeats[k]``: for each measurement of side k after its first, its metrics against that
    first (:func:`compare_samples`' deltas); ``averaged[k]``: how many measurements the value
    compared for side k stands for (one run compared as it is: 1), or None where it is the mean
    of all of them that measured the metric (a window compared whole and measured as its
    consecutive batches: the batch means of simulation output analysis). The floor: the pooled
    spread of one measurement's log value within a side, times Student's t on the sides'
    degrees of freedom at the comparison's confidence, times sqrt(1/averaged_a + 1/averaged_b);
    kept only where above the floor already set and the minimum effect. A delta without a ratio
    (a side unmeasured) adds nothing; each measurement is whole enough to stand for its side (a
    batch holds its share of requests)."""
    logs: dict[str, list[list[float]]] = {}
    for k, side in enumerate(repeats):
        for deltas in side:
            for name, d in deltas.items():
                if d.change is not None and d.change > -1:
                    logs.setdefault(name, [[0.0] for _ in repeats])[k].append(math.log1p(d.change))
    floors = {}
    for name, per_side in logs.items():
        df = sum(len(v) - 1 for v in per_side)
        if df < 1:
            continue
        ss = sum(sum((x - sum(v) / len(v)) ** 2 for x in v) for v in per_side)
        counts = averaged if averaged is not None else [len(v) for v in per_side]
        var = ss / df * sum(1 / max(1, m) for m in counts)
        f = math.expm1(student_t(1 - (1 - settings.confidence) / 2, df) * math.sqrt(var))
        if f > max(settings.noise_floor.get(name, 0.0), settings.min_effect):
            floors[name] = f
    return floors


_LABELS = {m.name: m.label for m in (*METRICS, *SUMMARY_METRICS)}


def describe_floors(floors: Mapping[str, float]) -> str:
    """``TTFT p95 x9.0, E2E p95 x1.8``: the floors, largest first."""
    return ", ".join(
        f"{_LABELS.get(n, n)} x{1 + f:.2f}" for n, f in sorted(floors.items(), key=lambda kv: -kv[1])
    )


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction (Lentz)."""
    if x <= 0 or x >= 1:
        return 0.0 if x <= 0 else 1.0
    if x > (a + 1) / (a + b + 2):
        return 1 - _betainc(b, a, 1 - x)
    front = (
        math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
        / a
    )
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 300):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1 + num * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + num / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1) < 1e-14:
            break
    return front * f


def _bucket_bounds(h: Histogram, q: float) -> tuple[float, float]:
    """The (lower, upper) bounds of the bucket holding the q-quantile: the resolution of the
    quantile estimate. Upper is +inf when the rank falls in the ``+Inf`` bucket."""
    total = h.buckets[-1][1]
    rank = q * total
    prev = 0.0
    for b, c in h.buckets:
        if c >= rank and c > 0:
            return prev, b
        prev = b
    return prev, math.inf


def compare_metric(
    spec: MetricSpec, a: MetricSample | None, b: MetricSample | None, settings: Settings, key: str = ""
) -> MetricDelta:
    """Compare one metric between A and B, choosing the noise rule by the kind of sample."""
    if a is None or b is None:
        return _delta(
            spec, None, None, status="missing", method="", note=f"no data in {'A' if a is None else 'B'}"
        )
    if type(a) is not type(b):
        return _delta(
            spec, None, None, status="missing", method="", note="A and B carry different kinds of data"
        )
    if isinstance(a, ValuesSample) and isinstance(b, ValuesSample):
        return _compare_values(spec, a, b, settings, key)
    if isinstance(a, HistogramSample) and isinstance(b, HistogramSample):
        return _compare_histograms(spec, a, b, settings)
    if isinstance(a, SummarySample) and isinstance(b, SummarySample):
        return _compare_summaries(spec, a, b, settings)
    if isinstance(a, SketchSample) and isinstance(b, SketchSample):
        return _compare_sketches(spec, a, b, settings)
    if isinstance(a, ScalarSample) and isinstance(b, ScalarSample):
        change = _rel(a.value, b.value)
        sig = change is not None and abs(change) >= settings.min_effect
        return MetricDelta(
            spec,
            a.value,
            b.value,
            change,
            None,
            None,
            sig,
            "ok",
            "run-total",
            note="a run total: no interval from one run; counted when beyond the minimum effect",
        )
    if isinstance(a, CountSample) and isinstance(b, CountSample):
        return _compare_counts(spec, a, b, settings)
    raise ExperimentError(f"cannot compare samples of type {type(a).__name__}")


def _delta(
    spec: MetricSpec,
    a: float | None,
    b: float | None,
    *,
    status: str,
    method: str,
    note: str = "",
    n_a: float | None = None,
    n_b: float | None = None,
) -> MetricDelta:
    return MetricDelta(spec, a, b, _rel(a, b), None, None, False, status, method, n_a, n_b, note)


def _rel(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or a <= 0:
        return None
    return b / a - 1


def _significant(change: float | None, lo: float | None, hi: float | None, settings: Settings) -> bool:
    if change is None or lo is None or hi is None:
        return False
    excludes_zero = lo > 0 or hi < 0
    return excludes_zero and abs(change) >= settings.min_effect


def _compare_values(
    spec: MetricSpec, a: ValuesSample, b: ValuesSample, settings: Settings, key: str
) -> MetricDelta:
    q = spec.q if spec.q is not None else 0.5
    if not a.values or not b.values:
        return _delta(
            spec, None, None, status="missing", method="bootstrap", note="no observations", n_a=a.n, n_b=b.n
        )
    pa, pb = quantile(a.values, q), quantile(b.values, q)
    if a.n < settings.min_requests or b.n < settings.min_requests:
        return _delta(
            spec,
            pa,
            pb,
            status="insufficient",
            method="bootstrap",
            n_a=a.n,
            n_b=b.n,
            note=f"fewer than {settings.min_requests} requests",
        )
    change = _rel(pa, pb)
    if change is None:
        return _delta(spec, pa, pb, status="ok", method="bootstrap", n_a=a.n, n_b=b.n, note="A is zero")
    rng = random.Random(_seed(settings, f"{key}/{spec.name}"))
    reps: list[float] = []
    for _ in range(settings.bootstrap):
        ra = _bootstrap_quantile(a, q, rng)
        rb = _bootstrap_quantile(b, q, rng)
        if ra > 0:
            reps.append(rb / ra - 1)
    if not reps:
        return _delta(spec, pa, pb, status="ok", method="bootstrap", n_a=a.n, n_b=b.n)
    lo, hi = _ci_from(reps, settings.confidence)
    note = ""
    if a.resample_size and len(a.values) > a.resample_size:
        note = f"pooled per-token values; bootstrap resamples {a.resample_size} of them"
    return MetricDelta(
        spec,
        pa,
        pb,
        change,
        lo,
        hi,
        _significant(change, lo, hi, settings),
        "ok",
        "bootstrap",
        a.n,
        b.n,
        note,
    )


def _compare_histograms(
    spec: MetricSpec, a: HistogramSample, b: HistogramSample, settings: Settings
) -> MetricDelta:
    q = spec.q if spec.q is not None else 0.5
    pa, pb = a.hist.quantile(q), b.hist.quantile(q)
    if pa is None or pb is None:
        return _delta(
            spec, pa, pb, status="missing", method="histogram", n_a=a.n, n_b=b.n, note="empty histogram"
        )
    if a.n < settings.min_requests or b.n < settings.min_requests:
        return _delta(
            spec,
            pa,
            pb,
            status="insufficient",
            method="histogram",
            n_a=a.n,
            n_b=b.n,
            note=f"fewer than {settings.min_requests} observations",
        )
    la, ua = _bucket_bounds(a.hist, q)
    lb, ub = _bucket_bounds(b.hist, q)
    # Worst-case relative change given where each quantile can lie inside its bucket.
    lo = lb / ua - 1 if math.isfinite(ua) and ua > 0 else -1.0
    hi = ub / la - 1 if la > 0 and math.isfinite(ub) else math.inf
    change = _rel(pa, pb)
    sig = change is not None and (lo > 0 or hi < 0) and abs(change) >= settings.min_effect
    return MetricDelta(
        spec,
        pa,
        pb,
        change,
        lo,
        None if math.isinf(hi) else hi,
        sig,
        "ok",
        "histogram",
        a.n,
        b.n,
        "counted only when the quantiles fall in separate buckets",
    )


_Z = NormalDist()


def _quantile_se(q: float, std: float, n: int) -> float:
    """Asymptotic standard error of the q-quantile of a normal sample: sqrt(q(1-q))/phi(z_q)*s/sqrt(n)."""
    z = _Z.inv_cdf(min(max(q, 1e-6), 1 - 1e-6))
    return math.sqrt(q * (1 - q)) / _Z.pdf(z) * std / math.sqrt(max(n, 1))


def _compare_summaries(
    spec: MetricSpec, a: SummarySample, b: SummarySample, settings: Settings
) -> MetricDelta:
    q = spec.q if spec.q is not None else 0.5
    pa, pb = a.quantiles.get(q), b.quantiles.get(q)
    if pa is None or pb is None:
        what = "the mean" if q == MEAN_Q else f"p{q * 100:g}"
        return _delta(
            spec,
            pa,
            pb,
            status="missing",
            method="summary",
            n_a=a.n,
            n_b=b.n,
            note=f"{what} not reported",
        )
    if a.n < settings.min_requests or b.n < settings.min_requests:
        return _delta(
            spec,
            pa,
            pb,
            status="insufficient",
            method="summary",
            n_a=a.n,
            n_b=b.n,
            note=f"fewer than {settings.min_requests} requests",
        )
    change = _rel(pa, pb)
    if change is None or a.std is None or b.std is None or pb <= 0 or q == MEAN_Q:
        # no per-request values, no spread (or a mean): no interval, no bootstrap; a change
        # counts when it is beyond the metric's run-to-run noise floor (and the minimum effect)
        floor = max(settings.noise_floor.get(spec.name, settings.summary_floor), settings.min_effect)
        beyond = _beyond(change, floor)
        return MetricDelta(
            spec,
            pa,
            pb,
            change,
            None,
            None,
            beyond,
            "ok",
            "summary",
            a.n,
            b.n,
            f"reported value only (no per-request values: no bootstrap); counted beyond a "
            f"{floor * 100:.0f}% run-to-run noise floor",
        )
    cap = settings.itl_resample
    se_a = _quantile_se(q, a.std, min(a.n, cap))
    se_b = _quantile_se(q, b.std, min(b.n, cap))
    ratio = pb / pa
    se_r = ratio * math.sqrt((se_a / pa) ** 2 + (se_b / pb) ** 2)
    z = _Z.inv_cdf(1 - (1 - settings.confidence) / 2)
    lo, hi = ratio - z * se_r - 1, ratio + z * se_r - 1
    return MetricDelta(
        spec,
        pa,
        pb,
        change,
        lo,
        hi,
        _significant(change, lo, hi, settings),
        "ok",
        "summary",
        a.n,
        b.n,
        "approximate interval from reported percentiles and spread (no per-request values)",
    )


TAIL_REQUESTS = 3.0
"""A sketch quantile gets an interval only with at least this many requests above it (p95: 60,
p99: 300): below, its normal approximation is too optimistic (tests/verify/test_sketch_sample.py)."""


def _sparsity(qs: Mapping[float, float], q: float, accuracy: float) -> float | None:
    """dx/dq at the q-quantile (the inverse density a quantile's standard error scales with),
    from the exported quantiles next to it. Per side, two secants: in q, (x_n - x_q) / (q_n - q),
    and of log x against the normal score z, x_q * slope / phi(z_q) (exact for a log-normal).
    Above q (a latency tail is convex) the first overstates the slope and the second may
    understate it: their geometric mean; below q the first understates it: the larger. Then
    the larger side's. Measured on log-normal, two-mode, exponential and uniform samples
    (tests/verify/test_sketch_sample.py, docs/plugin.md) this keeps a 95% interval's false
    alarms near 5%. No smaller than the spread the sketch resolves (its relative accuracy
    either way). None with no neighbour."""
    x = qs[q]
    below = [lv for lv in qs if lv < q]
    above = [lv for lv in qs if lv > q]
    sides = [lv for lv in (max(below) if below else None, min(above) if above else None) if lv is not None]
    if not sides or not 0 < q < 1:
        return None
    zq = _Z.inv_cdf(q)
    out = 0.0
    for lv in sides:
        xn = qs[lv]
        plain = (xn - x) / (lv - q)
        if x > 0 and xn > 0 and 0 < lv < 1 and plain > 0:
            logz = x * (math.log(xn) - math.log(x)) / (_Z.inv_cdf(lv) - zq) / _Z.pdf(zq)
            # above q a secant in q overstates a convex tail's slope, below it understates it
            out = max(out, math.sqrt(plain * logz) if lv > q else max(plain, logz))
        else:
            out = max(out, plain)
    return max(out, 2 * accuracy * abs(x) / max(abs(lv - q) for lv in sides))


def sketch_estimate(s: SketchSample, q: float) -> tuple[float, float] | None:
    """(estimate, standard error) of the q-quantile from a :class:`SketchSample`: each batch's
    sketch quantile with the asymptotic error of a sample quantile, sqrt(q(1-q)/n) * dx/dq
    (Siddiqui's sparsity estimate from the neighbouring quantiles), combined over batches with
    their request counts as weights. None when no batch has the quantile, a count or a neighbour."""
    pts = []
    for n, qs in s.batches:
        if n <= 0 or q not in qs:
            continue
        sp = _sparsity(qs, q, s.relative_accuracy)
        if sp is None:
            continue
        pts.append((n, qs[q], math.sqrt(q * (1 - q) / n) * sp))
    if not pts:
        return None
    total = sum(n for n, _, _ in pts)
    est = sum(n * v for n, v, _ in pts) / total
    se = math.sqrt(sum((n * e) ** 2 for n, _, e in pts)) / total
    return est, se


def _beyond(change: float | None, floor: float) -> bool:
    """A relative change at least ``floor`` either way, on the log scale (x2 and /2 alike)."""
    return change is not None and change > -1 and abs(math.log1p(change)) >= math.log1p(floor)


def _compare_sketches(spec: MetricSpec, a: SketchSample, b: SketchSample, settings: Settings) -> MetricDelta:
    q = spec.q if spec.q is not None else 0.5
    if q == MEAN_Q:
        pa, pb = a.mean, b.mean
        change = _rel(pa, pb)
        floor = max(settings.summary_floor, settings.min_effect)
        beyond = _beyond(change, floor)
        return MetricDelta(
            spec,
            pa,
            pb,
            change,
            None,
            None,
            beyond,
            "ok" if pa is not None and pb is not None else "missing",
            "sketch",
            a.n,
            b.n,
            f"exact means (no spread exported): counted beyond a {floor * 100:.0f}% floor",
        )
    ea, eb = sketch_estimate(a, q), sketch_estimate(b, q)
    pa = ea[0] if ea is not None else None
    pb = eb[0] if eb is not None else None
    if ea is None or eb is None:
        return _delta(
            spec,
            pa,
            pb,
            status="missing",
            method="sketch",
            n_a=a.n,
            n_b=b.n,
            note="no sketch quantile (or no request count) in " + ("A" if ea is None else "B"),
        )
    if a.n < settings.min_requests or b.n < settings.min_requests:
        return _delta(
            spec,
            pa,
            pb,
            status="insufficient",
            method="sketch",
            n_a=a.n,
            n_b=b.n,
            note=f"fewer than {settings.min_requests} requests",
        )
    if min(a.n, b.n) * (1 - q) < TAIL_REQUESTS:
        need = math.ceil(TAIL_REQUESTS / (1 - q))
        return _delta(
            spec,
            pa,
            pb,
            status="insufficient",
            method="sketch",
            n_a=a.n,
            n_b=b.n,
            note=f"p{q * 100:g} needs {need} requests for an interval (the {TAIL_REQUESTS:g} above it)",
        )
    change = _rel(pa, pb)
    if change is None or pb is None or pb <= 0 or pa is None:
        return _delta(spec, pa, pb, status="ok", method="sketch", n_a=a.n, n_b=b.n, note="A is zero")
    ratio = pb / pa
    se_r = ratio * math.sqrt((ea[1] / pa) ** 2 + (eb[1] / pb) ** 2)
    z = _Z.inv_cdf(1 - (1 - settings.confidence) / 2)
    # each sketch value v lies within a relative accuracy of the exact sample quantile x, so
    # x is in [v / (1 + acc), v / (1 - acc)]: the ratio's interval widens by those factors
    ra, rb = a.relative_accuracy, b.relative_accuracy
    lo = max(ratio - z * se_r, 0.0) * (1 - ra) / (1 + rb) - 1
    hi = (ratio + z * se_r) * (1 + rb) / (1 - ra) - 1
    return MetricDelta(
        spec,
        pa,
        pb,
        change,
        lo,
        hi,
        _significant(change, lo, hi, settings),
        "ok",
        "sketch",
        a.n,
        b.n,
        "plugin sketch: interval from the request counts and the spread between exported quantiles "
        f"(normal approximation), widened by the sketches' {a.relative_accuracy * 100:g}% accuracy",
    )


def _compare_counts(spec: MetricSpec, a: CountSample, b: CountSample, settings: Settings) -> MetricDelta:
    if a.exposure <= 0 or b.exposure <= 0:
        return _delta(spec, a.count, b.count, status="missing", method="poisson", note="no exposure")
    if a.count == 0 and b.count == 0:
        return MetricDelta(
            spec,
            a.count,
            b.count,
            0.0,
            None,
            None,
            False,
            "ok",
            "poisson",
            a.exposure,
            b.exposure,
            "none in either run",
        )
    ca, cb = max(a.count, 0.5), max(b.count, 0.5)  # 0 counted as 0.5 (continuity) for the ratio
    log_r = math.log((cb / b.exposure) / (ca / a.exposure))
    se = math.sqrt(1 / ca + 1 / cb)
    z = _Z.inv_cdf(1 - (1 - settings.confidence) / 2)
    change = math.exp(log_r) - 1
    lo, hi = math.exp(log_r - z * se) - 1, math.exp(log_r + z * se) - 1
    note = "rate per unit of exposure; Poisson interval" + (
        "; a zero counted as 0.5" if 0 in (a.count, b.count) else ""
    )
    return MetricDelta(
        spec,
        a.count,
        b.count,
        change,
        lo,
        hi,
        _significant(change, lo, hi, settings),
        "ok",
        "poisson",
        a.exposure,
        b.exposure,
        note,
    )


def compare_samples(
    a: Mapping[str, MetricSample],
    b: Mapping[str, MetricSample],
    settings: Settings | None = None,
    key: str = "",
    metrics: Iterable[MetricSpec] = METRICS,
) -> dict[str, MetricDelta]:
    """Compare every metric whose quantity appears on either side. Samples are keyed by quantity
    (``ttft``, ``tpot``, ``itl``, ``e2e``, ``output_throughput``, ``request_throughput``,
    ``preemptions``); ``key`` names the bucket so that each bootstrap has its own fixed seed."""
    settings = settings or Settings()
    out: dict[str, MetricDelta] = {}
    metrics = list(metrics)
    if any(m.quantity in PER_REQUEST_QUANTITIES for m in metrics):
        metrics += [
            m
            for m in SUMMARY_METRICS
            if isinstance(a.get(m.quantity), SummarySample)
            and isinstance(b.get(m.quantity), SummarySample)
            and (m.q in a[m.quantity].quantiles or m.q in b[m.quantity].quantiles)  # type: ignore[union-attr]
        ]
    for spec in metrics:
        if spec.quantity not in a and spec.quantity not in b:
            continue
        d = compare_metric(spec, a.get(spec.quantity), b.get(spec.quantity), settings, key)
        if d.significant and d.change is not None and settings.under_noise_floor(spec.name, d.change):
            d = replace(d, significant=False, under_floor=settings.noise_floor[spec.name])
        out[spec.name] = d
    return out


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------


def fmt_value(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "s":
        return f"{v * 1000:.3g} ms" if abs(v) < 1 else f"{v:.3g} s"
    if unit == "tok/s":
        return f"{v:,.0f} tok/s"
    if unit == "req/s":
        return f"{v:.3g} req/s"
    return f"{v:g}"


def fmt_pct(x: float | None) -> str:
    if x is None:
        return "?"
    return f"{x * 100:+.0f}%"


def _pct(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x * 100, 1)


def _round(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, 6)
