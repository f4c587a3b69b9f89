"""The daemon's page in a real browser: Debian's chromium, headless (tests/browser.py), loads the
page of a real ``vllm-advisor run --replay`` of a session recorded from a real vLLM server (vLLM
0.25 on an H200: a GPU cannot run here), takes a screenshot (test-artifacts/, its path in the
run's summary) and checks the DOM: the change shown, every chart drawn with its data points,
the targets and the rule's hold on them, no console error, no request to another origin, no
script on the page. A model name that tries to inject a script is shown as text and runs nothing.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from advisor.cli.common import DEMO_SESSION
from tests import browser
from tests.daemon_helpers import Clock, make, run_cycles
from tests.vllm_standin import StandIn, serve, session_pages

CHARTS = ("kv", "requests", "preemptions", "throughput", "ttft", "itl")
HOSTILE = "/models/x\"'><script>alert(1)</script><img src=x onerror=alert(2)>&amp;"
"""A model name that closes an attribute (both quotes), opens a script and an image whose error
handler runs, and carries an entity: shown, it must read exactly as it is."""


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    with browser.chromium() as ctx:
        yield ctx


def _drawn(page: Any) -> dict[str, Any]:
    """What each chart drew: its series (points declared and points in the path), its levels,
    marks and predicted levels."""
    return page.evaluate(
        """() => Object.fromEntries([...document.querySelectorAll('figure.chart')].map(f => [
            f.dataset.chart, {
              series: [...f.querySelectorAll('path.series')].map(p => ({
                name: p.dataset.series, declared: +p.dataset.points,
                drawn: (p.getAttribute('d').match(/[ML]/g) || []).length})),
              levels: [...f.querySelectorAll('line.level')].map(l => l.getAttribute('class')),
              marks: [...f.querySelectorAll('line.mark')].map(l => l.getAttribute('class')),
              predicted: f.querySelectorAll('line.predicted').length,
              outages: f.querySelectorAll('rect.outage').length,
              svg: f.querySelectorAll('svg').length,
            }]))"""
    )


def _checked(loaded: browser.Loaded, origin: str) -> None:
    assert loaded.problems() == []
    assert loaded.elsewhere(origin) == []
    assert loaded.page.evaluate("document.scripts.length") == 0


def test_the_page_of_a_replaying_daemon_shows_the_change_beside_its_charts(
    tmp_path: Path, chromium: Any, record_property: Callable[[str, object], None]
) -> None:
    with browser.replaying(DEMO_SESSION, tmp_path) as base:
        loaded = browser.open_page(chromium, base + "/")
        shot = browser.screenshot(loaded.page, "page-advice.png")
        record_property("screenshot", str(shot))
        page = loaded.page
        _checked(loaded, base)
        assert page.inner_text("#change") == (
            "Change: --kv-cache-memory-bytes 6442450944 -> 53687091200 (6 GiB -> 50 GiB) "
            "(current value from cmdline)"
        )
        assert "kv-preemption-capacity" in page.inner_text("#status")
        assert page.get_attribute('meta[http-equiv="refresh"]', "content") == "5"  # the scrape interval
        drawn = _drawn(page)
        assert sorted(drawn) == sorted(CHARTS)
        for key, chart in drawn.items():
            assert chart["svg"] == 1, key
            assert chart["series"], key
            for s in chart["series"]:
                # the session's 39 pages: gauges on every page, rates and quantiles from the second
                assert 20 <= s["declared"] == s["drawn"], (key, s)
            assert any("hold" in m for m in chart["marks"]), key  # when the rule began to hold
        assert any("target" in lv for lv in drawn["ttft"]["levels"])
        assert any("target" in lv for lv in drawn["itl"]["levels"])
        assert any("limit" in lv for lv in drawn["requests"]["levels"])  # max_num_seqs
        assert any("threshold" in lv for lv in drawn["kv"]["levels"])  # the rule's KV threshold
        for key in ("requests", "preemptions", "throughput", "ttft", "itl"):
            assert drawn[key]["predicted"] >= 1, key  # the level predicted after the change
        # the rest of what explain says: evidence, prediction, what to verify and roll back
        text = page.inner_text("body")
        for words in (
            "preemptions_per_second",
            "Predicted by the scheduler simulator (same load; binding now",
            "Left standing after the change:",
            "What should move",
            "Roll back",
            "Desired replicas:",
            "Context: model /models/llama-8b-shaped",
        ):
            assert words in text, words

        history = browser.open_page(chromium, base + "/history")
        record_property("screenshot", str(browser.screenshot(history.page, "history.png")))
        _checked(history, base)
        rows = history.page.inner_text("table#advice")
        assert "--kv-cache-memory-bytes 6442450944 -> 53687091200" in rows and "still advised" in rows


def _hostile_copy(src: Path, dst: Path, old: str, new: str) -> None:
    """The session with its model name replaced everywhere it is written: the pages' labels
    (escaped as Prometheus text escapes a label value), the log, the launch command and the
    engine facts (as JSON)."""
    shutil.copytree(src, dst)
    label = new.replace("\\", "\\\\").replace('"', '\\"')
    for page in (dst / "metrics").iterdir():
        text = gzip.decompress(page.read_bytes()).decode()
        assert f'"{old}"' in text
        page.write_bytes(gzip.compress(text.replace(f'"{old}"', f'"{label}"').encode()))
    log = dst / "vllm.log"
    log.write_text(log.read_text().replace(old, new))
    for name in ("meta.json", "engine.json"):
        f = dst / name
        f.write_text(json.dumps(_replace(json.loads(f.read_text()), old, new)))


def _replace(x: Any, old: str, new: str) -> Any:
    if isinstance(x, str):
        return x.replace(old, new)
    if isinstance(x, list):
        return [_replace(v, old, new) for v in x]
    if isinstance(x, dict):
        return {k: _replace(v, old, new) for k, v in x.items()}
    return x


def test_a_model_name_with_a_script_in_it_is_shown_as_text_and_runs_nothing(
    tmp_path: Path, chromium: Any, record_property: Callable[[str, object], None]
) -> None:
    session = tmp_path / "hostile-session"
    _hostile_copy(DEMO_SESSION, session, "/models/llama-8b-shaped", HOSTILE)
    with browser.replaying(session, tmp_path / "run") as base:
        loaded = browser.open_page(chromium, base + "/")
        record_property("screenshot", str(browser.screenshot(loaded.page, "page-injection.png")))
        page = loaded.page
        assert loaded.dialogs == []  # alert() never ran
        _checked(loaded, base)  # no console error (a CSP violation would be one), no request, no script
        assert page.evaluate("document.images.length") == 0  # the <img> was not made either
        assert HOSTILE in page.inner_text("#banner")  # the model name, as it is
        assert f"Context: model {HOSTILE}" in page.inner_text("#context")
        assert "Change: --kv-cache-memory-bytes" in page.inner_text("#change")  # still diagnosed
        raw = page.content()
        assert "<script>" not in raw and "&lt;script&gt;alert(1)&lt;/script&gt;" in raw


def test_the_page_when_vllm_goes_down_says_so_and_shades_the_outage(
    tmp_path: Path, chromium: Any, record_property: Callable[[str, object], None]
) -> None:
    """The daemon in this process scrapes a stand-in serving the pages recorded from the real H200
    server (a real server cannot be stopped on cue here), then the stand-in goes away."""
    clock = Clock()
    standin = StandIn(session_pages(DEMO_SESSION))
    with serve(standin) as url:
        d = make(url, tmp_path, clock)
        run_cycles(d, clock, len(standin.pages) - 4)
    run_cycles(d, clock, 8)  # vLLM is gone: 16 s of refused scrapes
    host, port = d.serve()
    try:
        base = f"http://{host}:{port}"
        loaded = browser.open_page(chromium, base + "/")
        record_property("screenshot", str(browser.screenshot(loaded.page, "page-down.png")))
        page = loaded.page
        _checked(loaded, base)
        banner = page.inner_text("#banner")
        assert "INSUFFICIENT DATA" in banner and "vLLM is DOWN" in banner
        assert "vLLM cannot be read" in page.inner_text("#status")
        assert page.query_selector("#change") is None  # advice withdrawn
        drawn = _drawn(page)
        assert all(c["outages"] == 1 for c in drawn.values()), drawn
        history = browser.open_page(chromium, base + "/history")
        rows = history.page.inner_text("table#advice")
        assert re.search(r"insufficient-data: vLLM cannot be read", rows), rows
    finally:
        d.stop()
