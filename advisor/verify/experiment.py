"""Before/after comparison: is the new knob value better, worse, or within noise?

The tuning procedure is an experiment: keep a baseline (A), change one knob, replay the same
load (B), compare TTFT, TPOT/ITL, e2e latency, throughput and preemptions, split by request
length, then keep the new value or restore the old one. This module is the pure core of that
comparison plus one loader at the edge (:func:`load_bench` for ``vllm bench serve
--save-result --save-detailed`` files).

Two kinds of input are compared through one abstraction, :data:`MetricSample`:

- per-request values from a benchmark file (:class:`ValuesSample`): percentile differences get
  a seeded, deterministic bootstrap confidence interval;
- Prometheus histogram bucket deltas from a live window (:class:`HistogramSample`): the noise
  rule is conservative, a difference counts only when it is larger than the bucket resolution
  at that quantile;
- and, for what files and pages carry only as aggregates, :class:`SummarySample` (reported
  percentiles with a standard deviation: normal-approximation interval), :class:`ScalarSample`
  (a run total such as throughput: no interval, counted when larger than the minimum effect) and
  :class:`CountSample` (event counts such as preemptions: Poisson rate-ratio interval).

A difference is *significant* only when its interval excludes 0 AND its size reaches the
minimum effect (default 5%). :func:`judge` turns the differences into a verdict
(``keep`` / ``revert`` / ``inconclusive``) with reasons as sentences that name numbers.
"""

from __future__ import annotations

import gzip
import itertools
import json
import math
import random
import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from statistics import NormalDist
from typing import Any, Literal

from advisor.core.config import DEFAULT_TARGETS
from advisor.core.model import Histogram

Verdict = Literal["keep", "revert", "inconclusive"]
VERDICTS: tuple[str, ...] = ("keep", "revert", "inconclusive")


class ExperimentError(ValueError):
    """Bad input for a comparison: a missing or malformed file, an unknown metric name."""


# --------------------------------------------------------------------------------------------
# Metric samples: what one side (A or B) of a comparison knows about one quantity.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ValuesSample:
    """Raw observations (seconds), sorted. ``units`` is the number of independent units behind
    them (requests, for pooled per-token ITLs) and is what the minimum-count rule checks;
    ``resample_size`` caps the bootstrap resample size (an m-out-of-n bootstrap), which keeps
    pooled per-token values, correlated within a request, from looking more certain than they are.
    """

    values: tuple[float, ...]
    units: int | None = None
    resample_size: int | None = None

    @staticmethod
    def of(
        values: Iterable[float], units: int | None = None, resample_size: int | None = None
    ) -> ValuesSample:
        return ValuesSample(tuple(sorted(float(v) for v in values)), units, resample_size)

    @property
    def n(self) -> int:
        return self.units if self.units is not None else len(self.values)


@dataclass(frozen=True)
class HistogramSample:
    """Bucket deltas of a Prometheus histogram over a window (live before/after)."""

    hist: Histogram

    @property
    def n(self) -> float:
        return self.hist.count


@dataclass(frozen=True)
class SummarySample:
    """Percentiles reported without the raw values (``{0.5: v, 0.95: v}``), with the standard
    deviation and count when known. Intervals use the asymptotic normal standard error of a
    quantile; they are approximate and flagged as such."""

    quantiles: Mapping[float, float]
    n: int
    std: float | None = None


@dataclass(frozen=True)
class ScalarSample:
    """One number for the whole run (throughput). No interval can be computed from one run."""

    value: float


@dataclass(frozen=True)
class CountSample:
    """An event count over an exposure (preemptions over N requests or T seconds)."""

    count: float
    exposure: float = 1.0


MetricSample = ValuesSample | HistogramSample | SummarySample | ScalarSample | CountSample


MEAN_Q = -1.0
"""The ``q`` of a mean in a :class:`MetricSpec` and a :class:`SummarySample`'s quantiles."""


@dataclass(frozen=True)
class MetricSpec:
    """One compared metric: which quantity, which quantile (None for totals and counts),
    its unit and which direction is better."""

    name: str
    label: str
    quantity: str
    q: float | None
    unit: str
    better: Literal["lower", "higher"]


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("ttft_p50", "TTFT p50", "ttft", 0.5, "s", "lower"),
    MetricSpec("ttft_p95", "TTFT p95", "ttft", 0.95, "s", "lower"),
    MetricSpec("tpot_p50", "TPOT p50", "tpot", 0.5, "s", "lower"),
    MetricSpec("tpot_p95", "TPOT p95", "tpot", 0.95, "s", "lower"),
    MetricSpec("itl_p50", "ITL p50", "itl", 0.5, "s", "lower"),
    MetricSpec("itl_p95", "ITL p95", "itl", 0.95, "s", "lower"),
    MetricSpec("e2e_p50", "E2E latency p50", "e2e", 0.5, "s", "lower"),
    MetricSpec("e2e_p95", "E2E latency p95", "e2e", 0.95, "s", "lower"),
    MetricSpec("output_throughput", "Output throughput", "output_throughput", None, "tok/s", "higher"),
    MetricSpec("request_throughput", "Request throughput", "request_throughput", None, "req/s", "higher"),
    MetricSpec("preemptions", "Preemptions", "preemptions", None, "count", "lower"),
)
METRIC_NAMES: tuple[str, ...] = tuple(m.name for m in METRICS)
SUMMARY_METRICS: tuple[MetricSpec, ...] = tuple(
    MetricSpec(f"{qty}_{stat}", f"{label} {stat}", qty, q, "s", "lower")
    for qty, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E latency"))
    for stat, q in (("p99", 0.99), ("mean", MEAN_Q))
)
"""What a summary-only result (a printed table, a --save-result file without --save-detailed)
reports besides medians: P99s and means. Compared where both runs report them; they decide a
verdict only when named as a target."""
_SPEC = {m.name: m for m in (*METRICS, *SUMMARY_METRICS)}
PER_REQUEST_QUANTITIES = ("ttft", "tpot", "itl", "e2e")
"""Quantities that can be split by request length (the others are run totals)."""

GUARDS: tuple[str, ...] = (
    "ttft_p50",
    "ttft_p95",
    "tpot_p95",
    "itl_p95",
    "e2e_p95",
    "output_throughput",
    "preemptions",
)
"""Metrics that must not get worse by more than the guard tolerance for a change to be kept."""

