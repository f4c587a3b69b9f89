"""Where and how the plugin's series appear: names, types, labels, registry vs own port.

The recorders are fed stand-ins of vLLM's stats objects (tests/plugin/standin.py); the
real server's page is checked in test_plugin_realvllm.py.
"""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from advisor.plugin import names as n
from advisor.plugin.config import PluginConfig, bucket_labels, load_config
from advisor.plugin.exposition import PluginExporter
from tests.hang import HANG_S
from tests.plugin import standin

INFO = {"version": "0.1.0", "vllm_version": "0.32.0"}


def feed(exporter: PluginExporter, engine: str) -> None:
    rec = exporter.recorder(engine)
    v = "0.32.0"
    rec.record(standin.scheduler(v, running=0, waiting=1), None)
    fr = standin.finished(v, prompt=700, output=20, e2e=1.5, ttft=0.4, preemptions=2)
    det = standin.details(v, ctx_tokens=700, gen_tokens=4, elapsed_ms=80.0, gen_reqs=4)
    it = standin.iteration(v, generated=5, first_tokens=1, prompt_computed=700, itls=[0.02] * 4)
    it.finished_requests.append(fr)
    rec.record(standin.scheduler(v, running=4, iteration_details=det), it)


def families(text: str) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_registry_page_has_the_documented_names_types_and_labels() -> None:
    registry = CollectorRegistry()
    exp = PluginExporter(PluginConfig(export="registry"), INFO)
    assert exp.start(registry=registry) == "registry"
    feed(exp, "0")
    feed(exp, "1")
    text = generate_latest(registry).decode()
    fams = families(text)

    info = fams[n.PLUGIN_INFO]
    (sample,) = info.samples  # type: ignore[attr-defined]
    assert (
        sample.value == 1
        and sample.labels["vllm_version"] == "0.32.0"
        and sample.labels["export"] == "registry"
    )

    ttft = fams[n.REQUEST_TTFT]
    assert ttft.type == "summary"  # type: ignore[attr-defined]
    quantiles = {
        s.labels["quantile"]
        for s in ttft.samples  # type: ignore[attr-defined]
        if s.name == n.REQUEST_TTFT and s.labels["engine"] == "1" and s.labels["prompt_bucket"] == "513-2048"
    }
    assert quantiles == {"0.5", "0.9", "0.95", "0.99"}
    assert f'{n.REQUEST_TTFT}_count{{engine="0",output_bucket="all",prompt_bucket="513-2048"}} 1.0' in text

    for name in (
        n.STEPS,
        n.FIT_STEPS,
        n.FIT_SECONDS_DECODE_TOKENS,
        n.REQUEST_PREEMPTIONS,
        n.STEP_PREEMPTIONS,
    ):
        assert fams[name].type == "counter", name  # type: ignore[attr-defined]
        assert f"{name}_total{{" in text
    assert f'{n.FIT_SECONDS}_total{{engine="0",source="iteration_details"}} 0.08' in text
    assert (
        f'{n.STEP_DURATION}_count{{batch="5-16",engine="0",phase="mixed",source="iteration_details"}} 1.0'
        in text
    )
    assert all(name.startswith(n.PREFIX) for name in fams)
    exp.stop(registry=registry)
    assert n.PLUGIN_INFO not in generate_latest(registry).decode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_own_port_serves_the_same_page_and_steps_past_a_busy_port() -> None:
    """Port mode (several API servers): the page is served on the configured port, or the
    next free one when another process of the same server took it."""
    busy = free_port()
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", busy))
        blocker.listen()
        exp = PluginExporter(PluginConfig(export="port", host="127.0.0.1", port=busy), INFO)
        try:
            assert exp.start() == "port"
            assert exp.port is not None and exp.port > busy
            feed(exp, "0")
            text = (
                urllib.request.urlopen(f"http://127.0.0.1:{exp.port}/metrics", timeout=HANG_S).read().decode()
            )
        finally:
            exp.stop()
    fams = families(text)
    info = fams[n.PLUGIN_INFO].samples[0]  # type: ignore[attr-defined]
    assert info.labels["export"] == "port" and info.labels["port"] == str(exp.port)
    assert n.REQUEST_E2E in fams and n.FIT_STEPS in fams


def test_auto_export_follows_prometheus_multiprocess_mode() -> None:
    """vLLM sets PROMETHEUS_MULTIPROC_DIR for --api-server-count > 1 and then serves /metrics
    from the multiprocess files only, so auto picks the plugin's own port there."""
    assert load_config({}).resolved_export() == "registry"
    assert load_config({"PROMETHEUS_MULTIPROC_DIR": "/tmp/x"}).resolved_export() == "port"
    assert (
        load_config(
            {"PROMETHEUS_MULTIPROC_DIR": "/tmp/x", "VLLM_ADVISOR_PLUGIN_EXPORT": "registry"}
        ).resolved_export()
        == "registry"
    )


def test_config_from_environment_and_bad_values_fall_back() -> None:
    cfg = load_config(
        {
            "VLLM_ADVISOR_PROMPT_BUCKETS": "256, 1024",
            "VLLM_ADVISOR_OUTPUT_BUCKETS": "64",
            "VLLM_ADVISOR_WINDOW_SECONDS": "30",
            "VLLM_ADVISOR_WINDOW_SLOTS": "3",
            "VLLM_ADVISOR_PLUGIN_PORT": "20000",
        }
    )
    assert cfg.prompt_buckets == (256, 1024) and cfg.output_buckets == (64,)
    assert cfg.slot_seconds == 10 and cfg.port == 20000 and cfg.problems == ()
    bad = load_config(
        {
            "VLLM_ADVISOR_PROMPT_BUCKETS": "2048,512",
            "VLLM_ADVISOR_WINDOW_SECONDS": "soon",
            "VLLM_ADVISOR_PLUGIN_EXPORT": "carrier-pigeon",
            "VLLM_ADVISOR_RELATIVE_ACCURACY": "0.9",
        }
    )
    assert bad == PluginConfig()
    assert len(bad.problems) == 4


@pytest.mark.parametrize(
    ("edges", "labels"),
    [((512, 2048, 8192), ("0-512", "513-2048", "2049-8192", "8193+")), ((1,), ("0-1", "2+"))],
)
def test_bucket_labels(edges: tuple[int, ...], labels: tuple[str, ...]) -> None:
    assert bucket_labels(edges) == labels
