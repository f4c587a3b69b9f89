"""The Kubernetes manifests parse and agree with each other: ports, selectors, the
ServiceMonitor's endpoints, and the PrometheusRule carries exactly the generated rule groups."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from advisor import generate as gen
from advisor.outputs import alerts

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "kubernetes"


def _docs() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            assert isinstance(doc, dict) and doc.get("apiVersion") and doc.get("kind"), path
            assert doc["metadata"].get("name"), path
            out[doc["kind"]] = doc
    return out


def test_all_kinds_are_there() -> None:
    assert set(_docs()) == {"ConfigMap", "Deployment", "Service", "ServiceMonitor", "PrometheusRule"}


def test_service_targets_named_container_ports_and_selects_the_pods() -> None:
    docs = _docs()
    pod = docs["Deployment"]["spec"]["template"]
    container_ports = {
        p["name"]: p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", [])
    }
    svc = docs["Service"]["spec"]
    assert {p["targetPort"] for p in svc["ports"]} == set(container_ports)
    for p in svc["ports"]:
        assert p["port"] == container_ports[p["targetPort"]]
    labels = pod["metadata"]["labels"]
    assert svc["selector"].items() <= labels.items()
    assert docs["Deployment"]["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_servicemonitor_selects_the_service_and_its_port_names() -> None:
    docs = _docs()
    sm, svc = docs["ServiceMonitor"]["spec"], docs["Service"]
    assert sm["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    port_names = {p["name"] for p in svc["spec"]["ports"]}
    jobs = {}
    for ep in sm["endpoints"]:
        assert ep["port"] in port_names
        job = next(r["replacement"] for r in ep["relabelings"] if r["targetLabel"] == "job")
        jobs[job] = ep["port"]
        assert any(r["targetLabel"] == "instance" for r in ep["relabelings"])
    assert set(jobs) == {alerts.VLLM_JOB, alerts.ADVISOR_JOB}


def test_sidecar_follows_the_file_vllm_logs_to() -> None:
    import json

    docs = _docs()
    spec = docs["Deployment"]["spec"]["template"]["spec"]
    vllm, advisor = (next(c for c in spec["containers"] if c["name"] == n) for n in ("vllm", "vllm-advisor"))
    env = {e["name"]: e["value"] for e in vllm["env"]}
    config_mount = next(m for m in vllm["volumeMounts"] if m["name"] == "vllm-logging")
    assert env["VLLM_LOGGING_CONFIG_PATH"].startswith(config_mount["mountPath"] + "/")
    logging_cfg = json.loads(docs["ConfigMap"]["data"][Path(env["VLLM_LOGGING_CONFIG_PATH"]).name])
    log_file = logging_cfg["handlers"]["file"]["filename"]
    shared = {m["name"]: m["mountPath"] for m in vllm["volumeMounts"]}
    for m in advisor["volumeMounts"]:
        assert shared[m["name"]] == m["mountPath"]
        assert log_file.startswith(m["mountPath"] + "/")
    assert f"--log-file {log_file}" in " ".join(advisor["command"])
    assert any(v["name"] == "vllm-logs" and "emptyDir" in v for v in spec["volumes"])


def test_prometheusrule_has_exactly_the_generated_groups() -> None:
    rule = _docs()["PrometheusRule"]
    committed = yaml.safe_load((ROOT / gen.RULES_FILE).read_text())
    assert rule["spec"] == committed
