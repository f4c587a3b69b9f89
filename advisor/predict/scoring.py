"""What-if scoring: the performance model (:mod:`advisor.predict.perfmodel`) put to use.
Predict one knob's change, score candidate values by predicted goodput, choose the advised
value, and set a prediction against what happened after the change. Pure.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from advisor.core import knobs
from advisor.core import steps as knob_steps
from advisor.core.model import EngineInfo
from advisor.core.units import fmt
from advisor.derive.signals import Context, Values
from advisor.derive.window import Window
from advisor.predict import perfmodel as pm
from advisor.predict import simulated
from advisor.predict.intake import Intake, IntakeView


@dataclass(frozen=True)
class Observed:
    """What a model is fitted from: the model's facts of a span (the intake's rows) and the
    window whose histograms measured the span's latencies (its last ``seconds``; None: all)."""

    window: Window
    facts: IntakeView
    seconds: float | None = None

    @classmethod
    def of(cls, intake: Intake, window: Window, seconds: float | None = None) -> Observed:
        """The last ``seconds`` of a live window and its intake (None: everything they hold)."""
        t0 = -math.inf if seconds is None else window.now() - seconds
        return cls(window, intake.view(t0), seconds)

    @classmethod
    def between(cls, intake: Intake, window: Window, t0: float, t1: float) -> Observed:
        """The pages taken in [t0, t1] (an experiment's before- or after-window)."""
        return cls(window.slice(t0, t1), intake.view(t0, t1), None)

    @classmethod
    def of_window(cls, window: Window, seconds: float | None = None) -> Observed:
        """A window alone (a test, a one-shot read): its pages are taken in once."""
        return cls(window, Intake.of(window.snapshots(seconds)).view(), seconds)


def model_of(
    obs: Observed,
    engine: EngineInfo,
    values: Mapping[str, float | None],
    recent: simulated.Recent | None = None,
) -> pm.Model:
    """The fitted model; InsufficientData when the span cannot carry one. Where the span
    preempted on a GPU, fitted again with the recompute its counters hide counted as prefill,
    as much as today's knobs simulated recompute (:func:`simulated.recompute_per_preemption`;
    ``recent``: the daemon's, which reads it off its last scorer's run of today's knobs)."""
    model = pm.build(obs.facts, obs.window, engine, values, obs.seconds)
    if not simulated.hides_recompute(model):
        return model
    r = (recent or simulated.Recent()).recompute_per_preemption(model)
    if not r:
        return model
    return pm.build(obs.facts, obs.window, engine, values, obs.seconds, recompute_per_preemption=r)


def predict(model: pm.Model, knob: str, value: float, values: Mapping[str, float | None]) -> pm.Prediction:
    return pm.predict(model, knob, value, values.get("queue_share_of_ttft"))


# ------------------------------------------------------------------ goodput
def share_within(target: float | None, p50: float | None, p95: float | None) -> float | None:
    """The share of requests under ``target``, from a latency's p50 and p95 (linear between
    them, ~0 far below p50); None when the target or the latency is unknown."""
    if target is None or p95 is None:
        return None
    if target >= p95:
        return 1.0
    if p50 is None or p50 >= p95:
        return 0.5 * target / p95
    if target >= p50:
        return 0.5 + 0.45 * (target - p50) / (p95 - p50)
    return 0.5 * target / p50


def goodput(metrics: Mapping[str, float | None], targets: Mapping[str, float]) -> float | None:
    """Output tokens/s of the requests that meet the TTFT and ITL targets."""
    thr = metrics.get("output_tokens_per_second")
    if thr is None:
        return None
    ttft = share_within(
        targets.get("ttft_p95_seconds"), metrics.get("ttft_seconds_p50"), metrics.get("ttft_seconds_p95")
    )
    itl = metrics.get("itl_seconds_p95")
    itl_t = targets.get("itl_p95_seconds")
    itl_share = 1.0 if itl is None or itl_t is None or itl <= itl_t else 0.95 * itl_t / itl
    return thr * (ttft if ttft is not None else 1.0) * itl_share


WORSE = 0.10  # a latency already past its target may not get worse by more (compare's guard tolerance)


def breaks_target(p: pm.Prediction, targets: Mapping[str, float], standing: bool = False) -> str | None:
    """Which target the change is predicted to push past (one that holds now), or to push
    further past by more than 10% (one already broken), or None. ``standing``: see :func:`_breaks`."""
    checks = (
        ("itl_seconds_p95", "itl_p95_seconds", "ITL p95"),
        ("tpot_seconds_p95", "itl_p95_seconds", "TPOT p95"),
        ("ttft_seconds_p95", "ttft_p95_seconds", "TTFT p95"),
    )
    return _breaks(
        [(label, p.predicted.get(m), p.measured.get(m), targets.get(t)) for m, t, label in checks],
        p.confidence,
        standing=standing,
    )


