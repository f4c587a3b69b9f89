"""The sources and `explain`/`inspect` against the shared REAL vLLM CPU server (tests/conftest.py)."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.core import names
from advisor.sources import metrics as m
from tests import realvllm


@pytest.mark.realvllm
def test_live_pages_parse_and_inspect_finds_the_process(vllm_server: realvllm.VllmServer) -> None:
    for _ in range(3):
        page = m.fetch(vllm_server.url + "/metrics")
        snap = m.parse_page(page.text, page.t)
        for fam in (names.NUM_RUNNING, names.KV_CACHE_USAGE, names.TTFT, names.CACHE_CONFIG_INFO):
            assert snap.has(fam)
        time.sleep(0.5)
    res = CliRunner().invoke(main, ["inspect", "--url", vllm_server.url, "--format", "json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["engine"]["vllm_version"].startswith("0.32")
    # the command line of the real process, found by its port (psutil)
    assert d["engine"]["knobs"]["max_model_len"] == {
        "value": 2048,
        "source": "cmdline",
        "detail": d["engine"]["knobs"]["max_model_len"]["detail"],
    }
    assert d["engine"]["facts"]["kv_cache_tokens"]["source"] == "metrics"


@pytest.mark.realvllm
def test_explain_url_on_an_idle_real_server_gives_no_advice(vllm_server: realvllm.VllmServer) -> None:
    res = CliRunner().invoke(
        main, ["explain", "--url", vllm_server.url, "--window", "4s", "--interval", "1s", "--format", "json"]
    )
    assert res.exit_code == 4, res.output  # read fine, too little to diagnose: "no data"
    d = json.loads(res.stdout)
    assert d["status"] == "insufficient-data" and d["recommendation"] is None
    assert d["engine"]["knobs"]["max_model_len"]["source"] == "cmdline"
