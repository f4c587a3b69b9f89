"""Issue 23, class 5: what was judged is never lost.

A ledger write that fails (the state dir unusable, another writer holding SQLite's lock, a
damaged file) is queued in memory, retried until it succeeds, counted on ``/metrics`` and
``/healthz``, and warned about once per failure episode; a damaged ledger is named at start and
by ``history`` (exit 1); two daemons on one state dir cannot both run.

The experiment judged here is a real one: the advisor replays two recordings of a real vLLM CPU
server before and after the advised change (tests/verify/test_live_experiment.py). Faults are
made as root can feel them (this machine's tests run as root, so a read-only mode would not
stop a write): a file where the state directory should be, an exclusive SQLite lock held by
another connection, bytes overwritten inside the database file; and, where ``mount`` is
permitted (tests/mounts.py), a read-only bind mount (EROFS) and a filled tmpfs (ENOSPC).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner

from advisor.cli import main
from advisor.core.config import Config
from advisor.core.log import configure_logging
from advisor.diagnose.ruleset import load_rules
from advisor.drive.daemon import Daemon
from advisor.drive.runner import Advisor
from advisor.verify.ledger import DurableLedger, ExperimentRecord, Ledger
from tests.daemon_helpers import Clock, start_run
from tests.hang import HANG_S
from tests.mounts import fill, immutable, read_only, tiny_fs
from tests.paths import FIXTURES
from tests.promstack import free_port
from tests.verify.test_live_experiment import play
from tests.vllm_standin import StandIn, serve, session_pages


def _record(i: int) -> ExperimentRecord:
    return ExperimentRecord(
        started_at=1_800_000_000.0 + i,
        verdict="keep",
        source="daemon",
        knob="max_num_seqs",
        reasons=[f"r{i}"],
    )


def test_writes_queue_while_the_state_dir_is_unusable_and_land_when_it_is_back(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.write_text("a file where the state directory should be\n")
    led = DurableLedger(state / "ledger.sqlite")
    assert led.add(_record(0)) is False and led.add(_record(1)) is False
    assert led.pending == 2 and led.failures == 2 and not led.ok
    assert "ledger" in (led.last_error or "")
    for _ in range(3):
        assert led.flush() == 0
    assert led.pending == 2 and led.failures == 5
    state.unlink()
    assert led.flush() == 2
    assert led.pending == 0 and led.ok
    rows = Ledger(state / "ledger.sqlite").list()
    assert [r["reasons"] for r in rows] == [["r1"], ["r0"]]  # both, in order, once each


def test_a_locked_ledger_is_retried_not_lost(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    Ledger(path)
    other = sqlite3.connect(path, timeout=0)
    other.execute("BEGIN EXCLUSIVE")
    led = DurableLedger(path, timeout_s=0.05)
    assert led.add(_record(0)) is False
    assert "locked" in (led.last_error or "")
    other.rollback()
    other.close()
    assert led.flush() == 1 and len(Ledger(path).list()) == 1


def test_the_queue_is_bounded_and_counts_what_it_drops(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.write_text("x")
    led = DurableLedger(state / "ledger.sqlite", max_pending=3)
    for i in range(5):
        led.add(_record(i))
    assert led.pending == 3 and led.dropped == 2
    state.unlink()
    led.flush()
    assert [r["reasons"] for r in Ledger(state / "ledger.sqlite").list()] == [["r4"], ["r3"], ["r2"]]


def _damage(path: Path) -> None:
    """A ledger with rows whose pages are overwritten in the middle (a bad disk sector)."""
    led = Ledger(path)
    for i in range(200):
        led.add(ExperimentRecord(1e9 + i, "keep", "daemon", knob="max_num_seqs", reasons=["x" * 300]))
    c = sqlite3.connect(path)
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.close()
    with path.open("r+b") as f:
        f.seek(4096 * 5 + 100)
        f.write(b"\xff" * 200)


def test_a_damaged_ledger_is_found_at_start_and_never_written_into(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    _damage(path)
    before = path.read_bytes()
    led = DurableLedger(path)
    assert led.damage and not led.ok
    assert led.add(_record(0)) is False and led.pending == 1
    assert "damaged" in (led.last_error or "")
    assert path.read_bytes() == before


def _damage_index(path: Path) -> None:
    """Rows that are all readable, and an index that no longer matches them (what a torn write
    of an index page leaves): only an integrity check sees it."""
    led = Ledger(path)
    for i in range(20):
        led.add(_record(i))
    c = sqlite3.connect(path)
    c.execute("PRAGMA writable_schema=ON")
    c.execute(
        "UPDATE sqlite_master SET sql='CREATE INDEX experiments_started ON experiments (ended_at)' "
        "WHERE name='experiments_started'"
    )
    c.commit()
    c.close()
    assert len(Ledger(path).list()) == 20  # every row still reads


def test_history_says_what_is_damaged_and_exits_1(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    _damage_index(path)
    res = CliRunner().invoke(main, ["history", "--ledger", str(path)])
    assert res.exit_code == 1, res.output
    assert res.output.startswith("error: ") and "damaged" in res.output and str(path) in res.output
    assert "missing from index" in res.output
    res = CliRunner().invoke(main, ["history", "--ledger", str(path), "--format", "json"])
    assert res.exit_code == 1


def test_the_daemon_retries_exports_and_warns_once_per_episode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A judged experiment (real recordings) while the state dir is unusable: queued, on
    /metrics and /healthz, one warning for the episode however many cycles retry it, and in
    the ledger once the directory is back. "cannot write state" likewise warns once."""
    configure_logging(json_logs=True)
    adv = play("cpu-long-binds", "cpu-long-binds-after")
    assert adv.finished_experiments
    state = tmp_path / "state"
    state.write_text("x")
    clock = Clock()
    cfg = Config(listen="127.0.0.1:0", state_dir=str(state), interval_s=2.0)
    d = Daemon(cfg, load_rules(), advisor=adv, clock=clock)
    d.serve()
    try:
        capsys.readouterr()
        diag = adv.diagnose()
        for _ in range(6):  # what each cycle does after the evaluation
            clock.t += 2
            d._record_experiments()
            d._persist(diag)
        host, port = d.server.server_address[:2]
        text = requests.get(f"http://{host}:{port}/metrics", timeout=HANG_S).text
        health = requests.get(f"http://{host}:{port}/healthz", timeout=HANG_S).json()
        assert "vllm_advisor_ledger_pending 1.0" in text
        assert "vllm_advisor_ledger_write_failures_total 6.0" in text
        assert "vllm_advisor_state_write_ok 0.0" in text
        assert health["ledger_pending"] == 1 and health["ledger_ok"] is False and health["state_ok"] is False
        state.unlink()
        d._record_experiments()
        d._persist(diag)
        text = requests.get(f"http://{host}:{port}/metrics", timeout=HANG_S).text
        assert "vllm_advisor_ledger_pending 0.0" in text and "vllm_advisor_state_write_ok 1.0" in text
    finally:
        d.stop()
    rows = Ledger(state / "ledger.sqlite").list()
    assert len(rows) == 1 and rows[0]["knob"] == "max_num_seqs" and rows[0]["verdict"] == "keep"
    logs = [json.loads(ln) for ln in capsys.readouterr().err.splitlines() if ln.startswith("{")]
    events = [ln["event"] for ln in logs]
    assert events.count("cannot write the ledger") == 1, events
    assert events.count("cannot write state") == 1, events
    assert events.count("ledger written again") == 1 and events.count("state written again") == 1