def _breaks(
    checks: Sequence[tuple[str, float | None, float | None, float | None]],
    confidence: float,
    what: str = "",
    standing: bool = False,
) -> str | None:
    """The first of (label, after, now, target) that the change pushes past its target (or, broken
    already, further past by more than ``WORSE``). A new change must keep a target it meets
    within the prediction's error band (:func:`band`); a ``standing`` one (the advice the last
    decision gave) is withdrawn only where the prediction is past the line by more than that
    band: the two edges of the band are the hysteresis that keeps a prediction sitting at a
    target from giving and withdrawing the advice cycle after cycle."""
    b = band(confidence)
    for label, after, now, t in checks:
        if t is None or after is None:
            continue
        if now is not None and now > t:  # broken already: may not get worse by more than WORSE
            if after > now * (1 + WORSE) * (1 + b if standing else 1):
                return f"{label} {what}predicted {fmt(after, 's')}, {fmt(now, 's')} now, against its {fmt(t, 's')} target"
        elif not within(after, t, b, standing) and (now is None or after > now):
            # met now: a change that raises it must keep it met within the prediction's error
            return f"{label} {what}predicted {fmt(after, 's')} against its {fmt(t, 's')} target"
    return None


def within(value: float, target: float, b: float, standing: bool = False) -> bool:
    """A predicted latency meets its target: with the error band ``b`` to spare (a new change),
    or not past it by more than the band (the standing advice: see :func:`_breaks`)."""
    return value <= target * (1 + b) if standing else value * (1 + b) <= target


def sim_checks(
    now: simulated.Outcome, after: simulated.Outcome, targets: Mapping[str, float]
) -> list[tuple[str, float | None, float | None, float | None]]:
    """(label, after, now, target) of the simulated p95s: TTFT p95 against its target, TPOT p95
    (bench's per-request inter-token mean, as goodput counts it) against the ITL one."""
    return [
        ("TPOT p95", after.tpot_p95, now.tpot_p95, targets.get("itl_p95_seconds")),
        ("TTFT p95", after.ttft_p95, now.ttft_p95, targets.get("ttft_p95_seconds")),
    ]


def sim_breaks(
    now: simulated.Outcome,
    after: simulated.Outcome,
    targets: Mapping[str, float],
    confidence: float,
    standing: bool = False,
) -> str | None:
    """:func:`breaks_target` on the simulated p95s (today's simulated against the change's)."""
    return _breaks(sim_checks(now, after, targets), confidence, "simulated, ", standing)


def targets_met(p: pm.Prediction, targets: Mapping[str, float], standing: bool = False) -> int:
    """How many of the TTFT p95 and ITL p95 targets the predicted state meets (:func:`within`)."""
    met = 0
    for metric, name in (("ttft_seconds_p95", "ttft_p95_seconds"), ("itl_seconds_p95", "itl_p95_seconds")):
        v, t = p.predicted.get(metric), targets.get(name)
        met += v is not None and t is not None and within(v, t, band(p.confidence), standing)
    return met


def sim_targets_met(
    after: simulated.Outcome, targets: Mapping[str, float], confidence: float, standing: bool = False
) -> int:
    """How many of the TTFT p95 and ITL p95 targets the simulated p95s meet (TPOT for ITL)."""
    met = 0
    for v, name in ((after.ttft_p95, "ttft_p95_seconds"), (after.tpot_p95, "itl_p95_seconds")):
        t = targets.get(name)
        met += v is not None and t is not None and within(v, t, band(confidence), standing)
    return met


def band(confidence: float) -> float:
    """The relative error a prediction of this confidence stands for (docs/prediction.md)."""
    return (1 - confidence) + 0.05


# ------------------------------------------------------------------ choosing a value
STEPS = {
    "increase": ("+25%", "+50%", "x2", "x3", "x4"),
    "decrease": ("-10%", "-25%", "/2", "/4"),
}
# goodput within 1% of the output (the throughput) of the best counts as the best: the rule's
# step, else the smallest move; a gain smaller than that is the grain of a goodput counted per
# request (a few requests more or fewer meeting a target), not a gain
FLAT = 0.01
# Goodput tells changes apart only where a share of the output meets the targets (now or
# predicted): below it the prediction rests on the far tail of the latency distributions, which
# the model does not predict, and a ratio of two near-zero goodputs means nothing.
MEASURABLE = FLAT


SIMULATOR, CLOSED_FORM = "simulator", "closed form"
SIM_CONFIDENCE = 0.85  # a knob only the simulator prices: the error band of its targets' checks