KNOB_TRADEOFFS: Mapping[tuple[str, str], tuple[str, ...]] = {
    # a lower cap queues requests instead of admitting and preempting them: TTFT p50 rises by
    # design (the rule's `expect` says so); e2e p95 and throughput still guard the change
    ("max_num_seqs", "decrease"): ("ttft_p50",),
    # smaller prefill chunks: the median ITL rises as decodes share more, shorter steps
    ("max_num_batched_tokens", "decrease"): ("itl_p50",),
    # a higher cap fills the KV cache and may preempt: what that costs shows in TPOT/ITL, TTFT
    # and throughput, which still guard the change (H200, 8B: 48 -> 72 with KV for ~63 preempted
    # 60 requests and gave +15% throughput, -17% TTFT p95; validation/runs/kv-seqs-bind-r2.*)
    ("max_num_seqs", "increase"): ("preemptions",),
}
"""Metrics a knob change is documented to cost: not guards for that change."""

KNOB_TARGETS: Mapping[tuple[str, str], tuple[str, ...]] = {
    ("max_num_batched_tokens", "decrease"): ("itl_p95",),
    ("max_num_batched_tokens", "increase"): ("ttft_p95", "output_throughput"),
    ("max_num_seqs", "decrease"): ("preemptions",),
    ("max_num_seqs", "increase"): ("output_throughput", "ttft_p50"),
    ("gpu_memory_utilization", "increase"): ("preemptions", "output_throughput"),
    ("kv_cache_memory_bytes", "increase"): ("preemptions", "output_throughput"),
    ("tensor_parallel_size", "increase"): ("preemptions", "tpot_p95"),
    ("pipeline_parallel_size", "increase"): ("preemptions",),
    ("api_server_count", "increase"): ("ttft_p95",),
    ("data_parallel_size", "increase"): ("ttft_p95", "output_throughput"),
    ("enable_expert_parallel", "enable"): ("output_throughput", "tpot_p95"),
    ("mm_encoder_tp_mode", "set"): ("ttft_p95",),
    ("media_loading_thread_count", "increase"): ("ttft_p95",),
}
"""What a knob change is meant to move (from vLLM's tuning guide); see :func:`targets_for_knob`."""


NOISE_FLOORS: Mapping[str, float] = {
    # Four runs of one configuration on H200s (validation/runs/kv-seqs-bind{,-r2}.before,
    # kv-seqs-bind-aa.{1,2}; docs/validation.md "Run-to-run noise"): ITL p95 sits on the edge
    # between decode-only steps (~7 ms) and steps that carry a prefill (20-30 ms), so it moved by
    # a factor of up to 1.34 (20.2 vs 27.0 ms) between device leases, where the bootstrap interval
    # of one run spans about +-10%; two servers on one GPU differed by 3%. Every other metric
    # stayed within 5%. The floor is the largest A/A ratio with a margin; a real fix moves it
    # more (2048-token chunks: 153 -> 64 ms, a factor of 2.4).
    "itl_p95": 0.40,
}
"""Run-to-run noise floors: a metric that moved by less than this factor (B/A and A/B both under
1 + floor) is within noise whatever its interval."""


@dataclass(frozen=True)
class Settings:
    """Noise and decision thresholds. ``min_requests``: below it a bucket is insufficient;
    ``min_effect``: the smallest relative change that counts; ``guard_tolerance``: how much worse
    a guard metric may get before a change is reverted; ``slo``: latency targets (seconds) per
    guard metric: a guard that got worse but ends within its target is a trade-off, not a
    breach (see :func:`slo_from_targets`); ``bootstrap``: replicates;
    ``itl_resample``: the m of the m-out-of-n bootstrap for pooled per-token ITLs;
    ``noise_floor``: per metric, the run-to-run variation the intervals of one run cannot see
    (see NOISE_FLOORS); ``summary_floor``: the floor of a metric that has none there, when
    a result reports no spread (a printed table): twice the 5% A/A variation of those metrics."""

    min_requests: int = 20
    min_effect: float = 0.05
    guard_tolerance: float = 0.10
    confidence: float = 0.95
    bootstrap: int = 1000
    seed: int = 0
    itl_resample: int = 2000
    summary_floor: float = 0.10
    slo: Mapping[str, float] = field(default_factory=lambda: slo_from_targets(DEFAULT_TARGETS))
    noise_floor: Mapping[str, float] = field(default_factory=lambda: dict(NOISE_FLOORS))

    def under_noise_floor(self, metric: str, change: float) -> bool:
        """Whether ``change`` (B/A - 1) of ``metric`` is within its run-to-run noise floor,
        either way (a factor, so +40% and -29% are the same distance)."""
        floor = self.noise_floor.get(metric)
        return floor is not None and change > -1 and abs(math.log1p(change)) < math.log1p(floor)


def slo_from_targets(targets: Mapping[str, float]) -> dict[str, float]:
    """The advisor's targets (``ttft_p95_seconds``, ``itl_p95_seconds``) as per-metric limits.

    The ITL target also bounds TPOT p95 (a request's mean inter-token time). Why guards respect
    targets: a change that admits more requests per step (a higher max_num_seqs, more KV memory)
    makes every step longer by design; on the H200 such changes gained 21-33% throughput and cut
    TTFT p95 by 21-26% while ITL p95 went 7.8 -> 11.7 ms, far inside a 100 ms target
    (docs/validation.md). A guard outside its target still counts in full."""
    out: dict[str, float] = {}
    if targets.get("ttft_p95_seconds") is not None:
        out["ttft_p95"] = float(targets["ttft_p95_seconds"])
    if targets.get("itl_p95_seconds") is not None:
        out["itl_p95"] = out["tpot_p95"] = float(targets["itl_p95_seconds"])
    return out


@dataclass(frozen=True)
class LoadTolerance:
    """How far the length distributions of A and B may drift and still be "the same load"."""

    median: float = 0.10
    p95: float = 0.15
    mean: float = 0.10


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
        text = (
            f"{self.spec.label} {_fmt_value(self.a, self.spec.unit)} -> {_fmt_value(self.b, self.spec.unit)}"
        )
        parts = []
        if self.change is not None:
            parts.append(_fmt_pct(self.change))
        if self.ci_low is not None or self.ci_high is not None:
            label = "bucket bounds" if self.method == "histogram" else f"{confidence * 100:.0f}% CI"
            parts.append(f"{label} {_fmt_pct(self.ci_low)}..{_fmt_pct(self.ci_high)}")
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
        beyond = change is not None and change > -1 and abs(math.log1p(change)) >= math.log1p(floor)
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
# Verdict
# --------------------------------------------------------------------------------------------


def parse_targets(target: str | Sequence[str] | None) -> tuple[str, ...]:
    """``"itl_p95"`` / ``"itl_p95,tpot_p95"`` / a list -> validated metric names; () for None."""
    if target is None:
        return ()
    items = target.split(",") if isinstance(target, str) else list(target)
    names = tuple(t.strip() for t in items if t.strip())
    unknown = [t for t in names if t not in _SPEC]
    if unknown:
        raise ExperimentError(f"unknown target metric {', '.join(unknown)}; known: {', '.join(_SPEC)}")
    return names


