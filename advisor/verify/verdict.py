"""The verdict: keep / revert / inconclusive from the differences, with reasons as sentences
that name numbers; which metrics a knob's change should move (targets) and must not hurt
(guards).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from advisor.verify.differences import MetricDelta, fmt_value
from advisor.verify.samples import (
    _SPEC,
    GUARDS,
    KNOB_TARGETS,
    KNOB_TRADEOFFS,
    METRIC_NAMES,
    ExperimentError,
    Settings,
    Verdict,
)

# --------------------------------------------------------------------------------------------
# Verdict
# --------------------------------------------------------------------------------------------

RESTORE = "Restore the previous value"  # how a revert's last reason begins


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
    significantly and no guard broke, or, the targets within noise, when a guard improved
    significantly and none broke (the gain showed beyond the targets); otherwise ``inconclusive``.
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
            f"Within its target: {d.describe(conf)}, under {fmt_value(settings.slo[d.spec.name], d.spec.unit)}"
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
            reasons.append(f"{RESTORE}.")
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
        # the gain shows beyond the targets: under open arrivals a server that keeps up with its
        # load serves no more tokens however it is tuned, and a change that admits more cuts the
        # wait instead (a KV raise whose runs preempted little: TTFT p95 5.1 s -> 2.0 s, its
        # targets, preemptions and throughput, within noise)
        beyond = [
            overall[g]
            for g in guards
            if g in overall and g not in targets and overall[g].direction == "better"
        ]
        if beyond and not missing:
            reasons += [f"Improved beyond its targets: {d.describe(conf)}." for d in beyond]
            reasons += traded
            reasons.append(f"No other guard got worse by more than {tol * 100:.0f}%: keep the new value.")
            return "keep", reasons
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
    name: str | None = None  # the bucket's own label (the plugin's: ``0-512``, ``8193+``)
    verdict: Verdict | None = None  # this bucket judged on its own (live windows with the plugin)
    reasons: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        if self.name is not None:
            return self.name
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
            **({"verdict": self.verdict, "reasons": list(self.reasons)} if self.verdict is not None else {}),
        }
