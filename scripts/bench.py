#!/usr/bin/env python3
"""Benchmark: the advisor's cycle and the live daemon, each beside the bare prometheus_client
parse of the same page, printed as one table with ratios.

Pages: a busy session recorded from vLLM 0.25 on an H200 (advisor/data/sessions/h200-A_s256),
relabelled to 1, 8 or 16 engines (engine="0".."N-1", tests/pages.py), replayed in a loop with
its counters and histograms carried on (each loop adds the session's increase), so that no page
looks like a restart and every page is new.

- cycle rows (in this process, interleaved: each round times one bare parse and one cycle of
  the same next page, in alternating order): parse + window update + signals + rules +
  arbitration, with the window as full as the daemon's at a 5 s and at a 1 s interval
  (retention 900 s: 180 and 900 pages);
- daemon rows (from outside: the real `vllm-advisor run` against a local stand-in HTTP server
  serving the pages; a stand-in because a real vLLM cannot be made to serve an H200's busy
  pages for 8 or 16 engines here): its CPU time per cycle (fetch, parse, evaluate, state file,
  and a Prometheus-like scrape of its /metrics every 15 s included) and its share of one core,
  read from /proc through psutil, and its RSS over time; the bare parse beside it is timed in
  this process (thread CPU time) on the pages served, while the daemons run.

Absolute times on a shared machine are noisy: read the ratios. Usage:
  python scripts/bench.py            # the full run (~22 min: the daemons fill a 900 s window)
  python scripts/bench.py --quick    # a short smoke version (~2 min), same table
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import http.server
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import requests
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.core.config import Config  # noqa: E402
from advisor.diagnose.ruleset import load_rules  # noqa: E402
from advisor.drive.runner import Advisor, ReplayClock  # noqa: E402
from advisor.sources.session import Session  # noqa: E402
from tests.pages import with_engines  # noqa: E402

SESSION = ROOT / "advisor" / "data" / "sessions" / "h200-A_s256"
RETENTION_S = Config().retention_s
MAX_FRAMES = 1000  # Window's max_snapshots
_SAMPLE = re.compile(r"^(\S+(?:\{.*\})?) (\S+)$")


class Replay:
    """Endless, ever-new pages from a recorded session: loop k adds k times the session's
    increase to every counter and histogram sample (gauges and `_created` as recorded)."""

    def __init__(self, pages: list[str]) -> None:
        monotone = set()
        for line in pages[0].splitlines():
            if line.startswith("# TYPE ") and line.split()[3] in ("counter", "histogram"):
                monotone.add(line.split()[2])
        self.pages: list[list[tuple[str, float, bool | None]]] = []
        for text in pages:
            rows: list[tuple[str, float, bool | None]] = []
            for line in text.splitlines():
                m = _SAMPLE.match(line)
                if line.startswith("#") or m is None:
                    rows.append((line, 0.0, None))  # comments, blank lines: as they are
                    continue
                head, value = m.group(1), float(m.group(2))
                name = head.split("{")[0]
                base = re.sub(r"_(bucket|count|sum|total)$", "", name)
                mono = (name in monotone or base in monotone) and not name.endswith("_created")
                rows.append((head, value, mono))
            self.pages.append(rows)
        last = {h: v for h, v, mono in self.pages[-1] if mono}
        first = {h: v for h, v, mono in self.pages[0] if mono}
        self.increase = {h: max(0.0, last[h] - first.get(h, 0.0)) for h in last}

    def page(self, i: int) -> str:
        k, j = divmod(i, len(self.pages))
        out = []
        for head, v, mono in self.pages[j]:
            if mono is None:
                out.append(head)
            else:
                out.append(f"{head} {v + k * self.increase.get(head, 0.0) if mono else v!r}")
        return "\n".join(out) + "\n"


def bare_parse(text: str) -> None:
    """What every Prometheus client pays: prometheus_client's parser over the whole page."""
    for fam in text_string_to_metric_families(text):
        for _ in fam.samples:
            pass


def _thread_ms(fn: Callable[[], object]) -> float:
    t0 = time.thread_time()
    fn()
    return (time.thread_time() - t0) * 1000


# ---------------------------------------------------------------- in-process cycles
@dataclass
class CycleRow:
    engines: int
    interval_s: float
    frames: int = 0
    page_kb: float = 0.0
    samples: int = 0
    bare: list[float] = field(default_factory=list)
    cycle: list[float] = field(default_factory=list)


