"""The daemon's live experiment measures each window's noise from its own batches
(advisor/verify/live_experiment.py: ``batches``, ``batch_floors``), on the committed H100 runs of
one configuration under one open load near its knee (validation/runs/knee-draws.*: seeds of the
benchmark's arrivals, and seed 0 twice) and on pairs that changed a knob. The runs are replayed
into one advisor as the daemon lives them (validation/live.py's ``replay``); a GPU cannot run
here, so the recordings stand in for the server (docs/validation.md, "The daemon's verdict
across a restart, replayed")."""

from __future__ import annotations

import importlib.util
import itertools
import math
import subprocess
import sys

import pytest

from advisor.core import names as n
from advisor.core.config import Config
from advisor.derive.window import Window
from advisor.diagnose.ruleset import load_rules
from advisor.drive.runner import Advisor, ReplayClock
from advisor.sources.metrics import parse_page
from advisor.sources.session import Session
from advisor.verify import live_experiment as lx
from advisor.verify.differences import MetricDelta, spread_floors
from advisor.verify.samples import METRICS, Settings
from tests.paths import FIXTURES, REPO

pytestmark = pytest.mark.xdist_group("validation-runs")

_spec = importlib.util.spec_from_file_location("validation_live", REPO / "validation" / "live.py")
assert _spec is not None and _spec.loader is not None
live = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(live)


def _aa(a: str, b: str) -> tuple[lx.LiveExperiment, str | None]:
    """Runs a then b of one configuration, b read with a cap one higher: a change the daemon
    judges where nothing changed on the server."""
    exp, alone = live.replay(a, b, live.aa_argv(b))
    assert exp is not None and exp.state == "done"
    return exp, alone


def test_a_window_is_cut_into_batches_that_cover_it_once() -> None:
    """360 requests in knee-draws.before's window: four batches of about 90, sharing their
    boundary pages, whose request counts add up to the window's."""
    w = Window(max_age_s=math.inf)
    for item in Session.load(live.report.RUNS / "knee-draws.before").replay():
        if item.kind == "scrape" and item.t is not None:
            w.add_snapshot(parse_page(item.text, item.t))
    parts = lx.batches(w)
    counts = [p.counter_delta(n.REQUEST_SUCCESS) or 0.0 for p in parts]
    assert len(parts) == 4
    assert sum(counts) == pytest.approx(w.counter_delta(n.REQUEST_SUCCESS))
    assert min(counts) >= lx.BATCH_REQUESTS
    assert max(counts) - min(counts) <= 0.25 * max(counts)
    for left, right in itertools.pairwise(parts):
        assert left.times()[-1] == right.times()[0]
    assert lx.batches(w, most=1) == [w]


def test_the_same_draw_twice_at_a_knee_is_inconclusive_with_its_batches_noise() -> None:
    """Seed 0 twice on one H100 (TTFT p95 1.87 s and 0.95 s): each window's batches spread TTFT
    p95 by several times, so the daemon calls the pair inconclusive and says why. Seed 1 after
    seed 0 was a revert from one window alone (more preemptions by +135%, within what the batches
    show)."""
    exp, alone = _aa("knee-draws.before", "knee-draws.seed-0-again")
    assert exp.verdict == "inconclusive" and alone == "inconclusive"
    assert any(r.startswith("Noise within the windows") and "TTFT p95 x" in r for r in exp.reasons)
    floors = exp.comparison["settings"]["noise_floor_pct"] if exp.comparison else {}
    assert floors["ttft_p95"] > 300  # a factor of more than 4 between two windows of one config
    exp, alone = _aa("knee-draws.seed-1", "knee-draws.before")
    assert alone == "revert"
    assert exp.verdict == "inconclusive", exp.reasons


@pytest.mark.parametrize(
    ("base", "after", "verdict"),
    [
        ("queue-steps.before", "queue-steps.max-num-seqs-27", "keep"),  # throughput +44%
        ("follow-misconf-r4.after", "follow-misconf-r4.after2", "keep"),  # 39 preemptions -> 0
        ("kv-seqs-bind.before", "kv-seqs-bind.after", "revert"),  # the cap cut: throughput -30%
    ],
)
def test_a_real_change_is_still_judged(base: str, after: str, verdict: str) -> None:
    exp, alone = live.replay(base, after)
    assert exp is not None and exp.verdict == verdict == alone, exp and exp.reasons