@dataclass(frozen=True)
class Judged:
    """One candidate value as the decision judged it: the closed form's prediction (the shown
    metrics), the simulated outcome where the simulator decides, its goodput, why it is excluded
    (a target it breaks, or what cannot be predicted) and how many targets it meets."""

    value: Any
    prediction: pm.Prediction | None
    goodput: float | None
    excluded: str | None
    met: int = 0
    outcome: simulated.Outcome | None = None


@dataclass(frozen=True)
class Choice:
    value: Any
    prediction: pm.Prediction | None  # None: a knob only the simulator prices
    goodput: float | None
    reason: str
    considered: tuple[tuple[Any, float | None, str | None], ...]  # (value, goodput, excluded why)
    moves_target: bool = True
    outcome: simulated.Outcome | None = None  # the chosen value simulated (decided by the simulator)


def candidates(
    knob: str,
    current: Any,
    direction: str,
    limits: knob_steps.Limits,
    extra: Sequence[Any] = (),
    bound: float | None = None,
) -> list[Any]:
    """Valid values in ``direction`` from ``current``: the knob's own step math and safe range
    applied to a ladder of steps, plus ``extra`` (the rule's own proposal) and a model bound."""
    out: list[Any] = []
    for step in STEPS.get(direction, ()):
        try:
            v = knob_steps.propose(knob, current, direction, step, limits=limits)
        except ValueError:
            continue
        if v is not None and v not in out:
            out.append(v)
    if bound is not None and math.isfinite(bound):
        try:
            v = knob_steps.propose(
                knob,
                current,
                direction,
                "+0%" if direction == "increase" else "-0%",
                bound_hint=bound,
                limits=limits,
            )
        except ValueError:
            v = None
        if v is not None and v not in out and v != current:
            out.append(v)
    for v in extra:
        if v is not None and v not in out and v != current:
            out.append(v)
    return sorted(out, key=lambda x: abs(float(x) - float(current)))


def deciding(scorer: simulated.Scorer | None) -> tuple[simulated.Scorer | None, str | None]:
    """The scorer if the simulator decides here, else None and why not."""
    if scorer is None:
        return None, "not simulated (no scorer given)"
    why = scorer.why_not()
    return (scorer, None) if why is None else (None, why)


def judge(
    model: pm.Model,
    knob: str,
    values_in: Sequence[Any],
    values: Mapping[str, float | None],
    targets: Mapping[str, float],
    sim: simulated.Scorer | None = None,
    standing: bool = False,
) -> list[Judged]:
    """Each candidate value predicted (the closed form) and, with ``sim`` (a scorer that can
    decide), simulated on the decision's requests: goodput counted per request, the targets
    judged on the simulated p95s. Without it, goodput from the closed form's two quantiles.
    ``standing``: the knob is the advice the last decision gave (:func:`_breaks`)."""
    out: list[Judged] = []
    for v in values_in:
        p: pm.Prediction | None
        try:
            p = predict(model, knob, float(v), values)
        except ValueError as e:
            if sim is None:
                out.append(Judged(v, None, None, str(e)))
                continue
            p = None  # a knob only the simulator prices: it decides, nothing is shown beside it
        if sim is None:
            assert p is not None
            g = goodput(p.predicted, targets)
            out.append(
                Judged(v, p, g, breaks_target(p, targets, standing), targets_met(p, targets, standing))
            )
            continue
        try:
            o = sim.at(knob, float(v))
        except ValueError as e:
            out.append(Judged(v, p, None, f"cannot be simulated: {e}"))
            continue
        conf = p.confidence if p is not None else SIM_CONFIDENCE
        why = sim_breaks(sim.now(), o, targets, conf, standing)
        met = sim_targets_met(o, targets, conf, standing)
        out.append(Judged(v, p, o.goodput_tokens_per_second, why, met, o))
    return out


