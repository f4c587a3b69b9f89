#!/usr/bin/env python3
"""The daemon's own verdict across a restart, replayed from the committed runs' sessions.

usage: .venv/bin/python validation/live.py [--check]

After an engine restart with other knobs the daemon compares the window before with the window
after (advisor/verify/live_experiment.py). Each committed pair that changes one knob
(validation/predictions.py's pairs) is replayed into one advisor as the daemon would have lived
it: the base run's session, then the after-run's, moved so that its server's first log line
comes 60 s after the base run's last page (a restart's downtime, the new server's start-up
after it), the engine's command line as the rig started it. Its verdict stands beside the one
``compare`` gives on the two runs' benchmark files with the knob's targets and guards
(docs/validation.md's results table): the live windows have the server's histograms only, and
no per-request values.

The A/A rows replay two runs of one configuration under one load (kv-seqs-bind's runs on three
device leases, report.NOISE_RUNS; the draws scenarios: seeds of one open load, and seed 0
twice), every ordered pair; the second run's command line is read with
``--max-num-seqs`` one higher, so that the daemon sees a change and judges it, where nothing
changed on the server. Any keep or revert there is wrong. Each verdict is shown as the daemon
gives it (each window measured in batches whose spread is its noise:
``live_experiment.batch_floors``) and as one window alone gives it (``most_batches=1``).

The process start time on each page of the later session and the time of each of its log lines
are moved with it: the rig started the servers of a scenario's alternatives together, so their
start times are within a second of each other and a replay that did not move them would see no
restart; a log line left at its own time would date the change after the pages it caused.

Writes the block between ``<!-- live:begin -->`` and ``<!-- live:end -->`` of
docs/validation.md; ``--check`` exits 1 when it is stale (a test runs it).
"""

from __future__ import annotations

import itertools
import json
import math
import re
import sys
from collections import Counter
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "validation"))

import predictions  # noqa: E402
import report  # noqa: E402

from advisor.core import knobs  # noqa: E402
from advisor.core.config import Config  # noqa: E402
from advisor.diagnose.ruleset import load_rules  # noqa: E402
from advisor.drive.runner import Advisor, ReplayClock, base_from_session_engine  # noqa: E402
from advisor.sources.session import Session  # noqa: E402
from advisor.verify import live_experiment as lx  # noqa: E402

DOC = REPO / "docs" / "validation.md"
BEGIN, END = "<!-- live:begin -->", "<!-- live:end -->"
GAP_S = 60.0  # the restart's downtime between the two sessions
_START = re.compile(r"^(process_start_time_seconds(?:\{[^}\n]*\})?) (\S+)$", re.M)
_LOG_TIME = re.compile(r"\b(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\b")  # vLLM's "INFO 11-30 14:08:38 [...]"


def _argv(run: str) -> list[str]:
    return list(json.loads((report.RUNS / run / "serve_argv.json").read_text()))


def _moved(text: str, offset: float) -> str:
    """A page with its process start time moved by ``offset`` seconds."""
    if not offset:
        return text
    return _START.sub(lambda m: f"{m.group(1)} {float(m.group(2)) + offset!r}", text)


def _moved_line(line: str, offset: float, year: int) -> str:
    """A log line with its time moved by ``offset`` seconds (the line's own clock, whatever its
    zone: only the difference matters)."""
    m = _LOG_TIME.search(line)
    if not offset or m is None:
        return line
    t = datetime(year, *(int(g) for g in m.groups())) + timedelta(seconds=round(offset))
    return line[: m.start()] + t.strftime("%m-%d %H:%M:%S") + line[m.end() :]


