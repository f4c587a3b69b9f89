#!/usr/bin/env python3
"""How often the advice flaps, with the hysteresis and without it: every committed session
replayed as the daemon lives it, every decision simulated (the daemon's 15 s reuse of a
decision's simulations included), once as the advisor runs and once with the standing advice
forgotten before every decision (the advisor as it was before 2026-12-06).

usage: .venv/bin/python validation/flapping.py [--sessions GLOB] [--within N]

A flap is advice given, withdrawn at a later decision and given again (same rule) within
``--within`` decisions; a span is a run of decisions that advised one rule. Prints one row per
session where either run advised, and the totals. Sessions: tests/fixtures/sessions/ and the
base runs of validation/runs/ (``*.before``); a session's decisions are one per page.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from advisor.core.config import Config
from advisor.diagnose.advise import Diagnosis
from advisor.diagnose.ruleset import load_rules
from advisor.drive.inputs import advisor_for_session
from advisor.drive.runner import replay
from advisor.sources.session import Session

REPO = Path(__file__).resolve().parent.parent
DIRS = (REPO / "tests" / "fixtures" / "sessions", REPO / "validation" / "runs")


@dataclass
class Run:
    """The decisions of one replay: the rule advised at each (None: no advice)."""

    advised: list[str | None] = field(default_factory=list)
    withdrawn: int = 0  # decisions without advice that named a withdrawal ("breaks a target")

    def spans(self) -> int:
        return sum(
            1 for i, r in enumerate(self.advised) if r is not None and (i == 0 or self.advised[i - 1] != r)
        )

    def flaps(self, within: int) -> int:
        """Advice of a rule, then none, then the same rule again within ``within`` decisions."""
        n = 0
        for i in range(1, len(self.advised)):
            prev, cur = self.advised[i - 1], self.advised[i]
            if prev is None or cur == prev:
                continue
            for j in range(i + 1, min(len(self.advised), i + 1 + within)):
                if self.advised[j] == prev:
                    n += 1
                    break
        return n


def run(path: Path, hysteresis: bool) -> Run:
    s = Session.load(path)
    cfg = Config()
    adv, _ = advisor_for_session(s, cfg, load_rules())
    adv.simulate_from = -math.inf  # every decision simulated, as the daemon's are
    out = Run()

    def seen(_t: float, d: Diagnosis) -> None:
        out.advised.append(d.recommendation.rule if d.status == "advice" and d.recommendation else None)
        out.withdrawn += d.status != "advice" and "breaks a target" in d.reason
        if not hysteresis:
            adv.standing = None  # the next decision judged as a new one

    replay(adv, ((i.kind, i.t, i.text) for i in s.replay()), seen)
    return out


def sessions(pattern: str) -> list[Path]:
    fixtures, runs = DIRS
    found = [
        *sorted(fixtures.glob(pattern)),
        *(p for p in sorted(runs.glob(pattern)) if p.name.endswith(".before")),
    ]
    return [p for p in found if (p / "meta.json").exists()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sessions", default="*", help="a glob of session folders (default: all)")
    ap.add_argument("--within", type=int, default=10, help="decisions within which a return counts as a flap")
    args = ap.parse_args(argv)
    paths = sessions(args.sessions)
    if not paths:
        print(f"no session matches {args.sessions!r}", file=sys.stderr)
        return 2
    print(
        "| session | decisions | spans without / with | flaps without / with | withdrawals without / with |"
    )
    print("|---|---:|---:|---:|---:|")
    tot = [0, 0, 0, 0, 0, 0, 0]
    for p in paths:
        off, on = run(p, False), run(p, True)
        if not any(off.advised) and not any(on.advised):
            continue
        row = (
            len(on.advised),
            off.spans(),
            on.spans(),
            off.flaps(args.within),
            on.flaps(args.within),
            off.withdrawn,
            on.withdrawn,
        )
        tot = [a + b for a, b in zip(tot, row, strict=True)]
        print(
            f"| {p.name} | {row[0]} | {row[1]} / {row[2]} | {row[3]} / {row[4]} | {row[5]} / {row[6]} |",
            flush=True,
        )
    print(f"| **all** | {tot[0]} | {tot[1]} / {tot[2]} | {tot[3]} / {tot[4]} | {tot[5]} / {tot[6]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
