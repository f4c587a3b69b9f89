"""Prometheus alert rules generated from ``rules/*.yaml`` and the signal catalog, and the rules
file that holds them with the recording rules.

Alerts read the advisor's own series and never re-implement symptom logic: the alert of rule
X fires while X is the advisor's *current recommendation*
(``vllm_advisor_recommendation_info{rule="X"} == 1``). The advisor already held the rule's
own ``for:`` time before recommending it, so the alert's ``for:`` is short (it only rides
out a flapping choice). Rules that hold but are not chosen do not page: the advisor names
one knob at a time on purpose (change one knob, compare, keep or revert); they show on the
dashboard's "active rules" panel and in ``vllm-advisor explain``. Symptom alerts (the rules'
conditions in PromQL, without a knob), SLO alerts and the advisor's own meta-alerts stand
beside them.

Everything here is pure: rules in, plain data (and text) out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from advisor.core import names
from advisor.core.units import parse_duration
from advisor.derive.signals import CATALOG, promql
from advisor.diagnose.ruleset import Rule
from advisor.outputs.alert_config import (
    ADVISOR_UP_SERIES,
    ALERT_FOR,
    ALERT_GROUP,
    DESCRIPTION_ADVISOR_DOWN,
    DESCRIPTION_SERVER_DOWN,
    DESCRIPTION_TEMPLATE,
    DOWN_FOR,
    FLEET_DASHBOARD_UID,
    GROUP_LABELS,
    RECOMMENDATION_SERIES,
    RECORD_GROUP,
    RECORD_WINDOW,
    SERVER_DASHBOARD_UID,
    SEVERITY_FOR,
    SUMMARY_ADVISOR_DOWN,
    SUMMARY_ERRORS,
    SUMMARY_ITL,
    SUMMARY_SERVER_DOWN,
    SUMMARY_SERVER_UNREACHABLE,
    SUMMARY_TTFT,
    YAML_HEADER,
    AlertConfig,
    dashboard_url,
    fmt_duration,
    github_anchor,
    runbook_url,
)
from advisor.outputs.recording import RECORD_LEVEL, recording_for, recording_rules


# ---------------------------------------------------------------- alerts
def rule_alert(rule: Rule, cfg: AlertConfig | None = None) -> dict[str, Any]:
    """VllmAdvisor<Rule>: fires while the rule is the advisor's current recommendation; the one
    alert that carries the knob and its value."""
    cfg = cfg or AlertConfig()
    return {
        "alert": rule.alert,
        "expr": f'{RECOMMENDATION_SERIES}{{rule="{rule.id}"}} == 1',
        "for": ALERT_FOR,
        "labels": {"severity": rule.severity},
        "annotations": {
            "summary": rule.summary,
            "description": DESCRIPTION_TEMPLATE,
            "runbook_url": runbook_url(names.runbook_anchor(rule.id), cfg.runbook_base),
            "dashboard_url": dashboard_url(SERVER_DASHBOARD_UID, cfg.dashboard_base),
        },
    }


def _recorded(signal: str) -> str:
    """A signal's recording rule, without its ``signal`` label (so that conditions join)."""
    return f"max without (signal) ({recording_for(signal)})"


def num_text(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:.12g}"


def threshold(value: float | str, cfg: AlertConfig) -> float:
    if isinstance(value, str) and value.startswith("target:"):
        return cfg.targets()[value.split(":", 1)[1]]
    return float(value)


def symptom_condition_signals(rule: Rule) -> list[str] | None:
    """The rule's conditions' signals when every one has a groupable PromQL twin, else None
    (the rule cannot be written in PromQL)."""
    rules, _ = recording_rules()
    have = {r["labels"]["signal"] for r in rules}
    sigs = [c.signal for c in rule.when]
    return sigs if all(s in have for s in sigs) else None


def needs_knob_series(rule: Rule) -> bool:
    """True when a condition reads the advisor's vllm_advisor_engine_knob (a sidecar or the fleet
    daemon exports it; vLLM's /metrics does not carry max_num_seqs or the token budget)."""
    return any("vllm_advisor_" in (promql(CATALOG[c.signal]) or "") for c in rule.when)


ANCHOR_SIGNAL = "requests_running_avg"
# how often Prometheus evaluates the rules: the deploy examples' setting, and the promtool tests'
EVALUATION_INTERVAL = "15s"
"""The server series a symptom alert whose conditions are all the advisor's (engine knobs and
facts) stands on: its recording rule carries the vLLM server's instance, job and model_name."""


def from_advisor(signal: str) -> bool:
    """True when a signal's twin reads only the advisor's series (vllm_advisor_engine_knob or
    _engine_fact: the advisor's job, no model_name), not a vLLM server's own."""
    twin = promql(CATALOG[signal]) or ""
    return CATALOG[signal].per == "config" or ("vllm_advisor_" in twin and "vllm:" not in twin)