def guards_for_knob(knob: str, direction: str) -> tuple[str, ...]:
    """The guard metrics for a change of ``knob`` in ``direction``: GUARDS less its documented
    trade-offs (KNOB_TRADEOFFS)."""
    skip = set(KNOB_TRADEOFFS.get((knob, direction), ()))
    return tuple(g for g in GUARDS if g not in skip)


def targets_for_knob(knob: str, direction: str) -> tuple[str, ...]:
    """The metrics a change of ``knob`` in ``direction`` (increase|decrease) is meant to improve;
    () when unknown (then every metric is a target)."""
    return KNOB_TARGETS.get((knob, direction), ())


def _within_slo(d: MetricDelta, slo: Mapping[str, float]) -> bool:
    limit = slo.get(d.spec.name)
    return limit is not None and d.b is not None and d.b <= limit


def judge(
    overall: Mapping[str, MetricDelta],
    targets: Sequence[str] = (),
    settings: Settings | None = None,
    buckets: Sequence[BucketResult] = (),
    guards: Sequence[str] = GUARDS,
) -> tuple[Verdict, list[str]]:
    """Decide keep / revert / inconclusive from the overall differences.

    With targets: ``revert`` when a target got significantly worse, or when a guard metric got
    significantly worse by more than the guard tolerance (the gain cost more than it saved:
    restore the old value, as the tuning guide says); ``keep`` when a target improved
    significantly and no guard broke; otherwise ``inconclusive``.
    Without targets every metric is a target: ``keep`` when something improved and nothing got
    worse beyond the tolerance, ``revert`` when something got worse beyond it and nothing
    improved, ``inconclusive`` for a trade-off or when everything is within noise.
    """
    settings = settings or Settings()
    conf = settings.confidence
    tol = settings.guard_tolerance
    reasons: list[str] = []
    if targets:
        tds = [overall[t] for t in targets if t in overall]
        missing = [t for t in targets if t not in overall or overall[t].status == "missing"]
        improved = [d for d in tds if d.direction == "better"]
        worsened = [d for d in tds if d.direction == "worse"]
        worse_guards = [
            overall[g]
            for g in guards
            if g in overall
            and g not in targets
            and overall[g].direction == "worse"
            and overall[g].worse_by() > tol
        ]
        within = [d for d in worse_guards if _within_slo(d, settings.slo)]
        traded_names = {d.spec.name for d in within}
        breaches = [d for d in worse_guards if d.spec.name not in traded_names]
        traded = [
            f"Within its target: {d.describe(conf)}, under {_fmt_value(settings.slo[d.spec.name], d.spec.unit)}"
            " (a trade-off, not a breach)."
            for d in within
        ]
        traded += [  # the costs this knob change is known to trade (see KNOB_TRADEOFFS): shown, not judged
            f"A known cost of this change, not a guard: {overall[g].describe(conf)}."
            for g in GUARDS
            if g not in guards and g not in targets and g in overall and overall[g].direction == "worse"
        ]
        for t in missing:
            reasons.append(
                f"{_SPEC[t].label} was not measured in both runs"
                + (
                    " (benchmark files carry no preemption count; pass it from vllm:num_preemptions_total)"
                    if t == "preemptions"
                    else ""
                )
                + "."
            )
        if worsened:
            reasons += [f"Target got worse: {d.describe(conf)}." for d in worsened]
            reasons += [
                f"Guard got worse by more than {tol * 100:.0f}%: {d.describe(conf)}." for d in breaches
            ]
            reasons.append("Restore the previous value.")
            return "revert", reasons
        if breaches:
            reasons += [f"Target improved: {d.describe(conf)}." for d in improved]
            reasons += traded
            reasons += [
                f"Guard got worse by more than {tol * 100:.0f}%: {d.describe(conf)}." for d in breaches
            ]
            reasons.append(
                "The change cost more than it gained: restore the previous value."
                if improved
                else "Nothing targeted improved: restore the previous value."
            )
            return "revert", reasons
        if improved:
            reasons += [f"Target improved: {d.describe(conf)}." for d in improved]
            reasons += traded
            checked = [
                overall[g]
                for g in guards
                if g in overall and g not in targets and overall[g].status == "ok" and g not in traded_names
            ]
            if checked:
                reasons.append(
                    f"No guard metric got worse by more than {tol * 100:.0f}%: "
                    + "; ".join(d.describe(conf) for d in checked)
                    + "."
                )
            reasons += _bucket_exceptions(buckets, targets, conf)
            return "keep", reasons
        for d in tds:
            if d.status == "insufficient":
                reasons.append(f"Too few observations to judge {d.spec.label} ({d.note}).")
            elif d.status == "ok":
                reasons.append(f"Target within noise: {d.describe(conf)}.")
        reasons.append("Inconclusive: keep the old value or replay a longer load.")
        return "inconclusive", reasons

    ok = [d for d in overall.values() if d.status == "ok" and d.spec.name in METRIC_NAMES]
    improved = [d for d in ok if d.direction == "better"]
    breaches = [d for d in ok if d.direction == "worse" and d.worse_by() > tol]
    if improved and not breaches:
        reasons += [f"Improved: {d.describe(conf)}." for d in improved]
        reasons.append(f"Nothing got worse by more than {tol * 100:.0f}%.")
        return "keep", reasons
    if breaches and not improved:
        reasons += [f"Got worse by more than {tol * 100:.0f}%: {d.describe(conf)}." for d in breaches]
        reasons.append("Nothing improved: restore the previous value.")
        return "revert", reasons
    if breaches:
        reasons += [f"Improved: {d.describe(conf)}." for d in improved]
        reasons += [f"Got worse by more than {tol * 100:.0f}%: {d.describe(conf)}." for d in breaches]
        reasons.append("A trade-off: name the knob's target metric (--target) to decide.")
        return "inconclusive", reasons
    if not ok:
        reasons.append("No metric could be compared (too few requests or no data).")
    else:
        reasons.append(
            f"Every difference is within noise (under {settings.min_effect * 100:.0f}% "
            f"or a {conf * 100:.0f}% interval that includes 0)."
        )
    return "inconclusive", reasons


def _bucket_exceptions(buckets: Sequence[BucketResult], targets: Sequence[str], conf: float) -> list[str]:
    out = []
    for bk in buckets:
        for t in targets:
            d = bk.metrics.get(t)
            if d is not None and d.direction == "worse":
                out.append(f"But for prompts {bk.label}: {d.describe(conf)}.")
    return out


# --------------------------------------------------------------------------------------------
# Benchmark files
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestRow:
    """One request of a benchmark run; None where the file does not carry the field."""

    prompt_len: int | None
    output_len: int | None
    ttft_s: float | None
    tpot_s: float | None
    itls_s: tuple[float, ...] | None
    e2e_s: float | None
    ok: bool
    start_time: float | None = None


