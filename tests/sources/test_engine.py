"""advisor.sources.engine: what the server runs with, each value with its provenance."""

from __future__ import annotations

import gzip
import json
import os
import re
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from advisor.cli.common import DEMO_SESSION
from advisor.core import engine_json, redact
from advisor.core.model import EngineInfo, LogEvent
from advisor.core.redact import REDACTED
from advisor.sources import cmdline as cmdline_src
from advisor.sources import engine, logs, metrics
from advisor.sources import engine_config as engine_config_src
from advisor.sources import host as host_src
from advisor.sources import logfacts as logfacts_src
from advisor.sources.engine_config import EngineSourceError
from tests.paths import FIXTURES, REPO

ENGINE_FIX = FIXTURES / "engine"
PAGES = FIXTURES / "pages"
LOGS = FIXTURES / "logs"


def vals(d: dict[str, object]) -> dict[str, object]:
    return {k: v.value for k, v in d.items()}  # type: ignore[attr-defined]


# ---------------------------------------------------------------- secrets

SECRET_ARGVS = [
    (["vllm", "serve", "m", "--api-key", "abc"], "abc"),
    (["vllm", "serve", "m", "--api-key=abc"], "abc"),
    (["vllm", "serve", "m", "--api_key", "abc"], "abc"),
    (["vllm", "serve", "m", "--api-key", "k1", "k2", "--port", "8000"], "k2"),
    (["vllm", "serve", "m", "--hf-token", "abc"], "abc"),
    (["vllm", "serve", "m", "--hf_token=abc"], "abc"),
    (["vllm", "serve", "m", "--some-auth-token", "abc"], "abc"),
    (["vllm", "serve", "m", "--db-password", "abc"], "abc"),
    (["vllm", "serve", "m", "--client-secret=abc"], "abc"),
    (["env", "HF_TOKEN=abc", "vllm", "serve", "m"], "abc"),
    (["env", "OPENAI_API_KEY=abc", "vllm", "serve", "m"], "abc"),
    (["vllm", "serve", "m", "--foo", "hf_abcdefghijklmnopqrstuvwxyz"], "hf_abcdefghijklmnopqrstuvwxyz"),
    (["vllm", "serve", "m", "--download-dir", "https://user:abc@example.com/x"], "abc@"),
]


@pytest.mark.parametrize(("argv", "secret"), SECRET_ARGVS)
def test_redact_argv(argv: list[str], secret: str) -> None:
    red = redact.redact_argv(argv)
    assert secret not in " ".join(red)
    assert any(REDACTED in t for t in red)
    assert redact.redact_argv(red) == red  # idempotent


def test_redact_keeps_everything_else() -> None:
    argv = ["vllm", "serve", "m", "--api-key", "abc", "--max-num-batched-tokens", "8192", "--port", "8000"]
    assert redact.redact_argv(argv) == [
        "vllm",
        "serve",
        "m",
        "--api-key",
        REDACTED,
        "--max-num-batched-tokens",
        "8192",
        "--port",
        "8000",
    ]


@pytest.mark.parametrize(
    "name",
    [
        "--max-num-batched-tokens",
        "--kv-cache-memory-bytes",
        "--tokenizer",
        "--tokenizer-mode",
        "--skip-tokenizer-init",
        "--ssl-keyfile",
        "max_num_seqs",
        "--enable-prompt-tokens-details",
    ],
)
def test_not_secret_names(name: str) -> None:
    assert not redact.is_secret_name(name)


@pytest.mark.parametrize(
    "name", ["--api-key", "api_key", "--hf-token", "HF_TOKEN", "--token", "X_PASSWORD", "secret"]
)
def test_secret_names(name: str) -> None:
    assert redact.is_secret_name(name)


