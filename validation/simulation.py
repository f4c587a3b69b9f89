#!/usr/bin/env python3
"""The scheduler simulator beside the closed form on every committed run pair (issue 30): the
second table of docs/prediction.md.

usage: .venv/bin/python validation/simulation.py [--check] [--table] [--seeds K] [--requests N]
       .venv/bin/python validation/simulation.py --own [RUN ...]
       .venv/bin/python validation/simulation.py --steady
       .venv/bin/python validation/simulation.py --draws [--check]
       .venv/bin/python validation/simulation.py --table --benchmark-draw

Writes the block between the ``<!-- simulator:begin -->`` and ``<!-- simulator:end -->`` markers
of docs/prediction.md; ``--check`` exits 1 when that block is not what the committed runs give (a
test runs it); ``--table`` prints the long table instead (every metric of every pair, the loads
inferred and run, the preemptions); ``--seeds K`` prints the simulator's error on each pair over
K draws of the requests (how much of a miss is the one draw the measurement is); ``--requests
N``: at most N simulated requests per candidate (the docs' block is written without a bound);
``--own`` prints each run simulated on its own fit and its own benchmark's requests (how well
the simulator reproduces the TTFT it was fitted beside, with and without asynchronous
scheduling); ``--steady`` prints each closed-loop run's TTFT as the requests after each client's
first measured it, beside today simulated with the loop counted as the wave it started as and as
a steady loop (its first round not counted: what a daemon beside a live loop simulates);
``--draws`` writes the block between ``<!-- draws:begin -->`` and ``<!-- draws:end -->`` (how
much of the miss is the draw: the simulator on the benchmark's own requests, one draw of its
own against another, and each run of a configuration recorded under several draws of its load
beside the simulator), ``--benchmark-draw`` with ``--table`` simulates each pair on its base run's
benchmark requests.

For every committed run that changes one knob of another (validation/runs/, the pairs of
validation/predictions.py), both models are fitted to the base run's recorded session only
(nothing of the after-run is read) and asked what the changed knob does; each predicted change
(after over before, under the same replayed requests) is applied to the base run's benchmark
numbers, and the after-run's benchmark numbers are the measurement. Preemptions are counts over
the run: the simulator's preemptions per request times the after-run's requests.

The simulated load is the one inferred from the base run's own pages (``workload.fit_arrivals``:
a closed loop of N clients, or open arrivals at a rate with their burstiness), never the
benchmark's settings; its requests are as many as the base run completed, the same ones for
both candidates (common random numbers). (A bound of 800, kept until 2026-12-05, cut
dense-kv-tp's one burst of 1,024 requests short: its last 224, the tail of its TTFT, were never
simulated; without it TTFT p95 is within goal on 17 pairs, 14 with it, and no pair's other
numbers move by more than the sampling of a few more requests.)

Goodput is output tokens/s of the requests meeting the default targets, counted per request as
``vllm bench serve --goodput`` does and as the advice's ``simulated.Scorer`` counts them (the
closed form's from its two quantiles joined by a line), each model's scaled by the measured over
the modelled throughput of the base run; a goodput under 5% of the throughput on both sides is
"none" and a hit. Issue 30's goals: throughput and TPOT p95 within 15% on >= 90% of the pairs,
TTFT p50 and p95 within 30% on >= 80%, goodput within 20% on >= 80%.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "validation"))

import predictions  # noqa: E402
import report  # noqa: E402

from advisor.core.config import DEFAULT_TARGETS  # noqa: E402
from advisor.predict import perfmodel as pm  # noqa: E402
from advisor.predict import scoring, simulated  # noqa: E402
from advisor.predict import workload as wl  # noqa: E402
from advisor.predict.simulator import Request  # noqa: E402

DOC = REPO / "docs" / "prediction.md"
BEGIN, END = "<!-- simulator:begin -->", "<!-- simulator:end -->"
DRAWS_BEGIN, DRAWS_END = "<!-- draws:begin -->", "<!-- draws:end -->"
COLS = (  # (label, bench key, closed-form metric)
    ("tok/s", "output_throughput", "output_tokens_per_second"),
    ("TTFT p50", "p50_ttft_ms", "ttft_seconds_p50"),
    ("TTFT p95", "p95_ttft_ms", "ttft_seconds_p95"),
    ("TPOT p95", "p95_tpot_ms", "tpot_seconds_p95"),
)
LABELS = (*(c[0] for c in COLS), "goodput")
GOALS = {"tok/s": 0.15, "TTFT p50": 0.30, "TTFT p95": 0.30, "TPOT p95": 0.15, "goodput": 0.20}
SHARES = {"tok/s": 0.90, "TTFT p50": 0.80, "TTFT p95": 0.80, "TPOT p95": 0.90, "goodput": 0.80}
MODELS = ("closed form", "simulator")
# the simulator's after-state as it simulates it, not as a change applied to the base run's
# measurement: what the advice's target checks and goodput read (scoring.sim_breaks)
ABSOLUTE = "simulator, its simulated after-state (as the advice's target checks read it)"
TARGETS = dict(DEFAULT_TARGETS)
NEGLIGIBLE = 0.05  # goodput under 5% of the throughput: "none" (a ratio of two near-zeros means nothing)
DEFAULT_REQUESTS: int | None = None  # every request the base run completed


@dataclass
class Pair:
    """One committed pair: the measured after-run and what each model predicted for it
    (``cells[label] = (measured, {model: predicted or None})``), or why it was not simulated."""

    base: str
    after: str
    knob: str
    value: float
    skipped: str = ""
    load: str = ""  # the load inferred from the base run's pages
    bench_load: str = ""  # the load the benchmark ran
    cells: dict[str, tuple[float | None, dict[str, float | None]]] = field(default_factory=dict)
    preemptions: tuple[float | None, float | None, float | None] = (None, None, None)
    throughput_after: float = 0.0
    # the after-run's steps over the time the base run's step fit gives their work, relative to
    # the base run's own (1: the after-run stepped as the base did)
    steps: float | None = None

    @property
    def kept_speed(self) -> bool:
        return self.steps is not None and abs(self.steps - 1) <= pm.SAME_SPEED

    @property
    def name(self) -> str:
        return f"{self.base} -> {self.after} ({self.knob}={self.value:g})"

    def hit(self, label: str, model: str) -> bool | None:
        """Within the goal (None: no prediction or no measurement); goodput negligible on both
        sides is a hit."""
        meas, preds = self.cells.get(label, (None, {}))
        pred = preds.get(model)
        if pred is None or meas is None:
            return None
        if label == "goodput":
            floor = NEGLIGIBLE * self.throughput_after
            if meas < floor:
                return pred < floor
        elif not meas:
            return None
        return abs(pred / meas - 1) <= GOALS[label]


def run(model: pm.Model, cfg: pm.Config, reqs: list[Any], arr: wl.Arrivals) -> dict[str, float | None]:
    return _numbers(simulated.outcome(model, cfg, reqs, arr, TARGETS))


def _numbers(o: simulated.Outcome) -> dict[str, float | None]:
    return {
        "output_throughput": o.output_tokens_per_second,
        "p50_ttft_ms": o.ttft[0],
        "p95_ttft_ms": o.ttft[1],
        "p95_tpot_ms": o.tpot[1],
        "goodput": o.goodput_tokens_per_second,
        "preempt_per_request": o.preemptions_per_request,
    }


def evaluate(
    requests: int | None = DEFAULT_REQUESTS,
    seed: int = 0,
    only: set[str] | None = None,
    benchmark_draw: bool = False,
) -> list[Pair]:
    """Every pair (``only``: those whose after-run is named there), its requests drawn with
    ``seed`` (the docs' block: 0); ``benchmark_draw``: the base run's benchmark's own requests
    instead (its arrival times and lengths, which every run of a scenario shares: the benchmark's
    seed is fixed), so that what is left is the fit's error, not the draw's."""
    out = []
    for base, after, knob, value in predictions.pairs():
        if only is not None and after not in only:
            continue
        pair = Pair(base, after, knob, value)
        out.append(pair)
        model, _, rows = predictions.fitted(base)
        b0, b1 = report.bench(report.RUNS / base), report.bench(report.RUNS / after)
        pair.bench_load = _bench_load(b0)
        if model.fit is None or not model.prompt_mean or not model.output_mean:
            pair.skipped = "no step-time fit or lengths"
            continue
        try:
            # the load as the advisor infers it from the run's own pages
            arr = wl.fit_arrivals(rows, model.tallies)
        except ValueError as e:
            pair.skipped = f"no load inferred: {e}"
            continue
        completed = int(b0.get("completed") or 0)
        if not completed:
            pair.skipped = "the base run's benchmark completed no request"
            continue
        if benchmark_draw:
            own = own_load(base)
            if own is None:
                pair.skipped = "no request times in the base run's benchmark"
                continue
            reqs, arr = own[1], own[2]
        else:
            reqs = simulated.requests_of(model, arr, min(requests or completed, completed), seed)
        cfg1, _ = pm.with_knob(model, knob, value)
        try:
            # today's knobs as the advice's scorer calibrates and simulates them, then the change
            model, now = simulated.outcome_today(model, reqs, arr, TARGETS)
            s0, s1 = _numbers(now), run(model, cfg1, reqs, arr)
        except ValueError as e:
            pair.skipped = f"not simulated: {e}"
            continue
        cf = predictions.predicted(base, knob, value)
        after_model, _, after_rows = predictions.fitted(after)
        # over the base run's own speed against its fit (1 for a least-squares fit; not where
        # the fit was set otherwise, e.g. a CPU's decode priced as prefill)
        own = model.fit.speed_of(rows, model.config.kv_cache_tokens, model.config.full_limit())
        speed = model.fit.speed_of(
            after_rows, after_model.config.kv_cache_tokens, after_model.config.full_limit()
        )
        pair.steps = speed / own if speed is not None and own else None
        pair.load = (
            f"{arr.clients} clients"
            if arr.kind == "closed"
            else f"open {arr.rate:.2f}/s, shape {arr.shape:.2f}"
        )
        pair.throughput_after = float(b1["output_throughput"])
        for label, key, metric in COLS:
            r_cf = cf.ratio(metric)
            p_cf = b0[key] * r_cf if r_cf is not None and b0.get(key) is not None else None
            p_sim = None
            if s0.get(key) and s1.get(key) is not None and b0.get(key) is not None:
                p_sim = b0[key] * s1[key] / s0[key]
            unit = 1000.0 if key.endswith("_ms") else 1.0  # the benchmark's milliseconds
            p_abs = s1[key] * unit if s1.get(key) is not None else None
            pair.cells[label] = (b1.get(key), {"closed form": p_cf, "simulator": p_sim, ABSOLUTE: p_abs})
        # goodput: each model's own, scaled by measured over modelled throughput of the base run
        scale_sim = b0["output_throughput"] / s0["output_throughput"] if s0.get("output_throughput") else None
        g_sim = s1["goodput"] * scale_sim if s1.get("goodput") is not None and scale_sim else None
        thr0 = cf.measured.get("output_tokens_per_second")
        g_cf_raw = scoring.goodput(cf.predicted, TARGETS)
        g_cf = g_cf_raw * b0["output_throughput"] / thr0 if g_cf_raw is not None and thr0 else None
        pair.cells["goodput"] = (
            report.measured_goodput(report.RUNS / after),
            {"closed form": g_cf, "simulator": g_sim, ABSOLUTE: s1.get("goodput")},
        )
        rate = cf.predicted.get("preemptions_per_second")
        thr = b0["output_throughput"] * (cf.ratio("output_tokens_per_second") or 1.0)
        pre_cf = rate * b1["total_output_tokens"] / thr if rate is not None and thr else None
        pre_sim = (s1["preempt_per_request"] or 0.0) * (b1.get("completed") or 0)
        pair.preemptions = (report.preemptions(report.RUNS / after), pre_cf, pre_sim)
    return out


KEPT = f"simulator, the pairs whose after-run stepped as its base did (Steps within {pm.SAME_SPEED:.0%})"


def shares(pairs: list[Pair]) -> dict[str, dict[str, tuple[int, int]]]:
    """Per model and metric: (pairs within the goal, pairs judged); and the simulator's over the
    pairs whose after-run kept the base run's speed (:attr:`Pair.kept_speed`)."""
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for model in (*MODELS, ABSOLUTE):
        for label in LABELS:
            hits = [h for h in (p.hit(label, model) for p in pairs) if h is not None]
            out.setdefault(model, {})[label] = (sum(hits), len(hits))
    kept = [p for p in pairs if p.kept_speed]
    for label in LABELS:
        hits = [h for h in (p.hit(label, "simulator") for p in kept) if h is not None]
        out.setdefault(KEPT, {})[label] = (sum(hits), len(hits))
    return out


def _steps(p: Pair) -> str:
    return "n/a" if p.steps is None else f"{p.steps:.2f}" if p.kept_speed else f"**{p.steps:.2f}**"


def _value(label: str, x: float | None) -> str:
    if x is None:
        return "n/a"
    if label.startswith("TTFT"):
        return report._ms(x)
    if label == "TPOT p95":
        return f"{x:.1f} ms"
    return f"{x:,.0f}"


def _measured(pair: Pair, label: str) -> str:
    meas = pair.cells[label][0]
    text = _value(label, meas)
    if label == "goodput" and meas is not None and meas < NEGLIGIBLE * pair.throughput_after:
        return f"none ({text})"
    return text


def _err(pair: Pair, label: str, model: str) -> str:
    meas, preds = pair.cells[label]
    pred = preds.get(model)
    if pred is None or meas is None:
        return "n/a"
    hit = pair.hit(label, model)
    if label == "goodput" and meas < NEGLIGIBLE * pair.throughput_after:
        text = "none" if pred < NEGLIGIBLE * pair.throughput_after else _value(label, pred)
    else:
        text = f"{pred / meas - 1:+.0%}"
    return f"**{text}**" if hit else text


def render_block(pairs: list[Pair]) -> str:
    lines = [
        "| Pair (base -> change) | Load inferred | Steps | " + " | ".join(LABELS) + " |",
        "|---|---|---|" + "---|" * len(LABELS),
    ]
    for p in pairs:
        change = f"`{p.knob}={predictions.prediction_out._int_if_whole(p.value)}`"
        if p.skipped:
            lines.append(f"| {p.after} ({change}) | {p.skipped} | |" + " |" * len(LABELS))
            continue
        cells = [
            f"{_measured(p, label)}: {_err(p, label, 'closed form')} / {_err(p, label, 'simulator')}"
            for label in LABELS
        ]
        lines.append(f"| {p.after} ({change}) | {p.load} | {_steps(p)} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Each cell: the measured value, then the closed form's error / the simulator's, **bold** "
        "within the goal (a goodput under 5% of the throughput is `none`: both sides none is a hit). "
        "Steps: the after-run's measured step time over what the base run's step fit gives for the "
        "after-run's own work (its intervals' decodes, KV read and prefill), relative to the same "
        "for the base run's own steps, **bold** when off by "
        f"more than {pm.SAME_SPEED:.0%}: the server stepped faster or slower than the base run says such "
        "work takes, which no model fitted to the base alone can predict (the A/A runs of one "
        "configuration on three leases agree within 5%). "
        "Within the goal, over the pairs with a prediction and a measurement; the cells' errors "
        "are each model's predicted change applied to the base run's measurement, and the third "
        "row is the simulated after-state itself against the after-run (what the advice checks "
        "against the targets and counts goodput on), where a base run the simulator does not "
        "reproduce weighs nothing:",
        "",
        "| Model | "
        + " | ".join(f"{label} ({GOALS[label]:.0%}; goal {SHARES[label]:.0%})" for label in LABELS)
        + " |",
        "|---|" + "---|" * len(LABELS),
    ]
    for model, by in shares(pairs).items():
        cells = []
        for label in LABELS:
            k, n = by[label]
            met = "met" if n and k / n >= SHARES[label] else "not met"
            cells.append(f"{k}/{n} ({k / n:.0%}: {met})" if n else "n/a")
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render_long(pairs: list[Pair]) -> str:
    out = [
        "| base -> after (knob=value) | metric | measured | closed form | simulated |",
        "|---|---|---|---|---|",
    ]
    for p in pairs:
        if p.skipped:
            out.append(f"| {p.name} | ({p.skipped}) | | | |")
            continue
        out.append(f"| {p.name} | load inferred | {p.bench_load} | | {p.load} |")
        out.append(f"| {p.name} | steps over the base's fit | {_fmt(p.steps)} | | |")
        for label in LABELS:
            meas, preds = p.cells[label]
            cf, sim = preds["closed form"], preds["simulator"]
            out.append(
                f"| {p.name} | {label} | {_fmt(meas)} | {_fmt(cf)} ({_pct(cf, meas)}) | {_fmt(sim)} ({_pct(sim, meas)}) |"
            )
        pre = p.preemptions
        out.append(f"| {p.name} | preemptions | {_fmt(pre[0])} | {_fmt(pre[1])} | {_fmt(pre[2])} |")
    out.append("")
    for model, by in shares(pairs).items():
        parts = [f"{label} {k}/{n}" for label, (k, n) in by.items()]
        out.append(f"{model}: within goal (15% tok/s, TPOT p95; 30% TTFT; 20% goodput): " + ", ".join(parts))
    return "\n".join(out)


def _bench_load(b: dict[str, Any]) -> str:
    rate = b.get("request_rate")
    if rate in (None, "inf", float("inf")):
        return f"bench: closed, {b.get('max_concurrency')} clients"
    return f"bench: open, {float(rate):g}/s, burstiness {b.get('burstiness', 1.0):g}"


def _pct(pred: float | None, meas: float | None) -> str:
    if pred is None or not meas:
        return "n/a"
    return f"{pred / meas - 1:+.0%}"


def render_seeds(runs: list[list[Pair]]) -> str:
    """Per pair and metric, the simulator's error over several draws of the requests (one
    evaluation per seed) and how many draws are within the goal: the measurement is one draw of
    its load, so where the draws spread wide, one prediction within the goal is luck as much as
    the model, and where none is within it, the miss is the model's."""
    lines = [
        "pair | metric | measured | simulator's error over the seeds: lowest .. highest (seed 0) | draws within the goal"
    ]
    for i, pair in enumerate(runs[0]):
        if pair.skipped:
            continue
        for label in LABELS:
            meas = pair.cells.get(label, (None, {}))[0]
            preds = [run[i].cells.get(label, (None, {}))[1].get("simulator") for run in runs]
            if not meas or any(x is None for x in preds):
                continue
            errs = [x / meas - 1 for x in preds if x is not None]
            hits = sum(bool(run[i].hit(label, "simulator")) for run in runs)
            lines.append(
                f"{pair.after} | {label} | {_fmt(meas)} | {min(errs):+.0%} .. {max(errs):+.0%} ({errs[0]:+.0%})"
                f" | {hits} of {len(runs)}"
            )
    return "\n".join(lines)


DRAWS = 5  # seeds of the inferred load drawn for the draws block


def draw_ceiling(runs: list[list[Pair]]) -> dict[str, tuple[float, int]]:
    """Per metric: how many pairs one draw of the simulator's prediction is expected to put within
    the goal of another draw of itself (each ordered pair of ``runs``, one evaluation per seed,
    weighed alike), and the pairs counted. A model exact but for its draw scores this against a
    measurement that is one draw of its load as well; where the draws spread past the goal, no
    model's single prediction is within it reliably."""
    out: dict[str, tuple[float, int]] = {}
    for label in LABELS:
        total, counted = 0.0, 0
        for i, pair in enumerate(runs[0]):
            if pair.skipped or pair.cells.get(label, (None, {}))[0] is None:
                continue
            preds = [run[i].cells[label][1].get("simulator") for run in runs]
            if any(x is None for x in preds):
                continue
            hits = []
            for a, b in ((a, b) for a in range(len(runs)) for b in range(len(runs)) if a != b):
                probe = replace(pair, cells={label: (preds[b], {"simulator": preds[a]})})
                h = probe.hit(label, "simulator")
                if h is not None:
                    hits.append(h)
            if hits:
                total += sum(hits) / len(hits)
                counted += 1
        out[label] = (total, counted)
    return out


def render_draws(drawn: list[list[Pair]], measured_draw: list[Pair]) -> str:
    """The draws block: the simulator within the goals on a draw of the inferred load (the
    simulator block's row), on the benchmark's own requests (the draw measured), and what one
    draw scores against another (:func:`draw_ceiling`)."""
    first, bench = shares(drawn[0])["simulator"], shares(measured_draw)["simulator"]
    ceiling = draw_ceiling(drawn)
    rows = [
        ("The simulator's requests", [f"{label} ({GOALS[label]:.0%})" for label in LABELS]),
        (
            "a draw of the load inferred from the base run's pages (seed 0: the block above)",
            [f"{first[label][0]}/{first[label][1]}" for label in LABELS],
        ),
        (
            "the base run's benchmark's own requests (the draw the after-run measured too)",
            [f"{bench[label][0]}/{bench[label][1]}" for label in LABELS],
        ),
        (
            f"one draw of the inferred load against another ({len(drawn)} seeds, every ordered pair of them)",
            [f"{ceiling[label][0]:.1f}/{ceiling[label][1]}" for label in LABELS],
        ),
        ("the goal", [f"{SHARES[label]:.0%}" for label in LABELS]),
    ]
    lines = [f"| {title} | " + " | ".join(cells) + " |" for title, cells in rows]
    lines.insert(1, "|---|" + "---|" * len(LABELS))
    return "\n".join(lines) + "\n"


def _bench_requests(b: dict[str, Any], closed: bool = False) -> list[Request]:
    """A benchmark's own requests: their lengths and, under open arrivals (not ``closed``), their
    start times."""
    t0 = b["start_times"][0]
    return [
        Request(int(i), int(o), None if closed else float(t) - t0)
        for i, o, t in zip(b["input_lens"], b["output_lens"], b["start_times"], strict=True)
        if int(o) > 0  # a request that failed (no token came back) is not the load's
    ]


def render_draw_runs() -> str:
    """Each run of ``report.DRAWS_SCENARIOS``, measured beside the simulator fitted to the scenario's
    first run alone and given that run's own requests (what a model fitted once scores against
    each draw, the same draw twice included); then what the simulator's own draws of the load
    inferred from the first run's pages spread over (the seeds of the draws block)."""
    lines = [
        "| run (the benchmark's seed) | TTFT p50 ms, measured: simulated | TTFT p95 ms | TPOT p95 ms | goodput tok/s | preemptions |",
        "|---|---|---|---|---|---|",
    ]

    def row(label: str, cells: list[tuple[float | None, float | None]]) -> None:
        lines.append(f"| {label} | " + " | ".join(f"{_g(m)}: {_g(s)}" for m, s in cells) + " |")

    results = json.loads(report.RESULTS.read_text())["runs"]
    for scn in report.DRAWS_SCENARIOS:
        runs = report.draw_runs(results, scn)
        if not runs:
            continue
        own = own_load(runs[0][0])
        if own is None:
            continue
        model, reqs, arr, _ = own
        model, _ = simulated.outcome_today(model, reqs, arr, TARGETS)  # calibrated to its own run
        for run, seed in runs:
            b = report.bench(report.RUNS / run)
            rq = _bench_requests(b)
            o = simulated.outcome(model, model.config, rq, arr, TARGETS)
            row(
                f"{run} ({seed})",
                [
                    (b["p50_ttft_ms"], o.ttft[0] * 1e3),
                    (b["p95_ttft_ms"], o.ttft[1] * 1e3),
                    (b["p95_tpot_ms"], o.tpot[1] * 1e3),
                    (report.measured_goodput(report.RUNS / run), o.goodput_tokens_per_second),
                    (report.preemptions(report.RUNS / run), o.preemptions_per_request * len(rq)),
                ],
            )
        _, _, rows = predictions.fitted(runs[0][0])
        inferred = wl.fit_arrivals(rows, model.tallies)
        outs = [
            simulated.outcome(
                model,
                model.config,
                simulated.requests_of(model, inferred, len(reqs), seed),
                inferred,
                TARGETS,
            )
            for seed in range(DRAWS)
        ]
        spread = [
            [o.ttft[0] * 1e3 for o in outs],
            [o.ttft[1] * 1e3 for o in outs],
            [o.tpot[1] * 1e3 for o in outs],
            [o.goodput_tokens_per_second for o in outs],
            [o.preemptions_per_request * len(reqs) for o in outs],
        ]
        lines.append(
            f"| {scn}: the simulator's own {DRAWS} draws of the load inferred from {runs[0][0]}'s pages | "
            + " | ".join(f"{_g(min(v))}-{_g(max(v))}" for v in spread)
            + " |"
        )
    return "\n".join(lines) + "\n"


def _g(x: float | None) -> str:
    """A cell's number: three significant figures, thousands grouped (-- where none)."""
    if x is None:
        return "--"
    return f"{float(f'{x:.3g}'):,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def own_load(run: str) -> tuple[pm.Model, list[Request], wl.Arrivals, dict[str, Any]] | None:
    """A run's own fit, its benchmark's own requests (their start times under open arrivals,
    their lengths) and load (its clients under a closed loop), and the benchmark; None where
    the run has no step fit or no request times."""
    model, _, _ = predictions.fitted(run)
    b = report.bench(report.RUNS / run)
    if model.fit is None or not b.get("start_times"):
        return None
    rate = b.get("request_rate")
    closed = rate in (None, "inf", float("inf"))
    reqs = _bench_requests(b, closed)
    arr = wl.Arrivals(
        "closed" if closed else "open",
        int(b.get("max_concurrency") or len(reqs)) if closed else None,
        None if closed else float(rate),
        1.0,
        "the benchmark's own requests",
    )
    return model, reqs, arr, b


def preemptions_near(measured: float, sim: float) -> bool:
    """A simulated preemption count within 30% of the measured one, or within 5 of it."""
    return abs(sim - measured) <= max(0.3 * measured, 5.0)


def _preemptions(run: str, now: simulated.Outcome, requests: int) -> tuple[float | None, float]:
    """(measured over the run's session, simulated over its ``requests``)."""
    return report.preemptions(report.RUNS / run), now.preemptions_per_request * requests


def own_preemptions(run: str) -> tuple[float | None, float] | None:
    """(measured, simulated) preemptions of a run on its own fit and requests (:func:`own_load`)."""
    own = own_load(run)
    if own is None:
        return None
    model, reqs, arr, _ = own
    _, now = simulated.outcome_today(model, reqs, arr, TARGETS)
    return _preemptions(run, now, len(reqs))


def reproduce(runs: list[str]) -> str:
    """Each run simulated on its own step fit and its own benchmark's requests (:func:`own_load`):
    how well the simulator reproduces the TTFT and the preemptions it was fitted beside, with
    vLLM's asynchronous scheduling as the server ran it and, for comparison, without it
    (synchronous: a request's first step is the one after the step it arrived in). Not a
    prediction: the check the advice's scorer makes on today's run
    (``measured_over_simulated_now``), on the recorded runs."""
    lines = [
        "run | async | TTFT p50 measured: simulated, sync | TTFT p95 measured: simulated, sync | preemptions measured: simulated",
        "---|---|---|---|---",
    ]
    errs: dict[str, list[float]] = {"p50": [], "p95": [], "p50 sync": [], "p95 sync": []}
    pre: list[tuple[float, float]] = []  # (measured, simulated) where either preempted
    for run in runs:
        own = own_load(run)
        if own is None:
            continue
        model, reqs, arr, b = own
        # TTFT p50, p95 (ms) with the server's scheduling (as the advice's scorer calibrates and
        # simulates it) and synchronous (the same run where the server is synchronous)
        model, now = simulated.outcome_today(model, reqs, arr, TARGETS)
        outs = {model.config.async_scheduling: now}
        if model.config.async_scheduling:
            outs[False] = simulated.outcome(
                model, replace(model.config, async_scheduling=False), reqs, arr, TARGETS
            )
        got = {mode: [None if x is None else x * 1000.0 for x in o.ttft[:2]] for mode, o in outs.items()}
        own, sync = got[model.config.async_scheduling], got[False]
        cells = []
        for j, q in enumerate(("p50", "p95")):
            meas, sim, syn = b[f"{q}_ttft_ms"], own[j], sync[j]
            cells.append(f"{_fmt(meas)} ms: {_pct(sim, meas)}, {_pct(syn, meas)}")
            if sim is not None and syn is not None and meas:
                errs[q].append(abs(sim / meas - 1))
                errs[f"{q} sync"].append(abs(syn / meas - 1))
        measured_pre, sim_pre = _preemptions(run, now, len(reqs))
        cells.append(f"{_fmt(measured_pre)}: {sim_pre:.0f}")
        if measured_pre is not None and (measured_pre or sim_pre):
            pre.append((measured_pre, sim_pre))
        lines.append(f"{run} | {'on' if model.config.async_scheduling else 'off'} | " + " | ".join(cells))
    lines.append("")
    for key, xs in errs.items():
        if xs:
            lines.append(
                f"TTFT {key}: median error {statistics.median(xs):.0%}, within 30% on {sum(x <= 0.3 for x in xs)}/{len(xs)}"
            )
    if pre:
        near = sum(preemptions_near(m, s) for m, s in pre)
        lines.append(
            f"preemptions, where either side preempted: within 30% (or 5) on {near}/{len(pre)}; "
            f"simulated over measured in all {sum(s for _, s in pre):.0f} / {sum(m for m, _ in pre):.0f}"
        )
    return "\n".join(lines)


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


@dataclass(frozen=True)
class SteadyRow:
    """A closed-loop run's TTFT (p50, p95 seconds): its benchmark's requests after each client's
    first (the loop without its start's wave), and today simulated on the run's fit counted as a
    wave (every request) and as a steady loop (the first round left out)."""

    run: str
    clients: int
    measured: tuple[float, float]
    wave: tuple[float, float]
    steady: tuple[float, float]


def steady_row(run: str) -> SteadyRow | None:
    """:class:`SteadyRow` of a committed run; None unless it is a closed loop whose benchmark
    kept its requests' TTFTs and sent 50 or more after the first round, with a step fit."""
    b = report.bench(report.RUNS / run)
    clients = int(b.get("max_concurrency") or 0)
    closed = b.get("request_rate") in (None, "inf", float("inf"))
    if not closed or not clients or not b.get("ttfts") or b.get("completed", 0) < clients + 50:
        return None
    model, _, _ = predictions.fitted(run)
    if model.fit is None or not model.prompt_mean or not model.output_mean:
        return None
    order = sorted(range(len(b["start_times"])), key=lambda i: b["start_times"][i])
    after = sorted(b["ttfts"][i] for k, i in enumerate(order) if k >= clients and b["ttfts"][i])
    arr = wl.fit_arrivals(model.rows, model.tallies)
    got = []
    for steady in (False, True):
        a = replace(arr, kind="closed", clients=clients, steady=steady)
        reqs = simulated.requests_of(model, a)
        _, o = simulated.outcome_today(model, reqs, a, TARGETS)
        got.append((o.ttft[0] or math.nan, o.ttft[1] or math.nan))
    measured = (wl.quantile_sorted(after, 0.5) or math.nan, wl.quantile_sorted(after, 0.95) or math.nan)
    return SteadyRow(run, clients, measured, got[0], got[1])


def render_steady(rows: list[SteadyRow]) -> str:
    lines = [
        "| run | clients | TTFT p50 measured: wave / steady | TTFT p95 measured: wave / steady |",
        "|---|---|---|---|",
    ]
    hits = {k: 0 for k in ("p50 wave", "p50 steady", "p95 wave", "p95 steady")}
    for r in rows:
        cells = []
        for j, q in enumerate(("p50", "p95")):
            m = r.measured[j]
            cells.append(f"{_fmt(m)} s: {_pct(r.wave[j], m)} / {_pct(r.steady[j], m)}")
            hits[f"{q} wave"] += abs(r.wave[j] / m - 1) <= 0.3
            hits[f"{q} steady"] += abs(r.steady[j] / m - 1) <= 0.3
        lines.append(f"| {r.run} | {r.clients} | {cells[0]} | {cells[1]} |")
    lines.append("")
    lines.append(
        "Within 30% of "
        f"{len(rows)}: TTFT p50 wave {hits['p50 wave']}, steady {hits['p50 steady']}; "
        f"TTFT p95 wave {hits['p95 wave']}, steady {hits['p95 steady']}"
    )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/prediction.md's block is stale")
    ap.add_argument("--table", action="store_true", help="print the long table instead of writing the block")
    ap.add_argument(
        "--requests",
        type=int,
        default=DEFAULT_REQUESTS,
        help="at most N simulated requests per candidate (no bound)",
    )
    ap.add_argument(
        "--seeds",
        type=int,
        default=0,
        help="print the simulator's error over K draws of the requests (seeds 0..K-1) instead",
    )
    ap.add_argument(
        "--own",
        nargs="*",
        metavar="RUN",
        help="print each run (default: every committed run) simulated on its own fit and requests instead",
    )
    ap.add_argument(
        "--steady",
        action="store_true",
        help="print each closed-loop run's TTFT after its first round beside today simulated as a wave and as a steady loop",
    )
    ap.add_argument(
        "--benchmark-draw",
        action="store_true",
        help="with --table: simulate each pair on its base run's benchmark requests (the draw the runs measured) instead of a draw of the inferred load",
    )
    ap.add_argument(
        "--draws",
        action="store_true",
        help="write (with --check: check) docs/prediction.md's draws block: the misses that are the draw's",
    )
    args = ap.parse_args(argv)
    if args.draws:
        return _write_block(
            args.check,
            DRAWS_BEGIN,
            DRAWS_END,
            lambda: (
                render_draws([evaluate(seed=seed) for seed in range(DRAWS)], evaluate(benchmark_draw=True))
                + "\n"
                + render_draw_runs()
            ),
            "draws",
            "validation/simulation.py --draws",
        )
    if args.benchmark_draw and not args.table:
        ap.error("--benchmark-draw goes with --table (the docs' block simulates the inferred load)")
    if args.steady:
        runs = sorted(p.name for p in report.RUNS.iterdir() if (p / "bench.json.gz").exists())
        print(render_steady([r for r in map(steady_row, runs) if r is not None]))
        return 0
    if args.own is not None:
        print(
            reproduce(
                args.own or sorted(p.name for p in report.RUNS.iterdir() if (p / "bench.json.gz").exists())
            )
        )
        return 0
    if args.seeds:
        print(render_seeds([evaluate(args.requests, seed) for seed in range(args.seeds)]))
        return 0
    if args.table:
        print(render_long(evaluate(args.requests, benchmark_draw=args.benchmark_draw)))
        return 0
    if args.requests != DEFAULT_REQUESTS:
        ap.error("the docs' block is written with the default --requests (use --table to try others)")
    return _write_block(
        args.check, BEGIN, END, lambda: render_block(evaluate()), "simulator", "validation/simulation.py"
    )


def _write_block(check: bool, begin: str, end: str, render: Any, what: str, script: str) -> int:
    """One of docs/prediction.md's blocks written, or with ``check`` checked (report.write_block)."""
    return report.write_block(
        ["--check"] if check else [], DOC, begin, end, render, what, __doc__ or "", script
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