def test_a_second_daemon_on_the_same_state_dir_refuses_to_start(tmp_path: Path) -> None:
    """Two ``vllm-advisor run`` processes, one state dir (a stand-in serves recorded real
    pages): the second exits 1 at once naming the first; each with its own dir runs."""
    pages = session_pages(FIXTURES / "sessions" / "cpu-healthy")
    state = tmp_path / "state"
    with serve(StandIn(pages)) as url:
        first = start_run(url, free_port(), "1s", state)
        try:
            # until the first holds the lock and has written its pid there (the file alone may be
            # there a moment before either)
            lock, deadline = state / "daemon.lock", time.monotonic() + 30
            while time.monotonic() < deadline and not (
                lock.exists() and lock.read_text().strip() == str(first.pid)
            ):
                time.sleep(0.1)
            second = start_run(url, free_port(), "1s", state)
            try:
                rc = second.wait(timeout=30)
                err = second.stderr.read() if second.stderr else ""
            finally:
                if second.poll() is None:
                    second.kill()
            assert rc == 1, err
            assert "another vllm-advisor daemon" in err and str(first.pid) in err and str(state) in err
            assert first.poll() is None
        finally:
            first.terminate()
            first.wait(timeout=30)
    assert os.path.exists(state)


def _observing(adv: Advisor) -> bool:
    exp = adv.experiment
    return exp is not None and exp.state == "observing" and exp.after_requests >= 10


