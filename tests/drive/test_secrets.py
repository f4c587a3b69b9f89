"""Issue 23, class 6: a password in a URL's userinfo (``http://user:PASS@host``) never leaves the
advisor: not in the daemon's log, its /metrics, /api/v1/diagnosis (during an outage too),
/healthz, its page and state file; not in ``explain``'s errors, the fleet's log, state and
API, nor in a recorded session's files.

vLLM is a stand-in serving recorded real pages (tests/vllm_standin.py), or nothing at all (a
closed port: the outage); Prometheus is a closed port (an outage) or the stand-in of
tests/prom_standin.py. The secret is planted in every URL the advisor is given.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner

from advisor.cli import main
from advisor.core.config import Config
from advisor.core.log import configure_logging
from advisor.diagnose.ruleset import load_rules
from advisor.drive.daemon import Daemon
from advisor.drive.fleet import Fleet
from advisor.outputs import fleet as fleet_out
from advisor.sources import prometheus as prom
from tests import prom_standin
from tests.daemon_helpers import Clock, run_cycles
from tests.hang import HANG_S
from tests.paths import FIXTURES
from tests.promstack import free_port
from tests.vllm_standin import StandIn, serve, session_pages

SECRET = "Pa55-w0rd@corp"  # holds an "@": the userinfo ends at the last one
USER = "advisor"


def _with_secret(url: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{USER}:{SECRET}@{rest}"


def _clean(text: str, where: str) -> None:
    assert SECRET not in text and "w0rd" not in text, f"the password leaked into {where}"


def test_the_daemon_never_shows_a_url_password(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(json_logs=True)
    pages = session_pages(FIXTURES / "sessions" / "cpu-healthy")
    clock = Clock()
    surfaces: dict[str, str] = {}
    paths = ("/metrics", "/api/v1/diagnosis", "/healthz", "/readyz", "/")
    d: Daemon | None = None
    try:
        with serve(StandIn(pages)) as base:
            cfg = Config(
                vllm_url=_with_secret(base),
                listen="127.0.0.1:0",
                interval_s=2.0,
                scrape_timeout_s=1.0,
                state_dir=str(tmp_path / "state"),
            )
            d = Daemon(cfg, load_rules(), clock=clock)
            host, port = d.serve()
            run_cycles(d, clock, 3)
            for path in paths:
                surfaces[path] = requests.get(f"http://{host}:{port}{path}", timeout=HANG_S).text
        run_cycles(d, clock, 2)  # the stand-in is gone: an outage, whose errors name the URL
        for path in paths:
            surfaces[path + " (outage)"] = requests.get(f"http://{host}:{port}{path}", timeout=HANG_S).text
    finally:
        if d is not None:
            d.stop()
    outage = json.loads(surfaces["/api/v1/diagnosis (outage)"])
    assert outage["status"] == "insufficient-data"
    assert json.loads(surfaces["/readyz (outage)"])["why"] == "vllm-down"  # its reason names the URL
    for where, text in surfaces.items():
        _clean(text, where)
    _clean((tmp_path / "state" / "diagnosis.json").read_text(), "state/diagnosis.json")
    log = capsys.readouterr().err
    assert "scrape failed" in log and f"{USER}:<redacted>@" in log
    _clean(log, "the daemon's log")


@pytest.mark.parametrize(
    "args",
    [
        ["explain", "--url", "URL", "--window", "1s", "--interval", "0.5s"],
        ["explain", "--daemon", "URL"],
        ["explain", "--prometheus", "URL", "--instance", "x:8000"],
        ["inspect", "--url", "URL"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_errors_never_show_a_url_password(args: list[str]) -> None:
    url = _with_secret(f"http://127.0.0.1:{free_port()}")
    res = CliRunner().invoke(main, [url if a == "URL" else a for a in args])
    assert res.exit_code == 1, res.output
    assert "error:" in res.output and "127.0.0.1" in res.output, res.output
    _clean(res.output, " ".join(args[:2]))


def test_the_fleet_never_shows_a_prometheus_password(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(json_logs=True)
    url = _with_secret(f"http://127.0.0.1:{free_port()}")
    fleet = Fleet(Config(interval_s=1.0), load_rules(), prom.Client(url, timeout_s=1.0), "")
    for _ in range(3):
        st = fleet.cycle()
    assert not st.prometheus_up and "127.0.0.1" in (st.last_error or "")
    _clean(json.dumps(fleet_out.fleet_json(st)), "the fleet's /api/v1/diagnosis")
    _clean(fleet_out.landing_page(st), "the fleet's page")
    log = capsys.readouterr().err
    _clean(log, "the fleet's log")
    assert log.count("prometheus cycle failed") == 1  # one line per failure episode


def test_a_recorded_session_keeps_no_url_password(tmp_path: Path) -> None:
    pages = session_pages(FIXTURES / "sessions" / "cpu-healthy")
    out = tmp_path / "rec"
    with serve(StandIn(pages)) as base:
        res = CliRunner().invoke(
            main,
            [
                "record",
                "--url",
                _with_secret(base),
                "--duration",
                "1s",
                "--interval",
                "0.5s",
                "--out",
                str(out),
            ],
        )
    assert res.exit_code == 0, res.output
    _clean(res.output, "record's output")
    for f in out.rglob("*"):
        if f.is_file():
            _clean(f.read_bytes().decode("utf-8", errors="replace"), f"the session's {f.name}")


@pytest.mark.parametrize(
    "url",
    [
        f"http://{USER}:{SECRET}@127.0.0.1:8000",
        "http://hf_abcdefSECRETX@127.0.0.1:8000",  # a token as the user name
        "http://127.0.0.1:8000/?token=SECRETX",
    ],
)
def test_config_check_never_prints_a_url_password(tmp_path: Path, url: str) -> None:
    """Issue 34, G11: ``config check`` echoed vllm_url whole."""
    cfg = tmp_path / "advisor.yaml"
    cfg.write_text(f"vllm_url: {url}\n")
    res = CliRunner().invoke(main, ["config", "check", str(cfg)])
    assert res.exit_code == 0, res.output
    assert "OK" in res.output and "127.0.0.1:8000" in res.output
    assert SECRET not in res.output and "SECRETX" not in res.output


def test_instance_names_in_error_lines_are_escaped() -> None:
    """Issue 34, G17: an instance name from Prometheus (a label value: any text) with a newline
    and a terminal escape in it forged a second ``error:`` line; now one line, escaped."""
    evil = "a:1\nerror: forged\x1b[2J"
    samples, meta = prom_standin.stored_samples(FIXTURES / "sessions" / "cpu-healthy", evil)
    end = max(t for _, vals in samples for t, _ in vals)
    with prom_standin.serve(samples, meta, prom_standin.Behaviour()) as url:
        res = CliRunner().invoke(
            main,
            [
                "explain",
                "--prometheus",
                url,
                "--instance",
                "other:1",
                "--at",
                f"{end:.3f}",
                "--window",
                "120s",
            ],
        )
    assert res.exit_code == 1, res.output
    assert "a:1\\nerror: forged\\x1b[2J" in res.output, res.output
    assert res.output.count("error:") == 2 and "\x1b" not in res.output and res.output.count("\n") == 1