@dataclass(frozen=True)
class BenchRun:
    """A ``vllm bench serve`` result: per-request rows (may be empty) and run totals."""

    source: str
    rows: tuple[RequestRow, ...]
    duration_s: float | None
    completed: int | None
    failed: int | None
    output_throughput: float | None
    request_throughput: float | None
    max_concurrency: int | None
    request_rate: float | None
    num_prompts: int | None
    burstiness: float | None = None
    total_input_tokens: int | None = None
    total_output_tokens: int | None = None
    model_id: str | None = None
    date: str | None = None
    dataset: Mapping[str, Any] = field(default_factory=dict)
    aggregates: Mapping[str, float] = field(default_factory=dict)

    @property
    def ok_rows(self) -> tuple[RequestRow, ...]:
        return tuple(r for r in self.rows if r.ok)


_DATASET_KEYS = (
    "dataset_name",
    "random_input_len",
    "random_output_len",
    "random_range_ratio",
    "random_prefix_len",
    "sharegpt_output_len",
    "seed",
    "ignore_eos",
)
_AGG_METRICS = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2e": "e2el"}


def load_bench(path: str | Path, itls_path: str | Path | None = None) -> BenchRun:
    """Read a bench result (``.json`` or ``.json.gz``), or what users paste of one: the JSON
    with the command that was run above it, or the printed "Serving Benchmark Result" table
    (see :func:`read_bench_text`). When its per-request ``itls`` were moved out, a sibling
    ``itls_ms.json.gz`` (a list of per-request lists, in ms) is read instead."""
    p = Path(path)
    data = _read_bench_file(p)
    if not isinstance(data, dict):
        raise ExperimentError(f"{p}: not a vllm bench result (expected a JSON object)")
    itls_ms = None
    if "itls" not in data:
        side = Path(itls_path) if itls_path is not None else p.parent / "itls_ms.json.gz"
        if itls_path is not None or side.exists():
            itls_ms = _read_json(side, "ITL file")
    return parse_bench(data, source=str(p), itls_ms=itls_ms)


_TABLE_HEAD = "Serving Benchmark Result"
_TABLE_ROW_RE = re.compile(
    r"^\s*(?P<label>[A-Za-z][^:]*?):\s+(?P<value>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|inf|nan)\s*$"
)
_TABLE_METRIC_RE = re.compile(
    r"^(?P<stat>mean|median|std|p(?P<p>\d+(?:\.\d+)?)) (?P<m>ttft|tpot|itl|e2el) \(ms\)$"
)
_TABLE_KEYS = {
    "successful requests": "completed",
    "failed requests": "failed",
    "maximum request concurrency": "max_concurrency",
    "request rate configured (rps)": "request_rate",
    "benchmark duration (s)": "duration",
    "total input tokens": "total_input_tokens",
    "total generated tokens": "total_output_tokens",
    "request throughput (req/s)": "request_throughput",
    "request goodput (req/s)": "request_goodput",
    "output token throughput (tok/s)": "output_throughput",
    "peak output token throughput (tok/s)": "max_output_tokens_per_s",
    "peak concurrent requests": "max_concurrent_requests",
    "total token throughput (tok/s)": "total_token_throughput",
    "input token throughput (tok/s)": "input_throughput",
}
# what a pasted command above a result says about the load and the model
_CMD_KEYS = {
    "--model": "model_id",
    "--num-prompts": "num_prompts",
    "--max-concurrency": "max_concurrency",
    "--request-rate": "request_rate",
    "--burstiness": "burstiness",
    "--dataset-name": "dataset_name",
    "--random-input-len": "random_input_len",
    "--random-output-len": "random_output_len",
}
_CMD_FLAG_RE = re.compile(r"(?<!\S)(--[a-z][a-z0-9_-]*)(?:=|\s+)(?!--)([^\s\\]+)")


def read_bench_text(text: str, source: str = "") -> dict[str, Any]:
    """A bench result as pasted (pure): JSON, JSON after other text (the command that was
    run: its --model and load flags are read), or ``vllm bench serve`` /
    ``benchmark_serving.py``'s printed "Serving Benchmark Result" table (counts, duration,
    throughputs, and every Mean/Median/Std/P<n> row of TTFT, TPOT, ITL and E2EL, as the keys
    ``--save-result`` writes). Raises ExperimentError when it is none of these."""
    src = source or "bench result"
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as e:
            raise ExperimentError(f"{src} is not valid JSON: {e}") from None
        except RecursionError:
            raise ExperimentError(f"{src} is not a bench result: JSON nested too deeply") from None
        if not isinstance(data, dict):
            raise ExperimentError(f"{src}: not a vllm bench result (expected a JSON object)")
        return data
    head = text.find(_TABLE_HEAD)
    brace = re.search(r"^\s*\{", text, re.MULTILINE)
    if brace is not None and (head < 0 or brace.start() < head):
        try:
            data, _ = json.JSONDecoder().raw_decode(text[brace.start() :].lstrip())
        except json.JSONDecodeError as e:
            raise ExperimentError(f"{src}: the JSON after the text above it is not valid: {e}") from None
        except RecursionError:
            raise ExperimentError(f"{src} is not a bench result: JSON nested too deeply") from None
        if not isinstance(data, dict):
            raise ExperimentError(f"{src}: not a vllm bench result (expected a JSON object)")
        return {**_from_command(text[: brace.start()]), **data}
    if head < 0:
        raise ExperimentError(
            f"{src}: not a vllm bench result: neither JSON nor a printed '{_TABLE_HEAD}' table"
        )
    data = _from_command(text[:head])
    for line in text[head:].splitlines()[1:]:
        if line.startswith("=" * 10):
            break  # the table's closing rule
        m = _TABLE_ROW_RE.match(line)
        if not m:
            continue
        label = " ".join(m["label"].lower().split())
        value = float(m["value"])
        mm = _TABLE_METRIC_RE.match(label)
        if mm:
            stat = f"p{mm['p']}" if mm["p"] else mm["stat"]
            data[f"{stat}_{mm['m']}_ms"] = value
        elif label in _TABLE_KEYS:
            data[_TABLE_KEYS[label]] = value
    if "completed" not in data:
        raise ExperimentError(f"{src}: a '{_TABLE_HEAD}' table without 'Successful requests:'")
    if "num_prompts" not in data:  # every prompt either completes or fails
        data["num_prompts"] = data["completed"] + data.get("failed", 0)
    data["_printed_table"] = True
    return data


def _from_command(text: str) -> dict[str, Any]:
    """The load and model flags of a ``vllm bench serve`` command pasted above a result."""
    out: dict[str, Any] = {}
    if "bench" not in text and "benchmark_serving" not in text:
        return out
    for flag, value in _CMD_FLAG_RE.findall(text):
        key = _CMD_KEYS.get(flag.replace("_", "-"))
        if key is None:
            continue
        if key in ("model_id", "dataset_name"):
            out[key] = value.strip("'\"")
        else:
            try:
                out[key] = float(value) if key in ("request_rate", "burstiness") else int(value)
            except ValueError:
                continue
    return out


