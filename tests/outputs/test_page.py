"""The daemon's pages as HTML (advisor/outputs/page.py, view.py, charts.py), from diagnoses of
sessions recorded from real vLLM servers: the page says what ``explain`` says, word for word
(one view of the diagnosis, rendered three ways), every tag is closed, everything shown is
escaped, and nothing on it runs or loads from elsewhere. The browser's view of the same pages is
tests/outputs/test_page_browser.py."""

from __future__ import annotations

import re
from dataclasses import replace
from html.parser import HTMLParser

import pytest

from advisor.cli.common import DEMO_SESSION
from advisor.core.config import Config
from advisor.derive import timeseries
from advisor.derive.timeseries import Chart, Level, Line
from advisor.diagnose.advise import Diagnosis
from advisor.diagnose.ruleset import load_rules
from advisor.drive.inputs import from_session
from advisor.drive.runner import Advisor, export_state
from advisor.outputs import charts, explain, exporter, page, view
from advisor.outputs.state import AdviceSpan, ExportState, FleetState, History, Member, Server
from tests.paths import FIXTURES

SESSIONS = FIXTURES / "sessions"
RULES = tuple(load_rules())
CASES = {
    "h200-A_s256": DEMO_SESSION,  # advice, a prediction, a breach left standing, replicas
    "cpu-long-binds": SESSIONS / "cpu-long-binds",  # advice, changes also considered, other findings
    "cpu-plugin-mixed": SESSIONS / "cpu-plugin-mixed",  # latency by request length (the plugin)
    "cpu-healthy": SESSIONS / "cpu-healthy",  # healthy
}
VOID = {"meta", "link", "br", "img", "input", "hr", "rect", "line", "circle", "path"}


