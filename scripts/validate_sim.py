#!/usr/bin/env python3
"""The simulator against the closed form on the recorded after-runs (issue 30, item 3).

usage: .venv/bin/python scripts/validate_sim.py [--requests N]

For every committed run that changes one knob of another (validation/runs/, the pairs of
validation/predictions.py), both models are fitted to the base run's recorded session only
(nothing of the after-run is read) and asked what the changed knob does; each predicted change
(after over before, under the same replayed requests) is applied to the base run's benchmark
numbers, and the after-run's benchmark numbers are the measurement. Preemptions are counts over
the run: the simulator's preemptions per request times the after-run's requests.

The simulated load is the one inferred from the base run's own pages (``workload.fit_arrivals``:
a closed loop of N clients, or open arrivals at a rate with their burstiness), never the
benchmark's settings; its requests are as many as the base run completed (at most
``--requests``), the same ones for both candidates (common random numbers).

Prints a table: measured, closed-form predicted, simulated, for output throughput, TTFT p50/p95,
TPOT p95, goodput (output tokens/s of the requests meeting the default targets, counted per
request as ``vllm bench serve --goodput`` does and as the advice's ``simulated.Scorer`` counts
them; the closed form's from its two quantiles) and preemptions, and the share of pairs each model gets within issue 30's goals (15% throughput and
TPOT p95, 30% TTFT, 20% goodput).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "validation"))

import predictions  # noqa: E402
import report  # noqa: E402

from advisor.core.config import DEFAULT_TARGETS  # noqa: E402
from advisor.drive import inputs  # noqa: E402
from advisor.predict import perfmodel as pm  # noqa: E402
from advisor.predict import scoring, simulated  # noqa: E402
from advisor.predict import workload as wl  # noqa: E402
from advisor.predict.intake import rows_of  # noqa: E402

COLS = (  # (label, bench key, closed-form metric)
    ("tok/s", "output_throughput", "output_tokens_per_second"),
    ("TTFT p50", "p50_ttft_ms", "ttft_seconds_p50"),
    ("TTFT p95", "p95_ttft_ms", "ttft_seconds_p95"),
    ("TPOT p95", "p95_tpot_ms", "tpot_seconds_p95"),
)
GOALS = {"tok/s": 0.15, "TTFT p50": 0.30, "TTFT p95": 0.30, "TPOT p95": 0.15, "goodput": 0.20}
TARGETS = dict(DEFAULT_TARGETS)
NEGLIGIBLE = 0.05  # goodput under 5% of the throughput: "none" (a ratio of two near-zeros means nothing)


def run(model: pm.Model, cfg: pm.Config, reqs: list[Any], arr: wl.Arrivals) -> dict[str, float | None]:
    o = simulated.outcome(model, cfg, reqs, arr, TARGETS)
    return {
        "output_throughput": o.output_tokens_per_second,
        "p50_ttft_ms": o.ttft[0],
        "p95_ttft_ms": o.ttft[1],
        "p95_tpot_ms": o.tpot[1],
        "goodput": o.goodput_tokens_per_second,
        "preempt_per_request": o.preemptions_per_request,
    }


def arrivals_of(run_dir: Path) -> wl.Arrivals:
    """The load as the advisor infers it from the run's own pages (not the benchmark's flags)."""
    adv, _ = inputs.from_session(run_dir, predictions.Config(), predictions._rules())
    return wl.fit_arrivals(rows_of(adv.window.snapshots()))


def goodput_hit(pred: float | None, meas: float | None, throughput: float) -> bool | None:
    """Within the goal, where a goodput that is negligible on both sides is a hit."""
    if pred is None or meas is None:
        return None
    floor = NEGLIGIBLE * throughput
    if meas < floor:
        return pred < floor
    return abs(pred / meas - 1) <= GOALS["goodput"]


def _pct(pred: float | None, meas: float | None) -> str:
    if pred is None or not meas:
        return "n/a"
    return f"{pred / meas - 1:+.0%}"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=800, help="most simulated requests per candidate")
    args = ap.parse_args(argv)
    hits: dict[str, dict[str, list[bool]]] = {"closed form": {}, "simulator": {}}
    print("| base -> after (knob=value) | metric | measured | closed form | simulated |")
    print("|---|---|---|---|---|")
    for base, after, knob, value in predictions.pairs():
        model, _ = predictions.predict_cmd.from_source(
            predictions.Config(), predictions._rules(), session_dir=str(report.RUNS / base)
        )
        cf = predictions.predicted(base, knob, value)
        b0, b1 = report.bench(report.RUNS / base), report.bench(report.RUNS / after)
        name = f"{base} -> {after} ({knob}={value:g})"
        if model.fit is None or not model.prompt_mean or not model.output_mean:
            print(f"| {name} | (no step-time fit or lengths: not simulated) | | | |")
            continue
        try:
            arr = arrivals_of(report.RUNS / base)
        except ValueError as e:
            print(f"| {name} | (no load inferred: {e}) | | | |")
            continue
        reqs = wl.requests(
            min(args.requests, int(b0.get("completed") or args.requests)),
            (model.prompt_mean, model.prompt_p95),
            (model.output_mean, model.output_p95),
            arr,
            seed=0,
            sigmas=(model.prompt_sigma, model.output_sigma),
        )
        cfg1, _ = pm.with_knob(model, knob, value)
        try:
            s0, s1 = run(model, model.config, reqs, arr), run(model, cfg1, reqs, arr)
        except ValueError as e:
            print(f"| {name} | (not simulated: {e}) | | | |")
            continue
        load = f"{arr.kind}: " + (
            f"{arr.clients} clients" if arr.kind == "closed" else f"{arr.rate:.2f}/s, shape {arr.shape:.2f}"
        )
        print(f"| {name} | load inferred | {_bench_load(b0)} | | {load} |")
        for label, key, metric in COLS:
            meas, r_cf = b1.get(key), cf.ratio(metric)
            p_cf = b0[key] * r_cf if r_cf is not None and b0.get(key) is not None else None
            p_sim = None
            if s0.get(key) and s1.get(key) is not None and b0.get(key) is not None:
                p_sim = b0[key] * s1[key] / s0[key]  # type: ignore[operator]
            for who, p in (("closed form", p_cf), ("simulator", p_sim)):
                if p is not None and meas:
                    hits[who].setdefault(label, []).append(abs(p / meas - 1) <= GOALS[label])
            print(
                f"| {name} | {label} | {meas:.4g} | {_fmt(p_cf)} ({_pct(p_cf, meas)}) | {_fmt(p_sim)} ({_pct(p_sim, meas)}) |"
            )
        # goodput: each model's own, scaled by measured over modelled throughput of the base run
        g_meas = report.measured_goodput(report.RUNS / after)
        scale_sim = b0["output_throughput"] / s0["output_throughput"] if s0.get("output_throughput") else None
        g_sim = s1["goodput"] * scale_sim if s1.get("goodput") is not None and scale_sim else None
        thr0 = cf.measured.get("output_tokens_per_second")
        g_cf_raw = scoring.goodput(cf.predicted, TARGETS)
        g_cf = g_cf_raw * b0["output_throughput"] / thr0 if g_cf_raw is not None and thr0 else None
        for who, p in (("closed form", g_cf), ("simulator", g_sim)):
            hit = goodput_hit(p, g_meas, b1["output_throughput"])
            if hit is not None:
                hits[who].setdefault("goodput", []).append(hit)
        print(f"| {name} | goodput | {_fmt(g_meas)} | {_fmt(g_cf)} | {_fmt(g_sim)} |")
        pre_meas = report.preemptions(report.RUNS / after)
        completed = b1.get("completed") or 0
        rate = cf.predicted.get("preemptions_per_second")
        thr = b0["output_throughput"] * (cf.ratio("output_tokens_per_second") or 1.0)
        p_cf = rate * b1["total_output_tokens"] / thr if rate is not None and thr else None
        p_sim = (s1["preempt_per_request"] or 0.0) * completed
        print(f"| {name} | preemptions | {_fmt(pre_meas)} | {_fmt(p_cf)} | {_fmt(p_sim)} |")
    print()
    for who, by in hits.items():
        parts = [f"{label} {sum(v)}/{len(v)}" for label, v in by.items()]
        print(f"{who}: within goal (15% tok/s, TPOT p95; 30% TTFT; 20% goodput): " + ", ".join(parts))
    return 0


def _bench_load(b: dict[str, Any]) -> str:
    rate = b.get("request_rate")
    if rate in (None, "inf", float("inf")):
        return f"bench: closed, {b.get('max_concurrency')} clients"
    return f"bench: open, {float(rate):g}/s, burstiness {b.get('burstiness', 1.0):g}"


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
