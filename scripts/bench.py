#!/usr/bin/env python3
"""Benchmark: the advisor's cycle and the live daemon with advice active, each beside the bare
prometheus_client parse of the same page, printed as tables with ratios.

Pages: a busy session recorded from vLLM 0.25 on an H200 (advisor/data/sessions/h200-A_s256: the
KV cache preempts, a rule fires and the performance model is fitted and asked every cycle),
relabelled to 1, 8 or 16 engines (engine="0".."N-1", tests/pages.py), replayed in a loop with
its counters and histograms carried on (each loop adds the session's increase), so that no page
looks like a restart and every page is new. Every advisor also reads the session's vLLM log (in
process, before its first page; a daemon through ``--log-file``, written once it follows the
file), as on a host where it knows the server's GPU: the model's GPU-only terms are fitted then.

- cycle rows (in this process, interleaved: each round times one bare parse and one cycle of
  the same next page, in alternating order): parse + window update + signals + rules +
  arbitration and prediction, with the window as full as the daemon's at a 5 s and a 1 s
  interval;
- daemon rows (from outside: the real `vllm-advisor run` against a local stand-in HTTP server
  serving the pages; a stand-in because a real vLLM cannot be made to serve an H200's busy
  pages for 8 or 16 engines here), at 0.2 s, 1 s and 5 s and 8 and 16 engines, all at once
  for ``--daemon-seconds`` (default 600): CPU time per cycle minute by minute (fetch, parse,
  evaluate with the model, state file, and a Prometheus-like scrape of its /metrics every 15 s
  included), its share of one core, its RSS, and what its API said every 10 s (the status must
  stay "advice": every scrape is answered); the bare parse beside it is timed in this process
  (thread CPU time) on the pages served, while the daemons run.

- one-shot rows (first, alone on the machine): ``vllm-advisor explain --session`` and ``predict
  --session`` on the bundled session (39 pages over 76 s, 5 simulated runs for one
  decision), each a fresh process (start-up, imports, rules and the replay included), its CPU
  time (user + system, from the kernel's accounting of the child); with ``--baseline REV``
  the same commands from the tree of git revision REV (its ``advisor/`` and ``rules/``, run with
  this venv), interleaved with this tree's round by round, side by side.

Absolute times on a shared machine are noisy: read the ratios. Usage:
  python scripts/bench.py            # the full run (~13 min)
  python scripts/bench.py --quick    # a short smoke version (~3 min), same tables
  python scripts/bench.py --only-one-shot --baseline e28a34a   # the one-shot rows (~1 min)
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

import psutil
import requests
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cli_startup  # noqa: E402  (scripts/: a fresh CLI process timed, a revision exported)

from advisor.core.config import Config  # noqa: E402
from advisor.diagnose.ruleset import load_rules  # noqa: E402
from advisor.drive.runner import Advisor, ReplayClock  # noqa: E402
from advisor.sources.session import Session  # noqa: E402
from tests.pages import with_engines  # noqa: E402

SESSION = ROOT / "advisor" / "data" / "sessions" / "h200-A_s256"
LOG = (SESSION / "vllm.log").read_text(errors="replace").splitlines()  # the server's own log
LOG_AFTER_S = 5.0  # the daemons' log files get the server's lines this long after they start
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
        for line in LOG:  # the server's log: what it is (a GPU's: the GPU-only paths of the model)
            adv.on_log_line(line)
        adv.flush_logs()
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
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(body)  # the daemon gave up waiting (its scrape timeout)

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
    samples: list[tuple[float, float, int]] = field(default_factory=list)  # (t, cpu s, pages served)
    rss_mib: list[tuple[float, float]] = field(default_factory=list)
    bare: list[float] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)  # /api/v1/diagnosis every 10 s, from the first advice
    predicted: int = 0  # of those, advice with the model's prediction
    first_advice_s: float | None = None
    other: list[str] = field(default_factory=list)  # the reasons of the polls that were not advice
    error: str = ""

    def per_minute(self) -> list[tuple[float, int]]:
        """CPU ms per cycle and the cycles of each whole minute of the run."""
        out = []
        for m in range(int(self.seconds // 60)):
            inside = [x for x in self.samples if m * 60 <= x[0] <= (m + 1) * 60]
            if len(inside) < 2:
                continue
            (_, c0, n0), (_, c1, n1) = inside[0], inside[-1]
            out.append(((c1 - c0) * 1000 / max(1, n1 - n0), n1 - n0))
        return out

    def core_share(self) -> float:
        if len(self.samples) < 2:
            return float("nan")
        (t0, c0, _), (t1, c1, _) = self.samples[len(self.samples) // 2], self.samples[-1]
        return (c1 - c0) / max(1e-9, t1 - t0)


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
            "--log-file", str(tmp / f"vllm{i}.log"),
        ]  # fmt: skip
        (tmp / f"vllm{i}.log").write_text("")
        err = open(tmp / f"d{i}.log", "w")  # noqa: SIM115 (a pipe nobody reads would fill and block it)
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True)
        procs.append((row, standin, listen, p, psutil.Process(p.pid)))
    t0 = time.monotonic()
    last_prom = last_api = 0.0
    logged = False
    try:
        while any(p.poll() is None for _, _, _, p, _ in procs):
            now = time.monotonic() - t0
            if not logged and now >= LOG_AFTER_S:  # each daemon follows its file from its end by then
                logged = True
                for i in range(len(procs)):
                    with open(tmp / f"vllm{i}.log", "a") as f:
                        f.write("\n".join(LOG) + "\n")
            poll_api = now - last_api >= 10
            for row, standin, listen, p, ps in procs:
                if p.poll() is not None:
                    continue
                try:
                    cpu = ps.cpu_times()
                    rss = ps.memory_info().rss / 2**20
                except psutil.Error:
                    continue
                row.samples.append((now, cpu.user + cpu.system, standin.served))
                row.rss_mib.append((now, rss))
                with standin.lock:
                    text = standin.current
                row.bare.append(_thread_ms(lambda text=text: bare_parse(text)))
                if poll_api:  # from the first advice on (before it: the rule's hold time)
                    with contextlib.suppress(requests.RequestException, ValueError):
                        d = requests.get(f"http://{listen}/api/v1/diagnosis", timeout=5).json()
                        status = str(d.get("status"))
                        if status == "advice" and row.first_advice_s is None:
                            row.first_advice_s = now
                        if row.first_advice_s is not None:
                            row.statuses.append(status)
                            rec = d.get("recommendation") or {}
                            row.predicted += bool(rec.get("predicted"))
                            if status != "advice":
                                row.other.append(f"{status}: {str(d.get('reason'))[:120]}")
            if poll_api:
                last_api = now
            if now - last_prom >= 15:  # Prometheus scraping each daemon's exporter
                last_prom = now
                for _row, _s, listen, _p, _ps in procs:
                    with contextlib.suppress(requests.RequestException):
                        requests.get(f"http://{listen}/metrics", timeout=5)
            time.sleep(1.0)
    finally:
        for row, standin, _, p, _ in procs:
            if p.poll() is None:
                p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.returncode not in (0, -15):
                err = (tmp / f"d{rows.index(row)}.log").read_text(errors="replace")
                row.error = f"exit {p.returncode}: {err.strip()[-300:]}"
            standin.close()
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------- the table
def _ok(ok: bool) -> str:
    return "ok" if ok else "MISSED"


# ---------------------------------------------------------------- one-shot commands
ONE_SHOT_TARGET_S = 1.0  # issue 30: one predict or explain --session on a 60 s window within 1 s
ONE_SHOT = [
    ("explain --session", ["explain", "--session", str(SESSION)]),
    (
        "predict --session --set kv_cache_memory_bytes=50GiB",
        ["predict", "--session", str(SESSION), "--set", "kv_cache_memory_bytes=50GiB"],
    ),
]


def _child_cpu_s(tree: Path, args: list[str]) -> float:
    """One fresh process of the CLI from ``tree`` (cli_startup's run): its CPU seconds."""
    _, cpu, done = cli_startup.run_once(tree, args, "from advisor.cli import main; main()")
    if done.returncode not in (0, 3):  # 3: advice (explain --exit-code only; tolerated)
        raise RuntimeError(
            f"{' '.join(args[:1])} from {tree} exited {done.returncode}: {done.stderr.strip()[-400:]}"
        )
    return cpu


def one_shot_rows(rounds: int, baseline: str | None) -> dict[str, dict[str, list[float]]]:
    """CPU seconds of each one-shot command, per tree (\"this tree\", and the baseline's when
    asked), rounds interleaved; after one warm-up run of each (bytecode written)."""
    trees = {"this tree": ROOT}
    with contextlib.ExitStack() as stack:
        if baseline:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-base-")))
            trees = {
                f"baseline {baseline}": cli_startup.export(baseline, tmp, ("advisor", "rules")),
                "this tree": ROOT,
            }
        out: dict[str, dict[str, list[float]]] = {name: {t: [] for t in trees} for name, _ in ONE_SHOT}
        for tree in trees.values():
            for _, args in ONE_SHOT:
                _child_cpu_s(tree, args)  # warm-up: its bytecode written, the files in the page cache
        for _ in range(rounds):
            for name, args in ONE_SHOT:
                for label, tree in trees.items():
                    out[name][label].append(_child_cpu_s(tree, args))
    return out


def print_one_shot(rows: dict[str, dict[str, list[float]]]) -> None:
    labels = list(next(iter(rows.values())))
    print(
        "One-shot commands on the bundled session (a fresh process each: start-up, imports, rules, the "
        "replay of its 39 pages and the decision's simulated runs), CPU seconds (user + system), median "
        "and range of the rounds.\n"
    )
    print("| command | " + " | ".join(labels) + (" | change" if len(labels) > 1 else "") + " | target |")
    print("|---|" + "---|" * len(labels) + ("---|" if len(labels) > 1 else "") + "---|")
    for name, per in rows.items():
        cells = [f"{statistics.median(v):.2f} s ({min(v):.2f}-{max(v):.2f})" for v in per.values()]
        med = [statistics.median(v) for v in per.values()]
        change = f" | {med[-1] / med[0] - 1:+.0%}" if len(med) > 1 else ""
        print(
            f"| `{name}` | "
            + " | ".join(cells)
            + change
            + f" | <= {ONE_SHOT_TARGET_S:g} s {_ok(med[-1] <= ONE_SHOT_TARGET_S)} |"
        )
    print()


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a short version: shorter daemon runs")
    ap.add_argument("--rounds", type=int, help="interleaved rounds of the cycle rows [default: 30, quick 10]")
    ap.add_argument(
        "--daemon-seconds", type=float, help="how long every daemon runs [default: 600, quick 150]"
    )
    ap.add_argument(
        "--baseline",
        metavar="REV",
        help="also run the one-shot commands from git revision REV's tree, side by side",
    )
    ap.add_argument("--only-one-shot", action="store_true", help="only the one-shot commands' table")
    args = ap.parse_args()
    rounds = args.rounds or (10 if args.quick else 30)
    run_s = args.daemon_seconds or (150.0 if args.quick else 600.0)

    t_start = time.monotonic()
    print("one-shot commands ...", file=sys.stderr)
    one_shot = one_shot_rows(3 if args.quick else 7, args.baseline)
    print(
        f"Machine: {psutil.cpu_count()} CPUs, shared (load {os.getloadavg()[0]:.1f}).{' QUICK run.' if args.quick else ''}\n"
    )
    print_one_shot(one_shot)
    if args.only_one_shot:
        return 0

    base = [text for _, text in Session.load(SESSION).iter_scrapes()]
    engine_counts = (1, 8, 16)
    sessions = {e: Replay(base if e == 1 else [with_engines(p, e) for p in base]) for e in engine_counts}
    configs = (
        [(1, 5.0), (8, 5.0), (8, 1.0)] if args.quick else [(1, 5.0), (1, 1.0), (8, 5.0), (8, 1.0), (16, 1.0)]
    )
    print("cycles in process ...", file=sys.stderr)
    crow = cycle_rows(sessions, configs, rounds)
    daemons = [DaemonRow(e, i, run_s) for e in (8, 16) for i in (0.2, 1.0, 5.0)]
    print(f"daemons ({run_s:.0f} s) ...", file=sys.stderr)
    run_daemons(sessions, daemons)

    cpu = psutil.cpu_count()
    print(
        f"Pages: {SESSION.name} (vLLM 0.25, H200, busy: a rule fires and the model is asked every cycle; its log read: a GPU), "
        f"{len(base)} recorded pages replayed with counters carried on, relabelled to N engines. Machine: "
        f"{cpu} CPUs, shared (load {os.getloadavg()[0]:.1f}); times are CPU time (thread for in-process, "
        f"process for the daemon); medians; ratios to the bare prometheus_client parse of the same pages."
        f"{' QUICK run.' if args.quick else ''}\n"
    )
    print("| what | engines | interval (window) | page | bare parse ms | measured | ratio to bare | target |")
    print("|---|---|---|---|---|---|---|---|")
    for r in crow:
        b, c = statistics.median(r.bare), statistics.median(r.cycle)
        target = f"<= 0.5x {_ok(c / b <= 0.5)}" if r.interval_s == 5.0 and r.engines in (1, 8) else ""
        print(
            f"| steady-state cycle (parse, window, signals, rules, model) | {r.engines} | {r.interval_s:g} s "
            f"({r.frames} pages) | {r.page_kb:.0f} KB, {r.samples:,} samples | {b:.1f} | {c:.1f} ms "
            f"| {c / b:.2f}x | {target} |"
        )
    print(
        "\nThe daemon, measured from outside over its whole run: CPU per cycle by minute (the window fills "
        f"for min({MAX_FRAMES} pages, {RETENTION_S:.0f} s)), RSS, and its API's status every 10 s after "
        "its first advice.\n"
    )
    print(
        "| engines | interval | bare parse ms | CPU ms/cycle: min 1 | min 2 | last min | last / min 2 "
        "| last min / bare | share of a core | RSS max | status polls | targets |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for d in daemons:
        if d.error:
            print(f"| {d.engines} | {d.interval_s:g} s | FAILED: {d.error} |" + " |" * 9)
            continue
        b = statistics.median(d.bare) if d.bare else float("nan")
        mins = d.per_minute()
        first = mins[0][0] if mins else float("nan")
        second = mins[1][0] if len(mins) > 1 else float("nan")
        last = mins[-1][0] if mins else float("nan")
        rss = max(m for _, m in d.rss_mib) if d.rss_mib else float("nan")
        advice = sum(s == "advice" for s in d.statuses)
        share = d.core_share()
        flat = last <= second * 1.2
        targets = [f"flat {_ok(flat)}", f"RSS <= 100 MiB {_ok(rss <= 100)}"]
        if d.engines == 8 and d.interval_s < 1:
            targets.append(f"<= 0.6x {_ok(last / b <= 0.6)}")
        if d.interval_s >= 5 and d.engines == 8:
            targets.append(f"<= 0.5% of a core {_ok(share <= 0.005)}")
        targets.append(f"advice {_ok(bool(d.statuses) and advice == len(d.statuses))}")
        print(
            f"| {d.engines} | {d.interval_s:g} s | {b:.1f} | {first:.1f} | {second:.1f} | {last:.1f} "
            f"| {last / second:.2f} | {last / b:.2f}x | {share:.2%} | {rss:.0f} MiB "
            f"| {advice}/{len(d.statuses)} advice from {d.first_advice_s or float('nan'):.0f} s "
            f"({d.predicted} with prediction) | {'; '.join(targets)} |"
        )
    for d in daemons:
        for line in sorted(set(d.other)):
            print(f"- {d.engines} engines at {d.interval_s:g} s, not advice once: {line}")
    print(f"\nbench took {time.monotonic() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
