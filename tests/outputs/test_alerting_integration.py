"""End to end with the real things: Debian's Prometheus and Alertmanager, the real advisor
daemon replaying a recorded preemption session (``vllm-advisor run --replay``), and the
generated rules, alertmanager routing, scrape config and dashboards.

Stand-ins, and why:

- vLLM itself: a small HTTP server in this test serves the *recorded* /metrics pages of the
  same session, in order, at the same speed as the daemon's replay (the daemon's replay does
  not re-export raw ``vllm:`` series). It holds the last page once the session ends.
- the alert receiver: a small HTTP server in this test stands in for the webhook.

The generated rules are loaded with one change: the rule alerts' ``for: 1m`` becomes ``1s``
and the recording group's interval ``1s``, to keep this test short. Both sides of ``for:``
are covered by the promtool unit tests (tests/outputs/test_promtool.py); this test covers the path:
the alert expressions read the daemon's real series, the annotations template from real
labels, Alertmanager routes on severity to the webhook, every PromQL of the rules and the
dashboards parses, and every dashboard panel has data after the scenario.
"""

from __future__ import annotations

import http.server
import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from advisor.core.config import Config
from advisor.diagnose.ruleset import load_rules
from advisor.drive import generate as gen
from advisor.drive.inputs import from_session
from advisor.outputs import alert_config, dashboards
from advisor.outputs.deploy import WEBHOOK_BASE
from advisor.sources.session import Session
from tests.hang import HANG_S
from tests.http_standin import QuietServer
from tests.paths import REPO
from tests.promstack import alertmanager_argv, prometheus_argv

