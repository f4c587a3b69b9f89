"""Desired replicas from the fleet daemon on a real Prometheus (Debian's), for a deployment of two
replicas under rising, then falling load; and the autoscaler recipes' queries answered by it.

The two vLLM servers and their sidecars are stand-ins (tests/fleet_standin.py): each server replays
tests/fixtures/sessions/cpu-load-steps, a real vLLM CPU server recorded under a closed loop of
clients stepping 2 -> 6 -> 16 -> 6 -> 2 (the second a few recorded seconds ahead of the first):
two servers under a load that rises and falls, behind one balancer, cannot be run here; each
sidecar serves what the real sidecar exporter exports for that session (the server's knobs, from
its command line). The servers are scraped as the Prometheus Operator scrapes a Service's pods (labels namespace and service).
The replay runs SPEED times faster than recorded, and every duration of the advisor (window,
rule holds, warm-up, staleness, the scale-in hold) is divided by SPEED with it, so the advisor
sees the recording's time scale."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from advisor.core.config import Config
from advisor.diagnose.ruleset import load_rules
from advisor.drive.fleet import Fleet, Runner
from advisor.outputs import deploy
from advisor.outputs.exporter import replicas_basis
from advisor.sources import prometheus as prom
from tests import fleet_standin
from tests.drive.test_fleet import _sidecar_page
from tests.drive.test_replicas_replay import STEPS, TARGETS, clients_at, phases
from tests.hang import HANG_S
from tests.outputs.test_autoscaling import render_adapter_query
from tests.promstack import free_port, prometheus, query

SPEED = 3.0
HOLD_S = 30.0  # recorded seconds (the default, 5 minutes, would outlast the recording)
AHEAD_S = 3.0  # recorded seconds replica b runs ahead of a
REPLICAS = 2


def _fleet_metrics(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=HANG_S).text
    return {
        f.name: [(dict(s.labels), s.value) for s in f.samples] for f in text_string_to_metric_families(text)
    }


@pytest.mark.prometheus
def test_desired_replicas_of_a_deployment_rise_and_fall_on_a_real_prometheus(tmp_path: Path) -> None:
    ph = phases(STEPS)
    load0 = fleet_standin.idle_s(STEPS)  # recorded seconds to the load's start
    duration = ph[-1][1] + load0 + 10.0  # recorded seconds to replay
    start = time.time() + 3600.0  # set once Prometheus and the fleet daemon run: until then, page 0
    sidecar = _sidecar_page(STEPS)
    replays = {
        "a": fleet_standin.session_replay(STEPS, SPEED, start),
        "b": fleet_standin.session_replay(STEPS, SPEED, start - AHEAD_S / SPEED),
        # each server's sidecar: what the real sidecar exports for it (its knobs, read from the
        # server's command line: max_num_seqs 4), which the fleet daemon reads through Prometheus
        "a-sidecar": fleet_standin.Replay([sidecar], [0.0]),
        "b-sidecar": fleet_standin.Replay([sidecar], [0.0]),
    }
    cfg = Config(
        interval_s=1.0,
        window_s=60.0 / SPEED,
        min_window_s=20.0 / SPEED,
        warmup_s=30.0 / SPEED,
        stale_after_s=max(30.0 / SPEED, 5.0),
        observe_after_change_s=300.0 / SPEED,
        scale_in_hold_s=HOLD_S / SPEED,
        targets=dict(TARGETS),
        listen="127.0.0.1:0",
        state_dir=str(tmp_path / "state"),
    )
    rules = [replace(r, for_s=r.for_s / SPEED) for r in load_rules()]
    ticks: list[dict[str, Any]] = []
    with fleet_standin.serve(replays) as base:
        vllm_job = fleet_standin.scrape_config("vllm", base, ["a", "b"], lambda n: f"{n}.vllm:8000")
        sidecar_job = fleet_standin.scrape_config(
            "vllm-advisor", base, ["a-sidecar", "b-sidecar"], lambda n: f"{n[0]}.vllm:19842"
        )
        for target in vllm_job["static_configs"]:  # as the Prometheus Operator labels a Service's pods
            target["labels"].update(namespace=deploy.EXAMPLE_NAMESPACE, service=deploy.APP_NAME)
        fleet_port = free_port()
        fleet_job = {
            "job_name": "vllm-advisor-fleet",
            "honor_labels": True,
            "static_configs": [{"targets": [f"127.0.0.1:{fleet_port}"]}],
        }
        with prometheus(tmp_path, {}, scrape_configs=[vllm_job, sidecar_job, fleet_job]) as (prom_url, proc):
            fleet = Fleet(cfg, rules, prom.Client(prom_url), '{job="vllm"}')
            runner = Runner(fleet, f"127.0.0.1:{fleet_port}")
            runner.start()
            start = time.time()
            replays["a"].start, replays["b"].start = start, start - AHEAD_S / SPEED
            keda_query = deploy.desired_replicas_query()
            adapter_rule = deploy.prometheus_adapter_config()["externalRules"][0]
            hpa_selector = deploy.k8s_hpa()["spec"]["metrics"][0]["external"]["metric"]["selector"]
            adapter_query = render_adapter_query(
                adapter_rule, {**hpa_selector["matchLabels"], "namespace": deploy.EXAMPLE_NAMESPACE}
            )
            try:
                while (time.time() - start) * SPEED < duration:
                    assert proc.poll() is None
                    t = (time.time() - start) * SPEED - load0  # recorded seconds since the load began
                    deps = fleet.state().deployments
                    r = deps[0].replicas if len(deps) == 1 else None
                    advised = {
                        m.state.diagnosis.recommendation.knob
                        for m in fleet.state().members
                        if m.state.diagnosis is not None
                        and m.state.diagnosis.status == "advice"
                        and m.state.diagnosis.recommendation is not None
                    }
                    ticks.append(
                        {
                            "t": t,
                            "clients": clients_at(ph, t),
                            "deployments": len(deps),
                            "up": deps[0].up if deps else 0,
                            "desired": r.desired if r else None,
                            "needed": r.sizing.needed if r else None,
                            "basis": replicas_basis(r) if r else None,
                            "advised": advised,
                        }
                    )
                    time.sleep(1.0)
                # what the autoscalers read: the fleet daemon's count, through Prometheus
                fams = _fleet_metrics(fleet_port)
                (labels, value), *_ = fams["vllm_advisor_desired_replicas"]
                assert labels == {
                    "model_name": "tiny-llama",
                    "namespace": deploy.EXAMPLE_NAMESPACE,
                    "job": "vllm",
                    "service": deploy.APP_NAME,
                    "vllm_advisor": "fleet",
                }
                for expr in (keda_query, adapter_query):
                    got = query(prom_url, expr)
                    assert len(got) == 1, (expr, got)
                    assert float(got[0]["value"][1]) == value, (expr, got, value)
                # and the peak of the run, as Prometheus stored the series the autoscalers poll
                run_s = int(time.time() - start) + 1
                peak = query(prom_url, f"max_over_time(({keda_query})[{run_s}s:1s])")
                assert float(peak[0]["value"][1]) == max(x["desired"] or 0 for x in ticks)
            finally:
                runner.stop()
    _check(ticks)


def _check(ticks: list[dict[str, Any]]) -> None:
    seen = [x for x in ticks if x["desired"] is not None]
    shown = [(round(x["t"]), x["clients"], x["desired"], x["needed"], x["basis"]) for x in ticks]
    assert all(x["deployments"] == 1 for x in seen), "both servers are one deployment"
    assert all(x["up"] == REPLICAS for x in seen if x["t"] > 10), shown
    low = [x["desired"] for x in seen if 20 <= x["t"] < 40]  # 2 clients each
    peak = [x["desired"] for x in seen if 160 <= x["t"] < 215]  # 16 clients each, a window in
    # two servers with two clients each: no more replicas than there are (one may carry both)
    assert low and max(low) <= REPLICAS, shown
    # sixteen clients each: more replicas than there are, and the most of the run
    assert peak and min(peak) > REPLICAS, shown
    assert max(peak) == max(x["desired"] for x in seen), shown
    # back at six clients each: the knob comes first, and the count falls to the replicas there are
    first = [x for x in seen if x["basis"] == "knob_first"]
    assert first and all(x["needed"] == REPLICAS and "max_num_seqs" in x["advised"] for x in first), shown
    assert any(x["desired"] == REPLICAS and x["t"] >= 215 for x in first), shown
    # no scale-in before the hold: a lower count only once every count needed over the hold
    # (less a tick of slack, the ticks and the daemon's cycles are not in step) was no higher
    prev = None
    for x in seen:
        if prev is not None and x["desired"] < prev:
            hold = [y["needed"] for y in seen if x["t"] - (HOLD_S - 3 * SPEED) <= y["t"] < x["t"]]
            assert all(n is None or n <= x["desired"] for n in hold), (x["t"], shown)
        prev = x["desired"]
    plateau = [x["desired"] for x in seen if 170 <= x["t"] < 215]
    assert plateau == sorted(plateau), shown
