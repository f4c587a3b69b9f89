"""The daemon's pages as HTML: ``/`` (one server: the whole diagnosis beside charts of the
window), ``/history`` (the experiments judged and the advice given before) and the fleet's
``/`` (every server side by side, each linking to its own page).

Pure functions of values: the diagnosis as ``explain`` words it (:mod:`advisor.outputs.view`),
the window's series (:mod:`advisor.derive.timeseries`) drawn by :mod:`advisor.outputs.charts`,
the history the drive layer keeps. No script and nothing fetched from elsewhere (it works
offline, behind a firewall); a ``<meta http-equiv="refresh">`` at the scrape interval keeps it
current. Everything shown is escaped: model names, label values, log text and rule text come
from outside. :data:`SECURITY_HEADERS` go with every page: even were something left unescaped,
the browser would run no script and load nothing from anywhere.
"""

from __future__ import annotations

import datetime as dt
import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from advisor.core import knobs
from advisor.core.units import fmt
from advisor.derive.timeseries import Charts, Level
from advisor.outputs import charts as charts_out
from advisor.outputs import explain
from advisor.outputs import prediction as prediction_out
from advisor.outputs.state import AdviceSpan, Deployment, ExportState, FleetState, History, Member
from advisor.outputs.view import DiagnosisView, Table, view

HTML = "text/html; charset=utf-8"
SECURITY_HEADERS = (
    (
        "Content-Security-Policy",
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; "
        "form-action 'none'; frame-ancestors 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
)
STATUS_WORDS = {
    "advice": "ADVICE",
    "healthy": "HEALTHY",
    "inconclusive": "INCONCLUSIVE",
    "insufficient-data": "INSUFFICIENT DATA",
}


def e(text: object) -> str:
    return html.escape("" if text is None else str(text), quote=True)


def when(t: float | None) -> str:
    if t is None or not math.isfinite(t):
        return "unknown"
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration(s: float) -> str:
    s = max(0.0, s)
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


@dataclass(frozen=True)
class Links:
    """Where a page's links go: the sidecar's own paths, or a fleet daemon's for one server."""

    home: str = "/"
    history: str = "/history"
    diagnosis: str = "/api/v1/diagnosis"
    fleet: str | None = None  # the fleet's page, on a fleet daemon's per-server page

    @classmethod
    def for_instance(cls, instance: str) -> Links:
        q = "?instance=" + quote(instance, safe="")
        return cls(f"/server{q}", f"/history{q}", f"/api/v1/diagnosis{q}", "/")


STYLE = (
    "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;max-width:76em;margin:1.2em auto;"
    "padding:0 1em;color:#212529;background:#f8f9fa;line-height:1.4}"
    "h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.1em;margin:1.4em 0 .5em}"
    "code{font-family:ui-monospace,'DejaVu Sans Mono',monospace;font-size:.92em}"
    "table{border-collapse:collapse;background:#fff;font-size:.9em}"
    "td,th{border-bottom:1px solid #dee2e6;padding:.3em .6em;text-align:left;vertical-align:top}"
    "th{background:#f1f3f5}td.num{text-align:right;white-space:nowrap}caption{text-align:left;padding:.3em 0;"
    "font-weight:600}"
    ".badge{display:inline-block;padding:.1em .55em;border-radius:1em;font-size:.8em;font-weight:600;"
    "color:#fff;background:#868e96;vertical-align:middle}"
    ".badge.advice{background:#d9480f}.badge.healthy{background:#2b8a3e}.badge.inconclusive{background:#e67700}"
    ".badge.keep{background:#2b8a3e}.badge.revert{background:#c92a2a}"
    ".banner{padding:.5em .8em;border-radius:6px;background:#fff;border:1px solid #dee2e6;margin:.6em 0}"
    ".banner.down{background:#fff5f5;border-color:#ffa8a8;color:#c92a2a}"
    ".change{font-size:1.25em;padding:.6em .8em;background:#fff4e6;border:1px solid #ffc078;border-radius:6px;"
    "margin:.6em 0}.change code{font-size:1em;font-weight:700}"
    ".muted,.source{color:#868e96}.status-line{font-size:1.1em}"
    ".pair{display:grid;grid-template-columns:repeat(auto-fit,minmax(28em,1fr));gap:1em;align-items:start}"
    "dl.sections dt{font-weight:600;margin-top:.6em}dl.sections dd{margin:.1em 0 0 0}"
    "nav{margin:1.6em 0;font-size:.9em}nav a{margin-right:1em}"
    "ul.lines{margin:.3em 0;padding-left:1.3em}" + charts_out.STYLE
)


def shell(title: str, body: str, refresh_s: float | None, nav: Sequence[tuple[str, str]]) -> str:
    """The page around ``body`` (already escaped): the title, the refresh, the links."""
    refresh = ""
    if refresh_s is not None and refresh_s > 0:
        refresh = f'<meta http-equiv="refresh" content="{max(1, math.ceil(refresh_s))}">'
    links = " ".join(f'<a href="{e(href)}">{e(label)}</a>' for label, href in nav)
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"{refresh}<title>{e(title)}</title><style>{STYLE}</style></head>\n"
        f"<body><h1>{e(title)}</h1>\n{body}\n<nav>{links}</nav></body></html>\n"
    )


