"""The generated autoscaler recipes (deploy/kubernetes/autoscaling/) against the schemas of what
reads them: the HPA against Kubernetes' own (kubernetes-validate, strict), the ScaledObject
against KEDA's CRD (vendored, v2.20.1) with unknown fields refused as `kubectl apply
--validate=strict` refuses them, and its trigger against the keys KEDA's Prometheus scaler
reads; the adapter's ConfigMap against Kubernetes' schema and the config in it against
prometheus-adapter's config format (v0.12.0, read strictly).
Each check is shown to reject a broken copy. That the queries return the fleet daemon's count
from a real Prometheus is tests/drive/test_fleet_replicas.py."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import jsonschema
import kubernetes_validate
import promql_parser
import pytest
import yaml

from advisor.outputs import deploy
from tests.paths import FIXTURES, REPO

AUTOSCALING = REPO / "deploy" / "kubernetes" / "autoscaling"
SCHEMAS = FIXTURES / "schemas"
K8S_VERSION = "1.37.0"


def _doc(name: str) -> dict[str, Any]:
    return dict(yaml.safe_load((AUTOSCALING / name).read_text()))


def _strict(schema: Any) -> Any:
    """A CRD's structural schema with unknown fields refused (what the API server's strict field
    validation does: a field the schema does not name is an error, not silently pruned)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            out.get("type") == "object"
            and "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(x) for x in schema]
    return schema


