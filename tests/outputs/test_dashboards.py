"""The generated Grafana dashboards: every panel says what it shows and in which unit, every query
is filtered by the job and instance variables, the JSON round-trips through Grafana's own
foundation SDK, and every PromQL expression (dashboards, alert and recording rules) parses with
promql-parser. (That every query returns data from a real Prometheus holding recorded data is
tests/outputs/test_alerting_integration.py.)"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard

from advisor.drive import generate as gen
from advisor.outputs import dashboards
from tests.paths import REPO

BOARDS = (gen.SERVER_DASHBOARD_FILE, gen.FLEET_DASHBOARD_FILE)


def _board(rel: str) -> dict[str, Any]:
    return dict(json.loads((REPO / rel).read_text()))


@pytest.mark.parametrize("rel", BOARDS)
def test_every_panel_has_a_description_a_unit_and_job_and_instance_filters(rel: str) -> None:
    board = _board(rel)
    assert {"job", "vllm_job", "instance"} <= {v["name"] for v in board["templating"]["list"]}
    for p in board["panels"]:
        assert p.get("description"), p["title"]
        assert p["fieldConfig"]["defaults"].get("unit"), p["title"]
        for t in p["targets"]:
            if 'vllm_advisor="fleet"' in t["expr"]:
                # the fleet daemon's per-deployment series (desired replicas) have no server's
                # instance: they are filtered by the vLLM job and model
                assert 'model_name=~"$model_name"' in t["expr"], (p["title"], t["expr"])
                assert 'job=~"$vllm_job"' in t["expr"], (p["title"], t["expr"])
                continue
            assert '$instance"' in t["expr"], (p["title"], t["expr"])
            assert 'job=~"$job"' in t["expr"] or 'job=~"$vllm_job"' in t["expr"], (p["title"], t["expr"])


@pytest.mark.parametrize("rel", BOARDS)
def test_json_round_trips_through_the_grafana_foundation_sdk(rel: str) -> None:
    board = _board(rel)
    model = Dashboard.from_json(board)
    again = json.loads(json.dumps(model, cls=JSONEncoder))
    for key in ("uid", "title", "description", "schemaVersion", "tags"):
        assert again[key] == board[key], key
    assert [v["name"] for v in again["templating"]["list"]] == [
        v["name"] for v in board["templating"]["list"]
    ]
    got = {p["id"]: p for p in again["panels"]}
    for p in board["panels"]:
        q = got[p["id"]]
        assert (q["type"], q["title"], q["description"]) == (p["type"], p["title"], p["description"])
        assert q["fieldConfig"]["defaults"]["unit"] == p["fieldConfig"]["defaults"]["unit"]
        assert [t["expr"] for t in q["targets"]] == [t["expr"] for t in p["targets"]]
        assert q["gridPos"] == p["gridPos"]


def _exprs() -> list[tuple[str, str]]:
    out = []
    for rel in BOARDS:
        for where, expr in dashboards.dashboard_queries(_board(rel)):
            out.append((f"{rel} {where}", expr.replace("$__rate_interval", "5m")))
    for g in yaml.safe_load((REPO / gen.RULES_FILE).read_text())["groups"]:
        for r in g["rules"]:
            out.append((f"{gen.RULES_FILE} {r.get('alert') or r.get('record')}", r["expr"]))
    return out


def test_every_promql_expression_parses() -> None:
    import promql_parser

    exprs = _exprs()
    assert len(exprs) > 100
    bad = []
    for where, expr in exprs:
        try:
            promql_parser.parse(expr)
        except Exception as e:  # the parser raises ValueError-like errors with the position
            bad.append(f"{where}: {e}")
    assert not bad, "\n".join(bad)
    with pytest.raises(ValueError):  # the parser is not lenient
        promql_parser.parse("sum by (instance (rate(vllm:x[5m]))")
