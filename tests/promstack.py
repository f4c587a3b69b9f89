"""Real Prometheus (Debian's `prometheus` package) started by a test on a free loopback port."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests
import yaml


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


def wait_until(
    what: str,
    fn: Callable[[], Any],
    timeout: float,
    procs: Sequence[subprocess.Popen[bytes]] = (),
    every: float = 0.5,
) -> Any:
    """Poll ``fn`` until it returns something truthy; fail if a watched process dies."""
    deadline = time.monotonic() + timeout
    last_err: Exception | None = None
    while time.monotonic() < deadline:
        for p in procs:
            assert p.poll() is None, f"{p.args} exited with {p.returncode} while waiting for {what}"
        try:
            v = fn()
            if v:
                return v
        except requests.RequestException as e:
            last_err = e
        time.sleep(every)
    raise AssertionError(
        f"timed out after {timeout:.0f}s waiting for {what}" + (f" ({last_err})" if last_err else "")
    )


@contextmanager
def prometheus(
    tmp: Path,
    jobs: dict[str, str],
    rule_files: Sequence[Path] = (),
    scrape_interval: str = "1s",
    scrape_configs: Sequence[dict[str, Any]] = (),
    alertmanager: str | None = None,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Run Prometheus scraping ``jobs`` (job name -> host:port) and ``scrape_configs`` (whole
    jobs), sending alerts to ``alertmanager`` (host:port) if given; yields (base URL, process)."""
    exe = shutil.which("prometheus")
    assert exe, "prometheus missing: run `make system-deps` (Debian's prometheus package)"
    port = free_port()
    cfg = {
        "global": {
            "scrape_interval": scrape_interval,
            "evaluation_interval": scrape_interval,
            "scrape_timeout": scrape_interval,
        },
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [{"job_name": j, "static_configs": [{"targets": [t]}]} for j, t in jobs.items()]
        + list(scrape_configs),
    }
    if alertmanager:
        cfg["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    cfg_path = tmp / "prometheus.yml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    log = (tmp / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            exe,
            f"--config.file={cfg_path}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--query.lookback-delta=10s",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until("prometheus ready", lambda: requests.get(f"{base}/-/ready", timeout=1).ok, 30, [proc])
        yield base, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        log.close()


def query(base: str, expr: str) -> list[dict[str, Any]]:
    r = requests.get(f"{base}/api/v1/query", params={"query": expr}, timeout=5)
    r.raise_for_status()
    body = r.json()
    assert body["status"] == "success", body
    return list(body["data"]["result"])
