#!/usr/bin/env python3
"""Benchmark: what the daemon's page costs, beside the cycle it rides on.

The daemon computes nothing for the page in its cycle: ``/`` asks for the window's series
(advisor/derive/timeseries.py, read under the daemon's lock, so a cycle waits for it) and renders
the diagnosis through the same view ``explain`` uses (advisor/outputs/page.py, charts.py). This
prints, for a window as full as the daemon's after 15 minutes (the busy H200 session, counters
carried on from loop to loop, relabelled to 1, 8 and 16 engines: scripts/bench.py's pages), the
steady-state cycle (parse, window, signals, rules, model) next to one page view: the series
(the time the lock is held), the HTML, its size, and what one browser tab refreshing at the
scrape interval adds to the daemon's CPU.

Usage: .venv/bin/python scripts/bench_page.py [--rounds 15]   (~2 minutes)
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench import MAX_FRAMES, RETENTION_S, SESSION, Replay  # noqa: E402

from advisor.core.config import Config  # noqa: E402
from advisor.derive import timeseries  # noqa: E402
from advisor.diagnose.advise import Diagnosis  # noqa: E402
from advisor.diagnose.ruleset import load_rules  # noqa: E402
from advisor.drive.runner import Advisor, ReplayClock, export_state  # noqa: E402
from advisor.outputs import page  # noqa: E402
from advisor.sources.session import Session  # noqa: E402
from tests.pages import with_engines  # noqa: E402

T = TypeVar("T")


def _ms(fn: Callable[[], T]) -> tuple[float, T]:
    t0 = time.thread_time()
    out = fn()
    return (time.thread_time() - t0) * 1000, out


CONFIGS = ((1, 5.0), (1, 1.0), (8, 5.0), (8, 1.0), (16, 1.0))


def row(base: list[str], engines: int, interval: float, rounds: int) -> str:
    """One table row: the window filled as the daemon's after 15 minutes, then ``rounds`` of one
    cycle followed by one page view."""
    rules = load_rules()
    cfg = Config()
    rep = Replay(base if engines == 1 else [with_engines(p, engines) for p in base])
    clock = ReplayClock(1_800_000_000.0)
    adv = Advisor(cfg, rules, clock=clock)
    fill = int(min(RETENTION_S / interval, MAX_FRAMES))
    for i in range(fill):
        clock.t += interval
        adv.on_page(rep.page(i), clock.t)
    d = adv.diagnose(clock.t)
    cycles, series, htmls, sizes, points = [], [], [], [], []

    def cycle(text: str) -> Diagnosis:
        clock.t += interval
        adv.on_page(text, clock.t)
        return adv.diagnose(clock.t)

    for r in range(rounds):
        text = rep.page(fill + r)
        gc.collect()
        ms, d = _ms(lambda text=text: cycle(text))
        cycles.append(ms)
        gc.collect()
        ms, w = _ms(lambda: timeseries.charts(adv.window, adv.engine, cfg.targets))
        series.append(ms)
        st = export_state(adv, tuple(rules), d)
        ms, body = _ms(lambda st=st, w=w: page.server_page(st, w, refresh_s=interval))
        htmls.append(ms)
        sizes.append(len(body.encode()))
        points.append(sum(len(ln.points) for c in w.charts for ln in c.lines))
    c, s, h = (statistics.median(x) for x in (cycles, series, htmls))
    return (
        f"| {engines} | {interval:g} s ({len(adv.window.times())} pages; {d.status}) | {c:.1f} | {s:.1f} | "
        f"{h:.1f} | {s + h:.1f} | {(s + h) / c:.2f}x | {statistics.median(sizes) / 1024:.0f} KB | "
        f"{statistics.median(points):.0f} | {(s + h) / (interval * 1000) * 100:.2f}% |"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15, help="interleaved rounds per row [default: 15]")
    args = ap.parse_args()
    base = [text for _, text in Session.load(SESSION).iter_scrapes()]
    print(
        "| engines | interval (window) | cycle ms | series ms (lock held) | HTML ms | page view ms "
        "| page / cycle | page size | points drawn | one tab at the interval: share of a core |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for engines, interval in CONFIGS:
        print(row(base, engines, interval, args.rounds), flush=True)
    print(
        f"\nPages: {SESSION.name} ({len(base)} recorded pages, counters carried on). CPU time of this "
        f"thread, medians of {args.rounds} rounds (a cycle, then a page view); machine: "
        f"{os.cpu_count()} CPUs, shared (load {os.getloadavg()[0]:.1f})."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
