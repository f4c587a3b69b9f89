"""``vllm-advisor generate``: write every generated file (alert and recording rules, their
promtool tests, Grafana dashboards, the runbook, the deploy bundle) from ``rules/*.yaml`` and
the signal catalog, deterministically; and ``diff`` them against what is on disk (``--check``).

:func:`render_all` is pure (relative path -> text); :func:`generate` and :func:`diff` are the
I/O edges.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from pathlib import Path

from advisor.core import config
from advisor.diagnose.ruleset import Rule, load_rules
from advisor.outputs import alert_config, alert_tests, alerts, dashboards, deploy, runbook

RULES_FILE = "deploy/prometheus/vllm-advisor.rules.yaml"
PROMTOOL_TESTS_FILE = "deploy/prometheus/tests/vllm-advisor.alerts.test.yaml"
RUNBOOK_FILE = "deploy/RUNBOOK.md"
SERVER_DASHBOARD_FILE = "grafana/vllm-advisor-server.json"
FLEET_DASHBOARD_FILE = "grafana/vllm-advisor-fleet.json"
SAMPLE_CONFIG_FILE = "deploy/vllm-advisor.yaml"


def render_all(
    rules: Sequence[Rule] | None = None, cfg: alert_config.AlertConfig | None = None
) -> dict[str, str]:
    """Every generated file: relative path -> content. Same input, same bytes. ``cfg``: the
    site's runbook and dashboard bases, job selectors and targets (placeholders by default)."""
    rs = list(rules) if rules is not None else load_rules()
    k8s_note = (
        "vLLM with vllm-advisor as a sidecar. vLLM logs through its own logging config\n"
        "(ConfigMap vllm-logging) to stdout and to a shared emptyDir file that the advisor follows;\n"
        "see advisor/outputs/deploy.py for why this beats a tee pipeline or --log-cmd."
    )
    return {
        RULES_FILE: alerts.render_rules_file(rs, cfg),
        PROMTOOL_TESTS_FILE: alert_tests.render_promtool_tests(rs, cfg),
        RUNBOOK_FILE: runbook.render_runbook(rs),
        SERVER_DASHBOARD_FILE: dashboards.render(dashboards.server_dashboard()),
        FLEET_DASHBOARD_FILE: dashboards.render(dashboards.fleet_dashboard()),
        "deploy/prometheus/prometheus.yml": deploy.render_yaml(
            deploy.prometheus_config(),
            "Example scrape config: every vLLM server and its advisor, one pair per host.\n"
            "Both targets of a host get the same instance label (the host, without the port):\n"
            "the dashboards and the recording rules' joins rely on it.",
        ),
        "deploy/alertmanager/alertmanager.yml": deploy.render_yaml(
            deploy.alertmanager_config(),
            "Routes vllm-advisor alerts on severity to webhook receivers; replace the URLs with yours.",
        ),
        "deploy/kubernetes/vllm-logging-configmap.yaml": deploy.render_yaml(
            deploy.k8s_logging_configmap(), k8s_note
        ),
        "deploy/kubernetes/deployment.yaml": deploy.render_yaml(
            deploy.k8s_deployment(),
            k8s_note + "\n"
            "The sidecar's readinessProbe is /metrics, not /readyz: a pod is ready when all its containers\n"
            "are, and vLLM must not lose its traffic while the advisor waits for a window of it.",
        ),
        "deploy/kubernetes/service.yaml": deploy.render_yaml(deploy.k8s_service()),
        "deploy/kubernetes/servicemonitor.yaml": deploy.render_yaml(
            deploy.k8s_servicemonitor(),
            "Scrapes both ports of the Service; job is vllm / vllm-advisor, instance is the pod name.",
        ),
        "deploy/kubernetes/prometheusrule.yaml": deploy.render_yaml(
            deploy.k8s_prometheusrule(rs, cfg),
            "The groups of deploy/prometheus/vllm-advisor.rules.yaml, for the Prometheus Operator.",
        ),
        "deploy/kubernetes/fleet/vllm-advisor-fleet.yaml": deploy.render_docs(
            deploy.k8s_fleet(),
            "The fleet advisor: one vllm-advisor reading the cluster's Prometheus for every vLLM server\n"
            "(vllm-advisor run --prometheus), beside the sidecar bundle above. Set --prometheus to your\n"
            "Prometheus; its ServiceMonitor keeps each server's instance label (honorLabels).",
        ),
        "deploy/kubernetes/autoscaling/keda-scaledobject.yaml": deploy.render_yaml(
            deploy.k8s_keda_scaledobject(),
            "KEDA scales the vLLM Deployment to the fleet advisor's vllm_advisor_desired_replicas\n"
            "(docs/autoscaling.md). Needs the fleet advisor (fleet/) and KEDA 2.17 or later (fallback\n"
            "behavior). Set the namespace, serverAddress and maxReplicaCount for yours.",
        ),
        "deploy/kubernetes/autoscaling/hpa.yaml": deploy.render_yaml(
            deploy.k8s_hpa(),
            "A HorizontalPodAutoscaler on the external metric vllm_advisor_desired_replicas, served by\n"
            "prometheus-adapter with the rule in prometheus-adapter-config.yaml (docs/autoscaling.md).\n"
            "Use this or keda-scaledobject.yaml, not both.",
        ),
        "deploy/kubernetes/autoscaling/prometheus-adapter-config.yaml": deploy.render_yaml_blocks(
            deploy.k8s_prometheus_adapter_configmap(),
            "prometheus-adapter's config for hpa.yaml: the external rule serving vllm_advisor_desired_replicas,\n"
            "in the ConfigMap the adapter's own manifests mount (adapter-config, key config.yaml). This\n"
            "replaces that config: where the adapter serves other rules (resourceRules for kubectl top),\n"
            "add the externalRules entry to its config instead (Helm chart: rules.external).",
        ),
        "deploy/compose/docker-compose.yml": deploy.render_yaml(
            deploy.compose_file(),
            "docker compose up: vLLM (GPU), its advisor, Prometheus :9090, Alertmanager :9093, Grafana :3000.",
        ),
        "deploy/compose/prometheus.yml": deploy.render_yaml(deploy.compose_prometheus_config()),
        SAMPLE_CONFIG_FILE: "# DO NOT EDIT: a copy of advisor/data/vllm-advisor.yaml, written by `vllm-advisor generate`;\n"
        "# installed, the same text is printed by `vllm-advisor config sample`.\n" + config.sample_text(),
        "deploy/compose/vllm-logging.json": json.dumps(deploy.vllm_logging_config(), indent=2) + "\n",
        "deploy/compose/grafana/provisioning/datasources/prometheus.yml": deploy.render_yaml(
            deploy.grafana_datasource()
        ),
        "deploy/compose/grafana/provisioning/dashboards/vllm-advisor.yml": deploy.render_yaml(
            deploy.grafana_dashboard_provider()
        ),
    }


