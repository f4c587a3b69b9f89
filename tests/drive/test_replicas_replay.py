"""Desired replicas over a real server's rising and falling load, replayed through the sidecar
daemon's own cycle (no clock but the recording's): tests/fixtures/sessions/cpu-load-steps is a
vLLM CPU server (--max-num-seqs 4) recorded under a closed loop of clients stepping
2 -> 6 -> 16 -> 6 -> 2 (scripts/record_sessions.py). The same on a real Prometheus with two
replicas of a deployment is tests/drive/test_fleet_replicas.py. Also: when the sizer refits, and
the fleet's grouping of servers into deployments."""

from __future__ import annotations

import functools
import itertools
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from advisor.core.config import Config
from advisor.diagnose.ruleset import load_rules
from advisor.drive import scaling
from advisor.drive.daemon import Daemon
from advisor.drive.fleet import Fleet
from advisor.drive.inputs import advisor_for_session
from advisor.outputs.exporter import replicas_basis
from advisor.outputs.state import ExportState, Member, Server
from advisor.sources import prometheus as prom
from advisor.sources.session import Session
from tests.paths import FIXTURES

STEPS = FIXTURES / "sessions" / "cpu-load-steps"
# Targets for a tiny model on two CPU cores: its TTFT p95 is ~0.1-0.2 s with nothing queued.
TARGETS = {"ttft_p95_seconds": 0.5, "itl_p95_seconds": 0.1}
HOLD_S = 30.0


@dataclass(frozen=True)
class Tick:
    t: float  # seconds since the load started
    clients: int  # the recorded load's clients at t
    desired: int | None
    needed: int | None
    basis: str | None
    knob: str | None  # the advised knob


def phases(path: Path) -> list[tuple[float, float, int]]:
    """(start, end, clients) of each load phase, in seconds since the load started."""
    meta = json.loads((path / "meta.json").read_text())
    out, t = [], 0.0
    for p in meta["load"]["closed_loop_clients"]:
        out.append((t, t + p["seconds"], p["clients"]))
        t += p["seconds"]
    return out


def clients_at(ph: list[tuple[float, float, int]], t: float) -> int:
    return next((c for a, b, c in ph if a <= t < b), 0)


@functools.cache
def timeline(path: Path = STEPS, window_s: float = 60.0, hold_s: float = HOLD_S) -> tuple[Tick, ...]:
    cfg = Config(window_s=window_s, scale_in_hold_s=hold_s, targets=dict(TARGETS))
    rules = load_rules()
    s = Session.load(path)
    adv, clock = advisor_for_session(s, cfg, rules)
    daemon = Daemon(cfg, rules, advisor=adv, clock=clock, persist=False)
    ph = phases(path)
    ticks: list[Tick] = []
    start: float | None = None
    for item in s.replay(speed=None):
        if item.kind != "scrape" or item.t is None:
            adv.on_log_line(item.text)
            continue
        clock.t = item.t
        adv.on_page(item.text, item.t)
        d = adv.diagnose(item.t)
        r = daemon._build_state(d).replicas
        if start is None and (d.signals.get("requests_running_avg") or 0) > 0:
            start = item.t - 2.0  # the first page with a request running: the load began before it
        if start is None:
            continue
        t = item.t - start
        rec = d.recommendation if d.status == "advice" else None
        ticks.append(
            Tick(
                t,
                clients_at(ph, t),
                r.desired if r else None,
                r.sizing.needed if r else None,
                replicas_basis(r) if r else None,
                rec.knob if rec else None,
            )
        )
    return tuple(ticks)


def no_early_scale_in(ticks: tuple[Tick, ...], hold_s: float) -> list[str]:
    """Every fall of the desired count comes after the higher count held for ``hold_s`` (less
    one cycle of slack)."""
    bad, since = [], 0.0
    for a, b in itertools.pairwise(ticks):
        if a.desired == b.desired:
            continue
        fell = a.desired is not None and b.desired is not None and b.desired < a.desired
        if fell and b.t - since < hold_s - 2.5:
            bad.append(f"{a.desired} -> {b.desired} at {b.t:.0f}s, held only {b.t - since:.0f}s")
        since = b.t
    return bad


