"""`vllm-advisor inspect`: what the sources learned, on committed sessions, captures and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.cli.common import DEMO_SESSION
from tests.paths import FIXTURES

KINDS = ("engine_stats", "preemption", "startup", "error", "unknown")


def inspect_json(*args: str) -> dict:  # type: ignore[type-arg]
    res = CliRunner().invoke(main, ["inspect", *args, "--format", "json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.mark.parametrize(
    ("session", "version", "knob", "value", "source"),
    [
        (FIXTURES / "sessions" / "cpu-preempt-binds", "0.32.0", "max_num_seqs", 10, "cmdline"),
        (FIXTURES / "sessions" / "cpu-healthy", "0.32.0", "max_num_seqs", 128, "default"),
        (FIXTURES / "sessions" / "h200-C_b2048", "0.25.0", "max_num_batched_tokens", 2048, "cmdline"),
        (DEMO_SESSION, "0.25.0", "kv_cache_memory_bytes", 6442450944, "cmdline"),
    ],
)
def test_inspect_sessions_reports_knobs_with_sources_and_log_counts(
    session: Path, version: str, knob: str, value: int, source: str
) -> None:
    d = inspect_json("--session", str(session))
    assert d["engine"]["vllm_version"] == version
    assert d["engine"]["knobs"][knob]["value"] == value
    assert d["engine"]["knobs"][knob]["source"] == source
    for kind in KINDS:
        assert isinstance(d["logs"]["counts"][kind], int)
    assert d["logs"]["counts"]["engine_stats"] > 0 and d["logs"]["counts"]["startup"] > 0
    assert "vllm:num_preemptions" in d["metrics"]["families"]
    assert d["metrics"]["engines"] == ["0"] and len(d["metrics"]["model_names"]) == 1
    # block size comes from the page's cache_config_info
    assert d["engine"]["knobs"]["block_size"]["source"] == "metrics"


def test_inspect_files_without_a_session() -> None:
    d = inspect_json(
        "--metrics-file",
        str(FIXTURES / "pages" / "cpu-0.32-preempt_mns16-after.prom"),
        "--log-file",
        str(FIXTURES / "logs" / "cpu-0.32-preempt_mns16.log"),
    )
    assert d["engine"]["knobs"]["max_num_seqs"] == {
        "value": 16,
        "source": "log",
        "detail": d["engine"]["knobs"]["max_num_seqs"]["detail"],
    }
    assert d["engine"]["facts"]["kv_cache_tokens"]["value"] == 3072


@pytest.mark.parametrize(
    ("content", "flag", "message"),
    [
        (b"<html><body>502</body></html>\n", "--metrics-file", "not_prometheus"),
        (b"\x00\x01\x02\xff" * 1000 + b"\n", "--metrics-file", "not_prometheus"),
    ],
)
def test_bad_files_get_a_clear_error(tmp_path: Path, content: bytes, flag: str, message: str) -> None:
    p = tmp_path / "bad"
    p.write_bytes(content)
    res = CliRunner().invoke(main, ["inspect", flag, str(p)])
    assert res.exit_code == 1
    assert message in res.output and str(p) in res.output and "Traceback" not in res.output


def test_a_cut_or_hand_edited_page_is_read_with_one_warning_line_each(tmp_path: Path) -> None:
    """Issue 14: what is on the page is read; each skipped line is named (file:line)."""
    p = tmp_path / "pasted.prom"
    p.write_bytes(
        b'vllm:num_requests_running{engine="0"} 1\n'
        b'vllm:num_requests_waiting{...,reason="capacity"} 3\n'
        b'vllm:kv_cache_usage_perc{engine="0"} 0.5\n'
        b"vllm:num_requests_waiting{engine="
    )
    res = CliRunner().invoke(main, ["inspect", "--metrics-file", str(p)])
    assert res.exit_code == 0, res.output
    assert f"warning: {p}:2: vllm:num_requests_waiting: unreadable sample line" in res.output
    assert f"warning: {p}:4: the page does not end with a newline" in res.output
    assert "Traceback" not in res.output
    d = inspect_json("--metrics-file", str(p))
    assert "vllm:num_requests_running" in d["metrics"]["families"] and len(d["metrics"]["warnings"]) == 2
    res = CliRunner().invoke(main, ["explain", "--metrics-file", str(p)])
    # one page with no process start: no time base, so no verdict (exit 4), but the warnings
    assert "Traceback" not in res.output and res.exit_code == 4, res.output
    assert "INSUFFICIENT-DATA" in res.output
    assert f"warning: {p}:2: vllm:num_requests_waiting: unreadable sample line" in res.output


def test_binary_and_huge_log_lines_are_counted_not_fatal(tmp_path: Path) -> None:
    p = tmp_path / "vllm.log"
    p.write_bytes(
        b"\x00\xff\xfe" * 100
        + b"\n"
        + b"x" * 2_000_000
        + b"\n"
        + (FIXTURES / "logs" / "cpu-0.32-baseline.log").read_bytes()
    )
    d = inspect_json("--log-file", str(p))
    assert d["logs"]["counts"]["unknown"] >= 2 and d["logs"]["counts"]["engine_stats"] > 0


def test_missing_inputs_and_a_down_server() -> None:
    res = CliRunner().invoke(main, ["inspect", "--log-file", "/nonexistent/vllm.log"])
    assert res.exit_code == 1 and "cannot read" in res.output
    res = CliRunner().invoke(main, ["inspect", "--url", "http://127.0.0.1:9"])
    assert res.exit_code == 1 and "refused" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(main, ["inspect"])
    assert res.exit_code == 2