def _read_bench_file(p: Path) -> dict[str, Any]:
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ExperimentError(f"benchmark result {p} does not exist") from None
    except OSError as e:
        raise ExperimentError(f"cannot read benchmark result {p}: {e.strerror or e}") from None
    try:
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        text = raw.decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise ExperimentError(f"benchmark result {p} is not valid (gzipped) text: {e}") from None
    return read_bench_text(text, str(p))


def _read_json(p: Path, what: str) -> Any:
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ExperimentError(f"{what} {p} does not exist") from None
    except OSError as e:
        raise ExperimentError(f"cannot read {what} {p}: {e.strerror or e}") from None
    try:
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        return json.loads(raw.decode("utf-8"))
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ExperimentError(f"{what} {p} is not valid (gzipped) JSON: {e}") from None
    except RecursionError:
        raise ExperimentError(f"{what} {p} is not a bench result: JSON nested too deeply") from None


def _num(v: Any, key: str, src: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise ExperimentError(f"{src}: {key} is not a number: {v!r}")
    try:
        return float(v)
    except ValueError:
        raise ExperimentError(f"{src}: {key} is not a number: {v!r}") from None


def _int(v: Any, key: str, src: str) -> int | None:
    f = _num(v, key, src)
    return None if f is None or not math.isfinite(f) else int(f)


def parse_bench(data: Mapping[str, Any], source: str = "", itls_ms: Any = None) -> BenchRun:
    """Build a :class:`BenchRun` from a parsed bench result (pure). ``itls_ms``: per-request ITL
    lists in milliseconds, used when ``data`` has no ``itls`` (seconds)."""
    src = source or "bench result"
    if not any(k in data for k in ("completed", "duration", "num_prompts")):
        raise ExperimentError(f"{src}: not a vllm bench result (no completed/duration/num_prompts)")
    arrays: dict[str, list[Any]] = {}
    for key in ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "errors"):
        v = data.get(key)
        if v is None:
            continue
        if not isinstance(v, list):
            raise ExperimentError(f"{src}: {key} is not a list")
        arrays[key] = v
    itl_scale = 1.0
    if "itls" not in arrays and itls_ms is not None:
        if not isinstance(itls_ms, list):
            raise ExperimentError(f"{src}: the ITL file is not a list of per-request lists")
        arrays["itls"], itl_scale = itls_ms, 1e-3
    lengths = {k: len(v) for k, v in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise ExperimentError(f"{src}: per-request arrays have different lengths: {lengths}")
    n = next(iter(lengths.values()), 0)
    rows = []
    for i in range(n):

        def get(key: str, i: int = i) -> Any:
            return arrays[key][i] if key in arrays else None

        itls: tuple[float, ...] | None = None
        raw_itl = get("itls")
        if raw_itl is not None:
            if not isinstance(raw_itl, list):
                raise ExperimentError(f"{src}: itls[{i}] is not a list")
            itls = tuple(float(_num(x, f"itls[{i}]", src) or 0.0) * itl_scale for x in raw_itl)
        ttft = _num(get("ttfts"), f"ttfts[{i}]", src)
        out_len = _int(get("output_lens"), f"output_lens[{i}]", src)
        e2e = _num(get("latencies"), f"latencies[{i}]", src)
        if e2e is None and ttft is not None and itls is not None:
            e2e = ttft + sum(itls)
        err = get("errors")
        ok = not err and (out_len is None or out_len > 0) and (ttft is None or ttft > 0)
        tpot = None
        if ok and e2e is not None and ttft is not None and out_len is not None and out_len > 1:
            tpot = (e2e - ttft) / (out_len - 1)
        rows.append(
            RequestRow(
                prompt_len=_int(get("input_lens"), f"input_lens[{i}]", src),
                output_len=out_len,
                ttft_s=ttft,
                tpot_s=tpot,
                itls_s=itls,
                e2e_s=e2e,
                ok=bool(ok),
                start_time=_num(get("start_times"), f"start_times[{i}]", src),
            )
        )
    rate = data.get("request_rate")
    aggregates = {
        k: float(v)
        for k, v in data.items()
        if k.endswith("_ms") and isinstance(v, int | float) and not isinstance(v, bool)
    }
    return BenchRun(
        source=src,
        rows=tuple(rows),
        duration_s=_num(data.get("duration"), "duration", src),
        completed=_int(data.get("completed"), "completed", src),
        failed=_int(data.get("failed"), "failed", src),
        output_throughput=_num(data.get("output_throughput"), "output_throughput", src),
        request_throughput=_num(data.get("request_throughput"), "request_throughput", src),
        max_concurrency=_int(data.get("max_concurrency"), "max_concurrency", src),
        request_rate=_num(rate, "request_rate", src),
        num_prompts=_int(data.get("num_prompts"), "num_prompts", src),
        burstiness=_num(data.get("burstiness"), "burstiness", src),
        total_input_tokens=_int(data.get("total_input_tokens"), "total_input_tokens", src),
        total_output_tokens=_int(data.get("total_output_tokens"), "total_output_tokens", src),
        model_id=str(data["model_id"]) if data.get("model_id") is not None else None,
        date=str(data["date"]) if data.get("date") is not None else None,
        dataset={k: data[k] for k in _DATASET_KEYS if k in data},
        aggregates=aggregates,
    )


# --------------------------------------------------------------------------------------------
# Same load?
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadCheck:
    same: bool
    differences: tuple[str, ...]
    a: Mapping[str, Any]
    b: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "same": self.same,
            "differences": list(self.differences),
            "a": dict(self.a),
            "b": dict(self.b),
        }


def load_profile(run: BenchRun) -> dict[str, Any]:
    """What defines the replayed load: counts, concurrency/rate and length distributions."""
    prof: dict[str, Any] = {
        "num_prompts": run.num_prompts,
        "max_concurrency": run.max_concurrency,
        "request_rate": "inf"
        if run.request_rate is not None and math.isinf(run.request_rate)
        else run.request_rate,
        "burstiness": run.burstiness,
    }
    for name, attr in (("prompt_len", "prompt_len"), ("output_len", "output_len")):
        vals = sorted(float(getattr(r, attr)) for r in run.rows if getattr(r, attr) is not None)
        if vals:
            prof[f"{name}_p50"] = round(quantile(vals, 0.5), 1)
            prof[f"{name}_p95"] = round(quantile(vals, 0.95), 1)
    if run.num_prompts and run.total_input_tokens is not None:
        prof["prompt_len_mean"] = round(run.total_input_tokens / max(run.completed or run.num_prompts, 1), 1)
    if run.completed and run.total_output_tokens is not None:
        prof["output_len_mean"] = round(run.total_output_tokens / run.completed, 1)
    prof.update(run.dataset)
    return {k: v for k, v in prof.items() if v is not None}


