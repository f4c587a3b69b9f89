"""Arbitration: every firing rule proposes its knob and a concrete value (its first knob that
can move here); exactly one change is recommended. By prediction where the model can predict:
each candidate change is scored by the goodput the model predicts (the requests' tokens that meet
the TTFT and ITL targets) and the best wins; by the rules' order (severity, priority, id) where
it cannot, and to break ties. Prerequisites stay static: no change that adds KV pressure while
vLLM preempts, and one knob pushed both ways is a contradiction unless the model tells the two
apart. With a target breached and no rule firing, the changes that a rule's other conditions held
back (its symptom holds) are scored too: a condition that stands in for a prediction gives way
to the prediction where one can be made.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from advisor.core import defaults as vllm_defaults
from advisor.core import knobs
from advisor.core import steps as knob_steps
from advisor.core.config import Config
from advisor.core.model import EngineInfo
from advisor.core.units import fmt
from advisor.diagnose.evaluate import DEFAULT_TARGETS, Finding, check
from advisor.diagnose.ruleset import KnobChoice, Rule
from advisor.predict import perfmodel as pm
from advisor.predict import scoring, simulated

SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}
# Changes that put more load on the KV cache: never advised while vLLM preempts.
RAISES_KV_PRESSURE = {("max_num_seqs", "increase"), ("max_num_batched_tokens", "increase")}


def host_gpus(engine: EngineInfo, cfg: Config) -> int | None:
    """The GPUs this server could use: the configured count, else the host's, less those that
    another process holds (where the host probe saw which are idle)."""
    if cfg.host_gpus is not None:
        return cfg.host_gpus
    g, idle = engine.get("gpu_count"), engine.get("gpu_idle_count")
    if g is None:
        return None
    if idle is None:
        return int(g)
    used = 1
    for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        used *= int(engine.get(name) or 1)
    return min(int(g), used + int(idle))


def resolve_choice(
    rule: Rule, values: Mapping[str, float | None], engine: EngineInfo, cfg: Config
) -> tuple[KnobChoice | None, Any, Any, str | None, list[str]]:
    """The first knob of the rule that can move: (choice, current, proposed, source, why-nots)."""
    why_not: list[str] = []
    gpus = host_gpus(engine, cfg)
    targets = {**DEFAULT_TARGETS, **cfg.targets}
    for choice in rule.knobs:
        held = [c for c in (check(u, values, targets) for u in choice.unless) if c.ok]
        if held:
            h = held[0]
            why_not.append(
                f"{choice.name}: not while {h.condition.signal} is {h.value:.3g} "
                f"({h.condition.op} {h.threshold:g})"
            )
            continue
        ok, reason = knob_steps.applicable(choice.name, choice.direction, engine, gpus)
        if not ok:
            why_not.append(f"{choice.name}: {reason}")
            continue
        current, source = engine.get(choice.name), engine.source(choice.name)
        if current is None and choice.name != "replicas":
            d = vllm_defaults.default_for(choice.name, engine.get("vllm_version"), _hardware(engine))
            current, source = d.value, "default" if d.value is not None else None
        if choice.name == "replicas":
            return choice, None, None, None, why_not
        if current is None and choice.direction not in ("set", "enable", "disable"):
            why_not.append(
                f"{choice.name}: its current value is unknown (give --engine-config or run on the host)"
            )
            continue
        hint = values.get(choice.bound_signal) if choice.bound_signal else None
        try:
            proposed = knob_steps.propose(
                choice.name,
                current,
                choice.direction,
                choice.step or "",
                bound_hint=hint,
                limits=knob_steps.Limits.from_engine(engine, gpus),
            )
        except ValueError as e:
            why_not.append(f"{choice.name}: {e}")
            continue
        if proposed is None or proposed == current:
            why_not.append(
                f"{choice.name}: cannot move {choice.direction} from {knobs.format_value(current)}"
            )
            continue
        return choice, current, proposed, source, why_not
    return None, None, None, None, why_not


def _hardware(engine: EngineInfo) -> vllm_defaults.Hardware:
    device = str(engine.get("device") or "")
    if not device:
        return vllm_defaults.Hardware()
    if device.lower() == "cpu":
        return vllm_defaults.Hardware(device="cpu")
    mem = engine.get("gpu_memory_gib")
    return vllm_defaults.Hardware(
        device="gpu",
        gpu_name=device,
        gpu_memory_gib=float(mem) if mem is not None else None,
        max_model_len=engine.get("max_model_len"),
        enable_chunked_prefill=engine.get("enable_chunked_prefill"),
    )


# ------------------------------------------------------------------ arbitration
@dataclass(frozen=True)
class Candidate:
    finding: Finding
    choice: KnobChoice
    current: Any
    proposed: Any
    source: str | None
    why_not: tuple[str, ...]


def finding_json(f: Finding, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    d = {
        "rule": f.rule.id,
        "severity": f.rule.severity,
        "state": f.state,
        "summary": f.rule.summary,
        "checks": [c.to_json() for c in f.checks],
        "gate": [c.to_json() for c in f.gate],
        "missing": f.missing,
        "since": f.since,
    }
    if extra:
        d.update(extra)
    return d


def collect(
    findings: Sequence[Finding], values: Mapping[str, float | None], engine: EngineInfo, cfg: Config
) -> tuple[list[Candidate], list[str], list[dict[str, Any]]]:
    """The firing rules' candidate changes in the rules' order, why the others cannot move
    (``stuck``), and every finding as JSON."""
    out_findings: list[dict[str, Any]] = []
    candidates: list[Candidate] = []
    stuck: list[str] = []
    preempting = (values.get("preemptions_per_second") or 0) > 0
    for f in findings:
        if f.state != "firing":
            out_findings.append(finding_json(f))
            continue
        choice, cur, prop, src, why_not = resolve_choice(f.rule, values, engine, cfg)
        if choice is None:
            stuck.append(f"{f.rule.id} fired but no knob can move ({'; '.join(why_not)})")
            out_findings.append(finding_json(f, {"blocked": why_not}))
            continue
        if preempting and (choice.name, choice.direction) in RAISES_KV_PRESSURE:
            out_findings.append(
                finding_json(f, {"suppressed": "vLLM is preempting: no change that adds KV pressure"})
            )
            continue
        candidates.append(Candidate(f, choice, cur, prop, src, tuple(why_not)))
        out_findings.append(
            finding_json(
                f, {"knob": choice.name, "direction": choice.direction, "current": cur, "proposed": prop}
            )
        )
    candidates.sort(key=lambda c: rank(c.finding.rule, cfg))
    return candidates, stuck, out_findings


def contradiction(candidates: Sequence[Candidate]) -> tuple[Candidate, Candidate] | None:
    """The first pair of candidates that push one knob both ways (the first is the better ranked)."""
    for i, a in enumerate(candidates):
        for b in candidates[i + 1 :]:
            if a.choice.name == b.choice.name and _sign(a) != _sign(b):
                return a, b
    return None


def arbitrate(
    findings: list[Finding], values: Mapping[str, float | None], engine: EngineInfo, cfg: Config
) -> tuple[str, str, Candidate | None, list[dict[str, Any]]]:
    """Exactly one knob among firing rules by the rules' order alone (no prediction):
    (status, reason, candidate, findings json)."""
    candidates, stuck, out_findings = collect(findings, values, engine, cfg)
    if not candidates:
        if stuck:
            return "inconclusive", "; ".join(stuck), None, out_findings
        return "healthy", "no rule fired", None, out_findings
    pair = contradiction(candidates)
    if pair is not None:
        return "inconclusive", _contradicts(*pair), None, out_findings
    best = candidates[0]
    return "advice", f"{best.finding.rule.id}: {best.finding.rule.summary}", best, out_findings


def _contradicts(a: Candidate, b: Candidate) -> str:
    return (
        f"{a.finding.rule.id} wants {a.choice.name} {a.choice.direction} but "
        f"{b.finding.rule.id} wants it {b.choice.direction}: the evidence contradicts itself"
    )


# ------------------------------------------------------------------ by prediction
@dataclass(frozen=True)
class Scored:
    """A candidate change and what the model predicts of it (None: it cannot predict it here)."""

    candidate: Candidate
    refined: scoring.Refined | None
    held_back: str | None = None  # what held the rule back: a condition, or its for: (a breach's candidates)
    standing: bool = False  # the advice the last decision gave (hysteresis: see raises_goodput)

    @property
    def withdrawn(self) -> str | None:
        return self.refined.withdrawn if self.refined is not None else None

    @property
    def gain(self) -> float | None:
        """Predicted over measured goodput (None: not predicted)."""
        if self.refined is None or self.refined.withdrawn:
            return None
        return self.refined.gain

    @property
    def improvement(self) -> float | None:
        """The value's goodput less today's, as a share of today's throughput (a goodput near
        zero makes a ratio of goodputs meaningless): simulated where the simulator decided, else
        the closed form's against the measured; None: not predicted."""
        r = self.refined
        if r is None or r.withdrawn or r.goodput is None or r.goodput_now is None:
            return None
        thr = r.throughput_now
        if not thr:
            return None
        return (r.goodput - r.goodput_now) / thr

    @property
    def raises_goodput(self) -> bool:
        """Predicted to raise goodput by more than ``scoring.FLAT`` of the throughput
        (:attr:`improvement`): the output of a few requests more meeting the targets is the
        grain of a goodput counted per request, not a gain (a cap past the KV fit scored +7%
        on 16 of 300 simulated requests meeting a TTFT target, 17 after: one request). The
        standing advice (the last decision's) needs only to raise it at all: the grain is the
        hysteresis that keeps a gain sitting at 1% from giving and withdrawing the advice cycle
        after cycle (cpu-preempt-binds, 46 s in: +0.8% one cycle, advised again the next)."""
        return self.improvement is not None and self.improvement > (0.0 if self.standing else scoring.FLAT)

    @property
    def cannot_tell(self) -> bool:
        """Scored, but too few requests meet the targets, now and predicted (under
        ``scoring.MEASURABLE`` of the output) for goodput to tell this change from none."""
        r = self.refined
        if r is None or r.withdrawn or self.improvement is None or not r.throughput_now:
            return False
        return max(r.goodput or 0.0, r.goodput_now or 0.0) < scoring.MEASURABLE * r.throughput_now

    @property
    def value(self) -> Any:
        if self.refined is not None and self.refined.value is not None:
            return self.refined.value
        return self.candidate.proposed


