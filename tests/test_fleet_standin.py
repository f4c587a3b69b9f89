"""The stand-in fleet's replays held at gates (tests/fleet_standin.py): past a gate's span a
recorded load goes on as it was, with no counter going back, so a test's later checks see the load,
not its drain, and a test can hold a phase of the load until it has seen what it waits for."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests import fleet_standin

SESSION = Path(__file__).resolve().parent / "fixtures" / "sessions" / "cpu-preempt-binds"


def _values(page: str) -> dict[str, float]:
    return {
        s.name + str(sorted(s.labels.items())): s.value
        for f in text_string_to_metric_families(page)
        for s in f.samples
    }


def test_a_steady_replay_goes_on_with_its_load_and_no_counter_going_back() -> None:
    first, last = fleet_standin.load_span(SESSION)
    plain = fleet_standin.session_replay(SESSION, start=0.0)
    steady = fleet_standin.session_replay(SESSION, start=0.0, steady=True)
    (gate,) = steady.gates
    assert first < gate.t1 < gate.t2 < last
    prev: dict[str, float] = {}
    running, tokens = [], []
    for t in range(0, 6 * int(last), 2):  # five laps and more
        plain.clock = steady.clock = lambda t=t: float(t)
        page = steady.page()
        if t < gate.t1:  # until its span, the recording as it is
            assert page == plain.page()
        now = _values(page)
        for key, v in now.items():
            if key.split("[", 1)[0].endswith(fleet_standin.COUNTER_SUFFIXES) and key in prev:
                assert v >= prev[key], (t, key, prev[key], v)
        prev = now
        if t > last:
            running.append(
                now["vllm:num_requests_running" + str([("engine", "0"), ("model_name", "tiny-llama")])]
            )
            tokens.append(
                now["vllm:generation_tokens_total" + str([("engine", "0"), ("model_name", "tiny-llama")])]
            )
    # long after the recording's load drained: requests still run, and tokens still come at the
    # span's rate
    assert min(running) > 0
    assert tokens[-1] > 2 * tokens[0]


def test_a_gate_holds_a_phase_until_released_then_the_recording_goes_on_as_far_ahead() -> None:
    first, last = fleet_standin.load_span(SESSION)
    gate = (first + 10.0, first + 20.0)
    ahead = 3.0
    a = fleet_standin.session_replay(SESSION, start=0.0, gates=[gate])
    b = fleet_standin.session_replay(SESSION, start=-ahead, gates=[gate])
    release_at = 75.0  # a (at the gate from ~48 s) is in its third lap of the span, b in its fourth
    shown: dict[str, list[tuple[float, float]]] = {"a": [], "b": []}
    prev: dict[str, dict[str, Fraction]] = {"a": {}, "b": {}}
    for step in range(0, 2 * int(last) * 4):
        now = step / 4
        if now == release_at:
            fleet_standin.release([a, b], 0, now)
        for name, r in (("a", a), ("b", b)):
            r.clock = lambda now=now: now
            pos = r.position(now)
            shown[name].append((now, pos))
            values = fleet_standin.counters(r.page())
            for key, v in values.items():  # no counter goes back, at the gate or past it
                assert v >= prev[name].get(key, v), (name, now, key)
            prev[name] = values
            if now < release_at:  # held: never past the gate
                assert pos < gate[1] + 1.0, (name, now, pos)
    # released: both go on through the rest of the recording, b as far ahead of a as before
    a_end = next(now for now, pos in shown["a"] if pos >= last)
    b_end = next(now for now, pos in shown["b"] if pos >= last)
    assert a_end - b_end == ahead
    # both leave after b's lap: a one lap more than it had to, none at once where it stood
    laps = a.gates[0].laps
    assert laps == b.gates[0].laps == 4
    held = a.gates[0]
    assert a_end == pytest.approx(last + laps * (held.t2 - held.t1), abs=0.25)


def test_gates_that_overlap_or_hold_no_page_are_refused() -> None:
    first, _ = fleet_standin.load_span(SESSION)
    with pytest.raises(ValueError, match="overlaps"):
        fleet_standin.session_replay(SESSION, gates=[(first, first + 20), (first + 10, first + 30)])
    with pytest.raises(ValueError, match="holds no pages"):
        fleet_standin.session_replay(SESSION, gates=[(first, first + 0.01)])
