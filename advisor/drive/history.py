"""What the daemon gave before: a bounded list of past advice, each with when it began and how
it ended (``/history``); and a judged experiment as the ledger's record.

:class:`AdviceHistory` follows the diagnoses as they are published. The sidecar daemon keeps it
in its state dir (``STATE_DIR/advice-history.json``, beside ``diagnosis.json`` and the ledger),
written when an advice begins or ends and at most once a minute while one stands, so that a
daemon restarted after a crash still shows what it advised; a replay, the demo and the fleet
daemon keep it in memory (the fleet daemon writes no state dir).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from advisor.core import jsonout, statefile
from advisor.core.model import EngineInfo
from advisor.diagnose.advise import Diagnosis, Recommendation
from advisor.outputs.state import AdviceSpan
from advisor.verify import live_experiment as lx
from advisor.verify.ledger import ExperimentRecord, LedgerError, record_from_mapping

MAX_ADVICE = 100  # past advice kept
MERGE_GAP_S = 15.0  # the same advice back within this long after it was withdrawn: one span
SAVE_EVERY_S = 60.0  # while an advice stands, its last-seen time is written this often
FILE = "advice-history.json"
PENDING_FILE = "experiment.json"  # the experiment being observed, as it would be recorded if cut short
PREDICTED_METRICS = (
    "output_tokens_per_second",
    "ttft_seconds_p95",
    "itl_seconds_p95",
    "preemptions_per_second",
)


def _predicted(rec: Recommendation) -> dict[str, Any] | None:
    pred = rec.predicted or {}
    meas, after = pred.get("measured") or {}, pred.get("predicted") or {}
    out = {m: [meas.get(m), after.get(m)] for m in PREDICTED_METRICS if after.get(m) is not None}
    return out or None


class AdviceHistory:
    """The advice given, oldest first in :attr:`spans`; at most ``limit`` kept. Not
    thread-safe: the daemon calls it under its lock."""

    def __init__(
        self,
        path: str | Path | None = None,
        limit: int = MAX_ADVICE,
        merge_gap_s: float = MERGE_GAP_S,
    ) -> None:
        self.path = Path(path) if path is not None else None
        self.limit = limit
        self.merge_gap_s = merge_gap_s
        self.spans: deque[AdviceSpan] = deque(maxlen=limit)
        self.dirty = False
        self._saved_at: float | None = None
        self.error: str | None = None  # the file could not be read or written

    # ---------------------------------------------------------------- following diagnoses
    def on_diagnosis(self, t: float, d: Diagnosis) -> None:
        self.observe(d)

    def observe(self, d: Diagnosis) -> None:
        """One published diagnosis: an advice begins, goes on, is replaced or ends."""
        t = d.at
        rec = d.recommendation if d.status == "advice" else None
        cur = self.standing
        if rec is None:
            if cur is not None:
                self._close(t, f"{d.status}: {d.reason}")
            return
        key = (rec.rule, rec.knob, rec.direction, repr(rec.current))
        if cur is not None and cur.key() == key:
            self.dirty |= cur.change != rec.change or cur.severity != rec.severity
            self.spans[-1] = replace(cur, change=rec.change, severity=rec.severity, last_seen=t)
            return
        if cur is not None:
            self._close(t, f"replaced by {rec.change} ({rec.rule})")
        last = self.spans[-1] if self.spans else None
        if (
            last is not None
            and last.key() == key
            and last.ended is not None
            and t - last.ended <= self.merge_gap_s
        ):
            self.spans[-1] = replace(
                last, ended=None, end_reason="", change=rec.change, withdrawn=last.withdrawn + 1, last_seen=t
            )
        else:
            self.spans.append(
                AdviceSpan(
                    began=t,
                    rule=rec.rule,
                    severity=rec.severity,
                    knob=rec.knob,
                    direction=rec.direction,
                    current=rec.current,
                    change=rec.change,
                    first_change=rec.change,
                    predicted=_predicted(rec),
                    last_seen=t,
                )
            )
        self.dirty = True

    def _close(self, t: float, reason: str) -> None:
        self.spans[-1] = replace(self.spans[-1], ended=t, end_reason=reason)
        self.dirty = True

    def close(self, t: float, reason: str) -> None:
        """End the standing advice, if any (the daemon stops)."""
        if self.spans and self.spans[-1].ended is None:
            self._close(t, reason)

    def newest_first(self) -> tuple[AdviceSpan, ...]:
        return tuple(reversed(self.spans))

    # ---------------------------------------------------------------- the state dir
    @property
    def standing(self) -> AdviceSpan | None:
        return self.spans[-1] if self.spans and self.spans[-1].ended is None else None

    def to_json(self) -> dict[str, Any]:
        return {"version": 1, "advice": [s.to_json() for s in self.spans]}

    def load(self) -> None:
        """Read the file, if there is one. Advice still open in it was cut short by a daemon that
        stopped without saying so: it ended at the last time it was seen. A file that cannot be
        read is named (``error``) and left as it is until the next write replaces it."""
        if self.path is None or not self.path.exists():
            return
        try:
            data = json.loads(statefile.read_text(self.path))
            items: Iterable[Mapping[str, Any]] = data["advice"]
            spans = [AdviceSpan.from_json(dict(x)) for x in items]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            self.error = f"cannot read {self.path}: {type(e).__name__}: {e}"
            return
        for s in spans[-self.limit :]:
            if s.ended is None:
                end = max(s.began, s.last_seen or s.began)
                s = replace(s, ended=end, end_reason="the daemon stopped; advised at least until then")
            self.spans.append(s)

    def save(self, now: float, force: bool = False) -> None:
        """Write the file when something changed (or, while an advice stands, once every
        ``SAVE_EVERY_S``). Raises OSError."""
        if self.path is None:
            return
        standing = self.standing is not None and (
            self._saved_at is None or now - self._saved_at >= SAVE_EVERY_S
        )
        if not (self.dirty or standing or force):
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        statefile.write_atomic(self.path, jsonout.dumps(self.to_json(), default=str))
        self.dirty = False
        self._saved_at = now
        self.error = None


def experiment_record(exp: lx.LiveExperiment, eng: EngineInfo) -> ExperimentRecord:
    """A judged experiment as the ledger keeps it (and ``/history`` shows it)."""
    j = exp.to_json()
    comp = j.get("comparison") or {}
    return ExperimentRecord(
        started_at=exp.after_start,
        ended_at=exp.ended_at,
        verdict=exp.verdict or "inconclusive",
        source="daemon",
        knob=j["knob"],
        flag=j["flag"],
        old_value=j["old"],
        new_value=j["new"],
        model=eng.get("served_model_name") or eng.get("model"),
        vllm_version=eng.get("vllm_version"),
        gpus=str(eng.get("gpu_count") or eng.get("device") or ""),
        load_profile=exp.load,
        buckets=list(comp.get("buckets", [])),
        reasons=list(exp.reasons),
        prediction=exp.prediction,
    )


def interrupted_record(exp: lx.LiveExperiment, eng: EngineInfo, at: float, how: str) -> ExperimentRecord:
    """An experiment still being observed, as the ledger keeps it when the daemon stops first
    (``how``: "stopped", "was killed or crashed"): inconclusive, saying why. The window before
    the change lived in the daemon's memory: a verdict cannot be made from what is left."""
    rec = experiment_record(exp, eng)
    seen = f"{exp.after_requests:.0f} of ~{exp.before_requests:.0f} requests seen after the change"
    why = (
        f"Interrupted: the daemon {how} while this experiment was being observed ({seen}). The "
        "window before the change was held in memory and is gone, so there is no verdict: "
        "make the change again to judge it."
    )
    return replace(rec, verdict="inconclusive", ended_at=at, reasons=[why])