# ---------------------------------------------------------------- command line


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["vllm", "serve", "meta/llama", "--max-num-seqs", "128", "--gpu-memory-utilization=0.85"],
            {"model": "meta/llama", "max_num_seqs": 128, "gpu_memory_utilization": 0.85},
        ),
        (
            ["/venv/bin/python3", "/venv/bin/vllm", "serve", "m", "-tp", "2", "-pp=2", "--max_num_seqs", "8"],
            {"model": "m", "tensor_parallel_size": 2, "pipeline_parallel_size": 2, "max_num_seqs": 8},
        ),
        (
            [
                "vllm",
                "serve",
                "m",
                "--no-enable-prefix-caching",
                "--enable-chunked-prefill",
                "--enforce-eager",
            ],
            {"enable_prefix_caching": False, "enable_chunked_prefill": True, "enforce_eager": True},
        ),
        (
            [
                "python",
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                "m2",
                "--enable-chunked-prefill",
                "False",
            ],
            {"model": "m2", "enable_chunked_prefill": False},
        ),
        (
            [
                "python3",
                "-m",
                "vllm.entrypoints.cli.main",
                "serve",
                "m3",
                "--kv-cache-dtype",
                "fp8",
                "-dp",
                "4",
            ],
            {"model": "m3", "kv_cache_dtype": "fp8", "data_parallel_size": 4},
        ),
        (
            ["python", "scripts/vllm_cli.py", "serve", "/models/tiny", "--max-num-batched-tokens", "512"],
            {"model": "/models/tiny", "max_num_batched_tokens": 512},
        ),
        (
            ["vllm", "serve", "m", "--mm-processor-cache-type", "shm", "--mm-processor-cache-gb", "0"],
            {"mm_processor_cache_type": "shm", "mm_processor_cache_gb": 0.0},
        ),
    ],
)
def test_from_cmdline_spellings(argv: list[str], expected: dict[str, object]) -> None:
    got = cmdline_src.from_cmdline(argv)
    for k, v in expected.items():
        assert got[k].value == v, k
        assert got[k].source == "cmdline"


def test_from_cmdline_real_serve_args() -> None:
    """The exact flags of the H200 A_s256 run (shared/fixtures/h200-vllm-0.25/A_s256/serve_args.txt)."""
    args = (ENGINE_FIX / "h200-0.25-A_s256-serve_args.txt").read_text().split()
    got = vals(cmdline_src.from_cmdline(["vllm", "serve", "/models/llama-8b-shaped", *args]))
    assert got["max_num_seqs"] == 256
    assert got["max_num_batched_tokens"] == 8192
    assert got["kv_cache_memory_bytes"] == 6442450944
    assert got["gpu_memory_utilization"] == 0.2
    assert got["max_model_len"] == 8192
    assert got["model"] == "/models/llama-8b-shaped"


def test_from_cmdline_flag_detail_is_the_spelling() -> None:
    got = cmdline_src.from_cmdline(["vllm", "serve", "m", "-tp", "2"])
    assert got["tensor_parallel_size"].detail == "-tp"


def test_from_cmdline_config_file_overridden_by_flags(tmp_path: Path) -> None:
    cfg = tmp_path / "serve.yaml"
    cfg.write_text(
        textwrap.dedent(
            """
            model: from/yaml
            max-num-seqs: 64
            max_num_batched_tokens: 4096
            gpu-memory-utilization: 0.8
            api-key: yaml-secret
            """
        )
    )
    argv = ["vllm", "serve", "--config", str(cfg), "--max-num-seqs", "32", "--api-key=cli-secret"]
    got = cmdline_src.from_cmdline(argv)
    assert got["max_num_seqs"].value == 32 and got["max_num_seqs"].detail == "--max-num-seqs"
    assert got["max_num_batched_tokens"].value == 4096
    assert got["max_num_batched_tokens"].detail == f"--config {cfg}"
    assert got["gpu_memory_utilization"].value == 0.8
    assert got["model"].value == "from/yaml"
    dumped = json.dumps(engine_json.to_json(EngineInfo(got)))
    assert "yaml-secret" not in dumped and "cli-secret" not in dumped
    assert got["api_key"].value == REDACTED


