"""Shared fixtures: real vLLM servers (tests/realvllm.py) and their wall times.

Each real-vLLM part (server start, load) records its wall time; the terminal summary
prints one line per part, so slow parts show up in every CI log without ``-s``; likewise the
paths of the screenshots the browser tests keep (test-artifacts/).
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
        kwargs.setdefault("core", realvllm.OWN_CORE)
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
    with realvllm.VllmServer(log_path=log, core=realvllm.SHARED_CORE) as server:
        yield server


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make test`` runs a worker more than the cores, ``--dist
    loadgroup``) the tests that share the session's vLLM server run on one worker (one server,
    started once), and those that start servers of their own on another, one after the other, so
    at most two servers run at a time, each on a core of its own (``realvllm.SHARED_CORE`` and
    ``OWN_CORE``). The long tests run first: the real-vLLM ones (the long pole), then those with a
    real Prometheus and those marked ``slow``, then the rest, which the workers share out as each
    gets free, so that all end together instead of one waiting on a long test handed out last."""
    for item in items:
        if "vllm_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("vllm-shared"))
        elif item.get_closest_marker("realvllm") is not None:
            item.add_marker(pytest.mark.xdist_group("vllm-own"))
    items.sort(key=_run_order)


def _run_order(item: pytest.Item) -> int:
    if item.get_closest_marker("realvllm") is not None:
        return 0
    if item.get_closest_marker("prometheus") is not None or item.get_closest_marker("slow") is not None:
        return 1
    return 2


def pytest_runtest_setup(item: pytest.Item) -> None:
    realvllm.CONTEXT = item.nodeid


_reported = 0  # realvllm.TIMINGS already attached to a report (this process)
_timings: list[tuple[str, float]] = []  # every process's timings, as the reports bring them


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Attach the real-vLLM wall times a test recorded to its teardown report: under xdist they
    travel with the report from the worker to the process that prints the summary."""
    global _reported
    outcome = yield
    report = outcome.get_result()
    if report.when == "teardown" and len(realvllm.TIMINGS) > _reported:
        for what, seconds in realvllm.TIMINGS[_reported:]:
            report.user_properties.append(("realvllm_timing", [what, seconds]))
        _reported = len(realvllm.TIMINGS)


_screenshots: list[str] = []  # what the browser tests saved (record_property("screenshot", path))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for name, value in report.user_properties:
        if name == "realvllm_timing":
            _timings.append((str(value[0]), float(value[1])))
        elif name == "screenshot" and report.when == "call" and str(value) not in _screenshots:
            _screenshots.append(str(value))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if _screenshots:
        terminalreporter.section("screenshots (tests/browser.py)")
        for path in _screenshots:
            terminalreporter.write_line(path)
    if not _timings:
        return
    terminalreporter.section("real vLLM wall times")
    for what, seconds in _timings:
        terminalreporter.write_line(f"{seconds:7.1f} s  {what}")
    total = sum(s for _, s in _timings)
    terminalreporter.write_line(f"{total:7.1f} s  total")
