"""Desired replicas where the sidecar and the fleet have what the model needs: an advisor's
window and engine, and the diagnosis of this cycle (its signal values and advised change).

The sizing itself is :mod:`advisor.predict.replicas` (pure); here it is fed: the model is
fitted to the same recent window the signals were computed over (``window_s``), and a server
that is warming up, just changed or cannot be read has no sizing (unknown, not a number).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from advisor.diagnose.advise import Diagnosis
from advisor.drive.runner import Advisor
from advisor.outputs.state import Server
from advisor.predict import perfmodel as pm
from advisor.predict import replicas as rp
from advisor.predict import scoring


def is_idle(values: Mapping[str, float | None], min_requests: int) -> bool:
    """Nothing to serve in the window: few requests finished, none running or waiting (all
    known)."""
    running = values.get("requests_running_avg")
    if running is None:
        return False
    finished = values.get("requests_finished") or 0.0
    waiting = values.get("requests_waiting_avg") or 0.0
    return finished < min_requests and running < 1 and waiting < 1


SIZE_EVERY_S = 15.0
"""The model is fitted for a count at most this often (and at most every eighth of the window):
fitting costs as much as the rest of a cycle, a window changes little in a few seconds, and
autoscalers poll every 15 s or so. A change of the advice or of the replicas refits at once."""


def instance_sizing(adv: Advisor, d: Diagnosis | None, current: int = 1, upto: int = 0) -> rp.Sizing | None:
    """What one server's model says, as one of ``current`` replicas sharing the load; None when
    it cannot say now."""
    return Sizer()(adv, d, current, upto)


@dataclass
class Sizer:
    """One server's sizing, refitted at most every ``SIZE_EVERY_S`` (less for a short window)."""

    _last: tuple[float, tuple[Any, ...], rp.Sizing | None] | None = None

    def __call__(
        self, adv: Advisor, d: Diagnosis | None, current: int = 1, upto: int = 0
    ) -> rp.Sizing | None:
        cfg = adv.cfg
        if d is None or not adv.up or not d.signals:
            return None
        values = d.signals
        if (values.get("window_seconds") or 0.0) < cfg.min_window_s:
            return None
        if is_idle(values, cfg.min_requests):
            return rp.idle(current)
        if d.status == "insufficient-data":  # warming up, just changed, stale: its numbers are in flux
            return None
        rec = d.recommendation if d.status == "advice" else None
        advised = (rec.knob, rec.predicted) if rec is not None else None
        key = (current, rec.knob if rec else None, rec.proposed if rec else None)
        every = min(SIZE_EVERY_S, cfg.window_s / 8)
        if self._last is not None:
            t, k, s = self._last
            fits = s is None or len(s.curve) > upto or len(s.curve) >= rp.MAX_REPLICAS
            if k == key and 0 <= d.at - t < every and fits:
                return s
        obs = scoring.Observed.between(adv.intake, adv.window, d.at - cfg.window_s, d.at)
        try:
            model = scoring.model_of(obs, adv.engine, values, adv.recent)
        except pm.InsufficientData:
            sizing = None
        else:
            sizing = rp.size(model, values, cfg.targets, current, cfg.replicas_headroom, advised, upto)
        self._last = (d.at, key, sizing)
        return sizing


def desired_now(adv: Advisor, d: Diagnosis | None) -> rp.Desired | None:
    """The desired replicas of one diagnosis, as the demo's page and ``explain`` show them: the
    server as the only replica of its load, sized once at ``d`` (no scale-in hold has history
    yet); None where the model cannot say."""
    if d is None or not (d.signals.get("window_seconds") or 0.0) > 0:  # one page: no load to size
        return None
    return rp.Hold(adv.cfg.scale_in_hold_s).update(d.at, instance_sizing(adv, d, 1))


DEPLOYMENT_LABELS = ("model_name", "namespace", "job", "service")
"""The labels that make servers one deployment in fleet mode (docs/autoscaling.md)."""


def deployment_key(server: Server) -> tuple[str, str, str, str]:
    """The servers of one deployment share their model and their ``namespace``, ``job`` and
    ``service`` labels (the Prometheus Operator's targets carry namespace and service; a static
    scrape config has job only)."""
    return (",".join(server.models), server.namespace, server.job, server.service)
