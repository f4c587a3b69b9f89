"""Render a diagnosis (and a rule's own docs) as text, JSON or markdown.

One structure in, three renderings out; nothing here decides anything. The same
``rule_markdown`` writes ``explain RULE_ID --format markdown`` and the runbook.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Mapping
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from advisor.core import jsonout, knobs
from advisor.core.units import fmt
from advisor.derive.signals import CATALOG, help_for
from advisor.diagnose.advise import Diagnosis, Evidence, Recommendation
from advisor.diagnose.ruleset import Rule
from advisor.outputs import prediction as prediction_out
from advisor.predict.replicas import Desired, Point, Sizing
from advisor.predict.scoring import SIMULATOR

PERCENT_HINTS = ("usage", "hit_ratio", "share", "abort_ratio", "acceptance_ratio")


def fmt_value(signal: str, value: float | None, unit: str | None = None) -> str:
    """A value with its unit, for people: ``242 ms``, ``2.1/s``, ``98%``, ``1,552 tokens``."""
    if value is None:
        return "unknown"
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return "unknown"
    unit = unit or (CATALOG[signal].unit if signal in CATALOG else "")
    if unit == "seconds":
        if abs(value) < 1:
            return f"{value * 1000:.0f} ms" if abs(value) >= 0.01 else f"{value * 1000:.1f} ms"
        return f"{value:.1f} s" if value < 100 else f"{value:.0f} s"
    if unit == "ratio":
        if any(h in signal for h in PERCENT_HINTS) or signal.endswith("_to_max_num_seqs_ratio"):
            return f"{value * 100:.0f}%"
        return f"{value:.2f}x" if value < 10 else f"{value:.1f}x"
    if unit == "per_second":
        return f"{value:.2f}/s"
    if unit == "tokens_per_second":
        return f"{value:,.0f} tok/s"
    if unit == "tokens":  # a mean of a few tokens keeps its fraction: 1.48 tokens, not 1
        return (
            f"{value:.2f} tokens"
            if abs(value) < 10 and not float(value).is_integer()
            else f"{value:,.0f} tokens"
        )
    if unit == "cores":
        return f"{value:.2f} cores"
    if unit in ("requests", "count"):
        return f"{value:,.0f}" if float(value).is_integer() or value >= 10 else f"{value:.1f}"
    if isinstance(value, float) and value.is_integer():
        return f"{value:,.0f}"
    return f"{value:g}"


def _ctx_line(ctx: Mapping[str, Any]) -> str:
    parts = []
    if ctx.get("model"):
        parts.append(f"model {ctx['model']}")
    if ctx.get("vllm_version"):
        parts.append(f"vLLM {ctx['vllm_version']}")
    dev = ctx.get("device")
    if dev:
        n = ctx.get("gpu_count")
        parts.append(f"{dev}" + (f" x{n}" if n and str(dev).lower() != "cpu" else ""))
    one = ctx.get("single_page")
    if isinstance(one, Mapping) and one.get("note"):
        parts.append(str(one["note"]))  # one page: no window, no rates
    if ctx.get("window_seconds"):
        parts.append(f"window {ctx['window_seconds']:.0f} s")
    if ctx.get("requests_per_second") is not None:
        parts.append(f"{ctx['requests_per_second']:.2f} req/s")
    for what, key in (("prompt", "prompt_tokens"), ("output", "generation_tokens")):
        mean, p50, p95 = (ctx.get(f"{key}_{s}") for s in ("mean", "p50", "p95"))
        if mean is not None:
            extra = ""
            if p50 is not None and p95 is not None:
                extra = f" (p50 ~{p50:,.0f}, p95 ~{p95:,.0f})"
            parts.append(f"{what} {mean:,.0f} tokens mean{extra}")
    if ctx.get("instance"):
        parts.append(f"instance {ctx['instance']} read from Prometheus")
    plugin = ctx.get("plugin")
    if isinstance(plugin, Mapping):
        parts.append(
            f"stat-logger plugin {plugin.get('version') or '?'} loaded ({plugin.get('export') or '?'})"
        )
    if ctx.get("knobs_unknown"):
        parts.append(f"not known, vLLM's defaults assumed: {', '.join(ctx['knobs_unknown'])}")
    return ", ".join(parts) or "no context known"


REPLICAS_TITLE = "Desired replicas"


def replicas_line(r: Desired) -> str:
    """The desired replica count, what it rests on and the latencies predicted at it."""
    s = r.sizing
    held = "; held while a scale-in waits out its hold" if r.held else ""
    at = ""
    p = r.at_desired
    if p is not None and (p.ttft_p95 is not None or p.itl_p95 is not None):
        at = f"; predicted at {p.replicas}: TTFT p95 {fmt(p.ttft_p95, 's')}, ITL p95 {fmt(p.itl_p95, 's')}"
    return f"{r.desired} ({s.current} now{held}): {s.reason}{at}"


def replicas_from_json(r: Any) -> Desired | None:
    """The desired replicas as ``Desired.to_json`` wrote them (``explain --daemon``); None when
    absent or not that shape."""
    if not isinstance(r, Mapping) or not isinstance(r.get("desired"), int):
        return None

    def pt(x: Any) -> Point | None:
        if not isinstance(x, Mapping) or not isinstance(x.get("replicas"), int):
            return None
        return Point(x["replicas"], x.get("ttft_seconds_p95"), x.get("itl_seconds_p95"))

    try:
        sizing = Sizing(
            current=int(r.get("current", 1)),
            needed=int(r.get("needed", r["desired"])),
            meets_targets=bool(r.get("meets_targets")),
            knob_first=bool(r.get("knob_first")),
            reason=str(r.get("reason", "")),
            confidence=r.get("confidence"),
        )
    except (TypeError, ValueError):
        return None
    return Desired(
        r["desired"],
        sizing,
        pt(r.get("predicted_at_desired")),
        pt(r.get("predicted_at_one_fewer")),
        bool(r.get("held")),
    )


def _current(rec: Recommendation) -> str:
    src = f" (current value from {rec.current_source})" if rec.current_source else ""
    return src


# ------------------------------------------------------------------ text
def render_text(d: Diagnosis, width: int = 100, color: bool = False, replicas: Desired | None = None) -> str:
    buf = io.StringIO()
    con = Console(
        file=buf,
        width=width,
        force_terminal=color,
        color_system="standard" if color else None,
        highlight=False,
    )
    rec = d.recommendation
    if rec is None:
        style = {"healthy": "bold green", "inconclusive": "bold yellow"}.get(d.status, "bold")
        con.print(Text(f"{d.status.upper()}: {d.reason}", style=style))
        _replicas(con, replicas)
        con.print(Text(f"Context: {_ctx_line(d.context)}", style="dim"))
        _findings(con, d)
        if d.context.get("latency_by_bucket"):
            con.print()
            _latency_by_length(con, d.context)
        return _tidy(buf.getvalue())
    con.print(
        Text(f"CHANGE  {rec.change}", style="bold cyan"), Text(_current(rec), style="dim"), soft_wrap=True
    )
    con.print(Text(f"{rec.severity.upper()} {rec.rule}: {rec.summary}", style="bold"))
    if rec.note:
        con.print(Text(f"Note: {rec.note}", style="dim"))
    con.print()
    table = Table(title="Evidence", title_justify="left", show_edge=False, box=None, pad_edge=False)
    table.add_column("signal", style="bold")
    table.add_column("value", justify="right")
    table.add_column("meaning", style="dim")
    for e in rec.evidence:
        table.add_row(e.signal, fmt_value(e.signal, e.value, e.unit), _evidence_help(e, d.context))
    con.print(table)
    con.print()
    _latency_by_length(con, d.context)
    if rec.predicted:
        con.print(Text(prediction_title(rec.predicted), style="bold"))
        con.print(prediction_table(rec.predicted))
        con.print()
        _simulated(con, rec.predicted)
    for line in _after_lines(rec):
        con.print(Text(line))
    if rec.leaves or rec.considered:
        con.print()
    for title, body in (("What", rec.what), ("Why", rec.why), ("What should move", rec.expect)):
        con.print(Text(f"{title}: ", style="bold"), Text(body))
    con.print(Text("Verify: ", style="bold"), Text(verify_text(rec)))
    con.print(Text("Roll back: ", style="bold"), Text(rec.rollback))
    _replicas(con, replicas)
    con.print(Text(f"Context: {_ctx_line(d.context)}", style="dim"))
    _findings(con, d)
    return _tidy(buf.getvalue())


def _simulated(con: Console, pred: Mapping[str, Any]) -> None:
    """Which model decided, and the simulator's view of the change: the load it inferred and the
    simulated distributions next to the measured ones."""
    for line in prediction_out.said_by(pred):
        con.print(Text(line))
    sim = pred.get("simulated")
    if not isinstance(sim, Mapping):
        if prediction_out.decided_line(pred):
            con.print()
        return
    head, why = prediction_out.simulated_header(sim)
    con.print(Text(f"Simulated: {head}"))
    if why:
        con.print(Text(f"({why})", style="dim"))
    table = Table(show_edge=False, box=None, pad_edge=False)
    for name, justify in (
        ("metric", "left"),
        ("measured", "right"),
        ("simulated now", "right"),
        ("after", "right"),
    ):
        table.add_column(name, justify=justify, style="bold" if name == "metric" else None)  # type: ignore[arg-type]
    for row in prediction_out.simulated_rows(sim, pred.get("measured") or {}):
        table.add_row(*row)
    con.print(table)
    con.print()


def _simulated_markdown(pred: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for line in prediction_out.said_by(pred):
        out += ["", line]
    sim = pred.get("simulated")
    if isinstance(sim, Mapping):
        head, why = prediction_out.simulated_header(sim)
        out += ["", f"**Simulated:** {head} ({why})", "", "| metric | measured | simulated now | after |"]
        out += ["|---|---:|---:|---:|"] + [
            f"| {' | '.join(r)} |" for r in prediction_out.simulated_rows(sim, pred.get("measured") or {})
        ]
    return out


def _replicas(con: Console, replicas: Desired | None) -> None:
    if replicas is not None:
        con.print(Text(f"{REPLICAS_TITLE}: ", style="bold"), Text(replicas_line(replicas)))


def verify_text(rec: Recommendation) -> str:
    """What to check after the change, as the text and the page say it."""
    return ", ".join(rec.verify) + " (same load, before vs after)"


def _after_lines(rec: Recommendation) -> list[str]:
    """The breaches the change is predicted to leave, and the other changes weighed."""
    out = []
    if rec.leaves:
        out.append(leaves_line(rec))
    if rec.considered:
        out.append("Also considered:")
        for c in rec.considered:
            out.append(f"  - {considered_line(c)}")
    return out


def leaves_line(rec: Recommendation) -> str:
    """The target breaches the change is predicted to leave standing, as one sentence."""
    return "Left standing after the change: " + "; ".join(rec.leaves) + "."


def considered_line(c: Mapping[str, Any]) -> str:
    """One change arbitration weighed: rule, knob and value, and why it was not chosen."""
    if c.get("knob") == "replicas":
        what = "a replica more"
    else:
        what = f"{c.get('knob')} {knobs.format_value(c.get('current'))} -> {knobs.format_value(c.get('proposed'))}"
    pred = c.get("predicted") or {}
    detail = ""
    if pred:
        parts = [
            f"{label} {fmt(pred.get(k), unit)}"
            for k, label, unit in (
                ("output_tokens_per_second", "throughput", "tok/s"),
                ("ttft_seconds_p95", "TTFT p95", "s"),
                ("itl_seconds_p95", "ITL p95", "s"),
            )
            if pred.get(k) is not None
        ]
        detail = f"; predicted {', '.join(parts)}" if parts else ""
    held = f" (held back: {c['held_back']})" if c.get("held_back") else ""
    return f"{c.get('rule')}: {what}{held}: {c.get('why_not')}{detail}"


def _evidence_help(e: Evidence, context: Mapping[str, Any]) -> str:
    """A signal's meaning; a latency quantile read from the plugin's sketch says so."""
    sources = context.get("latency_sources")
    if isinstance(sources, Mapping) and e.signal in CATALOG:
        base = e.signal.rsplit("_", 1)[0]
        if base in sources:
            return help_for(e.signal, sources[base])
    return e.help


LENGTH_COLUMNS = (
    ("ttft", 0.5, "TTFT p50"),
    ("ttft", 0.95, "TTFT p95"),
    ("tpot", 0.5, "TPOT p50"),
    ("tpot", 0.95, "TPOT p95"),
    ("e2e", 0.5, "E2E p50"),
    ("e2e", 0.95, "E2E p95"),
)


def _seconds(v: Any) -> str:
    return fmt_value("", v, "seconds") if isinstance(v, int | float) else "-"


def latency_rows(context: Mapping[str, Any]) -> tuple[str, list[tuple[str, ...]]]:
    """The per-length table of a diagnosis's context (``latency_by_bucket``): a title and rows
    (bucket, requests, then LENGTH_COLUMNS); no rows without the plugin."""
    rows_in = context.get("latency_by_bucket") or []
    if not rows_in:
        return "", []
    rows: list[tuple[str, ...]] = []
    batches = 1
    window = None
    for r in rows_in:
        lat = r.get("latencies") or {}
        dim = r.get("dimension")
        label = "all requests" if dim == "all" else f"{dim}s {r.get('bucket')}"
        count = next((x.get("count") for x in lat.values() if x.get("count") is not None), None)
        cells = [label, "-" if count is None else f"{count:,.0f}"]
        for qty, q, _ in LENGTH_COLUMNS:
            x = lat.get(qty) or {}
            cells.append(_seconds((x.get("quantiles") or {}).get(f"p{q * 100:g}")))
            batches = max(batches, int(x.get("batches") or 1))
            window = x.get("window_seconds") or window
        rows.append(tuple(cells))
    plugin = context.get("plugin") or {}
    acc = plugin.get("relative_accuracy", 0.01)
    w = float(window or 60.0)
    span = f"its last {w:.0f}-s window" if batches <= 1 else f"{batches} of its {w:.0f}-s windows"
    title = (
        f"Latency by request length (stat-logger plugin {plugin.get('version', '?')}: requests in the window; "
        f"quantiles from per-request sketches, within {acc * 100:g}%, over {span})"
    )
    return title, rows


def _latency_by_length(con: Console, context: Mapping[str, Any]) -> None:
    title, rows = latency_rows(context)
    if not rows:
        return
    table = Table(title=title, title_justify="left", show_edge=False, box=None, pad_edge=False)
    table.add_column("tokens", style="bold")
    table.add_column("requests", justify="right")
    for _, _, head in LENGTH_COLUMNS:
        table.add_column(head, justify="right")
    for r in rows:
        table.add_row(*r)
    con.print(table)
    con.print()


def experiment_line(e: Mapping[str, Any] | None) -> str | None:
    if not e:
        return None
    head = f"Experiment: {e.get('flag') or e.get('knob')} {e.get('old')} -> {e.get('new')}"
    if e.get("state") == "observing":
        return f"{head}: observing, {e.get('after_requests', 0):.0f} of ~{e.get('before_requests', 0):.0f} requests seen"
    reasons = " ".join(e.get("reasons") or [])
    return f"{head}: {str(e.get('verdict')).upper()}. {reasons}"


def _tidy(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def _findings(con: Console, d: Diagnosis) -> None:
    line = experiment_line(d.experiment)
    if line:
        con.print(Text(line, style="bold magenta"))
    lines = finding_lines(d)
    if not lines:
        return
    con.print(Text("Other findings:", style="bold"))
    for text in lines:
        con.print(f"  - {text}", markup=False)  # "[firing]" is not markup


def finding_lines(d: Diagnosis) -> list[str]:
    """The rules other than the chosen one that hold, wait or cannot move, one line each."""
    chosen = d.recommendation.rule if d.recommendation is not None else None
    out = []
    for f in d.findings:
        if not (f.get("state") in ("firing", "pending", "gated") or f.get("blocked")) or f["rule"] == chosen:
            continue
        extra = ""
        if f.get("suppressed"):
            extra = f" (suppressed: {f['suppressed']})"
        elif f.get("blocked"):
            extra = f" (no knob can move: {'; '.join(f['blocked'])})"
        out.append(f"{f['rule']} [{f['state']}]{extra}")
    return out


# ------------------------------------------------------------------ JSON
def diagnosis_json(d: Diagnosis, replicas: Desired | None = None) -> dict[str, Any]:
    """``explain --format json`` and the daemon's ``/api/v1/diagnosis``: the diagnosis and the
    desired replicas (null: unknown)."""
    return {**d.to_json(), "replicas": replicas.to_json() if replicas is not None else None}


def render_json(d: Diagnosis, replicas: Desired | None = None) -> str:
    return jsonout.dumps(diagnosis_json(d, replicas), indent=2, sort_keys=False, default=str)


# ------------------------------------------------------------------ markdown
def render_markdown(d: Diagnosis, replicas: Desired | None = None) -> str:
    out = [f"## vLLM advisor: {d.status}", ""]
    rec = d.recommendation
    shown = [f"**{REPLICAS_TITLE}:** {replicas_line(replicas)}", ""] if replicas is not None else []
    if rec is None:
        out += [d.reason, "", *shown, f"Context: {_ctx_line(d.context)}", *_latency_markdown(d.context), ""]
        return "\n".join(out)
    out += [
        f"**Change:** `{rec.change}`{_current(rec)}",
        "",
        f"**{rec.severity}** `{rec.rule}`: {rec.summary}",
        "",
        "| signal | value | meaning |",
        "|---|---|---|",
    ]
    out += [
        f"| `{e.signal}` | {fmt_value(e.signal, e.value, e.unit)} | {_evidence_help(e, d.context)} |"
        for e in rec.evidence
    ]
    out += _latency_markdown(d.context)
    if rec.predicted:
        out += [
            "",
            f"**{prediction_title(rec.predicted)}**",
            "",
            f"| metric | {MEASURED_STEADY} | predicted | change |",
        ]
        out += ["|---|---:|---:|---:|"] + [f"| {' | '.join(r)} |" for r in prediction_rows(rec.predicted)]
        out += _simulated_markdown(rec.predicted)
    if rec.note:
        out += ["", f"_Note:_ {rec.note}"]
    if rec.leaves:
        out += ["", "**Left standing after the change:** " + "; ".join(rec.leaves) + "."]
    if rec.considered:
        out += ["", "**Also considered:**", ""] + [f"- {considered_line(c)}" for c in rec.considered]
    out += [
        "",
        f"**What:** {rec.what}",
        "",
        f"**Why:** {rec.why}",
        "",
        f"**What should move:** {rec.expect}",
        "",
        f"**Verify:** {', '.join(f'`{s}`' for s in rec.verify)}",
        "",
        f"**Roll back:** {rec.rollback}",
        "",
        *shown,
        f"Context: {_ctx_line(d.context)}",
        "",
    ]
    return "\n".join(out)


def _latency_markdown(context: Mapping[str, Any]) -> list[str]:
    title, rows = latency_rows(context)
    if not rows:
        return []
    heads = ["tokens", "requests", *(h for _, _, h in LENGTH_COLUMNS)]
    return [
        "",
        f"**{title}**",
        "",
        "| " + " | ".join(heads) + " |",
        "|" + "---|" * len(heads),
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def render(d: Diagnosis, fmt: str, color: bool = False, replicas: Desired | None = None) -> str:
    """``d`` as ``fmt`` (text, json, markdown), with the desired replicas where they are known."""
    if fmt == "json":
        return render_json(d, replicas)
    if fmt == "markdown":
        return render_markdown(d, replicas)
    return render_text(d, color=color, replicas=replicas)


# ------------------------------------------------------------------ a rule's own docs
def _knob_lines(rule: Rule) -> list[str]:

    lines = []
    for i, k in enumerate(rule.knobs):
        knob = knobs.KNOBS.get(k.name)
        flag = (knob.flag or knob.env) if knob and (knob.flag or knob.env) else k.name
        step = f" ({k.step})" if k.step else ""
        pre = "then " if i else ""
        note = f": {k.note}" if k.note else ""
        bound = f", grounded in `{k.bound_signal}`" if k.bound_signal else ""
        unless = "".join(f", not while `{c.describe()}`" for c in k.unless)
        lines.append(f"{pre}`{flag}` {k.direction}{step}{bound}{unless}{note}")
    return lines


def rule_markdown(rule: Rule, heading: str = "##") -> str:
    e = rule.explain
    when = "\n".join(f"- `{c.signal} {c.op} {c.value}`" for c in rule.when)
    lines = [
        f"{heading} {rule.id}",
        "",
        f"**{rule.summary}**",
        "",
        f"Severity `{rule.severity}` · alert `{rule.alert}` · fires after {rule.for_s:.0f}s",
        "",
        "**Fires when** (all of):",
        "",
        when,
        "",
        "**Knob** (the first that can move):",
        "",
        *[f"{i + 1}. {line}" for i, line in enumerate(_knob_lines(rule))],
        "",
        f"**What.** {str(e.get('what', '')).strip()}",
        "",
        f"**Why.** {str(e.get('why', '')).strip()}",
        "",
        f"**What should move.** {str(e.get('expect', '')).strip()}",
        "",
        f"**Verify.** {', '.join(f'`{s}`' for s in e.get('verify', []))} under the same load.",
        "",
        f"**Roll back.** {str(e.get('rollback', '')).strip()}",
        "",
        f"**Evidence shown.** {', '.join(f'`{s}`' for s in e.get('evidence', []))}",
        "",
        "**References.** " + ", ".join(f"<{r}>" for r in e.get("references", [])),
        "",
    ]
    return "\n".join(lines)


def rule_text(rule: Rule, width: int = 100) -> str:
    buf = io.StringIO()
    con = Console(file=buf, width=width, color_system=None, highlight=False)
    e = rule.explain
    con.print(Text(f"{rule.id} ({rule.severity}): {rule.summary}", style="bold"))
    con.print(f"Alert {rule.alert}; fires after the conditions hold {rule.for_s:.0f}s.")
    con.print(Text("Fires when:", style="bold"))
    for c in rule.when:
        con.print(f"  {c.signal} {c.op} {c.value}")
    con.print(Text("Knob (the first that can move):", style="bold"))
    for line in _knob_lines(rule):
        con.print(f"  {line.replace('`', '')}")
    for title, key in (
        ("What", "what"),
        ("Why", "why"),
        ("What should move", "expect"),
        ("Roll back", "rollback"),
    ):
        con.print(Text(f"{title}: ", style="bold"), str(e.get(key, "")).strip())
    con.print(Text("Verify: ", style="bold"), ", ".join(e.get("verify", [])))
    con.print(Text("References: ", style="bold"), " ".join(e.get("references", [])))
    return buf.getvalue()


def rule_json(rule: Rule) -> dict[str, Any]:
    return {
        "id": rule.id,
        "summary": rule.summary,
        "severity": rule.severity,
        "priority": rule.priority,
        "alert": rule.alert,
        "for_seconds": rule.for_s,
        "when": [{"signal": c.signal, "op": c.op, "value": c.value} for c in rule.when],
        "gate": [{"signal": c.signal, "op": c.op, "value": c.value} for c in rule.gate],
        "knobs": [
            {
                "name": k.name,
                "direction": k.direction,
                "step": k.step,
                "bound": k.bound_signal,
                "unless": [{"signal": c.signal, "op": c.op, "value": c.value} for c in k.unless],
                "note": k.note,
            }
            for k in rule.knobs
        ],
        "explain": rule.explain,
        "path": rule.path,
    }


def rules_table(rules: Iterable[Rule]) -> str:
    buf = io.StringIO()
    con = Console(file=buf, width=140, color_system=None, highlight=False)
    t = Table(show_edge=False, box=None)
    for col in ("id", "severity", "knob", "summary"):
        t.add_column(col)
    for r in rules:
        t.add_row(r.id, r.severity, " / ".join(f"{k.name} {k.direction}" for k in r.knobs), r.summary)
    con.print(t)
    return buf.getvalue()


# the model's "now" is the steady part of the window (the intervals a queue stood in, else the
# busy ones), which the prediction is made from; Evidence's rates are over the whole window, so a
# rate can read higher here than there (preemptions 3.49/s here, 2.08/s in Evidence)
MEASURED_STEADY = "measured (steady load)"


def prediction_title(pred: Mapping[str, Any]) -> str:

    conf = pred.get("confidence")
    by = pred.get("predicted_by") == SIMULATOR
    head = "Predicted by the scheduler simulator" if by else "Predicted"
    if not isinstance(conf, int | float):
        return f"{head} (same load)"
    if by:  # the binding and the confidence are the closed form's reading
        return (
            f"{head} (same load; binding now: {pred.get('binding_now', '?')}, after: "
            f"{pred.get('binding_after', '?')}, as the closed form reads it)"
        )
    return (
        f"{head} (same load; confidence {conf:.2f}, typical error {prediction_out.interval_pct(conf)}; "
        f"binding now: {pred.get('binding_now', '?')}, after: {pred.get('binding_after', '?')})"
    )


def prediction_table(pred: Mapping[str, Any]) -> Table:
    """The model's prediction of the advised change next to the measured state."""

    table = Table(show_edge=False, box=None, pad_edge=False)
    table.add_column("metric", style="bold")
    table.add_column(MEASURED_STEADY, justify="right")
    table.add_column("predicted", justify="right")
    table.add_column("change", justify="right", style="dim")
    for row in prediction_rows(pred):
        table.add_row(*row)
    return table