def table(t: Table, cls: str = "") -> str:
    numeric = t.numeric or (False,) * len(t.head)
    head = "".join(f"<th>{e(h)}</th>" for h in t.head)
    rows = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{e(c)}</td>' if i < len(numeric) and numeric[i] else f"<td>{e(c)}</td>"
            for i, c in enumerate(r)
        )
        + "</tr>"
        for r in t.rows
    )
    c = f' class="{e(cls)}"' if cls else ""
    return f"<table{c}><caption>{e(t.title)}</caption><tr>{head}</tr>{rows}</table>"


def badge(status: str) -> str:
    return f'<span class="badge {e(status)}">{e(STATUS_WORDS.get(status, status))}</span>'


# ------------------------------------------------------------------ one server
CHARTS_LATE = (
    "The window's charts are not on this page: the daemon's cycle held the window for longer than "
    "a page waits (a busy machine), or drawing them failed (the log says). The next refresh tries again."
)


def server_page(
    st: ExportState,
    window: Charts | None,
    *,
    refresh_s: float | None = None,
    links: Links = Links(),
    title: str = "vllm-advisor",
    charts_expected: bool = False,
) -> str:
    """The whole diagnosis of one server with the charts of its window (``charts_expected``: the
    page has a source of charts, so none coming is said, not left blank)."""
    d = st.diagnosis
    parts = [_banner(st)]
    if d is None:
        parts.append('<p class="status-line">No diagnosis yet: the first pages are being read.</p>')
        v = None
    else:
        v = view(d, st.replicas)
        parts.append(_headline(v))
    if window is not None:
        parts.append(_charts(window, st))
    elif charts_expected:
        parts.append(f'<p class="status-line" id="charts-late">{e(CHARTS_LATE)}</p>')
    if v is not None:
        parts.append(_details(v))
    nav = [("this page", links.home), ("history", links.history), ("diagnosis JSON", links.diagnosis)]
    if links.fleet is not None:
        nav.insert(0, ("fleet", links.fleet))
    nav += [("metrics", "/metrics"), ("health", "/healthz"), ("ready", "/readyz")]
    return shell(title, "\n".join(parts), refresh_s, nav)


def _banner(st: ExportState) -> str:
    d = st.diagnosis
    status = d.status if d is not None else "insufficient-data"
    bits = [badge(status)]
    if st.up:
        bits.append(f"vLLM is <b>up</b>; last page read {e(when(st.last_scrape_t))}")
    elif d is None and st.last_scrape_t is None:  # nothing tried yet: not down
        bits.append("vLLM: no page read yet")
    else:
        last = f"; last page read {e(when(st.last_scrape_t))}" if st.last_scrape_t is not None else ""
        bits.append(f"vLLM is <b>DOWN</b> (cannot be read){last}")
    if d is not None:
        model = d.context.get("model") or d.engine.get("model")
        if model:
            bits.append(f"model <code>{e(model)}</code>")
        bits.append(f"diagnosed {e(when(d.at))}")
    if st.several_servers:
        bits.append("<b>this URL reaches several servers</b>: advice is withheld")
    cls = "banner" if st.up else "banner down"
    return f'<p class="{cls}" id="banner">' + " · ".join(bits) + "</p>"


