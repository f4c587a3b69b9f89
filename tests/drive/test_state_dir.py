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
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from advisor.core.config import Config
from advisor.core.log import configure_logging
from advisor.diagnose.ruleset import load_rules
from advisor.drive.daemon import Daemon
from advisor.verify.ledger import ExperimentRecord, Ledger
from tests.daemon_helpers import Clock, start_run
from tests.hang import HANG_S
from tests.mounts import fill, tiny_fs
from tests.paths import FIXTURES
from tests.promstack import free_port
from tests.verify.test_live_experiment import play
from tests.vllm_standin import StandIn, serve, session_pages

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


def _wait_for(what: str, check: Callable[[], bool], limit_s: float = 120.0) -> None:
    """Poll ``check`` until it holds (a hang guard, not a timing assertion)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within the {limit_s:.0f} s hang guard")


def test_a_full_state_dir_at_start_runs_names_it_and_writes_once_there_is_room(tmp_path: Path) -> None:
    """Issue 34, G8: the state dir is a tmpfs filled to ENOSPC before ``run`` starts (a stand-in
    serves recorded real pages). The daemon starts and serves; the condition is named once in
    its log (the file and ENOSPC), on /metrics (``vllm_advisor_state_write_ok 0``) and in
    /healthz (``state_ok`` false, ``state_error``); once there is room, it writes its state and
    says so (before: exit 1, ``OSError: [Errno 28]``, before listening)."""
    pages = session_pages(FIXTURES / "sessions" / "cpu-healthy")
    state = tmp_path / "state"
    port = free_port()
    with tiny_fs(state, "64k"), serve(StandIn(pages)) as url:
        fill(state)
        proc = start_run(url, port, "1s", state)
        base = f"http://127.0.0.1:{port}"
        try:

            def health() -> dict[str, Any]:
                if proc.poll() is not None:
                    raise AssertionError(f"the daemon exited {proc.returncode}: {proc.communicate()[1]}")
                try:
                    body: dict[str, Any] = requests.get(f"{base}/healthz", timeout=HANG_S).json()
                    return body
                except requests.RequestException:
                    return {}

            _wait_for("state_ok false on /healthz", lambda: health().get("state_ok") is False)
            h = health()
            assert "No space left on device" in str(h.get("state_error")) and str(state) in str(
                h["state_error"]
            )
            assert "vllm_advisor_state_write_ok 0.0" in requests.get(f"{base}/metrics", timeout=HANG_S).text
            t0 = float(h["last_scrape_t"])
            # three more cycles, each failing to write: still one warning (below)
            _wait_for("three more cycles", lambda: float(health().get("last_scrape_t") or 0) >= t0 + 3)
            for f in ("filler", "filler-tail"):
                (state / f).unlink()
            _wait_for("state_ok true once there is room", lambda: health().get("state_ok") is True)
            assert (state / "diagnosis.json").is_file()
        finally:
            proc.terminate()
            rc = proc.wait(timeout=60)
        err = proc.stderr.read() if proc.stderr else ""
    assert rc == 0, err
    logs = [json.loads(ln) for ln in err.splitlines() if ln.startswith("{")]
    events = [ln["event"] for ln in logs]
    assert events.count("cannot write state") == 1, events
    (warned,) = [ln for ln in logs if ln["event"] == "cannot write state"]
    assert "No space left on device" in warned["error"] and str(state) in warned["error"]
    assert events.count("state written again") == 1, events
    assert "Errno 28" not in "".join(ln for ln in err.splitlines() if ln.startswith("error:"))
