"""The CLI's contract, checked on the INSTALLED console script: the wheel is built from this
checkout, installed into a fresh virtual environment, and run from an empty folder (so nothing of
the checkout, such as rules/ or deploy/, can stand in for what the wheel lacks).

Every failure mode exits with its code and prints exactly one ``error:`` line, never a traceback:
0 ok, 1 error (the command could not do its job), 2 usage, 3 advice (``--exit-code``), 4 no data.
The dead server is a closed port on loopback; the "port in use" is a listening socket of the test.
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.paths import REPO

PAGES = REPO / "tests" / "fixtures" / "pages"

# one worker runs the module: the wheel and its venv (~12 s of CPU) are built once, not per worker
pytestmark = pytest.mark.xdist_group("installed-wheel")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """vllm-advisor installed from a wheel of this checkout into a venv of its own: its bin/."""
    tmp = tmp_path_factory.mktemp("wheel")
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp),
            str(REPO),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = tmp.glob("vllm_advisor-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    inst = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert inst.returncode == 0, inst.stderr
    return venv / "bin"


@pytest.fixture()
def empty(tmp_path: Path) -> Path:
    d = tmp_path / "empty"
    d.mkdir()
    return d


def run(
    bindir: Path, cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """The installed console script in ``cwd``. ``timeout`` is a hang guard, not a speed bound:
    on CI a usage error once took over 60 s to print beside a real vLLM under load on 2 cores."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_ADVISOR_")}
    e["HOME"] = str(cwd)  # the default state dir lands in the empty folder, not the user's home
    e.update(env or {})
    return subprocess.run(
        [str(bindir / "vllm-advisor"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=e,
        stdin=subprocess.DEVNULL,
    )


def one_error_line(p: subprocess.CompletedProcess[str]) -> str:
    """The failure says itself in exactly one ``error:`` line and no traceback."""
    out = p.stdout + p.stderr
    assert "Traceback" not in out, out
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, p.stderr
    return errors[0]


# ----------------------------------------------------------------------------- the wheel is complete
def test_installed_wheel_runs_the_demo_from_an_empty_folder(installed: Path, empty: Path) -> None:
    p = run(installed, empty, "demo", "--listen", "127.0.0.1:0", "--serve-seconds", "0.5")
    assert p.returncode == 0, p.stderr
    assert "CHANGE  --kv-cache-memory-bytes 6442450944 -> 53687091200" in p.stdout
    assert list(empty.iterdir()) == []  # it wrote nothing where it was run


def test_installed_wheel_ships_the_rules_and_the_sample_config(installed: Path, empty: Path) -> None:
    rules = run(installed, empty, "rules", "list", "--format", "json")
    assert rules.returncode == 0, rules.stderr
    assert len(yaml.safe_load(rules.stdout)) >= 10
    sample = run(installed, empty, "config", "sample")
    assert sample.returncode == 0 and yaml.safe_load(sample.stdout)["listen"].startswith("127.0.0.1:")
    assert sample.stdout == (REPO / "advisor" / "data" / "vllm-advisor.yaml").read_text()
    (empty / "advisor.yaml").write_text(sample.stdout)
    check = run(installed, empty, "config", "check", "advisor.yaml")
    assert check.returncode == 0, check.stderr
    helptext = run(installed, empty, "run", "--help").stdout
    assert "config sample" in helptext and "deploy/" not in helptext


def test_installed_wheel_generates_the_same_bundle_as_the_checkout(installed: Path, empty: Path) -> None:
    p = run(installed, empty, "generate", "--out", "repo")
    assert p.returncode == 0, p.stderr
    check = run(installed, REPO, "generate", "--check")  # the committed files, by the installed rules
    assert check.returncode == 0, check.stdout
    for rel in (
        "deploy/prometheus/vllm-advisor.rules.yaml",
        "grafana/vllm-advisor-server.json",
        "deploy/RUNBOOK.md",
    ):
        assert (empty / "repo" / rel).read_text() == (REPO / rel).read_text(), rel


def test_top_level_help_lists_every_summary_whole(installed: Path, empty: Path) -> None:
    p = run(installed, empty, "--help", env={"COLUMNS": "100"})
    assert p.returncode == 0
    commands = p.stdout.split("Commands:")[1]
    assert "..." not in commands
    assert "for a later comparison" in " ".join(commands.split())  # baseline's whole summary
    assert "Exit codes: 0 ok, 1 error" in " ".join(p.stdout.split())


# ----------------------------------------------------------------------------- exit codes
def test_explain_ok_advice_and_no_data(installed: Path, empty: Path, tmp_path: Path) -> None:
    demo = str(REPO / "advisor" / "data" / "sessions" / "h200-A_s256")
    assert run(installed, empty, "explain", "--session", demo).returncode == 0
    assert run(installed, empty, "explain", "--session", demo, "--exit-code").returncode == 3
    # one page of that session: read fine, far too little to diagnose
    short = tmp_path / "short"
    shutil.copytree(demo, short)
    for f in sorted((short / "metrics").glob("*.prom.gz"))[1:]:
        f.unlink()
    p = run(installed, empty, "explain", "--session", str(short), "--format", "json")
    assert p.returncode == 4, p.stdout + p.stderr
    assert '"insufficient-data"' in p.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["explain", "--url", "{dead}", "--window", "1s", "--interval", "1s"],
        ["explain", "--url", "{dead}", "--window", "1s", "--interval", "1s", "--exit-code"],
        ["inspect", "--url", "{dead}"],
        ["record", "--url", "{dead}", "--duration", "1s", "--interval", "1s", "--out", "rec"],
        ["baseline", "save", "--url", "{dead}", "--window", "1s", "--interval", "1s", "--out", "b.json"],
        ["explain", "--daemon", "{dead}"],
        ["explain", "--metrics-file", "no-such-page.prom"],
        ["explain", "--session", "no-such-dir"],
        ["inspect", "--log-file", "no-such.log"],
        ["compare", "no-a.json", "no-b.json"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_a_command_that_cannot_do_its_job_exits_1(
    installed: Path, empty: Path, dead_url: str, args: list[str]
) -> None:
    p = run(installed, empty, *[a.format(dead=dead_url) for a in args])
    assert p.returncode == 1, p.stdout + p.stderr
    one_error_line(p)


def test_record_keeps_the_failed_session_but_says_so(installed: Path, empty: Path, dead_url: str) -> None:
    p = run(
        installed, empty, "record", "--url", dead_url, "--duration", "1s", "--interval", "1s", "--out", "rec"
    )
    assert p.returncode == 1
    assert "Connection refused" in one_error_line(p) or "refused" in one_error_line(p)
    assert (empty / "rec" / "meta.json").is_file()


def test_baseline_on_a_dead_server_writes_nothing(installed: Path, empty: Path, dead_url: str) -> None:
    p = run(
        installed,
        empty,
        "baseline",
        "save",
        "--url",
        dead_url,
        "--window",
        "1s",
        "--interval",
        "1s",
        "--out",
        "b.json",
    )
    assert p.returncode == 1
    assert not (empty / "b.json").exists()


def test_demo_on_a_port_in_use_exits_1(installed: Path, empty: Path, busy_port: int) -> None:
    p = run(installed, empty, "demo", "--listen", f"127.0.0.1:{busy_port}", "--serve-seconds", "0.5")
    assert p.returncode == 1
    assert "in use" in one_error_line(p)


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["run", "--listen", "notaport"], {}, "--listen"),
        (["run", "--listen", "127.0.0.1:99999"], {}, "65535"),
        (["run"], {"VLLM_ADVISOR_LISTEN": "nohost"}, "VLLM_ADVISOR_LISTEN"),
        (["run", "--interval", "soon"], {}, "soon"),
        (["run", "--config", "missing.yaml"], {}, "missing.yaml"),
        (["config", "check", "missing.yaml"], {}, "missing.yaml"),
        (["demo", "--listen", "127.0.0.1:x"], {}, "--listen"),
        (["explain"], {}, "--url"),
        (["explain", "no-such-rule"], {}, "no-such-rule"),
        (["explain", "--session", "a", "--url", "http://127.0.0.1:1"], {}, "exactly one"),
        (["baseline", "save", "--out", "b.json"], {}, "exactly one"),
        (["generate", "--check"], {}, "--out REPO"),
        (["run", "--log-file", "a.log", "--log-cmd", "cat"], {}, "not both"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else "",
)
def test_a_user_mistake_exits_2_with_one_line_naming_it(
    installed: Path, empty: Path, args: list[str], env: dict[str, str], says: str
) -> None:
    p = run(installed, empty, *args, env=env)
    assert p.returncode == 2, p.stdout + p.stderr
    assert says in one_error_line(p)


def test_a_bad_config_file_exits_2_naming_the_file(installed: Path, empty: Path) -> None:
    (empty / "list.yaml").write_text("- just\n- a list\n")
    p = run(installed, empty, "run", "--config", "list.yaml")
    assert p.returncode == 2
    assert "list.yaml" in one_error_line(p)
    (empty / "bad.yaml").write_bytes(gzip.compress(b"\x00\xff binary"))
    p = run(installed, empty, "config", "check", "bad.yaml")
    assert p.returncode == 2
    assert "bad.yaml" in one_error_line(p)