@dataclass(frozen=True)
class Decision:
    """The one change arbitration recommends (or none, and why), and the others it weighed."""

    chosen: Scored | None
    how: str  # "prediction" | "priority" | ""
    reason: str  # why this change and not the others, one sentence (empty without a choice)
    considered: tuple[Scored, ...]  # the others, best first
    inconclusive: str | None = None  # a contradiction the model could not settle


def score(
    candidates: Sequence[Candidate],
    model: pm.Model | None,
    values: Mapping[str, float | None],
    engine: EngineInfo,
    cfg: Config,
    held_back: Mapping[str, str] | None = None,
    scorer: simulated.Scorer | None = None,
    standing: str | None = None,
) -> list[Scored]:
    """Each candidate's value chosen and predicted by the model (where it can): by simulated
    goodput where ``scorer`` can decide (one scorer for the whole decision: every candidate of
    every rule replays the same requests), else by the closed form's. ``standing``: the rule
    the last decision advised; its change is withdrawn only where a target is predicted broken
    beyond the model's error band (``scoring.refine_with``) or it is predicted not to raise
    goodput at all (``Scored.raises_goodput``)."""
    out = []
    limits = knob_steps.Limits.from_engine(engine, host_gpus(engine, cfg))
    for c in candidates:
        refined = None
        kept = c.finding.rule.id == standing
        if model is not None:
            refined = scoring.refine_with(
                model,
                values,
                cfg.targets,
                c.choice.name,
                c.choice.direction,
                c.current,
                c.proposed,
                limits,
                scorer,
                standing=kept,
            )
        out.append(Scored(c, refined, (held_back or {}).get(c.finding.rule.id), kept))
    return out