def test_from_cmdline_unreadable_config_is_reported_not_raised(tmp_path: Path) -> None:
    got = cmdline_src.from_cmdline(
        ["vllm", "serve", "m", "--config", str(tmp_path / "missing.yaml"), "--max-num-seqs", "4"]
    )
    assert got["max_num_seqs"].value == 4
    assert "cannot read" in got["config_error"].value


def test_from_cmdline_keeps_a_redacted_cmdline_fact() -> None:
    got = cmdline_src.from_cmdline(
        ["vllm", "serve", "m", "--hf-token", "hf_zzzzzzzzzzzzzzzzzzzzzzzz", "--max-num-seqs", "4"]
    )
    assert "hf_zzzz" not in got["cmdline"].value
    assert "--max-num-seqs 4" in got["cmdline"].value
    assert all("hf_zzzz" not in str(p.value) for p in got.values())


@pytest.mark.parametrize(
    ("argv", "is_vllm"),
    [
        (["vllm", "serve", "m"], True),
        (["/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], True),
        (["python", "-m", "vllm.entrypoints.cli.main", "serve", "m"], True),
        (["vllm-advisor", "explain"], False),
        (["python", "-m", "http.server", "8000"], False),
        (["vllm", "bench", "serve"], False),
        (["bash"], False),
        ([], False),
    ],
)
def test_looks_like_vllm(argv: list[str], is_vllm: bool) -> None:
    assert cmdline_src.looks_like_vllm(argv) is is_vllm


# ---------------------------------------------------------------- config file


def test_from_config_file(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text(
        "max-num-seqs: 48\nenable_prefix_caching: false\ntensor-parallel-size: 2\nhf-token: tok123\n"
    )
    got = engine_config_src.from_config_file(p)
    assert vals(got) == {
        "max_num_seqs": 48,
        "enable_prefix_caching": False,
        "tensor_parallel_size": 2,
        "hf_token": REDACTED,
    }
    assert {v.source for v in got.values()} == {"config"}
    assert got["max_num_seqs"].detail == str(p)


@pytest.mark.parametrize(
    ("content", "message"),
    [("max-num-seqs: [1, 2\n", "not valid YAML"), ("- a\n- b\n", "must be a mapping")],
)
def test_from_config_file_bad_input(tmp_path: Path, content: str, message: str) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text(content)
    with pytest.raises(EngineSourceError, match=message):
        engine_config_src.from_config_file(p)


def test_from_config_file_missing(tmp_path: Path) -> None:
    with pytest.raises(EngineSourceError, match="cannot read"):
        engine_config_src.from_config_file(tmp_path / "nope.yaml")


# ---------------------------------------------------------------- a real process


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


LISTENER = textwrap.dedent(
    """
    import socket, sys, time
    port = int(sys.argv[sys.argv.index("--port") + 1])
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port)); s.listen(1)
    print("ready", flush=True)
    time.sleep(60)
    """
)


@pytest.fixture
def spawn() -> Iterator[object]:
    procs: list[subprocess.Popen[str]] = []

    def start(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
        procs.append(p)
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "ready"
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait(timeout=10)


def test_find_vllm_process_by_listening_port(tmp_path: Path, spawn) -> None:  # type: ignore[no-untyped-def]
    """A real child process named like the `vllm` console script, listening on a free port."""
    script = tmp_path / "vllm"
    script.write_text(LISTENER)
    port = _free_port()
    spawn(
        [
            sys.executable,
            str(script),
            "serve",
            "tiny",
            "--port",
            str(port),
            "--api-key",
            "sekrit",
            "--max-num-seqs",
            "7",
        ]
    )
    argv = host_src.find_vllm_process(port)
    assert argv is not None
    assert "sekrit" not in argv and REDACTED in argv
    got = cmdline_src.from_cmdline(argv)
    assert got["max_num_seqs"].value == 7
    assert got["model"].value == "tiny"


def test_knobs_in_the_server_environment_are_read_and_nothing_else(spawn) -> None:  # type: ignore[no-untyped-def]
    """VLLM_MEDIA_LOADING_THREAD_COUNT has no flag: a live server's process environment gives
    it (as a NAME=value word in front of its argv); a token in the same environment is never
    kept, printed or stored."""
    port = _free_port()
    env = {**os.environ, "VLLM_MEDIA_LOADING_THREAD_COUNT": "12", "HF_TOKEN": "hf_sekrit"}
    spawn([sys.executable, "-c", LISTENER, "vllm", "serve", "tiny", "--port", str(port)], env=env)
    argv = host_src.find_vllm_process(port)
    assert argv is not None and argv[0] == "VLLM_MEDIA_LOADING_THREAD_COUNT=12"
    assert not any("sekrit" in a or "HF_TOKEN" in a for a in argv)
    got = cmdline_src.from_cmdline(argv)
    assert (got["media_loading_thread_count"].value, got["media_loading_thread_count"].source) == (
        12,
        "cmdline",
    )
    assert got["cmdline"].value.startswith("VLLM_MEDIA_LOADING_THREAD_COUNT=12 ")
    # the same words in front of a recorded or pasted command
    cmd = cmdline_src.read_command(
        "HF_TOKEN=x VLLM_MEDIA_LOADING_THREAD_COUNT=32 vllm serve m --max-num-seqs 8"
    )
    assert cmd.argv[:3] == ["VLLM_MEDIA_LOADING_THREAD_COUNT=32", "vllm", "serve"]
    got = cmdline_src.from_cmdline(cmd.argv)
    assert got["media_loading_thread_count"].value == 32 and got["max_num_seqs"].value == 8


def test_find_vllm_process_module_form(spawn) -> None:  # type: ignore[no-untyped-def]
    """``python -m vllm.entrypoints.openai.api_server`` spelling, found by its --port."""
    port = _free_port()
    spawn(
        [
            sys.executable,
            "-c",
            LISTENER,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--port",
            str(port),
            "-tp",
            "1",
        ]
    )
    argv = host_src.find_vllm_process(port)
    assert argv is not None and "vllm.entrypoints.openai.api_server" in argv
    assert cmdline_src.from_cmdline(argv)["port"].value == str(port)


def test_find_vllm_process_ignores_other_listeners(tmp_path: Path, spawn) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "not_vllm.py"
    script.write_text(LISTENER)
    port = _free_port()
    spawn([sys.executable, str(script), "--port", str(port)])
    assert host_src.find_vllm_process(port) is None


# ---------------------------------------------------------------- metrics


def test_cache_config_info_cpu_preempt_mns16() -> None:
    snap = metrics.parse_page((PAGES / "cpu-0.32-preempt_mns16-before.prom").read_text(), 0.0)
    got = engine.from_snapshot(snap)
    v = vals(got)
    assert v["block_size"] == 128
    assert v["kv_cache_tokens"] == 3072
    assert v["kv_cache_memory_bytes"] == 25165824
    assert v["gpu_memory_utilization"] == 0.92
    assert v["enable_prefix_caching"] is True
    assert v["num_gpu_blocks"] == 24
    assert v["max_concurrency"] == 1.5
    assert v["kv_cache_dtype"] == "auto"
    assert "num_gpu_blocks_override" not in v  # "None" on the page
    assert v["served_model_name"] == "tiny-llama"
    assert v["engines"] == 1
    assert {p.source for p in got.values()} == {"metrics"}


def test_cache_config_info_h200_a_s256() -> None:
    snap = metrics.parse_page((PAGES / "h200-0.25-A_s256-before.prom").read_text(), 0.0)
    v = vals(engine.from_snapshot(snap))
    assert v["block_size"] == 16
    assert v["kv_cache_tokens"] == 49152
    assert v["max_concurrency"] == 6.0
    assert v["kv_cache_memory_bytes"] == 6442450944
    assert v["gpu_memory_utilization"] == 0.2


def test_from_snapshot_without_cache_info_is_empty() -> None:
    snap = metrics.parse_page("# TYPE x gauge\nx 1\n", 0.0, keep=None)
    assert engine.from_snapshot(snap) == {}


# ---------------------------------------------------------------- log events


def startup(
    fact: str, value: object, also: list[dict[str, object]] | None = None, line: str = ""
) -> LogEvent:
    fields: dict[str, object] = {"fact": fact, "value": value}
    if also:
        fields["also"] = also
    return LogEvent("startup", None, fields, line=line)


def test_log_events_last_run_wins() -> None:
    events = [
        startup("vllm_version", "0.25.0"),
        startup("non_default_args", {"max_num_seqs": 256, "api_key": ["topsecret"]}),
        startup("kv_cache_tokens", 49152, also=[{"fact": "max_concurrency", "value": 6.0}]),
        LogEvent("engine_stats", 1.0, {"running": 3}),
        startup("vllm_version", "0.25.0"),
        startup("non_default_args", {"max_num_seqs": 128}),
        startup(
            "max_num_batched_tokens",
            4096,
            line="Chunked prefill is enabled with max_num_batched_tokens=4096.",
        ),
        startup(
            "engine_config",
            {"max_seq_len": 8192, "tensor_parallel_size": 2, "device_config": "cuda"},
            also=[{"fact": "vllm_version", "value": "0.25.0"}],
        ),
    ]
    runs = logfacts_src.split_at_restarts(events)
    assert [len(r) for r in runs] == [4, 4]
    got = logfacts_src.from_log_events(events)
    v = vals(got)
    assert v["max_num_seqs"] == 128
    assert v["max_num_batched_tokens"] == 4096
    assert v["enable_chunked_prefill"] is True
    assert v["max_model_len"] == 8192
    assert v["tensor_parallel_size"] == 2
    assert v["device_type"] == "cuda"
    assert "kv_cache_tokens" not in v  # belonged to the first run
    assert {p.source for p in got.values()} == {"log"}


def test_log_events_redact_non_default_args() -> None:
    got = logfacts_src.from_log_events(
        [startup("non_default_args", "{'api_key': ['s3cr3t'], 'max_num_seqs': 8}")]
    )
    assert got["api_key"].value == REDACTED
    assert got["max_num_seqs"].value == 8


def test_log_events_empty_and_odd() -> None:
    assert logfacts_src.from_log_events([]) == {}
    assert (
        logfacts_src.from_log_events([startup("non_default_args", "not a dict"), LogEvent("unknown", None)])
        == {}
    )


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        (
            "cpu-0.32-preempt_mns16.log",
            {
                "vllm_version": "0.32.0",
                "max_num_seqs": 16,
                "kv_cache_tokens": 3072,
                "kv_cache_memory_bytes": 25165824,
                "max_model_len": 2048,
                "device_type": "cpu",
            },
        ),
        ("cpu-0.32-mnbt_512.log", {"max_num_batched_tokens": 512, "kv_cache_tokens": 131072}),
        (
            "h200-0.25-A_s256.log",
            {
                "vllm_version": "0.25.0",
                "max_num_seqs": 256,
                "max_num_batched_tokens": 8192,
                "kv_cache_tokens": 49152,
                "max_concurrency": 6.0,
            },
        ),
    ],
)
def test_real_logs_through_the_log_parser(log: str, expected: dict[str, object]) -> None:
    with open(LOGS / log, encoding="utf-8", errors="replace") as fh:
        events = list(logs.parse_lines(fh))
    assert len(logfacts_src.split_at_restarts(events)) == 1
    v = vals(logfacts_src.from_log_events(events))
    for k, want in expected.items():
        assert v[k] == want, k


def test_data_parallelism_is_the_argument_not_one_engine_cores_config_line() -> None:
    """vLLM 0.25 with --data-parallel-size 2 (an H200 run): the non-default args say 2, the
    engine core's config line ("(EngineCore_DP0 ...)") says data_parallel_size=1. The server's
    size is 2; read as 1, a daemon saw the change 1 -> 2 as two (2 -> 1 from the log, then 1 -> 2
    from the command line), voided its experiment and had no baseline (validation/live.py)."""
    path = REPO / "validation" / "runs" / "dense-kv-tp.data-parallel-size-2" / "vllm.log.gz"
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    assert "data_parallel_size=1" in text and "'data_parallel_size': 2" in text
    events = list(logs.parse_lines(text.splitlines(keepends=True)))
    got = logfacts_src.from_log_events(events)
    assert got["data_parallel_size"].value == 2
    assert got["data_parallel_size"].detail == "non-default args"


def test_real_log_restart_splits_runs() -> None:
    """Two real runs' logs back to back (a restart with new args): the second run wins."""
    lines = (LOGS / "cpu-0.32-preempt_mns16.log").read_text(errors="replace").splitlines()
    lines += (LOGS / "cpu-0.32-preempt_mns8.log").read_text(errors="replace").splitlines()
    events = list(logs.parse_lines(lines))
    assert len(logfacts_src.split_at_restarts(events)) == 2
    assert logfacts_src.from_log_events(events)["max_num_seqs"].value == 8


# ---------------------------------------------------------------- defaults, host, resolve


def test_defaults_function() -> None:
    d = engine.defaults("0.32.0", "cpu", None, None)
    assert d["max_num_seqs"].value == 128 and d["max_num_batched_tokens"].value == 2048
    d = engine.defaults("0.25.0", "NVIDIA H200", 139.8, None)
    assert d["max_num_seqs"].value == 1024 and d["max_num_batched_tokens"].value == 8192
    assert {p.source for p in d.values()} == {"default"}


def test_parse_nvidia_smi() -> None:
    """nvidia-smi is absent here; the text has the documented csv,noheader shape."""
    got = host_src.parse_nvidia_smi("NVIDIA H200, 143771 MiB\nNVIDIA H200, 143771 MiB\n")
    assert vals(got) == {"gpu_count": 2, "gpu_name": "NVIDIA H200", "gpu_memory_gib": 140.4}
    assert host_src.parse_nvidia_smi("") == {}
    assert host_src.parse_nvidia_smi("No devices were found\n") == {}


def test_host_facts_never_fails() -> None:
    def broken(_cmd: list[str]) -> str:
        raise subprocess.CalledProcessError(9, "nvidia-smi")

    assert host_src.host_facts(broken) == {}
    assert isinstance(host_src.host_facts(), dict)


def test_precedence_config_over_cmdline_over_log_over_metrics_over_default(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("max_num_seqs: 10\n")
    snap = metrics.parse_page((PAGES / "cpu-0.32-preempt_mns16-before.prom").read_text(), 0.0)
    events = [
        startup("vllm_version", "0.32.0"),
        startup("non_default_args", {"max_num_seqs": 30, "max_num_batched_tokens": 1024, "block_size": 64}),
    ]
    info = engine.resolve(
        config_path=cfg,
        argv=["vllm", "serve", "m", "--max-num-seqs", "20", "--max-num-batched-tokens", "4096"],
        events=events,
        snapshot=snap,
    )
    assert (info.get("max_num_seqs"), info.source("max_num_seqs")) == (10, "config")
    assert (info.get("max_num_batched_tokens"), info.source("max_num_batched_tokens")) == (4096, "cmdline")
    assert (info.get("block_size"), info.source("block_size")) == (64, "log")
    assert (info.get("kv_cache_tokens"), info.source("kv_cache_tokens")) == (3072, "metrics")
    assert info.source("kv_cache_dtype") in ("metrics",)
    assert (info.get("api_server_count"), info.source("api_server_count")) == (1, "default")


def test_resolve_real_cpu_baseline() -> None:
    with open(LOGS / "cpu-0.32-baseline.log", encoding="utf-8", errors="replace") as fh:
        events = list(logs.parse_lines(fh))
    snap = metrics.parse_page((PAGES / "cpu-0.32-baseline-before.prom").read_text(), 0.0)
    info = engine.resolve(events=events, snapshot=snap, host={})
    assert info.get("device") == "cpu"
    assert (info.get("max_num_seqs"), info.source("max_num_seqs")) == (128, "default")
    assert (info.get("max_num_batched_tokens"), info.source("max_num_batched_tokens")) == (2048, "default")
    assert info.get("vllm_version") == "0.32.0"
    assert info.get("kv_cache_tokens") == 131072


def test_resolve_real_h200_with_host_probe() -> None:
    with open(LOGS / "h200-0.25-A_s256.log", encoding="utf-8", errors="replace") as fh:
        events = list(logs.parse_lines(fh))
    host = host_src.parse_nvidia_smi("NVIDIA H200, 143771 MiB\n")
    info = engine.resolve(events=events, host=host)
    assert info.get("device") == "NVIDIA H200"
    assert info.get("gpu_count") == 1
    assert (info.get("max_num_seqs"), info.source("max_num_seqs")) == (256, "log")
    assert (info.get("enable_prefix_caching"), info.source("enable_prefix_caching")) == (True, "log")
    assert (info.get("block_size"), info.source("block_size")) == (16, "default")


def test_json_round_trip_is_stable_and_safe() -> None:
    with open(LOGS / "h200-0.25-A_s256.log", encoding="utf-8", errors="replace") as fh:
        events = list(logs.parse_lines(fh))
    info = engine.resolve(events=events, argv=["vllm", "serve", "x", "--api-key", "zzz"], host={})
    doc = engine_json.to_json(info)
    text = json.dumps(doc, sort_keys=True)
    assert "zzz" not in text
    assert doc["vllm_version"] == "0.25.0"
    assert doc["knobs"]["max_num_seqs"] == {"value": 256, "source": "log", "detail": "non-default args"}
    back = engine_json.from_json(json.loads(text))
    assert engine_json.to_json(back) == doc
    assert back.get("kv_cache_tokens") == 49152


@pytest.mark.parametrize("bad", [[], {"knobs": []}, {"knobs": {"max_num_seqs": 5}}])
def test_from_json_rejects_malformed(bad: object) -> None:
    with pytest.raises(engine_json.EngineJsonError):
        engine_json.from_json(bad)  # type: ignore[arg-type]


def test_from_cmdline_device_memory_utilization_is_the_gpu_fraction() -> None:
    """vLLM 0.31+ takes --device-memory-utilization as the same option (dest
    gpu_memory_utilization); a launch command spelling it that way is read as that knob."""
    got = cmdline_src.from_cmdline(
        ["vllm", "serve", "m", "--device-memory-utilization", "0.85", "--watermark", "0.02"]
    )
    assert got["gpu_memory_utilization"].value == 0.85
    assert got["gpu_memory_utilization"].detail == "--device-memory-utilization"
    assert got["watermark"].value == 0.02


def _bundled_log_events() -> list[LogEvent]:
    return [logs.parse_line(x) for x in (DEMO_SESSION / "vllm.log").read_text().splitlines()]


def test_log_free_memory_of_the_bundled_h200_session() -> None:
    """Its start-up lines (vLLM 0.25.0, kv_cache_memory_bytes 6 GiB): "Initial free memory 138.12
    GiB, reserved 6.0 GiB memory for KV Cache", "Model loading took 13.49 GiB", "Graph capturing
    finished in 7 secs, took 12.00 GiB": the device memory left free after start-up."""
    got = logfacts_src.from_log_events(_bundled_log_events())
    v = vals(got)
    assert v["initial_free_memory_gib"] == 138.12
    assert v["available_kv_cache_memory_gib"] == 6.0
    assert v["cudagraph_memory_gib"] == 12.0
    assert v["gpu_memory_free_gib"] == round(138.12 - 13.49 - 6.0 - 12.0, 2)
    assert "initial free memory 138.12 GiB" in got["gpu_memory_free_gib"].detail


def test_log_kv_cache_memory_suggestion_gives_the_free_memory() -> None:
    """vLLM 0.29+'s line when gpu_memory_utilization sizes the cache (written here from the
    format string of vllm/v1/worker/gpu_worker.py in the 0.32.0 release)."""
    line = (
        "(EngineCore pid=5) INFO 01-02 10:00:00 [gpu_worker.py:1033] Free memory on device "
        "(139.36/139.81 GiB) on startup. Desired GPU memory utilization is (0.9, 125.83 GiB). "
        "Actual usage is 15.49 GiB for consumed memory (weights + non-torch), 1.21 GiB for peak "
        "activation, and 0.52 GiB for CUDAGraph memory. Replace gpu_memory_utilization config "
        "with `--kv-cache-memory=116569787392` (108.56 GiB) to fit into requested memory, or "
        "`--kv-cache-memory=130083938304` (121.15 GiB) to fully utilize gpu memory. Current kv "
        "cache memory in use is 108.61 GiB."
    )
    v = vals(logfacts_src.from_log_events([logs.parse_line(line)]))
    assert v["initial_free_memory_gib"] == 139.36
    assert v["gpu_memory_gib"] == 139.81
    assert v["cudagraph_memory_gib"] == 0.52
    assert v["peak_activation_memory_gib"] == 1.21
    assert v["suggested_kv_cache_memory_bytes"] == 130083938304
    assert v["gpu_memory_free_gib"] == round(130083938304 / 2**30 - 108.61, 2)


def test_log_without_the_memory_lines_leaves_the_free_memory_unknown() -> None:
    line = "(EngineCore pid=5) INFO 01-02 10:00:00 [x.py:1] Initial free memory 138.12 GiB, reserved 6.0 GiB memory for KV Cache"
    assert "gpu_memory_free_gib" not in vals(logfacts_src.from_log_events([logs.parse_line(line)]))


@pytest.mark.parametrize("bad", ["N/A", "abc", "1e308", "-1", "nan", "inf"])
def test_a_cache_config_label_that_is_no_reading_leaves_its_fact_unknown(bad: str) -> None:
    """Issue 34, G6: ``num_gpu_blocks="N/A"`` or ``block_size="1e308"`` was taken as the fact
    (every diagnosis then failed); now those facts are unknown and the rest read."""
    text = (PAGES / "cpu-0.32-preempt_mns16-before.prom").read_text()
    for label in ("block_size", "num_gpu_blocks", "kv_cache_size_tokens"):
        text = re.sub(rf'(cache_config_info\{{.*?[{{,]){label}="[^"]*"', rf'\g<1>{label}="{bad}"', text)
    v = vals(engine.from_snapshot(metrics.parse_page(text, 0.0)))
    assert "block_size" not in v and "num_gpu_blocks" not in v and "kv_cache_tokens" not in v
    assert v["gpu_memory_utilization"] == 0.92 and v["kv_cache_memory_bytes"] == 25165824


@pytest.mark.parametrize(
    ("label", "value", "fact"),
    [
        ("block_size", "1000", "block_size"),
        ("block_size", "0", "block_size"),
        ("gpu_memory_utilization", "7", "gpu_memory_utilization"),
        ("enable_prefix_caching", "maybe", "enable_prefix_caching"),
        ("num_gpu_blocks", "0.5", "num_gpu_blocks"),
        ("kv_cache_size_tokens", "3072.5", "kv_cache_tokens"),
    ],
)
def test_cache_config_info_knob_outside_its_bounds_is_unknown(label: str, value: str, fact: str) -> None:
    """Found by the cache_config_info fuzz target (issue 34): a label that is a number but not
    the knob's (block_size 1000 or 0, a utilisation of 7) or not of its type ("maybe" for
    prefix caching) was taken as the knob's value, and a count that is no whole number (0.5
    GPU blocks) as the count; now it is unknown, as a sidecar's knob series
    outside its range is (prometheus.sidecar_readings). The other labels are still read."""
    text = (PAGES / "cpu-0.32-preempt_mns16-before.prom").read_text()
    text, n = re.subn(rf'(vllm:cache_config_info\{{[^\n]*?\b{label}=")[^"]*"', rf'\g<1>{value}"', text)
    assert n == 1
    v = vals(engine.from_snapshot(metrics.parse_page(text, 0.0)))
    assert fact not in v
    assert v["max_concurrency"] == 1.5 and v["kv_cache_dtype"] == "auto"
