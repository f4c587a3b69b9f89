"""Issue 34, G14: ``listen: "[::1]:PORT"`` passes ``config check``, so the exporter must listen
there: an IPv6 host gets an IPv6 socket (an IPv4 one refused the address)."""

from __future__ import annotations

import threading

import requests

from advisor.core.config import parse_listen
from advisor.diagnose.advise import Diagnosis
from advisor.diagnose.ruleset import load_rules
from advisor.outputs import exporter
from advisor.outputs.state import ExportState
from tests.hang import HANG_S


def _state() -> ExportState:
    diag = Diagnosis("healthy", "no rule fired", None, (), {}, {}, 0.0, {})
    return ExportState(diag, True, tuple(load_rules()))


def test_the_exporter_listens_on_ipv6_loopback() -> None:
    host, port = parse_listen("[::1]:0")
    srv = exporter.make_server(host, port, _state)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        r = requests.get(f"http://[::1]:{srv.server_address[1]}/metrics", timeout=HANG_S)
        assert r.status_code == 200 and "vllm_advisor_up 1.0" in r.text
    finally:
        srv.shutdown()
        srv.server_close()
