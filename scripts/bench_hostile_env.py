"""Issue 23, classes 4-5: how long the advisor takes to give up on a hostile Prometheus, to stop
on SIGTERM, and what a 100,000-series discovery costs; prints one table (docs/reliability.md).

The Prometheus is the stand-in of tests/prom_standin.py (answers from a recorded real session;
trickles, stalls or lists 100k series on demand). Usage: python scripts/bench_hostile_env.py
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from advisor.core.config import Config  # noqa: E402
from advisor.diagnose.ruleset import load_rules  # noqa: E402
from advisor.drive.fleet import Fleet  # noqa: E402
from advisor.sources import prometheus as prom  # noqa: E402
from tests import prom_standin  # noqa: E402
from tests.promstack import free_port  # noqa: E402

SESSION = REPO / "tests" / "fixtures" / "sessions" / "cpu-preempt-nobind"
EXE = str(Path(sys.executable).parent / "vllm-advisor")


def sigterm_s(args: list[str], behaviour: prom_standin.Behaviour) -> float:
    proc = subprocess.Popen([EXE, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        prom_standin.wait_for(lambda: behaviour.requests, 60)
        time.sleep(1.0)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        return time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()


def main() -> None:
    samples, meta = prom_standin.stored_samples(SESSION, "a.fleet:8000")
    rows: list[tuple[str, str]] = []
    b = prom_standin.Behaviour("trickle", trickle_s=0.2)
    with prom_standin.serve(samples, meta, b) as url:
        t0 = time.monotonic()
        try:
            prom.Client(url, timeout_s=2.0).metadata()
        except prom.PrometheusError as e:
            took = time.monotonic() - t0
            rows.append(
                (
                    "one request, Prometheus trickling 1 byte / 0.2 s (deadline 2 s)",
                    f"{took:.2f} s ({e.kind})",
                )
            )
        for cmd in ("run", "explain"):
            b.requests.clear()
            if cmd == "run":
                args = ["run", "--prometheus", url, "--listen", f"127.0.0.1:{free_port()}"]
            else:
                args = ["explain", "--prometheus", url, "--instance", "a.fleet:8000"]
            took = sigterm_s(args, b)
            rows.append((f"SIGTERM to `{cmd} --prometheus` mid-trickle, until it exited", f"{took:.2f} s"))
    b = prom_standin.Behaviour("stall")
    with prom_standin.serve(samples, meta, b) as url:
        fleet = Fleet(Config(interval_s=5.0), load_rules(), prom.Client(url, timeout_s=10.0), "")
        t0 = time.monotonic()
        st = fleet.cycle()
        took = time.monotonic() - t0
        rows.append(
            (
                "a fleet cycle, Prometheus stalled (10 s per request)",
                f"{took:.2f} s, up={int(st.prometheus_up)}",
            )
        )
    b = prom_standin.Behaviour("many_series", n_series=100_000)
    with prom_standin.serve(samples, meta, b) as url:
        fleet = Fleet(Config(interval_s=5.0), load_rules(), prom.Client(url, timeout_s=30.0), "")
        tracemalloc.start()
        t0 = time.monotonic()
        st = fleet.cycle()
        took = time.monotonic() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        err = (st.last_error or "")[:40]
        rows.append(
            ("first fleet cycle, 100,000 series", f"{took:.2f} s, peak {peak / 2**20:.1f} MiB; {err}...")
        )
    print("| case | measured |\n|---|---|")
    for what, v in rows:
        print(f"| {what} | {v} |")


if __name__ == "__main__":
    main()
