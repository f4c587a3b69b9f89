"""Evaluate rules over signal values: conditions, gates and ``for:`` hold times.

Pure apart from the state needed for ``for:`` (when each rule's conditions first
held), which lives in :class:`Evaluator` and is advanced with an explicit time.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from advisor.diagnose.ruleset import Condition, Rule

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
}

DEFAULT_TARGETS = {
    "ttft_p95_seconds": 2.0,
    "itl_p95_seconds": 0.1,
}


@dataclass(frozen=True)
class Check:
    """One condition with the value it saw: ``ok`` is None when the signal is unknown."""

    condition: Condition
    value: float | None
    threshold: float | None
    ok: bool | None

    def to_json(self) -> dict[str, object]:
        return {
            "signal": self.condition.signal,
            "op": self.condition.op,
            "threshold": self.threshold,
            "value": self.value,
            "ok": self.ok,
        }


@dataclass(frozen=True)
class Finding:
    """A rule's state at one evaluation.

    state: ``firing`` (conditions held for ``for:``), ``pending`` (held, not yet long
    enough), ``inactive`` (a condition is false), ``unknown`` (a signal it needs is
    unknown), ``gated`` (conditions hold but the rule's gate does not).
    """

    rule: Rule
    state: str
    checks: tuple[Check, ...]
    gate: tuple[Check, ...] = ()
    since: float | None = None

    @property
    def missing(self) -> list[str]:
        return [c.condition.signal for c in (*self.checks, *self.gate) if c.ok is None]


def check(cond: Condition, values: Mapping[str, float | None], targets: Mapping[str, float]) -> Check:
    threshold: float | None
    if isinstance(cond.value, str):
        threshold = targets.get(cond.value.removeprefix("target:"))
    else:
        threshold = float(cond.value)
    v = values.get(cond.signal)
    if v is None or threshold is None:
        return Check(cond, v, threshold, None)
    return Check(cond, v, threshold, _OPS[cond.op](v, threshold))


def conditions_hold(
    rule: Rule, values: Mapping[str, float | None], targets: Mapping[str, float] | None = None
) -> tuple[bool | None, tuple[Check, ...], tuple[Check, ...]]:
    """(holds, checks, gate checks). ``holds`` is None when a needed signal is unknown.

    A false condition wins over an unknown one: a rule whose known evidence already
    rules it out is inactive, not "unknown"."""
    t = {**DEFAULT_TARGETS, **(targets or {})}
    checks = tuple(check(c, values, t) for c in rule.when)
    gate = tuple(check(c, values, t) for c in rule.gate)
    if any(c.ok is False for c in checks):
        return False, checks, gate
    if any(c.ok is None for c in checks):
        return None, checks, gate
    return True, checks, gate


@dataclass
class Evaluator:
    """Rules plus the ``for:`` state. Call :meth:`evaluate` once per cycle."""

    rules: list[Rule]
    targets: dict[str, float] = field(default_factory=dict)
    honor_for: bool = True  # False for one-shot diagnoses of a few pages (no time series to hold over)
    _since: dict[str, float] = field(default_factory=dict)

    def reset(self) -> None:
        """Forget hold times (after a restart of the engine or a gap in the data)."""
        self._since.clear()

    def evaluate(self, values: Mapping[str, float | None], now: float) -> list[Finding]:
        out = []
        for rule in self.rules:
            holds, checks, gate = conditions_hold(rule, values, self.targets)
            if holds is not True:
                self._since.pop(rule.id, None)
                out.append(Finding(rule, "unknown" if holds is None else "inactive", checks, gate))
                continue
            if any(g.ok is not True for g in gate):
                self._since.pop(rule.id, None)
                out.append(Finding(rule, "gated", checks, gate))
                continue
            since = self._since.setdefault(rule.id, now)
            state = "firing" if not self.honor_for or now - since >= rule.for_s else "pending"
            out.append(Finding(rule, state, checks, gate, since))
        return out