class PendingExperiment:
    """``STATE_DIR/experiment.json``: the experiment being observed, written each cycle while it
    lasts (as :func:`interrupted_record` would record it) and removed once it is judged. A daemon
    that starts and finds it was stopped or killed mid-experiment: it records it as interrupted
    (never drops it silently)."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path is not None else None
        self.written = False

    def save(self, rec: ExperimentRecord, seen_at: float) -> None:
        """Raises OSError (a full disk, a link in its place)."""
        if self.path is None:
            return
        body = {"version": 1, "seen_at": seen_at, "record": asdict(rec)}
        statefile.write_atomic(self.path, jsonout.dumps(body, default=str))
        self.written = True

    def clear(self) -> None:
        """Raises OSError."""
        if self.path is None:
            return
        statefile.remove(self.path)
        self.written = False

    def load(self) -> ExperimentRecord | None:
        """The experiment a daemon before this one left pending, recorded as interrupted at the
        last time it was seen; None when there is none. Raises ValueError (naming the file) when
        the file is there and unreadable, OSError when it cannot be opened."""
        if self.path is None or not (self.path.exists() or self.path.is_symlink()):
            return None
        try:
            data = json.loads(statefile.read_text(self.path))
            rec = record_from_mapping(data["record"])
            seen = float(data["seen_at"])
        except (ValueError, KeyError, TypeError, LedgerError) as e:
            raise ValueError(f"cannot read {self.path}: {type(e).__name__}: {e}") from None
        return replace(rec, ended_at=seen)
