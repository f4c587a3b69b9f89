"""The generated files are committed: regenerate them and fail on any difference; the
generation is deterministic; every rule has its alert and its runbook section."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from advisor.core import names
from advisor.derive.signals import CATALOG
from advisor.diagnose.ruleset import load_rules
from advisor.drive import generate as gen
from advisor.outputs import alert_config, alert_tests, alerts, dashboards, recording
from tests.paths import REPO


def test_committed_files_match_a_fresh_generation(tmp_path: Path) -> None:
    written = gen.generate(tmp_path)
    assert written, "generate wrote nothing"
    problems = []
    for path in written:
        rel = path.relative_to(tmp_path)
        committed = REPO / rel
        if not committed.is_file():
            problems.append(f"not committed: {rel}")
        elif committed.read_text(encoding="utf-8") != path.read_text(encoding="utf-8"):
            problems.append(f"differs: {rel}")
    problems += gen.diff(REPO)
    assert not problems, "run `vllm-advisor generate` and commit:\n" + "\n".join(problems)


def test_diff_reports_missing_and_changed_files(tmp_path: Path) -> None:
    gen.generate(tmp_path)
    assert gen.diff(tmp_path) == []
    (tmp_path / gen.RUNBOOK_FILE).unlink()
    rules_file = tmp_path / gen.RULES_FILE
    rules_file.write_text(rules_file.read_text().replace("    for: 1m", "    for: 5m", 1))
    out = gen.diff(tmp_path)
    assert f"missing: {gen.RUNBOOK_FILE}" in out
    changed = [d for d in out if d.startswith("---")]
    assert len(changed) == 1 and "-    for: 5m" in changed[0] and "+    for: 1m" in changed[0]


def test_generation_is_deterministic(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    pa, pb = gen.generate(a), gen.generate(b)
    assert [p.relative_to(a) for p in pa] == [p.relative_to(b) for p in pb]
    for x, y in zip(pa, pb, strict=True):
        assert x.read_bytes() == y.read_bytes(), x


def test_every_rule_has_an_alert_and_a_runbook_section() -> None:
    rules = load_rules()
    groups = yaml.safe_load((REPO / gen.RULES_FILE).read_text())["groups"]
    alert_rules = {r["alert"]: r for r in groups[0]["rules"]}
    runbook = (REPO / gen.RUNBOOK_FILE).read_text()
    headings = {alert_config.github_anchor(h) for h in re.findall(r"^#+ (.+)$", runbook, flags=re.M)}
    for rule in rules:
        a = alert_rules[rule.alert]
        assert a["expr"] == f'vllm_advisor_recommendation_info{{rule="{rule.id}"}} == 1'
        assert a["labels"]["severity"] == rule.severity
        assert a["annotations"]["summary"] == rule.summary
        assert a["annotations"]["runbook_url"].endswith("#" + names.runbook_anchor(rule.id))
        assert names.runbook_anchor(rule.id) in headings
        assert f"**{rule.summary}**" in runbook
    symptoms = {names.symptom_alert_name(r.id) for r in rules if alerts.symptom_alert(r) is not None}
    assert set(alert_rules) == {r.alert for r in rules} | symptoms | set(alert_config.SLO_ALERTS) | set(
        alert_config.META_ALERTS
    )
    # every rule has its symptom alert: each condition has a PromQL twin (the KV capacity at
    # max_model_len and the MoE model facts from the advisor's vllm_advisor_engine_fact; the batch
    # over what the KV cache holds, in whole blocks); a rule of the advisor's series alone stands on
    # the server's running-batch series
    assert {r.id for r in rules if alerts.symptom_alert(r) is None} == set()
    for rid in ("kv-capacity-below-context", "moe-expert-parallel"):
        expr = alert_rules[names.symptom_alert_name(rid)]["expr"]
        anchor = "group without (signal) (instance_model:vllm_requests_running:avg5m) and on (instance) ("
        assert expr.startswith(anchor)
    for rule in rules:
        sym = alert_rules.get(names.symptom_alert_name(rule.id))
        if sym is not None:
            assert sym["labels"] == {"severity": rule.severity, "rule": rule.id}
            assert alert_tests._seconds(sym["for"]) >= rule.for_s
            assert "vllm_advisor_recommendation_info" not in sym["expr"]
            assert sym["annotations"]["runbook_url"].endswith("#" + names.runbook_anchor(rule.id))
    for name in alert_config.SLO_ALERTS + alert_config.META_ALERTS:
        assert alert_config.github_anchor(name) in headings, name


def test_every_runbook_url_points_at_an_existing_anchor() -> None:
    runbook = (REPO / gen.RUNBOOK_FILE).read_text()
    anchors = {alert_config.github_anchor(h) for h in re.findall(r"^#+ (.+)$", runbook, flags=re.M)}
    groups = yaml.safe_load((REPO / gen.RULES_FILE).read_text())["groups"]
    urls = [r["annotations"]["runbook_url"] for r in groups[0]["rules"]]
    assert len(urls) == len(alerts.all_alerts(load_rules()))
    for url in urls:
        base, _, anchor = url.partition("#")
        assert base == alert_config.RUNBOOK_BASE_URL
        assert anchor in anchors, url


def test_generated_files_say_do_not_edit() -> None:
    for rel in gen.render_all():
        text = (REPO / rel).read_text()
        if rel.endswith(".json"):
            if rel.startswith("grafana/"):
                assert "DO NOT EDIT" in yaml.safe_load(text)["description"], rel
        else:
            assert "DO NOT EDIT" in text.splitlines()[0], rel


def test_recording_rules_cover_every_groupable_twin_with_unique_names() -> None:
    recs, skipped = recording.recording_rules()

    with_twin = [s.name for s in CATALOG.values() if s.promql]
    assert sorted([r["labels"]["signal"] for r in recs] + skipped) == sorted(with_twin)
    names_ = [r["record"] for r in recs]
    assert len(set(names_)) == len(names_)
    for r in recs:
        assert re.fullmatch(r"[a-z_]+:[a-z0-9_]+:[a-z0-9_]+", r["record"]), r["record"]
        # every aggregation keeps the grouping labels
        for m in re.finditer(r"\b(sum|avg|max|min|count) by \(([^)]*)\)", r["expr"]):
            labels = {x.strip() for x in m.group(2).split(",")}
            assert {"instance"} <= labels, r
    assert recording.recording_for("preemptions_per_second") == "instance_model:vllm_preemptions:rate5m"


def test_group_twin_rewrites_aggregations_and_refuses_bare_scalars() -> None:
    assert recording.group_twin("sum(rate(x[5m]))") == "sum by (instance, job, model_name) (rate(x[5m]))"
    assert (
        recording.group_twin("histogram_quantile(0.9, sum by (le) (rate(x_bucket[5m])))")
        == "histogram_quantile(0.9, sum by (le, instance, job, model_name) (rate(x_bucket[5m])))"
    )
    assert recording.group_twin("max_over_time(y[5m])") == "max_over_time(y[5m])"
    try:
        recording.group_twin("x / scalar(sum(y))")
    except recording.UngroupableError as e:
        assert "scalar" in str(e)
    else:
        raise AssertionError("scalar() over another series must be refused")


def test_dashboards_have_stable_ids_variables_and_no_hardcoded_datasource() -> None:
    import json

    for rel, uid in (
        (gen.SERVER_DASHBOARD_FILE, alert_config.SERVER_DASHBOARD_UID),
        (gen.FLEET_DASHBOARD_FILE, alert_config.FLEET_DASHBOARD_UID),
    ):
        d = json.loads((REPO / rel).read_text())
        assert d["uid"] == uid and d["schemaVersion"] >= 39
        ids = [p["id"] for p in d["panels"]]
        assert ids == list(range(1, len(ids) + 1))
        assert {v["name"] for v in d["templating"]["list"]} >= {"datasource", "job", "instance", "model_name"}
        for p in d["panels"]:
            assert p["datasource"] == dashboards.DS
            for t in p["targets"]:
                assert t["datasource"] == dashboards.DS
        assert len({(p["gridPos"]["x"], p["gridPos"]["y"]) for p in d["panels"]}) == len(ids)
