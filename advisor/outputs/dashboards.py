"""Grafana dashboards (JSON model, schemaVersion 39), generated from the signal catalog.

Two dashboards with stable uids and panel ids: one per server (``vllm-advisor-server``,
what the alerts' ``dashboard_url`` opens) and one for the fleet (``vllm-advisor-fleet``).
Latency and throughput panels use the signals' own PromQL twins (the same PromQL the
advisor's Python computes), grouped with :func:`advisor.outputs.alerts.group_twin`; fleet
panels read the recording rules. No datasource uid is hard-coded: every panel uses the
``${datasource}`` variable.

Raw vLLM series are selected by ``instance`` and ``model_name`` (not ``job``): the scrape
configs in ``deploy/`` give a vLLM server and its advisor sidecar the same ``instance``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from advisor.derive.signals import CATALOG, promql
from advisor.outputs import alert_config, recording

DS = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 39
RATE = "$__rate_interval"
ADVISOR_SEL = 'job=~"$job", instance=~"$instance"'
VLLM_SEL = 'job=~"$vllm_job", instance=~"$instance", model_name=~"$model_name"'
DESCRIPTION = (
    f"DO NOT EDIT: {alert_config.GENERATED_BY}. vLLM and its advisor must share the instance label "
    "(see deploy/prometheus/prometheus.yml)."
)

_SERIES_RE = re.compile(
    r"(?<![\w:])(vllm:[A-Za-z0-9_:]+|vllm_advisor_[a-z0-9_]+|process_cpu_seconds_total)(\{([^}]*)\})?"
)


def with_selectors(expr: str, vllm_sel: str = VLLM_SEL, advisor_sel: str = ADVISOR_SEL) -> str:
    """Add the dashboard's variable matchers to every series selector of ``expr``."""

    def sub(m: re.Match[str]) -> str:
        name, inner = m.group(1), m.group(3)
        extra = advisor_sel if name.startswith("vllm_advisor_") else vllm_sel
        if name == "process_cpu_seconds_total":
            extra = 'instance=~"$instance"'
        merged = f"{inner}, {extra}" if inner else extra
        return f"{name}{{{merged}}}"

    return _SERIES_RE.sub(sub, expr)


def signal_query(signal: str, by: Sequence[str] = ("instance", "model_name")) -> str:
    """A signal's PromQL twin over the dashboard's range, grouped ``by`` and filtered by the
    dashboard's variables."""
    expr = promql(CATALOG[signal], RATE)
    if expr is None:
        raise KeyError(f"signal {signal} has no PromQL twin")
    return with_selectors(recording.group_twin(expr, by))


def target(
    expr: str, legend: str = "", ref: str = "A", instant: bool = False, fmt: str = "time_series"
) -> dict[str, Any]:
    t: dict[str, Any] = {
        "datasource": DS,
        "refId": ref,
        "expr": expr,
        "legendFormat": legend,
        "range": not instant,
        "instant": instant,
        "format": fmt,
    }
    return t


class _Layout:
    """Packs panels left to right, 24 columns wide; ids are stable (the order of creation)."""

    def __init__(self) -> None:
        self.x = 0
        self.y = 0
        self.row_h = 0
        self.next_id = 1
        self.panels: list[dict[str, Any]] = []

    def add(
        self,
        title: str,
        ptype: str,
        w: int,
        h: int,
        targets: list[dict[str, Any]],
        *,
        description: str,
        **extra: Any,
    ) -> dict[str, Any]:
        """A panel; every one says what it shows (``description``) and in which unit."""
        if self.x + w > 24:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        panel: dict[str, Any] = {
            "id": self.next_id,
            "type": ptype,
            "title": title,
            "datasource": DS,
            "gridPos": {"x": self.x, "y": self.y, "w": w, "h": h},
            "targets": targets,
            "description": description,
        }
        panel.update(extra)
        defaults = panel.setdefault("fieldConfig", {"defaults": {}, "overrides": []}).setdefault(
            "defaults", {}
        )
        defaults.setdefault("unit", "none")
        self.panels.append(panel)
        self.next_id += 1
        self.x += w
        self.row_h = max(self.row_h, h)
        return panel


