"""The deploy bundle: Prometheus scrape example, Alertmanager routing, Kubernetes manifests
(vLLM with the advisor as a sidecar, Service, ServiceMonitor, PrometheusRule) and a
docker-compose stack (vLLM, advisor, Prometheus, Alertmanager, Grafana with provisioning).

Conventions every file here keeps (the dashboards and the joins of the recording rules rely
on them):

- jobs ``vllm`` and ``vllm-advisor`` (:data:`alert_config.VLLM_JOB`, :data:`alert_config.ADVISOR_JOB`);
- a vLLM server and its advisor carry the same ``instance`` label: the host (or pod), without
  the port.

How the sidecar reads vLLM's log: vLLM writes it itself, through its own logging config
(``VLLM_CONFIGURE_LOGGING=1``, ``VLLM_LOGGING_CONFIG_PATH``), to stdout *and* to a file on a
shared ``emptyDir``/volume, which the advisor follows (``--log-file``; it survives
truncation and rotation). This is the robust choice: no shell pipeline in front of vLLM (a
``| tee`` makes a shell PID 1, which swallows SIGTERM and hides vLLM's exit code, and a dead
tee kills vLLM with SIGPIPE), no API credentials (``--log-cmd 'kubectl logs -f'`` needs RBAC
and kubectl; ``docker logs -f`` needs the Docker socket, i.e. root on the host), and
``kubectl logs`` keeps working. The file is opened in append mode by every vLLM process
(API server and engine core), which is safe for concurrent line writes; the advisor's
container truncates it past a size limit (copy-truncate style, no second writer).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import yaml

from advisor.core import names
from advisor.diagnose.ruleset import Rule
from advisor.outputs import alert_config, alerts

VLLM_IMAGE = "vllm/vllm-openai:v0.32.0"  # the vLLM the advisor is tested against (tests/realvllm.py)
ADVISOR_IMAGE = "ghcr.io/vllm-advisor/vllm-advisor:0.1.0"  # what `make image` tags (docs/image.md)
ADVISOR_UID = 10001  # the Dockerfile's USER
ADVISOR_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": ADVISOR_UID,
    "runAsGroup": ADVISOR_UID,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}
PROMETHEUS_IMAGE = "prom/prometheus:v2.53.0"
ALERTMANAGER_IMAGE = "prom/alertmanager:v0.27.0"
GRAFANA_IMAGE = "grafana/grafana:11.1.0"
VLLM_PORT = 8000
ADVISOR_PORT = 19842
VLLM_PORT_NAME = "http-vllm"
ADVISOR_PORT_NAME = "http-advisor"
APP_NAME = "vllm"
LOG_DIR = "/var/log/vllm"
LOG_FILE = f"{LOG_DIR}/vllm.log"
LOG_CONFIG_PATH = "/etc/vllm/logging.json"
LOG_MAX_BYTES = 256 * 1024 * 1024
EXAMPLE_MODEL = "Qwen/Qwen2.5-1.5B-Instruct"
YAML_HEADER = alert_config.YAML_HEADER


def vllm_logging_config(log_file: str = LOG_FILE) -> dict[str, Any]:
    """vLLM's logging config (``VLLM_LOGGING_CONFIG_PATH``): its usual format, to stdout and
    to ``log_file``. Plain ``logging`` classes only, so it works across vLLM versions."""
    fmt = {
        "format": "%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s",
        "datefmt": "%m-%d %H:%M:%S",
    }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"vllm": fmt},
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": "vllm",
                "level": "INFO",
                "stream": "ext://sys.stdout",
            },
            "file": {
                "class": "logging.FileHandler",
                "formatter": "vllm",
                "level": "INFO",
                "filename": log_file,
                "mode": "a",
            },
        },
        "loggers": {"vllm": {"handlers": ["console", "file"], "level": "INFO", "propagate": False}},
    }


def advisor_command(vllm_url: str = f"http://127.0.0.1:{VLLM_PORT}") -> list[str]:
    """The sidecar's command: keep the shared log file bounded, then exec the advisor (PID 1
    of its container, so it gets SIGTERM)."""
    script = (
        f"LOG={LOG_FILE}; MAX={LOG_MAX_BYTES}; "
        '( while sleep 60; do s=$(stat -c %s "$LOG" 2>/dev/null || echo 0); '
        'if [ "$s" -gt "$MAX" ]; then : > "$LOG"; fi; done ) & '
        f"exec vllm-advisor run --vllm-url {vllm_url} --log-file {LOG_FILE} --listen 0.0.0.0:{ADVISOR_PORT}"
    )
    return ["/bin/sh", "-c", script]


def _instance_from_host() -> dict[str, Any]:
    """Relabel ``instance`` to the target's host, without the port."""
    return {
        "source_labels": ["__address__"],
        "regex": "(.+):\\d+",
        "target_label": "instance",
        "replacement": "$1",
    }


