"""Plain, immutable values that flow between the stages.

sources -> (Snapshot, LogEvent, EngineInfo) -> window -> signals -> evaluate -> advise.
Nothing here does I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

LabelKey = tuple[tuple[str, str], ...]
"""A series' labels as sorted (name, value) pairs, without ``le``."""


def label_key(labels: Mapping[str, str]) -> LabelKey:
    return tuple(sorted((k, v) for k, v in labels.items() if k != "le"))


def labels_match(key: LabelKey, match: Mapping[str, str] | None) -> bool:
    if not match:
        return True
    d = dict(key)
    return all(d.get(k) == v for k, v in match.items())


@dataclass(frozen=True)
class Histogram:
    """One histogram series: cumulative buckets sorted by bound (``+Inf`` last)."""

    buckets: tuple[tuple[float, float], ...]
    count: float
    sum: float

    def merged(self, other: Histogram) -> Histogram:
        """Sum of two histograms (engines of one server). Bounds missing from one side
        are interpolated as a step (the cumulative count of the next lower bound)."""
        bounds = sorted({b for b, _ in self.buckets} | {b for b, _ in other.buckets})
        return Histogram(
            tuple((b, self.cumulative(b) + other.cumulative(b)) for b in bounds),
            self.count + other.count,
            self.sum + other.sum,
        )

    def cumulative(self, bound: float) -> float:
        best = 0.0
        for b, c in self.buckets:
            if b <= bound:
                best = c
            else:
                break
        return best

    def minus(self, earlier: Histogram) -> Histogram:
        """Bucket deltas since ``earlier``; a reset (any count going down) returns self."""
        if self.count < earlier.count or any(c < earlier.cumulative(b) for b, c in self.buckets):
            return self
        return Histogram(
            tuple((b, c - earlier.cumulative(b)) for b, c in self.buckets),
            self.count - earlier.count,
            self.sum - earlier.sum,
        )

    def quantile(self, q: float) -> float | None:
        """PromQL ``histogram_quantile`` semantics (linear interpolation inside a bucket;
        the highest finite bound when the rank falls in ``+Inf``). None when empty."""
        if not self.buckets or self.count <= 0:
            return None
        total = self.buckets[-1][1]
        if total <= 0:
            return None
        rank = q * total
        prev_bound, prev_count = 0.0, 0.0
        for b, c in self.buckets:
            if c >= rank:
                if math.isinf(b):
                    return prev_bound
                if c == prev_count:
                    return b
                lower = prev_bound if prev_bound > 0 or b <= 0 else 0.0
                return lower + (b - lower) * (rank - prev_count) / (c - prev_count)
            prev_bound, prev_count = b, c
        return prev_bound

    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None


@dataclass(frozen=True)
class Summary:
    """One summary series: its ``quantile`` samples ((q, value) sorted by q, over whatever
    window the exporter keeps; none when that window is empty) and its cumulative count and sum."""

    quantiles: tuple[tuple[float, float], ...]
    count: float
    sum: float

    def value(self, q: float) -> float | None:
        for qq, v in self.quantiles:
            if qq == q:
                return v
        return None


@dataclass(frozen=True)
class Family:
    name: str  # canonical name (names.canonical_family)
    type: str  # gauge | counter | histogram | summary | info | untyped
    help: str
    series: Mapping[LabelKey, Any]  # float, Histogram for histograms, Summary for summaries
    source_name: str = ""  # the name as the page spelled it


# Why a sample was not read (ParseWarning.kind; vllm_advisor_bad_samples_total{reason}).
BAD_SAMPLE_KINDS = {
    "unreadable": "a line neither parser can read (a broken line, an invalid name or type)",
    "non_finite": "NaN or an infinity where a number is read",
    "out_of_range": "a number too large to be a reading (a 400-digit literal, beyond 1e18)",
    "negative": "a counter or a histogram's count below zero",
    "duplicate": "one series twice on a page",
    "bad_bucket": "a bucket bound that is not a number, or counts that go down with the bound",
    "cut_off": "a page or histogram cut off (no final newline, no +Inf bucket)",
    "type_conflict": "one family declared twice with different types",
    "too_many_series": "more series than the advisor keeps (per family or per page)",
    "went_down": "a counter that went down while the engine did not restart",
    "spike": "a counter that jumped for one page and came back",
    "label_churn": "a family whose series are new on every page (labels that change)",
}


@dataclass(frozen=True)
class ParseWarning:
    """Something on a page that was skipped (a broken line, a bad sample, a cut-off histogram)."""

    family: str | None  # the family it belongs to, as the page spells it, when known
    line: int | None  # 1-based line number in the page, when known
    reason: str
    kind: str = "unreadable"  # one of BAD_SAMPLE_KINDS

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line is not None else ""
        fam = f"{self.family}: " if self.family else ""
        return f"{where}{fam}{self.reason}"