def _headline(v: DiagnosisView) -> str:
    if v.change is None:
        return f'<p class="status-line" id="status"><b>{e(v.status.upper())}</b>: {e(v.reason)}</p>'
    out = [
        f'<p class="change" id="change">Change: <code>{e(v.change)}</code>'
        f'<span class="source">{e(v.change_source)}</span></p>',
        f'<p id="status"><b>{e(v.severity.upper())}</b> <code>{e(v.rule)}</code>: {e(v.summary)}</p>',
    ]
    if v.note:
        out.append(f'<p class="muted">Note: {e(v.note)}</p>')
    return "\n".join(out)


def _charts(w: Charts, st: ExportState) -> str:
    d = st.diagnosis
    marks: list[charts_out.Mark] = [charts_out.Mark("engine restart", t, "restart") for t in w.restarts]
    levels: list[tuple[str, Level]] = []  # (the signal it bounds, the level)
    predicted: dict[str, float] = {}
    rec = d.recommendation if d is not None else None
    for f in d.findings if d is not None else ():
        since = f.get("since")
        chosen = rec is not None and f.get("rule") == rec.rule
        if not isinstance(since, int | float) or not (chosen or f.get("state") == "pending"):
            continue
        word = "holds" if chosen else "pending"
        marks.append(
            charts_out.Mark(f"{f.get('rule')} {word} since {when(since)[11:19]}", float(since), "hold")
        )
        if chosen:
            for c in f.get("checks") or ():
                thr = c.get("threshold")
                if isinstance(thr, int | float) and thr != 0:
                    text = f"{f.get('rule')}: {c.get('op')}"
                    levels.append((str(c.get("signal")), Level(text, float(thr), "threshold")))
    if rec is not None and d is not None and d.status == "advice" and rec.predicted:
        predicted = {
            k: float(x)
            for k, x in (rec.predicted.get("predicted") or {}).items()
            if isinstance(x, int | float)
        }
    figs = []
    for c in w.charts:
        signals = {ln.signal for ln in c.lines}
        mine = [lv for sig, lv in levels if sig in signals]
        figs.append(
            charts_out.figure(c, w.t0, w.t1, marks=marks, outages=w.outages, levels=mine, predicted=predicted)
        )
    span = _duration(w.t1 - w.t0)
    right = (
        " Right of each chart: the level predicted after the advised change (same load)." if predicted else ""
    )
    shaded = "; shaded: vLLM could not be read" if w.outages else ""
    return (
        f'<h2>The window</h2><p class="muted">The last {e(span)} up to {e(when(w.t1))}{e(shaded)}.{e(right)}</p>'
        f'<div class="charts">{"".join(figs)}</div>'
    )


def _lines(items: Sequence[str], cls: str = "lines") -> str:
    return f'<ul class="{cls}">' + "".join(f"<li>{e(x)}</li>" for x in items) + "</ul>"


def _details(v: DiagnosisView) -> str:
    out = []
    pair = [table(t) for t in (v.evidence, v.predicted) if t is not None]
    if pair:
        out.append(f'<div class="pair" id="evidence">{"".join(pair)}</div>')
    out += [f'<p class="muted">{e(x)}</p>' for x in v.decided]
    out += [f"<p><b>{e(x)}</b></p>" for x in v.leaves]
    if v.considered:
        out.append(f"<p><b>Also considered:</b></p>{_lines(v.considered)}")
    if v.sections:
        out.append(
            '<dl class="sections">'
            + "".join(f"<dt>{e(s.title)}</dt><dd>{e(s.body)}</dd>" for s in v.sections)
            + "</dl>"
        )
    if v.latency is not None:
        out.append(table(v.latency))
    if v.replicas is not None:
        out.append(f'<p id="replicas"><b>{e(explain.REPLICAS_TITLE)}:</b> {e(v.replicas)}</p>')
    if v.experiment:
        out.append(f"<p><b>{e(v.experiment)}</b></p>")
    if v.findings:
        out.append(f"<p><b>Other findings:</b></p>{_lines(v.findings)}")
    out.append(f'<p class="muted" id="context">Context: {e(v.context)}</p>')
    return "\n".join(out)


