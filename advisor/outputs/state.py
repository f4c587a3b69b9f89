"""What the exporters show: the state of one advised server (:class:`ExportState`) and of a
fleet (:class:`FleetState`), replaced whole by the daemon after every cycle. Plain values;
the drive layer builds them, the outputs render them."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from advisor.diagnose.advise import Diagnosis
from advisor.diagnose.ruleset import Rule
from advisor.predict.replicas import Desired

_STATUS_RANK = {"advice": 0, "insufficient-data": 1, "inconclusive": 2, "healthy": 3}
_SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class ExportState:
    """What the exporter shows: replaced whole by the daemon after every cycle."""

    diagnosis: Diagnosis | None
    up: bool
    rules: tuple[Rule, ...]
    scrapes: dict[str, int] = field(default_factory=dict)
    log_lines: dict[str, int] = field(default_factory=dict)
    last_scrape_t: float | None = None
    last_scrape_duration_s: float | None = None
    knob_changes: int = 0
    experiment: dict[str, Any] | None = None
    built_at: float = field(default_factory=time.time)
    log_source_up: bool | None = None  # None: no log source configured
    log_source_restarts: int = 0
    log_skipped_lines: int = 0  # lines the log reader skipped when it fell behind its source
    log_skipped_bytes: int = 0
    several_servers: bool = False  # the URL reaches more than one engine (a load balancer)
    cycle_duration_s: float | None = None  # the daemon's last cycle (scrape, evaluate, publish)
    cycle_interval_s: float | None = None  # the time between cycle starts the daemon achieves
    replicas: Desired | None = None  # desired replicas of this server (sidecar); None: unknown
    # the ledger of judged experiments (None: this process keeps none)
    ledger_pending: int | None = None  # judged, not yet written (queued in memory, retried)
    ledger_write_failures: int = 0
    ledger_dropped: int = 0  # queue full, or a record no ledger can store
    ledger_error: str | None = None
    state_write_ok: bool | None = None  # STATE_DIR/diagnosis.json (None: not written yet)
    state_error: str | None = None  # why the state dir cannot be written (a full disk, a link)
    bad_samples: dict[str, int] = field(default_factory=dict)  # readings not read, by kind (all pages)
    page_skipped: dict[str, int] = field(default_factory=dict)  # the last page's samples not kept, by why


NOT_READY_GATES = (
    "no-data",
    "vllm-down",
    "stale",
    "window-too-short",
    "warming-up",
    "just-changed",
    "idle-unknown",
)
"""The gates (``advise.GATES``) under which the advice cannot be trusted: ``/readyz`` is 503.
Idle and sleeping are not among them: nothing to advise at no load is advice that holds."""


def readiness(st: ExportState) -> tuple[bool, dict[str, Any]]:
    """``/readyz``: whether the advice of ``st`` can be trusted now, and the JSON body saying
    why not (``why``: one word, ``reason``: the sentence). ``/healthz`` is the process's own
    liveness and answers 200 whatever this says."""
    d = st.diagnosis
    why: str | None = None
    reason = ""
    if d is None:
        why, reason = "starting", "no evaluation yet"
    elif not st.up and d.gate == "stale":  # no scrape completed for two intervals: a stalled cycle
        why, reason = "stale", d.reason if d.status == "insufficient-data" else "no scrape completed lately"
    elif not st.up:
        why, reason = "vllm-down", d.reason if d.gate == "vllm-down" else "vLLM cannot be read"
    elif st.several_servers:
        why, reason = "several-servers", d.reason
    elif d.status == "insufficient-data" and d.gate not in ("idle", "sleeping"):
        why, reason = (d.gate if d.gate in NOT_READY_GATES else "insufficient-data"), d.reason
    body: dict[str, Any] = {
        "ready": why is None,
        "why": why,
        "reason": reason or (d.reason if d is not None else ""),
        "status": d.status if d is not None else None,
        "vllm_up": st.up,
    }
    return why is None, body


@dataclass(frozen=True)
class AdviceSpan:
    """One piece of advice as it was given: from the cycle it first appeared to the one it was
    withdrawn or replaced (``ended`` None: still advised). The same advice is the same rule
    moving the same knob the same way from the same value; its proposed value may move with
    the window (``first_change`` keeps the first)."""

    began: float
    rule: str
    severity: str
    knob: str
    direction: str
    current: Any
    change: str
    ended: float | None = None
    end_reason: str = ""
    first_change: str = ""
    predicted: dict[str, Any] | None = None  # metric -> [measured, predicted] when advised
    withdrawn: int = 0  # times it was withdrawn for a moment and came back (one span)
    last_seen: float | None = None  # the last diagnosis that gave it

    def key(self) -> tuple[str, str, str, str]:
        return (self.rule, self.knob, self.direction, repr(self.current))

    def to_json(self) -> dict[str, Any]:
        return {
            "began": self.began,
            "ended": self.ended,
            "rule": self.rule,
            "severity": self.severity,
            "knob": self.knob,
            "direction": self.direction,
            "current": self.current,
            "change": self.change,
            "first_change": self.first_change,
            "end_reason": self.end_reason,
            "predicted": self.predicted,
            "withdrawn": self.withdrawn,
            "last_seen": self.last_seen,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> AdviceSpan:
        """Raises KeyError, TypeError or ValueError on a record that is not one."""
        ended, seen = d.get("ended"), d.get("last_seen")
        pred = d.get("predicted")
        return cls(
            began=float(d["began"]),
            rule=str(d["rule"]),
            severity=str(d.get("severity", "")),
            knob=str(d["knob"]),
            direction=str(d.get("direction", "")),
            current=d.get("current"),
            change=str(d["change"]),
            ended=None if ended is None else float(ended),
            end_reason=str(d.get("end_reason", "")),
            first_change=str(d.get("first_change", "")),
            predicted=dict(pred) if isinstance(pred, dict) else None,
            withdrawn=int(d.get("withdrawn", 0)),
            last_seen=None if seen is None else float(seen),
        )


@dataclass(frozen=True)
class History:
    """What ``/history`` shows: the judged experiments (ledger rows, newest first, as
    ``Ledger.list`` returns them) and the advice given before (newest first), each with where
    it is kept."""

    experiments: tuple[dict[str, Any], ...] = ()
    advice: tuple[AdviceSpan, ...] = ()
    experiments_kept: str = ""
    advice_kept: str = ""
    error: str | None = None  # the ledger could not be read


@dataclass(frozen=True)
class Server:
    """One advised server as discovered: its instance, job, models and engines."""

    instance: str
    job: str = ""
    models: tuple[str, ...] = ()
    engines: tuple[str, ...] = ()
    namespace: str = ""  # the Prometheus Operator's target labels, where present
    service: str = ""


@dataclass(frozen=True)
class Member:
    """What the exporter shows for one server."""

    server: Server
    state: ExportState


@dataclass(frozen=True)
class Deployment:
    """The servers of one model behind one load balancer (fleet mode), and the replicas they need."""

    model: str
    namespace: str
    job: str
    service: str
    instances: tuple[str, ...]
    up: int  # instances whose last scrape succeeded: the replicas serving now
    replicas: Desired | None = None

    def labels(self) -> dict[str, str]:
        return {
            "model_name": self.model,
            "namespace": self.namespace,
            "job": self.job,
            "service": self.service,
        }


@dataclass(frozen=True)
class FleetState:
    members: tuple[Member, ...] = ()
    prometheus_up: bool = False
    last_error: str | None = None
    cycle_seconds: float | None = None
    queries_last_cycle: int = 0
    cycles: int = 0
    at: float = 0.0
    range_s: float = 0.0  # how far back the last cycle read
    samples_last_cycle: int = 0
    deployments: tuple[Deployment, ...] = ()
    instances_dropped: int = 0  # servers behind the selector beyond the ones followed

    def worst_first(self) -> list[Member]:
        return sorted(self.members, key=lambda m: (rank(m.state.diagnosis), m.server.instance))

    def member(self, instance: str) -> Member | None:
        for m in self.members:
            if m.server.instance == instance:
                return m
        return None


def rank(d: Diagnosis | None) -> tuple[int, int]:
    """Worst first: advice (critical, warning, info), unreadable, inconclusive, healthy."""
    if d is None:
        return (1, 0)
    sev = _SEVERITY_RANK.get(d.recommendation.severity, 3) if d.recommendation is not None else 3
    return (_STATUS_RANK.get(d.status, 4), sev)