def choose(
    model: pm.Model,
    knob: str,
    values_in: Sequence[Any],
    values: Mapping[str, float | None],
    targets: Mapping[str, float],
    prefer: Any = None,
    sim: simulated.Scorer | None = None,
    judged: Sequence[Judged] | None = None,
) -> Choice | None:
    """The candidate expected best by goodput within the targets: among those within 1% of the
    best, ``prefer`` (the rule's own step) if it is one, else the smallest move. None when no
    candidate can be predicted or all break a target. ``sim``: a scorer that decides (goodput
    per simulated request); None: the closed form decides."""
    if judged is None:
        judged = judge(model, knob, values_in, values, targets, sim)
    considered = tuple((j.value, j.goodput, j.excluded) for j in judged)
    base = sim.now().goodput_tokens_per_second if sim is not None else goodput(model.measured, targets)
    scored = [j for j in judged if j.excluded is None and (j.prediction is not None or j.outcome is not None)]
    if not scored:
        return None
    # within the targets first: the values that meet the most targets, then the best goodput
    most = max(j.met for j in scored)
    scored = [j for j in scored if j.met == most]
    best_g = max((j.goodput for j in scored if j.goodput is not None), default=None)
    if best_g is None:
        j = scored[0]
        return Choice(
            j.value,
            j.prediction,
            j.goodput,
            "the model cannot score goodput here: the nearest value",
            considered,
        )
    thr = (
        sim.now().output_tokens_per_second
        if sim is not None
        else model.measured.get("output_tokens_per_second")
    )
    # goodput under 1% of the output (nearly every request breaks a target, for every value)
    # tells no value from another, as arbitration counts it: all of them are a tie
    measurable = thr is None or best_g >= MEASURABLE * thr
    grain = FLAT * thr if thr else FLAT * best_g  # a goodput difference under it is no difference
    good = [j for j in scored if j.goodput is not None and (not measurable or j.goodput >= best_g - grain)]
    # a near-tie goes to the rule's own step (the step the recorded after-runs measured), by
    # either model: within 1% neither can tell the values apart; else to the smallest move
    pick = [j for j in good if prefer is not None and j.value == prefer]
    j = (pick or good)[0]  # candidates are sorted nearest first
    g = j.goodput
    moves = measurable and (base is None or g is None or g > base + grain)
    by = "simulated goodput" if sim is not None else "predicted goodput"
    reason = f"{by} {fmt(g, 'tok/s')} (now {fmt(base, 'tok/s')}), the best of {len(considered)} values within the targets"
    return Choice(j.value, j.prediction, g, reason, considered, moves, j.outcome)


# ------------------------------------------------------------------ advice by prediction
@dataclass(frozen=True)
class Refined:
    """The advised value after prediction: the value, the prediction (JSON) and a note; or
    ``withdrawn``: why the model advises against every value of this knob. ``goodput`` is the
    value's goodput (tokens/s of the requests within the targets) and ``goodput_now`` today's,
    both simulated where the simulator decides (``decided_by``; counted per simulated request),
    else the closed form's (``decided_why``: why the simulator could not); ``throughput_now``
    the output tokens/s they are shares of: what arbitration between rules compares."""

    value: Any = None
    predicted: dict[str, Any] | None = None
    note: str = ""
    withdrawn: str | None = None
    goodput: float | None = None
    goodput_now: float | None = None
    prediction: pm.Prediction | None = None
    decided_by: str = CLOSED_FORM
    decided_why: str | None = None  # why the simulator did not decide (None: it did)
    sim: simulated.Simulated | None = None  # the value simulated beside today's knobs
    throughput_now: float | None = None

    @property
    def gain(self) -> float | None:
        """The value's goodput over today's (None: unknown)."""
        if self.goodput is None or not self.goodput_now:
            return None
        return self.goodput / self.goodput_now

    @property
    def predicted_p95(self) -> dict[str, float | None]:
        """The p95 latencies the change is predicted to leave (the label's metric -> seconds):
        the simulated TTFT and TPOT p95 where the simulator decided (TPOT against the
        ITL target, as goodput counts it), else the closed form's TTFT and ITL p95."""
        if self.sim is not None:
            a = self.sim.after
            return {"ttft_seconds_p95": a.ttft_p95, "itl_seconds_p95": a.tpot_p95}
        p = self.prediction.predicted if self.prediction is not None else {}
        return {"ttft_seconds_p95": p.get("ttft_seconds_p95"), "itl_seconds_p95": p.get("itl_seconds_p95")}


def _decision_json(
    data: dict[str, Any], sim: simulated.Scorer | None, why_not: str | None, knob: str, value: Any
) -> simulated.Simulated | None:
    """Add what decided (and the simulated view of the value) to a prediction's JSON; returns
    the value simulated (None: the closed form decided). The numbers said are the deciding
    model's: where the simulator decided, ``predicted`` is its prediction (each measured value
    times the simulated after over now: :func:`simulated.predicted`) and the closed form's own
    moves to ``closed_form``."""
    data["decided_by"] = SIMULATOR if sim is not None else CLOSED_FORM
    data["decided_by_why"] = why_not
    data["predicted_by"] = CLOSED_FORM
    if sim is None:
        return None
    try:
        got = sim.simulated(knob, float(value))
    except ValueError as e:  # the closed form's numbers, then, and it is said so
        data["decided_by"], data["decided_by_why"] = CLOSED_FORM, f"not simulated: {e}"
        return None
    data["simulated"] = got.to_json()
    said_by_simulator(data, got)
    return got