def decide(firing: Sequence[Scored], held: Sequence[Scored], cfg: Config) -> Decision:
    """Exactly one change: the best predicted goodput among those predicted to raise it
    (``Scored.raises_goodput``: the firing rules', and under a breach the held-back ones'),
    near-ties (within 1% of the throughput) to a rule whose conditions all hold, then to the
    standing advice (the last decision's: hysteresis), then to the better ranked rule; without such a prediction the firing rules' order decides. A change a
    condition held back is only ever chosen by prediction; a pending rule's (every condition
    holds, not yet for its ``for:``) is also chosen by the rules' order where goodput cannot tell
    (``Scored.cannot_tell``: too few requests meet the targets, now and predicted), as a firing
    rule's is: a server far past its targets is not left without advice because none of its
    requests would meet them either way."""
    flat = scoring.FLAT
    pool = list(firing)
    pair = contradiction([s.candidate for s in firing])
    if pair is not None:
        a, b = (next(s for s in firing if s.candidate is c) for c in pair)
        if a.improvement is None or b.improvement is None or abs(a.improvement - b.improvement) <= flat:
            return Decision(None, "", "", tuple(firing), inconclusive=_contradicts(*pair))
        loser = b if a.improvement > b.improvement else a  # the model tells the directions apart
        pool = [s for s in firing if s is not loser]
    usable = [s for s in pool if not s.withdrawn]
    improving = [s for s in (*usable, *held) if s.raises_goodput]
    chosen: Scored | None = None
    how = ""
    if improving:
        best = max(s.improvement or 0.0 for s in improving)
        near = [s for s in improving if (s.improvement or 0.0) >= best - flat]
        # a rule whose conditions all hold (firing, pending) before one a condition held back;
        # then the standing advice (a challenger must beat it by more than the grain), then rank
        chosen = min(
            near, key=lambda s: (_held_by_a_condition(s), not s.standing, rank(s.candidate.finding.rule, cfg))
        )
        how = "prediction"
    elif usable:
        chosen = usable[0]  # the rules' order (severity, priority, id)
        how = "priority"
    else:
        pending = [s for s in held if s.candidate.finding.state == "pending" and s.cannot_tell]
        if pending:
            chosen = min(pending, key=lambda s: rank(s.candidate.finding.rule, cfg))
            how = "priority"
    others = [s for s in (*firing, *held) if s is not chosen]
    others.sort(key=lambda s: (-(s.improvement or -math.inf), rank(s.candidate.finding.rule, cfg)))
    return Decision(chosen, how, _why(chosen, how, others), tuple(others))


