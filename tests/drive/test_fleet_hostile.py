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
    behaviour = prom_standin.Behaviour("many_series", n_series=n)
    with prom_standin.serve(samples, meta, behaviour) as url:
        fleet = _fleet(url, clock)
        fleet.max_instances = 10
        st = fleet.cycle()
        assert st.prometheus_up, st.last_error
        assert len(st.members) == 10 and st.instances_dropped == n - 10
        assert [m.server.instance for m in st.members] == sorted(m.server.instance for m in st.members)
        # a cycle that cannot read Prometheus withdraws the advice, not the count of the unfollowed
        behaviour.mode, behaviour.body = "body", b"not json"
        st = fleet.cycle()
    assert not st.prometheus_up and st.instances_dropped == n - 10


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


@pytest.mark.parametrize("bad", [1e308, float("nan"), -5.0])
def test_a_bad_knob_series_on_one_server_is_named_there_the_others_diagnosed_and_it_clears(
    bad: float,
) -> None:
    """Issue 34, G5, in the fleet: the sidecar of one server (c, a healthy recording) exports
    `vllm_advisor_engine_knob{knob="max_num_seqs"}` as 1e308, NaN or -5 for its first 26 s, then
    the series is gone; another server (a) preempts. c's knob stays unknown (never that value),
    the bad sample is named in c's diagnosis (while Prometheus holds it) and counted in its
    `bad_samples`; a is diagnosed as ever; no internal error; c is clear once the series is gone
    and has left the window. Before: 1e308 was
    an `OverflowError` and "internal error" with a traceback every cycle, still 120 s after the
    series was gone; -5 and NaN were taken as knobs. The Prometheus is the stand-in
    (tests/prom_standin.py: two recorded servers' stored samples, and the sidecar's series, at
    times an injected clock walks through; an instant query's lookback of 3 s stands for the
    staleness marker a real Prometheus writes when the series leaves the sidecar's page): the
    recorded history cannot be scraped by a real Prometheus at its own past times."""
    a, meta = prom_standin.stored_samples(SESSIONS / "cpu-preempt-nobind", "a.fleet:8000")
    c, meta_c = prom_standin.stored_samples(SESSIONS / "cpu-healthy", "c.fleet:8000")
    end = max(t for _, vals in a for t, _ in vals)
    shift = end - max(t for _, vals in c for t, _ in vals)
    c = [(lab, [(t + shift, v) for t, v in vals]) for lab, vals in c]
    times = sorted({t for _, vals in c for t, _ in vals})
    gone = times[0] + 26.0
    sidecar = {"job": "advisor", "instance": "c.fleet:9100", "source": "cmdline"}
    knob = [
        (
            {"__name__": prom.SIDECAR_KNOB, **sidecar, "knob": "max_num_seqs"},
            [(t, bad) for t in times if t < gone],
        ),
        (
            {"__name__": prom.SIDECAR_KNOB, **sidecar, "knob": "max_num_batched_tokens"},
            [(t, 2048.0) for t in times],
        ),
    ]
    samples = a + c + knob
    behaviour = prom_standin.Behaviour("normal", lookback_s=3.0)
    clock = Clock(end)
    with prom_standin.serve(samples, {**meta_c, **meta}, behaviour) as url:
        cfg = Config(interval_s=4.0, window_s=24.0, retention_s=120.0)
        fleet = Fleet(cfg, load_rules(), prom.Client(url, timeout_s=5.0), '{job="vllm"}', clock=clock)
        during = _live(fleet, clock, samples, gone - 2.0)
        adv_c = fleet.advisors["c.fleet:8000"]
        knob_during = (adv_c.engine.get("max_num_seqs"), adv_c.engine.source("max_num_seqs"))
        tokens_during = adv_c.engine.get("max_num_batched_tokens")
        clock.t = gone - 2.0 + cfg.interval_s
        after = None
        while clock.t <= end:
            after = fleet.cycle()
            clock.t += cfg.interval_s
    assert during.prometheus_up and after is not None and after.prometheus_up
    by = {m.server.instance: m.state for m in during.members}
    dc, da = by["c.fleet:8000"].diagnosis, by["a.fleet:8000"].diagnosis
    assert dc is not None and da is not None
    assert dc.status != "advice" and "internal error" not in dc.reason
    assert (
        f"vllm_advisor_engine_knob: max_num_seqs = {bad!r} from the sidecar c.fleet:9100 is no reading"
        in (dc.reason)
    ), dc.reason
    assert by["c.fleet:8000"].bad_samples, by["c.fleet:8000"].bad_samples
    assert knob_during[0] != bad and knob_during[1] != "cmdline"  # never that value
    assert tokens_during == 2048  # the sidecar's other knob is read
    assert da.status == "advice", da.reason  # the other server diagnosed as ever
    by = {m.server.instance: m.state for m in after.members}
    for st in by.values():
        assert st.diagnosis is not None and "internal error" not in st.diagnosis.reason
    reason_c = by["c.fleet:8000"].diagnosis.reason  # type: ignore[union-attr]
    assert "from the sidecar" not in reason_c and "could not be trusted" not in reason_c, reason_c
    assert by["a.fleet:8000"].diagnosis.status == "advice"  # type: ignore[union-attr]
