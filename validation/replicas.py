#!/usr/bin/env python3
"""The check table of docs/autoscaling.md: the replica prediction against measured runs.

usage: .venv/bin/python validation/replicas.py [--check]

The committed two-GPU runs of ``dense-kv-tp`` (validation/runs/, docs/validation.md) are one
engine (``dense-kv-tp.before``: one H200 serving, 1,024 concurrent requests) and the same
engine twice under the same load (``dense-kv-tp.data-parallel-size-2``: data parallelism 2,
vLLM's coordinator spreading the requests over two engines on the host's two GPUs): one
server against two replicas of it behind one balancer. The model is fitted to the one-engine
run alone and asked what two replicas carrying its load do
(:func:`advisor.predict.replicas.predict_at`); that is set against what DP 2 measured, two ways:

- the benchmark client's numbers (``vllm bench serve``), the model's predicted change applied
  to the one-engine run's, as docs/prediction.md does; and
- the latencies of the server's own histograms (the recorded sessions: what the advisor itself
  reads, and what the exported ``vllm_advisor_desired_replicas_predicted_*`` series state).

Also the count the advisor would want for the one-engine run at the default targets.

Writes the block between ``<!-- replicas:begin -->`` and ``<!-- replicas:end -->`` of
docs/autoscaling.md; ``--check`` exits 1 when it is stale (a test runs it).
"""

from __future__ import annotations

import functools
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
from advisor.predict import perfmodel as pm  # noqa: E402
from advisor.predict import replicas as rp  # noqa: E402

DOC = REPO / "docs" / "autoscaling.md"
BEGIN, END = "<!-- replicas:begin -->", "<!-- replicas:end -->"
ONE, TWO = "dense-kv-tp.before", "dense-kv-tp.data-parallel-size-2"

METRICS = (  # (label, bench key, model metric, unit)
    ("Output tokens/s (both replicas)", "output_throughput", "output_tokens_per_second", "tok/s"),
    ("TTFT p95", "p95_ttft_ms", "ttft_seconds_p95", "s"),
    ("TPOT p95", "p95_tpot_ms", "tpot_seconds_p95", "s"),
    ("ITL p95", "p95_itl_ms", "itl_seconds_p95", "s"),
)


@functools.cache
def fitted(run: str) -> tuple[pm.Model, dict[str, float | None]]:
    return predict_cmd.from_source(Config(), load_rules(), session_dir=str(report.RUNS / run))


@functools.cache
def evaluate() -> dict[str, Any]:
    model, values = fitted(ONE)
    p = rp.predict_at(model, 2, current=1, queue_share=values.get("queue_share_of_ttft"))
    two, _ = fitted(TWO)
    b1, b2 = report.bench(report.RUNS / ONE), report.bench(report.RUNS / TWO)
    rows = []
    for label, key, metric, unit in METRICS:
        one_m, pred, meas = model.measured.get(metric), p.predicted.get(metric), two.measured.get(metric)
        r = p.ratio(metric)
        scale = 1.0 if unit == "tok/s" else 1e-3
        bench_one = b1[key] * scale
        bench_pred = bench_one * r if r is not None else None
        bench_meas = b2[key] * scale
        rows.append(
            {
                "label": label,
                "unit": unit,
                "server": (one_m, pred, meas),
                "bench": (bench_one, bench_pred, bench_meas),
            }
        )
    sizing = rp.size(model, values, Config().targets, current=1)
    return {"prediction": p, "rows": rows, "sizing": sizing}


def _fmt(x: float | None, unit: str) -> str:
    if x is None:
        return "-"
    if unit == "tok/s":
        return f"{x:,.0f}"
    return f"{x:.1f} s" if x >= 1 else f"{x * 1000:.1f} ms"


def _err(pred: float | None, meas: float | None) -> str:
    if pred is None or not meas:
        return "-"
    return f"{(pred / meas - 1) * 100:+.0f}%"


def render() -> str:
    ev = evaluate()
    out = [
        "| Metric | One engine, measured | Two replicas, predicted | DP 2, measured | Error |",
        "|---|---|---|---|---|",
    ]
    for source, title in (("bench", "benchmark client"), ("server", "server histograms")):
        for row in ev["rows"]:
            if source == "server" and row["unit"] != "s":
                continue  # a burst's token rate over its busy span is not a steady rate (see below)
            one, pred, meas = row[source]
            u = row["unit"]
            out.append(
                f"| {row['label']} ({title}) | {_fmt(one, u)} | {_fmt(pred, u)} | {_fmt(meas, u)} | {_err(pred, meas)} |"
            )
    s = ev["sizing"]
    p = ev["prediction"]
    out += [
        "",
        f"The model (confidence {p.confidence:.2f}) binds on `{p.binding_before}` with one engine and on "
        f"`{p.binding_after}` with two. At the default targets (TTFT p95 2 s, ITL p95 100 ms) and 1.2x "
        f"the load, the one-engine run asks for **{s.needed}** replica{'s' if s.needed != 1 else ''}: {s.reason}.",
    ]
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    return report.write_block(
        argv, DOC, BEGIN, END, render, "replicas", __doc__ or "", "validation/replicas.py"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
