"""Issue 23, class 7: what users paste, from public bug reports (tests/fixtures/paste/README.md
says where each capture comes from): a ``docker run`` among the commands around it, one whose
continuation lines lost their backslashes, flags passed through an environment variable, a V0
preemption warning without its logger prefix, stats lines hard-wrapped by a terminal, a page
whose one histogram is cut off."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.sources import cmdline as cmdline_src
from advisor.sources.logs import parse_line, parse_lines
from tests.paths import FIXTURES

PASTE = FIXTURES / "paste"
CMDS = PASTE / "commands"


def _inspect(*args: str) -> dict[str, Any]:
    res = CliRunner().invoke(main, ["inspect", *args, "--format", "json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _cmdline(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v["value"] for k, v in d["engine"]["knobs"].items() if v["source"] == "cmdline"}


def test_a_docker_run_among_build_stop_rm_and_logs_reads_the_servers_knobs() -> None:
    """vllm-project/vllm#3710: build, stop, rm, the multi-line run, then logs -f."""
    d = _inspect("--command-file", str(CMDS / "issue3710-build-stop-rm-run-logs.sh"))
    assert _cmdline(d) == {
        "gpu_memory_utilization": 0.7,
        "max_model_len": 8192,
        "tensor_parallel_size": 2,
        "enforce_eager": True,  # a knob since issue 31 (CUDA graphs off)
    }
    assert d["engine"]["model"] == "/workspace/models/Qwen1.5-7B-Chat"
    assert d["command"]["launcher"] == "docker run vllm/vllm-openai:latest"
    left = [w for w in d["command"]["warnings"] if "left out" in w]
    assert len(left) == 1 and "docker stop vllm_d" in left[0] and "docker logs -f vllm_d" in left[0]


def test_a_run_whose_lines_lost_their_backslashes_reads_as_one_command() -> None:
    """nlzy/vllm-gfx906#15: each flag on its own line, no continuation, ``--max_num_seqs=50``."""
    d = _inspect("--command-file", str(CMDS / "gfx906-15-run-without-backslashes.sh"))
    assert _cmdline(d) == {"max_num_seqs": 50, "tensor_parallel_size": 4, "pipeline_parallel_size": 1}
    assert d["engine"]["model"] == "/model"


def test_flags_passed_through_nim_passthrough_args_are_knobs_that_name_the_variable() -> None:
    d = _inspect("--command-file", str(CMDS / "nim-passthrough-env.sh"))
    knobs = d["engine"]["knobs"]
    assert _cmdline(d) == {"gpu_memory_utilization": 0.40, "max_model_len": 32768, "max_num_seqs": 4}
    assert "NIM_PASSTHROUGH_ARGS" in knobs["max_num_seqs"]["detail"]
    assert "nvapi-" not in json.dumps(d)


def test_flags_in_a_wrappers_extra_args_variable_are_knobs() -> None:
    d = _inspect("--command-file", str(CMDS / "vllm-extra-args-env-file.sh"))
    assert _cmdline(d) == {"gpu_memory_utilization": 0.85, "max_num_seqs": 17, "max_num_batched_tokens": 8000}
    assert "VLLM_EXTRA_ARGS" in d["engine"]["knobs"]["max_num_seqs"]["detail"]
    assert "hf_abcdefghij" not in json.dumps(d)


def test_a_live_process_with_a_pass_through_variable_in_its_environment() -> None:
    """What the process probe hands from_cmdline for a NIM container's vLLM (its environment's
    knob variables in front of its argv)."""
    env = {"NIM_PASSTHROUGH_ARGS": "--max-num-seqs 4 --api-key sk-abcdefghijklmnopqrstuv", "HOME": "/root"}
    front = cmdline_src.env_knob_assignments(env)
    assert front == ["NIM_PASSTHROUGH_ARGS=--max-num-seqs 4 --api-key sk-abcdefghijklmnopqrstuv"]
    got = cmdline_src.from_cmdline(
        [*front, "python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]
    )
    assert got["max_num_seqs"].value == 4 and got["max_num_seqs"].source == "cmdline"
    assert got["max_num_seqs"].detail == "NIM_PASSTHROUGH_ARGS: --max-num-seqs"
    assert "sk-abcdef" not in got["cmdline"].value


def test_a_v0_preemption_warning_pasted_without_its_logger_prefix_is_counted() -> None:
    """GAIR-NLP/LIMO#29: the warning as pasted, one leading space and no ``WARNING ... ]``."""
    lines = (PASTE / "logs" / "limo-29-preemption-no-prefix.log").read_text().splitlines()
    events = [e for e in parse_lines(lines) if e.kind == "preemption"]
    assert len(events) == 1 and events[0].fields["cumulative"] == 101
    assert events[0].fields["mode"] == "recompute"
    assert parse_line("    at foo (x.py:3)").kind == "unknown"  # an indented line is still not an event


def _stats(lines: list[str]) -> list[dict[str, Any]]:
    keep = ("running", "waiting", "kv_cache_usage", "prompt_throughput", "generation_throughput")
    return [
        {k: e.fields.get(k) for k in keep}
        for e in parse_lines(lines, year=2026)
        if e.kind == "engine_stats" and "prompt_throughput" in e.fields
    ]


@pytest.mark.parametrize(
    ("wrapped", "original"),
    [
        ("cpu-0.32-preempt_mns16-wrapped80-trimmed.log", "cpu-0.32-preempt_mns16.log"),
        ("v0-formats-wrapped100-trimmed.log", "v0-formats.log"),
    ],
)
def test_stats_lines_wrapped_by_a_terminal_are_counted_whole(wrapped: str, original: str) -> None:
    want = _stats(
        [ln for ln in (FIXTURES / "logs" / original).read_text().splitlines() if not ln.startswith("# ")]
    )
    got = _stats((PASTE / "logs" / wrapped).read_text().splitlines())
    assert want and got == want


def _hard_wrap(lines: list[str], width: int, trim: bool) -> list[str]:
    out = []
    for line in lines:
        for i in range(0, max(len(line), 1), width):
            piece = line[i : i + width]
            out.append(piece.rstrip() if trim else piece)
    return out


@pytest.mark.parametrize("width", [80, 100, 120, 132, 160, 200])
@pytest.mark.parametrize("trim", [False, True], ids=["as-wrapped", "trailing-blanks-trimmed"])
@pytest.mark.parametrize("log", ["cpu-0.32-preempt_mns16.log", "v0-formats.log", "h200-0.25-A_s256.log"])
def test_stats_lines_survive_any_terminal_width(log: str, width: int, trim: bool) -> None:
    lines = [ln for ln in (FIXTURES / "logs" / log).read_text().splitlines() if not ln.startswith("# ")]
    want = _stats(lines)
    assert want
    assert _stats(_hard_wrap(lines, width, trim)) == want


def test_a_page_whose_one_histogram_is_cut_off_is_read_without_it(tmp_path: Path) -> None:
    """vllm-project/vllm#11117: a page pasted from the middle of a histogram to the middle of
    the next one's bucket line. Neither family is one the advisor reads: explain says so (no
    diagnosis from nothing)."""
    page = PASTE / "pages" / "pr11117-lora-cut.prom"
    res = CliRunner().invoke(main, ["explain", "--metrics-file", str(page), "--format", "json"])
    assert res.exit_code == 1, res.output
    assert "none of the families the advisor reads" in res.stderr and "16 samples" in res.stderr
    assert "Traceback" not in res.output
