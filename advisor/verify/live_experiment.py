"""The experiment the daemon runs by itself: the engine restarted with a different knob, so
compare the window before the change with the window after it, under comparable load, and
say keep, revert or inconclusive (the comparison core is :mod:`advisor.experiment`).

vLLM's histograms are not split by request length: without the stat-logger plugin a live
experiment has one bucket (per-bucket results need per-request data: ``vllm-advisor compare``
on benchmark files). With the plugin on both sides, its sketches give the latencies (exact
within 1%, with intervals from the request counts: verify.samples.SketchSample) overall and per
prompt-length bucket, and each bucket is judged keep / revert / inconclusive on its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import Any

from advisor.core import knobs
from advisor.core import names as n
from advisor.core.config import DEFAULT_TARGETS
from advisor.derive import sketches
from advisor.derive.window import Window
from advisor.plugin import names as pn
from advisor.verify import comparison, samples, verdict
from advisor.verify.differences import compare_samples, describe_floors, fmt_value, spread_floors

MIN_REQUESTS = 20
BATCH_REQUESTS = 30  # a window's batches each finish at least this many requests
MAX_BATCHES = 4
LOAD_TOLERANCE = 0.15  # request count and mean prompt/output lengths within 15%
COUNT_TOLERANCE = 0.25


@dataclass(frozen=True)
class Change:
    knob: str
    old: Any
    new: Any
    source: str | None


@dataclass(frozen=True)
class LiveExperiment:
    changes: tuple[Change, ...]
    before: tuple[float, float]
    after_start: float
    state: str = "observing"  # observing | done
    verdict: str | None = None
    reasons: tuple[str, ...] = ()
    before_requests: float = 0.0
    after_requests: float = 0.0
    comparison: dict[str, Any] | None = None
    ended_at: float | None = None
    load: dict[str, Any] = field(default_factory=dict)
    prediction: dict[str, Any] | None = None  # the model's, made at the change; its error once judged

    @property
    def knob(self) -> str:
        return self.changes[0].knob if self.changes else ""

    @property
    def direction(self) -> str:
        c = self.changes[0]
        try:
            return "increase" if float(c.new) > float(c.old) else "decrease"
        except (TypeError, ValueError):
            return "set"

    def to_json(self) -> dict[str, Any]:
        c = self.changes[0] if self.changes else None
        return {
            "knob": c.knob if c else None,
            "flag": knobs.KNOBS[c.knob].flag if c and c.knob in knobs.KNOBS else None,
            "old": c.old if c else None,
            "new": c.new if c else None,
            "changes": [
                {"knob": x.knob, "old": x.old, "new": x.new, "source": x.source} for x in self.changes
            ],
            "state": self.state,
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "before": list(self.before),
            "started_at": self.after_start,
            "ended_at": self.ended_at,
            "before_requests": self.before_requests,
            "after_requests": self.after_requests,
            "load": self.load,
            "comparison": self.comparison,
            "prediction": self.prediction,
        }


def start(
    window: Window, changes: Sequence[Change], restart_t: float, previous_after: float | None
) -> LiveExperiment:
    """A knob change was noticed at ``restart_t`` (the first page after the restart)."""
    before_pages = [
        t for t in window.times() if t < restart_t and (previous_after is None or t >= previous_after)
    ]
    before = (before_pages[0], before_pages[-1]) if before_pages else (restart_t, restart_t)
    req = window.slice(*before).counter_delta(n.REQUEST_SUCCESS) or 0.0
    return LiveExperiment(tuple(changes), before, restart_t, before_requests=req)


def _busy_seconds(w: Window) -> float:
    busy = 0.0
    for (ta, ra), (tb, rb) in pairwise(w.totals(n.NUM_RUNNING)):
        if (ra or 0) > 0 or (rb or 0) > 0:
            busy += tb - ta
    return busy


def _busy_rates(w: Window) -> list[float]:
    """Generation tokens per second over each interval with requests running at both ends."""
    rates = []
    running = w.totals(n.NUM_RUNNING)
    generated = w.totals(n.GENERATION_TOKENS)
    for ((ta, ga), (tb, gb)), ((_, ra), (_, rb)) in zip(pairwise(generated), pairwise(running), strict=True):
        if ga is None or gb is None or gb < ga or tb <= ta:
            continue
        if (ra or 0) > 0 and (rb or 0) > 0:
            rates.append((gb - ga) / (tb - ta))
    return rates


def window_samples(w: Window) -> tuple[dict[str, samples.MetricSample], dict[str, Any]]:
    """The comparison inputs of one window, and its load profile."""
    out: dict[str, samples.MetricSample] = {}
    for quantity, fam in (("ttft", n.TTFT), ("itl", n.ITL), ("tpot", n.TPOT), ("e2e", n.E2E)):
        h = w.histogram_delta(fam)
        if h is not None and h.count > 0:
            out[quantity] = samples.HistogramSample(h)
    requests = w.counter_delta(n.REQUEST_SUCCESS) or 0.0
    busy = _busy_seconds(w)
    rates = _busy_rates(w)
    if len(rates) >= 2:
        # per-interval throughput while busy: its spread gives the comparison a noise estimate
        out["output_throughput"] = samples.ValuesSample.of(rates)
    pre = w.counter_delta(n.NUM_PREEMPTIONS)
    if pre is not None and requests > 0:
        out["preemptions"] = samples.CountSample(pre, requests)
    prompt = w.histogram_delta(n.REQUEST_PROMPT_TOKENS)
    output = w.histogram_delta(n.REQUEST_GENERATION_TOKENS)
    profile = {
        "requests": requests,
        "busy_seconds": round(busy, 1),
        "prompt_tokens_mean": prompt.mean() if prompt else None,
        "generation_tokens_mean": output.mean() if output else None,
        "preemptions": pre,
    }
    return out, profile


def sketch_sample(s: sketches.SketchLatency) -> samples.SketchSample:
    return samples.SketchSample(
        tuple((b.n, dict(b.quantiles)) for b in s.batches), s.relative_accuracy, s.mean
    )


@dataclass(frozen=True)
class PluginSamples:
    """What the plugin's sketches say about one window: latency samples over all requests, and
    per prompt bucket (label -> (samples, finished requests))."""

    overall: dict[str, samples.MetricSample]
    buckets: dict[str, tuple[dict[str, samples.MetricSample], int]]


OVERALL_QUANTITIES = ("ttft", "tpot", "itl", "e2e")
BUCKET_QUANTITIES = ("ttft", "tpot", "e2e")  # ITL is not split by length


def plugin_samples(w: Window) -> PluginSamples | None:
    """The plugin's samples of a window; None when its pages carry no plugin series."""
    info = sketches.plugin_info(w)
    if info is None:
        return None
    overall: dict[str, samples.MetricSample] = {}
    for qty in OVERALL_QUANTITIES:
        s = sketches.latency(w, qty, None, info=info, max_batches=None)
        if s is not None and s.batches:
            overall[qty] = sketch_sample(s)
    buckets: dict[str, tuple[dict[str, samples.MetricSample], int]] = {}
    for label in sketches.bucket_labels(w, "prompt"):
        got: dict[str, samples.MetricSample] = {}
        n = 0
        for qty in BUCKET_QUANTITIES:
            s = sketches.latency(w, qty, None, label, pn.ALL, info, max_batches=None)
            if s is None:
                continue
            n = max(n, int(s.count or 0))
            if s.batches:
                got[qty] = sketch_sample(s)
        buckets[label] = (got, n)
    return PluginSamples(overall, buckets)


