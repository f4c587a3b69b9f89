"""Closed loop on a REAL vLLM CPU server: advice, restart with the proposed value under the
same load, and the daemon's own before/after verdict in the ledger.

KV cache 3,072 tokens (24 blocks of 128), max_num_seqs 6, MIN_REQUESTS + 6 requests of 384 in / 384 out at
concurrency 32: six prompts fill the cache at admission and then grow, so the batch sits at the
cap while vLLM preempts and recomputes long prefills. The cache holds 4 such requests and its
size is fixed in bytes, so the advice is more KV memory first (24 -> 36 MiB: 36 blocks for the
capped batch's six requests of 6 blocks, less V1's null block); the same load after the restart
preempts far less, at no cost in throughput or tail latency: keep. Then the opposite: back to 24 MiB, preemption and the TPOT
tail come back: revert. (Lowering the cap instead, 6 -> 4, was this test's loop before the H200
showed that a cut cap costs throughput where memory could be given: docs/validation.md.)

One server, restarted twice, and three loads as short as the judgement allows: each window the
experiment judges needs MIN_REQUESTS finished requests (live_experiment; fewer is "no
baseline", inconclusive), and each load sends one batch (max_num_seqs) more, so that the last
batch, which drains with fewer than six running and preempts less, is not part of the minimum.
The requests come from threads of the test (realvllm.RequestLoad: what ``vllm bench serve``
sends, without its ~10 s start-up and its initial test request); the verdict reads the server's
side only. Before (48 requests per load through ``vllm bench serve``): 335 s in ``make test``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from advisor.core.config import Config
from advisor.diagnose.ruleset import load_rules
from advisor.drive.daemon import Daemon
from advisor.verify import live_experiment
from advisor.verify.ledger import Ledger
from tests import realvllm

KV_BYTES = 25165824
MAX_NUM_SEQS = 6
PROMPT_LEN = OUTPUT_LEN = 384
NUM_PROMPTS = live_experiment.MIN_REQUESTS + MAX_NUM_SEQS  # see the module docstring
CONCURRENCY = 32  # more than NUM_PROMPTS: every request is sent at once, most of them wait


def _load(server: realvllm.VllmServer) -> float:
    """Run the load; returns the share of a core the server got over it (its CPU seconds per
    second of the load)."""
    cpu0, t0 = server.cpu_seconds(), time.monotonic()
    _requests(server).wait()
    return (server.cpu_seconds() - cpu0) / max(time.monotonic() - t0, 1e-9)


def _requests(server: realvllm.VllmServer) -> realvllm.RequestLoad:
    return realvllm.RequestLoad(server.url, PROMPT_LEN, OUTPUT_LEN, NUM_PROMPTS, CONCURRENCY, timeout_s=400)


def _wait(what: str, fn, timeout: float) -> object:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.realvllm
def test_closed_loop_keep_then_revert(tmp_path: Path) -> None:
    server = realvllm.VllmServer(
        max_num_seqs=MAX_NUM_SEQS, kv_cache_memory_bytes=KV_BYTES, log_path=tmp_path / "vllm.log"
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
        daemon.start()
        cpu0, t0 = server.cpu_seconds(), time.monotonic()
        load = _requests(server)
        d = _wait(
            "advice to give the KV cache more memory while the load runs",
            lambda: (
                (st := daemon.state().diagnosis) is not None
                and st.recommendation is not None
                and st.recommendation.knob == "kv_cache_memory_bytes"
                and st
            ),
            300,
        )
        load.wait()
        share_before = (server.cpu_seconds() - cpu0) / max(time.monotonic() - t0, 1e-9)
        proposed = d.recommendation.proposed  # type: ignore[union-attr]
        # +50%: 4,608 tokens hold 6 requests of 767; the device's free memory is unknown on a CPU
        # server, so the model goes no further than the rule's step (issue 13)
        assert proposed == KV_BYTES * 3 // 2
        pred = d.recommendation.predicted  # type: ignore[union-attr]
        assert pred is not None and pred["knob"] == "kv_cache_memory_bytes"
        assert pred["predicted"]["preemptions_per_second"] < pred["measured"]["preemptions_per_second"]

        # follow the advice: restart with the proposed value, replay the same load
        server.restart(kv_cache_memory_bytes=proposed)
        _wait("the knob change noticed", lambda: daemon.advisor.experiment is not None, 60)
        assert daemon.state().diagnosis.status == "insufficient-data"  # type: ignore[union-attr]
        share_after = _load(server)
        rows = _wait(
            "the first verdict in the ledger", lambda: ledger.exists() and Ledger(str(ledger)).list(), 90
        )
        first = rows[0]  # type: ignore[index]
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

        # the opposite: back to the small cache under the same load makes things worse
        server.restart(kv_cache_memory_bytes=KV_BYTES)
        _wait(
            "the second change noticed",
            lambda: (
                daemon.advisor.experiment is not None and daemon.advisor.experiment.changes[0].new == KV_BYTES
            ),
            60,
        )
        _load(server)
        rows = _wait(
            "the second verdict",
            lambda: len(Ledger(str(ledger)).list()) >= 2 and Ledger(str(ledger)).list(),
            90,
        )
        second = rows[0]  # type: ignore[index]
        assert (second["old_value"], second["new_value"]) == (proposed, KV_BYTES)
        assert second["verdict"] == "revert", second["reasons"]
        assert second["reasons"][-1] == f"Restore the previous value: --kv-cache-memory-bytes {proposed}."
    finally:
        daemon.stop()
        server.stop()