def same_load(a: BenchRun, b: BenchRun, tol: LoadTolerance | None = None) -> tuple[bool, list[str]]:
    """Did A and B replay the same load? Returns (same, reasons naming each difference)."""
    tol = tol or LoadTolerance()
    pa, pb = load_profile(a), load_profile(b)
    diffs: list[str] = []
    for key, label in (
        ("num_prompts", "number of prompts"),
        ("max_concurrency", "max concurrency"),
        ("request_rate", "request rate"),
        ("burstiness", "burstiness"),
    ):
        if pa.get(key) is None or pb.get(key) is None:
            continue  # not reported on one side (a printed table has no burstiness): unknown, not different
        if pa.get(key) != pb.get(key):
            diffs.append(f"{label} differs: {pa.get(key, 'unknown')} vs {pb.get(key, 'unknown')}")
    for name, label in (("prompt_len", "prompt length"), ("output_len", "output length")):
        checks = [("p50", "median", tol.median), ("p95", "p95", tol.p95)]
        if f"{name}_p50" not in pa or f"{name}_p50" not in pb:
            checks = [("mean", "mean", tol.mean)]
        for suffix, what, limit in checks:
            va, vb = pa.get(f"{name}_{suffix}"), pb.get(f"{name}_{suffix}")
            if va is None or vb is None:
                continue
            rel = abs(vb - va) / va if va > 0 else (0.0 if vb == va else math.inf)
            if rel > limit:
                diffs.append(
                    f"{label} {what} differs: {va:g} vs {vb:g} tokens "
                    f"({_fmt_pct((vb - va) / va if va > 0 else None)}, tolerance {limit * 100:.0f}%)"
                )
    return not diffs, diffs


# --------------------------------------------------------------------------------------------
# Buckets and the comparison
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BucketResult:
    lo: float | None
    hi: float | None
    n_a: int
    n_b: int
    status: str  # ok | insufficient
    metrics: Mapping[str, MetricDelta]

    @property
    def label(self) -> str:
        if self.lo is None and self.hi is None:
            return "all"
        if self.lo is None:
            return f"<{self.hi:g}"
        if self.hi is None:
            return f">={self.lo:g}"
        return f"{self.lo:g}-{self.hi:g}"

    def to_json(self) -> dict[str, Any]:
        return {
            "range": self.label,
            "lo": self.lo,
            "hi": self.hi,
            "n_a": self.n_a,
            "n_b": self.n_b,
            "status": self.status,
            "metrics": {k: d.to_json() for k, d in self.metrics.items()},
        }


@dataclass(frozen=True)
class Comparison:
    verdict: Verdict
    reasons: tuple[str, ...]
    load: LoadCheck
    overall: BucketResult | None
    buckets: tuple[BucketResult, ...]
    bucket_note: str
    targets: tuple[str, ...]
    settings: Settings
    a_source: str = "A"
    b_source: str = "B"

    def to_json(self) -> dict[str, Any]:
        s = self.settings
        return {
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "a": self.a_source,
            "b": self.b_source,
            "targets": list(self.targets) or "all",
            "load": self.load.to_json(),
            "overall": self.overall.to_json() if self.overall else None,
            "buckets": [bk.to_json() for bk in self.buckets],
            "bucket_note": self.bucket_note,
            "notes": [
                "Per-bucket throughput is not meaningful within one run: buckets report request counts."
            ],
            "settings": {
                "min_requests": s.min_requests,
                "min_effect_pct": s.min_effect * 100,
                "noise_floor_pct": {k: v * 100 for k, v in s.noise_floor.items()},
                "guard_tolerance_pct": s.guard_tolerance * 100,
                "confidence": s.confidence,
                "bootstrap": s.bootstrap,
                "seed": s.seed,
            },
        }


def _nice(x: float) -> float:
    """Round to two significant digits (1536 -> 1500, 6013 -> 6000)."""
    if x <= 0:
        return 0.0
    mag = 10 ** (math.floor(math.log10(x)) - 1)
    return float(round(x / mag) * mag)


def default_edges(a: BenchRun, b: BenchRun, ratio: float = 1.5) -> tuple[tuple[float, ...], str]:
    """Bucket edges from the pooled prompt lengths: one bucket when lengths are nearly constant
    (p95 <= ratio x p5, as random datasets with a small range ratio), else terciles rounded."""
    lens = sorted(float(r.prompt_len) for r in (*a.ok_rows, *b.ok_rows) if r.prompt_len is not None)
    if not lens:
        return (), "one bucket: the files carry no per-request prompt lengths"
    p5, p95 = quantile(lens, 0.05), quantile(lens, 0.95)
    if p5 > 0 and p95 <= ratio * p5:
        return (), f"one bucket: prompt lengths are nearly constant (p5 {p5:.0f}, p95 {p95:.0f} tokens)"
    edges = sorted({_nice(quantile(lens, 1 / 3)), _nice(quantile(lens, 2 / 3))})
    edges = [e for e in edges if lens[0] < e <= lens[-1]]
    if not edges:
        return (), "one bucket: prompt-length terciles round to the same value"
    return tuple(edges), "buckets at the pooled prompt-length terciles, rounded: " + ", ".join(
        f"{e:g}" for e in edges
    )


def parse_buckets(text: str | Sequence[float] | None) -> tuple[float, ...] | None:
    """``"512,2048"`` -> (512.0, 2048.0); None stays None (derive the edges)."""
    if text is None:
        return None
    items = text.split(",") if isinstance(text, str) else list(text)
    try:
        edges = sorted({float(x) for x in items if str(x).strip()})
    except ValueError:
        raise ExperimentError(f"bucket edges must be numbers (prompt tokens), got {text!r}") from None
    if any(e <= 0 or not math.isfinite(e) for e in edges):
        raise ExperimentError(f"bucket edges must be positive token counts, got {text!r}")
    return tuple(edges)


def run_samples(rows: Sequence[RequestRow], settings: Settings) -> dict[str, MetricSample]:
    """Per-request samples of the successful rows (only the quantities every row carries)."""
    ok = [r for r in rows if r.ok]
    out: dict[str, MetricSample] = {}
    if not ok:
        return out
    if all(r.ttft_s is not None for r in ok):
        out["ttft"] = ValuesSample.of(r.ttft_s for r in ok if r.ttft_s is not None)
    tp = [r.tpot_s for r in ok if r.tpot_s is not None]
    if tp:
        out["tpot"] = ValuesSample.of(tp)
    if all(r.itls_s is not None for r in ok):
        pooled = [x for r in ok for x in (r.itls_s or ())]
        out["itl"] = ValuesSample.of(pooled, units=len(ok), resample_size=settings.itl_resample)
    if all(r.e2e_s is not None for r in ok):
        out["e2e"] = ValuesSample.of(r.e2e_s for r in ok if r.e2e_s is not None)
    return out