def symptom_alert(rule: Rule, cfg: AlertConfig | None = None) -> dict[str, Any] | None:
    """Vllm<Rule>: the rule's conditions in PromQL (its signals' recording rules, joined per
    server), held for the rule's own ``for:`` or its severity's, whichever is longer. Fires for
    every server and every rule whose symptom is there, chosen or not, with or without an
    advisor (rules that need a knob read it from a sidecar's or the fleet daemon's
    vllm_advisor_engine_knob). A rule whose conditions are all the advisor's (knobs, facts)
    stands on the server's running-batch series (:data:`ANCHOR_SIGNAL`): it alerts for a server
    Prometheus scrapes, with that server's labels. None when a condition has no PromQL twin."""
    cfg = cfg or AlertConfig()
    if symptom_condition_signals(rule) is None:
        return None
    # a server's own series first (they carry instance, job and model_name); a knob's series
    # (vllm_advisor_engine_knob, from the advisor's job, without model_name) joins on instance
    conds = sorted(rule.when, key=lambda c: from_advisor(c.signal))
    expr = ""
    if from_advisor(conds[0].signal):  # nothing but the advisor's series: stand on the server's
        expr = f"group without (signal) ({recording_for(ANCHOR_SIGNAL)})"
    for c in conds:
        part = f"{_recorded(c.signal)} {c.op} {num_text(threshold(c.value, cfg))}"
        if not expr:
            expr = f"({part})" if len(conds) > 1 else part
            continue
        on = "instance" if from_advisor(c.signal) else ", ".join(GROUP_LABELS)
        expr += f" and on ({on}) ({part})"
    hold = max(rule.for_s, parse_duration(SEVERITY_FOR.get(rule.severity, "10m")))
    described = "; ".join(f"{c.signal} {c.op} {num_text(threshold(c.value, cfg))}" for c in rule.when)
    return {
        "alert": names.symptom_alert_name(rule.id),
        "expr": expr,
        "for": fmt_duration(hold),
        "labels": {"severity": rule.severity, "rule": rule.id},
        "annotations": {
            "summary": rule.summary,
            "description": (
                "On {{ $labels.instance }} ({{ $labels.model_name }}): " + described + ". "
                f"The symptom only: where an advisor runs, {rule.alert} names the one knob to change and its value."
            ),
            "runbook_url": runbook_url(names.runbook_anchor(rule.id), cfg.runbook_base),
            "dashboard_url": dashboard_url(SERVER_DASHBOARD_UID, cfg.dashboard_base),
        },
    }


def error_ratio_expr(cfg: AlertConfig, window: str = RECORD_WINDOW) -> str:
    by = ", ".join(GROUP_LABELS)
    vsel = cfg.vllm_selector
    finished = (
        f'sum by ({by}) (rate(vllm:request_success_total{{{vsel}, finished_reason=~"error|abort"}}[{window}]))'
        f" / sum by ({by}) (rate(vllm:request_success_total{{{vsel}}}[{window}]))"
    )
    http = (
        f'sum by (instance, job) (rate(http_requests_total{{{vsel}, status="5xx"}}[{window}]))'
        f" / sum by (instance, job) (rate(http_requests_total{{{vsel}}}[{window}]))"
    )
    return f"({finished}) > {cfg.error_ratio:g} or ({http}) > {cfg.error_ratio:g}"


def slo_alerts(cfg: AlertConfig | None = None) -> list[dict[str, Any]]:
    """Service-level alerts from vLLM's own series: TTFT p95 and ITL p95 over their targets, the
    failed-request ratio, and vLLM unreachable (``up == 0``)."""
    cfg = cfg or AlertConfig()
    dash = dashboard_url(SERVER_DASHBOARD_UID, cfg.dashboard_base)

    def alert(
        name: str, expr: str, sev: str, summary: str, description: str, hold: str | None = None
    ) -> dict[str, Any]:
        return {
            "alert": name,
            "expr": expr,
            "for": hold or SEVERITY_FOR[sev],
            "labels": {"severity": sev},
            "annotations": {
                "summary": summary,
                "description": description,
                "runbook_url": runbook_url(github_anchor(name), cfg.runbook_base),
                "dashboard_url": dash,
            },
        }

    return [
        alert(
            "VllmTtftP95High",
            f"{_recorded('ttft_seconds_p95')} > {cfg.ttft_p95_seconds:g}",
            "warning",
            SUMMARY_TTFT,
            "TTFT p95 on {{ $labels.instance }} ({{ $labels.model_name }}) has been over the "
            f"{cfg.ttft_p95_seconds:g}s target for {SEVERITY_FOR['warning']}.",
        ),
        alert(
            "VllmItlP95High",
            f"{_recorded('itl_seconds_p95')} > {cfg.itl_p95_seconds:g}",
            "warning",
            SUMMARY_ITL,
            "ITL p95 on {{ $labels.instance }} ({{ $labels.model_name }}) has been over the "
            f"{cfg.itl_p95_seconds:g}s target for {SEVERITY_FOR['warning']}.",
        ),
        alert(
            "VllmRequestErrorRatioHigh",
            error_ratio_expr(cfg),
            "critical",
            SUMMARY_ERRORS,
            "More than "
            f"{cfg.error_ratio:.0%}"
            " of the requests on {{ $labels.instance }} fail (vLLM's finished_reason error or abort, "
            "or HTTP 5xx from its API server).",
            hold="5m",
        ),
        alert(
            "VllmServerDown",
            f"up{{{cfg.vllm_selector}}} == 0",
            "critical",
            SUMMARY_SERVER_UNREACHABLE,
            "Prometheus has failed to scrape {{ $labels.instance }} (job {{ $labels.job }}) for "
            f"{SEVERITY_FOR['critical']}: vLLM is down, restarting or unreachable.",
        ),
    ]