def said_by_simulator(data: dict[str, Any], got: simulated.Simulated) -> None:
    """A prediction's JSON with the simulator's numbers said (it decided): ``predicted`` from
    ``got`` (:func:`simulated.predicted`), the closed form's own under ``closed_form``."""
    data["closed_form"] = simulated.closed_form_json(data)
    data["predicted"] = simulated.predicted(got, data.get("measured") or {})
    data["predicted_by"] = SIMULATOR


def _within(knob: str, current: Any, value: float, limits: knob_steps.Limits) -> Any:
    """``value`` as the knob's own step math would propose it (its type and safe range), None
    where it cannot."""
    try:
        return knob_steps.propose(knob, current, "increase", "+0%", bound_hint=value, limits=limits)
    except ValueError:
        return None


def kv_load_fit(model: pm.Model) -> float | None:
    """The KV cache memory per engine that holds every request the batch admits at its full
    length: the load offered (requests waiting and running, per engine), at most the cap (the
    admission limit where the version has one), times
    a request's footprint at the mean prompt and output, plus the null block, in the bytes per
    token measured; a prefix the requests share (:attr:`pm.Model.shared_prefix`) counted once.
    None where an input is unknown."""
    c = model.config
    if (
        model.offered is None
        or not model.prompt_mean
        or not model.output_mean
        or not c.kv_cache_tokens
        or not c.kv_cache_memory_bytes
    ):
        return None
    cap = c.max_num_active_seqs or c.max_num_seqs  # the batch's cap as the scheduler applies it
    batch = model.offered if cap is None else min(model.offered, cap)
    tokens = model.kv_held(c, batch) + (c.block_size or 0.0)
    return tokens * c.kv_cache_memory_bytes / c.kv_cache_tokens


def round_size(nbytes: float, down: bool = False) -> float:
    """``nbytes`` rounded up (``down``: down) to a whole number of a power of two bytes of at
    least 1/32 of it (7.6 GiB -> 7.75 GiB, 48.5 GiB -> 50 GiB): a size as one would type it, that
    the small changes of a window's means from one decision to the next leave alone."""
    if nbytes <= 0:
        return nbytes
    grain = 2.0 ** math.ceil(math.log2(nbytes / 32))
    return (math.floor if down else math.ceil)(nbytes / grain) * grain


def kv_memory_room(model: pm.Model) -> float | None:
    """Bytes the KV cache may grow by on the device: its free memory (None: unknown)."""
    return model.config.gpu_memory_free_bytes


def refine(
    obs: Observed,
    engine: EngineInfo,
    values: Mapping[str, float | None],
    targets: Mapping[str, float],
    knob: str,
    direction: str,
    current: Any,
    proposed: Any,
    limits: knob_steps.Limits,
) -> Refined | None:
    """:func:`refine_with` the model fitted to ``obs`` (None where none can be fitted), its
    candidates simulated where the simulator can decide."""
    try:
        model = model_of(obs, engine, values)
    except pm.InsufficientData:
        return None
    scorer = simulated.Scorer(model, targets)
    return refine_with(model, values, targets, knob, direction, current, proposed, limits, scorer)