def _summary_samples(run: BenchRun) -> dict[str, MetricSample]:
    """Aggregate-only quantities (files without per-request values): reported percentiles."""
    out: dict[str, MetricSample] = {}
    n = run.completed or 0
    for qty, key in _AGG_METRICS.items():
        qs = {
            q: run.aggregates[f"p{p}_{key}_ms"] / 1000
            for q, p in ((0.5, 50), (0.9, 90), (0.95, 95), (0.99, 99))
            if f"p{p}_{key}_ms" in run.aggregates
        }
        if 0.5 not in qs and f"median_{key}_ms" in run.aggregates:
            qs[0.5] = run.aggregates[f"median_{key}_ms"] / 1000
        if f"mean_{key}_ms" in run.aggregates:
            qs[MEAN_Q] = run.aggregates[f"mean_{key}_ms"] / 1000
        if not qs:
            continue
        std = run.aggregates.get(f"std_{key}_ms")
        count = n
        if qty == "itl" and run.total_output_tokens is not None:
            count = max(run.total_output_tokens - n, 0)
        out[qty] = SummarySample(qs, count, std / 1000 if std is not None else None)
    return out


def _align(sa: dict[str, MetricSample], sb: dict[str, MetricSample], a: BenchRun, b: BenchRun) -> None:
    """A run with per-request values against one without (a saved JSON against a pasted
    table): compare both on what they both report, their summaries."""
    suma, sumb = _summary_samples(a), _summary_samples(b)
    for qty in set(sa) | set(sb):
        if type(sa.get(qty)) is not type(sb.get(qty)) and qty in suma and qty in sumb:
            sa[qty], sb[qty] = suma[qty], sumb[qty]


def _totals(run: BenchRun) -> dict[str, MetricSample]:
    out: dict[str, MetricSample] = {}
    if run.output_throughput is not None:
        out["output_throughput"] = ScalarSample(run.output_throughput)
    if run.request_throughput is not None:
        out["request_throughput"] = ScalarSample(run.request_throughput)
    return out


def _in(r: RequestRow, lo: float | None, hi: float | None) -> bool:
    if r.prompt_len is None:
        return lo is None and hi is None
    return (lo is None or r.prompt_len >= lo) and (hi is None or r.prompt_len < hi)


def compare_runs(
    a: BenchRun,
    b: BenchRun,
    buckets: Sequence[float] | None = None,
    target: str | Sequence[str] | None = None,
    extra: Mapping[str, tuple[MetricSample, MetricSample]] | None = None,
    settings: Settings | None = None,
    tol: LoadTolerance | None = None,
    guards: Sequence[str] = GUARDS,
) -> Comparison:
    """Compare two benchmark runs (pure). ``extra`` adds run-level samples keyed by quantity,
    such as ``{"preemptions": (CountSample(48, 64), CountSample(1, 64))}`` from the server's
    counters; ``guards``: see :func:`guards_for_knob`. Refuses (verdict inconclusive, no
    metrics) when the load differs."""
    settings = settings or Settings()
    targets = parse_targets(target)
    same, diffs = same_load(a, b, tol)
    load = LoadCheck(same, tuple(diffs), load_profile(a), load_profile(b))
    if not same:
        reasons = [
            "Refused: the two runs did not replay the same load, so their numbers are not comparable: "
            + "; ".join(diffs)
            + "."
        ]
        return Comparison(
            "inconclusive", tuple(reasons), load, None, (), "", targets, settings, a.source, b.source
        )

    has_lens = all(r.prompt_len is not None for r in (*a.ok_rows, *b.ok_rows)) and bool(
        a.ok_rows and b.ok_rows
    )
    if not has_lens:
        edges: tuple[float, ...] = ()
        note = "one bucket: the files carry no per-request prompt lengths" + (
            " (requested edges ignored)" if buckets else ""
        )
    elif buckets is not None:
        edges = tuple(parse_buckets(buckets) or ())
        note = (
            "buckets at the given prompt-length edges: " + ", ".join(f"{e:g}" for e in edges)
            if edges
            else "one bucket"
        )
    else:
        edges, note = default_edges(a, b)

    bounds: list[tuple[float | None, float | None]] = (
        [(None, None)] if not edges else [(None, edges[0]), *itertools.pairwise(edges), (edges[-1], None)]
    )
    results = []
    for lo, hi in bounds:
        ra = [r for r in a.ok_rows if _in(r, lo, hi)]
        rb = [r for r in b.ok_rows if _in(r, lo, hi)]
        sa, sb = run_samples(ra, settings), run_samples(rb, settings)
        if not edges:  # a single bucket may fall back on the file's reported percentiles
            for qty, s in _summary_samples(a).items():
                sa.setdefault(qty, s)
            for qty, s in _summary_samples(b).items():
                sb.setdefault(qty, s)
            _align(sa, sb, a, b)
            na, nb = (len(ra), len(rb)) if ra or rb else (a.completed or 0, b.completed or 0)
        else:
            na, nb = len(ra), len(rb)
        label = "all" if lo is None and hi is None else f"{lo}-{hi}"
        metrics = compare_samples(
            sa, sb, settings, key=label, metrics=[m for m in METRICS if m.quantity in PER_REQUEST_QUANTITIES]
        )
        status = "ok" if min(na, nb) >= settings.min_requests else "insufficient"
        results.append(BucketResult(lo, hi, na, nb, status, metrics))

    sa_all = run_samples(a.ok_rows, settings)
    sb_all = run_samples(b.ok_rows, settings)
    for qty, s in _summary_samples(a).items():
        sa_all.setdefault(qty, s)
    for qty, s in _summary_samples(b).items():
        sb_all.setdefault(qty, s)
    _align(sa_all, sb_all, a, b)
    sa_all.update(_totals(a))
    sb_all.update(_totals(b))
    for qty, (xa, xb) in (extra or {}).items():
        sa_all[qty], sb_all[qty] = xa, xb
    overall_metrics = compare_samples(sa_all, sb_all, settings, key="overall")
    na_all = len(a.ok_rows) if a.rows else (a.completed or 0)
    nb_all = len(b.ok_rows) if b.rows else (b.completed or 0)
    overall_status = "ok" if min(na_all, nb_all) >= settings.min_requests else "insufficient"
    overall = BucketResult(None, None, na_all, nb_all, overall_status, overall_metrics)

    if overall_status == "insufficient":
        verdict: Verdict = "inconclusive"
        reasons = [
            f"Too few requests to judge: A has {na_all}, B has {nb_all}; at least "
            f"{settings.min_requests} are needed in each run."
        ]
    else:
        verdict, reasons = judge(overall_metrics, targets, settings, results if edges else (), guards)
    return Comparison(
        verdict, tuple(reasons), load, overall, tuple(results), note, targets, settings, a.source, b.source
    )


