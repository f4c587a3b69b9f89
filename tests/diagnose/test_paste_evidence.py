"""Issue 14: a single pasted page or a log alone is never called healthy or idle without
evidence (tests/fixtures/paste/README.md says where each case comes from)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.core import config as config_mod
from advisor.core import names
from advisor.diagnose.evidence import NO_RATES, pages_from_stats
from advisor.diagnose.ruleset import load_rules
from advisor.drive import inputs
from advisor.sources.logs import parse_lines
from tests.paths import FIXTURES

PAGES = FIXTURES / "paste" / "pages"
H200_START = 1.79599261254e09  # process_start_time_seconds of the H200 0.25 page it derives from


def _page(tmp_path: Path, name: str, mtime: float | None) -> str:
    """A copy of a fixture page whose modification time (the page's only clock) is fixed."""
    dst = tmp_path / name
    shutil.copy(PAGES / name, dst)
    if mtime is not None:
        os.utime(dst, (mtime, mtime))
    return str(dst)


def _diagnose(metric_files: list[str], log_file: str | None = None):  # type: ignore[no-untyped-def]
    cfg = config_mod.load(None)
    _, d = inputs.from_files(metric_files, log_file, cfg, load_rules(None))
    assert d is not None
    return d


def test_a_page_with_a_long_queue_and_preemptions_is_not_healthy(tmp_path: Path) -> None:
    """719 waiting, 11 running, 353 preemptions since start (a real H200 page with those
    gauges edited): one reading has no rates, so no rule can confirm a cause; the verdict
    names what the page shows, and its file's time (here 10 minutes after the process
    started) makes no rate of it (issue 33: it used to, up to the file's mtime)."""
    d = _diagnose([_page(tmp_path, "v1-queue-preempt.prom", H200_START + 600)])
    assert d.status == "inconclusive", d.reason
    assert "719 waiting" in d.reason and "353 preemptions since start" in d.reason
    assert NO_RATES in d.reason
    assert d.context["single_page"]["preemptions_since_start"] == 353
    assert d.signals["preemptions_per_second"] is None


def test_the_files_time_changes_nothing(tmp_path: Path) -> None:
    """The same page with its file's time before the process start, or a day after: the same
    verdict, word for word."""
    early = _diagnose([_page(tmp_path, "v1-queue-preempt.prom", H200_START - 10)])
    (tmp_path / "later").mkdir()
    late = _diagnose([_page(tmp_path / "later", "v1-queue-preempt.prom", H200_START + 86_400)])
    assert early.status == late.status == "inconclusive"
    assert early.reason == late.reason


def test_pages_whose_files_were_written_together_are_taken_an_interval_apart(tmp_path: Path) -> None:
    """Two pages a clone wrote 1 ms apart (issue 33): their file times are not when they were
    scraped, so the pages are taken the default interval (60 s) apart, not 1 ms (which gave
    "window 0 s" and rates over a millisecond)."""
    a = _page(tmp_path, "v1-queue-preempt.prom", 1_800_000_000.000)
    b = tmp_path / "b.prom"
    shutil.copy(a, b)
    os.utime(b, (1_800_000_000.001, 1_800_000_000.001))
    adv, _ = inputs.from_files([a, str(b)], None, config_mod.load(None), load_rules(None))
    snaps = adv.window.snapshots()
    assert snaps[-1].t - snaps[0].t == pytest.approx(60.0)
    # pages really saved a scrape apart keep their times
    os.utime(b, (1_800_000_005.0, 1_800_000_005.0))
    adv, _ = inputs.from_files([a, str(b)], None, config_mod.load(None), load_rules(None))
    snaps = adv.window.snapshots()
    assert snaps[-1].t - snaps[0].t == pytest.approx(5.0)


def test_a_page_without_the_running_gauge_is_not_idle(tmp_path: Path) -> None:
    d = _diagnose([_page(tmp_path, "v1-no-running-gauge.prom", None)])
    assert d.status == "insufficient-data"
    assert not d.reason.startswith("idle")  # not called idle: "cannot tell whether vLLM is idle: ..."
    assert "vllm:num_requests_running" in d.reason


def test_a_quiet_page_without_a_start_time_is_not_called_healthy(tmp_path: Path) -> None:
    """A real idle CPU page with process_start_time_seconds and every _created line cut:
    nothing running or waiting when it was read, which is no verdict (exit 4)."""
    d = _diagnose([_page(tmp_path, "v1-no-start-time.prom", None)])
    assert d.status == "insufficient-data"
    assert "nothing running or waiting" in d.reason and NO_RATES in d.reason


def test_a_v0_page_gets_v0_defaults_and_no_health_verdict(tmp_path: Path) -> None:
    """V0 spellings (vllm:gpu_cache_usage_perc, num_requests_swapped, avg_*_throughput) and
    no version anywhere: V0's defaults (chunked prefill off, prefix caching off), not the
    newest vLLM's; the queue on the page keeps it from "healthy"."""
    d = _diagnose([_page(tmp_path, "v0-0.6-queue.prom", 1.71854e09 + 3600)])
    assert d.status == "inconclusive", d.reason
    assert "412 waiting" in d.reason
    knobs = d.engine["knobs"]
    assert knobs["enable_chunked_prefill"]["value"] is False
    assert knobs["enable_prefix_caching"]["value"] is False
    assert "V0 era inferred" in knobs["enable_chunked_prefill"]["detail"]
    assert d.engine["facts"]["vllm_era"]["value"] == "v0"


def test_a_v1_page_keeps_the_newest_defaults() -> None:
    res = CliRunner().invoke(
        main,
        [
            "inspect",
            "--metrics-file",
            str(FIXTURES / "pages" / "cpu-0.32-baseline-after.prom"),
            "--format",
            "json",
        ],
    )
    assert res.exit_code == 0, res.output
    eng = json.loads(res.stdout)["engine"]
    assert eng["facts"]["vllm_era"]["value"] == "v1"
    assert eng["knobs"]["enable_chunked_prefill"]["value"] is True


def test_explain_on_a_log_alone_diagnoses_from_its_stats_lines() -> None:
    """A real H200 0.25 log: its stats lines show 223 waiting and a full KV cache, and a log
    says nothing about preemptions in V1, so no rule can confirm a cause: inconclusive, with
    what the lines show (never "healthy", never a refusal)."""
    d = _diagnose([], str(FIXTURES / "logs" / "h200-0.25-A_s256.log"))
    assert d.status == "inconclusive", d.reason
    assert "up to 223 waiting" in d.reason
    assert d.context["source"] == "log stats lines" and d.context["stats_lines"] >= 5
    assert d.signals["requests_waiting_avg"] is not None


def test_explain_on_a_quiet_log_alone_and_on_a_log_without_stats(tmp_path: Path) -> None:
    # a real CPU 0.32 run: never more than 16 running, nothing waiting, KV under 5%
    d = _diagnose([], str(FIXTURES / "logs" / "cpu-0.32-baseline.log"))
    assert d.status == "healthy", d.reason
    assert d.context["source"] == "log stats lines"
    empty = tmp_path / "startup-only.log"
    empty.write_text("INFO 11-29 23:25:08 [api_server.py:1] vLLM API server version 0.32.0\n")
    d2 = _diagnose([], str(empty))
    assert d2.status == "insufficient-data" and "no periodic stats lines" in d2.reason
    res = CliRunner().invoke(main, ["explain", "--log-file", str(empty), "--format", "json"])
    assert json.loads(res.stdout)["status"] == "insufficient-data"


def test_log_stats_lines_become_pages_with_v1_preemption_counts() -> None:
    """V1 prints "Preemptions: N" (the interval's) only when N > 0: once the log shows it, a line
    without it counts none; throughputs integrate into token counters."""

    head = "(APIServer pid=1) INFO 11-29 23:26:{s} [loggers.py:335] Engine 000: Avg prompt throughput: 100.0 tokens/s, "
    lines = [
        head.format(s="00") + "Avg generation throughput: 50.0 tokens/s, Running: 8 reqs, Waiting: 0 reqs, "
        "GPU KV cache usage: 50.0%, Prefix cache hit rate: 0.0%",
        head.format(s="10") + "Avg generation throughput: 50.0 tokens/s, Running: 16 reqs, Waiting: 4 reqs, "
        "Preemptions: 3, GPU KV cache usage: 99.0%, Prefix cache hit rate: 0.0%",
        head.format(s="20") + "Avg generation throughput: 50.0 tokens/s, Running: 16 reqs, Waiting: 2 reqs, "
        "GPU KV cache usage: 97.0%, Prefix cache hit rate: 0.0%",
    ]
    pages = pages_from_stats(parse_lines(lines, year=2026))
    assert [p.total(names.NUM_PREEMPTIONS) for p in pages] == [0.0, 3.0, 3.0]
    assert [p.total(names.NUM_WAITING) for p in pages] == [0.0, 4.0, 2.0]
    assert pages[2].total(names.PROMPT_TOKENS) - pages[0].total(names.PROMPT_TOKENS) == 2000.0  # type: ignore[operator]
    assert pages[1].mean(names.KV_CACHE_USAGE) == 0.99