def _timeseries(
    unit: str, overrides: list[dict[str, Any]] | None = None, log: bool = False
) -> dict[str, Any]:
    custom: dict[str, Any] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never"}
    if log:
        custom["scaleDistribution"] = {"type": "log", "log": 2}
    return {
        "fieldConfig": {"defaults": {"unit": unit, "custom": custom}, "overrides": overrides or []},
        "options": {
            "legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
    }


def _right_axis(ref: str, unit: str) -> dict[str, Any]:
    return {
        "matcher": {"id": "byFrameRefID", "options": ref},
        "properties": [
            {"id": "custom.axisPlacement", "value": "right"},
            {"id": "unit", "value": unit},
        ],
    }


def _table(columns: Sequence[str]) -> dict[str, Any]:
    keep = {c: i for i, c in enumerate(columns)}
    return {
        "options": {"showHeader": True, "cellHeight": "sm"},
        "fieldConfig": {"defaults": {}, "overrides": []},
        "transformations": [
            {"id": "labelsToFields", "options": {"mode": "columns"}},
            {"id": "merge", "options": {}},
            {
                "id": "organize",
                "options": {
                    "excludeByName": {"Time": True, "__name__": True},
                    "indexByName": keep,
                    "renameByName": {},
                },
            },
        ],
    }


def _variables(multi_instance: bool) -> list[dict[str, Any]]:
    def query_var(name: str, label: str, query: str, multi: bool) -> dict[str, Any]:
        v: dict[str, Any] = {
            "type": "query",
            "name": name,
            "label": label,
            "datasource": DS,
            "definition": query,
            "query": {"query": query, "refId": f"var-{name}"},
            "refresh": 2,
            "sort": 1,
            "hide": 0,
            "multi": multi,
            "includeAll": multi,
            "current": {},
            "options": [],
            "regex": "",
        }
        if multi:
            v["allValue"] = ".*"
        return v

    return [
        {
            "type": "datasource",
            "name": "datasource",
            "label": "Data source",
            "query": "prometheus",
            "current": {},
            "hide": 0,
            "refresh": 1,
            "regex": "",
            "options": [],
        },
        query_var("job", "Advisor job", "label_values(vllm_advisor_up, job)", False),
        query_var(
            "instance", "Instance", 'label_values(vllm_advisor_up{job=~"$job"}, instance)', multi_instance
        ),
        query_var("vllm_job", "vLLM job", "label_values(vllm:num_requests_running, job)", True),
        query_var(
            "model_name",
            "Model",
            'label_values(vllm:num_requests_running{job=~"$vllm_job", instance=~"$instance"}, model_name)',
            True,
        ),
    ]


def _annotations() -> dict[str, Any]:
    return {
        "list": [
            {
                "builtIn": 1,
                "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                "enable": True,
                "hide": True,
                "iconColor": "rgba(0, 211, 255, 1)",
                "name": "Annotations & Alerts",
                "type": "dashboard",
            },
            {
                "name": "Knob changes",
                "datasource": DS,
                "enable": True,
                "hide": False,
                "iconColor": "orange",
                "expr": f"changes(vllm_advisor_engine_knob{{{ADVISOR_SEL}}}[2m]) > 0",
                "step": "1m",
                "titleFormat": "{{knob}} changed",
                "textFormat": "{{knob}} ({{source}}) changed on {{instance}}",
                "tagKeys": "knob,instance",
                "useValueForTime": False,
            },
        ]
    }


def _dashboard(
    uid: str, title: str, panels: list[dict[str, Any]], multi_instance: bool, tags: list[str]
) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "description": DESCRIPTION,
        "tags": tags,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": False,
        "graphTooltip": 1,
        "timezone": "browser",
        "time": {"from": "now-3h", "to": "now"},
        "refresh": "30s",
        "links": [
            {
                "title": "Fleet" if uid == alert_config.SERVER_DASHBOARD_UID else "Server",
                "type": "link",
                "url": f"/d/{alert_config.FLEET_DASHBOARD_UID if uid == alert_config.SERVER_DASHBOARD_UID else alert_config.SERVER_DASHBOARD_UID}",
                "keepTime": True,
                "includeVars": True,
            },
            {"title": "Runbook", "type": "link", "url": alert_config.RUNBOOK_BASE_URL, "targetBlank": True},
        ],
        "annotations": _annotations(),
        "templating": {"list": _variables(multi_instance)},
        "panels": panels,
    }


