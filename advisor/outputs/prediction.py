"""A prediction as text: the table of measured vs predicted, and the one-line summary that
``history`` prints for a judged change."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from advisor.core import knobs
from advisor.core.units import fmt
from advisor.predict import perfmodel as pm
from advisor.predict.scoring import CLOSED_FORM, SIMULATOR, band, speed_note
from advisor.predict.simulated import QUANTILES, Simulated, SimulatorPrediction

LABELS = {
    "running": ("running batch", ""),
    "output_tokens_per_second": ("output tokens/s", "tok/s"),
    "ttft_seconds_p50": ("TTFT p50", "s"),
    "ttft_seconds_p95": ("TTFT p95", "s"),
    "tpot_seconds_p95": ("TPOT p95", "s"),
    "itl_seconds_p95": ("ITL p95", "s"),
    "preemptions_per_second": ("preemptions/s", "/s"),
}
BINDING_WORDS = {
    "max_num_seqs": "the max_num_seqs cap",
    "kv_cache": "the KV cache",
    "max_num_batched_tokens": "the token budget (max_num_batched_tokens)",
    "load": "the offered load (the server keeps up)",
    "unknown": "unknown",
}


def change_pct(p: pm.Prediction, metric: str) -> str:
    r = p.ratio(metric)
    if r is None:
        return ""
    return f"{(r - 1) * 100:+.0f}%"


EXACT_MARK = " *"


def with_exact(p: pm.Prediction, exact: Mapping[str, float] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(measured, predicted) with the stat-logger plugin's exact latencies where given: the
    measured value is the plugin's, the predicted one the model's change (its ratio) applied
    to it."""
    measured: dict[str, Any] = dict(p.measured)
    predicted: dict[str, Any] = dict(p.predicted)
    for m, v in (exact or {}).items():
        if m not in measured:
            continue
        r = p.ratio(m)
        measured[m] = v
        predicted[m] = v * r if r is not None else None
    return measured, predicted


def render_text(
    p: pm.Prediction, model: pm.Model | None = None, exact: Mapping[str, float] | None = None
) -> str:
    """The prediction as a table. ``exact``: measured latencies from the stat-logger plugin
    (metric -> seconds), printed instead of the histograms' and marked."""
    cur = knobs.format_value(_int_if_whole(p.current)) if p.current is not None else "unknown"
    lines = [
        f"{p.knob}: {cur} -> {knobs.format_value(_int_if_whole(p.value))} (same load)",
        f"binding now: {BINDING_WORDS.get(p.binding_before, p.binding_before)}; "
        f"after: {BINDING_WORDS.get(p.binding_after, p.binding_after)}",
        f"confidence: {p.confidence:.2f} (typical error {interval_pct(p.confidence)})",
        "",
        f"{'':<18}{'measured':>16}{'predicted':>16}{'change':>9}",
    ]
    measured, predicted = with_exact(p, exact)
    marked = [m for m in pm.METRICS if exact and m in exact]
    for m in pm.METRICS:
        label, unit = LABELS[m]
        if m in marked:
            label += EXACT_MARK
        lines.append(
            f"{label:<18}{fmt(measured.get(m), unit):>16}{fmt(predicted.get(m), unit):>16}"
            f"{change_pct(p, m):>9}"
        )
    if marked:
        lines.append(
            f"{EXACT_MARK.strip()} measured by the stat-logger plugin's sketches (per request, within 1%; "
            "vLLM's histograms said "
            + ", ".join(f"{LABELS[m][0]} {fmt(p.measured.get(m), LABELS[m][1])}" for m in marked)
            + "); predicted: the model's change applied to it"
        )
    for note in p.notes:
        lines.append(f"note: {note}")
    if model is not None and model.missing:
        lines.append(f"unknown inputs (lower confidence): {', '.join(model.missing)}")
    return "\n".join(lines)


NOT_SIMULATED = "n/a"  # a metric the simulator does not report (the closed form's alone)