# ---------------------------------------------------------------- Prometheus and Alertmanager
def prometheus_config(
    vllm_targets: Sequence[str] = ("gpu-node-1:8000", "gpu-node-2:8000"),
    advisor_targets: Sequence[str] = ("gpu-node-1:19842", "gpu-node-2:19842"),
    alertmanagers: Sequence[str] = ("localhost:9093",),
    rule_files: Sequence[str] = ("vllm-advisor.rules.yaml",),
) -> dict[str, Any]:
    return {
        "global": {"scrape_interval": "15s", "evaluation_interval": alerts.EVALUATION_INTERVAL},
        "rule_files": list(rule_files),
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": list(alertmanagers)}]}]},
        "scrape_configs": [
            {
                "job_name": alert_config.VLLM_JOB,
                "static_configs": [{"targets": list(vllm_targets)}],
                "relabel_configs": [_instance_from_host()],
            },
            {
                "job_name": alert_config.ADVISOR_JOB,
                "static_configs": [{"targets": list(advisor_targets)}],
                "relabel_configs": [_instance_from_host()],
            },
        ],
    }


WEBHOOK_BASE = "http://alert-webhook.example:9095/vllm-advisor"


def alertmanager_config(webhook_base: str = WEBHOOK_BASE) -> dict[str, Any]:
    """Route on ``severity`` to one webhook receiver per severity; while vLLM is down
    (VllmServerDown, VllmAdvisorServerUnreadable) the same instance's warnings and infos are
    inhibited."""

    def receiver(sev: str) -> dict[str, Any]:
        return {
            "name": f"vllm-advisor-{sev}",
            "webhook_configs": [{"url": f"{webhook_base}/{sev}", "send_resolved": True}],
        }

    return {
        "route": {
            "receiver": "vllm-advisor-warning",
            "group_by": ["alertname", "instance"],
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "4h",
            "routes": [
                {
                    "matchers": ['severity="critical"'],
                    "receiver": "vllm-advisor-critical",
                    "repeat_interval": "1h",
                },
                {"matchers": ['severity="warning"'], "receiver": "vllm-advisor-warning"},
                {"matchers": ['severity="info"'], "receiver": "vllm-advisor-info", "repeat_interval": "24h"},
            ],
        },
        "inhibit_rules": [
            {
                "source_matchers": ['alertname=~"VllmServerDown|VllmAdvisorServerUnreadable"'],
                "target_matchers": ['severity=~"warning|info"'],
                "equal": ["instance"],
            }
        ],
        "receivers": [receiver("critical"), receiver("warning"), receiver("info")],
    }


# ---------------------------------------------------------------- Kubernetes
POD_LABELS = {"app.kubernetes.io/name": APP_NAME, "app.kubernetes.io/component": "inference"}


def k8s_logging_configmap() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "vllm-logging", "labels": {"app.kubernetes.io/name": APP_NAME}},
        "data": {"logging.json": json.dumps(vllm_logging_config(), indent=2) + "\n"},
    }


