"""Issue 33's contract cases, run through the console script's entry (advisor.cli:main) in a
subprocess of this checkout's interpreter: exit code, exactly one `error:` line, nothing else on
stderr (no JSON log lines in front of it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.core import config as config_mod
from advisor.drive.predict import parse_set
from advisor.plugin import config as plugin_config


def cli(tmp: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_ADVISOR_")}
    e["HOME"] = str(tmp)
    e.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", "from advisor.cli import main; main()", *args],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=120,
        env=e,
        stdin=subprocess.DEVNULL,
    )


def only_the_error_line(p: subprocess.CompletedProcess[str], usage: bool = False) -> str:
    lines = p.stderr.splitlines()
    if usage:  # click's usage line is kept in front of it
        assert lines[0].startswith("Usage: "), p.stderr
        lines = lines[1:]
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    return lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ["predict", "--url", "{dead}", "--set", "max_num_seqs=8", "--window", "1s", "--interval", "1s"],
        ["explain", "--url", "{dead}", "--window", "1s", "--interval", "1s"],
        ["baseline", "save", "--url", "{dead}", "--window", "1s", "--interval", "1s", "--out", "b.json"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_a_dead_server_is_exit_1_and_only_the_error_line(
    tmp_path: Path, dead_url: str, args: list[str]
) -> None:
    p = cli(tmp_path, *[a.format(dead=dead_url) for a in args])
    assert p.returncode == 1, p.stderr
    assert "could be read" in only_the_error_line(p)


def test_run_on_a_port_in_use_says_it_in_one_error_line(
    tmp_path: Path, dead_url: str, busy_port: int
) -> None:
    p = cli(
        tmp_path,
        "run",
        "--vllm-url",
        dead_url,
        "--listen",
        f"127.0.0.1:{busy_port}",
        "--state-dir",
        str(tmp_path / "state"),
        "--run-seconds",
        "1",
    )
    assert p.returncode == 1, p.stderr
    assert "in use" in only_the_error_line(p)


def test_a_click_usage_error_is_the_usage_and_one_error_line(tmp_path: Path) -> None:
    p = cli(tmp_path, "explain", "--bogus")
    assert p.returncode == 2
    line = only_the_error_line(p, usage=True)
    assert "--bogus" in line and "explain --help" in line


def test_compare_a_wrong_knob_is_usage(tmp_path: Path) -> None:
    p = cli(tmp_path, "compare", "--knob", "max_num_seq:up", "a.json", "b.json")
    assert p.returncode == 2
    assert "--knob" in only_the_error_line(p)


def test_history_of_a_ledger_that_is_not_there_is_exit_1(tmp_path: Path) -> None:
    p = cli(tmp_path, "history", "--ledger", "/nonexistent/x.sqlite")
    assert p.returncode == 1
    assert "/nonexistent/x.sqlite" in only_the_error_line(p)


def test_a_misspelt_environment_variable_is_named(tmp_path: Path) -> None:
    p = cli(tmp_path, "config", "sample")
    (tmp_path / "a.yaml").write_text(p.stdout)
    p = cli(tmp_path, "config", "check", "a.yaml", env={"VLLM_ADVISOR_INTERVALL": "5s"})
    assert p.returncode == 2
    assert "did you mean VLLM_ADVISOR_INTERVAL" in only_the_error_line(p)


def test_window_below_min_window_is_refused() -> None:
    with pytest.raises(config_mod.ConfigError, match="min_window"):
        config_mod.load(None, env={"VLLM_ADVISOR_WINDOW": "10s"})


def test_the_plugins_variables_are_not_taken_for_misspellings() -> None:
    names = {
        v for k, v in vars(plugin_config).items() if k.startswith("ENV_") and v.startswith("VLLM_ADVISOR_")
    }
    assert names and names <= config_mod.OTHER_ENV
    config_mod.load(None, env=dict.fromkeys(names, "1"))


def test_a_size_is_accepted_as_the_advice_prints_it() -> None:
    assert parse_set("kv_cache_memory_bytes=9GiB") == ("kv_cache_memory_bytes", 9 * 1024**3)
    assert parse_set("kv_cache_memory_bytes=9 GiB")[1] == 9 * 1024**3
    assert parse_set("kv_cache_memory_bytes=6442450944")[1] == 6442450944
    with pytest.raises(ValueError):
        parse_set("kv_cache_memory_bytes=9 parsecs")


def test_run_with_a_log_file_that_is_not_there_warns_once(tmp_path: Path, dead_url: str) -> None:
    p = cli(
        tmp_path,
        "run",
        "--vllm-url",
        dead_url,
        "--listen",
        "127.0.0.1:0",
        "--log-file",
        "/nonexistent/vllm.log",
        "--state-dir",
        str(tmp_path / "state"),
        "--interval",
        "1s",
        "--run-seconds",
        "2.5",
    )
    warned = [
        ln for ln in p.stderr.splitlines() if ln.startswith("warning:") and "/nonexistent/vllm.log" in ln
    ]
    assert len(warned) == 1, p.stderr


def test_an_empty_page_and_an_empty_log_are_both_too_little_data(tmp_path: Path) -> None:
    (tmp_path / "empty.prom").write_text("")
    (tmp_path / "empty.log").write_text("")
    page = cli(tmp_path, "explain", "--metrics-file", "empty.prom")
    log = cli(tmp_path, "explain", "--log-file", "empty.log")
    assert page.returncode == log.returncode == 4, (page.stderr, log.stderr)
    assert "empty.prom" in only_the_error_line(page) and "too little data" in page.stderr


def test_a_tilde_in_state_dir_is_named_with_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("interval: 5s\nstate_dir: ~/state\n")
    p = cli(tmp_path, "config", "check", "a.yaml")
    assert p.returncode == 2
    line = only_the_error_line(p)
    assert "a.yaml:2:" in line and "state_dir" in line and "~" in line


def test_config_check_names_every_problem_at_once(tmp_path: Path) -> None:
    """Its help says one line per problem: all of them, each with where it came from, not
    the first only (issue 33); a contradiction between two good settings is one of them."""
    f = tmp_path / "advisor.yaml"
    f.write_text("intervall: 5s\nwindow: abc\ninterval: 1m\nstale_after: 10s\ninterval: 2s\n")
    p = cli(tmp_path, "config", "check", str(f), env={"VLLM_ADVISOR_MIN_WINDOW": "soon"})
    assert p.returncode == 2, p.stderr
    lines = p.stderr.splitlines()
    assert all(x.startswith("error: config: ") for x in lines), p.stderr
    wanted = [
        f"{f}:5: interval: given twice (first at line 3)",
        f"{f}:1: 'intervall': unknown setting (did you mean interval?)",
        f"{f}:2: window: expected a duration",
        "environment variable VLLM_ADVISOR_MIN_WINDOW: min_window: expected a duration",
        f"interval 1m ({f}:3) is longer than stale_after 10s ({f}:4)",
    ]
    assert len(lines) == len(wanted), p.stderr
    for w in wanted:
        assert any(w in x for x in lines), (w, p.stderr)
