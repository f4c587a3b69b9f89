"""Issue 34, G1: bytes that are not UTF-8 in what the advisor exports (a model path or
``--served-model-name`` read from the vLLM process's command line, decoded with surrogate
escapes; a label value read from Prometheus) never empty ``/metrics`` or the page."""

from __future__ import annotations

import os
import threading

import requests
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from advisor.diagnose.advise import Diagnosis
from advisor.diagnose.ruleset import load_rules
from advisor.outputs import exporter
from advisor.outputs.state import ExportState
from tests.hang import HANG_S

MODEL = os.fsdecode(b"/models/llama-\xff\xfe")  # as Python reads a process's argv: surrogates


def _state() -> ExportState:
    diag = Diagnosis("healthy", "no rule fired", None, (), {"model": MODEL}, {"model": MODEL}, 0.0, {})
    return ExportState(diag, True, tuple(load_rules()))


def test_metrics_with_a_model_name_of_non_utf8_bytes_are_served_escaped() -> None:
    text = generate_latest(exporter.make_registry(_state)).decode("utf-8")
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    models = {s.labels["model"] for s in fams["vllm_advisor_engine_info"].samples}
    assert models == {"/models/llama-\\udcff\\udcfe"}
    assert "vllm_advisor_up" in fams


def test_the_page_with_such_a_model_name_is_served() -> None:
    srv = exporter.make_server("127.0.0.1", 0, _state)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{srv.server_address[1]}"
        for path in ("/metrics", "/", "/api/v1/diagnosis"):
            r = requests.get(base + path, timeout=HANG_S)
            assert r.status_code == 200 and r.content, path
            assert "llama-" in r.text, path
    finally:
        srv.shutdown()
        srv.server_close()
