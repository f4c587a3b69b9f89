"""Issue 23, class 4: Prometheus as a source is defended like the sidecar's HTTP client.

The Prometheus here is a stand-in (tests/prom_standin.py) answering from the samples a
Prometheus stores for recorded real pages: a real Prometheus cannot be made to trickle, stall,
answer wrong JSON types or a partial response on demand.
"""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.core.config import Config
from advisor.diagnose.ruleset import load_rules
from advisor.drive import inputs
from advisor.sources import prometheus as prom
from advisor.sources.metrics import parse_page
from advisor.sources.session import Session
from tests import prom_standin
from tests.paths import REPO

SESSIONS = REPO / "tests" / "fixtures" / "sessions"
INSTANCE = "a.fleet:8000"


@pytest.fixture(scope="module")
def healthy() -> tuple[list[prom_standin.Sample], dict[str, Any], float]:
    """The samples of a recorded healthy CPU server, as Prometheus stores them; the last time."""
    samples, meta = prom_standin.stored_samples(SESSIONS / "cpu-healthy", INSTANCE)
    end = max(t for _, vals in samples for t, _ in vals)
    return samples, meta, end


def _explain(url: str, at: float, *extra: str) -> Any:
    return CliRunner().invoke(
        main,
        [
            "explain",
            "--prometheus",
            url,
            "--instance",
            INSTANCE,
            "--at",
            f"{at:.3f}",
            "--window",
            "120s",
            *extra,
        ],
    )


def test_a_trickling_prometheus_is_cut_off_at_the_overall_deadline(healthy: Any) -> None:
    """One byte every 0.2 s: a read timeout never fires, the overall deadline does. Bounded by
    the bytes the stand-in wrote before the client hung up (~5 in its 1 s deadline), not by
    seconds: a client without the deadline reads the whole answer."""
    samples, meta, _end = healthy
    behaviour = prom_standin.Behaviour("trickle", trickle_s=0.2)
    with prom_standin.serve(samples, meta, behaviour) as url:
        client = prom.Client(url, timeout_s=1.0)
        with pytest.raises(prom.PrometheusError) as e:
            client.metadata()
        assert behaviour.sent[0] < 25  # five seconds' worth at the most
    assert e.value.kind == "timeout"


def test_a_whole_read_has_one_deadline_not_one_per_request(healthy: Any) -> None:
    """read_history makes four requests; under a budget they share one deadline."""
    samples, meta, end = healthy
    behaviour = prom_standin.Behaviour("trickle", trickle_s=0.2)
    with prom_standin.serve(samples, meta, behaviour) as url:
        client = prom.Client(url, timeout_s=5.0)
        with pytest.raises(prom.PrometheusError) as e, client.budget(1.0):
            prom.read_history(client, INSTANCE, end, 120.0)
        # fewer bytes than a single request's own 5 s would have let through (25)
        assert behaviour.sent[0] < 20
    assert e.value.kind == "timeout"


WRONG = [
    b"[]",
    b'{"status": "success", "data": {"resultType": "matrix", "result": {"a": 1}}}',
    b'{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": [], "values": []}]}}',
    b'{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": [[1]]}]}}',
    b'{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": [["x", {}]]}]}}',
    b'{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {"a": 1}, "values": []}]}}',
    b'{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": 7}]}}',
    b'{"status": "success", "data": {"a": [1, 2]}}',
    b'{"status": "success", "data": "x"}',
    b'{"status": "error", "errorType": 5, "error": ["x"]}',
    b'{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": 5}]}}',
    b'{"status": "success", "data": null, "warnings": "x"}',
    b"not json",
    # found by the Prometheus answers fuzz target (issue 34): a sample's time of 400 digits raised
    # OverflowError out of the read
    b'{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {"__name__": "vllm:x", '
    b'"instance": "a.fleet:8000"}, "values": [[' + b"9" * 400 + b', "1"]]}]}}',
    b'{"status": "success", "data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
]


@pytest.mark.parametrize("body", WRONG, ids=range(len(WRONG)))
def test_wrong_json_types_are_one_clear_error_naming_prometheus(healthy: Any, body: bytes) -> None:
    samples, meta, end = healthy
    with prom_standin.serve(samples, meta, prom_standin.Behaviour("body", body=body)) as url:
        client = prom.Client(url, timeout_s=5.0)
        with pytest.raises(prom.PrometheusError) as e:
            prom.read_history(client, INSTANCE, end, 120.0)
        assert e.value.kind in ("bad_response", "query", "http")
        res = _explain(url, end)
    assert res.exit_code == 1, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: Prometheus: "), res.output
    assert "Traceback" not in res.output and "TypeError" not in res.output and "KeyError" not in res.output