def k8s_deployment() -> dict[str, Any]:
    http_get = {"path": "/health", "port": VLLM_PORT_NAME}
    vllm = {
        "name": "vllm",
        "image": VLLM_IMAGE,
        "args": ["--model", EXAMPLE_MODEL, "--host", "0.0.0.0", "--port", str(VLLM_PORT)],
        "env": [
            {"name": "VLLM_CONFIGURE_LOGGING", "value": "1"},
            {"name": "VLLM_LOGGING_CONFIG_PATH", "value": LOG_CONFIG_PATH},
        ],
        "ports": [{"name": VLLM_PORT_NAME, "containerPort": VLLM_PORT, "protocol": "TCP"}],
        "resources": {"limits": {"nvidia.com/gpu": 1}},
        "startupProbe": {"httpGet": http_get, "periodSeconds": 10, "failureThreshold": 60},
        "readinessProbe": {"httpGet": http_get, "periodSeconds": 10},
        "volumeMounts": [
            {"name": "vllm-logs", "mountPath": LOG_DIR},
            {"name": "vllm-logging", "mountPath": "/etc/vllm", "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
    }
    advisor = {
        "name": "vllm-advisor",
        "image": ADVISOR_IMAGE,
        "command": advisor_command(),
        "ports": [{"name": ADVISOR_PORT_NAME, "containerPort": ADVISOR_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/metrics", "port": ADVISOR_PORT_NAME}, "periodSeconds": 15},
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "securityContext": dict(ADVISOR_SECURITY),
        "volumeMounts": [{"name": "vllm-logs", "mountPath": LOG_DIR}],
    }
    # The log file is created before vLLM starts, by the advisor's UID and writable by vLLM: vLLM
    # (root) appends to it, and the advisor, not root, may still cut it when it grows too large.
    log_owner = {
        "name": "vllm-log-file",
        "image": ADVISOR_IMAGE,
        "command": ["/bin/sh", "-c", f"touch {LOG_FILE} && chmod 0666 {LOG_FILE}"],
        "securityContext": dict(ADVISOR_SECURITY),
        "volumeMounts": [{"name": "vllm-logs", "mountPath": LOG_DIR}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": APP_NAME, "labels": dict(POD_LABELS)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": dict(POD_LABELS)},
            "template": {
                "metadata": {"labels": dict(POD_LABELS)},
                "spec": {
                    # the advisor reads vLLM's command line (secrets redacted) from /proc
                    "shareProcessNamespace": True,
                    "initContainers": [log_owner],
                    "containers": [vllm, advisor],
                    "volumes": [
                        {"name": "vllm-logs", "emptyDir": {"sizeLimit": "1Gi"}},
                        {"name": "vllm-logging", "configMap": {"name": "vllm-logging"}},
                        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}},
                    ],
                },
            },
        },
    }


def k8s_service() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": APP_NAME, "labels": dict(POD_LABELS)},
        "spec": {
            "selector": dict(POD_LABELS),
            "ports": [
                {"name": VLLM_PORT_NAME, "port": VLLM_PORT, "targetPort": VLLM_PORT_NAME, "protocol": "TCP"},
                {
                    "name": ADVISOR_PORT_NAME,
                    "port": ADVISOR_PORT,
                    "targetPort": ADVISOR_PORT_NAME,
                    "protocol": "TCP",
                },
            ],
        },
    }


def _endpoint(port: str, job: str) -> dict[str, Any]:
    return {
        "port": port,
        "path": "/metrics",
        "interval": "15s",
        "relabelings": [
            {"targetLabel": "job", "replacement": job, "action": "replace"},
            {"sourceLabels": ["__meta_kubernetes_pod_name"], "targetLabel": "instance", "action": "replace"},
        ],
    }


def k8s_servicemonitor() -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": APP_NAME, "labels": {**POD_LABELS, "release": "prometheus"}},
        "spec": {
            "selector": {"matchLabels": dict(POD_LABELS)},
            "endpoints": [
                _endpoint(VLLM_PORT_NAME, alert_config.VLLM_JOB),
                _endpoint(ADVISOR_PORT_NAME, alert_config.ADVISOR_JOB),
            ],
        },
    }


def k8s_prometheusrule(rules: Sequence[Rule], cfg: alert_config.AlertConfig | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "vllm-advisor",
            "labels": {"app.kubernetes.io/name": "vllm-advisor", "release": "prometheus"},
        },
        "spec": alerts.rule_groups(rules, cfg),
    }


FLEET_NAME = "vllm-advisor-fleet"
FLEET_LABELS = {"app.kubernetes.io/name": FLEET_NAME, "app.kubernetes.io/component": "advisor"}
FLEET_JOB = FLEET_NAME
# The cluster's Prometheus (kube-prometheus-stack's Service): change for yours.
FLEET_PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"