def compare_bench_files(
    a_path: str | Path,
    b_path: str | Path,
    buckets: Sequence[float] | str | None = None,
    target: str | Sequence[str] | None = None,
    preemptions: tuple[float, float] | None = None,
    settings: Settings | None = None,
    guards: Sequence[str] = GUARDS,
) -> Comparison:
    """Load and compare two ``vllm bench serve --save-result --save-detailed`` files.
    ``preemptions``: (count during A, count during B) from ``vllm:num_preemptions_total``, since
    benchmark files carry none; the exposure is each run's completed requests."""
    a, b = load_bench(a_path), load_bench(b_path)
    extra: dict[str, tuple[MetricSample, MetricSample]] = {}
    if preemptions is not None:
        extra["preemptions"] = (
            CountSample(preemptions[0], float(a.completed or a.num_prompts or 1)),
            CountSample(preemptions[1], float(b.completed or b.num_prompts or 1)),
        )
    edges = parse_buckets(buckets) if isinstance(buckets, str) else buckets
    c = compare_runs(a, b, edges, target, extra, settings, guards=guards)
    return replace(c, reasons=tuple(input_notes(a, b)) + c.reasons)


def input_notes(a: BenchRun, b: BenchRun) -> list[str]:
    """What the reader of a comparison must know about its inputs: different models, and
    results without per-request values (no bootstrap: reported values against noise floors)."""
    notes = []
    if a.model_id and b.model_id and a.model_id != b.model_id:
        notes.append(
            f"Warning: A and B ran against different models ({a.model_id} vs {b.model_id}); "
            "a knob's effect cannot be told from the model's."
        )
    summary = [n for n, r in (("A", a), ("B", b)) if all(x.ttft_s is None for x in r.rows)]
    if summary:
        notes.append(
            f"{' and '.join(summary)} carr{'ies' if len(summary) == 1 else 'y'} no per-request values "
            "(a printed table, or --save-result without --save-detailed): the reported medians, "
            "P99s and means are compared against run-to-run noise floors; no per-request bootstrap "
            "is possible."
        )
    return notes


def compare_windows(
    before: Mapping[str, MetricSample],
    after: Mapping[str, MetricSample],
    target: str | Sequence[str] | None = None,
    settings: Settings | None = None,
    load: LoadCheck | None = None,
    requests: tuple[int, int] | None = None,
    guards: Sequence[str] = GUARDS,
) -> Comparison:
    """Compare two live windows (pure): samples keyed by quantity, typically
    :class:`HistogramSample` of bucket deltas (``ttft``, ``tpot``/``itl``, ``e2e``),
    :class:`ScalarSample` rates and :class:`CountSample` preemptions. ``load``: the caller's
    comparable-load check (refused when not same); ``requests``: finished requests per window."""
    settings = settings or Settings()
    targets = parse_targets(target)
    load = load or LoadCheck(True, (), {}, {})
    if not load.same:
        return Comparison(
            "inconclusive",
            ("Refused: the windows did not see comparable load: " + "; ".join(load.differences) + ".",),
            load,
            None,
            (),
            "",
            targets,
            settings,
            "before",
            "after",
        )
    metrics = compare_samples(before, after, settings, key="window")
    na, nb = (
        requests
        if requests is not None
        else (
            int(
                max(
                    (s.n for s in before.values() if isinstance(s, HistogramSample | ValuesSample)), default=0
                )
            ),
            int(
                max((s.n for s in after.values() if isinstance(s, HistogramSample | ValuesSample)), default=0)
            ),
        )
    )
    status = "ok" if min(na, nb) >= settings.min_requests else "insufficient"
    overall = BucketResult(None, None, na, nb, status, metrics)
    if status == "insufficient":
        verdict: Verdict = "inconclusive"
        reasons = [
            f"Too few requests to judge: {na} before, {nb} after; at least {settings.min_requests} "
            "are needed in each window."
        ]
    else:
        verdict, reasons = judge(metrics, targets, settings, guards=guards)
    return Comparison(
        verdict,
        tuple(reasons),
        load,
        overall,
        (overall,),
        "one bucket: live windows",
        targets,
        settings,
        "before",
        "after",
    )


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------


def _fmt_value(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "s":
        return f"{v * 1000:.3g} ms" if abs(v) < 1 else f"{v:.3g} s"
    if unit == "tok/s":
        return f"{v:,.0f} tok/s"
    if unit == "req/s":
        return f"{v:.3g} req/s"
    return f"{v:g}"


def _fmt_pct(x: float | None) -> str:
    if x is None:
        return "?"
    return f"{x * 100:+.0f}%"


def _pct(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x * 100, 1)


def _round(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, 6)


def render_text(c: Comparison) -> str:
    """Plain-text report for the CLI: verdict, reasons, load check, one table per bucket."""
    lines = [
        f"Verdict: {c.verdict.upper()}",
        f"  A: {c.a_source}",
        f"  B: {c.b_source}",
        f"  target: {', '.join(c.targets) if c.targets else 'all metrics'}",
        "",
    ]
    lines += [f"- {r}" for r in c.reasons]
    lines.append("")
    lines.append("Load: " + ("same" if c.load.same else "DIFFERENT: " + "; ".join(c.load.differences)))
    if c.overall is None:
        return "\n".join(lines) + "\n"
    lines.append(c.bucket_note)
    lines.append("Per-bucket throughput is not meaningful within one run: buckets report request counts.")
    sections = [("overall", c.overall)]
    if not (len(c.buckets) == 1 and c.buckets[0].label == "all"):
        sections += [(f"prompts {bk.label} tokens", bk) for bk in c.buckets]
    for title, bk in sections:
        lines.append("")
        lines.append(
            f"[{title}] requests A={bk.n_a} B={bk.n_b}" + (" (insufficient)" if bk.status != "ok" else "")
        )
        rows = [("metric", "A", "B", "change", "interval", "")]
        for d in bk.metrics.values():
            ci = (
                "-"
                if d.ci_low is None and d.ci_high is None
                else f"{_fmt_pct(d.ci_low)}..{_fmt_pct(d.ci_high)}"
            )
            mark = {"better": "better", "worse": "WORSE"}.get(
                d.direction, "" if d.status == "ok" else d.status
            )
            rows.append(
                (
                    d.spec.label,
                    _fmt_value(d.a, d.spec.unit),
                    _fmt_value(d.b, d.spec.unit),
                    _fmt_pct(d.change) if d.change is not None else "-",
                    ci,
                    mark,
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(6)]
        lines += ["  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip() for r in rows]
    return "\n".join(lines) + "\n"
