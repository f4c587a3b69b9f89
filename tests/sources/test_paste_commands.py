"""Issue 14: ``--command-file``, the launch command as users paste it
(tests/fixtures/paste/README.md says where each comes from)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.cli.common import DEMO_SESSION
from advisor.sources import cmdline as cmdline_src
from advisor.sources.session import Session
from tests.paths import FIXTURES
from tests.vllm_standin import StandIn, serve, session_pages

CMDS = FIXTURES / "paste" / "commands"


def _inspect(*args: str, stdin: str | None = None) -> dict[str, Any]:
    res = CliRunner().invoke(main, ["inspect", *args, "--format", "json"], input=stdin)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _cmdline_knobs(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v["value"] for k, v in d["engine"]["knobs"].items() if v["source"] == "cmdline"}


def test_a_real_serve_command_pasted_with_continuations_reads_as_its_argv() -> None:
    """The H200 0.25 run's real arguments (tests/fixtures/engine), pasted over six lines."""
    real = (FIXTURES / "engine" / "h200-0.25-A_s256-serve_args.txt").read_text().split()
    want = cmdline_src.from_cmdline(["vllm", "serve", "/models/llama-8b-shaped", *real])
    d = _inspect("--command-file", str(CMDS / "h200-0.25-A_s256-serve.sh"))
    assert _cmdline_knobs(d) == {k: v.value for k, v in want.items() if k in d["engine"]["knobs"]}
    assert _cmdline_knobs(d)["kv_cache_memory_bytes"] == 6442450944
    assert d["engine"]["model"] == "/models/llama-8b-shaped"
    assert d["command"]["warnings"] == []


def test_env_prefix_underscores_abbreviation_size_unresolved_var_and_secrets() -> None:
    text = (CMDS / "vllm-serve-env-abbrev.sh").read_text()
    d = _inspect("--command-file", "-", stdin=text)
    assert _cmdline_knobs(d) == {
        "tensor_parallel_size": 2,
        "max_num_seqs": 128,  # --max_num_seqs=128
        "max_model_len": 16384,  # 16K, as vLLM reads it (binary K)
        "gpu_memory_utilization": 0.92,  # --gpu-memory-util, an abbreviation
        "enable_prefix_caching": True,
    }
    # $MAX_TOKENS is not a number: the knob stays unknown (its default), with a warning
    assert d["engine"]["knobs"]["max_num_batched_tokens"]["source"] == "default"
    assert any("$MAX_TOKENS" in w for w in d["command"]["warnings"])
    assert any("--gpu-memory-util read as --gpu-memory-utilization" in w for w in d["command"]["warnings"])
    dumped = json.dumps(d)
    assert "sk-secret123" not in dumped and "hf_abcdefghijklmnopqrstuvwx" not in dumped
    assert "CUDA_VISIBLE_DEVICES" not in dumped and "HF_TOKEN" not in dumped  # the wrapper's env


def test_docker_run_keeps_the_engine_args_and_drops_dockers_own() -> None:
    d = _inspect("--command-file", str(CMDS / "docker-vllm-openai.sh"))
    assert _cmdline_knobs(d) == {
        "tensor_parallel_size": 2,  # -tp
        "max_num_seqs": 64,
        "max_model_len": 1048576,  # --max-model-len=1M
        "enable_prefix_caching": False,  # --no-enable-prefix-caching
    }
    assert d["engine"]["model"] == "mistralai/Mistral-7B-v0.1"
    assert d["command"]["launcher"] == "docker run vllm/vllm-openai:v0.8.5"
    # the image's tag dates the engine (weaker than a log or the API: source "default")
    assert d["engine"]["vllm_version"] == "0.8.5"
    assert d["engine"]["facts"]["vllm_version"]["detail"] == "docker image vllm/vllm-openai:v0.8.5"
    facts = d["engine"]["facts"]
    assert "port" not in facts and "name" not in facts and "gpus" not in facts
    dumped = json.dumps(d)
    assert "8000:8000" not in dumped and "huggingface" not in dumped and "hf_abcdef" not in dumped


def test_nim_environment_knobs_and_nothing_else_from_the_wrapper() -> None:
    d = _inspect("--command-file", str(CMDS / "docker-nim-env.sh"))
    assert _cmdline_knobs(d) == {
        "max_model_len": 32768,
        "tensor_parallel_size": 2,
        "enable_prefix_caching": True,
    }
    assert "nvapi-" not in json.dumps(d)
    assert len(d["command"]["warnings"]) == 3  # each environment knob says where it came from