class _Page(HTMLParser):
    """Balanced tags, the tags used, the text as a browser would show it."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: set[str] = set()
        self.attrs: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self._style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs.append((tag, dict(attrs)))
        self._style = tag in ("style", "title") and self.stack[-1:] != ["svg"]
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        assert self.stack and self.stack[-1] == tag, f"unbalanced </{tag}> in {self.stack[-4:]}"
        self.stack.pop()
        self._style = False

    def handle_data(self, data: str) -> None:
        if not self._style:
            self.text.append(data)


def parsed(text: str) -> _Page:
    p = _Page()
    p.feed(text)
    p.close()
    assert p.stack == [], f"unclosed {p.stack}"
    return p


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def replays() -> dict[str, tuple[Advisor, Diagnosis]]:
    out = {}
    for name, path in CASES.items():
        adv, d = from_session(path, Config(), list(RULES))
        assert d is not None
        out[name] = (adv, d)
    return out


def _parts(v: view.DiagnosisView) -> list[str]:
    """Every sentence and cell of a view."""
    parts = [v.context, *v.decided, *v.leaves, *v.considered, *v.findings, *(s.body for s in v.sections)]
    parts += [x for x in (v.change, v.summary, v.note, v.experiment) if x]
    for t in (v.evidence, v.predicted, v.latency):
        if t is not None:
            parts += [t.title, *(c for r in t.rows for c in r if c not in ("", "-"))]
    return parts


@pytest.mark.parametrize("name", list(CASES))
def test_the_page_says_what_explain_says(name: str, replays: dict[str, tuple[Advisor, Diagnosis]]) -> None:
    adv, d = replays[name]
    v = view.view(d)
    text = flat(explain.render_text(d, width=100_000))
    shown = flat("".join(parsed(page.server_page(export_state(adv, RULES, d), None)).text))
    parts = _parts(v)
    assert len(parts) >= (3 if d.recommendation is not None else 1)
    for part in parts:
        assert flat(part) in text, f"explain does not say: {part}"
        assert flat(part) in shown, f"the page does not say: {part}"
    if d.recommendation is not None:
        assert v.predicted is not None or not d.recommendation.predicted
        assert v.sections[3].body == explain.verify_text(d.recommendation)
    else:
        assert f"{d.status.upper()}: {d.reason}" in shown


def test_each_part_of_the_advice_is_on_the_page(replays: dict[str, tuple[Advisor, Diagnosis]]) -> None:
    adv, d = replays["cpu-long-binds"]
    rec = d.recommendation
    assert rec is not None and rec.considered and rec.leaves
    w = timeseries.charts(adv.window, adv.engine, Config().targets)
    st = export_state(adv, RULES, d)
    body = page.server_page(st, w, refresh_s=5)
    p = parsed(body)
    shown = flat("".join(p.text))
    assert f"Change: {rec.change}" in shown
    assert "Also considered:" in shown and "Other findings:" in shown
    assert "Predicted by the scheduler simulator (same load; binding now" in shown
    # which model decided, and the closed form's own numbers beside the simulator's (as explain)
    assert "Decided by the scheduler simulator: goodput counted per simulated request" in shown
    assert (
        "The closed form (which takes the load for a closed loop and goodput from p50 and p95): output"
        in shown
    )
    assert '<meta http-equiv="refresh" content="5">' in body
    assert [a.get("data-chart") for t, a in p.attrs if t == "figure"] == [
        "kv",
        "requests",
        "preemptions",
        "throughput",
        "ttft",
        "itl",
    ]
    assert "script" not in p.tags and "iframe" not in p.tags and "img" not in p.tags
    hrefs = [a.get("href") or "" for _, a in p.attrs if "href" in a]
    assert all(h.startswith("/") or h == "data:," for h in hrefs), hrefs  # nothing from elsewhere
    # the rule's hold is marked where it began, on every chart
    since = next(f["since"] for f in d.findings if f["rule"] == rec.rule)
    assert f"{rec.rule} holds since {page.when(since)[11:19]}" in shown
    assert [a.get("class") for t, a in p.attrs if t == "line"].count("mark hold") == 6


def test_refresh_follows_the_interval_and_never_goes_below_a_second() -> None:
    st = ExportState(None, True, RULES)
    assert '<meta http-equiv="refresh" content="1">' in page.server_page(st, None, refresh_s=0.2)
    assert '<meta http-equiv="refresh" content="15">' in page.server_page(st, None, refresh_s=15)
    assert "refresh" not in page.server_page(st, None)
    assert "No diagnosis yet" in page.server_page(st, None)


HOSTILE = "\"'><script>alert(1)</script><img src=x onerror=alert(2)>&amp;"


def test_everything_shown_is_escaped(replays: dict[str, tuple[Advisor, Diagnosis]]) -> None:
    """Model names, label values, log text and rule text come from outside: a diagnosis whose
    every string field carries markup, and a chart whose labels do, render as text."""
    _, d = replays["h200-A_s256"]
    rec = d.recommendation
    assert rec is not None
    bad_rec = replace(
        rec,
        rule=HOSTILE,
        summary=HOSTILE,
        change=HOSTILE,
        note=HOSTILE,
        what=HOSTILE,
        why=HOSTILE,
        expect=HOSTILE,
        rollback=HOSTILE,
        verify=(HOSTILE,),
        leaves=(HOSTILE,),
        considered=({"rule": HOSTILE, "knob": HOSTILE, "why_not": HOSTILE},),
    )
    bad = replace(
        d,
        reason=HOSTILE,
        recommendation=bad_rec,
        context={**d.context, "model": HOSTILE, "instance": HOSTILE},
        findings=(*d.findings, {"rule": HOSTILE, "state": "firing", "since": d.at - 5, "checks": []}),
    )
    chart = Chart(
        HOSTILE,
        HOSTILE,
        "ttft_seconds_p95",
        (Line(HOSTILE, ((0.0, 1.0), (1.0, 2.0)), HOSTILE, "ttft_seconds_p95"),),
        (Level(HOSTILE, 1.5, HOSTILE),),
        note=HOSTILE,
    )
    w = timeseries.Charts(0.0, 1.0, (chart,))
    st = ExportState(bad, True, RULES)
    hist = History(
        (
            {
                "id": 1,
                "knob": HOSTILE,
                "old_value": HOSTILE,
                "new_value": 1,
                "verdict": HOSTILE,
                "reasons": [HOSTILE],
            },
        ),
        (AdviceSpan(0.0, HOSTILE, HOSTILE, HOSTILE, "up", HOSTILE, HOSTILE, end_reason=HOSTILE),),
        HOSTILE,
        HOSTILE,
        HOSTILE,
    )
    fleet = FleetState((Member(Server(HOSTILE, HOSTILE, (HOSTILE,)), st),), False, HOSTILE)
    for body in (
        page.server_page(st, w, links=page.Links.for_instance(HOSTILE), title=HOSTILE),
        page.history_page(hist, links=page.Links.for_instance(HOSTILE)),
        page.fleet_page(fleet),
    ):
        p = parsed(body)
        assert "script" not in p.tags and "img" not in p.tags, p.tags
        assert "<script>" not in body and "onerror=" not in body.replace("onerror=alert(2)&gt;", "")
        assert HOSTILE in " ".join(p.text)  # shown as it is
        for tag, attrs in p.attrs:
            assert not any(k.startswith("on") for k in attrs), (tag, attrs)


def test_the_fleet_page_links_each_server_to_its_own_page(
    replays: dict[str, tuple[Advisor, Diagnosis]],
) -> None:
    members = tuple(
        Member(Server(f"10.0.0.{i}:8000/x y", "vllm", ("tiny-llama",)), export_state(adv, RULES, d))
        for i, (adv, d) in enumerate(replays.values())
    )
    body = page.fleet_page(FleetState(members, True), refresh_s=5)
    p = parsed(body)
    rows = [a.get("href") for t, a in p.attrs if t == "a" and (a.get("href") or "").startswith("/server")]
    assert rows == [f"/server?instance=10.0.0.{i}%3A8000%2Fx%20y" for i in (0, 1, 2, 3)]  # worst first
    shown = flat(" ".join(p.text))
    assert "4 servers, 2 with advice, worst first." in shown
    assert shown.count("ADVICE") == 2 and "HEALTHY" in shown


def test_the_history_page_lists_experiments_and_advice() -> None:
    row = {
        "id": 7,
        "started_at": 1_800_000_000.0,
        "ended_at": 1_800_000_300.0,
        "knob": "max_num_seqs",
        "flag": "--max-num-seqs",
        "old_value": 6,
        "new_value": 4,
        "verdict": "keep",
        "reasons": ["Preemptions fell."],
        "prediction": {
            "predicted": {"output_tokens_per_second": 100.0},
            "measured_after": {"output_tokens_per_second": 90.0},
            "error": {"output_tokens_per_second": 0.11},
        },
    }
    span = AdviceSpan(
        1_800_000_000.0,
        "kv-preemption-seqs-bind",
        "warning",
        "max_num_seqs",
        "decrease",
        6,
        "--max-num-seqs 6 -> 4",
        ended=1_800_000_120.0,
        end_reason="insufficient-data: experiment running",
        predicted={"output_tokens_per_second": [80.0, 100.0]},
    )
    body = page.history_page(History((row,), (span,), "ledger here", "advice here"))
    shown = flat(" ".join(parsed(body).text))
    assert "--max-num-seqs 6 -> 4" in shown and "keep" in shown and "Preemptions fell." in shown
    assert "(+11%)" in shown  # the prediction's error
    assert "2 min" in shown and "insufficient-data: experiment running" in shown
    assert "output tokens/s 80 tok/s -> 100 tok/s" in shown
    assert "ledger here" in shown and "advice here" in shown
    empty = flat(" ".join(parsed(page.history_page(History())).text))
    assert "No experiment judged yet" in empty and "No advice given yet." in empty


# ---------------------------------------------------------------------- the charts alone
def test_nice_ticks() -> None:
    assert charts.nice_ticks(1.0) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert charts.nice_ticks(38.0) == [0.0, 10.0, 20.0, 30.0, 40.0]
    assert charts.nice_ticks(4347.0) == [0.0, 2000.0, 4000.0, 6000.0]
    assert charts.nice_ticks(0.0) == [0.0, 1.0]
    assert charts.nice_ticks(float("nan")) == [0.0, 1.0]


def _svg(fig: str) -> _Page:
    return parsed(fig)


def test_a_chart_draws_every_point_and_breaks_its_line_at_gaps() -> None:
    pts = tuple((float(t), float(t % 7)) for t in (*range(0, 40, 2), *range(60, 80, 2)))
    chart = Chart(
        "x", "X", "requests_running_avg", (Line("a", pts, "requests_running_avg"), Line("b", (), "s"))
    )
    fig = charts.figure(chart, 0.0, 80.0)
    p = _svg(fig)
    (path,) = [a for t, a in p.attrs if t == "path"]
    assert path["data-points"] == str(len(pts))
    d = path["d"] or ""
    assert len(re.findall(r"[ML]", d)) == len(pts) and d.count("M") == 2  # one gap of 20 s
    assert "b: no data in the window" in " ".join(p.text)  # unknown is said, never drawn as zero
    assert "after the change" not in fig  # no prediction, no zone for one


def test_a_chart_marks_levels_holds_outages_and_the_predicted_level() -> None:
    chart = Chart(
        "ttft",
        "Time to first token",
        "ttft_seconds_p95",
        (Line("TTFT p95", ((0.0, 1.0), (50.0, 3.0), (100.0, 4.0)), "ttft_seconds_p95", "ttft_seconds_p95"),),
        (Level("TTFT p95 target", 2.0, "target"),),
    )
    fig = charts.figure(
        chart,
        0.0,
        100.0,
        marks=[charts.Mark("rule holds since 12:00:00", 50.0, "hold")],
        outages=[(60.0, 70.0)],
        levels=[Level("rule: >", 2.5, "threshold")],
        predicted={"ttft_seconds_p95": 1.5},
    )
    p = _svg(fig)
    shown = " ".join(p.text)
    assert "TTFT p95 target 2.0 s" in shown and "rule: > 2.5 s" in shown
    assert "rule holds since 12:00:00" in shown and "vLLM could not be read" in shown
    assert "TTFT p95: latest 4.0 s · predicted after the change: 1.5 s" in shown
    classes = [a.get("class") for t, a in p.attrs if t in ("line", "rect")]
    assert {"level target", "level threshold", "mark hold", "predicted", "outage"} <= set(classes)
    # the y axis reaches past the highest of what is drawn (4 s), its ticks with their unit; the
    # time axis counts back from now in round steps
    assert "6.0 s" in shown and "0.0 ms" in shown and "now" in shown and "-90 s" in shown


def test_a_chart_that_cannot_be_drawn_leaves_the_page_without_it() -> None:
    """The charts are asked for when a page is (the drive layer's callable), not every cycle;
    one that fails is logged and the page is served without them."""
    calls: list[int] = []

    def broken() -> timeseries.Charts:
        calls.append(1)
        raise RuntimeError("boom")

    assert exporter.charts_or_none(broken) is None and calls == [1]
    assert exporter.charts_or_none(None) is None
    # a page whose charts were asked for and did not come says so; one with no source of charts
    # (nothing to draw from) has no such line
    st = ExportState(None, True, RULES)
    assert 'id="charts-late"' in page.server_page(st, None, charts_expected=True)
    assert 'id="charts-late"' not in page.server_page(st, None)