def k8s_fleet() -> list[dict[str, Any]]:
    """One advisor for every vLLM server the cluster's Prometheus scrapes (``run --prometheus``):
    a Deployment, its Service and a ServiceMonitor with ``honorLabels`` (the advisor's series
    keep each vLLM server's ``instance``). Beside the sidecar bundle, not instead of it."""
    container = {
        "name": "vllm-advisor",
        "image": ADVISOR_IMAGE,
        "command": [
            "vllm-advisor",
            "run",
            "--prometheus",
            FLEET_PROMETHEUS_URL,
            "--selector",
            f'{{job="{alert_config.VLLM_JOB}"}}',
            "--listen",
            f"0.0.0.0:{ADVISOR_PORT}",
            "--interval",
            "15s",
        ],
        "ports": [{"name": ADVISOR_PORT_NAME, "containerPort": ADVISOR_PORT, "protocol": "TCP"}],
        # liveness is /healthz (the process works); readiness is /readyz (Prometheus read: the fleet's
        # advice can be trusted). Prometheus scrapes not-ready endpoints too, so its series go on.
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": ADVISOR_PORT_NAME},
            "periodSeconds": 30,
            "failureThreshold": 4,
        },
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": ADVISOR_PORT_NAME}, "periodSeconds": 15},
        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}},
        "securityContext": dict(ADVISOR_SECURITY),
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": FLEET_NAME, "labels": dict(FLEET_LABELS)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": dict(FLEET_LABELS)},
            "template": {"metadata": {"labels": dict(FLEET_LABELS)}, "spec": {"containers": [container]}},
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": FLEET_NAME, "labels": dict(FLEET_LABELS)},
        "spec": {
            "selector": dict(FLEET_LABELS),
            "ports": [
                {
                    "name": ADVISOR_PORT_NAME,
                    "port": ADVISOR_PORT,
                    "targetPort": ADVISOR_PORT_NAME,
                    "protocol": "TCP",
                }
            ],
        },
    }
    monitor = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": FLEET_NAME, "labels": {**FLEET_LABELS, "release": "prometheus"}},
        "spec": {
            "selector": {"matchLabels": dict(FLEET_LABELS)},
            "endpoints": [
                {
                    "port": ADVISOR_PORT_NAME,
                    "path": "/metrics",
                    "interval": "15s",
                    "honorLabels": True,
                    "relabelings": [{"targetLabel": "job", "replacement": FLEET_JOB, "action": "replace"}],
                }
            ],
        },
    }
    return [deployment, service, monitor]


# ---------------------------------------------------------------- autoscaling (docs/autoscaling.md)
DESIRED_REPLICAS = names.output_name("desired_replicas")
EXAMPLE_NAMESPACE = "default"  # the namespace the example Deployment runs in: change for yours
MIN_REPLICAS, MAX_REPLICAS = 1, 8
# One deployment's desired count, as the fleet advisor exports it: its series carry the vLLM
# servers' namespace, service and job (honorLabels) and vllm_advisor="fleet" (a sidecar's own
# count, for the load of its one server, has job="vllm-advisor" and is not selected).
DEPLOYMENT_SELECTOR = {
    "vllm_advisor": "fleet",
    "job": alert_config.VLLM_JOB,
    "service": APP_NAME,
}


def desired_replicas_query(namespace: str = EXAMPLE_NAMESPACE) -> str:
    matchers = ",".join(f'{k}="{v}"' for k, v in {"namespace": namespace, **DEPLOYMENT_SELECTOR}.items())
    return f"max({DESIRED_REPLICAS}{{{matchers}}})"


# The advisor holds a lower count for scale_in_hold (5 min) before it asks for it, and asks for a
# higher one at once: the autoscaler adds no window of its own, and removes one replica at a time.
HPA_BEHAVIOR = {
    "scaleUp": {"stabilizationWindowSeconds": 0},
    "scaleDown": {
        "stabilizationWindowSeconds": 0,
        "policies": [{"type": "Pods", "value": 1, "periodSeconds": 300}],
    },
}


