"""promtool unit tests of the generated alerts: each alert on both sides of its ``for:``, with
the exact annotations, on series labelled as the user's selectors would match.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from advisor.core import defaults as vllm_defaults
from advisor.core import knobs, names, selectors
from advisor.core import steps as knob_steps
from advisor.core.units import parse_duration
from advisor.diagnose.ruleset import Rule
from advisor.outputs.alert_config import (
    ADVISOR_UP_SERIES,
    ALERT_FOR,
    DOWN_FOR,
    GROUP_LABELS,
    RECOMMENDATION_SERIES,
    VLLM_JOB,
    YAML_HEADER,
    AlertConfig,
    AlertConfigError,
)
from advisor.outputs.alerts import (
    ANCHOR_SIGNAL,
    EVALUATION_INTERVAL,
    dump_yaml,
    from_advisor,
    num_text,
    rule_groups,
    threshold,
)
from advisor.outputs.recording import recording_for


# ---------------------------------------------------------------- promtool unit tests
def render_template(template: str, labels: Mapping[str, str]) -> str:
    """Expand the Go-template subset our annotations use (``{{ $labels.x }}`` and
    ``{{ if $labels.x }}...{{ end }}``), as Prometheus would, for expected values."""

    def cond(m: re.Match[str]) -> str:
        return m.group(2) if labels.get(m.group(1)) else ""

    out = re.sub(r"\{\{ if \$labels\.(\w+) \}\}(.*?)\{\{ end \}\}", cond, template)
    out = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), out)
    if "{{" in out:
        raise ValueError(f"template construct not supported: {template!r}")
    return out


def example_labels(rule: Rule) -> dict[str, str]:
    """The labels a recommendation of ``rule`` carries, with a plausible value change for its
    first knob (current from the rule's first firing example or the knob's default)."""
    choice = rule.knobs[0]
    knob = knobs.KNOBS.get(choice.name)
    example = (rule.examples.get("fires") or [{}])[0]
    current: Any = example.get(choice.name)
    if current is None and knob is not None:
        current = knob.default("0.32.0", vllm_defaults.Hardware(device="gpu", gpu_memory_gib=141.0)).value
    proposed: Any = None
    if current is not None and choice.step:
        try:
            proposed = knob_steps.propose(choice.name, current, choice.direction, choice.step)
        except (ValueError, TypeError, KeyError):
            proposed = None
    return {
        "rule": rule.id,
        "knob": choice.name,
        "flag": (knob.flag or knob.env or "") if knob else "",
        "direction": choice.direction,
        "current": _fmt(current) if current is not None else "unknown",
        "proposed": _fmt(proposed) if proposed is not None else "unknown",
        "severity": rule.severity,
    }


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _series(metric: str, labels: Mapping[str, str]) -> str:
    inner = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{metric}{{{inner}}}"


def _seconds(duration: str) -> int:
    return int(parse_duration(duration))


SERIES_S = 15  # the input series' step: a scrape every 15 s


def _fires(hold: int, every: int, holds_from: int = 0) -> int:
    """When promtool, evaluating every ``every`` seconds, first shows an alert firing whose
    condition holds from ``holds_from`` seconds on (a rate: from its second sample) and whose
    ``for:`` is ``hold`` seconds: pending at the first evaluation that sees the condition,
    firing at the first evaluation ``hold`` after that. One evaluation earlier it is not."""
    pending = -(-holds_from // every) * every
    return pending + -(-hold // every) * every


def _samples(fire: int, holds_from: int = 0) -> int:
    """How many steps of an input series reach past the check at ``fire`` (with room)."""
    return (fire - holds_from) // SERIES_S + 4


def selector_labels(matchers: str) -> dict[str, str]:
    """Labels a series needs to match ``matchers`` (for unit tests): ``=`` values, and a regex's
    first plain alternative. AlertConfigError for a matcher no plain value can satisfy."""
    out: dict[str, str] = {}
    for part in re.finditer(selectors.MATCHER_RE, selectors.selector_matchers("{" + matchers + "}")):
        name, op, value = part.group(1), part.group(2), part.group(3)
        if op == "=":
            out[name] = value
        elif op == "=~" and re.fullmatch(r"[\w.:-]+", value.split("|")[0]):
            out[name] = value.split("|")[0]
        elif op in ("!=", "!~"):
            continue
        else:
            raise AlertConfigError(f"cannot make a unit-test series match {name}{op}{value!r}")
    return out


def _holds(op: str, v: float) -> float:
    """A value ``x`` for which ``x op v`` holds."""
    return {">": v * 2 if v > 0 else v + 1, ">=": v, "<": v / 2 if v > 0 else v - 1, "<=": v, "==": v}.get(
        op, v + 1
    )


def _fails(op: str, v: float) -> float:
    """A value ``x`` for which ``x op v`` does not hold."""
    return {
        ">": v / 2 if v > 0 else v - 1,
        ">=": v / 2 if v > 0 else v - 1,
        "<": v * 2 if v > 0 else v + 1,
    }.get(op, v * 2 + 1 if op in ("<=", "==") else v)


def _grouped(labels: Mapping[str, str], by: Sequence[str] = GROUP_LABELS) -> dict[str, str]:
    """The labels an aggregation ``by`` keeps."""
    return {k: v for k, v in labels.items() if k in by}


def _symptom_tests(
    rules: Sequence[Rule], alerts: Mapping[str, Any], cfg: AlertConfig, every: int
) -> list[dict[str, Any]]:
    # the recording rules' series: grouped by (instance, job, model_name)
    vllm = _grouped({**selector_labels(cfg.vllm_selector), "model_name": "tiny-llama"})
    tests = []
    for rule in sorted(rules, key=lambda r: r.id):
        a = alerts.get(names.symptom_alert_name(rule.id))
        if a is None:
            continue
        fire = _fires(_seconds(a["for"]), every)
        n = _samples(fire)
        series = []
        advisor = _grouped(selector_labels(cfg.advisor_selector))
        if all(from_advisor(c.signal) for c in rule.when):  # the alert stands on the server's series
            for inst in ("gpu-node-1", "gpu-node-2"):
                labels = {"instance": inst, **vllm, "signal": ANCHOR_SIGNAL}
                series.append({"series": _series(recording_for(ANCHOR_SIGNAL), labels), "values": f"1x{n}"})
        for i, c in enumerate(rule.when):
            v = threshold(c.value, cfg)
            knob = from_advisor(c.signal)  # the advisor's series: its job, no model_name
            for inst, x in (
                ("gpu-node-1", _holds(c.op, v)),
                ("gpu-node-2", _fails(c.op, v) if i == 0 else _holds(c.op, v)),
            ):
                labels = {"instance": inst, **(advisor if knob else vllm), "signal": c.signal}
                series.append(
                    {"series": _series(recording_for(c.signal), labels), "values": f"{num_text(x)}x{n}"}
                )
        labels = {"instance": "gpu-node-1", **vllm}
        exp = {
            "exp_labels": {**a["labels"], **labels},
            "exp_annotations": {k: render_template(v, labels) for k, v in a["annotations"].items()},
        }
        tests.append(
            {
                "name": f"{a['alert']} fires after {a['for']} while every condition of {rule.id} holds; "
                f"not on a server where {rule.when[0].signal} does not",
                "interval": f"{SERIES_S}s",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": f"{fire - every}s", "alertname": a["alert"], "exp_alerts": []},
                    {"eval_time": f"{fire}s", "alertname": a["alert"], "exp_alerts": [exp]},
                ],
            }
        )
    return tests


def _slo_tests(alerts: Mapping[str, Any], cfg: AlertConfig, every: int) -> list[dict[str, Any]]:
    raw = {**selector_labels(cfg.vllm_selector), "model_name": "tiny-llama"}  # vLLM's own series
    vllm = _grouped(raw)
    tests = []

    def expect(name: str, labels: Mapping[str, str]) -> dict[str, Any]:
        a = alerts[name]
        return {
            "exp_labels": {**a["labels"], **labels},
            "exp_annotations": {k: render_template(v, labels) for k, v in a["annotations"].items()},
        }

    for name, signal, target in (
        ("VllmTtftP95High", "ttft_seconds_p95", cfg.ttft_p95_seconds),
        ("VllmItlP95High", "itl_seconds_p95", cfg.itl_p95_seconds),
    ):
        fire = _fires(_seconds(alerts[name]["for"]), every)
        n = _samples(fire)
        over = {"instance": "gpu-node-1", **vllm}
        under = {"instance": "gpu-node-2", **vllm}
        tests.append(
            {
                "name": f"{name} fires after {alerts[name]['for']} over the {target:g}s target, not under it",
                "interval": f"{SERIES_S}s",
                "input_series": [
                    {
                        "series": _series(recording_for(signal), {**over, "signal": signal}),
                        "values": f"{target * 2:g}x{n}",
                    },
                    {
                        "series": _series(recording_for(signal), {**under, "signal": signal}),
                        "values": f"{target / 2:g}x{n}",
                    },
                ],
                "alert_rule_test": [
                    {"eval_time": f"{fire - every}s", "alertname": name, "exp_alerts": []},
                    {"eval_time": f"{fire}s", "alertname": name, "exp_alerts": [expect(name, over)]},
                ],
            }
        )
    name = "VllmRequestErrorRatioHigh"
    # a rate needs two samples: the condition holds from the second one on
    fire = _fires(_seconds(alerts[name]["for"]), every, holds_from=SERIES_S)
    n = _samples(fire, SERIES_S)
    bad = {"instance": "gpu-node-1", **raw}
    http_bad = {"instance": "gpu-node-2", **selector_labels(cfg.vllm_selector)}
    ok = {"instance": "gpu-node-3", **raw}
    fail_per_step = max(1, round(cfg.error_ratio * 400))  # of 100 per step: twice the ratio
    ok_fail = max(0, round(cfg.error_ratio * 50) - 1)  # half the ratio, or none
    rs = "vllm:request_success_total"
    tests.append(
        {
            "name": f"{name} fires after {alerts[name]['for']} of failing requests (finished reason or HTTP 5xx), "
            "not for a server under the ratio",
            "interval": f"{SERIES_S}s",
            "input_series": [
                {
                    "series": _series(rs, {**bad, "finished_reason": "error"}),
                    "values": f"0+{fail_per_step}x{n}",
                },
                {
                    "series": _series(rs, {**bad, "finished_reason": "stop"}),
                    "values": f"0+{100 - fail_per_step}x{n}",
                },
                {
                    "series": _series("http_requests_total", {**http_bad, "status": "5xx"}),
                    "values": f"0+{fail_per_step}x{n}",
                },
                {
                    "series": _series("http_requests_total", {**http_bad, "status": "2xx"}),
                    "values": f"0+{100 - fail_per_step}x{n}",
                },
                {"series": _series(rs, {**ok, "finished_reason": "abort"}), "values": f"0+{ok_fail}x{n}"},
                {
                    "series": _series(rs, {**ok, "finished_reason": "length"}),
                    "values": f"0+{100 - ok_fail}x{n}",
                },
            ],
            "alert_rule_test": [
                {"eval_time": f"{fire - every}s", "alertname": name, "exp_alerts": []},
                {
                    "eval_time": f"{fire}s",
                    "alertname": name,
                    "exp_alerts": [
                        expect(name, _grouped(bad)),
                        expect(name, _grouped(http_bad, ("instance", "job"))),
                    ],
                },
            ],
        }
    )
    name = "VllmServerDown"
    # up is 1, then 0 from the second sample on
    fire = _fires(_seconds(alerts[name]["for"]), every, holds_from=SERIES_S)
    target_labels = {"instance": "gpu-node-1", **selector_labels(cfg.vllm_selector)}
    tests.append(
        {
            "name": f"{name} fires after {alerts[name]['for']} of failed scrapes of vLLM (up == 0), not before",
            "interval": f"{SERIES_S}s",
            "input_series": [
                {"series": _series("up", target_labels), "values": f"1 0x{_samples(fire, SERIES_S)}"}
            ],
            "alert_rule_test": [
                {"eval_time": f"{fire - every}s", "alertname": name, "exp_alerts": []},
                {
                    "eval_time": f"{fire}s",
                    "alertname": name,
                    "exp_alerts": [expect(name, target_labels)],
                },
            ],
        }
    )
    return tests


def promtool_tests(
    rules: Sequence[Rule],
    rule_file: str = "../vllm-advisor.rules.yaml",
    cfg: AlertConfig | None = None,
    evaluation_interval: str = EVALUATION_INTERVAL,
) -> dict[str, Any]:
    """promtool unit tests: for every alert, both sides of ``for:`` and the exact labels and
    annotations; for rule alerts also that another rule's recommendation leaves it quiet; for
    symptom alerts that a server missing one condition stays quiet. Each alert is checked at
    the last evaluation before it fires and at the one it fires at, for rules evaluated every
    ``evaluation_interval`` (the deploy examples' 15 s by default; Prometheus's own default is 1m)."""
    cfg = cfg or AlertConfig()
    every = _seconds(evaluation_interval)
    groups = rule_groups(rules, cfg)
    alerts = {a["alert"]: a for a in groups["groups"][0]["rules"]}
    target = {"instance": "gpu-node-1", **selector_labels(cfg.advisor_selector)}
    tests: list[dict[str, Any]] = []
    fire = _fires(_seconds(ALERT_FOR), every)
    steps = max(20, _samples(fire))
    ordered = sorted(rules, key=lambda r: r.id)
    for i, rule in enumerate(ordered):
        labels = {**target, **example_labels(rule)}
        other = ordered[(i + 1) % len(ordered)]
        other_labels = {**target, **example_labels(other)}
        ann = alerts[rule.alert]["annotations"]
        expected = {k: render_template(v, labels) for k, v in ann.items()}
        tests.append(
            {
                "name": f"{rule.alert} fires after {ALERT_FOR} while {rule.id} is the recommendation, "
                f"naming {labels['knob']} {labels['direction']} in its description",
                "interval": f"{SERIES_S}s",
                "input_series": [
                    {"series": _series(RECOMMENDATION_SERIES, labels), "values": f"1x{steps}"},
                    {
                        "series": _series(RECOMMENDATION_SERIES, {**other_labels, "instance": "gpu-node-2"}),
                        "values": f"1x{steps}",
                    },
                ],
                "alert_rule_test": [
                    {"eval_time": f"{fire - every}s", "alertname": rule.alert, "exp_alerts": []},
                    {
                        "eval_time": f"{fire}s",
                        "alertname": rule.alert,
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": rule.severity, **labels},
                                "exp_annotations": expected,
                            }
                        ],
                    },
                ],
            }
        )
    down = _seconds(DOWN_FOR)
    fire_down = _fires(down, every, holds_from=SERIES_S)  # up is 1, then 0 from the second sample on
    fire_absent = _fires(down, every)  # absent from the start
    steps = max(20, _samples(fire_down, SERIES_S))
    adv = alerts["VllmAdvisorDown"]["annotations"]
    tests.append(
        {
            "name": f"VllmAdvisorDown fires after {DOWN_FOR} when the advisor target is down, not before",
            "interval": f"{SERIES_S}s",
            "input_series": [{"series": _series("up", target), "values": f"1 0x{steps}"}],
            "alert_rule_test": [
                {"eval_time": f"{fire_down - every}s", "alertname": "VllmAdvisorDown", "exp_alerts": []},
                {
                    "eval_time": f"{fire_down}s",
                    "alertname": "VllmAdvisorDown",
                    "exp_alerts": [
                        {
                            "exp_labels": {"severity": "warning", **target},
                            "exp_annotations": {k: render_template(v, target) for k, v in adv.items()},
                        }
                    ],
                },
            ],
        }
    )
    absent_labels = {  # absent() keeps the selector's equality matchers as labels
        m.group(1): m.group(3)
        for m in selectors.MATCHER_RE.finditer(cfg.advisor_selector)
        if m.group(2) == "="
    }
    tests.append(
        {
            "name": f"VllmAdvisorDown fires after {DOWN_FOR} when no advisor is scraped at all",
            "interval": f"{SERIES_S}s",
            "input_series": [
                {"series": _series("up", {"instance": "gpu-node-1", "job": VLLM_JOB}), "values": f"1x{steps}"}
            ],
            "alert_rule_test": [
                {"eval_time": f"{fire_absent - every}s", "alertname": "VllmAdvisorDown", "exp_alerts": []},
                {
                    "eval_time": f"{fire_absent}s",
                    "alertname": "VllmAdvisorDown",
                    "exp_alerts": [
                        {
                            "exp_labels": {"severity": "warning", **absent_labels},
                            "exp_annotations": {k: render_template(v, absent_labels) for k, v in adv.items()},
                        }
                    ],
                },
            ],
        }
    )
    srv = alerts["VllmAdvisorServerUnreadable"]["annotations"]
    tests.append(
        {
            "name": f"VllmAdvisorServerUnreadable fires after {DOWN_FOR} of failed vLLM scrapes, not before",
            "interval": f"{SERIES_S}s",
            "input_series": [{"series": _series(ADVISOR_UP_SERIES, target), "values": f"1 0x{steps}"}],
            "alert_rule_test": [
                {
                    "eval_time": f"{fire_down - every}s",
                    "alertname": "VllmAdvisorServerUnreadable",
                    "exp_alerts": [],
                },
                {
                    "eval_time": f"{fire_down}s",
                    "alertname": "VllmAdvisorServerUnreadable",
                    "exp_alerts": [
                        {
                            "exp_labels": {"severity": "warning", **target},
                            "exp_annotations": {k: render_template(v, target) for k, v in srv.items()},
                        }
                    ],
                },
            ],
        }
    )
    tests += _symptom_tests(rules, alerts, cfg, every)
    tests += _slo_tests(alerts, cfg, every)
    vllm_target = {"instance": "gpu-node-1", **selector_labels(cfg.vllm_selector)}
    tests.append(
        {
            "name": "No alert fires while the advisor is up, reads vLLM and recommends nothing",
            "interval": f"{SERIES_S}s",
            "input_series": [
                {"series": _series("up", target), "values": f"1x{steps}"},
                {"series": _series("up", vllm_target), "values": f"1x{steps}"},
                {"series": _series(ADVISOR_UP_SERIES, target), "values": f"1x{steps}"},
            ],
            "alert_rule_test": [
                {"eval_time": "5m", "alertname": name, "exp_alerts": []} for name in sorted(alerts)
            ],
        }
    )
    return {"rule_files": [rule_file], "evaluation_interval": evaluation_interval, "tests": tests}


def render_promtool_tests(rules: Sequence[Rule], cfg: AlertConfig | None = None) -> str:
    return YAML_HEADER + dump_yaml(promtool_tests(rules, cfg=cfg))