def refine_with(
    model: pm.Model,
    values: Mapping[str, float | None],
    targets: Mapping[str, float],
    knob: str,
    direction: str,
    current: Any,
    proposed: Any,
    limits: knob_steps.Limits,
    scorer: simulated.Scorer | None = None,
    standing: bool = False,
) -> Refined | None:
    """Choose the value of the advised knob by goodput: simulated per request where ``scorer``
    can decide (:meth:`simulated.Scorer.why_not`; one scorer per decision, so every candidate
    of every knob replays the same requests), else the closed form's. None when the model cannot
    say (the rule's own step stands). ``standing``: this change is the advice the last decision
    gave, withdrawn only where a target is predicted broken beyond the error band (:func:`_breaks`)."""
    if knob not in pm.KNOBS or direction not in STEPS or current is None:
        return None
    sim, sim_why = deciding(scorer)
    if sim is not None and (knob, direction) in simulated.NOT_DECIDING:
        sim, sim_why = None, simulated.NOT_DECIDING[knob, direction]
    bound = None
    extra: list[Any] = [proposed]
    if knob in ("max_num_seqs", "max_num_active_seqs") and direction == "increase":
        # beyond what the KV cache holds at the observed sizes the batch cannot grow
        c = model.config
        if c.kv_cache_tokens is not None and model.kv_per_running:
            bound = c.kv_cache_tokens / model.kv_per_running * model.engines
        # nor beyond what the load offers: a cap that admits every request waiting and running
        if model.offered is not None:
            asked = math.ceil(model.offered * model.engines)
            if bound is None or asked < bound:
                extra.append(_within(knob, current, asked, limits))
        # the simulator also weighs the cap at the KV fit: the requests the cache holds at their
        # full length (past it the batch preempts; the simulator sees whether that pays)
        usable = c.usable_kv_tokens()
        if sim is not None and usable and model.prompt_mean and model.output_mean:
            fit = math.floor(usable / c.footprint(model.prompt_mean, model.output_mean)) * model.engines
            if fit > float(current):
                extra.append(_within(knob, current, fit, limits))
    if knob in ("max_num_seqs", "max_num_active_seqs") and direction == "decrease":
        # The model does not choose a cap cut. A cut is advised to stop preemption, and the rule's
        # value is what the KV cache holds at the observed sizes (no lower: validation showed a
        # deeper cut costs throughput). The model is least sure here: its one cap-cut pair on the
        # H200 was its one throughput miss (docs/prediction.md), and on dense-kv-tp it predicted
        # TTFT p95 up where the cut brought it down 17%. Its prediction is shown, not used.
        try:
            p = predict(model, knob, float(proposed), values)
        except ValueError:
            return None
        data = p.to_json()
        data["why"] = (
            "a cap cut keeps the rule's value (what the KV cache holds); the prediction is shown, not used to choose"
        )
        data["binding_now"] = p.binding_before
        g, g0 = goodput(p.predicted, targets), goodput(p.measured, targets)
        thr = p.measured.get("output_tokens_per_second")
        got = _decision_json(data, sim, sim_why, knob, proposed)
        if got is not None:  # the simulated goodput weighs it against the other rules' changes
            g, g0, thr = (
                got.after.goodput_tokens_per_second,
                got.before.goodput_tokens_per_second,
                got.before.output_tokens_per_second,
            )
        data["goodput_tokens_per_second"] = {
            "measured": goodput(p.measured, targets),
            "now": g0,
            "predicted": g,
        }
        return Refined(
            value=proposed,
            predicted=data,
            goodput=g,
            goodput_now=g0,
            prediction=p,
            decided_by=data["decided_by"],
            decided_why=data["decided_by_why"],
            sim=got,
            throughput_now=thr,
        )
    cands = candidates(knob, current, direction, limits, extra=extra, bound=bound)
    notes: list[str] = []
    if knob == "kv_cache_memory_bytes" and direction == "increase":
        room = kv_memory_room(model)
        if room is None:
            # the device's free memory is unknown: no more than the rule's own step
            cands = [v for v in cands if float(v) <= float(proposed)]
            notes.append("the device's free memory is unknown: no more than the rule's step")
        else:
            # the rule's step and the smaller ladder values, cut to what fits in the device's
            # free memory; where the simulator decides, also the KV the batch needs at its full
            # lengths (:func:`kv_load_fit`), or as much of it as fits: simulated goodput chooses
            # (the rule's step on a tie: no memory is taken that buys nothing)
            cur = float(current)
            need = kv_load_fit(model) if sim is not None else None
            if need is not None and need <= float(proposed):
                need = None  # the rule's step holds what the load needs
            need_fits, step_fits = need is not None and need - cur <= room, float(proposed) - cur <= room
            cands = [v for v in cands if float(v) <= float(proposed)]
            if need is not None:
                size = round_size(need) if need_fits else round_size(cur + room, down=True)
                if size > cur:
                    cands.append(_within(knob, current, size, limits))
            fits = sorted(
                {v for v in cands if v is not None and float(v) - cur <= room},
                key=lambda v: abs(float(v) - cur),
            )
            if not fits:
                return Refined(
                    withdrawn=f"more KV memory does not fit: the device has {knobs.format_bytes(room)} free"
                )
            cands = fits
            free = f"the device has {knobs.format_bytes(room)} free after start-up"
            if need is not None:
                notes.append(
                    f"{free}; the batch the load offers needs {knobs.format_bytes(need)} of KV at its "
                    "requests' full lengths: "
                    + ("that size" if need_fits else "as much of it as fits")
                    + " is weighed against "
                    + ("the rule's step" if step_fits else "smaller steps")
                    + " by simulated goodput"
                )
            else:
                notes.append(
                    f"{free}: " + ("the rule's step fits in it" if step_fits else "the step is cut to fit")
                )
    if knob == "gpu_memory_utilization" and direction == "increase":
        room, device = kv_memory_room(model), model.config.gpu_memory_bytes
        if room is not None and device:
            # vLLM refuses to start where the device's free memory is below the share it asks
            # for; a restart frees what the server holds, so the share may grow by the free memory
            fits = [v for v in cands if (float(v) - float(current)) * device <= room]
            if not fits:
                return Refined(
                    withdrawn=f"a larger gpu_memory_utilization does not fit: the device has {knobs.format_bytes(room)} free"
                )
            if len(fits) < len(cands):
                notes.append(
                    f"the device has {knobs.format_bytes(room)} free after start-up: "
                    f"gpu_memory_utilization up to {knobs.format_value(max(fits, key=float))} fits in it"
                )
            cands = fits
    judged = judge(model, knob, cands, values, targets, sim)
    choice = choose(model, knob, cands, values, targets, prefer=proposed, sim=sim, judged=judged)
    kept: str | None = None  # why a new advice of the value chosen would have been excluded
    if choice is None and standing:
        # the standing advice: kept (not withdrawn) where a value is within the error band past
        # its targets; the value is chosen as for a new advice wherever one passes as new does
        # (each value is simulated once per decision: judging again costs no simulation)
        fresh = {j.value: j.excluded for j in judged}
        judged = judge(model, knob, cands, values, targets, sim, standing=True)
        choice = choose(model, knob, cands, values, targets, prefer=proposed, sim=sim, judged=judged)
        kept = fresh.get(choice.value) if choice is not None else None
    if choice is None:
        if not any(j.goodput is not None for j in judged):
            return None  # the model cannot predict this knob here (an input is unknown): the rule's step
        why = "; ".join(f"{knobs.format_value(j.value)}: {j.excluded}" for j in judged)
        by = "the simulator" if sim is not None else "the model"
        return Refined(
            withdrawn=f"{by} predicts every value of {knob} breaks a target ({why})",
            decided_by=SIMULATOR if sim is not None else CLOSED_FORM,
            decided_why=sim_why,
        )
    if kept is not None:
        notes.append(
            f"the advice stands from the last decision: {kept}, within the model's error band, "
            "so it is not withdrawn (a new advice would need the band to spare)"
        )
    cp = choice.prediction  # None: a knob only the simulator prices
    if cp is not None:
        data = cp.to_json()
        data["binding_now"] = cp.binding_before
    else:
        data = {
            "knob": knob,
            "current": current,
            "value": choice.value,
            "binding_after": None,
            "predicted": {k: None for k in pm.METRICS},
            "measured": {k: model.measured.get(k) for k in pm.METRICS},
            "confidence": None,
            "binding_now": model.binding,
        }
    got = _decision_json(data, sim, sim_why, knob, choice.value)
    # the numbers said: the deciding model's (the simulator's where it decided)
    pre0 = data["measured"].get("preemptions_per_second")
    pre1 = data["predicted"].get("preemptions_per_second")
    more_kv = knob in ("kv_cache_memory_bytes", "gpu_memory_utilization")
    if more_kv and pre0 and pre1 is not None and pre1 >= pre0 * 0.9:
        notes.append(
            f"the {'simulator' if got is not None else 'model'} predicts preemptions will not fall: "
            f"the batch grows into the new memory and fills it again ({pre0:.2f}/s -> {pre1:.2f}/s)"
        )
    if not choice.moves_target:
        notes.append(
            "the simulator finds goodput will not move with this knob"
            if sim is not None
            else "the model predicts goodput will not move with this knob"
        )
    measured_g = goodput(model.measured, targets)
    g0 = got.before.goodput_tokens_per_second if got is not None else measured_g
    data["goodput_tokens_per_second"] = {"measured": measured_g, "now": g0, "predicted": choice.goodput}
    data["considered"] = [
        {"value": v, "goodput_tokens_per_second": g, "excluded": w} for v, g, w in choice.considered
    ]
    data["why"] = choice.reason
    return Refined(
        value=choice.value,
        predicted=data,
        note=" ".join(n[0].upper() + n[1:] + "." for n in notes),
        goodput=choice.goodput,
        goodput_now=g0,
        prediction=cp,
        decided_by=data["decided_by"],
        decided_why=data["decided_by_why"],
        sim=got,
        throughput_now=got.before.output_tokens_per_second
        if got is not None
        else model.measured.get("output_tokens_per_second"),
    )


