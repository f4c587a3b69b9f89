#!/usr/bin/env python3
"""The simulator against the closed form on the recorded after-runs (issue 30, item 3).

usage: .venv/bin/python scripts/validate_sim.py [--requests N]

For every committed run that changes one knob of another (validation/runs/, the pairs of
validation/predictions.py), both models are fitted to the base run's recorded session only
(nothing of the after-run is read) and asked what the changed knob does; each predicted change
(after over before, under the same replayed requests) is applied to the base run's benchmark
numbers, and the after-run's benchmark numbers are the measurement. Preemptions are counts over
the run: the simulator's preemptions per request times the after-run's requests.

Prints a table: measured, closed-form predicted, simulated, for output throughput, TTFT p50/p95,
TPOT p95 and preemptions, and the share of pairs each model gets within 20% (throughput, TPOT)
and 35% (TTFT).
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

from advisor.predict import perfmodel as pm  # noqa: E402
from advisor.predict import workload as wl  # noqa: E402
from advisor.predict.simulator import Engine, Result, simulate  # noqa: E402

COLS = (  # (label, bench key, closed-form metric)
    ("tok/s", "output_throughput", "output_tokens_per_second"),
    ("TTFT p50", "p50_ttft_ms", "ttft_seconds_p50"),
    ("TTFT p95", "p95_ttft_ms", "ttft_seconds_p95"),
    ("TPOT p95", "p95_tpot_ms", "tpot_seconds_p95"),
)
GOALS = {"tok/s": 0.20, "TTFT p50": 0.35, "TTFT p95": 0.35, "TPOT p95": 0.20}


def engine_of(cfg: pm.Config, defaults: Engine) -> Engine:
    bs = int(cfg.block_size or defaults.block_size)
    usable = cfg.usable_kv_tokens()
    return Engine(
        max_num_seqs=int(cfg.max_num_seqs or defaults.max_num_seqs),
        max_num_batched_tokens=int(cfg.max_num_batched_tokens or defaults.max_num_batched_tokens),
        kv_blocks=max(1, int(usable // bs)) if usable is not None else defaults.kv_blocks,
        block_size=bs,
    )


def run(model: pm.Model, cfg: pm.Config, reqs: list[Any], arr: wl.Arrivals) -> dict[str, float | None]:
    assert model.fit is not None
    eng = engine_of(cfg, Engine(256, 8192, 10**9))
    engines = int(cfg.data_parallel_size)
    results: list[Result] = [
        simulate(eng, model.fit, share, clients=clients, max_steps=200_000)
        for share, clients in wl.split(reqs, arr, engines)
    ]
    done = [d for r in results for d in r.done]
    end = max(r.end for r in results)
    tpots = [d.tpot for d in done if d.tpot is not None]
    return {
        "output_throughput": sum(d.output for d in done) / end if end > 0 else None,
        "p50_ttft_ms": wl.quantile([d.ttft for d in done], 0.5),
        "p95_ttft_ms": wl.quantile([d.ttft for d in done], 0.95),
        "p95_tpot_ms": wl.quantile(tpots, 0.95),
        "preempt_per_request": sum(r.preemptions for r in results) / max(len(done), 1),
    }


def _pct(pred: float | None, meas: float | None) -> str:
    if pred is None or not meas:
        return "n/a"
    return f"{pred / meas - 1:+.0%}"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=400, help="simulated requests per candidate")
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
        conc = model.offered * model.engines if model.offered else model.running * model.engines
        arr = wl.Arrivals("closed", max(1, round(conc)), None, 1.0, "bench's closed loop")
        reqs = wl.requests(
            args.requests,
            (model.prompt_mean, model.prompt_p95),
            (model.output_mean, model.output_p95),
            arr,
            seed=0,
        )
        cfg1, _ = pm.with_knob(model, knob, value)
        try:
            s0, s1 = run(model, model.config, reqs, arr), run(model, cfg1, reqs, arr)
        except ValueError as e:
            print(f"| {name} | (not simulated: {e}) | | | |")
            continue
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
        print(f"{who}: within goal (20% tok/s, TPOT; 35% TTFT): " + ", ".join(parts))
    return 0


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