def meta_alerts(cfg: AlertConfig | None = None) -> list[dict[str, Any]]:
    cfg = cfg or AlertConfig()
    up = f"up{{{cfg.advisor_selector}}}"
    return [
        {
            "alert": "VllmAdvisorDown",
            "expr": f"{up} == 0 or absent({up})",
            "for": DOWN_FOR,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": SUMMARY_ADVISOR_DOWN,
                "description": DESCRIPTION_ADVISOR_DOWN,
                "runbook_url": runbook_url(github_anchor("VllmAdvisorDown"), cfg.runbook_base),
                "dashboard_url": dashboard_url(FLEET_DASHBOARD_UID, cfg.dashboard_base),
            },
        },
        {
            "alert": "VllmAdvisorServerUnreadable",
            "expr": f"{ADVISOR_UP_SERIES} == 0",
            "for": DOWN_FOR,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": SUMMARY_SERVER_DOWN,
                "description": DESCRIPTION_SERVER_DOWN,
                "runbook_url": runbook_url(github_anchor("VllmAdvisorServerUnreadable"), cfg.runbook_base),
                "dashboard_url": dashboard_url(SERVER_DASHBOARD_UID, cfg.dashboard_base),
            },
        },
    ]


def all_alerts(rules: Sequence[Rule], cfg: AlertConfig | None = None) -> list[dict[str, Any]]:
    ordered = sorted(rules, key=lambda r: r.id)
    symptoms = [a for a in (symptom_alert(r, cfg) for r in ordered) if a is not None]
    return [*(rule_alert(r, cfg) for r in ordered), *symptoms, *slo_alerts(cfg), *meta_alerts(cfg)]


def rule_groups(rules: Sequence[Rule], cfg: AlertConfig | None = None) -> dict[str, Any]:
    """The content of ``vllm-advisor.rules.yaml`` (also the ``spec`` of the PrometheusRule)."""
    cfg = cfg or AlertConfig()
    recs, _ = recording_rules(vllm_selector=cfg.vllm_selector)
    return {
        "groups": [
            {"name": ALERT_GROUP, "rules": all_alerts(rules, cfg)},
            {"name": RECORD_GROUP, "interval": "30s", "rules": recs},
        ]
    }


def dump_yaml(data: Any) -> str:
    """Deterministic YAML: keys in insertion order, no line wrapping."""
    return yaml.safe_dump(data, sort_keys=False, width=10_000, allow_unicode=True, default_flow_style=False)


def render_rules_file(rules: Sequence[Rule], cfg: AlertConfig | None = None) -> str:
    _, skipped = recording_rules()
    no_promql = [r.id for r in sorted(rules, key=lambda r: r.id) if symptom_condition_signals(r) is None]
    knob = [
        r.id
        for r in sorted(rules, key=lambda r: r.id)
        if symptom_condition_signals(r) and needs_knob_series(r)
    ]
    head = [
        YAML_HEADER.rstrip("\n"),
        "#",
        "# VllmAdvisor<Rule>: one per rule, firing while that rule is the advisor's current recommendation",
        f"# (for: {ALERT_FOR}; the advisor already held the rule's own for:); it carries the knob and value.",
        "# Vllm<Rule>: the rule's symptom in PromQL (its conditions on the recording rules below), for",
        "# every server and every rule that holds, advisor or not; held max(rule's for, "
        + ", ".join(f"{k} {v}" for k, v in SEVERITY_FOR.items())
        + ").",
        "# Rules whose conditions read a knob need vllm_advisor_engine_knob (a sidecar or the fleet daemon): "
        + (", ".join(knob) or "none")
        + ".",
        "# Rules that cannot be written in PromQL (a signal without a twin): "
        + (", ".join(no_promql) or "none")
        + ".",
        "# Service level: VllmTtftP95High, VllmItlP95High, VllmRequestErrorRatioHigh, VllmServerDown (up == 0).",
        "# VllmAdvisorDown, VllmAdvisorServerUnreadable: the advisor itself. Recording rules: one per signal",
        f"# with a PromQL twin, named {RECORD_LEVEL}:vllm_<signal>:<operation><window>, aggregated by",
        f"# ({', '.join(GROUP_LABELS)}); joins with vllm_advisor_engine_knob match on instance.",
        "# Signals whose twin cannot be grouped: " + (", ".join(skipped) if skipped else "none") + ".",
    ]
    return "\n".join(head) + "\n" + dump_yaml(rule_groups(rules, cfg))
