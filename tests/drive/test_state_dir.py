"""The daemon's state dir turned hostile (issue 34): links planted in it, a full disk at start.

Links (G12): every file the daemon keeps there (``daemon.lock``, ``diagnosis.json`` and its
``.tmp``, ``advice-history.json``, ``experiment.json``, the ledger and its ``-wal``/``-shm``)
replaced by a symbolic link to a file outside, as anyone who can write the directory could
plant: the daemon never writes through one, and names the link. The experiment and the advice
are real: recordings of a real vLLM CPU server replayed (tests/verify/test_live_experiment.py).

A full disk (G8) is a real tmpfs filled to ENOSPC (tests/mounts.py; skipped where ``mount`` is
not permitted).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.core.config import Config
from advisor.core.log import configure_logging
from advisor.diagnose.ruleset import load_rules
from advisor.drive.daemon import Daemon
from advisor.verify.ledger import ExperimentRecord, Ledger
from tests.daemon_helpers import Clock
from tests.promstack import free_port
from tests.verify.test_live_experiment import play

VICTIM_TEXT = "a file outside the state dir that the daemon must never touch\n"


def _victim(tmp_path: Path, name: str) -> Path:
    v = tmp_path / "outside" / name
    v.parent.mkdir(exist_ok=True)
    v.write_text(VICTIM_TEXT)
    return v


def _run(state: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "vllm-advisor"
    argv = [str(exe), "run", "--vllm-url", "http://127.0.0.1:9", "--listen", f"127.0.0.1:{free_port()}"]
    argv += ["--state-dir", str(state), "--interval", "1s", *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)  # a hang guard


def test_a_daemon_lock_link_is_refused_and_its_target_left_whole(tmp_path: Path) -> None:
    """G12: ``daemon.lock`` is a link to a file outside: ``run`` exits 1 with one ``error:`` line
    naming the link, and the file it points to keeps every byte (before: truncated to the
    daemon's pid)."""
    state = tmp_path / "state"
    state.mkdir()
    victim = _victim(tmp_path, "passwd")
    (state / "daemon.lock").symlink_to(victim)
    res = _run(state, "--run-seconds", "1")
    assert res.returncode == 1, res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, res.stderr
    assert str(state / "daemon.lock") in errors[0] and "symbolic link" in errors[0], errors
    assert str(victim) in errors[0]
    assert victim.read_text() == VICTIM_TEXT


def test_links_in_place_of_the_state_files_are_never_written_through(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """G12: diagnosis.json's temporary file, the advice history, the pending experiment and the
    ledger are links: each write is refused (one warning per episode naming the link, the
    ledger's record queued with the reason), every target keeps its bytes; the links removed,
    the next cycle writes everything."""
    configure_logging(json_logs=True)

    def observing(adv: object) -> bool:
        exp = getattr(adv, "experiment", None)
        return exp is not None and exp.state == "observing" and exp.after_requests >= 10

    adv = play("cpu-long-binds", "cpu-long-binds-after", until=observing)
    state = tmp_path / "state"
    state.mkdir()
    names = ("diagnosis.json.tmp", "advice-history.json", "experiment.json", "ledger.sqlite")
    victims = {n: _victim(tmp_path, n) for n in names}
    for n, v in victims.items():
        (state / n).symlink_to(v)
    clock = Clock()
    clock.t = adv.clock()
    cfg = Config(listen="127.0.0.1:0", state_dir=str(state), interval_s=2.0)
    d = Daemon(cfg, load_rules(), advisor=adv, clock=clock)
    capsys.readouterr()
    diag = adv.diagnose()
    for _ in range(3):
        d._record_experiments()
        d._persist(diag)
    # a judged experiment for the ledger, written while the ledger is a link
    assert d.ledger is not None
    d.ledger.add(ExperimentRecord(clock.t, "keep", "daemon", knob="max_num_seqs"))
    for n, v in victims.items():
        assert v.read_text() == VICTIM_TEXT, n
    assert d.state_ok is False
    led = d.ledger
    assert led is not None and led.pending == 1 and not led.damage
    assert str(state / "ledger.sqlite") in (led.last_error or "") and "symbolic link" in (
        led.last_error or ""
    )
    logs = [json.loads(ln) for ln in capsys.readouterr().err.splitlines() if ln.startswith("{")]
    warned = [ln for ln in logs if ln["event"] == "cannot write state"]
    assert len(warned) == 1 and "symbolic link" in warned[0]["error"], logs
    for n in names:
        (state / n).unlink()
    d._record_experiments()
    d._persist(diag)
    assert d.state_ok is True and led.pending == 0
    assert (state / "diagnosis.json").is_file() and (state / "experiment.json").is_file()
    assert len(Ledger(state / "ledger.sqlite").list()) == 1
    # the ledger's companions as links are refused as well
    (state / "ledger.sqlite-wal").unlink(missing_ok=True)
    (state / "ledger.sqlite-wal").symlink_to(victims["ledger.sqlite"])
    assert d.ledger is not None
    d.ledger._ledger = None  # opened afresh, as after a failure
    d.ledger.add(ExperimentRecord(clock.t, "keep", "daemon"))
    assert "ledger.sqlite-wal" in (d.ledger.last_error or "")
    assert victims["ledger.sqlite"].read_text() == VICTIM_TEXT