def _mid_experiment(tmp_path: Path) -> tuple[Daemon, Config, Clock]:
    """A daemon that has published a cycle while it observes a real experiment (max_num_seqs
    6 -> 4, the recordings of tests/verify/test_live_experiment.py cut short in the after-window)."""
    adv = play("cpu-long-binds", "cpu-long-binds-after", until=_observing)
    clock = Clock()
    clock.t = adv.clock()
    cfg = Config(listen="127.0.0.1:0", state_dir=str(tmp_path / "state"), interval_s=2.0)
    d = Daemon(cfg, load_rules(), advisor=adv, clock=clock)
    diag = adv.diagnose()
    assert diag.experiment is not None and diag.experiment["state"] == "observing"
    d._record_experiments()  # what each cycle does after the evaluation
    d._persist(diag)
    return d, cfg, clock


def _events(err: str) -> list[str]:
    return [json.loads(ln)["event"] for ln in err.splitlines() if ln.startswith("{")]


def test_an_experiment_cut_short_by_a_kill_is_recorded_as_interrupted_at_the_next_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 34, G9: the daemon dies (SIGKILL, a crash: nothing of it runs after its last cycle)
    while an experiment is being observed. The next daemon on the state dir records it in the
    ledger as interrupted (inconclusive, saying why), with one warning, and only once (before:
    no row, no log line)."""
    configure_logging(json_logs=True)
    _, cfg, clock = _mid_experiment(tmp_path)
    ledger = tmp_path / "state" / "ledger.sqlite"
    assert (tmp_path / "state" / "experiment.json").exists()
    assert not ledger.exists() or not Ledger(ledger).list()  # nothing judged yet
    capsys.readouterr()
    clock.t += 30
    Daemon(cfg, load_rules(), advisor=Advisor(cfg, load_rules(), clock=clock), clock=clock)
    rows = Ledger(ledger).list()
    assert len(rows) == 1, rows
    r = rows[0]
    assert (r["knob"], r["old_value"], r["new_value"], r["verdict"]) == ("max_num_seqs", 6, 4, "inconclusive")
    assert r["reasons"][0].startswith("Interrupted: the daemon was killed or crashed while"), r["reasons"]
    assert "requests seen after the change" in r["reasons"][0]
    assert r["ended_at"] == pytest.approx(clock.t - 30)  # when it was last seen observing
    assert (
        _events(capsys.readouterr().err).count(
            "experiment interrupted by a restart; recorded as inconclusive"
        )
        == 1
    )
    assert not (tmp_path / "state" / "experiment.json").exists()
    Daemon(cfg, load_rules(), advisor=Advisor(cfg, load_rules(), clock=clock), clock=clock)
    assert len(Ledger(ledger).list()) == 1  # recorded once


def test_an_experiment_cut_short_by_a_stop_is_recorded_as_interrupted_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """G9: SIGTERM (``stop()``) while observing: the ledger has the interrupted experiment when
    the daemon has stopped, one warning says so, and the next start adds nothing."""
    configure_logging(json_logs=True)
    d, cfg, clock = _mid_experiment(tmp_path)
    capsys.readouterr()
    d.stop()
    ledger = tmp_path / "state" / "ledger.sqlite"
    rows = Ledger(ledger).list()
    assert len(rows) == 1 and rows[0]["verdict"] == "inconclusive", rows
    assert rows[0]["reasons"][0].startswith("Interrupted: the daemon stopped while"), rows[0]["reasons"]
    events = _events(capsys.readouterr().err)
    assert (
        events.count(
            "experiment interrupted: the daemon stopped while observing it; recorded as inconclusive"
        )
        == 1
    ), events
    assert not (tmp_path / "state" / "experiment.json").exists()
    Daemon(cfg, load_rules(), advisor=Advisor(cfg, load_rules(), clock=clock), clock=clock)
    assert len(Ledger(ledger).list()) == 1


def _sound(path: Path, n: int = 2) -> None:
    led = Ledger(path)
    for i in range(n):
        led.add(_record(i))


def test_a_sound_ledger_on_a_read_only_disk_is_read_and_never_called_damaged(tmp_path: Path) -> None:
    """Issue 34, G10: the ledger's directory mounted read-only (EROFS: root cannot write either).
    The daemon's check finds no damage, a new record waits in memory with the real reason, and
    ``history`` reads the ledger (text and JSON) (before: "damaged", and history exited 1)."""
    ledger = tmp_path / "state" / "ledger.sqlite"
    _sound(ledger)
    with read_only(ledger.parent):
        led = DurableLedger(ledger)
        assert led.damage == [], led.damage
        assert led.add(_record(9)) is False and led.pending == 1
        err = led.last_error or ""
        assert "damaged" not in err and str(ledger) in err and "read-only" in err, err
        res = CliRunner().invoke(main, ["history", "--ledger", str(ledger)])
        assert res.exit_code == 0, res.output
        assert res.output.count("KEEP") == 2
        res = CliRunner().invoke(main, ["history", "--ledger", str(ledger), "--format", "json"])
        assert res.exit_code == 0 and [r["reasons"] for r in json.loads(res.output)] == [["r1"], ["r0"]]
    assert led.flush() == 1 and len(Ledger(ledger).list()) == 3  # writable again: it lands


def test_a_sound_ledger_file_that_cannot_be_written_is_read_and_never_called_damaged(tmp_path: Path) -> None:
    """G10, the file alone read-only (``chattr +i``: root cannot write it) in a writable
    directory: read, not damaged, the record waits with SQLite's reason (a guard: this case
    was already right)."""
    ledger = tmp_path / "state" / "ledger.sqlite"
    _sound(ledger)
    with immutable(ledger):
        led = DurableLedger(ledger)
        assert led.damage == [] and led.add(_record(9)) is False
        assert "readonly" in (led.last_error or "") and "damaged" not in (led.last_error or "")
        res = CliRunner().invoke(main, ["history", "--ledger", str(ledger)])
        assert res.exit_code == 0 and res.output.count("KEEP") == 2, res.output
    assert led.flush() == 1


def test_a_damaged_ledger_on_a_read_only_disk_is_still_damaged(tmp_path: Path) -> None:
    """G10's other side: real damage is named as such where the file cannot be written."""
    ledger = tmp_path / "state" / "ledger.sqlite"
    _damage_index(ledger)
    with read_only(ledger.parent):
        assert DurableLedger(ledger).damage
        res = CliRunner().invoke(main, ["history", "--ledger", str(ledger)])
        assert res.exit_code == 1 and "damaged" in res.output and "missing from index" in res.output


def test_a_sound_ledger_on_a_full_disk_is_never_called_damaged(tmp_path: Path) -> None:
    """G10: the ledger's file system full (a tmpfs filled to ENOSPC): no damage found, the record
    waits with SQLite's own reason, history reads the ledger, and once there is room it lands."""
    state = tmp_path / "state"
    with tiny_fs(state, "512k"):
        ledger = state / "ledger.sqlite"
        _sound(ledger)
        fill(state)
        led = DurableLedger(ledger)
        assert led.damage == [], led.damage
        for i in range(3):  # several retries, each a failure, none "damaged"
            led.add(_record(10 + i))
            assert led.damage == [] and "damaged" not in (led.last_error or ""), led.last_error
        assert led.pending == 3 and led.failures >= 3
        res = CliRunner().invoke(main, ["history", "--ledger", str(ledger)])
        assert res.exit_code == 0 and res.output.count("KEEP") == 2, res.output
        for f in ("filler", "filler-tail"):
            (state / f).unlink()
        assert led.flush() == 3 and led.ok
        assert len(Ledger(ledger).list()) == 5
