"""A diagnosis as a view: every sentence and table ``explain`` writes, as plain data, for a
renderer that is not a terminal (the daemon's page, ``advisor/outputs/page.py``).

Nothing here words anything anew: each part comes from the helper of ``explain.py`` that the
text and markdown renderings use (the evidence's meaning, the Predicted table and its title,
"Left standing", "Also considered", the per-length table, the context line, the experiment and
the other findings), so that a sentence is written once and every rendering says the same.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from advisor.diagnose.advise import Diagnosis
from advisor.outputs import explain
from advisor.outputs import prediction as prediction_out
from advisor.predict.replicas import Desired


@dataclass(frozen=True)
class Table:
    title: str
    head: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: tuple[bool, ...] = ()  # per column: right-aligned numbers


@dataclass(frozen=True)
class Section:
    title: str
    body: str


@dataclass(frozen=True)
class DiagnosisView:
    status: str  # advice | healthy | inconclusive | insufficient-data
    reason: str
    change: str | None = None  # the one change, e.g. "--max-num-seqs 256 -> 192"
    change_source: str = ""  # " (current value from cmdline)"
    severity: str = ""
    rule: str = ""
    summary: str = ""
    note: str = ""
    evidence: Table | None = None
    latency: Table | None = None  # per request length, with the stat-logger plugin
    predicted: Table | None = None
    # which model decided the value, and the closed form's own numbers where the simulator's are
    # the table's (explain prints both under its Predicted table)
    decided: tuple[str, ...] = ()
    leaves: tuple[str, ...] = ()  # "Left standing after the change: ..."
    considered: tuple[str, ...] = ()  # "Also considered", one line per change weighed
    sections: tuple[Section, ...] = ()  # What, Why, What should move, Verify, Roll back
    context: str = ""
    experiment: str | None = None
    findings: tuple[str, ...] = ()  # the other rules that hold, wait or cannot move
    replicas: str | None = None


def view(d: Diagnosis, replicas: Desired | None = None) -> DiagnosisView:
    """The parts of ``d`` in the order the text rendering prints them."""
    title, rows = explain.latency_rows(d.context)
    latency = None
    if rows:
        heads = ("tokens", "requests", *(h for _, _, h in explain.LENGTH_COLUMNS))
        latency = Table(title, heads, tuple(rows), (False, *(True,) * (len(heads) - 1)))
    base = DiagnosisView(
        d.status,
        d.reason,
        latency=latency,
        context=explain._ctx_line(d.context),
        experiment=explain.experiment_line(d.experiment),
        findings=tuple(explain.finding_lines(d)),
        replicas=explain.replicas_line(replicas) if replicas is not None else None,
    )
    rec = d.recommendation
    if rec is None:
        return base
    evidence = Table(
        "Evidence",
        ("signal", "value", "meaning"),
        tuple(
            (e.signal, explain.fmt_value(e.signal, e.value, e.unit), explain._evidence_help(e, d.context))
            for e in rec.evidence
        ),
        (False, True, False),
    )
    predicted = None
    if rec.predicted:
        predicted = Table(
            explain.prediction_title(rec.predicted),
            ("metric", explain.MEASURED_STEADY, "predicted", "change"),
            tuple(explain.prediction_rows(rec.predicted)),
            (False, True, True, True),
        )
    return replace(
        base,
        change=rec.change,
        change_source=explain._current(rec),
        severity=rec.severity,
        rule=rec.rule,
        summary=rec.summary,
        note=rec.note,
        evidence=evidence,
        predicted=predicted,
        decided=tuple(prediction_out.said_by(rec.predicted or {})),
        leaves=(explain.leaves_line(rec),) if rec.leaves else (),
        considered=tuple(explain.considered_line(c) for c in rec.considered),
        sections=(
            Section("What", rec.what),
            Section("Why", rec.why),
            Section("What should move", rec.expect),
            Section("Verify", explain.verify_text(rec)),
            Section("Roll back", rec.rollback),
        ),
    )
