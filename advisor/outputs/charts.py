"""Charts of the window as inline SVG, drawn server-side: pure functions of values, no script.

One chart (:func:`figure`) is a ``<figure>`` holding an ``<svg>`` and its legend: the measured
lines over time (``advisor/derive/timeseries.py``), its unit on the axis, the targets, limits and
the chosen rule's thresholds as dashed levels, the moment the rule's conditions began to hold
and engine restarts as marks, the spans when vLLM could not be read shaded, and, to the right of
"now", each line's level predicted after the advised change. Everything shown is escaped here
(labels come from outside: model names, rule text); the page adds no styling the chart needs
beyond the ``c0``... colour classes of the legend's swatches.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from advisor.derive.timeseries import Chart, Level
from advisor.outputs.explain import fmt_value

WIDTH, HEIGHT = 640, 230
LEFT, TOP, BOTTOM = 74, 18, 30
AFTER = 84  # the zone right of "now" where the predicted levels stand
RIGHT = AFTER + 10
COLOURS = ("#1f6fb4", "#d9480f", "#2b8a3e", "#7048e8", "#c2255c")
LEVEL_COLOURS = {"target": "#c92a2a", "limit": "#495057", "threshold": "#e67700", "predicted": "#495057"}
X_STEPS = (5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200)


@dataclass(frozen=True)
class Mark:
    """A moment on the time axis: a rule's hold began, an engine restarted."""

    label: str
    t: float
    kind: str  # hold | restart


def e(text: object) -> str:
    return html.escape(str(text), quote=True)


def nice_ticks(top: float, count: int = 4) -> list[float]:
    """0 and round steps (1, 2, 2.5, 5 x 10^k) up to at least ``top``."""
    if not top > 0 or not math.isfinite(top):
        return [0.0, 1.0]
    raw = top / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    n = math.ceil(top / step - 1e-9)
    return [round(i * step, 12) for i in range(n + 1)]


def _ago(s: float, step: float) -> str:
    if s <= 0:
        return "now"
    if step >= 60:
        return f"-{s / 60:g} min"
    return f"-{s:g} s"


def _x_step(span: float) -> float:
    return next((s for s in X_STEPS if span / s <= 6), X_STEPS[-1])


