#!/usr/bin/env python3
"""Benchmark: one scrape-and-evaluate cycle against the bare prometheus_client parse of the
same page (one-engine and eight-engine pages), and the daemon's CPU share and memory over a
long replay of a recorded session at high speed (memory must stay flat).

Prints tables; changes nothing. Target: a cycle within 1.5x of the bare parse.
Usage: python scripts/bench.py [--cycles 3000] [--repeat 30]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psutil
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.config import Config  # noqa: E402
from advisor.ruleset import load_rules  # noqa: E402
from advisor.runner import Advisor, ReplayClock  # noqa: E402
from advisor.session import Session  # noqa: E402
from tests.pages import with_engines  # noqa: E402

SESSION = ROOT / "advisor" / "data" / "sessions" / "h200-A_s256"
INTERVAL = 5.0


def bare_parse(text: str) -> None:
    for fam in text_string_to_metric_families(text):
        for _ in fam.samples:
            pass


def median_ms(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def warm_advisor(pages: list[str]) -> tuple[Advisor, ReplayClock, float]:
    clock = ReplayClock(1_800_000_000.0)
    adv = Advisor(Config(), load_rules(), clock=clock)
    for text in pages:
        clock.t += INTERVAL
        adv.on_page(text, clock.t)
    return adv, clock, clock.t


def cycle_table(pages: list[str], repeat: int) -> list[tuple[str, int, float, float]]:
    rows = []
    peak = pages[len(pages) // 2]
    for label, page in (("1 engine", peak), ("8 engines", with_engines(peak, 8))):
        session_pages = pages if label == "1 engine" else [with_engines(p, 8) for p in pages]
        adv, clock, _ = warm_advisor(session_pages[:24])  # a full 2-minute window of history
        bare = median_ms(lambda page=page: bare_parse(page), repeat)

        def one_cycle(page: str = page, adv: Advisor = adv, clock: ReplayClock = clock) -> None:
            clock.t += INTERVAL
            adv.on_page(page, clock.t)
            adv.diagnose(clock.t)

        cyc = median_ms(one_cycle, repeat)
        rows.append((label, len(page), bare, cyc))
    return rows


def soak(pages: list[str], cycles: int) -> list[tuple[int, float, float, float]]:
    """Replay the session's pages in a loop at full speed, as the daemon lives: scrape, a log
    line, evaluate, and every third cycle an exporter scrape (Prometheus at 15 s, daemon at 5 s)."""
    from prometheus_client import generate_latest

    from advisor.outputs.exporter import ExportState, make_registry

    proc = psutil.Process(os.getpid())
    adv, clock, _ = warm_advisor(pages[:2])
    state: list[ExportState] = [ExportState(None, True, tuple(adv.evaluator.rules))]
    registry = make_registry(lambda: state[0])
    samples = []
    cpu0 = proc.cpu_times()
    t0 = time.perf_counter()
    step = max(1, cycles // 10)
    for i in range(cycles):
        clock.t += INTERVAL
        adv.on_page(pages[i % len(pages)], clock.t)
        adv.on_log_line(
            "(APIServer pid=1) INFO 11-29 23:27:11 [loggers.py:335] Engine 000: Avg prompt throughput: 1.0 "
            "tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache "
            "usage: 5.0%, Prefix cache hit rate: 0.0%"
        )
        d = adv.diagnose(clock.t)
        state[0] = ExportState(d, adv.up, tuple(adv.evaluator.rules), dict(adv.stats.scrapes))
        if i % 3 == 0:
            generate_latest(registry)
        if (i + 1) % step == 0:
            gc.collect()
            cpu = proc.cpu_times()
            used = (cpu.user + cpu.system) - (cpu0.user + cpu0.system)
            samples.append(
                (i + 1, used / (i + 1) * 1000, proc.memory_info().rss / 2**20, (time.perf_counter() - t0))
            )
    return samples


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    s = Session.load(SESSION)
    pages = [text for _, text in s.iter_scrapes()]
    print(f"Pages: {SESSION.name} (vLLM 0.25, H200), {len(pages)} scrapes; 8-engine page derived from it.\n")
    print("One scrape-and-evaluate cycle vs the bare prometheus_client parse of the same page")
    print(
        f"(median of {args.repeat}; the cycle = parse + window update + ~80 signals + rules + arbitration)\n"
    )
    print("| page | bytes | bare parse ms | cycle ms | cycle / parse | target |")
    print("|---|---|---|---|---|---|")
    ok = True
    for label, size, bare, cyc in cycle_table(pages, args.repeat):
        ratio = cyc / bare
        ok &= ratio <= 1.5
        print(
            f"| {label} | {size:,} | {bare:.1f} | {cyc:.1f} | {ratio:.2f}x | <= 1.5x {'ok' if ratio <= 1.5 else 'MISSED'} |"
        )
    print(
        f"\nLong replay: {args.cycles} cycles at full speed = {args.cycles * INTERVAL / 3600:.1f} h of a "
        f"{INTERVAL:.0f}s-interval daemon\n"
    )
    print("| cycles | CPU ms / cycle | CPU share of one core at 5 s interval | RSS MiB | wall s |")
    print("|---|---|---|---|---|")
    rows = soak(pages, args.cycles)
    for n, cpu_ms, rss, wall in rows:
        print(f"| {n} | {cpu_ms:.1f} | {cpu_ms / (INTERVAL * 1000) * 100:.2f}% | {rss:.1f} | {wall:.1f} |")
    growth = rows[-1][2] - rows[len(rows) // 2][2]
    print(
        f"\nRSS growth over the second half: {growth:+.1f} MiB ({'flat' if abs(growth) < 5 else 'GROWING'})"
    )
    prediction_rows(pages, args.repeat)
    return 0 if ok else 1


def prediction_rows(pages: list[str], repeat: int) -> None:
    """Issue 13: the cost of the advice's prediction (the performance model fitted to the window
    and every candidate value predicted, advisor/whatif.py) per scrape-and-evaluate cycle, next
    to the same cycles without it: two advisors warmed alike, then fed the same next pages."""
    from advisor import advise

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