# ------------------------------------------------------------------ closing the loop
def predict_change(
    obs: Observed,
    engine: EngineInfo,
    targets: Mapping[str, float],
    knob: str,
    value: Any,
    simulate: bool = True,
) -> dict[str, Any] | None:
    """The model's prediction for a knob change, from the window before it (None: the model
    cannot say: too little data, a knob it does not move, or an input it needs is unknown): the
    simulator's numbers where it would decide such a change (:func:`said_by_simulator`), else
    the closed form's (``predicted_by`` says which). ``simulate`` False: the closed form's (a
    replay's decisions before its answer are not simulated either)."""
    if knob not in pm.KNOBS:
        return None
    try:
        v = float(value)
        values = Values(Context(obs.window, engine, obs.seconds, dict(targets))).all()
        model = model_of(obs, engine, values)
        p = predict(model, knob, v, values)
    except (pm.InsufficientData, ValueError, TypeError):
        return None
    out = p.to_json()
    out["predicted_by"] = CLOSED_FORM
    if simulate and simulated.not_deciding(knob, p.current, v) is None:
        # the closed form's numbers stand where the simulator cannot decide, or the value cannot
        # be simulated (a request the cache cannot hold), or the window's numbers break it: the
        # change is still judged against a prediction
        with contextlib.suppress(ValueError, ArithmeticError):
            scorer, _ = deciding(simulated.Scorer(model, targets))
            if scorer is not None:
                said_by_simulator(out, scorer.simulated(knob, v))
    fit = model.fit
    speed = (
        fit.speed_of(model.rows, model.config.kv_cache_tokens, model.config.full_limit())
        if fit is not None
        else None
    )
    if fit is not None and speed:
        # the step time before the change, to tell afterwards whether the server kept its speed
        preempted = any(r.preemptions > 0 for r in model.rows)
        out["step_fit"] = {
            "a": fit.a, "k": fit.k, "c": fit.c, "x": fit.feature, "speed": speed,
            "preempted": preempted, "g": fit.piecewise_s,
        }  # fmt: skip
    return out