# ------------------------------------------------------------------ history
def history_page(
    h: History,
    *,
    refresh_s: float | None = None,
    links: Links = Links(),
    title: str = "vllm-advisor history",
) -> str:
    parts = ["<h2>Experiments judged</h2>", f'<p class="muted">{e(h.experiments_kept)}</p>']
    if h.error:
        parts.append(f'<p class="banner down">{e(h.error)}</p>')
    if h.experiments:
        rows = "".join(_experiment_row(r) for r in h.experiments)
        parts.append(
            '<table id="experiments"><tr><th>#</th><th>started</th><th>change</th><th>verdict</th>'
            f"<th>why</th><th>predicted vs measured (error)</th></tr>{rows}</table>"
        )
    else:
        parts.append(
            "<p>No experiment judged yet: after a restart with a changed knob, the daemon compares "
            "the window before with the window after and records keep, revert or inconclusive.</p>"
        )
    parts += ["<h2>Advice given</h2>", f'<p class="muted">{e(h.advice_kept)}</p>']
    if h.advice:
        rows = "".join(_advice_row(a) for a in h.advice)
        parts.append(
            '<table id="advice"><tr><th>began</th><th>ended</th><th>for</th><th>change</th><th>rule</th>'
            f"<th>predicted when advised</th><th>how it ended</th></tr>{rows}</table>"
        )
    else:
        parts.append("<p>No advice given yet.</p>")
    nav = [("the server", links.home), ("history", links.history), ("diagnosis JSON", links.diagnosis)]
    if links.fleet is not None:
        nav.insert(0, ("fleet", links.fleet))
    return shell(title, "\n".join(parts), refresh_s, nav)


def _experiment_row(r: Mapping[str, Any]) -> str:
    verdict = str(r.get("verdict") or "inconclusive")
    change = f"{r.get('flag') or r.get('knob')} {knobs.format_value(r.get('old_value'))} -> " + str(
        knobs.format_value(r.get("new_value"))
    )
    reasons = " ".join(str(x) for x in r.get("reasons") or [])
    pred = prediction_out.prediction_line(r.get("prediction")) or "no prediction (more than one knob changed)"
    ident = r.get("id")
    label = f"{ident}" if ident is not None else "queued (not yet written)"
    ended = r.get("ended_at")
    span = f"{when(r.get('started_at'))}" + (
        f" to {when(ended)[11:]}" if isinstance(ended, int | float) else ""
    )
    return (
        f'<tr class="{e(verdict)}"><td>{e(label)}</td><td>{e(span)}</td><td><code>{e(change)}</code></td>'
        f'<td><span class="badge {e(verdict)}">{e(verdict)}</span></td><td>{e(reasons)}</td>'
        f"<td>{e(pred)}</td></tr>"
    )


def _advice_row(a: AdviceSpan) -> str:
    ended = "still advised" if a.ended is None else when(a.ended)
    until = a.ended if a.ended is not None else a.last_seen
    length = "" if until is None else _duration(until - a.began)
    change = (
        a.change
        if not a.first_change or a.first_change == a.change
        else f"{a.change} (first: {a.first_change})"
    )
    pred = ""
    if a.predicted:
        pred = "; ".join(
            f"{prediction_out.LABELS[m][0]} {fmt(v[0], prediction_out.LABELS[m][1])} -> "
            f"{fmt(v[1], prediction_out.LABELS[m][1])}"
            for m, v in a.predicted.items()
            if m in prediction_out.LABELS and isinstance(v, list | tuple) and len(v) == 2
        )
    how = a.end_reason + (f" (withdrawn {a.withdrawn} time(s) for a moment)" if a.withdrawn else "")
    return (
        f"<tr><td>{e(when(a.began))}</td><td>{e(ended)}</td><td>{e(length)}</td><td><code>{e(change)}</code></td>"
        f"<td>{e(a.severity)} <code>{e(a.rule)}</code></td><td>{e(pred)}</td><td>{e(how)}</td></tr>"
    )


