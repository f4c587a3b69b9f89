"""The daemon beside a REAL vLLM CPU server, scraped by a REAL Prometheus, in a closed loop: its
advice, the server stopped and restarted with the proposed value under the same load, and the
daemon's own before/after verdict in the ledger; then the opposite change, judged revert.

KV cache 3,072 tokens (24 blocks of 128), max_num_seqs 6, MIN_REQUESTS + 30 requests of 384 in /
384 out, all sent at once: six prompts fill the cache at admission and then grow, so the batch
sits at the cap while vLLM preempts and recomputes long prefills. The cache holds 4 such requests
and its size is fixed in bytes, so the advice is more KV memory first (24 -> 36 MiB: 36 blocks
for the capped batch's six requests of 6 blocks, less V1's null block).

1. The advice: in Prometheus as ``vllm_advisor_recommendation_info`` with knob
   kv_cache_memory_bytes, and on the daemon's page beside charts of the window.
2. vLLM stopped: ``vllm_advisor_up`` 0, the advice withdrawn (a down server is neither healthy
   nor advised), the page says vLLM is down with the outage shaded.
3. vLLM started with the proposed value: noticed (the new knob value with its source, a knob
   change counted, the restart marked on the charts, the advice in the history as given, then
   withdrawn); the same load preempts far less, at no cost in throughput or tail latency: keep,
   and the prediction made at the change is checked against the after-window.
4. Back to 24 MiB: preemption and the TPOT tail come back: revert.

(Lowering the cap instead, 6 -> 4, was this loop before the H200 showed that a cut cap costs
throughput where memory could be given: docs/validation.md.)

One server, restarted twice, and three loads of one size, each longer than the advice needs.
The advice is given once the KV rule's conditions have held for its ``for:`` (20 s) in a window
of ``min_window`` (20 s), and it must be given while the server is loaded: on this 2-core
machine beside other work each of the daemon's cycles stretches to seconds (a cycle measured
4-8 s of wall time for 0.01-0.16 s of its thread's CPU: the fetch, the diagnosis and the state
write each waiting for a core), so the first advising diagnosis came 24-39 s into the load
(ten runs beside two busy loops). The load of MIN_REQUESTS + 6 requests this test once sent
lasted 27-31 s, and three make test runs of six timed out waiting for the advice (the load had
ended first; an idle server is not advised); with MIN_REQUESTS + 18 the advice came 0.6 s before
the end in one of ten. Five batches (max_num_seqs) more than MIN_REQUESTS give it ~10 s more
than that. Every load is as long as the first, as the experiment compares windows of comparable
request counts (live_experiment: within 15%), and each holds more than the MIN_REQUESTS a
verdict needs. The
requests come from threads of the test (realvllm.RequestLoad: what ``vllm bench serve`` sends,
without its ~10 s start-up and its initial test request); the verdict reads the server's side
only. This was two tests, the daemon's (two starts, its own load) and the loop's (three
starts): 270 s of a make test's real-vLLM time, the same checks now in one.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from advisor.core import names
from advisor.core.config import Config
from advisor.diagnose.ruleset import load_rules
from advisor.drive.daemon import Daemon
from advisor.verify import live_experiment
from advisor.verify.ledger import Ledger
from tests import realvllm
from tests.hang import HANG_S
from tests.promstack import prometheus, query, wait_until

KV_BYTES = 25165824
MAX_NUM_SEQS = 6
PROMPT_LEN = OUTPUT_LEN = 384
NUM_PROMPTS = live_experiment.MIN_REQUESTS + 5 * MAX_NUM_SEQS  # see the module docstring
CONCURRENCY = 64  # more than NUM_PROMPTS: every request is sent at once, most of them wait


def _finished(daemon: Daemon) -> float:
    """Requests finished, as the last page the daemon read says."""
    latest = daemon.advisor.window.latest
    return (latest.total(names.REQUEST_SUCCESS) or 0.0) if latest is not None else 0.0


def _text(page: str) -> str:
    """The page's words without its markup (what a failed check prints)."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))[:3000]


def _points(page: str) -> list[int]:
    """The points of every line the page's charts draw."""
    return [int(x) for x in re.findall(r'<path class="series" [^>]*data-points="(\d+)"', page)]


