"""Before/after comparison: is the new knob value better, worse, or within noise?

The tuning procedure is an experiment: keep a baseline (A), change one knob, replay the same
load (B), compare TTFT, TPOT/ITL, e2e latency, throughput and preemptions, split by request
length, then keep the new value or restore the old one. This module checks that the load was
the same, splits the requests into prompt-length buckets and compares each
(:func:`compare_runs`, :func:`compare_bench_files`, :func:`compare_windows` for a live window).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from advisor.verify.bench import AGG_METRICS, BenchRun, RequestRow, load_bench
from advisor.verify.differences import (
    MetricDelta,
    compare_samples,
    describe_floors,
    fmt_pct,
    quantile,
    spread_floors,
)
from advisor.verify.samples import (
    GUARDS,
    MEAN_Q,
    METRICS,
    PER_REQUEST_QUANTITIES,
    CountSample,
    ExperimentError,
    HistogramSample,
    LoadTolerance,
    MetricSample,
    ScalarSample,
    Settings,
    SummarySample,
    ValuesSample,
    Verdict,
)
from advisor.verify.verdict import BucketResult, judge, parse_targets

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
                    f"({fmt_pct((vb - va) / va if va > 0 else None)}, tolerance {limit * 100:.0f}%)"
                )
    return not diffs, diffs


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
    a_again: tuple[str, ...] = ()  # more runs of each side, whose spread set the noise floors
    b_again: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        s = self.settings
        return {
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "a": self.a_source,
            "b": self.b_source,
            "a_again": list(self.a_again),
            "b_again": list(self.b_again),
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
    for qty, key in AGG_METRICS.items():
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
    ok_a, ok_b = a.ok_rows, b.ok_rows
    # each run's samples over all its rows, made once: the one bucket and the overall comparison
    # both read them (sorting a run's pooled ITLs, ~10^5 values, is most of a comparison's time)
    whole_a, whole_b = run_samples(ok_a, settings), run_samples(ok_b, settings)
    for lo, hi in bounds:
        if lo is None and hi is None:
            ra, rb = list(ok_a), list(ok_b)
            sa, sb = dict(whole_a), dict(whole_b)
        else:
            ra = [r for r in ok_a if _in(r, lo, hi)]
            rb = [r for r in ok_b if _in(r, lo, hi)]
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

    sa_all, sb_all = dict(whole_a), dict(whole_b)
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
    a_src: str | Path | BenchRun,
    b_src: str | Path | BenchRun,
    buckets: Sequence[float] | str | None = None,
    target: str | Sequence[str] | None = None,
    preemptions: tuple[float, float] | None = None,
    settings: Settings | None = None,
    guards: Sequence[str] = GUARDS,
    a_again: Sequence[str | Path | BenchRun] = (),
    b_again: Sequence[str | Path | BenchRun] = (),
) -> Comparison:
    """Load and compare two ``vllm bench serve --save-result --save-detailed`` files.
    ``preemptions``: (count during A, count during B) from ``vllm:num_preemptions_total``, since
    benchmark files carry none; the exposure is each run's completed requests. A run already
    loaded (:func:`load_bench`) may stand for its path. ``a_again``, ``b_again``: more runs of
    A's and of B's configuration under the same load: how far apart they came is the run-to-run
    noise of this server and load (:func:`replicate_floors`), and a difference between A and B
    within it is not counted."""
    a = a_src if isinstance(a_src, BenchRun) else load_bench(a_src)
    b = b_src if isinstance(b_src, BenchRun) else load_bench(b_src)
    sides = [[a, *(x if isinstance(x, BenchRun) else load_bench(x) for x in a_again)]]
    sides.append([b, *(x if isinstance(x, BenchRun) else load_bench(x) for x in b_again)])
    extra: dict[str, tuple[MetricSample, MetricSample]] = {}
    if preemptions is not None:
        extra["preemptions"] = (
            CountSample(preemptions[0], float(a.completed or a.num_prompts or 1)),
            CountSample(preemptions[1], float(b.completed or b.num_prompts or 1)),
        )
    edges = parse_buckets(buckets) if isinstance(buckets, str) else buckets
    settings = settings or Settings()
    notes = input_notes(a, b)
    if a_again or b_again:
        floors, note = replicate_floors(sides, settings)
        settings = replace(settings, noise_floor={**settings.noise_floor, **floors})
        notes.append(note)
    c = compare_runs(a, b, edges, target, extra, settings, guards=guards)
    again = [tuple(r.source for r in side[1:]) for side in sides]
    return replace(c, reasons=tuple(notes) + c.reasons, a_again=again[0], b_again=again[1])


def replicate_floors(sides: Sequence[Sequence[BenchRun]], settings: Settings) -> tuple[dict[str, float], str]:
    """The run-to-run noise floor of each metric measured from repeated runs of one side's
    configuration (each side's runs, its first the one compared): how far one run of A and one of
    B may differ by noise alone at the comparison's confidence (the pooled spread of one run's
    log value within a side, times Student's t on the sides' degrees of freedom), where that is
    above the floor already set; and the sentence that says so.
    Near a knee under open arrivals two runs of one configuration and load differ by more than
    the interval of either run shows (an H100 at 4.5 req/s: TTFT p95 1.87 s and 0.95 s, the same
    arrivals; docs/validation.md, item 13), since the requests of one burst queue together; the
    replicates measure that for the server and load at hand. Refuses runs whose load is not the
    side's first run's."""
    repeats: list[list[Mapping[str, MetricDelta]]] = []
    counts = []
    for side, label in zip(sides, "AB", strict=True):
        counts.append(f"{len(side)} of {label}")
        repeats.append([])
        for y in side[1:]:
            c = compare_runs(side[0], y, settings=settings)  # refused (no metrics) where the loads differ
            if not c.load.same:
                raise ExperimentError(
                    f"{y.source} is not a run of {side[0].source}'s load, so it cannot measure its noise: "
                    + "; ".join(c.load.differences)
                )
            repeats[-1].append(c.overall.metrics if c.overall else {})
    # one run of A is compared with one of B
    floors = spread_floors(repeats, (1, 1), settings)
    shown = describe_floors(floors)
    note = (
        f"Run-to-run noise measured from {' and '.join(counts)} (the same configuration and load each): "
        + (
            f"{shown} between runs of one side; a difference between A and B within that counts as noise."
            if floors
            else f"every metric within {settings.min_effect:.0%} or its usual floor between runs of one side."
        )
    )
    return floors, note


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


@dataclass(frozen=True)
class WindowBucket:
    """One request-length bucket of two live windows (the stat-logger plugin's prompt buckets):
    its label and inclusive token bounds, each window's samples (keyed by quantity, typically
    :class:`SketchSample`) and finished requests."""

    label: str
    lo: float | None
    hi: float | None
    before: Mapping[str, MetricSample]
    after: Mapping[str, MetricSample]
    n_before: int
    n_after: int


def judge_bucket(
    b: WindowBucket, targets: Sequence[str], settings: Settings, guards: Sequence[str] = GUARDS
) -> BucketResult:
    """One bucket compared and judged on its own: keep / revert / inconclusive on the latencies
    the bucket carries, less the change's documented costs (the metrics GUARDS has and
    ``guards`` leaves out); against the change's targets where the bucket has them (ITL is not
    split by length), else every one of them counts either way."""
    metrics = compare_samples(
        b.before,
        b.after,
        settings,
        key=b.label,
        metrics=[m for m in METRICS if m.quantity in PER_REQUEST_QUANTITIES],
    )
    status = "ok" if min(b.n_before, b.n_after) >= settings.min_requests else "insufficient"
    if status != "ok":
        verdict: Verdict = "inconclusive"
        reasons = [
            f"Too few requests: {b.n_before} before, {b.n_after} after (at least {settings.min_requests})."
        ]
    else:
        own = [t for t in targets if t in metrics]
        costs = set(GUARDS) - set(guards)
        judged = {k: d for k, d in metrics.items() if k in own or k not in costs}
        verdict, reasons = judge(judged, own, settings, guards=guards)
    return BucketResult(b.lo, b.hi, b.n_before, b.n_after, status, metrics, b.label, verdict, tuple(reasons))


def compare_windows(
    before: Mapping[str, MetricSample],
    after: Mapping[str, MetricSample],
    target: str | Sequence[str] | None = None,
    settings: Settings | None = None,
    load: LoadCheck | None = None,
    requests: tuple[int, int] | None = None,
    guards: Sequence[str] = GUARDS,
    buckets: Sequence[WindowBucket] = (),
) -> Comparison:
    """Compare two live windows (pure): samples keyed by quantity, typically
    :class:`HistogramSample` of bucket deltas (``ttft``, ``tpot``/``itl``, ``e2e``), or the
    plugin's :class:`SketchSample`, :class:`ScalarSample` rates and :class:`CountSample`
    preemptions. ``load``: the caller's comparable-load check (refused when not same);
    ``requests``: finished requests per window; ``buckets``: request-length buckets (from the
    plugin), each compared and judged on its own besides the overall verdict."""
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
    results = tuple(judge_bucket(b, targets, settings, guards) for b in buckets)
    if status == "insufficient":
        verdict: Verdict = "inconclusive"
        reasons = [
            f"Too few requests to judge: {na} before, {nb} after; at least {settings.min_requests} "
            "are needed in each window."
        ]
    else:
        verdict, reasons = judge(metrics, targets, settings, results, guards=guards)
    return Comparison(
        verdict,
        tuple(reasons),
        load,
        overall,
        results or (overall,),
        "prompt-length buckets of the stat-logger plugin: " + ", ".join(r.label for r in results)
        if results
        else "one bucket: live windows",
        targets,
        settings,
        "before",
        "after",
    )