def test_python_module_launcher_old_boolean_spelling_and_shell_tail() -> None:
    d = _inspect("--command-file", str(CMDS / "python-m-api-server-v0.sh"))
    assert _cmdline_knobs(d) == {
        "swap_space": 16.0,
        "enable_chunked_prefill": False,  # --enable-chunked-prefill False (V0 spelling)
        "max_num_batched_tokens": 4000,  # 4k: decimal k
    }
    assert d["engine"]["model"] == "/models/llama-2-13b"
    assert d["engine"]["facts"]["port"]["value"] == "8001"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('vllm serve m --served-model-name "unclosed', "cannot split"),
        ("echo hello world", "no vLLM server"),
        ("docker run --rm -p 8000:8000", "without an image"),
    ],
)
def test_commands_that_cannot_be_read_fail_with_one_line(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "cmd.sh"
    f.write_text(text)
    res = CliRunner().invoke(main, ["inspect", "--command-file", str(f)])
    assert res.exit_code == 1
    assert message in res.output and str(f) in res.output


def test_human_readable_sizes_as_vllm_reads_them() -> None:
    assert cmdline_src.human_readable_int("16k") == 16000
    assert cmdline_src.human_readable_int("16K") == 16384
    assert cmdline_src.human_readable_int("1M") == 1048576
    assert cmdline_src.human_readable_int("25.6k") == 25600
    assert cmdline_src.human_readable_int("1.5K") is None and cmdline_src.human_readable_int("16") is None


def test_explain_uses_the_pasted_command(tmp_path: Path) -> None:
    """A session's pages with a pasted command: the knobs come from it (source cmdline)."""
    session = tmp_path / "s"
    shutil.copytree(FIXTURES / "sessions" / "cpu-preempt-binds", session)
    cmd = tmp_path / "cmd.sh"
    cmd.write_text("vllm serve /models/tiny-llama --max-num-seqs 12 --max-model-len 2k\n")
    res = CliRunner().invoke(
        main, ["explain", "--session", str(session), "--command-file", str(cmd), "--format", "json"]
    )
    assert res.exit_code in (0, 3, 4), res.output
    knobs = json.loads(res.stdout)["engine"]["knobs"]
    assert knobs["max_num_seqs"] == {"value": 12, "source": "cmdline", "detail": "--max-num-seqs"}
    assert knobs["max_model_len"]["value"] == 2000
    res = CliRunner().invoke(main, ["explain", "--daemon", "http://127.0.0.1:9", "--command-file", str(cmd)])
    assert res.exit_code == 2


def test_explain_url_uses_the_pasted_command(tmp_path: Path) -> None:
    """The stand-in serves real pages recorded from vLLM 0.25 (a server that is not here)."""

    cmd = tmp_path / "cmd.sh"
    cmd.write_text(
        "docker run --gpus all -p 8000:8000 vllm/vllm-openai:v0.25.0 --model m --max-num-seqs 40\n"
    )
    with serve(StandIn(session_pages(DEMO_SESSION))) as url:
        res = CliRunner().invoke(
            main,
            [
                "explain",
                "--url",
                url,
                "--window",
                "1s",
                "--interval",
                "0.5s",
                "--format",
                "json",
                "--command-file",
                str(cmd),
            ],
        )
    assert res.exit_code in (0, 3, 4), res.output
    eng = json.loads(res.stdout)["engine"]
    assert eng["knobs"]["max_num_seqs"] == {"value": 40, "source": "cmdline", "detail": "--max-num-seqs"}
    assert eng["vllm_version"] == "0.25.0"


def test_record_keeps_the_pasted_command_as_the_sessions_serve_args(tmp_path: Path) -> None:
    """The stand-in serves real pages recorded from vLLM 0.25 (a server that is not here): the
    session's engine.json keeps the pasted command's knobs (secrets redacted), and a replay
    reads them."""

    cmd = tmp_path / "cmd.sh"
    cmd.write_text("vllm serve /models/llama-8b-shaped \\\n  --max-num-seqs 48 --api-key sk-abc123def456\n")
    out = tmp_path / "rec"
    with serve(StandIn(session_pages(DEMO_SESSION))) as url:
        res = CliRunner().invoke(
            main,
            [
                "record",
                "--url",
                url,
                "--duration",
                "1s",
                "--interval",
                "0.5s",
                "--out",
                str(out),
                "--command-file",
                str(cmd),
            ],
        )
    assert res.exit_code == 0, res.output
    s = Session.load(out)
    assert s.engine["knobs"]["max_num_seqs"]["value"] == 48
    assert "sk-abc123def456" not in json.dumps(s.engine) + json.dumps(s.meta)
    d = _inspect("--session", str(out))
    assert d["engine"]["knobs"]["max_num_seqs"]["value"] == 48
    assert d["engine"]["knobs"]["max_num_seqs"]["source"] == "cmdline"
