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

from advisor.core import defaults as vllm_defaults
from advisor.core import knobs
from advisor.core import steps as knob_steps
from advisor.core.config import Config
from advisor.core.engine_json import to_json
from advisor.core.model import EngineInfo, Provenanced
from advisor.derive import trust
from advisor.derive.signals import CATALOG, Context, Values
from advisor.derive.window import Window
from advisor.diagnose.evaluate import DEFAULT_TARGETS, Evaluator, Finding, check
from advisor.diagnose.ruleset import KnobChoice, Rule
from advisor.predict import scoring

SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}
STATUSES = ("advice", "healthy", "inconclusive", "insufficient-data")
# the reason of an "inconclusive" that would be "healthy" if every rule could be checked
NOT_ALL_CHECKED = "no rule fired, but "


def no_rule_fired(d: Diagnosis) -> bool:
    """Healthy, or healthy but for rules whose inputs are unknown: no rule found anything."""
    return d.status == "healthy" or (d.status == "inconclusive" and d.reason.startswith(NOT_ALL_CHECKED))


# Changes that put more load on the KV cache: never advised while vLLM preempts.
RAISES_KV_PRESSURE = {("max_num_seqs", "increase"), ("max_num_batched_tokens", "increase")}


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

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reason": self.reason,
            "recommendation": self.recommendation.to_json() if self.recommendation else None,
            "findings": list(self.findings),
            "engine": self.engine,
            "context": self.context,
            "at": self.at,
            "signals": self.signals,
            "experiment": self.experiment,
        }


# ------------------------------------------------------------------ proposing a value
def _host_gpus(engine: EngineInfo, cfg: Config) -> int | None:
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
    host_gpus = _host_gpus(engine, cfg)
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
        ok, reason = knob_steps.applicable(choice.name, choice.direction, engine, host_gpus)
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
                limits=knob_steps.Limits.from_engine(engine, host_gpus),
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
class _Candidate:
    finding: Finding
    choice: KnobChoice
    current: Any
    proposed: Any
    source: str | None
    why_not: tuple[str, ...]


def _finding_json(f: Finding, extra: dict[str, Any] | None = None) -> dict[str, Any]:
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


def arbitrate(
    findings: list[Finding], values: Mapping[str, float | None], engine: EngineInfo, cfg: Config
) -> tuple[str, str, _Candidate | None, list[dict[str, Any]]]:
    """Choose exactly one knob among firing rules: (status, reason, candidate, findings json)."""
    out_findings: list[dict[str, Any]] = []
    candidates: list[_Candidate] = []
    stuck: list[str] = []
    preempting = (values.get("preemptions_per_second") or 0) > 0
    for f in findings:
        if f.state != "firing":
            out_findings.append(_finding_json(f))
            continue
        choice, cur, prop, src, why_not = resolve_choice(f.rule, values, engine, cfg)
        if choice is None:
            stuck.append(f"{f.rule.id} fired but no knob can move ({'; '.join(why_not)})")
            out_findings.append(_finding_json(f, {"blocked": why_not}))
            continue
        if preempting and (choice.name, choice.direction) in RAISES_KV_PRESSURE:
            out_findings.append(
                _finding_json(f, {"suppressed": "vLLM is preempting: no change that adds KV pressure"})
            )
            continue
        candidates.append(_Candidate(f, choice, cur, prop, src, tuple(why_not)))
        out_findings.append(
            _finding_json(
                f, {"knob": choice.name, "direction": choice.direction, "current": cur, "proposed": prop}
            )
        )
    if not candidates:
        if stuck:
            return "inconclusive", "; ".join(stuck), None, out_findings
        return "healthy", "no rule fired", None, out_findings

    candidates.sort(key=lambda c: _rank(c.finding.rule, cfg))
    best = candidates[0]
    # contradiction: the same knob pushed both ways
    for other in candidates[1:]:
        if other.choice.name == best.choice.name and _sign(other) != _sign(best):
            return (
                "inconclusive",
                f"{best.finding.rule.id} wants {best.choice.name} {best.choice.direction} but "
                f"{other.finding.rule.id} wants it {other.choice.direction}: the evidence contradicts itself",
                None,
                out_findings,
            )
    return "advice", f"{best.finding.rule.id}: {best.finding.rule.summary}", best, out_findings


def _rank(rule: Rule, cfg: Config) -> tuple[int, int, str]:
    sev = cfg.severity_overrides.get(rule.id) or rule.severity
    return (SEVERITY_RANK.get(sev, 9), -rule.priority, rule.id)


def building(findings: list[Finding], chosen: Rule | None, cfg: Config) -> list[Finding]:
    """Pending findings that matter: all of them when nothing was chosen, else those that
    outrank the chosen rule (they hold its advice back until they fire or fade)."""
    pending = [f for f in findings if f.state == "pending"]
    if chosen is None:
        return pending
    return [f for f in pending if _rank(f.rule, cfg) < _rank(chosen, cfg)]


def _sign(c: _Candidate) -> int:
    try:
        return 1 if float(c.proposed) > float(c.current) else -1
    except (TypeError, ValueError):
        return 0


# ------------------------------------------------------------------ the one entry point
def recommendation_of(c: _Candidate, values: Mapping[str, float | None], severity: str) -> Recommendation:
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