def _keda_schema() -> dict[str, Any]:
    crd = yaml.safe_load((SCHEMAS / "keda.sh_scaledobjects-v2.20.1.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema = _strict(version["schema"]["openAPIV3Schema"])
    # metadata is the API server's ObjectMeta: the CRD leaves it open
    schema["properties"]["metadata"] = {"type": "object"}
    return dict(schema)


def _validate_scaledobject(doc: dict[str, Any]) -> None:
    assert doc["apiVersion"] == "keda.sh/v1alpha1" and doc["kind"] == "ScaledObject"
    jsonschema.validate(doc, _keda_schema())
    spec = doc["spec"]
    # what KEDA checks beyond its CRD (apis/keda/v1alpha1/scaledobject_types.go, v2.20.1): the
    # replica bounds, a trigger's metric type, an AverageValue trigger for the fallback
    if spec["minReplicaCount"] > spec["maxReplicaCount"]:
        raise ValueError("minReplicaCount > maxReplicaCount")
    for t in spec["triggers"]:
        if t.get("metricType", "AverageValue") not in ("AverageValue", "Value"):
            raise ValueError(
                f"metricType {t['metricType']!r}: AverageValue or Value for a prometheus trigger"
            )
    if "fallback" in spec and not any(
        t.get("metricType", "AverageValue") == "AverageValue" for t in spec["triggers"]
    ):
        raise ValueError("the fallback needs a trigger with an AverageValue target")
    scaler = json.loads((SCHEMAS / "keda-prometheus-scaler-v2.20.1.json").read_text())
    for t in spec["triggers"]:
        assert t["type"] == "prometheus"
        meta = t["metadata"]
        missing = set(scaler["required"]) - set(meta)
        unknown = set(meta) - set(scaler["required"]) - set(scaler["optional"])
        if missing or unknown:
            raise ValueError(f"trigger metadata: missing {sorted(missing)}, unknown {sorted(unknown)}")
        for k in scaler["numbers"]:
            if k in meta:
                float(meta[k])
        for k in scaler["booleans"]:
            if k in meta and meta[k] not in ("true", "false"):
                raise ValueError(f"{k}: {meta[k]!r} is not a boolean")
        promql_parser.parse(meta["query"])


def render_adapter_query(rule: dict[str, Any], matchers: dict[str, str]) -> str:
    """prometheus-adapter's metricsQuery for an external metric: ``.Series`` the metric name,
    ``.LabelMatchers`` the HPA's selector and namespace as ``name="value"`` matchers (its Go
    template with ``<<``/``>>`` delimiters, pkg/naming/metrics_query.go)."""
    name = rule["name"]["as"]
    lm = ",".join(f'{k}="{v}"' for k, v in matchers.items())
    out = rule["metricsQuery"].replace("<<.Series>>", name).replace("<<.LabelMatchers>>", lm)
    assert "<<" not in out, f"a template field the test does not render: {out}"
    return str(out)


def _validate_adapter(cfg: dict[str, Any]) -> None:
    jsonschema.validate(
        cfg, json.loads((SCHEMAS / "prometheus-adapter-config-v0.12.0.schema.json").read_text())
    )
    for rule in cfg["externalRules"]:
        promql_parser.parse(rule["seriesQuery"])
        assert re.fullmatch(rule["name"]["matches"], rule["name"]["as"])
        promql_parser.parse(render_adapter_query(rule, {"namespace": "default", "job": "vllm"}))


def test_the_hpa_validates_against_kubernetes_schema() -> None:
    hpa = _doc("hpa.yaml")
    kubernetes_validate.validate(hpa, K8S_VERSION, strict=True)
    metric = hpa["spec"]["metrics"][0]["external"]
    assert metric["metric"]["name"] == deploy.DESIRED_REPLICAS
    # AverageValue 1: the HPA wants ceil(value / 1) replicas, whatever runs now
    assert metric["target"] == {"type": "AverageValue", "averageValue": "1"}
    # selector values must be valid label values (a model name like "Org/Model" is not)
    for v in metric["metric"]["selector"]["matchLabels"].values():
        assert re.fullmatch(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?", v) and len(v) <= 63
    assert hpa["spec"]["scaleTargetRef"]["name"] == deploy.APP_NAME


def test_the_scaledobject_validates_against_kedas_crd_and_scaler() -> None:
    so = _doc("keda-scaledobject.yaml")
    _validate_scaledobject(so)
    t = so["spec"]["triggers"][0]
    assert t["metadata"]["query"] == deploy.desired_replicas_query()
    assert (t["metricType"], t["metadata"]["threshold"]) == ("AverageValue", "1")
    # an empty answer is an error (fallback: keep the replicas there are), never zero replicas
    assert t["metadata"]["ignoreNullValues"] == "false"
    assert so["spec"]["fallback"]["behavior"] == "currentReplicas"


def _adapter_config() -> dict[str, Any]:
    cm = _doc("prometheus-adapter-config.yaml")
    kubernetes_validate.validate(cm, K8S_VERSION, strict=True)
    return dict(yaml.safe_load(cm["data"]["config.yaml"]))


def test_the_adapter_rule_validates_against_its_config_format() -> None:
    cfg = _adapter_config()
    _validate_adapter(cfg)
    assert cfg == deploy.prometheus_adapter_config()


def test_the_recipes_target_the_generated_deployment() -> None:
    dep = yaml.safe_load((REPO / "deploy" / "kubernetes" / "deployment.yaml").read_text())
    svc = yaml.safe_load((REPO / "deploy" / "kubernetes" / "service.yaml").read_text())
    for name in ("hpa.yaml", "keda-scaledobject.yaml"):
        ref = _doc(name)["spec"]["scaleTargetRef"]
        assert (ref["kind"], ref["name"]) == (dep["kind"], dep["metadata"]["name"])
    # the deployment's series carry the Service's name (the Prometheus Operator's service label)
    assert deploy.DEPLOYMENT_SELECTOR["service"] == svc["metadata"]["name"]


def test_each_validation_rejects_a_broken_copy() -> None:
    hpa = _doc("hpa.yaml")
    bad = copy.deepcopy(hpa)
    bad["spec"]["metrics"][0]["external"]["target"]["averageValu"] = "1"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)
    so = _doc("keda-scaledobject.yaml")
    for mutate in (
        lambda d: d["spec"].update(maxReplicas=8),  # the HPA's spelling, not KEDA's
        lambda d: d["spec"]["fallback"].update(behavior="keep"),
        lambda d: d["spec"]["triggers"][0].update(metricType="Average"),
        lambda d: d["spec"]["triggers"][0].update(metricType="Value"),  # no fallback without AverageValue
        lambda d: d["spec"].update(pollingInterval="15s"),
        lambda d: d["spec"].update(minReplicaCount=9),
    ):
        broken = copy.deepcopy(so)
        mutate(broken)
        with pytest.raises((jsonschema.ValidationError, ValueError)):
            _validate_scaledobject(broken)
    broken = copy.deepcopy(so)
    broken["spec"]["triggers"][0]["metadata"]["treshold"] = broken["spec"]["triggers"][0]["metadata"].pop(
        "threshold"
    )
    with pytest.raises(ValueError, match="missing"):
        _validate_scaledobject(broken)
    adapter = _adapter_config()
    for mutate in (
        lambda d: d["externalRules"][0].update(metricQuery="x"),
        lambda d: d["externalRules"][0]["resources"].update(namespaced="false"),
        lambda d: d.update(external=d.pop("externalRules")),
    ):
        broken = copy.deepcopy(adapter)
        mutate(broken)
        with pytest.raises(jsonschema.ValidationError):
            _validate_adapter(broken)