def cycle_rows(sessions: dict[int, Replay], configs: list[tuple[int, float]], rounds: int) -> list[CycleRow]:
    rules = load_rules()
    setups = []
    for engines, interval in configs:
        rep = sessions[engines]
        clock = ReplayClock(1_800_000_000.0)
        adv = Advisor(Config(), rules, clock=clock)
        fill = int(min(RETENTION_S / interval, MAX_FRAMES))
        for i in range(fill):  # the window as full as the daemon's after 15 minutes
            clock.t += interval
            adv.on_page(rep.page(i), clock.t)
        adv.diagnose(clock.t)
        row = CycleRow(engines, interval, frames=len(adv.window._frames))
        text = rep.page(fill)
        row.page_kb = len(text) / 1024
        row.samples = sum(1 for ln in text.splitlines() if ln and not ln.startswith("#"))
        setups.append((row, adv, clock, rep, fill))
        print(
            f"  filled: {engines} engine(s), window of {row.frames} pages ({interval:g} s)", file=sys.stderr
        )
    for r in range(rounds):  # interleaved: every config, bare and cycle of the same page, alternating
        for row, adv, clock, rep, fill in setups:
            text = rep.page(fill + r)

            def cycle(
                adv: Advisor = adv, clock: ReplayClock = clock, text: str = text, dt: float = row.interval_s
            ) -> None:
                clock.t += dt
                adv.on_page(text, clock.t)
                adv.diagnose(clock.t)

            gc.collect()
            if r % 2:
                row.bare.append(_thread_ms(lambda text=text: bare_parse(text)))
                row.cycle.append(_thread_ms(cycle))
            else:
                row.cycle.append(_thread_ms(cycle))
                row.bare.append(_thread_ms(lambda text=text: bare_parse(text)))
    return [row for row, *_ in setups]


# ---------------------------------------------------------------- the live daemon
class StandIn:
    """A stand-in for vLLM's /metrics (loopback only): each GET serves the next page."""

    def __init__(self, rep: Replay) -> None:
        self.rep = rep
        self.served = 0
        self.current = rep.page(0)
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def do_GET(self) -> None:
                if not self.path.startswith("/metrics"):
                    self.send_response(404)
                    self.end_headers()
                    return
                with outer.lock:
                    outer.served += 1
                    body = outer.rep.page(outer.served).encode()
                    outer.current = body.decode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class DaemonRow:
    engines: int
    interval_s: float
    seconds: float
    measure_from: float  # seconds after start: steady state (the window full, or the last part)
    cycles: int = 0
    cpu_ms_per_cycle: float = 0.0
    core_share: float = 0.0
    rss_mib: list[tuple[float, float]] = field(default_factory=list)
    bare: list[float] = field(default_factory=list)
    error: str = ""