# ------------------------------------------------------------------ the fleet
def fleet_page(st: FleetState, *, refresh_s: float | None = None) -> str:
    """Every server with its status, advice and desired replicas, worst first, each linking to its
    own page; then the deployments and the replicas they need."""
    by_instance: dict[str, Deployment] = {i: d for d in st.deployments for i in d.instances}
    rows = [_member_row(m, by_instance.get(m.server.instance)) for m in st.worst_first()]
    parts = []
    if not st.prometheus_up:
        parts.append(f'<p class="banner down"><b>Prometheus cannot be read</b>: {e(st.last_error or "")}</p>')
    n_adv = sum(
        1 for m in st.members if m.state.diagnosis is not None and m.state.diagnosis.status == "advice"
    )
    dropped = (
        f"; {st.instances_dropped} more behind the selector not followed" if st.instances_dropped else ""
    )
    parts.append(
        f'<p class="banner">{len(st.members)} servers, {n_adv} with advice, worst first{e(dropped)}.</p>'
    )
    parts.append(
        '<table id="servers"><tr><th>server</th><th>model</th><th>status</th><th>vLLM</th><th>change</th>'
        f"<th>desired replicas</th><th>why</th></tr>{''.join(rows)}</table>"
    )
    deps = []
    for d in st.deployments:
        r = d.replicas
        where = ", ".join(f"{k}={v}" for k, v in d.labels().items() if v and k != "model_name")
        deps.append(
            f"<tr><td>{e(d.model)}</td><td>{e(where)}</td><td class='num'>{d.up}</td>"
            f"<td class='num'>{'unknown' if r is None else r.desired}</td>"
            f"<td>{e(explain.replicas_line(r) if r else '')}</td></tr>"
        )
    if deps:
        parts.append(
            '<h2>Replicas</h2><table id="deployments"><tr><th>model</th><th>deployment</th><th>up</th>'
            f"<th>desired</th><th>why</th></tr>{''.join(deps)}</table>"
        )
    nav = [("fleet", "/"), ("diagnosis JSON", "/api/v1/diagnosis"), ("replicas JSON", "/api/v1/replicas")]
    nav += [("metrics", "/metrics"), ("health", "/healthz"), ("ready", "/readyz")]
    return shell("vllm-advisor fleet", "\n".join(parts), refresh_s, nav)


def _member_row(m: Member, dep: Deployment | None) -> str:
    d = m.state.diagnosis
    status = d.status if d is not None else "insufficient-data"
    rec = d.recommendation if d is not None else None
    change = (
        f"<code>{e(rec.change)}</code> <span class='muted'>({e(rec.rule)})</span>" if rec is not None else ""
    )
    reason = d.reason if d is not None else "no diagnosis yet"
    links = Links.for_instance(m.server.instance)
    replicas = "unknown"
    if dep is not None and dep.replicas is not None:
        replicas = f"{dep.replicas.desired} ({dep.up} up)"
    up = "up" if m.state.up else "DOWN"
    return (
        f'<tr class="{e(status)}"><td><a href="{e(links.home)}">{e(m.server.instance)}</a>'
        f' <a class="muted" href="{e(links.history)}">history</a></td>'
        f"<td>{e(', '.join(m.server.models))}</td><td>{badge(status)}</td><td>{e(up)}</td><td>{change}</td>"
        f"<td class='num'>{e(replicas)}</td><td>{e(reason)}</td></tr>"
    )
