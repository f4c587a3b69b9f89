"""What the daemon gives its pages (advisor/drive/daemon.py: ``charts``, ``history``): the window
is read under the daemon's lock when a page is asked for, never by the cycle; a cycle that holds
the lock too long leaves the page without charts rather than hanging it.

The daemon scrapes a stand-in serving pages recorded from a real vLLM server on an H200 (a GPU
cannot run here)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import requests

from advisor.cli.common import DEMO_SESSION
from advisor.drive import daemon as daemon_mod
from tests.daemon_helpers import Clock, make, run_cycles
from tests.hang import HANG_S
from tests.vllm_standin import StandIn, serve, session_pages


def test_a_page_asked_for_while_a_cycle_holds_the_window_comes_without_charts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(daemon_mod, "PAGE_WAIT_S", 0.2)
    clock = Clock()
    standin = StandIn(session_pages(DEMO_SESSION))
    with serve(standin) as url:
        d = make(url, tmp_path, clock)
        run_cycles(d, clock, 12)
    host, port = d.serve()
    try:
        base = f"http://{host}:{port}/"
        assert d.charts() is not None
        assert requests.get(base, timeout=HANG_S).text.count('<figure class="chart"') == 6
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with d._lock:  # a cycle stuck inside the lock
                held.set()
                release.wait(10)

        th = threading.Thread(target=hold)
        th.start()
        held.wait(5)
        try:
            assert d.charts() is None
            page = requests.get(base, timeout=HANG_S)
            assert page.status_code == 200 and "<figure" not in page.text and "vLLM is <b>up</b>" in page.text
        finally:
            release.set()
            th.join(5)
        assert requests.get(base, timeout=HANG_S).text.count('<figure class="chart"') == 6
    finally:
        d.stop()