def _held_by_a_condition(s: Scored) -> bool:
    return s.held_back is not None and s.candidate.finding.state != "pending"


def _why(chosen: Scored | None, how: str, others: Sequence[Scored]) -> str:
    """Why this change and not the others (nothing to say when it was the only one)."""
    if chosen is None or (not others and chosen.held_back is None):
        return ""
    rule = chosen.candidate.finding.rule.id
    if how == "prediction":
        g = chosen.refined.goodput if chosen.refined is not None else None
        g0 = chosen.refined.goodput_now if chosen.refined is not None else None
        text = f"Chosen by prediction ({_decided(chosen.refined)}): goodput {fmt(g, 'tok/s')} (now {fmt(g0, 'tok/s')})"
        rivals = [s for s in others if s.improvement is not None]
        if rivals:
            r = rivals[0]
            text += (
                f", the best of {len(rivals) + 1} changes scored "
                f"(next: {r.candidate.finding.rule.id}, {r.candidate.choice.name} "
                f"{knobs.format_value(r.value)}, {fmt(r.refined.goodput if r.refined else None, 'tok/s')})"
            )
        if chosen.held_back:
            text += f"; {rule} did not fire ({chosen.held_back} held it back), the prediction decides"
        return text + "."
    unscored = [s for s in (chosen, *others) if s.improvement is None]
    if chosen.improvement is None:
        return f"Chosen by the rules' order: the model cannot predict {chosen.candidate.choice.name} here" + (
            "." if not others else f" ({len(unscored)} of {len(others) + 1} changes unpredicted)."
        )
    scored = [s for s in (chosen, *others) if s.improvement is not None and s.refined is not None]
    best = max(scored, key=lambda s: s.improvement or 0.0)
    ref = best.refined
    assert ref is not None  # scored above
    thr = ref.throughput_now
    what = (
        f"best: {best.candidate.choice.name} {knobs.format_value(best.value)}, goodput "
        f"{fmt(ref.goodput, 'tok/s')}, now {fmt(ref.goodput_now, 'tok/s')}, of {fmt(thr, 'tok/s')}; "
        f"{_decided(ref)}"
    )
    if best.cannot_tell:
        pending = (
            f"; {rule} has not fired yet ({chosen.held_back}), every condition holds"
            if chosen.held_back
            else ""
        )
        return (
            f"Chosen by the rules' order: under {scoring.MEASURABLE:.0%} of the output meets the targets, "
            f"now or predicted ({what}): too few requests for goodput to tell the changes apart{pending}."
        )
    return (
        f"Chosen by the rules' order: no change is predicted to raise goodput by more than "
        f"{scoring.FLAT:.0%} of the output ({what})."
    )