def prediction_rows(pred: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """(metric, measured, predicted, change) per metric of a prediction, as its table shows them."""
    rows = []
    meas, after = pred.get("measured") or {}, pred.get("predicted") or {}
    for metric, (label, unit) in prediction_out.LABELS.items():
        a, b = meas.get(metric), after.get(metric)
        ch = (
            f"{(b / a - 1) * 100:+.0f}%"
            if isinstance(a, int | float) and isinstance(b, int | float) and a
            else ""
        )
        rows.append((label, fmt(a, unit), fmt(b, unit), ch))
    return rows


def diagnosis_from_json(d: Mapping[str, Any]) -> Diagnosis:
    """Rebuild a Diagnosis from its JSON (``explain --daemon``), to render it the same way."""

    rec = d.get("recommendation")
    recommendation = None
    if isinstance(rec, Mapping):
        recommendation = Recommendation(
            rule=str(rec.get("rule")),
            summary=str(rec.get("summary", "")),
            severity=str(rec.get("severity", "")),
            knob=str(rec.get("knob")),
            flag=rec.get("flag"),
            direction=str(rec.get("direction", "")),
            current=rec.get("current"),
            current_source=rec.get("current_source"),
            proposed=rec.get("proposed"),
            change=str(rec.get("change", "")),
            evidence=tuple(
                Evidence(str(e.get("signal")), e.get("value"), str(e.get("unit", "")), str(e.get("help", "")))
                for e in rec.get("evidence", [])
            ),
            what=str(rec.get("what", "")),
            why=str(rec.get("why", "")),
            expect=str(rec.get("expect", "")),
            verify=tuple(rec.get("verify", [])),
            rollback=str(rec.get("rollback", "")),
            references=tuple(rec.get("references", [])),
            note=str(rec.get("note", "")),
            predicted=rec.get("predicted") if isinstance(rec.get("predicted"), Mapping) else None,
            chosen_by=str(rec.get("chosen_by", "")),
            considered=tuple(dict(c) for c in rec.get("considered") or [] if isinstance(c, Mapping)),
            leaves=tuple(str(x) for x in rec.get("leaves_breached") or []),
        )
    return Diagnosis(
        status=str(d.get("status")),
        reason=str(d.get("reason", "")),
        recommendation=recommendation,
        findings=tuple(d.get("findings", [])),
        engine=dict(d.get("engine", {})),
        context=dict(d.get("context", {})),
        at=float(d.get("at", 0.0)),
        signals=dict(d.get("signals", {})),
        experiment=d.get("experiment"),
        gate=d.get("gate") if isinstance(d.get("gate"), str) else None,
    )
