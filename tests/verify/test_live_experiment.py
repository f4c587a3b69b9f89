"""The daemon's own experiment, replayed from two real recordings of the same load: vLLM 0.32
(CPU), 384-in/384-out requests, max_num_seqs 6 (preempting, cpu-long-binds), then restarted
with the advised 4 (cpu-long-binds-after). The replay feeds one advisor both sessions in time order, as the
daemon would have lived them; the recordings were made minutes apart, so the second is moved
to start 60 s after the first ends (a restart's worth of downtime)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from advisor.core.config import Config
from advisor.diagnose.advise import Diagnosis
from advisor.diagnose.ruleset import load_rules
from advisor.drive.runner import Advisor, ReplayClock, base_from_session_engine
from advisor.sources.session import Session
from advisor.verify import live_experiment as lx
from tests.paths import FIXTURES

SESSIONS = FIXTURES / "sessions"


def play(
    *names: str,
    on_diagnosis: Callable[[Advisor, Diagnosis], None] | None = None,
    until: Callable[[Advisor], bool] | None = None,
) -> Advisor:
    """The sessions replayed into one advisor, in time order (``until``: stop at the first page
    after which it holds)."""
    sessions = [Session.load(SESSIONS / n) for n in names]
    current: list[list[str] | None] = [None]
    clock = ReplayClock()
    adv = Advisor(
        Config(),
        load_rules(),
        base=base_from_session_engine(sessions[0].engine, has_argv=True),
        argv_provider=lambda: current[0],
        clock=clock,
        log_near=sessions[0].started.timestamp(),
    )
    for s, t in zip(sessions, shifted(sessions), strict=True):
        current[0] = s.meta.get("serve_args")
        for item in s.replay():
            if item.kind == "scrape" and item.t is not None:
                clock.t = item.t + t
                adv.on_page(item.text, clock.t)
                d = adv.diagnose(clock.t)
                if on_diagnosis is not None:
                    on_diagnosis(adv, d)
                if until is not None and until(adv):
                    return adv
            else:
                adv.on_log_line(item.text)
    return adv


def shifted(sessions: list[Session]) -> list[float]:
    """Offsets that put each session 60 s after the end of the one before."""
    offsets, end = [], None
    for s in sessions:
        times = [t for t, _ in s.scrapes]
        off = 0.0 if end is None else end + 60.0 - times[0]
        offsets.append(off)
        end = times[-1] + off
    return offsets


def test_following_the_advice_is_judged_keep() -> None:
    adv = play("cpu-long-binds", "cpu-long-binds-after")
    assert [(c.knob, c.old, c.new) for c in adv.changes] == [("max_num_seqs", 6, 4)]
    exp = adv.experiment
    assert exp is not None and exp.state == "done", exp
    assert exp.before_requests == 48 and exp.after_requests == 48
    assert exp.verdict == "keep", exp.reasons
    assert any("Preemptions" in r for r in exp.reasons)
    assert adv.finished_experiments and adv.finished_experiments[-1].verdict == "keep"
    d = adv.diagnose()
    assert d.experiment is not None and d.experiment["verdict"] == "keep"


def test_going_back_is_judged_revert() -> None:
    adv = play("cpu-long-binds-after", "cpu-long-binds")
    assert [(c.knob, c.old, c.new) for c in adv.changes] == [("max_num_seqs", 4, 6)]
    exp = adv.experiment
    assert exp is not None and exp.state == "done"
    assert exp.verdict == "revert", exp.reasons
    assert exp.reasons[-1] == "Restore the previous value: --max-num-seqs 4."


def test_load_changed_is_inconclusive() -> None:
    """cpu-healthy (48 requests of 256/128 at concurrency 8) after cpu-preempt-binds
    (64 of 128/256 at 32): a knob changed (max_num_seqs 10 -> 128, KV size) but so did the load."""
    adv = play("cpu-preempt-binds", "cpu-healthy")
    exp = adv.experiment
    assert exp is not None and exp.state == "done"
    assert exp.verdict == "inconclusive"
    assert any("comparable load" in r for r in exp.reasons), exp.reasons


def test_too_few_requests_before_is_inconclusive() -> None:
    """cpu-idle (no requests) then a restart with other knobs: there is no baseline."""
    adv = play("cpu-idle", "cpu-preempt-binds")
    exp = adv.experiment
    assert exp is not None and exp.state == "done"
    assert exp.verdict == "inconclusive"
    assert any("No baseline" in r for r in exp.reasons)


def test_no_new_advice_while_the_experiment_runs() -> None:
    statuses: list[tuple[str, str]] = []

    def watch(adv: Advisor, d: Diagnosis) -> None:
        if adv.experiment is not None and adv.experiment.state == "observing":
            statuses.append((d.status, d.reason))

    play("cpu-long-binds", "cpu-long-binds-after", on_diagnosis=watch)
    assert statuses, "the experiment never observed"
    assert all(st == "insufficient-data" for st, _ in statuses)
    assert any("experiment running" in r for _, r in statuses)


def test_the_prediction_made_at_the_change_is_set_against_the_after_window() -> None:
    """Issue 13's loop: at the change (cap 6 -> 4) the model predicts the after-state from the
    window before it; once judged, the measured after-state and the error per metric are kept."""
    adv = play("cpu-long-binds", "cpu-long-binds-after")
    exp = adv.experiment
    assert exp is not None and exp.state == "done"
    pred = exp.prediction
    assert pred is not None, "no prediction made at the change"
    assert (pred["knob"], pred["current"], pred["value"]) == ("max_num_seqs", 6, 4)
    # a smaller cap: a smaller batch, fewer preemptions
    assert pred["predicted"]["running"] < pred["measured"]["running"]
    after, err = pred["measured_after"], pred["error"]
    assert after is not None and err is not None
    for metric in ("output_tokens_per_second", "running"):
        p, m = pred["predicted"][metric], after[metric]
        assert err[metric] == pytest.approx(p / m - 1)
    # the batch the cap allows is what ran (within the noise of a 2-core machine's replay)
    assert abs(err["running"]) < 0.35
    assert adv.finished_experiments[-1].prediction == pred


def test_a_reason_added_after_the_verdict_keeps_the_revert_line_last() -> None:
    """``with_reason`` (the daemon's speed note, added once the prediction is checked): before a
    revert's closing "Restore the previous value" line, else at the end."""

    change = (lx.Change("max_num_seqs", 6, 4, "cmdline"),)
    reverted = lx.LiveExperiment(
        change, (0.0, 1.0), 2.0, reasons=("Worse.", "Restore the previous value: x.")
    )
    assert lx.with_reason(reverted, "Note.").reasons == ("Worse.", "Note.", "Restore the previous value: x.")
    kept = lx.LiveExperiment(change, (0.0, 1.0), 2.0, reasons=("Better.",))
    assert lx.with_reason(kept, "Note.").reasons == ("Better.", "Note.")