def generate(
    out_root: Path, rules: Sequence[Rule] | None = None, cfg: alert_config.AlertConfig | None = None
) -> list[Path]:
    """Write every generated file under ``out_root``; return their paths (sorted)."""
    written = []
    for rel, text in sorted(render_all(rules, cfg).items()):
        path = Path(out_root) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def looks_like_checkout(root: Path) -> bool:
    """A folder that holds the generated tree (a repository root): ``deploy/`` or ``grafana/``."""
    return (Path(root) / "deploy").is_dir() or (Path(root) / "grafana").is_dir()


def diff(
    out_root: Path, rules: Sequence[Rule] | None = None, cfg: alert_config.AlertConfig | None = None
) -> list[str]:
    """Files under ``out_root`` that are missing or differ from what ``generate`` would write,
    each as ``"missing: PATH"`` or a unified diff (empty list: up to date)."""
    problems = []
    for rel, text in sorted(render_all(rules, cfg).items()):
        path = Path(out_root) / rel
        if not path.is_file():
            problems.append(f"missing: {rel}")
            continue
        have = path.read_text(encoding="utf-8")
        if have != text:
            lines = difflib.unified_diff(
                have.splitlines(keepends=True),
                text.splitlines(keepends=True),
                f"{rel} (on disk)",
                f"{rel} (generated)",
            )
            problems.append("".join(lines))
    return problems
