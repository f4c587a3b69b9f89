"""From findings to one diagnosis: the significance gate, arbitration to exactly one
knob, abstention with a reason, and the concrete proposed value.

Statuses: ``advice`` (one recommendation), ``healthy`` (enough evidence, nothing to
change), ``inconclusive`` (evidence contradicts itself or no knob can move),
``insufficient-data`` (idle, warming up, just changed, server unreadable, too
little data).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from advisor.core import knobs
from advisor.core.config import Config
from advisor.core.engine_json import to_json
from advisor.core.model import EngineInfo, Provenanced
from advisor.core.units import fmt
from advisor.derive import trust
from advisor.derive.signals import CATALOG, Context, Values
from advisor.derive.window import Window
from advisor.diagnose import arbitration
from advisor.diagnose.arbitration import Candidate
from advisor.diagnose.evaluate import Evaluator
from advisor.predict import perfmodel as pm
from advisor.predict import scoring, simulated

STATUSES = ("advice", "healthy", "inconclusive", "insufficient-data")
# the reason of an "inconclusive" that would be "healthy" if every rule could be checked
NOT_ALL_CHECKED = "no rule fired, but "


def no_rule_fired(d: Diagnosis) -> bool:
    """Healthy, or healthy but for rules whose inputs are unknown: no rule found anything."""
    return d.status == "healthy" or (d.status == "inconclusive" and d.reason.startswith(NOT_ALL_CHECKED))


@dataclass(frozen=True)
class Evidence:
    signal: str
    value: float | None
    unit: str
    help: str

    def to_json(self) -> dict[str, Any]:
        return {"signal": self.signal, "value": self.value, "unit": self.unit, "help": self.help}


@dataclass(frozen=True)
class Recommendation:
    rule: str
    summary: str
    severity: str
    knob: str
    flag: str | None
    direction: str
    current: Any
    current_source: str | None
    proposed: Any
    change: str  # e.g. "--max-num-seqs 256 -> 128"
    evidence: tuple[Evidence, ...]
    what: str
    why: str
    expect: str
    verify: tuple[str, ...]
    rollback: str
    references: tuple[str, ...]
    note: str = ""
    predicted: dict[str, Any] | None = None  # the model's prediction of the change (scoring.refine)
    chosen_by: str = ""  # "prediction" or "priority" (the rules' order), and why, one sentence
    considered: tuple[dict[str, Any], ...] = ()  # the other changes weighed, with their predictions
    leaves: tuple[str, ...] = ()  # the target breaches the change is predicted to leave standing

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "summary": self.summary,
            "severity": self.severity,
            "knob": self.knob,
            "flag": self.flag,
            "direction": self.direction,
            "current": self.current,
            "current_source": self.current_source,
            "proposed": self.proposed,
            "change": self.change,
            "evidence": [e.to_json() for e in self.evidence],
            "what": self.what,
            "why": self.why,
            "expect": self.expect,
            "verify": list(self.verify),
            "rollback": self.rollback,
            "references": list(self.references),
            "note": self.note,
            "predicted": self.predicted,
            "chosen_by": self.chosen_by,
            "considered": list(self.considered),
            "leaves_breached": list(self.leaves),
        }


@dataclass(frozen=True)
class Diagnosis:
    status: str
    reason: str
    recommendation: Recommendation | None
    findings: tuple[dict[str, Any], ...]
    engine: dict[str, Any]
    context: dict[str, Any]
    at: float
    signals: dict[str, float | None] = field(default_factory=dict)
    experiment: dict[str, Any] | None = None
    gate: str | None = None  # why no advice may be given now, as a word (GATES); None: none held it

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reason": self.reason,
            "gate": self.gate,
            "recommendation": self.recommendation.to_json() if self.recommendation else None,
            "findings": list(self.findings),
            "engine": self.engine,
            "context": self.context,
            "at": self.at,
            "signals": self.signals,
            "experiment": self.experiment,
        }


# ------------------------------------------------------------------ proposing a value
# ------------------------------------------------------------------ the one entry point
def recommendation_of(c: Candidate, values: Mapping[str, float | None], severity: str) -> Recommendation:
    rule = c.finding.rule
    k = knobs.KNOBS.get(c.choice.name)
    flag = (k.flag or k.env) if k is not None else None
    if c.choice.name == "replicas":
        change = "add a replica (or raise data_parallel_size where GPUs allow)"
    else:
        change = f"{flag} {knobs.format_value(c.current)} -> {knobs.format_value(c.proposed)}"
        if (
            k is not None
            and k.unit == "bytes"
            and isinstance(c.current, int | float)
            and c.proposed is not None
        ):
            change += f" ({knobs.format_bytes(c.current)} -> {knobs.format_bytes(float(c.proposed))})"
    ev_names = list(
        dict.fromkeys([*rule.explain.get("evidence", []), *[ch.condition.signal for ch in c.finding.checks]])
    )
    evidence = tuple(
        Evidence(s, values.get(s), CATALOG[s].unit, CATALOG[s].help) for s in ev_names if s in CATALOG
    )
    note = c.choice.note
    if c.why_not:
        note = (note + " " if note else "") + "Skipped: " + "; ".join(c.why_not) + "."
    return Recommendation(
        rule=rule.id,
        summary=rule.summary,
        severity=severity,
        knob=c.choice.name,
        flag=flag,
        direction=c.choice.direction,
        current=c.current,
        current_source=c.source,
        proposed=c.proposed,
        change=change,
        evidence=evidence,
        what=str(rule.explain.get("what", "")).strip(),
        why=str(rule.explain.get("why", "")).strip(),
        expect=str(rule.explain.get("expect", "")).strip(),
        verify=tuple(rule.explain.get("verify", [])),
        rollback=str(rule.explain.get("rollback", "")).strip(),
        references=tuple(rule.explain.get("references", [])),
        note=note,
    )


def measurement_context(
    values: Mapping[str, float | None], engine: EngineInfo, window_s: float
) -> dict[str, Any]:
    return {
        "model": engine.get("served_model_name") or engine.get("model"),
        "vllm_version": engine.get("vllm_version"),
        "device": engine.get("device"),
        "gpu_count": engine.get("gpu_count"),
        "window_seconds": values.get("window_seconds") or window_s,
        "requests_per_second": values.get("requests_per_second"),
        "requests_finished": values.get("requests_finished"),
        "prompt_tokens_mean": values.get("prompt_tokens_mean"),
        "prompt_tokens_p50": values.get("prompt_tokens_p50"),
        "prompt_tokens_p95": values.get("prompt_tokens_p95"),
        "generation_tokens_mean": values.get("generation_tokens_mean"),
        "generation_tokens_p50": values.get("generation_tokens_p50"),
        "generation_tokens_p95": values.get("generation_tokens_p95"),
        "requests_running_avg": values.get("requests_running_avg"),
        "requests_waiting_avg": values.get("requests_waiting_avg"),
    }


def engine_json(engine: EngineInfo) -> dict[str, Any]:

    return to_json(engine)


GATES = {
    "no-data": "no page read yet, or none of the signals the rules need",
    "vllm-down": "vLLM cannot be read",
    "stale": "the last good page or evaluation is too old",
    "window-too-short": "less data than min_window",
    "warming-up": "the engine restarted less than warmup ago",
    "just-changed": "a knob changed: observing it before new advice",
    "idle-unknown": "no running gauge: idle or not cannot be told",
    "idle": "nothing to serve in the window",
    "sleeping": "the engine is in sleep mode (neither idle nor stalled)",
}
"""The reasons no advice may be given now, each as the word ``Diagnosis.gate`` holds."""


def significance(
    window: Window, values: Mapping[str, float | None], cfg: Config, now: float, last_change: float | None
) -> tuple[str, str] | None:
    """Why no advice may be given now (idle, warming up, just changed, too little data), as
    (the gate's word in GATES, the sentence), or None."""
    latest = window.latest
    if latest is None:
        return "no-data", "no /metrics page read yet"
    if now - latest.t > cfg.stale_after_s:
        return (
            "stale",
            f"the last good /metrics page is {now - latest.t:.0f}s old: vLLM is down or unreadable",
        )
    asleep = trust.sleeping(window)  # before "idle" and "stalled": a sleeping engine is neither
    if asleep is not None:
        return "sleeping", asleep
    span = values.get("window_seconds") or 0.0
    if span < cfg.min_window_s:
        return "window-too-short", f"only {span:.0f}s of data (need {cfg.min_window_s:.0f}s)"
    restarts = [t for t in window.restart_times() if t >= now - cfg.window_s]
    if restarts and now - restarts[-1] < cfg.warmup_s:
        return "warming-up", f"the engine restarted {now - restarts[-1]:.0f}s ago: warming up"
    if last_change is not None and now - last_change < cfg.observe_after_change_s:
        left = cfg.observe_after_change_s - (now - last_change)
        return (
            "just-changed",
            f"a knob changed {now - last_change:.0f}s ago: observing for {left:.0f}s more before new advice",
        )
    finished = values.get("requests_finished") or 0.0
    running = values.get("requests_running_avg")
    waiting = values.get("requests_waiting_avg") or 0.0
    if finished < cfg.min_requests and (running or 0.0) < 1 and waiting < 1:
        if running is None:  # unknown is not zero
            return (
                "idle-unknown",
                "cannot tell whether vLLM is idle: no vllm:num_requests_running in the data",
            )
        return "idle", f"idle: {finished:.0f} requests finished in the window and none running"
    return None


def diagnose(
    window: Window,
    engine: EngineInfo,
    evaluator: Evaluator,
    cfg: Config,
    now: float | None = None,
    last_change: float | None = None,
    observed: scoring.Observed | None = None,
    recent: simulated.Recent | None = None,
    standing: str | None = None,
) -> Diagnosis:
    """Signals over the recent window -> findings -> exactly one recommendation (or why not).
    ``observed``: the model's facts over the window (the runner's intake); None: taken from the
    window's pages once. ``recent``: the daemon's last decision's simulations, reused while the
    rules' states and the knobs stay the same (None: simulated afresh). ``standing``: the rule
    the last decision advised (None: it gave no advice): its change is withdrawn only where the
    model is sure it breaks a target (hysteresis, ``scoring._breaks``)."""
    now = window.now() if now is None else now
    values = Values(Context(window, engine, cfg.window_s, cfg.targets)).all()
    findings = evaluator.evaluate(values, now)
    ctx = measurement_context(values, engine, cfg.window_s)
    eng = engine_json(engine)
    not_now = significance(window, values, cfg, now, last_change)
    if not_now is not None:
        evaluator.reset()
        return Diagnosis(
            "insufficient-data",
            not_now[1],
            None,
            tuple(arbitration.finding_json(f) for f in findings),
            eng,
            ctx,
            now,
            values,
            gate=not_now[0],
        )
    # issue 23: an engine that stopped counting tokens while requests wait is stalled, a finding
    # of its own that no knob answers (derive/trust.py); never advice, never healthy
    stall = trust.stalled(window, cfg.window_s)
    if stall is not None:
        evaluator.reset()
        fj = tuple(arbitration.finding_json(f) for f in findings)
        return Diagnosis("inconclusive", stall.describe(), None, fj, eng, ctx, now, values)
    cands, stuck, fjson = arbitration.collect(findings, values, engine, cfg)

    def without_advice(status: str, reason: str) -> Diagnosis:
        return Diagnosis(status, reason, None, tuple(fjson), eng, ctx, now, values)

    breached = arbitration.breaches(values, cfg.targets)
    model = None
    if cands or breached:
        obs = observed if observed is not None else scoring.Observed.of_window(window, cfg.window_s)
        try:
            model = scoring.model_of(obs, engine, values, recent)
        except pm.InsufficientData:
            model = None
    # one scorer for the decision: every candidate of every rule simulated on the same requests
    # (lazy: nothing is simulated unless a candidate is scored; a candidate a new finding brings
    # is simulated on the same requests). The daemon's is reused for REUSE_S while today's knobs
    # and the targets stay (the load it replays is then up to that old)
    scorer = None
    if model is not None:
        key = (model.config, tuple(sorted(cfg.targets.items())))
        scorer = (recent or simulated.Recent()).scorer(model, cfg.targets, now, key)
    firing = arbitration.score(cands, model, values, engine, cfg, scorer=scorer, standing=standing)
    held: list[arbitration.Scored] = []
    # a breach no firing rule answers (none fires, or only a standing configuration finding such
    # as eager mode on a GPU): the changes the rules' other conditions held back are weighed too
    if breached and not arbitration.answers_breach(cands):
        hb, why = arbitration.held_back(findings, values, engine, cfg)
        held = arbitration.score(hb, model, values, engine, cfg, why, scorer, standing)
    decision = arbitration.decide(firing, held, cfg)
    if decision.inconclusive is not None:
        return without_advice("inconclusive", decision.inconclusive)
    chosen = decision.chosen
    if chosen is None:
        withdrawn = [s for s in firing if s.withdrawn]
        if withdrawn:
            w = withdrawn[0]
            return without_advice("inconclusive", f"{w.candidate.finding.rule.id}: {w.withdrawn}")
        if stuck:
            return without_advice("inconclusive", "; ".join(stuck))
        unknown = [f for f in findings if f.state == "unknown"]
        if unknown and len(unknown) == len(findings) and not breached:
            missing = sorted({m for f in unknown for m in f.missing})
            return replace(
                without_advice(
                    "insufficient-data", f"no rule could be checked: missing {', '.join(missing)}"
                ),
                gate="no-data",
            )
        # issue 23: readings of the window that could not be trusted (NaN, a duplicate series, a
        # counter that went down without a restart) are not read as calm
        untrusted = trust.unreadable(window, cfg.window_s)
        if breached:
            no_help = _no_help(breached, held, model) + (f"; {untrusted}" if untrusted else "")
            return without_advice("inconclusive", NOT_ALL_CHECKED + no_help)
        if untrusted is not None:
            return without_advice("inconclusive", NOT_ALL_CHECKED + untrusted)
        # a rule whose symptom holds (its first condition, by the rules' convention: preemptions,
        # a queue, a CPU-bound API server) and no other condition is false, but some other input
        # is unknown (a recording without the device's memory, say), might fire: not healthy,
        # say what is missing. A rule whose symptom itself is unknown (a multimodal rule on a
        # text-only server, the API server's CPU where vLLM stopped exporting it) shows nothing.
        blocked = [f for f in findings if f.state == "unknown" and f.checks and f.checks[0].ok]
        if blocked:
            return without_advice(
                "inconclusive",
                NOT_ALL_CHECKED
                + "; ".join(
                    f"{f.rule.id} could not be checked (missing {', '.join(f.missing)})" for f in blocked
                ),
            )
    # rules whose conditions hold but not yet for long enough: with no advice, the evidence is
    # building; with advice, a better-ranked one holds it back rather than flip to a lesser knob
    best_rule = chosen.candidate.finding.rule if chosen is not None else None
    pending = arbitration.building(findings, best_rule, cfg)
    if pending:
        held_for = ", ".join(
            f"{f.rule.id} for {now - (f.since or now):.0f}s of {f.rule.for_s:.0f}s" for f in pending
        )
        return without_advice("inconclusive", f"evidence is building; conditions hold: {held_for}")
    if chosen is None:
        return without_advice("healthy", "no rule fired")
    c = chosen.candidate
    sev = cfg.severity_overrides.get(c.finding.rule.id, c.finding.rule.severity)
    rec = recommendation_of(replace(c, proposed=chosen.value), values, sev)
    r = chosen.refined
    note = " ".join(x for x in (rec.note, r.note if r is not None else "", decision.reason) if x)
    rec = replace(
        rec,
        predicted=r.predicted if r is not None else None,
        note=note,
        chosen_by=decision.how,
        considered=tuple(arbitration.considered_json(s) for s in decision.considered),
        leaves=tuple(arbitration.left_standing(chosen, cfg.targets)),
    )
    reason = f"{c.finding.rule.id}: {c.finding.rule.summary}"
    if chosen.held_back is not None:
        reason = f"{'; '.join(breached)}: {reason}"
    return Diagnosis("advice", reason, rec, tuple(fjson), eng, ctx, now, values)


def _no_help(breached: list[str], held: list[arbitration.Scored], model: pm.Model | None) -> str:
    """Why a breach gets no advice: what was weighed and what the model said of it."""
    text = f"{'; '.join(breached)}"
    if model is None:
        return text + ", and the model cannot be fitted to this window: nothing is advised"
    if not held:
        return text + ", and no rule's symptom holds: nothing here points to a knob"
    parts = []
    for s in held:
        c = s.candidate
        what = (
            "a replica more"
            if c.choice.name == "replicas"
            else f"{c.choice.name} {knobs.format_value(c.current)} -> {knobs.format_value(s.value)}"
        )
        if s.withdrawn:
            parts.append(f"{what} ({s.withdrawn})")
        elif s.improvement is None or s.refined is None:
            parts.append(f"{what} (the model cannot predict it here)")
        elif s.cannot_tell:
            parts.append(
                f"{what} (goodput {fmt(s.refined.goodput, 'tok/s')}, now "
                f"{fmt(s.refined.goodput_now, 'tok/s')}: too few requests meet the targets to tell)"
            )
        else:
            parts.append(
                f"{what} (goodput {fmt(s.refined.goodput, 'tok/s')}, now {fmt(s.refined.goodput_now, 'tok/s')})"
            )
    # two rules may weigh the same change: it is said once
    return text + "; no change is predicted to help: " + "; ".join(dict.fromkeys(parts))


def provenanced_engine(values: Mapping[str, Any], source: str = "config") -> EngineInfo:
    """An EngineInfo from plain values (rule examples and tests)."""
    return EngineInfo({k: Provenanced(v, source) for k, v in values.items() if v is not None})