def steps_against(step_fit: Mapping[str, Any] | None, after: pm.Model) -> float | None:
    """How the after-window's steps compare with the step fit made before the change
    (``predict_change``'s ``step_fit``): their measured time over what it gives their own work,
    relative to the before-window's own (1: the server kept its speed; 1.2: its steps took 20%
    longer than before for such work, which the knob does not explain). None where either is
    unknown, and where either window preempted: a preempted request's prompt is computed again,
    work the engine's counters do not show, so the fit before the change prices steps that held
    hidden work (cpu-long-binds, preempting at cap 6, reads 0.80 against its cap-4 after-run)."""
    if not step_fit or step_fit.get("preempted") or any(r.preemptions > 0 for r in after.rows):
        return None
    try:
        fit = pm.StepTime(
            float(step_fit["a"]), float(step_fit["k"]), float(step_fit["c"]), str(step_fit["x"]), 0, None,
            piecewise_s=float(step_fit.get("g", 0.0)),
        )  # fmt: skip
        before = float(step_fit["speed"])
    except (KeyError, TypeError, ValueError):
        return None
    now = fit.speed_of(after.rows, after.config.kv_cache_tokens, after.config.full_limit())
    return now / before if now is not None and before > 0 else None


def speed_note(steps: float | None) -> str | None:
    """One sentence where the server's speed changed with the change (:func:`steps_against`
    beyond ``pm.SAME_SPEED``): what was measured after it is the knob and the server's speed
    together. None where the server kept its speed or it is unknown."""
    if steps is None or abs(steps - 1) <= pm.SAME_SPEED:
        return None
    how = f"{steps - 1:.0%} longer" if steps > 1 else f"{1 - steps:.0%} less time"
    return (
        f"The server's steps took {how} than the step time fitted before the change gives for "
        "their work (decodes, KV read, prefill): its speed changed with the restart, or that fit "
        "does not carry to the new batch; either way what was measured after it is not the knob's "
        "alone: measure again before acting on this verdict."
    )


def prediction_error(
    prediction: Mapping[str, Any], obs: Observed, engine: EngineInfo, targets: Mapping[str, float]
) -> dict[str, Any]:
    """The measured after-state of ``window`` set against ``prediction``: per metric the
    predicted and measured value and the error (predicted / measured - 1; None where either is
    unknown or zero)."""
    try:
        values = Values(Context(obs.window, engine, obs.seconds, dict(targets))).all()
        after = model_of(obs, engine, values)
    except pm.InsufficientData as e:
        return {**prediction, "measured_after": None, "error": None, "why": str(e)}
    measured: Mapping[str, float | None] = after.measured
    pred = prediction.get("predicted") or {}
    err: dict[str, float | None] = {}
    for k in pm.METRICS:
        p, m = pred.get(k), measured.get(k)
        err[k] = None if p is None or m is None or m == 0 else p / m - 1
    return {
        **prediction,
        "measured_after": {k: measured.get(k) for k in pm.METRICS},
        "error": err,
        "steps": steps_against(prediction.get("step_fit"), after),
    }