STANDING_CATEGORIES = frozenset({"cuda-graphs"})
"""Rules that name a standing configuration finding (eager mode on a GPU, a capture size below
the batch) rather than the cause of a breached target: they are advised when nothing else is,
but they do not stop a breach's held-back changes from being weighed (a real H200 run under
--enforce-eager with TTFT far over target: the budget change predicted to help stays the advice)."""


def answers_breach(candidates: Sequence[Candidate]) -> bool:
    """Whether a firing rule's change answers a breached target (see STANDING_CATEGORIES)."""
    return any(c.finding.rule.category not in STANDING_CATEGORIES for c in candidates)


def held_back(
    findings: Sequence[Finding], values: Mapping[str, float | None], engine: EngineInfo, cfg: Config
) -> tuple[list[Candidate], dict[str, str]]:
    """The changes of the rules whose symptom (their first condition) holds but that did not
    fire, because another condition did not hold or is unknown, or not yet for the rule's
    ``for:`` (pending): under a target breach they are scored like any other. Returns the
    candidates and, per rule, what held it back."""
    out: list[Candidate] = []
    why: dict[str, str] = {}
    preempting = (values.get("preemptions_per_second") or 0) > 0
    for f in findings:
        if f.state not in ("inactive", "unknown", "pending") or not f.checks or f.checks[0].ok is not True:
            continue
        blocker = next((c for c in f.checks[1:] if c.ok is not True), None)
        if blocker is None and f.state != "pending":
            continue
        choice, cur, prop, src, why_not = resolve_choice(f.rule, values, engine, cfg)
        if choice is None or (preempting and (choice.name, choice.direction) in RAISES_KV_PRESSURE):
            continue
        out.append(Candidate(f, choice, cur, prop, src, tuple(why_not)))
        if blocker is None:  # every condition holds, not yet for the rule's for:
            why[f.rule.id] = f"for: {f.rule.for_s:g}s (pending)"
            continue
        v = "unknown" if blocker.value is None else f"{blocker.value:.3g}"
        why[f.rule.id] = (
            f"{blocker.condition.signal} {blocker.condition.op} {blocker.threshold:g} (it is {v})"
            if blocker.threshold is not None
            else f"{blocker.condition.signal} (unknown)"
        )
    out.sort(key=lambda c: rank(c.finding.rule, cfg))
    return out, why


BREACH_METRICS = (
    ("ttft_seconds_p95", "ttft_p95_seconds", "TTFT p95"),
    ("itl_seconds_p95", "itl_p95_seconds", "ITL p95"),
)


