#!/usr/bin/env python3
"""The step-time fit from the plugin's exact step records vs from the 2-s deltas the model uses.

For a recorded session with the stat-logger plugin (``--enable-logging-iteration-details``: the
engine's own step records), per interval between two pages:

- truth: the plugin's exact mean step time over the steps in it (derive.steps.step_sums);
- fit A, exact: ``t = a + b*d + c*p`` by least squares over every step (derive.steps.fit),
  evaluated at the interval's exact mean decode and prefill tokens;
- fit B, today's model: advisor.predict.perfmodel.fit_step_time over perfmodel.intervals (step
  counts and tokens inferred from vLLM's counters and histograms between pages), evaluated at the
  model's own per-interval inputs (what it would predict) and at the exact ones (its coefficients'
  share of the error).

Prints the coefficients and the RMSE of each against the truth (absolute and relative to the
mean step time), over the busy intervals both see. Read-only use of perfmodel.

Usage: .venv/bin/python scripts/plugin_fit_error.py [SESSION_DIR ...]
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from advisor.derive import steps  # noqa: E402
from advisor.derive.window import Window  # noqa: E402
from advisor.predict import perfmodel  # noqa: E402
from advisor.sources.metrics import parse_page  # noqa: E402
from advisor.sources.session import Session  # noqa: E402

DEFAULT = (
    REPO / "tests" / "fixtures" / "sessions" / "cpu-plugin-mixed",
    REPO / "tests" / "fixtures" / "sessions" / "cpu-plugin-mixed-after",
)


class _Clock:
    t = 0.0

    def __call__(self) -> float:
        return self.t


def window_of(path: Path) -> Window:
    clock = _Clock()
    w = Window(max_age_s=math.inf, clock=clock)
    for t, text in Session.load(path).iter_scrapes():
        clock.t = t
        w.add_snapshot(parse_page(text, t))
    return w


def rmse(pairs: list[tuple[float, float]]) -> float:
    return math.sqrt(sum((a - b) ** 2 for a, b in pairs) / len(pairs)) if pairs else math.nan


def compare(path: Path) -> dict[str, object]:
    w = window_of(path)
    sums = {(s.t0, s.t1): s for s in steps.step_sums(w)}
    exact = steps.fit(sums.values())
    snaps = w.snapshots()
    rows: list[tuple[float, float, float, float]] = []
    pairs = []
    for a, b in itertools.pairwise(snaps):
        got = perfmodel.intervals([a, b])
        if not got:
            continue
        iv = got[0]
        rows.append((iv.dt / iv.steps, iv.decode, iv.prefill, iv.steps))
        s = sums.get((a.t, b.t))
        if s is not None and s.n > 0:
            pairs.append((iv, s))
    model = perfmodel.fit_step_time(rows)
    truth = [s.seconds / s.n for _, s in pairs]
    out: dict[str, object] = {
        "session": path.name,
        "steps": exact.steps if exact else 0,
        "intervals": len(pairs),
        "mean_step_s": sum(truth) / len(truth) if truth else math.nan,
        "exact_fit": exact,
        "model_fit": model,
        "step_period_s": sum(s.t1 - s.t0 for _, s in pairs) / sum(s.n for _, s in pairs)
        if pairs
        else math.nan,
        "model_step_s": sum(iv.dt for iv, _ in pairs) / sum(iv.steps for iv, _ in pairs)
        if pairs
        else math.nan,
    }
    if exact is not None:
        out["rmse_exact"] = rmse(
            [
                (exact.at(s.mean_decode or 0, s.mean_prefill or 0), t)
                for (_, s), t in zip(pairs, truth, strict=True)
            ]
        )
        out["rmse_exact_per_step"] = exact.rmse_s
    if model is not None:
        out["rmse_model"] = rmse(
            [(model.at(iv.decode, iv.prefill), t) for (iv, _), t in zip(pairs, truth, strict=True)]
        )
        out["rmse_model_exact_inputs"] = rmse(
            [
                (model.at(s.mean_decode or 0, s.mean_prefill or 0), t)
                for (_, s), t in zip(pairs, truth, strict=True)
            ]
        )
        out["rmse_model_own_step"] = rmse(
            [(iv.dt / iv.steps, t) for (iv, _), t in zip(pairs, truth, strict=True)]
        )
    return out


def ms(x: object) -> str:
    return f"{float(x) * 1000:.2f}" if isinstance(x, int | float) and math.isfinite(x) else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("sessions", nargs="*", type=Path, default=list(DEFAULT))
    args = ap.parse_args(argv)
    print(
        "| session | steps | busy intervals | mean engine step ms | fit | a ms | b ms/decode token | c ms/prefill token | RMSE vs exact per-interval mean ms (% of mean) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for path in args.sessions:
        r = compare(path)
        mean = r["mean_step_s"]
        assert isinstance(mean, float)

        def pct(x: object, mean: float = mean) -> str:
            return (
                f"{ms(x)} ({float(x) / mean * 100:.0f}%)"
                if isinstance(x, float) and math.isfinite(x)
                else "-"
            )

        e, m = r["exact_fit"], r["model_fit"]
        head = f"| {r['session']} | {r['steps']:.0f} | {r['intervals']} | {ms(mean)} "
        if isinstance(e, steps.StepFit):
            print(
                head
                + f"| exact step records (per step RMSE {ms(e.rmse_s)}) | {ms(e.base_s)} | {e.per_decode_s * 1000:.4f} "
                f"| {e.per_prefill_s * 1000:.4f} | {pct(r.get('rmse_exact'))} |"
            )
        if isinstance(m, perfmodel.StepTime):
            print(
                head
                + f"| 2-s deltas (perfmodel, its inputs) | {ms(m.a)} | {m.k * 1000:.4f} | {m.c * 1000:.4f} "
                f"| {pct(r.get('rmse_model'))} |"
            )
            print(head + f"| 2-s deltas, exact inputs | | | | {pct(r.get('rmse_model_exact_inputs'))} |")
            print(
                head + f"| the model's own step time (dt/steps) | | | | {pct(r.get('rmse_model_own_step'))} |"
            )
        print(
            f"<!-- {r['session']}: mean wall-clock step period {ms(r['step_period_s'])} ms (interval / exact steps), "
            f"the model's {ms(r['model_step_s'])} ms -->"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
