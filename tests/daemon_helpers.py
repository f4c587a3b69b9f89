"""Helpers for tests that drive the daemon by hand: a settable clock, a daemon on a free
loopback port with a short scrape timeout, cycles at the clock's pace, its exported page."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import requests

from advisor.core.config import Config
from advisor.diagnose.ruleset import load_rules
from advisor.drive.daemon import Daemon
from tests.hang import HANG_S

RULES = load_rules()


class Clock:
    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def __call__(self) -> float:
        return self.t


class SteppedClock(Clock):
    """A wall clock that can be stepped (``offset``) while the monotonic one (``mono``, ``t``)
    runs on: what NTP stepping the system clock does, without touching the real one."""

    def __init__(self) -> None:
        super().__init__()
        self.offset = 0.0

    def __call__(self) -> float:
        return self.t + self.offset

    def mono(self) -> float:
        return self.t


def make(url: str, tmp_path: Path, clock: Clock, **kw: object) -> Daemon:
    settings: dict[str, object] = {"interval_s": 2.0, "scrape_timeout_s": 1.0, **kw}
    cfg = Config(
        vllm_url=url,
        listen="127.0.0.1:0",
        state_dir=str(tmp_path / "state"),
        **settings,
    )  # type: ignore[arg-type]
    mono = clock.mono if isinstance(clock, SteppedClock) else None
    return Daemon(cfg, RULES, clock=clock, monotonic=mono)


def run_cycles(d: Daemon, clock: Clock, n: int, step: float = 2.0) -> None:
    for _ in range(n):
        clock.t += step
        d.cycle()


def exported(d: Daemon) -> str:
    host, port = d.server.server_address[:2]
    return requests.get(f"http://{host}:{port}/metrics", timeout=HANG_S).text


def start_run(
    url: str, port: int, interval: str, state_dir: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[str]:
    """``vllm-advisor run`` (this venv's console script) against ``url``, listening on ``port``."""
    exe = Path(sys.executable).parent / "vllm-advisor"
    argv = [str(exe), "run", "--vllm-url", url, "--listen", f"127.0.0.1:{port}"]
    argv += ["--interval", interval, "--state-dir", str(state_dir)]
    return subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(env) if env is not None else None,
    )
