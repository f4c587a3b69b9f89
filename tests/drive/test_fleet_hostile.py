"""Issue 23, class 4: the fleet daemon (and ``explain --prometheus``) against a Prometheus that
stalls, trickles, answers partially or lists 100,000 series.

The Prometheus is a stand-in (tests/prom_standin.py) answering from the samples a Prometheus
stores for recorded real vLLM pages: a real Prometheus cannot be made to misbehave on demand.
The SIGTERM tests run the installed console script as a process (a signal needs one).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from advisor.core.config import Config
from advisor.diagnose.ruleset import load_rules
from advisor.drive.fleet import Fleet
from advisor.sources import prometheus as prom
from tests import prom_standin
from tests.paths import REPO
from tests.promstack import free_port

SESSIONS = REPO / "tests" / "fixtures" / "sessions"
INSTANCE = "a.fleet:8000"
EXE = str(Path(sys.executable).parent / "vllm-advisor")


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture(scope="module")
def preempting() -> tuple[list[prom_standin.Sample], dict[str, Any], float]:
    samples, meta = prom_standin.stored_samples(SESSIONS / "cpu-preempt-nobind", INSTANCE)
    return samples, meta, max(t for _, vals in samples for t, _ in vals)


def _fleet(url: str, clock: Clock, interval_s: float = 5.0, timeout_s: float = 2.0) -> Fleet:
    cfg = Config(interval_s=interval_s, window_s=60.0, retention_s=300.0)
    return Fleet(cfg, load_rules(), prom.Client(url, timeout_s=timeout_s), '{job="vllm"}', clock=clock)


def _live(fleet: Fleet, clock: Clock, samples: list[prom_standin.Sample], until: float) -> Any:
    """Cycles one interval apart through the recording, as a live fleet would run them."""
    start = min(t for _, vals in samples for t, _ in vals)
    clock.t = start + fleet.cfg.interval_s
    st = None
    while clock.t <= until:
        st = fleet.cycle()
        clock.t += fleet.cfg.interval_s
    clock.t -= fleet.cfg.interval_s
    return st


def test_up_and_advice_fall_within_two_intervals_when_prometheus_stalls(preempting: Any) -> None:
    """A cycle that read the recorded preemption advises; then Prometheus stalls. Before the
    stalled cycle ends (its requests have their own deadline), the exported state already says
    Prometheus is not read and withdraws the advice, two intervals after the last good cycle."""
    samples, meta, end = preempting
    behaviour = prom_standin.Behaviour("normal")
    clock = Clock(end + 1.0)
    with prom_standin.serve(samples, meta, behaviour) as url:
        fleet = _fleet(url, clock)
        st = _live(fleet, clock, samples, end + 1.0)
        assert st.prometheus_up, st.last_error
        (m,) = st.members
        assert m.state.diagnosis is not None and m.state.diagnosis.status == "advice", m.state.diagnosis
        clock.t += 1.9 * fleet.cfg.interval_s
        assert fleet.state().prometheus_up
        assert fleet.state().members[0].state.diagnosis.status == "advice"  # type: ignore[union-attr]
        clock.t += 0.2 * fleet.cfg.interval_s  # 2.1 intervals since the last good cycle
        st = fleet.state()
        assert not st.prometheus_up
        d = st.members[0].state.diagnosis
        assert d is not None and d.status == "insufficient-data" and d.recommendation is None
        assert "Prometheus" in d.reason
        behaviour.mode = "stall"
        before = len(behaviour.requests)
        st = fleet.cycle()  # ends at its requests' deadline, withdrawn
        # it ended because a request was cut at its deadline, after which the cycle asked nothing more
        assert "timed out" in (st.last_error or ""), st.last_error
        assert len(behaviour.requests) - before == 1, behaviour.requests[before:]
        assert not st.prometheus_up and st.members[0].state.diagnosis.status == "insufficient-data"  # type: ignore[union-attr]


def test_a_partial_answer_is_not_consumed_and_advises_nothing(preempting: Any) -> None:
    """Warnings (``partial response``): that cycle's servers are unknown, and the samples are
    not fed (the next whole answer reads them)."""
    samples, meta, end = preempting
    behaviour = prom_standin.Behaviour("partial")
    clock = Clock(end + 1.0)
    with prom_standin.serve(samples, meta, behaviour) as url:
        fleet = _fleet(url, clock)
        st = fleet.cycle()
        (m,) = st.members
        assert m.state.diagnosis is not None and m.state.diagnosis.status == "insufficient-data"
        assert "partial response" in m.state.diagnosis.reason
        assert fleet.last_t == {}
        behaviour.mode = "normal"
        st = _live(fleet, clock, samples, end + 1.0)
        assert st.members[0].state.diagnosis.status == "advice"  # type: ignore[union-attr]


def test_100k_series_fail_the_cycle_at_once_with_a_clear_error(preempting: Any) -> None:
    samples, meta, end = preempting
    clock = Clock(end + 1.0)
    behaviour = prom_standin.Behaviour("many_series", n_series=100_000)
    with prom_standin.serve(samples, meta, behaviour) as url:
        # the stand-in's answer of 100k series takes seconds to build on a busy machine: the
        # client waits for it (what is tested is the bound on series, not the timeout)
        fleet = _fleet(url, clock, timeout_s=60.0)
        st = fleet.cycle()
    assert not st.prometheus_up and "--selector" in (st.last_error or "")
    # at once: the cycle ends at the series listing, no server's series is queried
    assert behaviour.requests and all(p == "/api/v1/series" for p in behaviour.requests[-1:])
    assert not [p for p in behaviour.requests if p.startswith("/api/v1/query")], behaviour.requests


def test_a_fleet_larger_than_its_bound_follows_the_first_servers(preempting: Any) -> None:
    samples, meta, end = preempting
    clock = Clock(end + 1.0)
    n = 30
    with prom_standin.serve(samples, meta, prom_standin.Behaviour("many_series", n_series=n)) as url:
        fleet = _fleet(url, clock)
        fleet.max_instances = 10
        st = fleet.cycle()
    assert st.prometheus_up, st.last_error
    assert len(st.members) == 10 and st.instances_dropped == n - 10
    assert [m.server.instance for m in st.members] == sorted(m.server.instance for m in st.members)


def _start(args: list[str], tmp_path: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "VLLM_ADVISOR_STATE_DIR": str(tmp_path / "state")}
    return subprocess.Popen(
        [EXE, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=tmp_path
    )


@pytest.mark.parametrize("command", ["run", "explain"])
def test_sigterm_stops_within_seconds_against_a_trickling_prometheus(
    tmp_path: Path, preempting: Any, command: str
) -> None:
    """A Prometheus that answers one byte every half second (a request would take minutes):
    SIGTERM ends ``run --prometheus`` and ``explain --prometheus`` within a few seconds."""
    samples, meta, _end = preempting
    behaviour = prom_standin.Behaviour("trickle", trickle_s=0.5)
    with prom_standin.serve(samples, meta, behaviour) as url:
        if command == "run":
            args = ["run", "--prometheus", url, "--listen", f"127.0.0.1:{free_port()}", "--interval", "5s"]
        else:
            args = ["explain", "--prometheus", url, "--instance", INSTANCE, "--window", "60s"]
        proc = _start(args, tmp_path)
        try:
            assert prom_standin.wait_for(lambda: behaviour.requests, 60), "no request reached Prometheus"
            time.sleep(0.5)  # inside the trickle
            assert proc.poll() is None
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
            took = time.monotonic() - t0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    out = proc.stdout.read().decode() if proc.stdout else ""
    assert took < 5.0, (took, out)
    assert "Traceback" not in out, out
