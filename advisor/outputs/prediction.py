"""A prediction as text: the table of measured vs predicted, and the one-line summary that
``history`` prints for a judged change."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from advisor.core import knobs
from advisor.core.units import fmt
from advisor.predict import perfmodel as pm
from advisor.predict.scoring import band
from advisor.predict.simulated import QUANTILES, Simulated

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


def render_simulated(sim: Simulated | None, why_not: str | None, model: pm.Model | None = None) -> str:
    """The scheduler simulator's view of the same change: the load it inferred, the simulated
    distributions now and after (the same requests), goodput counted per request."""
    if sim is None:
        return f"\nsimulated: not run ({why_not})"
    a = sim.arrivals
    load = (
        f"a closed loop of {a.clients} clients"
        if a.kind == "closed"
        else f"open arrivals at {fmt(a.rate, '/s')} (gamma shape {a.shape:.2f}: {'Poisson' if 0.8 <= a.shape <= 1.25 else 'bursty' if a.shape < 0.8 else 'regular'})"
    )
    meas = model.measured if model is not None else {}
    lines = [
        "",
        f"simulated: {sim.requests} requests, the same for both; the load inferred: {load}",
        f"  ({a.why})",
        f"{'':<24}{'measured':>16}{'simulated now':>16}{'after':>16}",
    ]

    measured_at = {
        ("ttft", 0.5): "ttft_seconds_p50",
        ("ttft", 0.95): "ttft_seconds_p95",
        ("tpot", 0.95): "tpot_seconds_p95",
    }
    for key, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "E2E")):
        for i, q in enumerate(QUANTILES):
            m = measured_at.get((key, q))
            lines.append(
                f"{f'{label} p{round(q * 100)}':<24}{fmt(meas.get(m), 's') if m else '-':>16}"
                f"{fmt(getattr(sim.before, key)[i], 's'):>16}{fmt(getattr(sim.after, key)[i], 's'):>16}"
            )
    lines.append(
        f"{'output tokens/s':<24}{fmt(meas.get('output_tokens_per_second'), 'tok/s'):>16}"
        f"{fmt(sim.before.output_tokens_per_second, 'tok/s'):>16}{fmt(sim.after.output_tokens_per_second, 'tok/s'):>16}"
    )
    lines.append(
        f"{'goodput (all targets)':<24}{'':>16}"
        f"{fmt(sim.before.goodput_tokens_per_second, 'tok/s'):>16}{fmt(sim.after.goodput_tokens_per_second, 'tok/s'):>16}"
    )
    for name in sim.before.meets:
        b, c = sim.before.meets[name], sim.after.meets.get(name)
        lines.append(f"{'meeting ' + name:<24}{'':>16}{_share(b):>16}{_share(c):>16}")
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
    return "; ".join(parts)
