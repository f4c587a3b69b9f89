"""Alerts for a fleet and for on-call habits (advisor/outputs/alerts.py): per-symptom alerts from
the rules' PromQL twins, service-level alerts, and the site's settings (``generate --config``),
checked with Debian's real promtool where they are rules."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from advisor.cli import main
from advisor.diagnose.ruleset import load_rules
from advisor.drive import generate as gen
from advisor.outputs import alert_config, alert_tests, alerts, recording
from tests.hang import PROMTOOL_HANG_S


def test_defaults_are_placeholders() -> None:
    cfg = alert_config.AlertConfig()
    assert "example.com" in cfg.runbook_base and "example.com" in cfg.dashboard_base


def test_config_file_and_flags(tmp_path: Path) -> None:
    f = tmp_path / "alerts.yaml"
    f.write_text(
        "runbook_base: https://wiki.corp/runbook\nvllm-selector: 'job=\"inference\"'\nttft_p95_seconds: 1.5\n"
    )
    cfg = alert_config.load_alert_config(str(f), ttft_p95_seconds=0.8, dashboard_base=None)
    assert cfg.runbook_base == "https://wiki.corp/runbook"
    assert cfg.vllm_selector == 'job="inference"' and cfg.ttft_p95_seconds == 0.8
    assert cfg.dashboard_base == alert_config.DASHBOARD_BASE_URL


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("runbook_base: [unclosed\n", r"alerts.yaml:2: not YAML"),
        ("nonsense: 1\n", r"alerts.yaml: unknown setting 'nonsense'"),
        ("ttft_p95_seconds: fast\n", r"alerts.yaml: ttft_p95_seconds: not a number"),
        ("error_ratio: 0\n", r"alerts.yaml: error_ratio: must be above 0"),
        ("vllm_selector: job=vllm\n", r"alerts.yaml: vllm_selector: cannot read the matcher"),
        ("- a\n", r"alerts.yaml: must be a mapping"),
    ],
)
def test_bad_config_is_one_clear_line(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "alerts.yaml"
    f.write_text(text)
    with pytest.raises(alert_config.AlertConfigError, match=message):
        alert_config.load_alert_config(str(f))
    res = CliRunner().invoke(main, ["generate", "--out", str(tmp_path), "--config", str(f)])
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "error:" in res.output


def test_symptom_alerts_join_a_servers_series_and_knobs_on_instance() -> None:
    rules = {r.id: r for r in load_rules()}
    a = alerts.symptom_alert(rules["queue-seqs-cap-binds"])
    assert a is not None and a["alert"] == "VllmQueueSeqsCapBinds"
    assert a["expr"].startswith("(max without (signal) (instance_model:vllm_requests_waiting:avg5m) >= 1)")
    assert " and on (instance, job, model_name) " in a["expr"]
    b = alerts.symptom_alert(rules["itl-stutter-prefill-chunks"])
    assert (
        b is not None
        and "and on (instance) (max without (signal) (instance_model:vllm_max_num_batched_tokens:max) > 2048)"
        in b["expr"]
    )
    # the advisor's facts alone: the alert stands on the server's running batch, joined on instance
    c = alerts.symptom_alert(rules["kv-capacity-below-context"])
    assert c is not None and c["expr"] == (
        "group without (signal) (instance_model:vllm_requests_running:avg5m) and on (instance)"
        " (max without (signal) (instance_model:vllm_kv_capacity_requests_at_max_len:5m) < 2)"
    )
    assert alerts.needs_knob_series(rules["kv-preemption-seqs-bind"])
    assert not alerts.needs_knob_series(rules["queue-at-capacity-scale-out"])


def test_selectors_reach_every_vllm_series() -> None:
    assert alert_config.with_selector('sum(rate(vllm:x_total[5m])) / max(vllm:y{a="b"})', 'job="v"') == (
        'sum(rate(vllm:x_total{job="v"}[5m])) / max(vllm:y{job="v", a="b"})'
    )
    cfg = alert_config.AlertConfig(vllm_selector='job="inference"')
    recs, _ = recording.recording_rules(vllm_selector=cfg.vllm_selector)
    for r in recs:
        assert "vllm:" not in r["expr"] or 'job="inference"' in r["expr"], r["expr"]
    assert 'job="inference"' in alerts.error_ratio_expr(cfg)


def _promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool not on PATH (make system-deps installs Debian's prometheus)"
    return path


@pytest.mark.prometheus
def test_generate_with_a_site_config_passes_its_own_promtool_tests(tmp_path: Path) -> None:
    """A site's selectors, targets and URLs through `generate --config`: the generated rules
    carry them, `generate --check` holds with the config and not without it, and the unit
    tests generated for that config pass promtool, evaluated every minute (Prometheus's own
    default) rather than the deploy examples' 15 s: the default run (tests/outputs/
    test_promtool.py) checks every alert's timing at 15 s, this one that the checks follow the
    evaluation interval, in a quarter of promtool's time."""
    cfg = tmp_path / "site.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "runbook_base": "https://wiki.corp/vllm/RUNBOOK.md",
                "dashboard_base": "https://grafana.corp",
                "vllm_selector": 'job="inference", namespace=~"prod|staging"',
                "advisor_selector": 'job="advisor"',
                "ttft_p95_seconds": 1.5,
                "itl_p95_seconds": 0.05,
                "error_ratio": 0.02,
            }
        )
    )
    out = tmp_path / "site"
    res = CliRunner().invoke(main, ["generate", "--out", str(out), "--config", str(cfg)])
    assert res.exit_code == 0, res.output
    rules_text = (out / gen.RULES_FILE).read_text()
    assert "https://wiki.corp/vllm/RUNBOOK.md#" in rules_text and "example.com" not in rules_text
    assert 'up{job="inference", namespace=~"prod|staging"} == 0' in rules_text
    assert "instance_model:vllm_ttft_seconds:p95_5m) > 1.5" in rules_text
    site = alert_config.load_alert_config(str(cfg))
    every_minute = Path(gen.PROMTOOL_TESTS_FILE).with_name("every-minute.test.yaml")
    spec = alert_tests.promtool_tests(load_rules(), cfg=site, evaluation_interval="1m")
    (out / every_minute).write_text(alerts.dump_yaml(spec))
    r = subprocess.run(
        [_promtool(), "test", "rules", str(every_minute)],
        cwd=out,
        capture_output=True,
        text=True,
        timeout=PROMTOOL_HANG_S,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    # the check compares against the same config: clean with it, a diff without it
    assert (
        CliRunner().invoke(main, ["generate", "--out", str(out), "--config", str(cfg), "--check"]).exit_code
        == 0
    )
    assert CliRunner().invoke(main, ["generate", "--out", str(out), "--check"]).exit_code == 1


@pytest.mark.prometheus
@pytest.mark.parametrize(
    ("alert", "old", "new"),
    [
        ("VllmKvPreemptionCapacity", "for: 10m", "for: 20m"),
        (
            "VllmKvPreemptionCapacity",
            "(instance_model:vllm_kv_cache_usage_ratio:max5m) >= 0.9",
            "(instance_model:vllm_kv_cache_usage_ratio:max5m) >= 0.95",
        ),
        ("VllmTtftP95High", "> 2\n", "> 5\n"),
        ("VllmRequestErrorRatioHigh", "for: 5m", "for: 4m"),
        ("VllmServerDown", "== 0\n", "== 2\n"),
    ],
)
def test_promtool_tests_catch_a_drifted_symptom_or_slo_alert(
    tmp_path: Path, alert: str, old: str, new: str
) -> None:
    """Both sides of each for: and the thresholds are really tested."""
    rules = load_rules()
    text = alerts.render_rules_file(rules)
    start = text.index(f"- alert: {alert}\n")
    end = text.index("- alert:", start + 1)
    block = text[start:end]
    assert old in block
    (tmp_path / "tests").mkdir()
    (tmp_path / "vllm-advisor.rules.yaml").write_text(text[:start] + block.replace(old, new, 1) + text[end:])
    # only the unit tests that check this alert (promtool's time grows with the tests)
    spec = alert_tests.promtool_tests(rules)
    spec["tests"] = [t for t in spec["tests"] if any(c["alertname"] == alert for c in t["alert_rule_test"])]
    assert spec["tests"]
    (tmp_path / "tests" / "t.yaml").write_text(alerts.dump_yaml(spec))
    r = subprocess.run(
        [_promtool(), "test", "rules", "tests/t.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=PROMTOOL_HANG_S,
    )
    assert r.returncode != 0
    assert alert in r.stdout + r.stderr
