"""Issue 14: log shapes users paste (tests/fixtures/paste/README.md says where each comes from)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from advisor.cli import main
from advisor.core.model import LogEvent
from advisor.sources import engine
from advisor.sources import logfacts as logfacts_src
from advisor.sources.logs import parse_lines
from advisor.sources.logwrap import LineJoiner
from tests.paths import FIXTURES

PASTE = FIXTURES / "paste" / "logs"


def _events(path: Path, drop_comments: bool = False) -> list[LogEvent]:
    lines = path.read_text(encoding="utf-8").splitlines()
    if drop_comments:
        lines = [ln for ln in lines if not ln.startswith("# ")]
    return list(parse_lines(lines, year=2026))


def _known(events: list[LogEvent]) -> list[tuple[str, Any, Any]]:
    return [(e.kind, e.fields, e.t) for e in events if e.kind != "unknown"]


def _shape(marker: str) -> LogEvent:
    """The event of the record in line-shapes.log that contains ``marker``."""
    for e in _events(PASTE / "line-shapes.log", drop_comments=True):
        if marker in e.line:
            return e
    raise AssertionError(f"no record with {marker!r}")


def test_logs_hard_wrapped_at_132_and_140_columns_read_as_the_originals() -> None:
    """Real logs cut every 132 (CPU 0.32) and 140 (H200 0.25) characters, mid-token and inside
    the non-default args dict's keys, as a terminal does: the same stats, facts and errors."""
    for original, wrapped in (
        ("cpu-0.32-preempt_mns16.log", "cpu-0.32-preempt_mns16-wrapped132.log"),
        ("h200-0.25-C_b2048.log", "h200-0.25-C_b2048-wrapped140.log"),
    ):
        a = _known(_events(FIXTURES / "logs" / original))
        b = _known(_events(PASTE / wrapped))
        assert a == b, wrapped
        stats = [f for k, f, _ in b if k == "engine_stats"]
        assert stats and all("kv_cache_usage" in f and "waiting" in f for f in stats)
        facts = logfacts_src.from_log_events(_events(PASTE / wrapped))
        assert (
            facts["max_num_seqs"].value
            == logfacts_src.from_log_events(_events(FIXTURES / "logs" / original))["max_num_seqs"].value
        )


def test_a_wrapped_stats_line_split_before_a_capital_is_rejoined() -> None:
    line = (
        "(APIServer pid=1858) INFO 11-29 22:52:38 [loggers.py:273] Engine 000: Avg prompt throughput: 0.0 "
        "tokens/s, Avg generation throughput: 5106.4 tokens/s, Running: 33 reqs, Waiting: 223 reqs, "
        "GPU KV cache usage: 99.2%, Prefix cache hit rate: 0.0%"
    )
    cut = line.index("PU KV")  # "... Waiting: 223 reqs, G" / "PU KV cache usage: ..."
    for pieces in (
        [line[:cut], line[cut:]],
        [line[:133], line[133:]],
        [line[:120], line[120:240], line[240:]],
    ):
        (ev,) = [e for e in parse_lines(pieces) if e.kind != "unknown"]
        assert ev.fields["waiting"] == 223 and ev.fields["kv_cache_usage"] == 0.992, pieces


def test_a_long_line_followed_by_a_library_print_is_not_joined() -> None:
    """A real CPU 0.32 pair: a long INFO line, then Triton's own unprefixed print."""
    lines = [
        "(APIServer pid=30081) INFO 11-29 23:24:08 [compilation.py:317] Enabled custom fusions: norm_quant, "
        "act_quant",
        "Triton is installed, but doesn't include CPU backend. Disabling Triton.",
    ]
    j = LineJoiner()
    out = [x for ln in lines for x in j.feed(ln)] + j.flush()
    assert out == lines


def test_two_records_glued_by_a_dollar_mark_are_split() -> None:
    events = [
        e for e in _events(PASTE / "line-shapes.log", drop_comments=True) if e.fields.get("format") == "v1"
    ]
    assert [e.fields["generation_throughput"] for e in events] == [194.4, 198.4]
    assert not events[-1].line.endswith("$")


def test_a_dev_build_is_version_unknown_not_vllm_0_1() -> None:
    ev = _shape("0.1.dev1+g5c8f2e3")
    info = engine.resolve(events=[ev])
    assert info.get("vllm_version") == "0.1.dev1+g5c8f2e3"  # what the log said, kept
    detail = info.values["max_num_seqs"].detail
    assert "version unknown" in detail and "V0" not in detail
    assert info.get("enable_chunked_prefill") is True  # not V0's default (off)


