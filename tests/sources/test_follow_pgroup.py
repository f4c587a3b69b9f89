"""Issue 23, class 6: ``--log-cmd`` runs in its own process group and ends with it: a pipeline's
children (``sh -c 'journalctl -f | grep vllm'``) do not outlive the follower or the daemon.

The pipeline here is ``sleep | cat`` under ``sh``: real processes, standing in for
``journalctl``/``docker logs`` (not installed here), with the same shape (a shell whose
children hold the pipe).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from advisor.sources.follow import CommandFollower
from tests.promstack import free_port

PIPELINE = ["sh", "-c", "echo ready; sleep 300 | cat"]


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def test_close_ends_the_whole_pipeline() -> None:
    f = CommandFollower(PIPELINE, poll_interval=0.05, kill_timeout=2.0)
    gen = f.lines()
    assert next(gen) == "ready"
    proc = f._proc
    assert proc is not None
    assert os.getpgid(proc.pid) == proc.pid  # its own group
    children: list[int] = []
    deadline = time.monotonic() + 10
    while len(children) < 2 and time.monotonic() < deadline:  # sh starts sleep and cat
        children = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        time.sleep(0.02)
    try:
        assert len(children) >= 2, children  # sleep and cat
        f.close()
        gen.close()
        deadline = time.monotonic() + 10
        while _alive(children) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _alive(children) == []
    finally:
        for pid in _alive(children):
            os.kill(pid, signal.SIGKILL)


def test_sigterm_to_the_daemon_ends_its_log_commands_children(tmp_path: Path) -> None:
    exe = str(Path(sys.executable).parent / "vllm-advisor")
    cmd = "sh -c 'echo ready; sleep 300 | cat'"
    args = ["--vllm-url", f"http://127.0.0.1:{free_port()}", "--listen", f"127.0.0.1:{free_port()}"]
    args += ["--log-cmd", cmd, "--state-dir", str(tmp_path / "state"), "--interval", "1s"]
    proc = subprocess.Popen(
        [exe, "run", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    kids: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            kids = [
                c.pid
                for c in psutil.Process(proc.pid).children(recursive=True)
                if c.name() in ("sleep", "cat")
            ]
            if len(kids) >= 2:
                break
            time.sleep(0.1)
        assert len(kids) >= 2, "the log command's pipeline never started"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _alive(kids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _alive(kids) == [], proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in _alive(kids):
            os.kill(pid, signal.SIGKILL)
