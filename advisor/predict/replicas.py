"""How many replicas of a server meet the latency targets, from the performance model. Pure.

Replicas behind a load balancer are what the model already predicts as data parallelism at the
server level: copies of the engine, each with its own KV cache and scheduler, each offered an
even share of the load (:mod:`advisor.predict.perfmodel`). A server fitted while it is one of
``current`` replicas carries ``1 / current`` of the deployment's load; at ``r`` replicas each
carries ``current / r`` of what it carries now.

- **Needed**: the smallest count whose predicted TTFT p95 and ITL p95 meet the targets
  (config ``targets``) with the load raised by ``headroom`` (default 1.2: 20% more load than
  observed). Headroom on the load, not on the latency: a new vLLM replica takes minutes to start
  (weights, CUDA graphs), and near saturation latency climbs so steeply that 20% off a latency
  target is only a few percent of load; 20% is also the model's typical error on throughput
  (docs/prediction.md). Where the model measured no queue, a count whose batch cannot hold the
  load it would be offered counts as a breach: the model predicts a queue's length only from a
  queue it has seen.
- **Knob first**: when the diagnosis advises a per-server knob and the model predicts that
  change meets both targets (at the observed load), the count stays at ``current``: one change at
  a time, the cheaper one first. Where the scheduler simulator decided the advice, "meets" is
  counted per request: 95% of the simulated requests meet every target (goodput's test).
- The curve of counts stays the closed form's: up to 64 counts per cycle are too many to
  simulate (each a replay of the window's load), and the count is a bound on the load, not a
  choice between knobs.
- **Replicas cannot meet them** (a prefill longer than the TTFT target, a step slower than the ITL
  target at any batch): the smallest count at which the batch holds the whole load (nothing
  queues; beyond it more replicas only make each batch smaller), else ``MAX_REPLICAS``.
- **A count past where nothing queues** says so in its reason, with what is predicted there:
  out there the curve is the step time of a shrinking batch, nearly flat where the latency is
  prefill and the API server's time, and a floor a hair under a target puts the count far out
  (docs/autoscaling.md, Limits).
- **Hysteresis** (:class:`Hold`): the desired count is the largest count needed over the last
  ``hold_s`` (default 5 minutes): a breach scales out at once, a lower count is desired only
  once every prediction for ``hold_s`` found it enough; noise that moves the need up and down
  holds the higher count. Unknown (no model) is never a number: the count needed is dropped, and
  with nothing known for ``hold_s`` there is no desired count.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from advisor.core.units import fmt
from advisor.predict import perfmodel as pm

HEADROOM = 1.2  # the load the count must carry, relative to the observed one
SCALE_IN_HOLD_S = 300.0  # a lower count is desired only after this long found enough
MAX_REPLICAS = 64  # the largest count considered

TARGETS = (
    ("ttft_seconds_p95", "ttft_p95_seconds", "TTFT p95"),
    ("itl_seconds_p95", "itl_p95_seconds", "ITL p95"),
)


@dataclass(frozen=True)
class Point:
    """The predicted p95 latencies at ``replicas`` under the observed load (None: unknown)."""

    replicas: int
    ttft_p95: float | None
    itl_p95: float | None


@dataclass(frozen=True)
class Sizing:
    """The replica count one server's model (or a deployment's servers') predicts, before the
    hysteresis. ``curve``: predicted latencies at the observed load for 1..len(curve) replicas."""

    current: int
    needed: int
    meets_targets: bool  # False: no count up to MAX_REPLICAS meets them (needed: where nothing queues)
    knob_first: bool  # the advised knob is predicted to meet the targets: needed == current
    reason: str
    curve: tuple[Point, ...] = ()
    confidence: float | None = None

    def at(self, replicas: int) -> Point | None:
        if 1 <= replicas <= len(self.curve):
            return self.curve[replicas - 1]
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "current": self.current,
            "needed": self.needed,
            "meets_targets": self.meets_targets,
            "knob_first": self.knob_first,
            "reason": self.reason,
            "confidence": self.confidence,
        }


def _as_share_of(model: pm.Model, copies: float) -> pm.Model:
    """The model as one of ``copies`` equal engines' worth of load: what predicting
    ``data_parallel_size`` then does is split that whole load over the engines asked for (so a
    count below the current one, or a load above the observed one, is a count the model accepts:
    its data parallelism is at least 1)."""
    c = model.config
    return replace(model, config=replace(c, data_parallel_size=c.data_parallel_size * copies))


def predict_at(
    model: pm.Model,
    replicas: int,
    current: int = 1,
    load: float = 1.0,
    queue_share: float | None = None,
) -> pm.Prediction:
    """The model's steady state with the load of ``current`` servers like this one, times
    ``load``, spread over ``replicas`` of them (per server; rates scaled to ``replicas /
    current`` of this server's)."""
    engines = model.config.data_parallel_size
    return pm.predict(
        _as_share_of(model, current * load), "data_parallel_size", engines * replicas, queue_share
    )


def _point(
    model: pm.Model, replicas: int, current: int, load: float, queue_share: float | None
) -> tuple[Point, pm.Prediction]:
    p = predict_at(model, replicas, current, load, queue_share)
    return Point(replicas, p.predicted.get("ttft_seconds_p95"), p.predicted.get("itl_seconds_p95")), p


def _known_targets(targets: Mapping[str, float]) -> list[tuple[str, str, str, float]]:
    out = []
    for metric, name, label in TARGETS:
        t = targets.get(name)
        if t is not None and t > 0:
            out.append((metric, name, label, float(t)))
    return out


def _breach(p: pm.Prediction, targets: Sequence[tuple[str, str, str, float]], saturates: bool) -> str | None:
    """Why a predicted state does not meet the targets (None: it does); "unknown" when a target's
    latency cannot be predicted."""
    for metric, _, label, t in targets:
        v = p.predicted.get(metric)
        if v is None:
            return "unknown"
        if v > t:
            return f"{label} {fmt(v, 's')} > {fmt(t, 's')}"
    if saturates:
        return f"the batch cannot hold the load ({p.binding_after} binds)"
    return None


MEETS_SHARE = 0.95  # the targets are p95s: a change meets them when 95% of its requests meet every one


def knob_meets_targets(predicted: Mapping[str, Any] | None, targets: Mapping[str, float]) -> bool:
    """Whether an advised change's prediction (``Prediction.to_json()``, with what decided it)
    meets every latency target (all of them known): where the scheduler simulator decided, per
    request (at least ``MEETS_SHARE`` of the simulated requests meet every target, as goodput
    counts them); else the closed form's p95s, each against its target."""
    if not predicted:
        return False
    after = predicted.get("predicted") or {}
    known = _known_targets(targets)
    if not known:
        return False
    sim = predicted.get("simulated")
    if predicted.get("decided_by") == "simulator" and isinstance(sim, Mapping):
        share = ((sim.get("after") or {}).get("share_meeting") or {}).get("all")
        return isinstance(share, int | float) and not math.isnan(share) and share >= MEETS_SHARE
    for metric, _, _, t in known:
        v = after.get(metric)
        if not isinstance(v, int | float) or math.isnan(v) or v > t:
            return False
    return True


def size(
    model: pm.Model,
    values: Mapping[str, float | None],
    targets: Mapping[str, float],
    current: int = 1,
    headroom: float = HEADROOM,
    advised: tuple[str, Mapping[str, Any] | None] | None = None,
    upto: int = 0,
    max_replicas: int = MAX_REPLICAS,
) -> Sizing | None:
    """The replicas ``model`` predicts meet ``targets`` at the observed load times ``headroom``;
    ``current``: the replicas sharing the load now (this server one of them). ``advised``: the
    diagnosis's knob and its prediction (JSON), if any. The curve covers at least ``upto``
    replicas. None when no target is set or no latency can be predicted."""
    known = _known_targets(targets)
    if not known:
        return None
    current = max(1, int(current))
    queue_share = values.get("queue_share_of_ttft")
    needed: int | None = None
    breaches: dict[int, str] = {}
    preds: dict[int, pm.Prediction] = {}
    unqueued: int | None = None  # the smallest count at which the batch holds the whole load
    for r in range(1, max_replicas + 1):
        _, p = _point(model, r, current, headroom, queue_share)
        preds[r] = p
        saturates = not model.queued and p.binding_after != "load" and headroom * current / r > 1.0 + 1e-9
        if unqueued is None and p.binding_after == "load" and not saturates:
            unqueued = r
        why = _breach(p, known, saturates)
        if why == "unknown":
            return None
        if why is None:
            needed = r
            break
        breaches[r] = why
    meets = needed is not None
    if needed is None:
        # no count meets them: the smallest at which nothing queues (beyond it more replicas only
        # make each batch smaller), else the most considered
        needed = unqueued if unqueued is not None else max_replicas
    knob_first = False
    conf = preds[needed].confidence
    if advised is not None and advised[0] != "replicas" and knob_meets_targets(advised[1], targets):
        knob_first, needed, meets = True, current, True
    top = min(max_replicas, max(needed, current, upto) + 1)
    curve = tuple(_point(model, r, current, 1.0, queue_share)[0] for r in range(1, top + 1))
    wanted = " and ".join(f"{label} <= {fmt(t, 's')}" for _, _, label, t in known)
    if knob_first:
        reason = (
            f"the advised {advised[0] if advised else 'knob'} is predicted to meet {wanted}: "
            f"change it first ({current} replica{'s' if current != 1 else ''} kept)"
        )
    elif meets:
        reason = f"{needed} predicted to meet {wanted} at {headroom:g}x the observed load"
        if needed > 1:
            reason += f" ({needed - 1}: {breaches[needed - 1]})"
        if unqueued is not None and needed > unqueued:
            # past where nothing queues the curve is the step time of a shrinking batch, nearly
            # flat where the latency is prefill and the API server's: a count out there rests on
            # small differences of the model's (docs/autoscaling.md, Limits)
            reason += (
                f"; nothing queues from {unqueued} on, where more replicas only shrink each batch "
                f"({unqueued}: {breaches[unqueued]})"
            )
    else:
        reason = (
            f"no count up to {max_replicas} is predicted to meet {wanted} ({needed}: {breaches.get(needed, '')}); "
            + (
                f"at {needed} nothing queues: more replicas would not help"
                if needed < max_replicas
                else f"{needed}, the most considered"
            )
        )
    return Sizing(current, needed, meets, knob_first, reason, curve, conf)


def idle(current: int = 1) -> Sizing:
    """A server with nothing to serve: one replica is enough."""
    return Sizing(max(1, current), 1, True, False, "idle: no requests in the window")


def combine(sizings: Iterable[Sizing]) -> Sizing | None:
    """A deployment's sizing from its servers' (each fitted as one of ``current``): the most any
    of them needs (the load balancer is taken as even; the busiest server decides), and at each
    count the worst predicted latency of any server."""
    ss = list(sizings)
    if not ss:
        return None
    top = max(ss, key=lambda s: (s.needed, not s.knob_first))
    n = min(len(s.curve) for s in ss)
    curve = []
    for i in range(n):
        pts = [s.curve[i] for s in ss]
        curve.append(Point(i + 1, _worst(p.ttft_p95 for p in pts), _worst(p.itl_p95 for p in pts)))
    confs = [s.confidence for s in ss if s.confidence is not None]
    return Sizing(
        current=max(s.current for s in ss),
        needed=top.needed,
        meets_targets=all(s.meets_targets for s in ss),
        knob_first=top.knob_first and top.needed == top.current,
        reason=top.reason if len(ss) == 1 else f"{top.reason} (the most of {len(ss)} servers)",
        curve=tuple(curve),
        confidence=min(confs) if confs else None,
    )


def _worst(xs: Iterable[float | None]) -> float | None:
    vals = list(xs)
    if any(v is None for v in vals):
        return None
    return max(v for v in vals if v is not None) if vals else None


# ------------------------------------------------------------------ hysteresis
@dataclass(frozen=True)
class Desired:
    """What is exported: the desired count after the hysteresis, and the predictions at it."""

    desired: int
    sizing: Sizing
    at_desired: Point | None
    at_one_fewer: Point | None  # what removing one replica from the desired count would give
    held: bool  # the desired count is above what is needed now (a scale-in waiting out its hold)

    def to_json(self) -> dict[str, Any]:
        def pt(p: Point | None) -> dict[str, Any] | None:
            if p is None:
                return None
            return {"replicas": p.replicas, "ttft_seconds_p95": p.ttft_p95, "itl_seconds_p95": p.itl_p95}

        return {
            "desired": self.desired,
            **self.sizing.to_json(),
            "held": self.held,
            "predicted_at_desired": pt(self.at_desired),
            "predicted_at_one_fewer": pt(self.at_one_fewer),
        }


@dataclass
class Hold:
    """Scale out at once, scale in only after ``hold_s`` of predictions agree: the desired count
    is the largest count needed over the last ``hold_s``. Times are the caller's (no clock)."""

    hold_s: float = SCALE_IN_HOLD_S
    _seen: collections.deque[tuple[float, int]] = field(default_factory=collections.deque)
    last: Sizing | None = None

    def update(self, t: float, sizing: Sizing | None) -> Desired | None:
        while self._seen and self._seen[0][0] < t - self.hold_s:
            self._seen.popleft()
        if sizing is not None:
            self._seen.append((t, sizing.needed))
            self.last = sizing
        if not self._seen or self.last is None:
            self.last = None
            return None
        desired = max(n for _, n in self._seen)
        s = self.last
        return Desired(
            desired=desired,
            sizing=s,
            at_desired=s.at(desired),
            at_one_fewer=s.at(desired - 1) if desired > 1 else None,
            held=desired > s.needed,
        )

    @property
    def upto(self) -> int:
        """The largest count in the hold (the curve must reach it)."""
        return max((n for _, n in self._seen), default=0)