def test_memory_reports_of_v0_6_v0_7_and_ascend() -> None:
    e = _shape("initial_memory_usage=15.52GiB peak")
    facts = dict(
        [(e.fields["fact"], e.fields["value"])] + [(x["fact"], x["value"]) for x in e.fields["also"]]
    )
    assert facts == {
        "gpu_memory_gib": 79.15,
        "available_kv_cache_memory_gib": 54.85,
        "gpu_memory_utilization": 0.9,
    }
    e = _shape("duration=2.28 seconds")
    assert (
        e.fields["value"] == 44.34
        and {"fact": "available_kv_cache_memory_gib", "value": 24.29} in e.fields["also"]
    )
    assert _shape("x gpu_memory_utilization (0.90)").fields["value"] == 79.1
    assert _shape("reserved for KV Cache is").fields == {
        "fact": "available_kv_cache_memory_gib",
        "value": 54.81,
    }
    e = _shape("Available memory: 43599749939")
    assert e.fields["value"] == round(43599749939 / 2**30, 3)
    assert e.fields["also"] == [{"fact": "gpu_memory_gib", "value": round(65452113920 / 2**30, 3)}]


def test_blocks_without_the_hash_and_zero_blocks() -> None:
    e = _shape("GPU blocks: 29053")
    assert (e.kind, e.fields["fact"], e.fields["value"]) == ("startup", "num_gpu_blocks", 29053)
    assert e.fields["also"] == [{"fact": "num_cpu_blocks", "value": 2048}]
    e = _shape("num_gpu_blocks is: 29053")
    assert (e.kind, e.fields["fact"], e.fields["value"]) == ("startup", "num_gpu_blocks", 29053)
    e = _shape("# GPU blocks: 0")
    assert e.kind == "error" and e.fields["error"] == "no_kv_blocks"


def test_spec_decoding_metrics_old_and_new() -> None:
    new = _shape("Avg Draft acceptance rate: 57.2%")
    assert new.fields["format"] == "spec_decode"
    assert (new.fields["acceptance_rate"], new.fields["mean_acceptance_length"]) == (0.572, 2.71)
    assert (new.fields["accepted_tokens"], new.fields["drafted_tokens"]) == (412, 720)
    v1_old = _shape("Draft acceptance rate: 62.3%")
    assert (v1_old.fields["acceptance_rate"], v1_old.fields["mean_acceptance_length"]) == (0.623, 2.87)
    v0 = _shape("Speculative metrics:")
    assert (v0.fields["acceptance_rate"], v0.fields["drafted_tokens"]) == (0.651, 36)


def test_an_engine_core_exception_is_one_error_and_its_raise_line_none() -> None:
    errors = [e for e in _events(PASTE / "line-shapes.log", drop_comments=True) if e.kind == "error"]
    kinds = [e.fields["error"] for e in errors]
    assert kinds == ["no_kv_blocks", "engine_core_exception", "no_kv_memory"]
    assert not any("raise ValueError(" in e.line for e in errors)


def test_inspect_reads_the_shapes_and_names_the_failures() -> None:
    res = CliRunner().invoke(
        main, ["inspect", "--log-file", str(PASTE / "line-shapes.log"), "--format", "json"]
    )
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["logs"]["counts"]["error"] == 3
    assert {e["error"] for e in d["logs"]["errors"]} == {
        "no_kv_blocks",
        "engine_core_exception",
        "no_kv_memory",
    }
    # the last memory report wins (Ascend's, in bytes); the V0.7 prose gave the utilisation
    assert d["engine"]["facts"]["gpu_memory_gib"]["value"] == round(65452113920 / 2**30, 3)
    assert d["engine"]["knobs"]["gpu_memory_utilization"]["source"] == "log"
    assert d["engine"]["knobs"]["gpu_memory_utilization"]["value"] == 0.9


def test_a_startup_fact_cut_before_its_number_is_rejoined() -> None:
    pieces = [
        "2026-06-03T09:15:27.123456789Z (EngineCore_DP0 pid=2) INFO 06-03 09:15:27 [worker.py:251] num_gpu_blocks is",
        ": 29053",
    ]
    (ev,) = list(parse_lines(pieces))
    assert (ev.kind, ev.fields["fact"], ev.fields["value"]) == ("startup", "num_gpu_blocks", 29053)