def batches(w: Window, most: int = MAX_BATCHES) -> list[Window]:
    """The window as consecutive slices that finish about equal numbers of requests, at least
    BATCH_REQUESTS each and at most ``most`` of them: its batches (the window alone where it
    finished too few for two). A slice is cut once it holds its share of the window's requests
    and enough are left for another; what the last would hold short of BATCH_REQUESTS (coarse
    pages, an idle tail) joins the one before. Neighbouring slices share their boundary page,
    so their deltas cover the window once."""
    done, total = [], 0.0
    prev = None
    for t, c in w.totals(n.REQUEST_SUCCESS):
        if c is None:
            continue
        if prev is not None:
            total += c if c < prev else c - prev  # a counter reset counts from zero
        prev = c
        done.append((t, total))
    k = min(most, int(total // BATCH_REQUESTS))
    if k < 2:
        return [w]
    cuts, at = [done[0][0]], 0.0
    for t, c in done[1:-1]:
        if c - at >= total / k and total - c >= BATCH_REQUESTS and len(cuts) < k:
            cuts.append(t)
            at = c
    cuts.append(done[-1][0])
    if len(cuts) < 3:
        return [w]
    return [w.slice(a, b) for a, b in pairwise(cuts)]


def _batch_samples(w: Window, plugin: bool) -> dict[str, samples.MetricSample]:
    s = window_samples(w)[0]
    p = plugin_samples(w) if plugin else None
    return {**s, **p.overall} if p is not None else s


def batch_floors(
    before: Window, after: Window, plugin: bool, settings: samples.Settings, most: int = MAX_BATCHES
) -> tuple[dict[str, float], str | None]:
    """The noise floor of each metric measured within the two windows, and the sentence that
    says so (None where no floor rose). Each window is cut into its batches
    (:func:`batches`); how far a batch's value strays from the others of its window, pooled over
    both, is the noise of a window's value (batch means): near a knee the requests of one burst
    queue together, so one window's interval is narrower than two windows of one configuration
    differ (validation/live.py: 11 of 20 A/A pairs of an H100's runs judged keep or revert
    without it). ``plugin``: the plugin's sketches stand for the latencies, as in the verdict;
    ``most``: batches per window at most (1: none, the window's own intervals alone)."""
    sides = [[_batch_samples(b, plugin) for b in batches(w, most)] for w in (before, after)]
    if any(len(side) < 2 for side in sides):  # a window of one batch: its spread unknown
        return {}, None
    repeats = [[compare_samples(side[0], b, settings, key="batch") for b in side[1:]] for side in sides]
    floors = spread_floors(repeats, None, settings)  # a window's value: the mean of its batches'
    if not floors:
        return {}, None
    return floors, (
        f"Noise within the windows, measured from their batches ({len(sides[0])} before, "
        f"{len(sides[1])} after, at least {BATCH_REQUESTS} requests each): {describe_floors(floors)} "
        "for a window's value; a difference within that counts as noise."
    )


def _window_buckets(a: PluginSamples, b: PluginSamples) -> list[comparison.WindowBucket]:
    out = []
    for label in sorted(set(a.buckets) | set(b.buckets), key=sketches.bucket_low):
        sa, na = a.buckets.get(label, ({}, 0))
        sb, nb = b.buckets.get(label, ({}, 0))
        lo, hi = sketches.bucket_bounds(label)
        out.append(comparison.WindowBucket(label, lo, hi, sa, sb, na, nb))
    return out


def bucket_line(bk: verdict.BucketResult, confidence: float = 0.95) -> str:
    """``Prompts 513-2048 tokens (60 -> 58 requests): REVERT: TTFT p95 ... worse; ...``."""
    moved = [d for d in bk.metrics.values() if d.direction != "same"]
    if bk.status != "ok":
        what = f"too few requests (at least {MIN_REQUESTS} in each window)"
    elif moved:
        what = "; ".join(f"{d.describe(confidence)} {d.direction}" for d in moved)
    else:
        p50 = bk.metrics.get("ttft_p50")
        level = (
            f" (TTFT p50 {fmt_value(p50.a, 's')} -> {fmt_value(p50.b, 's')})"
            if p50 is not None and p50.a is not None
            else ""
        )
        what = "every latency within noise" + level
    return f"Prompts {bk.label} tokens ({bk.n_a} -> {bk.n_b} requests): {str(bk.verdict).upper()}: {what}."


def _load_check(a: dict[str, Any], b: dict[str, Any]) -> comparison.LoadCheck:
    diffs = []
    ra, rb = a["requests"], b["requests"]
    if ra and abs(rb - ra) / ra > COUNT_TOLERANCE:
        diffs.append(f"requests {ra:.0f} before vs {rb:.0f} after")
    for key, what in (
        ("prompt_tokens_mean", "mean prompt length"),
        ("generation_tokens_mean", "mean output length"),
    ):
        x, y = a.get(key), b.get(key)
        if x and y and abs(y - x) / x > LOAD_TOLERANCE:
            diffs.append(f"{what} {x:.0f} before vs {y:.0f} after tokens")
    return comparison.LoadCheck(not diffs, tuple(diffs), a, b)


def advance(
    exp: LiveExperiment,
    window: Window,
    now: float,
    max_wait_s: float,
    targets: Mapping[str, float] | None = None,
) -> LiveExperiment:
    """Count the after-window; judge it once it has seen as many requests as the before-window
    (or the server went idle after enough of them, or ``max_wait_s`` passed). ``targets``: the
    advisor's latency targets (guards within them are trade-offs; default: the config's)."""
    if exp.state == "done":
        return exp
    after = window.slice(exp.after_start, now)
    after_req = after.counter_delta(n.REQUEST_SUCCESS) or 0.0
    latest = after.latest
    idle = (
        latest is not None
        and not (latest.total(n.NUM_RUNNING) or 0)
        and not (latest.total(n.NUM_WAITING) or 0)
    )
    enough = after_req >= exp.before_requests or (
        idle and after_req >= max(MIN_REQUESTS, 0.75 * exp.before_requests)
    )
    timed_out = now - exp.after_start >= max_wait_s
    exp = replace(exp, after_requests=after_req)
    if not (enough or timed_out):
        return exp
    return judge(exp, window, now, targets)


def with_reason(exp: LiveExperiment, reason: str) -> LiveExperiment:
    """``reason`` added to a judged experiment's reasons, before a revert's closing "Restore the
    previous value" line (which stays last)."""
    reasons = list(exp.reasons)
    at = len(reasons) - (1 if reasons and reasons[-1].startswith(verdict.RESTORE) else 0)
    reasons.insert(at, reason)
    return replace(exp, reasons=tuple(reasons))


def judge(
    exp: LiveExperiment,
    window: Window,
    now: float,
    targets: Mapping[str, float] | None = None,
    most_batches: int = MAX_BATCHES,
) -> LiveExperiment:
    """The verdict on the windows before and after the change (``most_batches``: how many
    batches each window is measured in for its noise, :func:`batch_floors`)."""
    wb, wa = window.slice(*exp.before), window.slice(exp.after_start, now)
    before_s, before_p = window_samples(wb)
    after_s, after_p = window_samples(wa)
    if exp.before_requests < MIN_REQUESTS:
        return replace(
            exp,
            state="done",
            verdict="inconclusive",
            ended_at=now,
            load={"before": before_p, "after": after_p},
            reasons=(
                f"No baseline: only {exp.before_requests:.0f} requests finished before the change "
                f"(at least {MIN_REQUESTS} are needed).",
            ),
        )
    knob, direction = exp.knob, exp.direction
    notes: list[str] = []
    buckets: list[comparison.WindowBucket] = []
    plug_b, plug_a = plugin_samples(wb), plugin_samples(wa)
    if plug_b is not None and plug_a is not None:
        for qty in set(plug_b.overall) & set(plug_a.overall):
            before_s[qty], after_s[qty] = plug_b.overall[qty], plug_a.overall[qty]
        buckets = _window_buckets(plug_b, plug_a)
        notes.append(
            "Latencies from the stat-logger plugin's sketches (exact within 1%), overall and per "
            "prompt-length bucket."
        )
    elif plug_b is not None or plug_a is not None:
        notes.append(
            "The stat-logger plugin was loaded in only one of the windows: vLLM's histograms are "
            "compared, in one bucket."
        )
    settings = samples.Settings(
        slo=samples.slo_from_targets(targets if targets is not None else DEFAULT_TARGETS)
    )
    floors, floor_note = batch_floors(
        wb, wa, plug_b is not None and plug_a is not None, settings, most_batches
    )
    if floor_note is not None:
        settings = replace(settings, noise_floor={**settings.noise_floor, **floors})
        notes.append(floor_note)
    comp = comparison.compare_windows(
        before_s,
        after_s,
        target=verdict.targets_for_knob(knob, direction) or None,
        load=_load_check(before_p, after_p),
        requests=(int(before_p["requests"]), int(after_p["requests"])),
        guards=verdict.guards_for_knob(knob, direction),
        settings=settings,
        buckets=buckets,
    )
    reasons = list(comp.reasons)
    if comp.load.same:
        reasons += notes
        reasons += [bucket_line(bk) for bk in comp.buckets if bk.verdict is not None]
    if len(exp.changes) > 1:
        reasons.append(
            "Several knobs changed at once ("
            + ", ".join(c.knob for c in exp.changes)
            + "): the effect cannot be told apart; change one at a time."
        )
    outcome = comp.verdict
    if outcome == "revert":
        c = exp.changes[0]
        flag = knobs.KNOBS[c.knob].flag if c.knob in knobs.KNOBS else c.knob
        reasons = [r for r in reasons if not r.startswith(verdict.RESTORE)]
        reasons.append(f"{verdict.RESTORE}: {flag} {knobs.format_value(c.old)}.")
    return replace(
        exp,
        state="done",
        verdict=outcome,
        reasons=tuple(reasons),
        ended_at=now,
        comparison=comp.to_json(),
        load={"before": before_p, "after": after_p},
    )
