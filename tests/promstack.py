"""Real Prometheus and Alertmanager (Debian's packages) started by a test: each on a free loopback
port, with its own config file and data directory, never the package's defaults (no 9090, 9093
or 9094, no /etc/prometheus, no /var/lib/prometheus), so that the tests run beside a Prometheus
and an Alertmanager the host already runs as services (tests/test_host_services.py proves it).
Every test that starts either binary builds its command line here."""

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

from tests.hang import HANG_S


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate a server process; kill it if it has not ended within 10 s."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


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


def prometheus_argv(config: Path, data: Path, port: int, lookback: str = "10s") -> list[str]:
    """Prometheus's command line: this config, this data dir, this loopback port."""
    exe = shutil.which("prometheus")
    assert exe, "prometheus missing: run `make system-deps` (Debian's prometheus package)"
    return [
        exe,
        f"--config.file={config}",
        f"--storage.tsdb.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        f"--query.lookback-delta={lookback}",
    ]


def alertmanager_argv(config: Path, data: Path, port: int) -> list[str]:
    """Alertmanager's command line: this config, this data dir, this loopback port, and no
    cluster listener (its default, 9094, is the host's Alertmanager's)."""
    exe = shutil.which("prometheus-alertmanager")
    assert exe, "prometheus-alertmanager missing: run `make system-deps`"
    return [
        exe,
        f"--config.file={config}",
        f"--storage.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
    ]


@contextmanager
def alertmanager(tmp: Path, config: dict[str, Any]) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Run Alertmanager with ``config``; yields (host:port, process)."""
    path = tmp / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    log = (tmp / "alertmanager.log").open("wb")
    proc = subprocess.Popen(alertmanager_argv(path, tmp / "am", port), stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(
            "alertmanager ready",
            lambda: requests.get(f"http://127.0.0.1:{port}/-/ready", timeout=1).ok,
            30,
            [proc],
        )
        yield f"127.0.0.1:{port}", proc
    finally:
        stop(proc)
        log.close()


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
        prometheus_argv(cfg_path, tmp / "tsdb", port), stdout=log, stderr=subprocess.STDOUT
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until("prometheus ready", lambda: requests.get(f"{base}/-/ready", timeout=1).ok, 30, [proc])
        yield base, proc
    finally:
        stop(proc)
        log.close()


def query(base: str, expr: str) -> list[dict[str, Any]]:
    r = requests.get(f"{base}/api/v1/query", params={"query": expr}, timeout=HANG_S)
    r.raise_for_status()
    body = r.json()
    assert body["status"] == "success", body
    return list(body["data"]["result"])