def replay(a: str, b: str, argv_b: list[str] | None = None) -> tuple[lx.LiveExperiment | None, str | None]:
    """The daemon's experiment over runs ``a`` then ``b`` (``argv_b``: b's command line as the
    daemon reads it), its verdict, and the verdict of the same windows measured without batches."""
    sessions = [Session.load(report.RUNS / r) for r in (a, b)]
    argvs = [_argv(a), argv_b if argv_b is not None else _argv(b)]
    current: list[list[str]] = [argvs[0]]
    clock = ReplayClock()
    adv = Advisor(
        Config(),
        load_rules(),
        base=base_from_session_engine(sessions[0].engine, has_argv=True),
        argv_provider=lambda: current[0],
        clock=clock,
        log_near=sessions[0].started.timestamp(),
    )
    adv.simulate_from = math.inf  # the verdicts are wanted, not the predictions a change is held to
    offset, end = 0.0, None
    for s, argv in zip(sessions, argvs, strict=True):
        items = list(s.replay())
        # the session's first item (its server's first log line, or its first page) GAP_S after
        # the last page of the session before
        first = min(i.t for i in items if i.t is not None)
        offset = 0.0 if end is None else end + GAP_S - first
        end = max(t for t, _ in s.scrapes) + offset
        current[0] = argv
        for item in items:
            if item.kind == "scrape" and item.t is not None:
                clock.t = item.t + offset
                adv.on_page(_moved(item.text, offset), clock.t)
                adv.advance_experiment(clock.t)  # what each diagnosis does first: the verdict alone
            else:
                adv.on_log_line(_moved_line(item.text, offset, s.started.year))
    exp = adv.finished_experiments[-1] if adv.finished_experiments else None
    if exp is None or exp.ended_at is None:
        return exp, None
    alone = lx.judge(replace(exp, state="observing", verdict=None), adv.window, exp.ended_at, most_batches=1)
    return exp, alone.verdict


def aa_argv(run: str) -> list[str]:
    """``run``'s command line with ``--max-num-seqs`` one higher: how an A/A pair's second run is
    read, so that the daemon judges a change where the server has none."""
    argv = _argv(run)
    i = argv.index("--max-num-seqs")
    argv[i + 1] = str(int(argv[i + 1]) + 1)
    return argv


def _value(knob: str, value: float) -> str:
    return knobs.format_bytes(value) if knob.endswith("_bytes") else f"{value:g}"


def _first_reason(exp: lx.LiveExperiment | None) -> str:
    if exp is None:
        return "no experiment"
    r = exp.reasons[0] if exp.reasons else ""
    return r if len(r) <= 110 else r[:107] + "..."


def _counts(c: Counter[str | None]) -> str:
    shown = [f"{v} {c[v]}" for v in ("keep", "revert", "inconclusive") if c[v]]
    return ", ".join(shown + ([f"no experiment {c[None]}"] if c[None] else []))


def render() -> str:
    rows = [
        "| Pair (base -> change) | `compare` (benchmark files) | the daemon, live | one window alone | why (the daemon's first reason) |",
        "|---|---|---|---|---|",
    ]
    results = json.loads(report.RESULTS.read_text())["runs"]
    agree = agree_alone = total = 0
    for base, after, knob, value in predictions.pairs():
        _, direction = report.changed_knob(results[base]["serve"], results[after]["serve"])
        bench, _ = report.bench_verdict(base, after, {"knob": knob, "direction": direction})
        exp, alone = replay(base, after)
        live = exp.verdict if exp is not None else None
        total += 1
        agree += live == bench
        agree_alone += alone == bench
        rows.append(
            f"| {after} (`{knob}={_value(knob, value)}`) | {bench} | {'**' + str(live) + '**' if live != bench else live} "
            f"| {alone} | {_first_reason(exp).replace('|', '/')} |"
        )
    rows += [
        "",
        f"The daemon's verdict is `compare`'s on {agree} of {total} pairs ({agree_alone} of {total} "
        "with one window alone); **bold**: where it is not.",
        "",
        "| A/A pairs (one configuration, one load) | pairs | the daemon, live | one window alone |",
        "|---|---|---|---|",
    ]
    groups = [
        ("kv-seqs-bind's A/A runs (a closed loop of 256 clients, three leases)", list(report.NOISE_RUNS)),
        *(
            (
                f"{scn} (open arrivals near a knee, seeds 0-3 and 0 again)",
                [r for r, _ in report.draw_runs(results, scn)],
            )
            for scn in report.DRAWS_SCENARIOS
        ),
    ]
    for label, runs in groups:
        batched: Counter[str | None] = Counter()
        alone_n: Counter[str | None] = Counter()
        for a, b in itertools.permutations(runs, 2):
            exp, one = replay(a, b, aa_argv(b))
            batched[exp.verdict if exp is not None else None] += 1
            alone_n[one] += 1
        n = len(runs) * (len(runs) - 1)
        rows.append(f"| {label}: {len(runs)} runs | {n} | {_counts(batched)} | {_counts(alone_n)} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str]) -> int:
    return report.write_block(argv, DOC, BEGIN, END, render, "live", __doc__ or "", "validation/live.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