def test_a_partial_answer_with_warnings_is_never_healthy(healthy: Any) -> None:
    """The same recorded healthy server: read whole, it is healthy; answered with
    ``warnings: ["partial response"]`` and half the series, the result is unknown (exit 4)
    and the reason names the warning."""
    samples, meta, end = healthy
    with prom_standin.serve(samples, meta, prom_standin.Behaviour("normal")) as url:
        res = _explain(url, end, "--format", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["status"] == "healthy"
    with prom_standin.serve(samples, meta, prom_standin.Behaviour("partial")) as url:
        res = _explain(url, end, "--format", "json")
        client = prom.Client(url)
        hist = prom.read_history(client, INSTANCE, end, 120.0)
    assert res.exit_code == 4, res.output
    d = json.loads(res.stdout)
    assert d["status"] == "insufficient-data" and d["recommendation"] is None
    assert "partial response" in d["reason"]
    assert hist.warnings and "partial response" in hist.warnings[0]
    _, d2 = inputs.from_prometheus(hist, Config(), load_rules(), end, 120.0)
    assert d2.status == "insufficient-data"


def test_discovery_of_100k_series_is_bounded_in_memory(healthy: Any) -> None:
    """100,000 series behind the selector: the discovery answer is cut at its byte bound (or
    its series bound) instead of being decoded whole; the peak of Python allocations stays far
    below the 456 MiB the unbounded read took."""
    samples, meta, end = healthy
    with prom_standin.serve(samples, meta, prom_standin.Behaviour("many_series", n_series=100_000)) as url:
        client = prom.Client(url, timeout_s=30.0)
        tracemalloc.start()
        try:
            with pytest.raises(prom.PrometheusError) as e:
                client.series(['{__name__="vllm:num_requests_running"}'], end - 60, end)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert e.value.kind == "too_many"
    assert "--selector" in str(e.value)
    assert peak < 64 * 2**20, peak


@pytest.mark.parametrize(
    ("knob", "value"),
    [
        ("max_num_seqs", 1e308),
        ("max_num_seqs", -5.0),
        ("max_num_seqs", -1.0),
        ("max_num_seqs", float("nan")),
        ("max_num_seqs", float("inf")),
        ("gpu_memory_utilization", 7.0),
        ("max_num_seqs", 0.0),
    ],
)
def test_a_knob_series_that_is_no_reading_leaves_the_knob_unknown(knob: str, value: float) -> None:
    """Issue 34, G5: a sidecar's knob series read from Prometheus gets a page's checks: 1e308,
    -5, NaN, a utilisation of 7 were taken as the knob's value (1e308 then crashed explain)."""
    sidecar = {"__name__": prom.SIDECAR_KNOB, "instance": "a.fleet:9100", "source": "cmdline"}
    samples = [
        ({**sidecar, "knob": knob}, value),
        ({**sidecar, "knob": "max_num_batched_tokens"}, 8192.0),
    ]
    got = prom.sidecar_engine(samples, INSTANCE)
    assert knob not in got
    assert got["max_num_batched_tokens"].value == 8192
    got, bad = prom.sidecar_readings(samples, INSTANCE)  # and it is a bad sample, named
    assert knob not in got and len(bad) == 1
    (w,) = bad
    assert w.family == prom.SIDECAR_KNOB and w.reason.startswith(f"{knob} = ") and "a.fleet:9100" in w.reason
    expected = (
        "non_finite"
        if value != value or value == float("inf")
        else "negative"
        if value < 0
        else "out_of_range"
    )
    assert w.kind == expected


def test_explain_prometheus_names_a_sidecars_bad_knob_series() -> None:
    """G5, `explain --prometheus`: a recorded healthy server whose sidecar exports
    `max_num_seqs` as 1e308: the knob unknown, and the diagnosis does not call the server
    healthy: it names the bad sample (before: left out silently, "healthy")."""
    pages = tuple(parse_page(text, t) for t, text in Session.load(SESSIONS / "cpu-healthy").iter_scrapes())
    at = pages[-1].t
    sidecar = {
        "__name__": prom.SIDECAR_KNOB,
        "instance": "a.fleet:9100",
        "source": "cmdline",
        "knob": "max_num_seqs",
    }
    engine, bad = prom.sidecar_readings([(sidecar, 1e308)], INSTANCE)
    history = prom.History(INSTANCE, pages, (), engine, 0, bad_sidecar=bad)
    adv, d = inputs.from_prometheus(history, Config(), load_rules(), at, 60.0)
    assert adv.engine.source("max_num_seqs") == "default"
    assert d.status == "inconclusive" and "could not be trusted" in d.reason, d.reason
    assert "max_num_seqs = 1e+308 from the sidecar a.fleet:9100 is no reading" in d.reason


def test_a_bucket_bound_that_is_no_number_is_named_not_raised() -> None:
    """Found by the Prometheus answers fuzz target (issue 34): a histogram's bucket with
    ``le=""`` in Prometheus's answer raised ValueError out of the read; now that bucket is not
    read and the page names it (bad_bucket); the rest of the page is kept."""
    base = {"instance": INSTANCE, "job": "vllm"}
    h = "vllm:time_to_first_token_seconds"
    series = [
        ({**base, "__name__": f"{h}_bucket", "le": "0.1"}, [(10.0, 1.0)]),
        ({**base, "__name__": f"{h}_bucket", "le": ""}, [(10.0, 2.0)]),
        ({**base, "__name__": f"{h}_bucket", "le": "+Inf"}, [(10.0, 2.0)]),
        ({**base, "__name__": f"{h}_count"}, [(10.0, 2.0)]),
        ({**base, "__name__": f"{h}_sum"}, [(10.0, 0.3)]),
        ({**base, "__name__": "vllm:num_requests_running"}, [(10.0, 3.0)]),
    ]
    (snap,) = prom.snapshots(series)[INSTANCE]
    assert [w.kind for w in snap.warnings] == ["bad_bucket"] and "le=''" in snap.warnings[0].reason
    assert snap.families["vllm:num_requests_running"].series