def _d(name: str, change: float) -> MetricDelta:
    spec = next(m for m in METRICS if m.name == name)
    return MetricDelta(spec, 1.0, 1.0 + change, change, None, None, False, "ok", "values")


def test_spread_floors_is_students_t_on_the_pooled_spread() -> None:
    """Side A's three batches at log values 0, ln 1.2, ln 0.9, side B's two at 0, ln 1.1; each
    window compared whole (3 and 2 batches): floor = exp(t(0.975, 3) x s x sqrt(1/3 + 1/2)) - 1
    with s^2 the pooled within-side variance; below the minimum effect nothing is set."""
    a = [math.log(x) for x in (1.0, 1.2, 0.9)]
    b = [math.log(x) for x in (1.0, 1.1)]
    ss = sum((x - sum(v) / len(v)) ** 2 for v in (a, b) for x in v)
    expected = math.expm1(3.182446 * math.sqrt(ss / 3) * math.sqrt(1 / 3 + 1 / 2))
    repeats = [
        [{"ttft_p95": _d("ttft_p95", 0.2)}, {"ttft_p95": _d("ttft_p95", -0.1)}],
        [{"ttft_p95": _d("ttft_p95", 0.1)}],
    ]
    floors = spread_floors(repeats, (3, 2), Settings(noise_floor={}))
    assert floors["ttft_p95"] == pytest.approx(expected, rel=1e-4)
    tight = [[{"ttft_p95": _d("ttft_p95", 0.001)}], [{"ttft_p95": _d("ttft_p95", -0.001)}]]
    assert spread_floors(tight, (2, 2), Settings(noise_floor={})) == {}


@pytest.mark.slow  # 91 replays of two runs each: ~30 s of one core
def test_live_block_of_docs_validation_is_current() -> None:
    r = subprocess.run(
        [sys.executable, str(REPO / "validation" / "live.py"), "--check"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr


def test_a_change_of_data_parallelism_is_seen_and_judged() -> None:
    """DP 1 (unstated) -> `--data-parallel-size 2` on one H200 host: the daemon sees the change
    from the new run's arguments, before its first page (vLLM prints `api_server_count` 2 with
    them), and judges it as `compare` does. It had no verdict: the engine core's config line
    said DP 1, and a value the run before left at its default was taken for one learned."""
    exp, _ = live.replay("dense-kv-tp.before", "dense-kv-tp.data-parallel-size-2")
    assert exp is not None
    assert [(c.knob, c.old, c.new) for c in exp.changes] == [
        ("data_parallel_size", 1, 2),
        ("api_server_count", 1, 2),
    ]
    assert exp.verdict == "keep", exp.reasons
    assert any(r.startswith("Several knobs changed at once") for r in exp.reasons)


def _log_twice(first: str, second: str) -> Advisor:
    """An advisor without a command line reading a real vLLM log, then another run's log
    appended to it (a restart the log shows before any page of the new server)."""
    adv = Advisor(Config(), load_rules(), clock=ReplayClock())
    for name in (first, second):
        with open(FIXTURES / "logs" / name, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                adv.on_log_line(line)
    return adv


def test_a_restart_with_the_same_arguments_read_from_the_log_is_no_change() -> None:
    """The same H200 log twice: the new run's first lines resolve its knobs to defaults before
    its `non-default args` line sets them again, as the run before had them (a value learned,
    not a change); a run with other arguments is one."""
    same = _log_twice("h200-0.25-A_s256.log", "h200-0.25-A_s256.log")
    assert same.changes == [] and same.experiment is None
    other = _log_twice("h200-0.25-A_s256.log", "h200-0.25-C_b2048.log")
    got = {c.knob: (c.old, c.new) for c in other.changes}
    assert got["max_num_batched_tokens"] == (8192, 2048)
    assert got["kv_cache_memory_bytes"] == (6442450944, 38654705664)
