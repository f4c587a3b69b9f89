"""Desired replicas where the sidecar and the fleet have what the model needs: an advisor's
window and engine, and the diagnosis of this cycle (its signal values and advised change).

The sizing itself is :mod:`advisor.predict.replicas` (pure); here it is fed: the model is
fitted to the same recent window the signals were computed over (``window_s``), and a server
that is warming up, just changed or cannot be read has no sizing (unknown, not a number).
"""

from __future__ import annotations

from collections.abc import Mapping

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


def instance_sizing(adv: Advisor, d: Diagnosis | None, current: int = 1, upto: int = 0) -> rp.Sizing | None:
    """What one server's model says, as one of ``current`` replicas sharing the load; None when
    it cannot say now."""
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
    window = adv.window.slice(d.at - cfg.window_s, d.at)
    try:
        model = scoring.model_of(window, adv.engine, values)
    except pm.InsufficientData:
        return None
    rec = d.recommendation if d.status == "advice" else None
    advised = (rec.knob, rec.predicted) if rec is not None else None
    return rp.size(model, values, cfg.targets, current, cfg.replicas_headroom, advised, upto)


DEPLOYMENT_LABELS = ("model_name", "namespace", "job", "service")
"""The labels that make servers one deployment in fleet mode (docs/autoscaling.md)."""


def deployment_key(server: Server) -> tuple[str, str, str, str]:
    """The servers of one deployment share their model and their ``namespace``, ``job`` and
    ``service`` labels (the Prometheus Operator's targets carry namespace and service; a static
    scrape config has job only)."""
    return (",".join(server.models), server.namespace, server.job, server.service)
