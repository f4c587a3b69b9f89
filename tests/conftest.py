"""Shared fixtures: real vLLM servers (tests/realvllm.py) and their wall times.

Each real-vLLM part (server start, load) records its wall time; the terminal summary
prints one line per part, so slow parts show up in every CI log without ``-s``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import readguard, realvllm

readguard.install()


@pytest.fixture(autouse=True)
def _reads_stay_in_the_repository() -> Iterator[None]:
    """Fails a test that opened a file outside the repository (tests/readguard.py says what is
    allowed): everything a test reads is committed under tests/fixtures/ or the package."""
    start = len(readguard.OUTSIDE)
    yield
    outside = sorted(set(readguard.OUTSIDE[start:]))
    if outside:
        pytest.fail(f"opened outside the repository: {', '.join(outside[:5])}")


@pytest.fixture
def vllm_server_factory(tmp_path: Path) -> Iterator[Callable[..., realvllm.VllmServer]]:
    """Start real vLLM servers (``factory(max_num_seqs=..., ...)``, VllmServer's arguments);
    all are stopped when the test ends. Fails (never skips) when the venv is missing."""
    servers: list[realvllm.VllmServer] = []

    def make(**kwargs: Any) -> realvllm.VllmServer:
        kwargs.setdefault("log_path", tmp_path / f"vllm-server-{len(servers)}.log")
        server = realvllm.VllmServer(**kwargs)
        servers.append(server)
        return server.start()

    yield make
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[realvllm.VllmServer]:
    """One real vLLM server with the default knobs (1 GiB KV), shared by the whole test
    session: use it when a test only needs *a* running server (each start costs ~45 s)."""
    log = tmp_path_factory.mktemp("vllm-shared") / "server.log"
    with realvllm.VllmServer(log_path=log) as server:
        yield server


def pytest_runtest_setup(item: pytest.Item) -> None:
    realvllm.CONTEXT = item.nodeid


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not realvllm.TIMINGS:
        return
    terminalreporter.section("real vLLM wall times")
    for what, seconds in realvllm.TIMINGS:
        terminalreporter.write_line(f"{seconds:7.1f} s  {what}")
    total = sum(s for _, s in realvllm.TIMINGS)
    terminalreporter.write_line(f"{total:7.1f} s  total")
