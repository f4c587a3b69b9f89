"""``/readyz`` (issue 33): 503 with a JSON body naming why while the advice cannot be trusted
(no evaluation yet, too short a window, vLLM down, an engine warming up, data gone stale), 200
when it can; ``/healthz`` stays 200 throughout (liveness).

The vLLM side is the stand-in of tests/vllm_standin.py serving pages recorded from a real vLLM
0.25 server on an H200 (the advice needs a GPU's load; a real server cannot be made to stall
on demand); the daemon, its exporter and the HTTP requests are real."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import requests

from advisor.cli.common import DEMO_SESSION
from advisor.drive.daemon import Daemon
from advisor.outputs import deploy
from advisor.outputs import fleet as fleet_out
from advisor.outputs.state import FleetState
from tests.daemon_helpers import Clock, make, run_cycles
from tests.paths import FIXTURES
from tests.vllm_standin import StandIn, serve, session_pages


def probe(d: Daemon, path: str = "/readyz") -> tuple[int, dict[str, Any]]:
    host, port = d.server.server_address[:2]
    r = requests.get(f"http://{host}:{port}{path}", timeout=30)  # a hang guard
    return r.status_code, r.json()


def test_readyz_follows_whether_the_advice_can_be_trusted(tmp_path: Path) -> None:
    standin = StandIn(session_pages(DEMO_SESSION))
    clock = Clock()
    with serve(standin) as url:
        d = make(url, tmp_path, clock)
        d.serve()
        try:
            code, body = probe(d)
            assert (code, body["why"], body["ready"]) == (503, "starting", False), body
            run_cycles(d, clock, 2)
            code, body = probe(d)
            assert (code, body["why"]) == (503, "window-too-short"), body
            assert "need 20s" in body["reason"]
            run_cycles(d, clock, len(standin.pages) - 6)
            code, body = probe(d)
            assert (code, body["ready"], body["status"]) == (200, True, "advice"), body
            assert body["why"] is None
            # the cycle stalls (no scrape for longer than two intervals): the data is stale
            clock.t += 60
            code, body = probe(d)
            assert (code, body["why"]) == (503, "stale"), body
            assert probe(d, "/healthz")[0] == 200
            # a restart: the counters start again from a fresh server's pages
            standin.pages, standin.i = session_pages(FIXTURES / "sessions" / "h200-C_b2048")[:3], 0
            run_cycles(d, clock, 2)
            code, body = probe(d)
            assert (code, body["why"]) == (503, "warming-up"), body
        except BaseException:
            d.stop()
            raise
    run_cycles(d, clock, 1)  # the stand-in is gone: vLLM is down
    try:
        code, body = probe(d)
        assert (code, body["why"], body["vllm_up"]) == (503, "vllm-down", False), body
        assert "cannot be read" in body["reason"]
        code, health = probe(d, "/healthz")
        assert code == 200 and health["ok"] is True and health["vllm_up"] is False
    finally:
        d.stop()


def test_the_fleets_readyz_is_about_prometheus_not_one_server() -> None:
    ok, body = fleet_out.fleet_readiness(FleetState())
    assert (ok, body["why"]) == (False, "starting")
    ok, body = fleet_out.fleet_readiness(FleetState(cycles=3, prometheus_up=False, last_error="refused"))
    assert (ok, body["why"], body["reason"]) == (False, "prometheus-down", "refused")
    ok, body = fleet_out.fleet_readiness(FleetState(cycles=3, prometheus_up=True))
    assert ok and body["why"] is None and body["servers"] == {}


def test_the_manifests_probe_readiness_where_it_cannot_hold_back_vllm() -> None:
    """The fleet advisor (its own pod) is ready on /readyz and live on /healthz; the sidecar is
    not probed on /readyz: a pod is ready only when every container is, and vLLM's traffic must
    not wait for the advisor's window (which needs that traffic)."""
    fleet = next(doc for doc in deploy.k8s_fleet() if doc["kind"] == "Deployment")
    (c,) = fleet["spec"]["template"]["spec"]["containers"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    pod = deploy.k8s_deployment()["spec"]["template"]["spec"]["containers"]
    advisor = next(x for x in pod if x["name"] == "vllm-advisor")
    assert advisor["readinessProbe"]["httpGet"]["path"] != "/readyz"