REC_COLUMNS = ("instance", "rule", "severity", "knob", "flag", "direction", "current", "proposed")


def server_dashboard() -> dict[str, Any]:
    lay = _Layout()
    lay.add(
        "Current recommendation",
        "table",
        16,
        5,
        [target(f"vllm_advisor_recommendation_info{{{ADVISOR_SEL}}} == 1", instant=True, fmt="table")],
        description="The one knob the advisor recommends now (empty: nothing to change). `vllm-advisor explain` on the host shows the evidence.",
        **_table(REC_COLUMNS),
    )
    lay.add(
        "Advisor status",
        "stat",
        8,
        5,
        [target(f"vllm_advisor_status{{{ADVISOR_SEL}}} == 1", legend="{{status}}", instant=True)],
        description="advice: a knob to change; healthy: no rule holds; inconclusive: rules hold but no knob "
        "can move; insufficient-data: too little data, vLLM unreadable, or a knob just changed.",
        options={"textMode": "name", "colorMode": "background", "reduceOptions": {"calcs": ["lastNotNull"]}},
        fieldConfig={"defaults": {"mappings": []}, "overrides": []},
    )
    lay.add(
        "Rules (1 = conditions hold)",
        "table",
        12,
        7,
        [target(f"vllm_advisor_rule_active{{{ADVISOR_SEL}}}", instant=True, fmt="table")],
        description="Every rule and whether its conditions hold; only the chosen one is the recommendation (and alerts).",
        **_table(("rule", "severity", "knob", "direction", "Value")),
    )
    lay.add(
        "Advisor scrapes of vLLM",
        "timeseries",
        12,
        7,
        [
            target(f"vllm_advisor_up{{{ADVISOR_SEL}}}", legend="up {{instance}}", ref="A"),
            target(
                f"sum by (instance, result) (rate(vllm_advisor_scrapes_total{{{ADVISOR_SEL}}}[{RATE}]))",
                legend="scrapes/s {{result}}",
                ref="B",
            ),
        ],
        description="1 while the advisor reads vLLM's /metrics (left); its scrapes per second by result (right).",
        **_timeseries("none", [_right_axis("B", "ops")]),
    )
    lay.add(
        "KV cache usage and preemptions",
        "timeseries",
        12,
        8,
        [
            target(
                f"max by (instance, model_name) (vllm:kv_cache_usage_perc{{{VLLM_SEL}}})",
                legend="KV usage {{model_name}}",
                ref="A",
            ),
            target(signal_query("preemptions_per_second"), legend="preemptions/s {{model_name}}", ref="B"),
        ],
        description="KV cache blocks in use (left, 0-1) and requests preempted per second (right): a full "
        "cache that preempts is the KV rules' symptom.",
        **_timeseries("percentunit", [_right_axis("B", "ops")]),
    )
    lay.add(
        "Running vs max_num_seqs",
        "timeseries",
        12,
        8,
        [
            target(
                f"sum by (instance, model_name) (vllm:num_requests_running{{{VLLM_SEL}}})",
                legend="running {{model_name}}",
                ref="A",
            ),
            target(
                f"sum by (instance, model_name) (vllm:num_requests_waiting{{{VLLM_SEL}}})",
                legend="waiting {{model_name}}",
                ref="B",
            ),
            target(
                f'max by (instance) (vllm_advisor_engine_knob{{knob="max_num_seqs", {ADVISOR_SEL}}})',
                legend="max_num_seqs",
                ref="C",
            ),
        ],
        description="Requests running and waiting against the max_num_seqs cap (from the advisor's "
        "vllm_advisor_engine_knob): running at the cap while requests wait means the cap binds.",
        **_timeseries("short"),
    )
    lay.add(
        "Waiting requests by reason",
        "timeseries",
        12,
        8,
        [
            target(
                f"sum by (instance, model_name, reason) (vllm:num_requests_waiting_by_reason{{{VLLM_SEL}}})",
                legend="{{reason}} {{model_name}}",
            )
        ],
        description="Waiting requests by why they wait (capacity: no KV room or the cap; deferred: other).",
        **_timeseries("short"),
    )
    lay.add(
        "Throughput",
        "timeseries",
        12,
        8,
        [
            target(signal_query("prompt_tokens_per_second"), legend="prompt tok/s {{model_name}}", ref="A"),
            target(
                signal_query("generation_tokens_per_second"),
                legend="generation tok/s {{model_name}}",
                ref="B",
            ),
            target(signal_query("requests_per_second"), legend="requests/s {{model_name}}", ref="C"),
        ],
        description="Prompt and generated tokens per second (left) and finished requests per second (right).",
        **_timeseries("short", [_right_axis("C", "reqps")]),
    )
    for title, base in (("TTFT", "ttft_seconds"), ("ITL", "itl_seconds"), ("TPOT", "tpot_seconds")):
        lay.add(
            f"{title} p50 / p95",
            "timeseries",
            8,
            8,
            [
                target(signal_query(f"{base}_p50"), legend="p50 {{model_name}}", ref="A"),
                target(signal_query(f"{base}_p95"), legend="p95 {{model_name}}", ref="B"),
            ],
            description=f"{title} percentiles from vLLM's histogram over the panel's rate interval; the "
            "alerts compare the p95 with its target.",
            **_timeseries("s"),
        )
    lay.add(
        "Prompt length distribution (requests per bucket)",
        "heatmap",
        12,
        8,
        [
            target(
                f"sum by (le) (increase(vllm:request_prompt_tokens_bucket{{{VLLM_SEL}}}[{RATE}]))",
                legend="{{le}}",
                fmt="heatmap",
            )
        ],
        description="Finished requests per prompt-length bucket (tokens): the request sizes the advice "
        "is computed for.",
        options={
            "calculate": False,
            "yAxis": {"unit": "short"},
            "cellGap": 1,
            "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64},
            "rowsFrame": {"layout": "le"},
        },
        fieldConfig={"defaults": {"unit": "short"}, "overrides": []},
    )
    lay.add(
        "Engine knobs over time (orange marks: a knob changed)",
        "timeseries",
        12,
        8,
        [target(f"vllm_advisor_engine_knob{{{ADVISOR_SEL}}}", legend="{{knob}} ({{source}})")],
        description="The knob values the server runs with and where each comes from (cmdline, log, "
        "metrics, default); orange marks are changes.",
        **_timeseries("short", log=True),
    )
    return _dashboard(
        alert_config.SERVER_DASHBOARD_UID,
        "vLLM advisor / server",
        lay.panels,
        False,
        ["vllm", "vllm-advisor"],
    )