def significance(
    window: Window, values: Mapping[str, float | None], cfg: Config, now: float, last_change: float | None
) -> str | None:
    """Why no advice may be given now (idle, warming up, just changed, too little data), or None."""
    latest = window.latest
    if latest is None:
        return "no /metrics page read yet"
    if now - latest.t > cfg.stale_after_s:
        return f"the last good /metrics page is {now - latest.t:.0f}s old: vLLM is down or unreadable"
    span = values.get("window_seconds") or 0.0
    if span < cfg.min_window_s:
        return f"only {span:.0f}s of data (need {cfg.min_window_s:.0f}s)"
    restarts = [t for t in window.restart_times() if t >= now - cfg.window_s]
    if restarts and now - restarts[-1] < cfg.warmup_s:
        return f"the engine restarted {now - restarts[-1]:.0f}s ago: warming up"
    if last_change is not None and now - last_change < cfg.observe_after_change_s:
        left = cfg.observe_after_change_s - (now - last_change)
        return (
            f"a knob changed {now - last_change:.0f}s ago: observing for {left:.0f}s more before new advice"
        )
    finished = values.get("requests_finished") or 0.0
    running = values.get("requests_running_avg")
    waiting = values.get("requests_waiting_avg") or 0.0
    if finished < cfg.min_requests and (running or 0.0) < 1 and waiting < 1:
        if running is None:  # unknown is not zero
            return "cannot tell whether vLLM is idle: no vllm:num_requests_running in the data"
        return f"idle: {finished:.0f} requests finished in the window and none running"
    return None


def diagnose(
    window: Window,
    engine: EngineInfo,
    evaluator: Evaluator,
    cfg: Config,
    now: float | None = None,
    last_change: float | None = None,
) -> Diagnosis:
    """Signals over the recent window -> findings -> exactly one recommendation (or why not)."""
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
            not_now,
            None,
            tuple(_finding_json(f) for f in findings),
            eng,
            ctx,
            now,
            values,
        )
    # issue 23: an engine that stopped counting tokens while requests wait is stalled, a finding
    # of its own that no knob answers (derive/trust.py); never advice, never healthy
    stall = trust.stalled(window, cfg.window_s)
    if stall is not None:
        evaluator.reset()
        fj = tuple(_finding_json(f) for f in findings)
        return Diagnosis("inconclusive", stall.describe(), None, fj, eng, ctx, now, values)
    status, reason, best, fjson = arbitrate(findings, values, engine, cfg)

    def without_advice(status: str, reason: str) -> Diagnosis:
        return Diagnosis(status, reason, None, tuple(fjson), eng, ctx, now, values)

    if status == "healthy":
        unknown = [f for f in findings if f.state == "unknown"]
        if unknown and len(unknown) == len(findings):
            missing = sorted({m for f in unknown for m in f.missing})
            return without_advice(
                "insufficient-data", f"no rule could be checked: missing {', '.join(missing)}"
            )
    if status == "healthy":
        # a rule whose symptom holds (its first condition, by the rules' convention: preemptions,
        # a queue, a CPU-bound API server) and no other condition is false, but some other input
        # is unknown (a recording without the device's memory, say), might fire: not healthy,
        # say what is missing. A rule whose symptom itself is unknown (a multimodal rule on a
        # text-only server, the API server's CPU where vLLM stopped exporting it) shows nothing.
        # issue 23: readings of the window that could not be trusted (NaN, a duplicate series, a
        # counter that went down without a restart) are not read as calm
        untrusted = trust.unreadable(window, cfg.window_s)
        if untrusted is not None:
            return without_advice("inconclusive", NOT_ALL_CHECKED + untrusted)
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
    pending = building(findings, best.finding.rule if best is not None else None, cfg)
    if pending and status in ("healthy", "advice"):
        held = ", ".join(
            f"{f.rule.id} for {now - (f.since or now):.0f}s of {f.rule.for_s:.0f}s" for f in pending
        )
        return without_advice("inconclusive", f"evidence is building; conditions hold: {held}")
    rec = None
    if best is not None:
        sev = cfg.severity_overrides.get(best.finding.rule.id, best.finding.rule.severity)
        refined = by_prediction(best, window, engine, values, cfg)
        if refined is not None and refined.withdrawn:
            return without_advice("inconclusive", f"{best.finding.rule.id}: {refined.withdrawn}")
        if refined is not None and refined.value is not None:
            best = replace(best, proposed=refined.value)
        rec = recommendation_of(best, values, sev)
        if refined is not None and refined.predicted is not None:
            note = " ".join(x for x in (rec.note, refined.note) if x)
            rec = replace(rec, predicted=refined.predicted, note=note)
    return Diagnosis(status, reason, rec, tuple(fjson), eng, ctx, now, values)


def by_prediction(
    c: _Candidate, window: Window, engine: EngineInfo, values: Mapping[str, float | None], cfg: Config
) -> Any:
    """The advised knob's value chosen by the performance model (scoring.refine), or None."""

    limits = knob_steps.Limits.from_engine(engine, _host_gpus(engine, cfg))
    return scoring.refine(
        window,
        engine,
        values,
        cfg.targets,
        c.choice.name,
        c.choice.direction,
        c.current,
        c.proposed,
        limits,
        seconds=cfg.window_s,
    )


def provenanced_engine(values: Mapping[str, Any], source: str = "config") -> EngineInfo:
    """An EngineInfo from plain values (rule examples and tests)."""
    return EngineInfo({k: Provenanced(v, source) for k, v in values.items() if v is not None})
