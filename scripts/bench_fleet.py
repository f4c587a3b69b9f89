#!/usr/bin/env python3
"""Benchmark: the fleet daemon against a real Prometheus scraping 50/100/200 simulated vLLM
servers, side by side with 200 sidecars' worth of cycles.

The servers are stand-ins (tests/fleet_standin.py) in ONE child process on one port, one path
per server, each replaying /metrics pages recorded from real vLLM CPU servers (three recorded
sessions, looped, each server at its own offset), relabelled by Prometheus to their own
``instance``. Debian's Prometheus scrapes them every ``--interval``. For each size the fleet
daemon (advisor.fleet.Fleet, in this process) first fills its windows, then runs
``--cycles`` cycles one interval apart; measured: cycle time, Prometheus API requests per
cycle, Prometheus's CPU (cores, over the measured cycles) and this process's RSS growth.

The sidecar column: 200 Advisors (one per server) each fetching its server's page from the
stand-in, parsing it and evaluating it, as 200 sidecars do every interval (CPU seconds summed
over all 200 for one cycle), and what 200 sidecar processes cost in memory (200 x the RSS of one
real ``vllm-advisor run`` process watching one stand-in server).

Prints a table; changes nothing.
Usage: python scripts/bench_fleet.py [--sizes 50,100,200] [--interval 5] [--window 60] [--cycles 6]
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing as mp
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.core.config import Config  # noqa: E402
from advisor.diagnose.ruleset import load_rules  # noqa: E402
from advisor.drive.fleet import Fleet  # noqa: E402
from advisor.drive.runner import Advisor, ReplayClock  # noqa: E402
from advisor.sources import prometheus as prom  # noqa: E402
from advisor.sources.session import Session  # noqa: E402
from tests import fleet_standin  # noqa: E402
from tests.promstack import prometheus, query, wait_until  # noqa: E402

SESSIONS = [
    ROOT / "tests" / "fixtures" / "sessions" / n
    for n in ("cpu-preempt-nobind", "cpu-healthy", "cpu-long-binds")
]


def name(i: int) -> str:
    return f"v{i:03d}"


def _standin(n: int, conn: Any) -> None:
    """Child process: serve ``n`` looping replays; send the base URL; run until killed."""
    recorded = []
    for path in SESSIONS:
        scrapes = list(Session.load(path).iter_scrapes())
        t0 = scrapes[0][0]
        recorded.append(([text for _, text in scrapes], [t - t0 for t, _ in scrapes]))
    now = time.time()
    replays = {}
    for i in range(n):
        pages, rel = recorded[i % len(recorded)]
        replays[name(i)] = fleet_standin.Replay(pages, rel, start=now - 7.0 * i, loop=True)
    with fleet_standin.serve(replays) as base:
        conn.send(base)
        while True:
            time.sleep(3600)


def start_standin(n: int) -> tuple[mp.Process, str]:
    parent, child = mp.Pipe()
    p = mp.Process(target=_standin, args=(n, child), daemon=True)
    p.start()
    return p, str(parent.recv())


def cpu_s(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def rss() -> int:
    gc.collect()
    return int(psutil.Process().memory_info().rss)


def bench_fleet(n: int, interval: float, window: float, cycles: int, tmp: Path) -> dict[str, Any]:
    standin, base = start_standin(n)
    try:
        job = fleet_standin.scrape_config(
            "vllm", base, [name(i) for i in range(n)], lambda s: f"{s}.fleet:8000"
        )
        with prometheus(tmp, {}, scrape_interval=f"{interval:g}s", scrape_configs=[job]) as (prom_url, proc):
            wait_until(
                f"{n} targets up",
                lambda: (
                    (r := query(prom_url, 'count(up{job="vllm"} == 1)')) and int(float(r[0]["value"][1])) == n
                ),
                60,
                [proc],
            )
            c0, w0 = cpu_s(proc.pid), time.monotonic()
            time.sleep(window)  # Prometheus holds a whole window
            scrape_cores = (cpu_s(proc.pid) - c0) / (time.monotonic() - w0)
            cfg = Config(interval_s=interval, window_s=window, retention_s=max(window, 120.0))
            before = rss()
            fleet = Fleet(cfg, load_rules(), prom.Client(prom_url, timeout_s=60.0), '{job="vllm"}')
            first = fleet.cycle()
            assert first.prometheus_up and len(first.members) == n, (first.last_error, len(first.members))
            times, queries, cpus, samples = [], [], [], []
            cpu0, wall0 = cpu_s(proc.pid), time.monotonic()
            for _ in range(cycles):
                time.sleep(max(0.0, interval - (times[-1] if times else 0.0)))
                c0 = time.process_time()
                st = fleet.cycle()
                cpus.append(time.process_time() - c0)
                assert st.prometheus_up, st.last_error
                times.append(st.cycle_seconds or 0.0)
                queries.append(st.queries_last_cycle)
                samples.append(st.samples_last_cycle)
            prom_cores = (cpu_s(proc.pid) - cpu0) / (time.monotonic() - wall0)
            grown = rss() - before
            advised = sum(
                1
                for m in st.members
                if m.state.diagnosis is not None and m.state.diagnosis.status != "insufficient-data"
            )
            return {
                "n": n,
                "first": first.cycle_seconds,
                "mean": sum(times) / len(times),
                "max": max(times),
                "queries": max(queries),
                "cpu": sum(cpus) / len(cpus),
                "samples": sum(samples) / len(samples),
                "prom_cores": prom_cores,
                "scrape_cores": scrape_cores,
                "rss_mib": grown / 2**20,
                "advised": advised,
            }
    finally:
        standin.kill()
        standin.join(timeout=5)


def bench_sidecars(n: int, interval: float, window: float) -> dict[str, Any]:
    """``n`` Advisors, each fetching its own page every interval: one cycle's CPU, summed."""
    standin, base = start_standin(n)
    try:
        rules = load_rules()
        http = requests.Session()
        clock = ReplayClock(time.time())
        cfg = Config(interval_s=interval, window_s=window)
        advisors = [Advisor(cfg, rules, clock=clock) for _ in range(n)]
        per_cycle = []
        fill = int(window / interval) + 1
        for _ in range(fill + 3):
            clock.t += interval
            c0 = time.process_time()
            w0 = time.monotonic()
            for i, adv in enumerate(advisors):
                text = http.get(f"{base}/s/{name(i)}/metrics", timeout=10).text
                adv.on_page(text, clock.t)
                adv.diagnose(clock.t)
            per_cycle.append((time.process_time() - c0, time.monotonic() - w0))
        steady = per_cycle[fill:]
        # one real sidecar process: its RSS after a few cycles, x n
        proc = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "vllm-advisor"),
                "run",
                "--vllm-url",
                f"{base}/s/{name(0)}",
                "--listen",
                "127.0.0.1:0",
                "--interval",
                "1s",
                "--state-dir",
                tempfile.mkdtemp(prefix="bench-sidecar-"),
                "--run-seconds",
                "20",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(12)
        one = psutil.Process(proc.pid).memory_info().rss
        proc.terminate()
        proc.wait(timeout=20)
        return {
            "n": n,
            "cpu": sum(c for c, _ in steady) / len(steady),
            "wall": sum(w for _, w in steady) / len(steady),
            "requests": n,
            "rss_mib": n * one / 2**20,
            "one_mib": one / 2**20,
        }
    finally:
        standin.kill()
        standin.join(timeout=5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="50,100,200")
    ap.add_argument("--interval", type=float, default=5.0)
    ap.add_argument("--window", type=float, default=60.0)
    ap.add_argument("--cycles", type=int, default=6)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
            rows.append(bench_fleet(n, args.interval, args.window, args.cycles, Path(tmp)))
        print(f"  measured {n} instances", file=sys.stderr)
    side = bench_sidecars(max(sizes), args.interval, args.window)
    print(
        f"Fleet daemon vs sidecars (scrape and cycle every {args.interval:g}s, window {args.window:g}s, "
        f"{args.cycles} cycles measured; {psutil.cpu_count()} cores shared)\n"
    )
    print(
        "| advised by | instances | first cycle (fills windows) | cycle wall, mean / max | advisor CPU per cycle "
        "| samples read per cycle | Prometheus API requests per cycle | Prometheus CPU: scraping only / with the fleet "
        "| advisor memory |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| fleet daemon | {r['n']} | {r['first']:.2f} s | {r['mean']:.2f} / {r['max']:.2f} s | {r['cpu']:.2f} s | "
            f"{r['samples']:,.0f} | {r['queries']} | {r['scrape_cores']:.2f} / {r['prom_cores']:.2f} cores "
            f"| +{r['rss_mib']:.0f} MiB |"
        )
    s = side
    print(
        f"| {s['n']} sidecars | {s['n']} | - | {s['wall']:.2f} s (all {s['n']} in turn, one process) "
        f"| {s['cpu']:.2f} s summed | {s['n']} pages | 0 ({s['requests']} scrapes of vLLM) "
        f"| (scrapes vLLM directly) | {s['rss_mib']:.0f} MiB ({s['n']} x {s['one_mib']:.0f} MiB) |"
    )


if __name__ == "__main__":
    main()