@dataclass(frozen=True)
class Snapshot:
    """One parsed ``/metrics`` page at time ``t`` (unix seconds). ``warnings``: what the
    parser skipped on that page as unreadable (empty for a clean page)."""

    t: float
    families: Mapping[str, Family]
    warnings: tuple[ParseWarning, ...] = ()
    # samples not kept, by why: "not_read" (a family the advisor never reads, dropped before its
    # labels were parsed), "over_limit" (past a cap on series; also a warning)
    skipped: Mapping[str, int] = field(default_factory=dict)

    def has(self, name: str) -> bool:
        return name in self.families

    def values(self, name: str, match: Mapping[str, str] | None = None) -> list[float]:
        fam = self.families.get(name)
        if fam is None:
            return []
        return [v for k, v in fam.series.items() if labels_match(k, match) and isinstance(v, int | float)]

    def total(self, name: str, match: Mapping[str, str] | None = None) -> float | None:
        """Sum across engines/models (counters, request counts). None when absent."""
        vals = self.values(name, match)
        return sum(vals) if vals else None

    def mean(self, name: str, match: Mapping[str, str] | None = None) -> float | None:
        """Mean across engines (ratios such as KV usage: never summed). None when absent."""
        vals = self.values(name, match)
        return sum(vals) / len(vals) if vals else None

    def maximum(self, name: str, match: Mapping[str, str] | None = None) -> float | None:
        vals = self.values(name, match)
        return max(vals) if vals else None

    def histogram(self, name: str, match: Mapping[str, str] | None = None) -> Histogram | None:
        """All matching series' buckets merged. None when absent."""
        fam = self.families.get(name)
        if fam is None:
            return None
        out: Histogram | None = None
        for k, v in fam.series.items():
            if isinstance(v, Histogram) and labels_match(k, match):
                out = v if out is None else out.merged(v)
        return out

    def label_values(self, label: str) -> list[str]:
        seen: set[str] = set()
        for fam in self.families.values():
            for k in fam.series:
                for name, value in k:
                    if name == label:
                        seen.add(value)
        return sorted(seen)

    def info_labels(self, name: str) -> list[dict[str, str]]:
        fam = self.families.get(name)
        return [dict(k) for k in fam.series] if fam else []


@dataclass(frozen=True)
class LogEvent:
    """One log line turned into a typed event.

    kind: ``engine_stats`` (periodic stats), ``preemption`` (V0 warning),
    ``iteration`` (per-iteration details), ``startup`` (a fact: ``fields['fact']``,
    ``fields['value']``), ``error`` (``fields['error']``), ``unknown``.
    """

    kind: str
    t: float | None
    fields: Mapping[str, Any] = field(default_factory=dict)
    process: str | None = None
    line: str = ""


EVENT_KINDS = ("engine_stats", "preemption", "iteration", "startup", "error", "unknown")


@dataclass(frozen=True)
class Provenanced:
    """A value with where it came from: config | cmdline | log | metrics | default."""

    value: Any
    source: str
    detail: str = ""


SOURCE_ORDER = ("config", "cmdline", "log", "metrics", "default")
"""Precedence of sources when several know a value: the first wins."""


@dataclass(frozen=True)
class EngineInfo:
    """What the server runs with: knobs and facts, each with its provenance.

    Keys are knob names (see ``knobs.KNOBS``) and facts: ``vllm_version``,
    ``model``, ``device``, ``gpu_count``, ``kv_cache_tokens``, ``max_concurrency``,
    ``served_model_name``, ``block_size``.
    """

    values: Mapping[str, Provenanced] = field(default_factory=dict)

    def get(self, name: str, default: Any = None) -> Any:
        p = self.values.get(name)
        return default if p is None or p.value is None else p.value

    def source(self, name: str) -> str | None:
        p = self.values.get(name)
        return p.source if p else None

    def knob_values(self) -> dict[str, Any]:
        return {k: v.value for k, v in self.values.items()}

    @staticmethod
    def merge(parts: Iterable[Mapping[str, Provenanced]]) -> EngineInfo:
        """Merge per-source dicts; a value from an earlier source in SOURCE_ORDER wins."""
        out: dict[str, Provenanced] = {}
        rank = {s: i for i, s in enumerate(SOURCE_ORDER)}
        for part in parts:
            for k, v in part.items():
                if v.value is None:
                    continue
                cur = out.get(k)
                if cur is None or rank.get(v.source, 99) < rank.get(cur.source, 99):
                    out[k] = v
        return EngineInfo(out)