SESSION = REPO / "tests" / "fixtures" / "sessions" / "cpu-preempt-nobind"
SPEED = 8.0
# one worker runs both tests: the stack (Prometheus, Alertmanager, the advisor's replay) is started
# once, and the panels' test finds the scenario the alert's test waited for
pytestmark = [pytest.mark.prometheus, pytest.mark.xdist_group("alerting-stack")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(handler: type[http.server.BaseHTTPRequestHandler]) -> tuple[QuietServer, int]:
    srv = QuietServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, int(srv.server_address[1])


def _pages_server(pages: list[tuple[float, str]], start: float) -> tuple[QuietServer, int]:
    t0 = pages[0][0]

    class Pages(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            elapsed = (time.monotonic() - start) * SPEED
            text = pages[0][1]
            for t, page in pages:
                if t - t0 <= elapsed:
                    text = page
            body = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    return _serve(Pages)


def _webhook() -> tuple[QuietServer, int, list[tuple[str, dict[str, Any]]]]:
    got: list[tuple[str, dict[str, Any]]] = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            n = int(self.headers.get("Content-Length", "0"))
            got.append((self.path, json.loads(self.rfile.read(n))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    srv, port = _serve(Hook)
    return srv, port, got


def _wait(what: str, fn: Any, timeout: float, procs: list[subprocess.Popen[bytes]]) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            assert p.poll() is None, f"{p.args[0]} exited with {p.returncode} while waiting for {what}"
        try:
            v = fn()
            if v:
                return v
        except requests.RequestException:
            pass
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def _test_rules(tmp: Path) -> Path:
    text = (REPO / gen.RULES_FILE).read_text()
    text = text.replace(f"    for: {alert_config.ALERT_FOR}\n", "    for: 1s\n").replace(
        "  interval: 30s\n", "  interval: 1s\n"
    )
    path = tmp / "rules.yaml"
    path.write_text(text)
    return path


def _prometheus_config(tmp: Path, vllm: int, advisor: int, am: int, rules: Path) -> Path:
    cfg = yaml.safe_load((REPO / "deploy/prometheus/prometheus.yml").read_text())
    cfg["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"}
    cfg["rule_files"] = [str(rules)]
    cfg["alerting"]["alertmanagers"][0]["static_configs"] = [{"targets": [f"127.0.0.1:{am}"]}]
    ports = {alert_config.VLLM_JOB: vllm, alert_config.ADVISOR_JOB: advisor}
    for job in cfg["scrape_configs"]:
        job["static_configs"] = [{"targets": [f"127.0.0.1:{ports[job['job_name']]}"]}]
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _alertmanager_config(tmp: Path, hook: int) -> Path:
    cfg = yaml.safe_load((REPO / "deploy/alertmanager/alertmanager.yml").read_text())
    cfg["route"].update({"group_wait": "0s", "group_interval": "1s"})
    for r in cfg["receivers"]:
        for w in r["webhook_configs"]:
            w["url"] = w["url"].replace(alerts_webhook_base(), f"http://127.0.0.1:{hook}")
    path = tmp / "alertmanager.yml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def alerts_webhook_base() -> str:

    return WEBHOOK_BASE


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("alerting")
    session = Session.load(SESSION)
    pages = [(i.t, i.text) for i in session.replay() if i.kind == "scrape" and i.t is not None]
    procs: list[subprocess.Popen[bytes]] = []
    servers: list[QuietServer] = []
    logs = []
    try:
        hook_srv, hook_port, received = _webhook()
        servers.append(hook_srv)
        advisor_port, prom_port, am_port = _free_port(), _free_port(), _free_port()

        def start(name: str, *args: str) -> subprocess.Popen[bytes]:
            log = (tmp / f"{name}.log").open("wb")
            logs.append(log)
            p = subprocess.Popen(list(args), stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
            procs.append(p)
            return p

        am = start(
            "alertmanager", *alertmanager_argv(_alertmanager_config(tmp, hook_port), tmp / "am", am_port)
        )
        exe = str(Path(sys.executable).parent / "vllm-advisor")
        start(
            "advisor",
            exe,
            "run",
            "--replay",
            str(SESSION),
            "--speed",
            str(SPEED),
            "--listen",
            f"127.0.0.1:{advisor_port}",
            "--run-seconds",
            "150",
        )
        vllm_srv, vllm_port = _pages_server(pages, time.monotonic())
        servers.append(vllm_srv)
        prom_cfg = _prometheus_config(tmp, vllm_port, advisor_port, am_port, _test_rules(tmp))
        prom = start("prometheus", *prometheus_argv(prom_cfg, tmp / "tsdb", prom_port, lookback="15s"))
        base = f"http://127.0.0.1:{prom_port}"
        _wait("prometheus ready", lambda: requests.get(f"{base}/-/ready", timeout=1).ok, 30, [prom])
        _wait(
            "alertmanager ready",
            lambda: requests.get(f"http://127.0.0.1:{am_port}/-/ready", timeout=1).ok,
            30,
            [am],
        )
        yield {"prom": base, "received": received, "procs": procs, "tmp": tmp}
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        for s in servers:
            s.shutdown()
            s.server_close()
        for log in logs:
            log.close()


def _query(base: str, expr: str) -> list[dict[str, Any]]:
    r = requests.get(f"{base}/api/v1/query", params={"query": expr}, timeout=HANG_S)
    body = r.json()
    assert r.ok and body["status"] == "success", f"{expr}: {body.get('error')}"
    return list(body["data"]["result"])


def test_the_recommendation_reaches_the_webhook_with_the_knob_hint(stack: dict[str, Any]) -> None:
    _, diagnosis = from_session(SESSION, Config(), load_rules())
    assert diagnosis is not None and diagnosis.recommendation is not None
    rec = diagnosis.recommendation
    rule = next(r for r in load_rules() if r.id == rec.rule)

    def delivered() -> list[dict[str, Any]]:
        return [
            a
            for path, msg in stack["received"]
            for a in msg["alerts"]
            if a["labels"]["alertname"] == rule.alert
            and a["status"] == "firing"
            and path.endswith("/" + rule.severity)
        ]

    got = _wait(f"{rule.alert} at the webhook", delivered, 60, stack["procs"])
    alert = got[0]
    assert alert["labels"]["severity"] == rule.severity
    assert alert["labels"]["knob"] == rec.knob and alert["labels"]["direction"] == rec.direction
    ann = alert["annotations"]
    assert ann["summary"] == rule.summary
    assert f"{rec.direction} {rec.knob}" in ann["description"]
    assert f"{rec.current} -> {rec.proposed}" in ann["description"]
    assert f"vllm serve {rec.flag} {rec.proposed}" in ann["description"]
    assert ann["runbook_url"] == alert_config.runbook_url(rule.id)
    assert ann["dashboard_url"].endswith(f"?var-instance={alert['labels']['instance']}")
    assert "{{" not in json.dumps(ann)
    # only the chosen rule pages, though others hold too (e.g. kv-capacity-below-context)
    names = {a["labels"]["alertname"] for _, msg in stack["received"] for a in msg["alerts"]}
    assert names == {rule.alert}


def _substitute(expr: str) -> str:
    return (
        expr.replace("$__rate_interval", "1m")
        .replace("$vllm_job", alert_config.VLLM_JOB)
        .replace("$job", alert_config.ADVISOR_JOB)
        .replace("$instance", "127.0.0.1")
        .replace("$model_name", ".*")
    )


def test_every_rule_and_dashboard_query_parses_and_panels_have_data(stack: dict[str, Any]) -> None:
    base = stack["prom"]
    # wait until the scenario is over (the alert test ran first) and rules have evaluated
    _wait(
        "recording rules", lambda: _query(base, "instance_model:vllm_preemptions:rate5m"), 60, stack["procs"]
    )
    groups = yaml.safe_load((REPO / gen.RULES_FILE).read_text())["groups"]
    for g in groups:
        for r in g["rules"]:
            _query(base, r["expr"])
    health = requests.get(f"{base}/api/v1/rules", timeout=HANG_S).json()["data"]["groups"]
    bad = [(r["name"], r.get("lastError")) for g in health for r in g["rules"] if r.get("health") == "err"]
    assert not bad, bad

    # every panel has data once Prometheus has scraped the advisor's series too (its replay
    # starts behind vLLM's pages); asked until then, up to a minute, and the empty ones named
    deadline = time.monotonic() + 60
    empty = _empty_panels(base)
    while empty and time.monotonic() < deadline:
        time.sleep(1)
        empty = _empty_panels(base)
    assert not empty, "panels without data:\n" + "\n".join(empty)


def _empty_panels(base: str) -> list[str]:
    empty = []
    for rel in (gen.SERVER_DASHBOARD_FILE, gen.FLEET_DASHBOARD_FILE):
        dash = json.loads((REPO / rel).read_text())
        for where, expr in dashboards.dashboard_queries(dash):
            result = _query(base, _substitute(expr))
            if not result and not where.startswith("annotation"):
                empty.append(f"{rel} {where}: {expr}")
        for var in dash["templating"]["list"]:
            if var["type"] != "query":
                continue
            m = re.fullmatch(r"label_values\((.+), (\w+)\)", var["definition"])
            assert m, var["definition"]
            series = _query(base, _substitute(m.group(1)))
            if not any(m.group(2) in s["metric"] for s in series):
                empty.append(f"{rel} variable {var['name']}: {var['definition']}")
    return empty