def k8s_keda_scaledobject(namespace: str = EXAMPLE_NAMESPACE) -> dict[str, Any]:
    """KEDA scales the vLLM Deployment to ``vllm_advisor_desired_replicas``: a Prometheus trigger
    with an AverageValue target of 1 (the HPA it manages wants ``ceil(value / 1)`` replicas). No
    value (the fleet advisor down, the count unknown) is an error, not zero: after three failed
    polls the fallback keeps the replicas there are."""
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": APP_NAME, "namespace": namespace, "labels": dict(POD_LABELS)},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": APP_NAME},
            "minReplicaCount": MIN_REPLICAS,
            "maxReplicaCount": MAX_REPLICAS,
            "pollingInterval": 15,
            "fallback": {"failureThreshold": 3, "replicas": MIN_REPLICAS, "behavior": "currentReplicas"},
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": HPA_BEHAVIOR}},
            "triggers": [
                {
                    "type": "prometheus",
                    "metricType": "AverageValue",
                    "metadata": {
                        "serverAddress": FLEET_PROMETHEUS_URL,
                        "query": desired_replicas_query(namespace),
                        "threshold": "1",
                        "ignoreNullValues": "false",
                    },
                }
            ],
        },
    }


def prometheus_adapter_config() -> dict[str, Any]:
    """prometheus-adapter's external rule serving ``vllm_advisor_desired_replicas`` to the HPA:
    the HPA's namespace and selector become label matchers, and the one value is the largest
    matching series (one deployment's count)."""
    return {
        "externalRules": [
            {
                "seriesQuery": f'{{__name__="{DESIRED_REPLICAS}",vllm_advisor="fleet",namespace!=""}}',
                "resources": {"overrides": {"namespace": {"resource": "namespace"}}},
                "name": {"matches": f"^{DESIRED_REPLICAS}$", "as": DESIRED_REPLICAS},
                "metricsQuery": "max(<<.Series>>{<<.LabelMatchers>>})",
            }
        ]
    }


ADAPTER_NAMESPACE = "monitoring"


def k8s_prometheus_adapter_configmap() -> dict[str, Any]:
    """The adapter's config as its own manifests mount it (ConfigMap ``adapter-config``, key
    ``config.yaml``, read with ``--config=/etc/adapter/config.yaml``), holding the external rule."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "adapter-config", "namespace": ADAPTER_NAMESPACE},
        "data": {"config.yaml": alerts.dump_yaml(prometheus_adapter_config())},
    }


def k8s_hpa(namespace: str = EXAMPLE_NAMESPACE) -> dict[str, Any]:
    """An HPA on the external metric that :func:`prometheus_adapter_config` serves: AverageValue
    1, so it wants ``ceil(value)`` replicas whatever it runs now."""
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": APP_NAME, "namespace": namespace, "labels": dict(POD_LABELS)},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": APP_NAME},
            "minReplicas": MIN_REPLICAS,
            "maxReplicas": MAX_REPLICAS,
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {
                            "name": DESIRED_REPLICAS,
                            "selector": {"matchLabels": dict(DEPLOYMENT_SELECTOR)},
                        },
                        "target": {"type": "AverageValue", "averageValue": "1"},
                    },
                }
            ],
            "behavior": HPA_BEHAVIOR,
        },
    }


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings as literal blocks (a config file inside a ConfigMap stays readable)."""


