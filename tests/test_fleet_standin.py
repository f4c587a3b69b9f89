"""The stand-in fleet's steady replay (tests/fleet_standin.py): past its span, a recorded load goes
on as it was, with no counter going back, so a test's later checks see the load, not its drain."""

from __future__ import annotations

from pathlib import Path

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
    assert steady.steady is not None and first < steady.steady[0] < steady.steady[1] < last
    prev: dict[str, float] = {}
    running, tokens = [], []
    for t in range(0, 6 * int(last), 2):  # five laps and more
        plain.clock = steady.clock = lambda t=t: float(t)
        page = steady.page()
        if t < steady.steady[0]:  # until its span, the recording as it is
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