def breaches(values: Mapping[str, float | None], targets: Mapping[str, float]) -> list[str]:
    """The latency targets the window breaches, as phrases ("TTFT p95 16.6 s over its 2.00 s
    target")."""
    out = []
    t = {**DEFAULT_TARGETS, **targets}
    for signal, target, label in BREACH_METRICS:
        v, lim = values.get(signal), t.get(target)
        if v is not None and lim is not None and v > lim:
            out.append(f"{label} {fmt(v, 's')} over its {fmt(lim, 's')} target")
    return out


def _decided(r: scoring.Refined | None) -> str:
    """What decided a change's goodput, in words."""
    if r is not None and r.decided_by == scoring.SIMULATOR:
        return "simulated per request"
    why = r.decided_why if r is not None else None
    return "closed form" + (f"; not simulated: {why}" if why else "")


def left_standing(chosen: Scored, targets: Mapping[str, float]) -> list[str]:
    """The target breaches the chosen change is predicted to leave (the simulated p95s where the
    simulator decided: TPOT p95 for the ITL target; else the closed form's). The simulated p95s
    are the simulated requests' own, as the target checks and goodput count them, not the
    Predicted table's measured x change: the line says so."""
    r = chosen.refined
    if r is None or (r.prediction is None and r.sim is None):
        return []
    out = []
    t = {**DEFAULT_TARGETS, **targets}
    p95 = r.predicted_p95
    for metric, target, label in BREACH_METRICS:
        v, lim = p95.get(metric), t.get(target)
        how = "predicted"
        if r.sim is not None:  # TPOT p95 against the ITL target, as the simulated goodput counts it
            label, how = {"ITL p95": "TPOT p95"}.get(label, label), "of the simulated requests"
        if v is not None and lim is not None and v > lim:
            out.append(f"{label} {how} {fmt(v, 's')}, over its {fmt(lim, 's')} target")
    return out


def considered_json(s: Scored) -> dict[str, Any]:
    """A change arbitration weighed and did not choose, with what the model that decided it
    predicted of it."""
    c, r = s.candidate, s.refined
    pred = ((r.predicted or {}).get("predicted") or {}) if r is not None else {}
    if s.withdrawn:
        why_not = f"withdrawn: {s.withdrawn}"
    elif s.improvement is None or r is None:
        why_not = "the model cannot predict this change here"
    else:
        why_not = f"predicted goodput {fmt(r.goodput, 'tok/s')} (now {fmt(r.goodput_now, 'tok/s')})"
    return {
        "rule": c.finding.rule.id,
        "knob": c.choice.name,
        "direction": c.choice.direction,
        "current": c.current,
        "proposed": s.value,
        "held_back": s.held_back,
        "goodput_tokens_per_second": None if r is None else r.goodput,
        "goodput_change": None if s.gain is None else s.gain - 1,
        "goodput_improvement": s.improvement,  # predicted less measured goodput over the throughput
        "decided_by": None if r is None else r.decided_by,
        "predicted": {
            k: pred.get(k) for k in ("output_tokens_per_second", "ttft_seconds_p95", "itl_seconds_p95")
        }
        if pred
        else None,
        "why_not": why_not,
    }


def rank(rule: Rule, cfg: Config) -> tuple[int, int, str]:
    sev = cfg.severity_overrides.get(rule.id) or rule.severity
    return (SEVERITY_RANK.get(sev, 9), -rule.priority, rule.id)


def building(findings: list[Finding], chosen: Rule | None, cfg: Config) -> list[Finding]:
    """Pending findings that matter: all of them when nothing was chosen, else those that
    outrank the chosen rule (they hold its advice back until they fire or fade)."""
    pending = [f for f in findings if f.state == "pending"]
    if chosen is None:
        return pending
    return [f for f in pending if rank(f.rule, cfg) < rank(chosen, cfg)]


def _sign(c: Candidate) -> int:
    try:
        return 1 if float(c.proposed) > float(c.current) else -1
    except (TypeError, ValueError):
        return 0
