"""JSON out is always valid JSON (issue 23, class 1): a number that is not finite is unknown and
written `null`, on every surface that writes JSON: the exporter's /api/v1/diagnosis, `explain
--format json`, the daemon's diagnosis.json, a session's meta.json, the ledger's JSON columns.

Before: Python's json wrote bare `NaN`/`Infinity` (refused by jq, browsers and JSON parsers that
follow the RFC): /api/v1/diagnosis did so on 69 of 75 reads of a server whose histogram counts read
+Inf, and the ledger refused the row (an experiment lost). The diagnosis here is a real one (the
bundled H200 recording) with non-finite numbers put where a buggy source could put them.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import requests

from advisor.cli.common import DEMO_SESSION
from advisor.core import jsonout
from advisor.core.config import Config
from advisor.diagnose.advise import Diagnosis
from advisor.diagnose.ruleset import load_rules
from advisor.drive import inputs
from advisor.drive.runner import export_state
from advisor.outputs import explain
from advisor.outputs.exporter import make_server
from advisor.sources import session as session_src
from advisor.verify.ledger import ExperimentRecord, Ledger
from tests.hang import HANG_S

RULES = load_rules()
ADV, REAL = inputs.from_session(DEMO_SESSION, Config(), RULES)
assert REAL is not None


def strict(text: str) -> Any:
    """Parse as RFC 8259 JSON: NaN, Infinity and -Infinity are refused."""

    def refuse(word: str) -> None:
        raise ValueError(f"not JSON: {word}")

    return json.loads(text, parse_constant=refuse)


def poisoned() -> Diagnosis:
    d = REAL
    signals = {**d.signals, "ttft_seconds_p95": math.nan, "preemptions_per_second": math.inf}
    context = {**d.context, "requests_per_second": -math.inf}
    rec = d.recommendation
    assert rec is not None and rec.predicted is not None
    predicted = {
        **rec.predicted,
        "predicted": {**rec.predicted.get("predicted", {}), "ttft_seconds_p95": math.nan},
    }
    return replace(d, signals=signals, context=context, recommendation=replace(rec, predicted=predicted))


def test_jsonout_writes_unknown_as_null() -> None:
    assert strict(jsonout.dumps({"a": math.nan, "b": [math.inf, 1.5, (-math.inf, 2)]})) == {
        "a": None,
        "b": [None, 1.5, [None, 2]],
    }


def test_explain_json_is_valid_json() -> None:
    data = strict(explain.render_json(poisoned()))
    assert data["signals"]["ttft_seconds_p95"] is None and data["signals"]["preemptions_per_second"] is None
    assert data["recommendation"]["predicted"]["predicted"]["ttft_seconds_p95"] is None


def test_the_api_is_valid_json(tmp_path: Path) -> None:
    st = export_state(ADV, tuple(RULES), poisoned())
    server = make_server("127.0.0.1", 0, lambda: st)
    import threading

    th = threading.Thread(target=server.serve_forever, daemon=True)
    th.start()
    try:
        host, port = server.server_address[:2]
        body = requests.get(f"http://{host}:{port}/api/v1/diagnosis", timeout=HANG_S).text
        assert strict(body)["context"]["requests_per_second"] is None
        assert strict(requests.get(f"http://{host}:{port}/healthz", timeout=HANG_S).text)
    finally:
        server.shutdown()
        server.server_close()


def test_session_meta_and_the_ledger_write_valid_json(tmp_path: Path) -> None:
    p = tmp_path / "meta.json"
    session_src._dump_json(p, {"interval_s": math.nan, "x": [math.inf]})
    assert strict(p.read_text()) == {"interval_s": None, "x": [None]}
    ledger = Ledger(tmp_path / "ledger.sqlite")
    rid = ledger.add(
        ExperimentRecord(
            started_at=1.0,
            verdict="keep",
            source="daemon",
            prediction={"predicted": {"ttft_seconds_p95": math.nan}, "error": {"ttft_seconds_p95": math.inf}},
        )
    )
    (row,) = [r for r in ledger.list() if r["id"] == rid]
    assert row["prediction"] == {"predicted": {"ttft_seconds_p95": None}, "error": {"ttft_seconds_p95": None}}