def run_daemons(sessions: dict[int, Replay], rows: list[DaemonRow]) -> None:
    """All daemons at once (their CPU is counted per process), each with its own stand-in."""
    exe = shutil.which("vllm-advisor", path=str(Path(sys.executable).parent)) or "vllm-advisor"
    tmp = Path(tempfile.mkdtemp(prefix="advisor-bench-"))
    procs = []
    for i, row in enumerate(rows):
        standin = StandIn(sessions[row.engines])
        listen = f"127.0.0.1:{_free_port()}"
        cmd = [
            exe, "run", "--vllm-url", standin.url, "--interval", f"{row.interval_s:g}s",
            "--listen", listen, "--state-dir", str(tmp / f"d{i}"), "--run-seconds", f"{row.seconds:g}",
        ]  # fmt: skip
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        procs.append((row, standin, listen, p, psutil.Process(p.pid), {}))
    t0 = time.monotonic()
    last_prom = 0.0
    try:
        while any(p.poll() is None for _, _, _, p, _, _ in procs):
            now = time.monotonic() - t0
            for row, standin, _listen, p, ps, mark in procs:
                if p.poll() is not None:
                    continue
                try:
                    cpu = ps.cpu_times()
                    rss = ps.memory_info().rss / 2**20
                except psutil.Error:
                    continue
                row.rss_mib.append((now, rss))
                if now >= row.measure_from and "cpu" not in mark:
                    mark["cpu"], mark["n"], mark["t"] = cpu.user + cpu.system, standin.served, now
                elif "cpu" in mark:
                    row.cycles = standin.served - mark["n"]
                    used = cpu.user + cpu.system - mark["cpu"]
                    row.cpu_ms_per_cycle = used * 1000 / max(1, row.cycles)
                    row.core_share = used / max(1e-9, now - mark["t"])
                with standin.lock:
                    text = standin.current
                row.bare.append(_thread_ms(lambda text=text: bare_parse(text)))
            if now - last_prom >= 15:  # Prometheus scraping each daemon's exporter
                last_prom = now
                for *_, listen, _p, _ps, _m in procs:
                    with contextlib.suppress(requests.RequestException):
                        requests.get(f"http://{listen}/metrics", timeout=5)
            time.sleep(1.0)
    finally:
        for row, standin, _, p, _, _ in procs:
            if p.poll() is None:
                p.terminate()
            try:
                _, err = p.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                _, err = p.communicate()
            if p.returncode not in (0, -15):
                row.error = f"exit {p.returncode}: {(err or '').strip()[-300:]}"
            standin.close()
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------- the table
def _ok(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument(
        "--quick", action="store_true", help="a short version: 1 and 8 engines, short daemon runs"
    )
    ap.add_argument("--rounds", type=int, help="interleaved rounds of the cycle rows [default: 30, quick 10]")
    ap.add_argument(
        "--daemon-seconds", type=float, help="how long the 5 s / 1 s daemons run [default: 960, quick 90]"
    )
    args = ap.parse_args()
    rounds = args.rounds or (10 if args.quick else 30)
    long_s = args.daemon_seconds or (90.0 if args.quick else RETENTION_S + 180)
    fast_s = 40.0 if args.quick else 150.0

    base = [text for _, text in Session.load(SESSION).iter_scrapes()]
    engine_counts = (1, 8) if args.quick else (1, 8, 16)
    sessions = {e: Replay(base if e == 1 else [with_engines(p, e) for p in base]) for e in engine_counts}
    configs = [(1, 5.0), (8, 5.0)] if args.quick else [(1, 5.0), (1, 1.0), (8, 5.0), (8, 1.0), (16, 1.0)]
    t_start = time.monotonic()
    print("cycles in process ...", file=sys.stderr)
    crow = cycle_rows(sessions, configs, rounds)
    # measured once the window is full (retention), when the run is long enough for that
    steady = RETENTION_S if long_s >= RETENTION_S + 120 else long_s * 2 / 3
    daemons = [
        DaemonRow(8, 0.2, fast_s, fast_s / 3),
        DaemonRow(8, 5.0, long_s, steady),
        DaemonRow(8, 1.0, long_s, steady),
    ]
    if 16 in sessions:
        daemons.append(DaemonRow(16, 1.0, long_s, steady))
    print(f"daemons ({max(d.seconds for d in daemons):.0f} s) ...", file=sys.stderr)
    run_daemons(sessions, daemons)

    cpu = psutil.cpu_count()
    print(
        f"Pages: {SESSION.name} (vLLM 0.25, H200, busy), {len(base)} recorded pages replayed with counters "
        f"carried on, relabelled to N engines. Machine: {cpu} CPUs, shared (load {os.getloadavg()[0]:.1f}); "
        f"times are CPU time (thread for in-process, process for the daemon); medians; ratios to the bare "
        f"prometheus_client parse of the same pages.{' QUICK run: daemons too short for a full window.' if args.quick else ''}\n"
    )
    print("| what | engines | interval (window) | page | bare parse ms | measured | ratio to bare | target |")
    print("|---|---|---|---|---|---|---|---|")
    for r in crow:
        b, c = statistics.median(r.bare), statistics.median(r.cycle)
        target = f"<= 0.5x {_ok(c / b <= 0.5)}" if r.interval_s == 5.0 and r.engines in (1, 8) else ""
        print(
            f"| steady-state cycle (parse, window, signals, rules) | {r.engines} | {r.interval_s:g} s "
            f"({r.frames} pages) | {r.page_kb:.0f} KB, {r.samples:,} samples | {b:.1f} | {c:.1f} ms "
            f"| {c / b:.2f}x | {target} |"
        )
    for d in daemons:
        b = statistics.median(d.bare) if d.bare else float("nan")
        rss = [m for t, m in d.rss_mib if t >= d.measure_from] or [m for _, m in d.rss_mib] or [float("nan")]
        half = [m for t, m in d.rss_mib if t >= d.measure_from + (d.seconds - d.measure_from) / 2] or rss
        flat = half[-1] - half[0]
        frames = int(min(RETENTION_S / d.interval_s, MAX_FRAMES, d.measure_from / d.interval_s))
        where = f"{d.interval_s:g} s, {d.seconds:.0f} s run (>= {frames} pages)"
        if d.error:
            print(f"| daemon | {d.engines} | {where} | | | FAILED: {d.error} | | |")
            continue
        if d.interval_s < 1:
            t1 = f"<= 0.6x {_ok(d.cpu_ms_per_cycle / b <= 0.6)}"
            t2 = f"<= 100 MiB {_ok(max(rss) <= 100)}"
        elif d.engines == 8:
            share_target = 0.005 if d.interval_s >= 5 else 0.03
            t1 = f"<= {share_target:.1%} of a core {_ok(d.core_share <= share_target)}"
            t2 = ""
        else:
            t1 = ""
            t2 = f"<= 100 MiB, flat {_ok(max(rss) <= 100 and flat < 5)}"
        print(
            f"| daemon CPU per cycle (fetch, parse, evaluate, export), measured from outside | {d.engines} "
            f"| {where} | | {b:.1f} | {d.cpu_ms_per_cycle:.1f} ms/cycle over {d.cycles} cycles, "
            f"{d.core_share:.2%} of a core | {d.cpu_ms_per_cycle / b:.2f}x | {t1} |"
        )
        print(
            f"| daemon RSS once the window is full (max; growth over the second half) | {d.engines} | {where} "
            f"| | | {max(rss):.0f} MiB; {flat:+.1f} MiB | | {t2} |"
        )
    prediction_rows(base, rounds)
    print(f"\nbench took {time.monotonic() - t_start:.0f} s")
    return 0


INTERVAL = 5.0  # the prediction rows' replay interval (the daemon's default)


def warm_advisor(pages: list[str]) -> tuple[Advisor, ReplayClock, float]:
    """An advisor fed ``pages`` INTERVAL apart (a window of history before the measured cycles)."""
    clock = ReplayClock(1_800_000_000.0)
    adv = Advisor(Config(), load_rules(), clock=clock)
    for text in pages:
        clock.t += INTERVAL
        adv.on_page(text, clock.t)
    return adv, clock, clock.t


def prediction_rows(pages: list[str], repeat: int) -> None:
    """Issue 13: the cost of the advice's prediction (the performance model fitted to the window
    and every candidate value predicted, advisor/predict/scoring.py) per scrape-and-evaluate cycle, next
    to the same cycles without it: two advisors warmed alike, then fed the same next pages."""
    from advisor.diagnose import advise

    n = min(repeat, len(pages) - 24)

    def run(predict: bool) -> tuple[float, Any]:
        adv, clock, _ = warm_advisor(pages[:24])
        real = advise.by_prediction
        if not predict:
            advise.by_prediction = lambda *a, **k: None  # type: ignore[assignment]
        times, d = [], None
        try:
            for page in pages[24 : 24 + n]:
                clock.t += INTERVAL
                t0 = time.process_time()  # CPU time: the machine may be shared
                adv.on_page(page, clock.t)
                d = adv.diagnose(clock.t)
                if d.status == "advice":  # the cycles that predict (with the model on)
                    times.append((time.process_time() - t0) * 1000)
        finally:
            advise.by_prediction = real  # type: ignore[assignment]
        return statistics.median(times), d

    without, _ = run(False)
    with_pred, d = run(True)
    rec = d.recommendation if d is not None else None
    predicted = rec is not None and rec.predicted is not None
    cost = with_pred - without
    print(
        f"\nPrediction per cycle (median of the cycles with advice among {n}; last advice: "
        f"{rec.change if rec else d.status if d else '-'}; predicted: {predicted})\n"
    )
    print(
        "| cycle CPU ms without prediction | with prediction | prediction CPU ms / cycle | share of one core at 5 s |"
    )
    print("|---|---|---|---|")
    print(f"| {without:.1f} | {with_pred:.1f} | {cost:.1f} | {cost / (INTERVAL * 1000) * 100:.2f}% |")


if __name__ == "__main__":
    raise SystemExit(main())