def render_simulator_text(
    p: SimulatorPrediction, exact: Mapping[str, float] | None = None, model: pm.Model | None = None
) -> str:
    """The simulator's prediction as the closed form's table (measured, predicted, change): the
    measured value times its simulated after over now. Where the closed form prices the knob
    too, its binding and confidence head the table and its own numbers follow it in one line;
    where it does not, they are not shown. ``exact``: the stat-logger plugin's latencies, as
    :func:`render_text`."""
    cur = knobs.format_value(_int_if_whole(p.current)) if p.current is not None else "unknown"
    cf = p.closed_form
    lines = [
        f"{p.knob}: {cur} -> {knobs.format_value(_int_if_whole(p.value))} (same load)",
        f"predicted by the scheduler simulator ({p.closed_form_why}):",
        "the measured value times the simulated after over the simulated now",
        "",
        f"{'':<18}{'measured':>16}{'predicted':>16}{'change':>9}",
    ]
    measured: dict[str, Any] = dict(p.measured)
    predicted: dict[str, Any] = dict(p.predicted)
    marked = []
    for m, v in (exact or {}).items():
        r = p.ratio(m)
        if m in measured:
            measured[m], predicted[m] = v, (v * r if r is not None else None)
            marked.append(m)
    for m in pm.METRICS:
        label, unit = LABELS[m]
        if m in marked:
            label += EXACT_MARK
        r = p.ratio(m)
        pv = fmt(predicted.get(m), unit) if predicted.get(m) is not None else NOT_SIMULATED
        lines.append(
            f"{label:<18}{fmt(measured.get(m), unit):>16}{pv:>16}"
            f"{'' if r is None else f'{(r - 1) * 100:+.0f}%':>9}"
        )
    if any(predicted.get(m) is None for m in pm.METRICS):
        lines.append(f"{NOT_SIMULATED}: the simulator does not say (unmeasured, or none simulated now)")
    if cf is not None:
        lines.append(closed_form_line(cf))
        lines.append(
            f"  it reads the binding limit now: {BINDING_WORDS.get(cf.binding_before, cf.binding_before)}; "
            f"after: {BINDING_WORDS.get(cf.binding_after, cf.binding_after)}; its confidence "
            f"{cf.confidence:.2f} (its typical error {interval_pct(cf.confidence)})"
        )
    if marked:
        lines.append(
            f"{EXACT_MARK.strip()} measured by the stat-logger plugin's sketches; predicted: the simulated change applied to it"
        )
    for note in p.notes:
        lines.append(f"note: {note}")
    if p.not_deciding:
        lines.append(
            f"note: {p.not_deciding}; the advice would not rely on this simulation: take it as a direction, not a value"
        )
    if model is not None and model.missing:
        lines.append(f"unknown inputs (lower confidence): {', '.join(model.missing)}")
    return "\n".join(lines)


CLOSED_FORM_METRICS = ("output_tokens_per_second", "ttft_seconds_p95", "tpot_seconds_p95")


def closed_form_line(cf: pm.Prediction) -> str:
    """The closed form's own prediction in one line, where the simulator's is said."""
    return closed_form_words(cf.predicted, cf.measured)


def closed_form_words(predicted: Mapping[str, Any], measured: Mapping[str, Any]) -> str:
    """The closed form's predicted values (and their change over ``measured``) in one line."""
    parts = []
    for m in CLOSED_FORM_METRICS:
        label, unit = LABELS[m]
        v, was = predicted.get(m), measured.get(m)
        if isinstance(v, int | float):
            ch = f" ({(v / was - 1) * 100:+.0f}%)" if isinstance(was, int | float) and was else ""
            parts.append(f"{label} {fmt(v, unit)}{ch}")
    return f"{CLOSED_FORM_WORDS}: " + (", ".join(parts) if parts else "no numbers")


CLOSED_FORM_WORDS = "the closed form (which takes the load for a closed loop and goodput from p50 and p95)"


def said_closed_form(pred: Mapping[str, Any]) -> str | None:
    """Where the simulator's numbers were said (a prediction's JSON), the closed form's own as a
    sentence; None where the closed form's are the ones said, or it has none."""
    cf = pred.get("closed_form")
    if pred.get("predicted_by") != SIMULATOR or not isinstance(cf, Mapping):
        return None
    got = cf.get("predicted")
    if not isinstance(got, Mapping) or not any(isinstance(v, int | float) for v in got.values()):
        return None
    words = closed_form_words(got, pred.get("measured") or {})
    return words[0].upper() + words[1:] + "."


def said_by(pred: Mapping[str, Any]) -> list[str]:
    """The sentences under a Predicted table: which model decided (:func:`decided_line`), then
    the closed form's own numbers where the simulator's were said (:func:`said_closed_form`)."""
    return [x for x in (decided_line(pred), said_closed_form(pred)) if x]