def _page_until(
    url: str, what: str, shows: Callable[[str], bool], proc: subprocess.Popen[bytes] | None
) -> str:
    """The daemon's page at ``url``, asked again until ``shows`` holds of it (30 s): the page is
    drawn by the daemon's own cycle, and drawn without the window's charts while a cycle holds
    the window for longer than a page waits. A failure prints the last page's words."""
    last: list[str] = []

    def ok() -> bool:
        last[:] = [requests.get(url, timeout=HANG_S).text]
        return shows(last[0])

    try:
        wait_until(what, ok, 30, [proc] if proc is not None else [])
    except AssertionError as e:
        raise AssertionError(f"{e}; the page's text:\n{_text(last[0]) if last else '(none)'}") from None
    return last[0]


def _load(server: realvllm.VllmServer) -> float:
    """Run the load; returns the share of a core the server got over it (its CPU seconds per
    second of the load)."""
    cpu0, t0 = server.cpu_seconds(), time.monotonic()
    _requests(server).wait()
    return (server.cpu_seconds() - cpu0) / max(time.monotonic() - t0, 1e-9)


def _kv_findings(daemon: Daemon) -> str:
    """The daemon's status and its KV rules' conditions now: what a failed wait shows."""
    d = daemon.state().diagnosis
    if d is None:
        return "none yet"
    rows = [f"{d.status}: {d.reason}"]
    for f in d.findings:
        if str(f["rule"]).startswith("kv-"):
            checks = ", ".join(
                f"{c['signal']} {c['op']} {c['threshold']} ({c['value']}: {c['ok']})"
                for c in f.get("checks", [])
            )
            rows.append(f"{f['rule']} [{f['state']}]: {checks}")
    return "\n".join(rows)


