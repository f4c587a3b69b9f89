"""CLI paths not covered elsewhere: demo, record, explain --daemon, --help everywhere."""

from __future__ import annotations

import importlib
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
import requests
from click.testing import CliRunner

from advisor.cli import main
from advisor.cli.common import DEMO_SESSION
from advisor.core.config import Config
from advisor.diagnose.ruleset import load_rules
from advisor.drive.daemon import Daemon
from advisor.sources.session import Session
from tests.hang import HANG_S
from tests.paths import FIXTURES
from tests.vllm_standin import StandIn, serve, session_pages

EXE = str(Path(sys.executable).parent / "vllm-advisor")


def test_demo_prints_the_diagnosis_and_serves_the_exporter() -> None:
    p = subprocess.run(
        [EXE, "demo", "--listen", "127.0.0.1:0", "--serve-seconds", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert "CHANGE  --kv-cache-memory-bytes 6442450944 -> 53687091200" in p.stdout
    assert "Exporter: http://127.0.0.1:" in p.stdout


def test_demo_prints_the_pages_url_and_serves_it_until_ctrl_c() -> None:
    p = subprocess.Popen(
        [EXE, "demo", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert p.stdout is not None
        url = None
        for line in p.stdout:  # the diagnosis, then the page's URL
            m = re.match(r"Page: (http://127\.0\.0\.1:\d+/) ", line)
            if m:
                url = m.group(1)
                break
        assert url is not None, p.stderr.read() if p.stderr else ""
        for _ in range(2):  # still there a while later: it serves until Ctrl-C
            page = requests.get(url, timeout=HANG_S)
            assert (
                page.status_code == 200
                and "--kv-cache-memory-bytes 6442450944 -&gt; 53687091200" in page.text
            )
            assert page.text.count('<figure class="chart"') == 6
            time.sleep(1.0)
        history = requests.get(url + "history", timeout=HANG_S).text
        assert "still advised" in history  # the advice given while the session played
    finally:
        p.send_signal(signal.SIGINT)  # Ctrl-C
        p.wait(timeout=20)
    assert p.returncode == 0


@pytest.mark.parametrize(
    "cmd",
    [
        [],
        ["explain"],
        ["inspect"],
        ["run"],
        ["record"],
        ["rules"],
        ["rules", "check"],
        ["compare"],
        ["history"],
        ["baseline", "save"],
        ["generate"],
        ["demo"],
        ["config", "sample"],
        ["config", "check"],
    ],
)
def test_every_command_has_help(cmd: list[str]) -> None:
    res = CliRunner().invoke(main, [*cmd, "--help"])
    assert res.exit_code == 0 and "Usage:" in res.output


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    out: list[tuple[tuple[str, ...], click.Command]] = []
    ctx = click.Context(group)  # the top group loads its commands when asked (advisor/cli/__init__.py)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None, name
        out.append(((*path, name), cmd))
        if isinstance(cmd, click.Group):
            out.extend(_commands(cmd, (*path, name)))
    return out


def test_every_option_of_every_command_says_what_it_is_for() -> None:
    missing = [
        f"{' '.join(path)} {param.opts[0]}"
        for path, cmd in _commands(main)
        for param in cmd.params
        if isinstance(param, click.Option) and not param.help
    ]
    assert missing == []
    assert len(_commands(main)) >= 15  # the walk reached the subcommands


def test_record_a_session_from_a_server(tmp_path: Path) -> None:
    """The stand-in serves real pages recorded from vLLM 0.25 (a server that is not here).
    Several pages, and none the stand-in did not serve: how many fit in the duration is the
    machine's (a make test beside other work got 2 of the 4-5 an idle machine gets in 2 s)."""
    standin = StandIn(session_pages(DEMO_SESSION))
    out = tmp_path / "rec"
    with serve(standin) as url:
        res = CliRunner().invoke(
            main, ["record", "--url", url, "--duration", "3s", "--interval", "0.5s", "--out", str(out)]
        )
    assert res.exit_code == 0, res.output
    assert "recorded" in res.output
    s = Session.load(out)
    assert 2 <= len(s.scrapes) <= standin.i and s.meta["url"] == url
    res = CliRunner().invoke(main, ["record", "--url", url, "--duration", "1s", "--out", str(out)])
    assert res.exit_code == 1 and "already holds a session" in res.output


def test_explain_daemon_reads_a_running_advisor(tmp_path: Path) -> None:
    standin = StandIn(session_pages(DEMO_SESSION))
    t = [1_800_000_000.0]
    with serve(standin) as url:
        d = Daemon(
            Config(vllm_url=url, listen="127.0.0.1:0", state_dir=str(tmp_path)),
            load_rules(),
            clock=lambda: t[0],
        )
        host, port = d.serve()
        try:
            for _ in range(len(standin.pages) - 4):
                t[0] += 2
                d.cycle()
            res = CliRunner().invoke(
                main, ["explain", "--daemon", f"http://{host}:{port}", "--format", "json"]
            )
            text = CliRunner().invoke(main, ["explain", "--daemon", f"http://{host}:{port}"])
        finally:
            d.stop()
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["recommendation"]["knob"] == "kv_cache_memory_bytes"
    assert text.output.startswith("CHANGE  --kv-cache-memory-bytes")
    res = CliRunner().invoke(main, ["explain", "--daemon", "http://127.0.0.1:9"])
    assert res.exit_code == 1 and "cannot read the advisor daemon" in res.output


def test_explain_lists_other_findings_with_their_state_and_never_an_empty_list() -> None:
    """Real CPU session: the chosen rule is not repeated under "Other findings", the others carry
    their state ("[firing]" is printed, not eaten as terminal markup); with no other finding
    (the H200 demo session) the heading is not printed at all."""
    sessions = FIXTURES / "sessions"
    res = CliRunner().invoke(main, ["explain", "--session", str(sessions / "cpu-preempt-binds")])
    assert res.exit_code == 0, res.output
    other = res.output.split("Other findings:", 1)[1]
    assert "  - kv-capacity-below-context [firing]" in other
    assert "kv-preemption-seqs-bind" not in other
    demo = CliRunner().invoke(main, ["explain", "--session", str(DEMO_SESSION)])
    assert demo.exit_code == 0 and "Other findings" not in demo.output


def test_the_bundled_session_kv_advice_names_the_free_memory_from_its_log() -> None:
    """Its log says how much device memory is left after start-up (107 GiB): the KV the load
    needs at its requests' full lengths (256 clients of ~1.5k tokens: 48.5 GiB, rounded up to 50)
    fits in it, and the simulator weighs it against the rule's step (6 -> 9 GiB)."""
    res = CliRunner().invoke(main, ["explain", "--session", str(DEMO_SESSION)])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "--kv-cache-memory-bytes 6442450944 -> 53687091200" in text
    assert (
        "The device has 107 GiB free after start-up; the batch the load offers needs 48.5 GiB of KV at "
        "its requests' full lengths: that size is weighed against the rule's step by simulated goodput"
    ) in text
    assert "free memory is unknown" not in text


def test_version_from_a_source_tree_without_installing(tmp_path: Path) -> None:
    """The GPU rig runs the advisor from its source tree on PYTHONPATH, with no distribution
    metadata: --version still answers (it once died with "'vllm-advisor' is not installed")."""
    deps = tmp_path / "deps"
    deps.mkdir()
    for name in ("click", "yaml", "structlog", "prometheus_client", "requests", "urllib3", "idna",
                 "certifi", "charset_normalizer", "rich", "markdown_it", "mdurl", "pygments", "psutil"):  # fmt: skip
        mod = importlib.import_module(name)
        assert mod.__file__ is not None
        (deps / name).symlink_to(Path(mod.__file__).parent)
    p = subprocess.run(
        [sys.executable, "-S", "-m", "advisor.cli", "--version"],  # -S: no site-packages, no metadata
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard only
        env={"PYTHONPATH": f"{Path(__file__).resolve().parents[2]}:{deps}", "PATH": "/usr/bin:/bin"},
    )
    assert p.returncode == 0, p.stderr
    version = re.search(
        r'^version = "([^"]+)"$', (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(), re.M
    )
    assert version is not None and p.stdout.strip().endswith(f", version {version[1]}")