def test_desired_replicas_rise_and_fall_with_the_load() -> None:
    ticks = timeline()
    low = [x.desired for x in ticks if 20 <= x.t < 38]  # 2 clients, settled
    peak = [x.desired for x in ticks if 150 <= x.t < 215]  # 16 clients
    after = [x.desired for x in ticks if 280 <= x.t < 300]  # back to 6 clients, past the hold
    assert low and set(low) == {1}, low
    assert peak and min(d or 0 for d in peak) >= 3, peak
    assert after and set(after) == {1}, after
    # the highest count comes with the highest load
    top = max(ticks, key=lambda x: x.desired or 0)
    assert top.clients == 16 or 140 <= top.t < 240, top


def test_the_knob_comes_first_where_the_model_says_it_is_enough() -> None:
    """At 6 clients the cap (4) binds with the KV cache empty: queue-seqs-cap-binds advises
    max_num_seqs, the model predicts the raise meets the targets, and the count is the current
    one (1) while the knob is advised, once the hold has passed."""
    ticks = timeline()
    first = [x for x in ticks if x.basis == "knob_first"]
    assert first, "the knob never came first"
    assert all(x.knob == "max_num_seqs" and x.needed == 1 for x in first)
    # once the knob has come first for a whole hold, the count is the current one
    settled = [x for x in first if all(y.needed == 1 for y in ticks if x.t - HOLD_S < y.t <= x.t)]
    assert any(x.clients == 6 for x in settled), first
    assert all(x.desired == 1 for x in settled), settled


def test_the_count_holds_still_on_noise_and_never_scales_in_early() -> None:
    ticks = timeline()
    assert not no_early_scale_in(ticks, HOLD_S)
    # within the 16-client plateau, once risen, the count does not move down
    plateau = [x.desired for x in ticks if 170 <= x.t < 215]
    assert plateau == sorted(plateau), plateau
    changes = sum(1 for a, b in itertools.pairwise(ticks) if a.desired != b.desired)
    assert changes <= 8, [(round(x.t), x.desired) for x in ticks]


def _advised_at(t_rel: float) -> tuple[Any, Any, Config]:
    """The session's advisor and diagnosis ``t_rel`` recorded seconds after the first page."""
    cfg = Config(window_s=60.0, targets=dict(TARGETS))
    s = Session.load(STEPS)
    adv, clock = advisor_for_session(s, cfg, load_rules())
    t0, d = None, None
    for item in s.replay(speed=None):
        if item.kind != "scrape" or item.t is None:
            adv.on_log_line(item.text)
            continue
        t0 = item.t if t0 is None else t0
        if item.t - t0 > t_rel:
            break
        clock.t = item.t
        adv.on_page(item.text, item.t)
        d = adv.diagnose(item.t)
    return adv, d, cfg


def test_the_sizer_refits_only_when_due_or_when_the_question_changes() -> None:
    adv, d, cfg = _advised_at(200.0)  # 16 clients
    sizer = scaling.Sizer()
    first = sizer(adv, d, 1)
    assert first is not None and first.needed > 1
    assert sizer(adv, replace(d, at=d.at + 1.0), 1) is first  # within an eighth of the window
    assert sizer(adv, replace(d, at=d.at + 1.0), 2) is not first  # another replica count
    later = sizer(adv, replace(d, at=d.at + cfg.window_s / 8 + 1.0), 2)
    assert later is not None and later.current == 2
    # a server that cannot be read has no count, whatever was cached
    adv.up = False
    assert sizer(adv, d, 2) is None


def test_the_fleet_sizes_each_deployment_apart() -> None:
    """Servers of one model in two namespaces are two deployments, each sized as the servers it
    has up (one server each here: the same count as the sidecar's)."""
    adv, d, cfg = _advised_at(200.0)
    fleet = Fleet(cfg, load_rules(), prom.Client("http://127.0.0.1:9"), "")
    rules = tuple(load_rules())
    members = []
    for inst, ns in (("a:8000", "team-a"), ("b:8000", "team-b")):
        fleet.advisors[inst] = adv
        members.append(
            Member(Server(inst, "vllm", ("tiny-llama",), (), ns, "vllm"), ExportState(d, True, rules))
        )
    deps = fleet._size(members, d.at)
    assert [(x.namespace, x.instances, x.up) for x in deps] == [
        ("team-a", ("a:8000",), 1),
        ("team-b", ("b:8000",), 1),
    ]
    alone = scaling.Sizer()(adv, d, 1)
    assert alone is not None
    assert all(x.replicas is not None and x.replicas.desired == alone.needed for x in deps)
    # one server down: its deployment has no server to size, and no count
    members[1] = Member(members[1].server, ExportState(d, False, rules))
    deps = fleet._size(members, d.at + 400.0)
    assert deps[1].up == 0 and deps[1].replicas is None