def load_words(a: Mapping[str, Any]) -> str:
    """The arrival process the simulator inferred (its JSON), in words."""
    if a.get("kind") == "closed":
        return f"a closed loop of {a.get('clients')} clients"
    shape = a.get("gamma_shape")
    kind = ""
    if isinstance(shape, int | float):
        # the shape is 1 where the counts' dispersion is within its sampling noise
        # (predict/workload.py, beyond_noise): any other reads beyond it
        kind = (
            " (Poisson: the counts' dispersion within its sampling noise)"
            if shape == 1.0
            else f" (gamma shape {shape:.2f}: {'burstier' if shape < 1.0 else 'more regular'} than Poisson)"
        )
    return f"open arrivals at {fmt(a.get('rate_per_second'), '/s')}{kind}"


MEASURED_AT = {
    ("ttft_seconds", "p50"): "ttft_seconds_p50",
    ("ttft_seconds", "p95"): "ttft_seconds_p95",
    ("tpot_seconds", "p95"): "tpot_seconds_p95",
    ("itl_seconds", "p95"): "itl_seconds_p95",
}


def simulated_rows(sim: Mapping[str, Any], measured: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """(metric, measured, simulated now, simulated after) of a simulated change (its JSON):
    TTFT, TPOT and E2E at p50/p95/p99, throughput, goodput and the share meeting each target."""
    before, after = sim.get("before") or {}, sim.get("after") or {}
    rows: list[tuple[str, str, str, str]] = []
    for key, label in (
        ("ttft_seconds", "TTFT"),
        ("tpot_seconds", "TPOT"),
        ("itl_seconds", "ITL"),
        ("e2e_seconds", "E2E"),
    ):
        b, c = before.get(key) or {}, after.get(key) or {}
        for q in QUANTILES:
            qn = f"p{round(q * 100)}"
            m = MEASURED_AT.get((key, qn))
            rows.append(
                (
                    f"{label} {qn}",
                    fmt(measured.get(m), "s") if m else "-",
                    fmt(b.get(qn), "s"),
                    fmt(c.get(qn), "s"),
                )
            )
    rows.append(
        (
            "output tokens/s",
            fmt(measured.get("output_tokens_per_second"), "tok/s"),
            fmt(before.get("output_tokens_per_second"), "tok/s"),
            fmt(after.get("output_tokens_per_second"), "tok/s"),
        )
    )
    rows.append(
        (
            "goodput (all targets)",
            "",
            fmt(before.get("goodput_tokens_per_second"), "tok/s"),
            fmt(after.get("goodput_tokens_per_second"), "tok/s"),
        )
    )
    rows.append(
        (
            "KV cache use (mean)",
            _share(sim.get("measured_kv_usage_mean")),
            _share(before.get("kv_usage_mean")),
            _share(after.get("kv_usage_mean")),
        )
    )
    fid = sim.get("measured_over_simulated_now") or {}
    if all(isinstance(fid.get(k), int | float) for k in ("ttft_p95", "tpot_p95")):
        rows.append(
            (
                "measured / simulated now",
                "",
                f"TTFT p95 x{fid['ttft_p95']:.2f}",
                f"TPOT p95 x{fid['tpot_p95']:.2f}",
            )
        )
    b_meet, c_meet = before.get("share_meeting") or {}, after.get("share_meeting") or {}
    for name in b_meet:
        rows.append((f"meeting {name}", "", _share(b_meet.get(name)), _share(c_meet.get(name))))
    return rows


def simulated_header(sim: Mapping[str, Any]) -> tuple[str, str]:
    """The simulated section's first line and what the load was inferred from (and, where the
    server schedules asynchronously, that the simulation does too)."""
    a = sim.get("arrivals") or {}
    why = str(a.get("inferred_from") or "")
    if sim.get("scheduling") == "asynchronous":
        why += "; each step scheduled while the one before it runs, as the server does"
    why += graphs_words(sim.get("cuda_graphs"))
    pc = sim.get("prefix_cache")
    if pc:
        why += (
            f"; prefix-cache hits {float(pc['hit_ratio']):.0%} of the prompt tokens, simulated as a "
            f"{int(pc['shared_prefix_tokens']):,}-token prefix the requests share, its blocks held once"
        )
    return (
        f"{sim.get('requests')} requests, the same for every candidate; the load inferred: {load_words(a)}",
        why,
    )


def graphs_words(graphs: Mapping[str, Any] | None) -> str:
    """Where the server's decode batches outgrow their full CUDA graph, today or after the change,
    as a clause of the simulated load line ("" where neither does, or it is not known)."""
    if not graphs:
        return ""
    now, after = graphs.get("full_decode_batch_now"), graphs.get("full_decode_batch_after")
    cost = float(graphs.get("piecewise_step_seconds") or 0.0)
    if cost <= 0 or (now is None and after is None):
        return ""
    more = f"run without a full CUDA graph ({cost * 1e3:.1f} ms more a step)"
    if now is None:
        return f"; after the change, decode batches past {after} {more}"
    words = f"; decode batches past {now} {more}"
    if after != now:
        words += f", past {after} after the change" if after is not None else ", none after the change"
    return words


def decided_line(pred: Mapping[str, Any]) -> str | None:
    """Which model decided the advised value and weighed it against the other changes, as one
    sentence (None: the prediction does not say)."""
    by = pred.get("decided_by")
    if by == "simulator":
        return (
            "Decided by the scheduler simulator: goodput counted per simulated request (output tokens/s "
            "of the requests meeting every target, as vllm bench serve --goodput counts it)."
        )
    if by == "closed form":
        why = pred.get("decided_by_why")
        return "Decided by the closed form (goodput from two quantiles)" + (
            f": the simulator could not decide ({why})." if why else "."
        )
    return None


def render_simulated(sim: Simulated | None, why_not: str | None, model: pm.Model | None = None) -> str:
    """The scheduler simulator's view of the same change: the load it inferred, the simulated
    distributions now and after (the same requests), goodput counted per request."""
    if sim is None:
        return f"\nsimulated: not run ({why_not})"
    doc = sim.to_json()
    head, why = simulated_header(doc)
    lines = [
        "",
        f"simulated: {head}",
        f"  ({why})",
        f"{'':<24}{'measured':>16}{'simulated now':>16}{'after':>16}",
    ]
    for label, m, b, c in simulated_rows(doc, model.measured if model is not None else {}):
        lines.append(f"{label:<24}{m:>16}{b:>16}{c:>16}")
    if why_not:
        lines.append(f"note: {why_not}; the advice does not use this simulation")
    if sim.before.truncated or sim.after.truncated:
        lines.append("note: a simulated run stopped at its step bound (the numbers cover what it finished)")
    return "\n".join(lines)


def _share(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def interval_pct(confidence: float) -> str:
    """The error band a confidence stands for (docs/prediction.md measures it)."""
    return f"±{band(confidence) * 100:.0f}%"


def _int_if_whole(x: float) -> Any:
    return int(x) if float(x).is_integer() else x


HISTORY_METRICS = (
    "output_tokens_per_second",
    "ttft_seconds_p95",
    "tpot_seconds_p95",
    "preemptions_per_second",
)


PREDICTED_BY = {SIMULATOR: "by the scheduler simulator: ", CLOSED_FORM: "by the closed form: "}
"""Which model's prediction a judged change is held to, as ``history`` says it."""


def prediction_line(pred: Mapping[str, Any] | None) -> str:
    """One line for ``history``: predicted vs measured after the change, with the error."""
    if not pred:
        return ""
    after = pred.get("measured_after")
    predicted = pred.get("predicted") or {}
    if not after:
        why = pred.get("why")
        return "predicted; not measured" + (f" ({why})" if why else "")
    parts = []
    for m in HISTORY_METRICS:
        label, unit = LABELS[m]
        p, a = predicted.get(m), after.get(m)
        err = (pred.get("error") or {}).get(m)
        e = f" ({err * 100:+.0f}%)" if isinstance(err, int | float) else ""
        parts.append(f"{label} {fmt(p, unit)} predicted / {fmt(a, unit)} measured{e}")
    steps = pred.get("steps")
    note = speed_note(steps if isinstance(steps, int | float) else None)
    by = PREDICTED_BY.get(str(pred.get("predicted_by")), "")  # ledger rows before 2026-12-07: unsaid
    return by + "; ".join(parts) + (f". {note}" if note else "")