def _str_block(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_BlockDumper.add_representer(str, _str_block)


def render_yaml_blocks(doc: dict[str, Any], comment: str = "") -> str:
    """:func:`render_yaml` with multi-line strings as literal blocks."""
    head = YAML_HEADER + "".join(f"# {line}\n" for line in comment.splitlines())
    return head + yaml.dump(
        doc, Dumper=_BlockDumper, sort_keys=False, width=10_000, allow_unicode=True, default_flow_style=False
    )


def render_docs(docs: Sequence[dict[str, Any]], comment: str = "") -> str:
    head = YAML_HEADER + "".join(f"# {line}\n" for line in comment.splitlines())
    return head + "---\n".join(alerts.dump_yaml(d) for d in docs)


# ---------------------------------------------------------------- docker compose
def compose_file() -> dict[str, Any]:
    return {
        "name": "vllm-advisor",
        "services": {
            "vllm": {
                "image": VLLM_IMAGE,
                "command": [
                    "--model",
                    "${VLLM_MODEL:-" + EXAMPLE_MODEL + "}",
                    "--host",
                    "0.0.0.0",
                    "--port",
                    str(VLLM_PORT),
                ],
                "environment": {"VLLM_CONFIGURE_LOGGING": "1", "VLLM_LOGGING_CONFIG_PATH": LOG_CONFIG_PATH},
                "ipc": "host",
                # the advisor shares this network namespace: publish its port here
                "ports": [f"{VLLM_PORT}:{VLLM_PORT}", f"{ADVISOR_PORT}:{ADVISOR_PORT}"],
                "volumes": ["vllm-logs:" + LOG_DIR, "./vllm-logging.json:" + LOG_CONFIG_PATH + ":ro"],
                "depends_on": {"vllm-log-file": {"condition": "service_completed_successfully"}},
                "deploy": {
                    "resources": {
                        "reservations": {
                            "devices": [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
                        }
                    }
                },
            },
            # the log file, made before vLLM starts and owned by the advisor's UID: vLLM (root)
            # appends to it, the advisor (not root) may cut it when it grows too large
            "vllm-log-file": {
                "image": ADVISOR_IMAGE,
                "user": "0",
                "entrypoint": [
                    "/bin/sh",
                    "-c",
                    f"touch {LOG_FILE} && chown {ADVISOR_UID}:{ADVISOR_UID} {LOG_FILE} && chmod 0666 {LOG_FILE}",
                ],
                "volumes": ["vllm-logs:" + LOG_DIR],
            },
            "vllm-advisor": {
                "image": ADVISOR_IMAGE,
                "entrypoint": advisor_command(),  # compose's command would go after the image's ENTRYPOINT
                "network_mode": "service:vllm",  # 127.0.0.1:8000 is vLLM; both share instance "vllm"
                "pid": "service:vllm",  # read vLLM's command line
                "volumes": ["vllm-logs:" + LOG_DIR],
                "depends_on": ["vllm"],
            },
            "prometheus": {
                "image": PROMETHEUS_IMAGE,
                "command": ["--config.file=/etc/prometheus/prometheus.yml", "--web.enable-lifecycle"],
                "ports": ["9090:9090"],
                "volumes": [
                    "./prometheus.yml:/etc/prometheus/prometheus.yml:ro",
                    "../prometheus/vllm-advisor.rules.yaml:/etc/prometheus/vllm-advisor.rules.yaml:ro",
                ],
            },
            "alertmanager": {
                "image": ALERTMANAGER_IMAGE,
                "command": ["--config.file=/etc/alertmanager/alertmanager.yml"],
                "ports": ["9093:9093"],
                "volumes": ["../alertmanager/alertmanager.yml:/etc/alertmanager/alertmanager.yml:ro"],
            },
            "grafana": {
                "image": GRAFANA_IMAGE,
                "ports": ["3000:3000"],
                "environment": {"GF_AUTH_ANONYMOUS_ENABLED": "true", "GF_AUTH_ANONYMOUS_ORG_ROLE": "Viewer"},
                "volumes": [
                    "./grafana/provisioning:/etc/grafana/provisioning:ro",
                    "../../grafana:/var/lib/grafana/dashboards/vllm-advisor:ro",
                ],
            },
        },
        "volumes": {"vllm-logs": {}},
    }


def compose_prometheus_config() -> dict[str, Any]:
    return prometheus_config(
        vllm_targets=(f"vllm:{VLLM_PORT}",),
        advisor_targets=(f"vllm:{ADVISOR_PORT}",),
        alertmanagers=("alertmanager:9093",),
        rule_files=("/etc/prometheus/vllm-advisor.rules.yaml",),
    )


def grafana_datasource() -> dict[str, Any]:
    return {
        "apiVersion": 1,
        "datasources": [
            {
                "name": "Prometheus",
                "type": "prometheus",
                "access": "proxy",
                "url": "http://prometheus:9090",
                "isDefault": True,
            }
        ],
    }


def grafana_dashboard_provider() -> dict[str, Any]:
    return {
        "apiVersion": 1,
        "providers": [
            {
                "name": "vllm-advisor",
                "folder": "vLLM advisor",
                "type": "file",
                "disableDeletion": True,
                "allowUiUpdates": False,
                "options": {"path": "/var/lib/grafana/dashboards/vllm-advisor"},
            }
        ],
    }


def render_yaml(doc: dict[str, Any], comment: str = "") -> str:
    return render_docs([doc], comment)
