"""The daemon beside a REAL vLLM CPU server, scraped by a REAL Prometheus.

Forced preemption where max_num_seqs binds (KV 3,072 tokens, max_num_seqs 10,
128-in/256-out requests at concurrency 32): the recommendation (more KV memory, since its size
is fixed in bytes) shows up in Prometheus as ``vllm_advisor_recommendation_info`` with knob
kv_cache_memory_bytes; stopping vLLM makes
``vllm_advisor_up`` 0 and withdraws it; restarting vLLM with the recommended value is
noticed (the new knob value with its source, a knob change counted). The daemon's page says
the same at each step (the change beside charts of the window; vLLM down with the outage shaded;
the restart marked), and its history the advice as given, then withdrawn.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import requests

from advisor.core.config import Config
from advisor.diagnose.ruleset import load_rules
from advisor.drive.daemon import Daemon
from tests import realvllm
from tests.hang import HANG_S
from tests.promstack import prometheus, query, wait_until

KV_BYTES = 25165824  # 3,072 tokens = 24 blocks of 128: 8 requests of 384 tokens fit


def _text(page: str) -> str:
    """The page's words without its markup (what a failed check prints)."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))[:3000]


def _points(page: str) -> list[int]:
    """The points of every line the page's charts draw."""
    return [int(x) for x in re.findall(r'<path class="series" [^>]*data-points="(\d+)"', page)]


@pytest.mark.realvllm
@pytest.mark.prometheus
def test_daemon_with_real_vllm_and_prometheus(tmp_path: Path) -> None:
    server = realvllm.VllmServer(
        max_num_seqs=10, kv_cache_memory_bytes=KV_BYTES, log_path=tmp_path / "vllm.log"
    )
    server.start()
    daemon = None
    try:
        cfg = Config(
            vllm_url=server.url,
            listen="127.0.0.1:0",
            interval_s=1.0,
            log_file=str(server.log_path),
            state_dir=str(tmp_path / "state"),
            window_s=60.0,
        )
        daemon = Daemon(cfg, load_rules())
        host, port = daemon.start()
        # the daemon found the real process by its port and read its command line
        assert daemon.advisor.engine.source("max_num_seqs") == "cmdline"
        with prometheus(tmp_path, {"vllm-advisor": f"{host}:{port}"}) as (prom, proc):
            # from threads of the test (no benchmark start-up); stopped once the advice is seen
            load = realvllm.RequestLoad(
                server.url, input_len=128, output_len=256, num_prompts=64, concurrency=32, timeout_s=240
            )
            rec = wait_until(
                "the recommendation in Prometheus",
                lambda: query(prom, 'vllm_advisor_recommendation_info{knob="kv_cache_memory_bytes"} == 1'),
                180,
                [proc],
            )
            labels = rec[0]["metric"]
            assert labels["rule"] == "kv-preemption-seqs-bind"
            # the cap (10) binds and the cache (8 requests) is full: more KV memory first
            assert labels["direction"] == "increase" and labels["current"] == str(KV_BYTES)
            proposed = int(labels["proposed"])
            assert proposed == KV_BYTES * 3 // 2
            page = requests.get(f"http://{host}:{port}/", timeout=HANG_S).text
            assert f"--kv-cache-memory-bytes {KV_BYTES} -&gt; {proposed}" in page  # the page says it too
            assert _points(page) and min(_points(page)) >= 2 and len(_points(page)) >= 6
            load.kill()  # the rest of the load is not needed: the server stops under it

            server.stop()
            load.wait(check=False)  # the requests in flight failed with the server
            wait_until("vllm_advisor_up == 0", lambda: query(prom, "vllm_advisor_up == 0"), 30, [proc])
            wait_until(
                "the advice withdrawn",
                lambda: not query(prom, "vllm_advisor_recommendation_info"),
                30,
                [proc],
            )
            status = query(prom, 'vllm_advisor_status{status="insufficient-data"} == 1')
            assert status, "a down server must not look healthy or advised"
            # the page is drawn by the daemon's own cycle, which may come after Prometheus's scrape
            last: list[str] = []

            def page_down() -> bool:
                last[:] = [requests.get(f"http://{host}:{port}/", timeout=HANG_S).text]
                return "vLLM is <b>DOWN</b>" in last[0] and 'class="outage"' in last[0]

            try:
                wait_until("the page says vLLM is down", page_down, 30, [proc])
            except AssertionError as e:
                raise AssertionError(
                    f"{e}; the page's text:\n{_text(last[0]) if last else '(none)'}"
                ) from None
            assert 'id="change"' not in last[0]

            server.restart(kv_cache_memory_bytes=proposed)
            wait_until("vllm_advisor_up == 1 again", lambda: query(prom, "vllm_advisor_up == 1"), 60, [proc])
            knob = wait_until(
                "the new KV size in Prometheus",
                lambda: query(
                    prom, f'vllm_advisor_engine_knob{{knob="kv_cache_memory_bytes"}} == {proposed}'
                ),
                60,
                [proc],
            )
            assert knob[0]["metric"]["source"] in ("cmdline", "log")
            changes = wait_until(
                "the knob change counted",
                lambda: query(prom, "vllm_advisor_knob_changes_total >= 1"),
                30,
                [proc],
            )
            assert changes
        change = daemon.advisor.changes[-1]
        assert (change.knob, change.old, change.new) == ("kv_cache_memory_bytes", KV_BYTES, proposed)
        page = requests.get(f"http://{host}:{port}/", timeout=HANG_S).text
        assert 'class="mark restart"' in page  # the restart with the new value, on the charts
        kv = [
            a
            for a in daemon.history().advice
            if a.change.startswith(f"--kv-cache-memory-bytes {KV_BYTES} -> {proposed}")
        ]
        assert kv and all(a.ended is not None and a.end_reason for a in kv), kv  # given, then withdrawn
    finally:
        if daemon is not None:
            daemon.stop()
        server.stop()
