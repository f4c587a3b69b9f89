"""The desired replicas as exported: the sidecar's series for its server, the fleet daemon's per
deployment (no instance label: Prometheus adds the fleet daemon's own), the JSON endpoints."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest
import requests
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from advisor.diagnose.advise import Diagnosis
from advisor.diagnose.ruleset import load_rules
from advisor.outputs import exporter
from advisor.outputs import fleet as fleet_out
from advisor.outputs.state import Deployment, ExportState, FleetState, Member, Server
from advisor.predict import replicas as rp
from tests.hang import HANG_S


def _desired(desired: int = 3, needed: int = 3, knob_first: bool = False, meets: bool = True) -> rp.Desired:
    s = rp.Sizing(
        2, needed, meets, knob_first, "why", tuple(rp.Point(r, 4.0 / r, 0.02 + 0.01 / r) for r in range(1, 6))
    )
    h = rp.Hold(60.0)
    if desired > needed:
        h.update(0.0, rp.Sizing(2, desired, True, False, "before", s.curve))
    d = h.update(10.0, s)
    assert d is not None and d.desired == desired
    return d


def _fams(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {
        f.name: [(dict(s.labels), s.value) for s in f.samples] for f in text_string_to_metric_families(text)
    }


def _diag() -> Diagnosis:
    return Diagnosis("healthy", "no rule fired", None, (), {}, {"model": "m"}, 0.0, {})


def test_the_sidecar_exports_its_desired_count_and_the_latencies_at_it() -> None:
    st = ExportState(_diag(), True, tuple(load_rules()), replicas=_desired(3, 2))
    fams = _fams(generate_latest(exporter.make_registry(lambda: st)).decode())
    assert fams["vllm_advisor_desired_replicas"] == [({"model_name": "m"}, 3.0)]
    assert fams["vllm_advisor_current_replicas"] == [({"model_name": "m"}, 2.0)]
    ttft = {s["at"]: v for s, v in fams["vllm_advisor_desired_replicas_predicted_ttft_p95_seconds"]}
    assert ttft == pytest.approx({"desired": 4.0 / 3, "one_fewer": 2.0})
    itl = {s["at"]: v for s, v in fams["vllm_advisor_desired_replicas_predicted_itl_p95_seconds"]}
    assert itl == pytest.approx({"desired": 0.02 + 0.01 / 3, "one_fewer": 0.025})
    basis = {s["basis"]: v for s, v in fams["vllm_advisor_desired_replicas_basis"]}
    assert basis == {"targets": 1.0, "knob_first": 0.0, "no_queue": 0.0, "idle": 0.0}


def test_no_count_exports_no_series() -> None:
    st = ExportState(_diag(), True, tuple(load_rules()))
    fams = _fams(generate_latest(exporter.make_registry(lambda: st)).decode())
    assert not any(name.startswith("vllm_advisor_desired_replicas") for name in fams)


@pytest.mark.parametrize(
    ("desired", "basis"),
    [
        (_desired(2, 2, knob_first=True), "knob_first"),
        (_desired(1, 1, meets=False), "no_queue"),
        (rp.Desired(1, rp.idle(2), None, None, False), "idle"),
    ],
)
def test_the_basis_says_what_the_count_rests_on(desired: rp.Desired, basis: str) -> None:
    assert exporter.replicas_basis(desired) == basis


def test_the_fleet_exports_one_count_per_deployment_without_an_instance() -> None:
    rules = tuple(load_rules())
    members = tuple(
        Member(Server(i, "vllm", ("m",), (), "prod", "vllm"), ExportState(_diag(), True, rules))
        for i in ("a:8000", "b:8000")
    )
    deps = (
        Deployment("m", "prod", "vllm", "vllm", ("a:8000", "b:8000"), 2, _desired(3, 3)),
        Deployment("other", "", "vllm", "", ("c:8000",), 1, None),  # unknown: no series
    )
    st = FleetState(members=members, prometheus_up=True, deployments=deps)
    fams = _fams(generate_latest(fleet_out.make_registry(lambda: st)).decode())
    assert fams["vllm_advisor_desired_replicas"] == [
        (
            {
                "model_name": "m",
                "namespace": "prod",
                "job": "vllm",
                "service": "vllm",
                "vllm_advisor": "fleet",
            },
            3.0,
        )
    ]
    body = fleet_out.fleet_json(st)
    assert [(d["model_name"], d["replicas"] and d["replicas"]["desired"]) for d in body["deployments"]] == [
        ("m", 3),
        ("other", None),
    ]
    page = fleet_out.landing_page(st)
    assert "Replicas" in page and "namespace=prod" in page


@pytest.fixture
def sidecar() -> Iterator[str]:
    st = ExportState(_diag(), True, tuple(load_rules()), replicas=_desired(3, 2))
    srv = exporter.make_server("127.0.0.1", 0, lambda: st)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_the_replicas_endpoint(sidecar: str) -> None:
    body = requests.get(f"{sidecar}/api/v1/replicas", timeout=HANG_S).json()
    r = body["replicas"]
    assert (r["desired"], r["needed"], r["current"], r["held"]) == (3, 2, 2, True)
    assert r["predicted_at_desired"]["replicas"] == 3
    json.dumps(body)
