"""The simulator's prefill cost set to the engine's own prefill time (``simulated.calibrated``):
vLLM's ``request_prefill_time_seconds`` is a request's first scheduling to its first token, the
time its prompt's chunk steps take. Where the busy intervals cannot split a step between its
fixed part and its prefill (a queue at the cap: every interval carries about as much prefill),
that measured time decides the split; a well-determined fit, a preempting window and a CPU
server keep theirs. On recorded H200 and H100 runs (validation/runs/) and on the simulator's own
bookkeeping."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from advisor.core.config import DEFAULT_TARGETS
from advisor.predict import perfmodel as pm
from advisor.predict import simulated
from advisor.predict.perfmodel import StepTime
from advisor.predict.simulator import Engine, Request, simulate
from tests.paths import validation_module

FIT = StepTime(0.004, 0.0, 20e-6, "none", 10, None)  # 4 ms a step, 20 us a prefill token

# the queued bases of follow-misconf's configuration (cap 12 or 18, 4 GiB of KV, Poisson at
# 4.5/s) on five H200 and H100 leases: least squares cannot split their steps (R^2 0.02-0.37)
QUEUED = (
    "follow-misconf.before",
    "follow-misconf-r2.before",
    "follow-misconf-r3.before",
    "follow-misconf-r4.before",
    "queue-steps.before",
    "queue-steps.no-async",
    "queue-steps.no-daemon",
    "queue-steps-b8192.before",
    "queue-probe.before",
)
pytestmark = pytest.mark.xdist_group("validation-fits")  # the fits, shared within the worker


def _model(run: str) -> pm.Model:
    model, _, rows = validation_module("predictions").fitted(run)
    return replace(model, rows=tuple(rows))


def _scorer(run: str) -> simulated.Scorer:
    s = simulated.Scorer(_model(run), DEFAULT_TARGETS)
    assert s.why_not() is None, (run, s.why_not())
    return s


@pytest.mark.parametrize("asynchronous", [False, True])
def test_the_simulator_books_each_request_s_prefill_time_as_vllm_stamps_it(asynchronous: bool) -> None:
    """A lone 2,500-token prompt under a 1,024-token budget: three chunk steps of 1,024, 1,024
    and 452 tokens from its scheduling at 0 to its first token. A 100-token prompt arriving
    while another request decodes: synchronously it is scheduled at the next step's start and
    prefilled in it; asynchronously the next step was scheduled before it came, so it is
    scheduled with the one after, when the next one starts, and waits that step out."""
    eng = Engine(max_num_seqs=4, max_num_batched_tokens=1024, kv_blocks=10_000, async_scheduling=asynchronous)
    (lone,) = simulate(eng, FIT, [Request(2500, 3, 0.0)]).done
    assert (lone.prefill_steps, lone.prefill_tokens) == (3, 2500)
    assert lone.prefill_s == pytest.approx(sum(0.004 + 20e-6 * p for p in (1024, 1024, 452)))
    assert lone.ttft == pytest.approx(lone.prefill_s)
    res = simulate(eng, FIT, [Request(10, 50, 0.0), Request(100, 3, 0.02)])
    late = next(d for d in res.done if d.idx == 1)
    chunk = 0.004 + 20e-6 * 100  # its step: the other's decode and its 100 tokens
    if asynchronous:
        assert (late.prefill_steps, late.prefill_tokens) == (2, 100)
        assert late.prefill_s == pytest.approx(0.004 + chunk)
    else:
        assert (late.prefill_steps, late.prefill_tokens) == (1, 100)
        assert late.prefill_s == pytest.approx(chunk)


def test_a_queued_window_s_simulated_prefill_time_is_the_measured_one() -> None:
    """follow-misconf-r4.before (an H100, cap 12 queued throughout): its fit's prefill cost,
    6.2 us a token (R^2 0.02), gives a 39 ms prefill 25 ms; set to the measured time, the cost
    is ~20 us (the well-determined fits of this model read 17-27), and the window's mean step
    is what it was."""
    model = _model("follow-misconf-r4.before")
    s = _scorer("follow-misconf-r4.before")
    before, after = model.fit, s.model.fit
    assert before is not None and after is not None
    assert before.r2 is not None and before.r2 < pm.LOW_R2
    assert before.c < 10e-6 and 17e-6 < after.c < 27e-6, (before.c, after.c)
    assert "prefill cost set to the engine's prefill time" in after.basis
    mean = model.prefill  # the window's prefill tokens a step: the fixed part takes the change
    assert after.a + after.c * mean == pytest.approx(before.a + before.c * mean)
    # today simulated again with it: the prefill time as measured
    measured = model.measured["prefill_seconds_mean"]
    assert measured is not None
    run = simulated._run(s.model, s.model.config, s._reqs, s.arrivals)  # type: ignore[arg-type]
    done = [d for d in run.done if not d.preempted]
    assert sum(d.prefill_s for d in done) / len(done) == pytest.approx(measured, rel=0.05)


def test_the_queued_bases_of_one_configuration_get_one_prefill_cost() -> None:
    """Nine queued bases of one configuration on five leases: their fits' prefill costs spread
    4.2x (6.2-25.9 us a token); set to each window's measured prefill time, 1.5x (19.9-29.2)."""
    fitted = [_model(r).fit for r in QUEUED]
    calibrated = [_scorer(r).model.fit for r in QUEUED]
    cs = [f.c for f in fitted if f is not None]
    cal = [f.c for f in calibrated if f is not None]
    assert len(cs) == len(cal) == len(QUEUED)
    assert max(cs) / min(cs) > 3.0  # the case
    assert max(cal) / min(cal) < 1.6, [round(c * 1e6, 1) for c in cal]


@pytest.mark.parametrize(
    ("run", "why"),
    [
        ("kv-seqs-bind-r2.after", "a well-determined fit (R^2 0.99)"),
        ("follow-misconf-r4.after", "a preempting window (39 preemptions)"),
        ("cpu-cap-past-fit.before", "a CPU server"),
    ],
)
def test_the_fit_is_kept(run: str, why: Any) -> None:
    model = _model(run)
    s = simulated.Scorer(model, DEFAULT_TARGETS)
    s.why_not()
    assert s.model is model, why
    assert s.runs == 1  # today's knobs, simulated once
