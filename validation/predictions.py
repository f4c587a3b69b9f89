#!/usr/bin/env python3
"""The table of docs/prediction.md: the model's prediction against the measured after-run, for
every committed run that changes one knob of another (validation/runs/).

usage: .venv/bin/python validation/predictions.py [--check]

Writes the block between the ``<!-- predictions:begin -->`` and ``<!-- predictions:end -->``
markers of docs/prediction.md (the prose around it is hand-written). ``--check`` exits 1 when
the block is not what the committed runs give (a test runs it).

Per pair: the model is fitted to the base run's recorded session (nothing of the after-run is
read), asked what the one changed knob does (``vllm-advisor predict --session BASE --set
KNOB=VALUE``), and its predicted change is applied to the base run's benchmark numbers (``vllm
bench serve``'s own); the after-run's benchmark numbers are the measurement. Preemptions are
counts over the run (the session's counter); the predicted count is the predicted rate over the
predicted run time (the same output tokens at the predicted throughput).
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "validation"))

import report  # noqa: E402

from advisor.core.config import Config  # noqa: E402
from advisor.diagnose.ruleset import load_rules  # noqa: E402
from advisor.drive import predict as predict_cmd  # noqa: E402
from advisor.outputs import prediction as prediction_out  # noqa: E402
from advisor.predict import perfmodel as pm  # noqa: E402
from advisor.predict import scoring  # noqa: E402
from advisor.predict.intake import Row  # noqa: E402

DOC = REPO / "docs" / "prediction.md"
BEGIN, END = "<!-- predictions:begin -->", "<!-- predictions:end -->"
GOAL = 0.20  # throughput and TPOT p95 within 20% (on at least GOAL_SHARE of the pairs)
GOAL_SHARE = 0.90
TTFT_GOAL = 0.35  # TTFT p95 within 35% (on at least TTFT_GOAL_SHARE of the pairs)
TTFT_GOAL_SHARE = 0.75
H200 = "0.25"  # the H200 rig's vLLM (the CPU run is vLLM 0.32 on the test machine)

METRICS = (  # (label, bench key, model metric)
    ("Output tok/s", "output_throughput", "output_tokens_per_second"),
    ("TTFT p95", "p95_ttft_ms", "ttft_seconds_p95"),
    ("TPOT p95", "p95_tpot_ms", "tpot_seconds_p95"),
    ("ITL p95", "p95_itl_ms", "itl_seconds_p95"),
)


@functools.cache
def _rules() -> Any:
    return load_rules()


def pairs() -> list[tuple[str, str, str, float]]:
    """(base, after, knob, value) for every committed run that changes one knob of another."""
    results = json.loads(report.RESULTS.read_text())["runs"]
    out = []
    for scn in report.SCENARIO_ORDER:
        before = f"{scn}.before"
        if before not in results:
            continue
        extra = sorted(r for r in results if r.startswith(scn + ".") and r not in (before, f"{scn}.after"))
        chain = [before, f"{scn}.after", *extra]
        for after in chain[1:]:
            if after not in results or not (report.RUNS / after).exists():
                continue
            base = report.base_run(after, chain, results)
            if base is None:  # more than one knob from every run: no one-knob prediction
                continue
            (flag,) = report.serve_diff(results[base]["serve"], results[after]["serve"])
            knob = flag.replace("-", "_")
            if knob not in pm.KNOBS:  # the parallel sizes: not what the model moves (NOT_MODELLED)
                NOT_MODELLED.append((base, after, knob))
                continue
            out.append((base, after, knob, float(results[after]["serve"][flag])))
    return out


NOT_MODELLED: list[tuple[str, str, str]] = []


@functools.cache
def fitted(base: str) -> tuple[pm.Model, Any, list[Row]]:
    """The model fitted to the base run's session, its signal values and its busy rows (the
    simulator's load is fitted from them), as ``vllm-advisor predict --session`` reads them:
    one replay of the session per process, however many pairs share the base run."""
    model, values, _, rows = predict_cmd.from_source_exact(
        Config(), _rules(), session_dir=str(report.RUNS / base)
    )
    return model, values, rows


def predicted(base: str, knob: str, value: float) -> pm.Prediction:
    model, values, _ = fitted(base)
    return scoring.predict(model, knob, value, values)


def _ms(x: float) -> str:
    return report._ms(x)


def _err(pred: float, meas: float) -> float:
    return pred / meas - 1


@functools.cache
def evaluate() -> tuple[dict[str, Any], ...]:
    """Per pair: the prediction, the predicted and measured numbers and the errors."""
    out = []
    for base, after, knob, value in pairs():
        p = predicted(base, knob, value)
        b0, b1 = report.bench(report.RUNS / base), report.bench(report.RUNS / after)
        row: dict[str, Any] = {"base": base, "after": after, "knob": knob, "value": value, "p": p}
        for label, key, metric in METRICS:
            r = p.ratio(metric)
            if r is None or b0.get(key) is None or not b1.get(key):
                row[label] = None
                continue
            pred, meas = b0[key] * r, b1[key]
            row[label] = (pred, meas, _err(pred, meas))
        # preemptions: counts over the run
        rate = p.predicted.get("preemptions_per_second")
        thr = b0["output_throughput"] * (p.ratio("output_tokens_per_second") or 1.0)
        dur = b1["total_output_tokens"] / thr if thr else None
        row["pre"] = (
            rate * dur if rate is not None and dur is not None else None,
            report.preemptions(report.RUNS / after),
        )
        row["h200"] = vllm_version(after).startswith(H200)
        row["ok"] = all(row[k] is not None and abs(row[k][2]) <= GOAL for k in ("Output tok/s", "TPOT p95"))
        row["ttft_ok"] = row["TTFT p95"] is not None and abs(row["TTFT p95"][2]) <= TTFT_GOAL
        out.append(row)
    return tuple(out)


def render() -> str:
    rows = [
        "| After-run (base -> change) | Binding after | Conf. | Output tok/s: predicted / measured (error) "
        "| TTFT p95 | TPOT p95 | ITL p95 | Preemptions |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in evaluate():
        p = row["p"]
        cells = [
            f"**{row['after']}** ({row['base'].partition('.')[2]} -> `{row['knob']}={prediction_out._int_if_whole(row['value'])}`)"
        ]
        cells += [p.binding_after, f"{p.confidence:.2f}"]
        for label, key, _ in METRICS:
            if row[label] is None:
                cells.append("-")
                continue
            pred, meas, err = row[label]
            fmt = (lambda x: f"{x:,.0f}") if key == "output_throughput" else _ms
            cells.append(f"{fmt(pred)} / {fmt(meas)} ({err * 100:+.0f}%)")
        pp, pmeas = row["pre"]
        cells.append(f"{'-' if pp is None else f'{pp:.0f}'} / {'-' if pmeas is None else f'{pmeas:.0f}'}")
        rows.append("| " + " | ".join(cells) + " |")
    h200 = [r for r in evaluate() if r["h200"]]
    n = max(len(h200), 1)
    within = sum(r["ok"] for r in h200)
    misses = [r["after"] for r in h200 if not r["ok"]]
    ttft_within = sum(r["ttft_ok"] for r in h200)
    ttft_misses = [r["after"] for r in h200 if not r["ttft_ok"]]

    def verdict(share: float, goal: float) -> str:
        return "met" if share >= goal else "not met"

    out = [
        *rows,
        "",
        f"On the H200 (vLLM {H200}): throughput and TPOT p95 both within {GOAL * 100:.0f}% on "
        f"**{within} of {len(h200)}** pairs ({within / n * 100:.0f}%; the goal is "
        f"{GOAL_SHARE * 100:.0f}%: {verdict(within / n, GOAL_SHARE)})."
        + (f" Outside: {', '.join(misses)}." if misses else ""),
        f"TTFT p95 within {TTFT_GOAL * 100:.0f}% on **{ttft_within} of {len(h200)}** pairs "
        f"({ttft_within / n * 100:.0f}%; the goal is {TTFT_GOAL_SHARE * 100:.0f}%: "
        f"{verdict(ttft_within / n, TTFT_GOAL_SHARE)})."
        + (f" Outside: {', '.join(ttft_misses)}." if ttft_misses else "")
        + " Every miss is explained below.",
    ]
    return "\n".join(out) + "\n"


@functools.cache
def vllm_version(run_id: str) -> str:
    meta = report.RUNS / run_id / "meta.json"
    if meta.exists():
        return str(json.loads(meta.read_text()).get("vllm_version") or "")
    return ""


def main(argv: list[str]) -> int:
    return report.write_block(
        argv, DOC, BEGIN, END, render, "predictions", __doc__ or "", "validation/predictions.py"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