def figure(
    chart: Chart,
    t0: float,
    t1: float,
    *,
    marks: Sequence[Mark] = (),
    outages: Sequence[tuple[float, float]] = (),
    levels: Sequence[Level] = (),
    predicted: Mapping[str, float] | None = None,
    predicted_label: str = "predicted after the change",
) -> str:
    """The chart as HTML: a ``<figure data-chart=KEY>`` with the SVG and a legend. ``levels``
    are drawn with the chart's own; ``predicted`` maps a prediction's metric to its value
    after the change (the lines naming that metric get a level right of "now", in a zone drawn
    on every chart of a page with a prediction, none without)."""
    predicted = dict(predicted or {})
    after = AFTER if predicted else 0
    fmtv = lambda v: fmt_value(chart.signal, v)  # noqa: E731
    all_levels = [*chart.levels, *levels]
    pred = [(i, ln, predicted[ln.predicted]) for i, ln in enumerate(chart.lines) if ln.predicted in predicted]
    values = [v for ln in chart.lines for _, v in ln.points]
    values += [lv.value for lv in all_levels] + [v for _, _, v in pred]
    highest = max([v for v in values if math.isfinite(v)], default=0.0)
    top = highest * 1.05
    if chart.fixed_max is not None and highest <= chart.fixed_max:
        top = chart.fixed_max  # KV use: 0 to 100%
    ticks = nice_ticks(top)
    ymax = ticks[-1]
    pw, ph = WIDTH - LEFT - RIGHT - after + AFTER, HEIGHT - TOP - BOTTOM
    span = max(t1 - t0, 1e-9)

    def x(t: float) -> float:
        return LEFT + (min(max(t, t0), t1) - t0) / span * pw

    def y(v: float) -> float:
        return TOP + ph - (min(max(v, 0.0), ymax) / ymax) * ph

    out = [
        f'<svg class="chart-svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" role="img" '
        f'xmlns="http://www.w3.org/2000/svg" aria-label="{e(chart.title)}">',
        f"<title>{e(chart.title)}</title>",
        f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="#fff" stroke="#ced4da"/>',
    ]
    if after:
        out.append(
            f'<rect class="after-zone" x="{LEFT + pw}" y="{TOP}" width="{AFTER}" height="{ph}" '
            f'fill="#f8f9fa" stroke="#ced4da"><title>{e(predicted_label)}</title></rect>'
        )
    if pred:
        out.append(
            f'<text x="{LEFT + pw + AFTER / 2:.1f}" y="{TOP - 5}" font-size="10" text-anchor="middle" '
            f'fill="#495057">after the change</text>'
        )
    for v in ticks:
        yy = y(v)
        out.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#e9ecef"/>')
        out.append(
            f'<text x="{LEFT - 6}" y="{yy + 3.5:.1f}" font-size="10" text-anchor="end" fill="#495057">'
            f"{e(fmtv(v))}</text>"
        )
    step = _x_step(span)
    k = 0
    while k * step <= span + 1e-9:
        xx = x(t1 - k * step)
        out.append(
            f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{TOP + ph}" y2="{TOP + ph + 4}" stroke="#868e96"/>'
        )
        anchor = "end" if k == 0 else "middle"
        out.append(
            f'<text x="{xx:.1f}" y="{TOP + ph + 16}" font-size="10" text-anchor="{anchor}" fill="#495057">'
            f"{e(_ago(k * step, step))}</text>"
        )
        k += 1
    for a, b in outages:
        if b < t0 or a > t1:
            continue
        xa, xb = x(a), x(b)
        out.append(
            f'<rect class="outage" x="{xa:.1f}" y="{TOP}" width="{max(xb - xa, 2):.1f}" height="{ph}" '
            f'fill="#ffe3e3"><title>vLLM could not be read</title></rect>'
        )
        if xb - xa > 50:
            out.append(
                f'<text x="{(xa + xb) / 2:.1f}" y="{TOP + ph / 2:.1f}" font-size="11" text-anchor="middle" '
                f'fill="#c92a2a">vLLM down</text>'
            )
    for lv in all_levels:
        if lv.value > ymax:
            continue
        yy = y(lv.value)
        colour = LEVEL_COLOURS.get(lv.kind, "#495057")
        text = lv.label if lv.kind == "limit" else f"{lv.label} {fmtv(lv.value)}"  # a limit says its value
        out.append(
            f'<line class="level {e(lv.kind)}" x1="{LEFT}" x2="{LEFT + pw}" y1="{yy:.1f}" y2="{yy:.1f}" '
            f'stroke="{colour}" stroke-dasharray="6 4" stroke-width="1.2"><title>{e(text)}</title></line>'
        )
        out.append(
            f'<text x="{LEFT + 4}" y="{max(yy - 3, TOP + 10):.1f}" font-size="10" fill="{colour}" '
            f'class="halo">{e(text)}</text>'
        )
    for m in marks:
        if not t0 <= m.t <= t1:
            continue
        xx = x(m.t)
        colour = "#e67700" if m.kind == "hold" else "#868e96"
        anchor = "end" if xx > LEFT + pw * 0.7 else "start"
        dx = -3 if anchor == "end" else 3
        out.append(
            f'<line class="mark {e(m.kind)}" x1="{xx:.1f}" x2="{xx:.1f}" y1="{TOP}" y2="{TOP + ph}" '
            f'stroke="{colour}" stroke-width="1.5"><title>{e(m.label)}</title></line>'
        )
        out.append(  # above the plot, clear of the levels' labels
            f'<text x="{xx + dx:.1f}" y="{TOP - 5}" font-size="10" text-anchor="{anchor}" '
            f'fill="{colour}" class="halo">{e(m.label)}</text>'
        )
    gap = 2.5 * _median_gap([t for ln in chart.lines for t, _ in ln.points])
    for i, ln in enumerate(chart.lines):
        if not ln.points:
            continue
        colour = COLOURS[i % len(COLOURS)]
        d, prev = [], None
        for t, v in ln.points:
            cmd = "M" if prev is None or (gap > 0 and t - prev > gap) else "L"
            d.append(f"{cmd}{x(t):.1f},{y(v):.1f}")
            prev = t
        out.append(
            f'<path class="series" data-series="{e(ln.label)}" data-points="{len(ln.points)}" '
            f'd="{" ".join(d)}" fill="none" stroke="{colour}" stroke-width="1.8" stroke-linejoin="round">'
            f"<title>{e(ln.label)}</title></path>"
        )
        t, v = ln.points[-1]
        out.append(
            f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="2.6" fill="{colour}">'
            f"<title>{e(ln.label)}: {e(fmtv(v))} (latest)</title></circle>"
        )
    for i, ln, v in pred:
        colour = COLOURS[i % len(COLOURS)]
        yy = y(v)
        out.append(
            f'<line class="predicted" data-series="{e(ln.label)}" x1="{LEFT + pw + 6}" x2="{LEFT + pw + AFTER - 6}" '
            f'y1="{yy:.1f}" y2="{yy:.1f}" stroke="{colour}" stroke-width="2.2" stroke-dasharray="5 3">'
            f"<title>{e(ln.label)}: {e(fmtv(v))} {e(predicted_label)}</title></line>"
        )
        out.append(
            f'<text x="{LEFT + pw + AFTER / 2:.1f}" y="{max(yy - 4, TOP + 10):.1f}" font-size="10" '
            f'text-anchor="middle" fill="{colour}" class="halo">{e(fmtv(v))}</text>'
        )
    out.append("</svg>")
    legend = []
    for i, ln in enumerate(chart.lines):
        latest = f"latest {fmtv(ln.points[-1][1])}" if ln.points else "no data in the window"
        then = f" · {predicted_label}: {fmtv(predicted[ln.predicted])}" if ln.predicted in predicted else ""
        legend.append(
            f'<li><span class="sw c{i % len(COLOURS)}"></span>{e(ln.label)}: {e(latest)}{e(then)}</li>'
        )
    note = f' <span class="note">({e(chart.note)})</span>' if chart.note else ""
    return (
        f'<figure class="chart" id="chart-{e(chart.key)}" data-chart="{e(chart.key)}">'
        f"<figcaption><b>{e(chart.title)}</b>{note}</figcaption>"
        + "".join(out)
        + f'<ul class="legend">{"".join(legend)}</ul></figure>'
    )


def _median_gap(ts: list[float]) -> float:
    u = sorted(set(ts))
    gaps = sorted(b - a for a, b in pairwise(u))
    return gaps[len(gaps) // 2] if gaps else 0.0


STYLE = (
    ".charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(30em,1fr));gap:1em}"
    ".chart{margin:0;border:1px solid #dee2e6;border-radius:6px;padding:.5em .6em;background:#fff}"
    ".chart figcaption{font-size:.95em;margin-bottom:.2em}.chart .note{color:#868e96;font-size:.85em}"
    ".chart-svg{display:block;font-family:inherit}"
    ".chart-svg .halo{paint-order:stroke;stroke:#fff;stroke-width:3px}"
    ".legend{list-style:none;padding:0;margin:.3em 0 0;font-size:.85em;display:flex;flex-wrap:wrap;gap:.2em 1.2em}"
    ".sw{display:inline-block;width:1.1em;height:.3em;vertical-align:middle;margin-right:.35em;border-radius:2px}"
    + "".join(f".sw.c{i}{{background:{c}}}" for i, c in enumerate(COLOURS))
)
"""The CSS the charts need (the page includes it)."""
