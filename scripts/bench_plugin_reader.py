#!/usr/bin/env python3
"""Benchmark: what reading the stat-logger plugin's series costs the advisor, per page.

The pages of a real recording with the plugin (tests/fixtures/sessions/cpu-plugin-mixed: vLLM
0.32 on CPU, one engine, pages every 2 s) are replayed twice into a fresh advisor: as recorded,
and with every ``vllm_advisor_engine_*`` line taken out (the same server without the plugin).
Per page, CPU time (this thread) of:

- parse: the page parser (sources/metrics.parse_page);
- window: adding the parsed page to the window (derive/window.Window.add_snapshot);
- signals: every signal over the 120-s evaluation window (derive/signals.Values.all);
- per-length table: the plugin context explain shows (drive/runner.Advisor.plugin_context);
- the daemon's whole cycle: Advisor.on_page + Advisor.diagnose (parse, window, signals, rules,
  prediction, per-length table);

and the memory a page adds to the window (its frame's arrays). Medians over ``--rounds``
replays, interleaved (with, without, with, ...). Absolute times on the shared 2-core machine
vary from run to run; the ratio is what to read.

Usage: .venv/bin/python scripts/bench_plugin_reader.py [--rounds 5] [--session DIR]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from advisor.core.config import Config  # noqa: E402
from advisor.derive.signals import Context, Values  # noqa: E402
from advisor.derive.window import Window  # noqa: E402
from advisor.diagnose.ruleset import load_rules  # noqa: E402
from advisor.drive.runner import Advisor, ReplayClock, base_from_session_engine  # noqa: E402
from advisor.plugin import names as pn  # noqa: E402
from advisor.sources.metrics import parse_page  # noqa: E402
from advisor.sources.session import Session  # noqa: E402

SESSION = REPO / "tests" / "fixtures" / "sessions" / "cpu-plugin-mixed"


def without_plugin(text: str) -> str:
    keep = []
    for line in text.split("\n"):
        name = line.split(None, 3)[2] if line.startswith("#") and len(line.split(None, 3)) > 2 else line
        if not name.startswith(pn.PREFIX):
            keep.append(line)
    return "\n".join(keep)


def cpu() -> float:
    return time.thread_time()


def timed(fn: Callable[[], object]) -> float:
    t0 = cpu()
    fn()
    return cpu() - t0


def frame_bytes(w: Window) -> float:
    f = w._frames[-1]
    return float(sum(a.itemsize * len(a) for a in (f.raw, f.adj, f.hist)))


def one_round(pages: list[tuple[float, str]], session: Session) -> dict[str, float]:
    """Per page medians (ms) of the pieces, and the whole cycle, over one replay."""
    clock = ReplayClock()
    w = Window(max_age_s=math.inf, clock=clock)
    parse, add, sig = [], [], []
    snaps = []
    for t, text in pages:
        clock.t = t
        t0 = cpu()
        snap = parse_page(text, t)
        parse.append(cpu() - t0)
        snaps.append(snap)
        add.append(timed(lambda snap=snap: w.add_snapshot(snap)))
        sig.append(timed(lambda: Values(Context(w, seconds=120.0)).all()))
    adv = Advisor(
        Config(),
        load_rules(),
        base=base_from_session_engine(session.engine, has_argv=True),
        argv_provider=lambda: session.meta.get("serve_args"),
        clock=(clock2 := ReplayClock()),
        log_near=session.started.timestamp(),
    )
    cycle, ctx = [], []
    for t, text in pages:
        clock2.t = t
        cycle.append(timed(lambda t=t, text=text: (adv.on_page(text, t), adv.diagnose(t))))
        ctx.append(timed(adv.plugin_context))
    ms = 1000.0
    return {
        "parse": statistics.median(parse) * ms,
        "window": statistics.median(add) * ms,
        "signals": statistics.median(sig) * ms,
        "table": statistics.median(ctx) * ms,
        "cycle": statistics.median(cycle) * ms,
        "frame_kb": frame_bytes(w) / 1024,
        "page_kb": statistics.median(len(x.encode()) for _, x in pages) / 1024,
        "families": float(len(snaps[-1].families)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--session", type=Path, default=SESSION)
    args = ap.parse_args(argv)
    session = Session.load(args.session)
    pages = list(session.iter_scrapes())
    variants = {
        "with the plugin": pages,
        "without (its lines removed)": [(t, without_plugin(x)) for t, x in pages],
    }
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in variants}
    for _ in range(args.rounds):
        for name, ps in variants.items():
            runs[name].append(one_round(ps, session))
    print(
        f"{args.session.name}: {len(pages)} pages; medians of {args.rounds} rounds; CPU ms per page (this thread)\n"
    )
    cols = ("page_kb", "families", "parse", "window", "signals", "table", "cycle", "frame_kb")
    heads = (
        "page KB",
        "families kept",
        "parse ms",
        "window add ms",
        "signals ms",
        "per-length table ms",
        "daemon cycle ms",
        "frame KB",
    )
    print("| pages | " + " | ".join(heads) + " |")
    print("|---" * (len(heads) + 1) + "|")
    for name, rs in runs.items():
        cells = [
            f"{statistics.median(r[c] for r in rs):.2f}" if c not in ("families",) else f"{rs[0][c]:.0f}"
            for c in cols
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