def fleet_dashboard() -> dict[str, Any]:
    lay = _Layout()
    rec_sel = VLLM_SEL
    lay.add(
        "Advisor status per instance",
        "table",
        8,
        8,
        [target(f"vllm_advisor_status{{{ADVISOR_SEL}}} == 1", instant=True, fmt="table")],
        description="Every advised server and its status, worst first (advice, then insufficient-data, "
        "inconclusive, healthy); the fleet daemon's /api/v1/diagnosis gives the same list.",
        **_table(("instance", "status")),
    )
    lay.add(
        "Recommendations across instances",
        "table",
        16,
        8,
        [target(f"vllm_advisor_recommendation_info{{{ADVISOR_SEL}}} == 1", instant=True, fmt="table")],
        description="The one recommendation of each server that has advice: rule, knob, current and proposed value.",
        **_table(REC_COLUMNS),
    )
    lay.add(
        "Instances where a rule holds",
        "bargauge",
        12,
        7,
        [
            target(
                f"sum by (rule) (vllm_advisor_rule_active{{{ADVISOR_SEL}}})", legend="{{rule}}", instant=True
            )
        ],
        description="How many servers each rule's conditions hold on now (chosen as the advice or not).",
        options={
            "orientation": "horizontal",
            "displayMode": "basic",
            "reduceOptions": {"calcs": ["lastNotNull"]},
        },
        fieldConfig={"defaults": {"unit": "short", "min": 0}, "overrides": []},
    )
    lay.add(
        "vLLM scraped by its advisor",
        "timeseries",
        12,
        7,
        [target(f"vllm_advisor_up{{{ADVISOR_SEL}}}", legend="{{instance}}")],
        description="1 while the advisor (sidecar or fleet daemon) can read the server.",
        **_timeseries("none"),
    )
    for title, signal, unit in (
        ("Preemptions/s by instance and model", "preemptions_per_second", "ops"),
        ("KV cache usage (max over 5m)", "kv_cache_usage_ratio_max", "percentunit"),
        ("TTFT p95 (5m)", "ttft_seconds_p95", "s"),
        ("ITL p95 (5m)", "itl_seconds_p95", "s"),
        ("Generation throughput", "generation_tokens_per_second", "short"),
        ("Waiting requests (mean over 5m)", "requests_waiting_avg", "short"),
    ):
        lay.add(
            title,
            "timeseries",
            12,
            8,
            [target(f"{recording.recording_for(signal)}{{{rec_sel}}}", legend="{{instance}} {{model_name}}")],
            description=f"{CATALOG[signal].help} Per server and model, from the recording rule "
            f"{recording.recording_for(signal)}.",
            **_timeseries(unit),
        )
    fleet_sel = 'vllm_advisor="fleet", job=~"$vllm_job", model_name=~"$model_name"'
    sidecar_sel = f'{ADVISOR_SEL}, model_name=~"$model_name"'

    def per_model(series: str, extra: str = "") -> str:
        """The fleet daemon's per-deployment series where there are, else the sidecars'."""
        return (
            f"max by (model_name) ({series}{{{fleet_sel}{extra}}}) "
            f"or max by (model_name) ({series}{{{sidecar_sel}{extra}}})"
        )

    lay.add(
        "Desired vs actual replicas",
        "timeseries",
        24,
        8,
        [
            target(per_model("vllm_advisor_desired_replicas"), legend="desired {{model_name}}"),
            target(
                "count by (model_name) (count by (model_name, instance) "
                f"(vllm:num_requests_running{{{VLLM_SEL}}}))",
                legend="actual {{model_name}}",
                ref="B",
            ),
            target(
                per_model("vllm_advisor_desired_replicas_predicted_ttft_p95_seconds", ', at="desired"'),
                legend="predicted TTFT p95 at desired {{model_name}}",
                ref="C",
            ),
        ],
        description="Desired: the replicas the advisor's model predicts meet the TTFT and ITL p95 targets "
        "at the observed load with headroom (vllm_advisor_desired_replicas, docs/autoscaling.md): the fleet "
        "daemon's count per deployment (what KEDA or the HPA in deploy/kubernetes/autoscaling/ scale to), "
        "else the sidecars' (each for the load of its own server). Actual: the vLLM servers of each model "
        "being scraped now. Right axis: the predicted TTFT p95 at the desired count.",
        **_timeseries("short", [_right_axis("C", "s")]),
    )
    return _dashboard(
        alert_config.FLEET_DASHBOARD_UID, "vLLM advisor / fleet", lay.panels, True, ["vllm", "vllm-advisor"]
    )


def render(dashboard: dict[str, Any]) -> str:
    return json.dumps(dashboard, indent=2, ensure_ascii=False) + "\n"


def dashboard_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and annotation of ``dashboard``."""
    out: list[tuple[str, str]] = []
    for p in dashboard.get("panels", []):
        for t in p.get("targets", []):
            out.append((f"panel {p['id']} {p['title']!r} {t['refId']}", t["expr"]))
    for a in dashboard.get("annotations", {}).get("list", []):
        if "expr" in a:
            out.append((f"annotation {a['name']!r}", a["expr"]))
    return out