class _Timeline:
    """The daemon's diagnosis at every cycle while the first load runs (and every 2 s while no
    cycle ends, with its age): what a missed advice shows, where the last state alone says only
    that the load ended."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon, self._stop = daemon, threading.Event()
        self.rows: list[str] = []
        self._seen: float | None = None
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t0 = time.monotonic()
        self._t.start()

    def _run(self) -> None:
        last = 0.0
        while not self._stop.wait(0.25):
            d = self.daemon.state().diagnosis
            now = time.monotonic()
            if d is None or (d.at == self._seen and now - last < 2.0):
                continue
            self._seen, last = d.at, now
            r = d.recommendation
            what = f"{r.rule} {r.change}" if r is not None else d.reason[:160]
            dur = self.daemon.cycle_duration_s
            self.rows.append(
                f"{now - self._t0:6.1f}s (cycle {dur or 0:.1f}s, diagnosis of {time.time() - d.at:.1f}s ago) "
                f"{d.status} gate={d.gate}: {what}"
            )

    def stop(self) -> str:
        self._stop.set()
        self._t.join(2)
        return "\n".join(self.rows[-80:])


def _requests(server: realvllm.VllmServer) -> realvllm.RequestLoad:
    return realvllm.RequestLoad(server.url, PROMPT_LEN, OUTPUT_LEN, NUM_PROMPTS, CONCURRENCY, timeout_s=400)


@pytest.mark.realvllm
@pytest.mark.prometheus
def test_daemon_advises_a_real_server_and_judges_the_change_keep_then_revert(tmp_path: Path) -> None:
    server = realvllm.VllmServer(
        max_num_seqs=MAX_NUM_SEQS,
        kv_cache_memory_bytes=KV_BYTES,
        log_path=tmp_path / "vllm.log",
        core=realvllm.OWN_CORE,
    )
    server.start()
    ledger = tmp_path / "ledger.sqlite"
    cfg = Config(
        vllm_url=server.url,
        listen="127.0.0.1:0",
        interval_s=1.0,
        log_file=str(server.log_path),
        state_dir=str(tmp_path / "state"),
        ledger_path=str(ledger),
    )
    daemon = Daemon(cfg, load_rules())
    try:
        host, port = daemon.start()
        # the daemon found the real process by its port and read its command line
        assert daemon.advisor.engine.source("max_num_seqs") == "cmdline"
        with prometheus(tmp_path, {"vllm-advisor": f"{host}:{port}"}) as (prom, proc):
            # 1. the advice, in Prometheus and on the page, while the load runs
            cpu0, t0 = server.cpu_seconds(), time.monotonic()
            timeline = _Timeline(daemon)
            load = _requests(server)
            try:
                rec = wait_until(
                    "the recommendation in Prometheus",
                    lambda: query(
                        prom, 'vllm_advisor_recommendation_info{knob="kv_cache_memory_bytes"} == 1'
                    ),
                    300,
                    [proc],
                )
            except AssertionError as e:
                raise AssertionError(
                    f"{e}; the daemon's diagnosis then: {_kv_findings(daemon)}\n"
                    f"its diagnosis at each cycle of the load:\n{timeline.stop()}"
                ) from None
            timeline.stop()
            # the daemon's state at a cycle that advises: the KV advice can be withdrawn the next
            # cycle and given again the one after, where the predicted ITL p95 sits at its target
            # (make test: 101.2 ms predicted against 100 ms, one cycle after the advice); the
            # flapping is the advisor's, named in the closing note of 2026-12-05, not this test's
            advised = wait_until(
                "the daemon's own state advising",
                lambda: (d := daemon.state().diagnosis) is not None and d.recommendation is not None and d,
                60,
                [proc],
            )
            d = advised
            assert d.recommendation is not None
            labels = rec[0]["metric"]
            assert labels["rule"] == d.recommendation.rule
            # the cap (6) binds and the cache (4 requests) is full: more KV memory first; +50%:
            # 4,608 tokens hold 6 requests of 767; the device's free memory is unknown on a CPU
            # server, so the model goes no further than the rule's step (issue 13)
            assert labels["direction"] == "increase" and labels["current"] == str(KV_BYTES)
            proposed = int(labels["proposed"])
            assert proposed == KV_BYTES * 3 // 2 == d.recommendation.proposed
            pred = d.recommendation.predicted
            assert pred is not None and pred["knob"] == "kv_cache_memory_bytes"
            assert pred["predicted"]["preemptions_per_second"] < pred["measured"]["preemptions_per_second"]
            # the page says it too, beside the window's charts. A page waits PAGE_WAIT_S for the
            # cycle to let go of the window and is drawn without its charts otherwise (saying so:
            # page.CHARTS_LATE); beside other work a cycle held it longer once in sixteen runs
            # alone, so the page is asked again until it shows both (the advice can also be
            # withdrawn for a cycle and given again: the comment above)
            page = _page_until(
                f"http://{host}:{port}/",
                "the page with the advice and its charts",
                lambda text: (
                    f"--kv-cache-memory-bytes {KV_BYTES} -&gt; {proposed}" in text and bool(_points(text))
                ),
                proc,
            )
            assert min(_points(page)) >= 2 and len(_points(page)) >= 6
            load.wait()
            share_before = (server.cpu_seconds() - cpu0) / max(time.monotonic() - t0, 1e-9)
            # stopped only once the daemon has read a page with every request of the load finished:
            # the loaded server's pages can miss their deadline, and stopped before such a page
            # the before-window counts fewer requests than were sent (a make test counted 18 of 26:
            # "no baseline")
            wait_until("the whole load read by the daemon", lambda: _finished(daemon) >= NUM_PROMPTS, 30)

            # 2. vLLM stopped: down, the advice withdrawn, the page says so
            server.stop()
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
            page = _page_until(
                f"http://{host}:{port}/",
                "the page says vLLM is down",
                lambda text: "vLLM is <b>DOWN</b>" in text and 'class="outage"' in text,
                proc,
            )
            assert 'id="change"' not in page

            # 3. follow the advice: start with the proposed value, noticed, the same load
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
            wait_until(
                "the knob change counted",
                lambda: query(prom, "vllm_advisor_knob_changes_total >= 1"),
                30,
                [proc],
            )
        wait_until("the experiment started", lambda: daemon.advisor.experiment is not None, 60)
        assert daemon.state().diagnosis.status == "insufficient-data"  # type: ignore[union-attr]
        change = daemon.advisor.changes[-1]
        assert (change.knob, change.old, change.new) == ("kv_cache_memory_bytes", KV_BYTES, proposed)
        # the restart with the new value, on the charts (asked again while the page is drawn
        # without them: above)
        _page_until(
            f"http://{host}:{port}/",
            "the restart marked on the page's charts",
            lambda t: 'class="mark restart"' in t,
            None,
        )
        # the KV advice from the old value, given, then withdrawn. Found by its knob and the value
        # it moves from, not by its text: a span's ``change`` follows the window while the advice
        # stands, and the simulator may score a smaller step best at a later cycle (a CI run's
        # span no longer read "-> {proposed}" at its end)
        spans = daemon.history().advice
        kv = [a for a in spans if a.knob == "kv_cache_memory_bytes" and a.current == KV_BYTES]
        assert kv and all(a.ended is not None and a.end_reason for a in kv), spans
        assert any(f"--kv-cache-memory-bytes {KV_BYTES} -> " in a.first_change for a in kv), kv
        share_after = _load(server)
        rows = wait_until(
            "the first verdict in the ledger", lambda: ledger.exists() and Ledger(str(ledger)).list(), 90
        )
        first = rows[0]
        assert (first["knob"], first["old_value"], first["new_value"]) == (
            "kv_cache_memory_bytes",
            KV_BYTES,
            proposed,
        )
        assert first["verdict"] == "keep", first["reasons"]
        assert first["source"] == "daemon"
        assert any("Preemptions" in r for r in first["reasons"])
        # the loop closed (issue 13): the prediction made at the change against the after-window.
        # Tolerance: output throughput within 35%, the spread of this 2-core machine's busy
        # intervals under the same load, once the machine's own change is taken out: on a machine
        # busy with other work the server gets less CPU in one run than in the other (beside five
        # other jobs, the first load took 100.6 s and the same load after the change 54.0 s, and the
        # model looked -35% "wrong"), and a CPU server's throughput follows its share, so the
        # measured throughput is scaled to the CPU share the server had when the prediction was
        # made. Preemptions: predicted and measured at most half the
        # rate before. Not zero: six requests of 767 tokens need 36 blocks of the 36 the cache
        # has, one of which V1 keeps as its null block, so when all six near their end together
        # one is preempted (a CI run measured 0.11/s after; the model predicts a few as well)
        p = first["prediction"]
        assert p is not None and p["measured_after"] is not None, p
        # The scaling is an upper bound of the machine's effect: a server that is not CPU-bound
        # over the whole window gains less than its share (under a make test on 2 cores: share
        # 1.61 -> 1.14, raw error -16%, -40% scaled). So the error is judged between no
        # scaling and full scaling: the prediction passes where some point of that range is
        # within 35%; both ends off on one side fail.
        machine = share_after / share_before
        raw = p["error"]["output_tokens_per_second"]
        err = (1 + raw) * machine - 1
        print(
            f"[closed-loop] server CPU share {share_before:.2f} before, {share_after:.2f} after; "
            f"throughput error {raw:+.0%} raw, {err:+.0%} at equal share"
        )
        lo, hi = min(raw, err), max(raw, err)
        assert lo <= 0.35 and hi >= -0.35, (raw, err, share_before, share_after, p)
        before = pred["measured"]["preemptions_per_second"]
        assert p["predicted"]["preemptions_per_second"] <= before / 2, p
        assert p["measured_after"]["preemptions_per_second"] <= before / 2, p

        # 4. the opposite: back to the small cache under the same load makes things worse
        server.restart(kv_cache_memory_bytes=KV_BYTES)
        wait_until(
            "the second change noticed",
            lambda: (
                daemon.advisor.experiment is not None and daemon.advisor.experiment.changes[0].new == KV_BYTES
            ),
            60,
        )
        _load(server)
        rows = wait_until(
            "the second verdict",
            lambda: len(Ledger(str(ledger)).list()) >= 2 and Ledger(str(ledger)).list(),
            90,
        )
        second = rows[0]
        assert (second["old_value"], second["new_value"]) == (proposed, KV_BYTES)
        assert second["verdict"] == "revert", second["reasons"]
        assert second["reasons"][-1] == f"Restore the previous value: --kv-cache-memory-bytes {proposed}."
    finally:
        daemon.stop()
        server.stop()
