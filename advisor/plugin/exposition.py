"""Turn the recorders' snapshots into Prometheus families, on vLLM's registry or a port.

Where: with one API server (vLLM's default) vLLM serves ``/metrics`` from
prometheus_client's global ``REGISTRY``, so a collector registered there appears on the
page the advisor already scrapes: no port to open, no second target. With
``--api-server-count > 1`` vLLM sets ``PROMETHEUS_MULTIPROC_DIR`` and serves ``/metrics``
from a fresh registry holding only the multiprocess collector, which reads metric files;
a collector never shows there, and quantiles of several processes cannot be merged from
such files anyway. So ``auto`` exports on the registry in the first case and on a port of
the plugin's own (one per API server: base port + the server's rank) in the second.

One exporter per process, shared by every engine's logger (data parallelism gives the
front-end one logger per engine); it is built on first use.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from advisor.plugin import names as n
from advisor.plugin.config import PluginConfig
from advisor.plugin.recorder import EngineRecorder

log = logging.getLogger("vllm.advisor_plugin")
"""A child of vLLM's logger: its lines appear in the server log in vLLM's format."""

PORT_TRIES = 16

_HELP = {
    n.REQUEST_TTFT: "Time to first token of finished requests (vLLM's definition), by length bucket.",
    n.REQUEST_TTFT_ESTIMATED: "Finished requests whose TTFT was estimated as e2e_latency - decode_time.",
    n.REQUEST_TPOT: "Mean time per output token after the first, of finished requests, by length bucket.",
    n.REQUEST_QUEUE: "Time finished requests waited in the engine queue, by length bucket.",
    n.REQUEST_PREFILL: "Time from first scheduled to first token of finished requests, by length bucket.",
    n.REQUEST_E2E: "End-to-end latency of finished requests as the front-end measured it, by length bucket.",
    n.ITL: "Inter-token latencies of every request.",
    n.STEP_DURATION: "Engine step durations by timing source, phase and batch-size band.",
    n.REQUEST_PROMPT_TOKENS: "Prompt tokens of finished requests, by length bucket.",
    n.REQUEST_GENERATION_TOKENS: "Generated tokens of finished requests, by length bucket.",
    n.REQUEST_CACHED_TOKENS: "Prompt tokens served from the prefix cache, of finished requests, by length bucket.",
    n.REQUEST_PREEMPTIONS: "Preemptions of finished requests, by length bucket.",
    n.STEPS: "Engine steps whose scheduler stats reached this front-end.",
    n.STEP_PREEMPTIONS: "Requests preempted, counted per engine step.",
    n.STEP_RUNNING_REQUESTS: "Running requests summed over engine steps (mean batch = rate / rate of steps).",
    n.STEP_WAITING_REQUESTS: "Waiting requests summed over engine steps.",
    n.FIT_STEPS: "Timed steps n (step-time fit).",
    n.FIT_SECONDS: "Sum of step seconds t over timed steps.",
    n.FIT_PREFILL_TOKENS: "Sum of prefill tokens p over timed steps.",
    n.FIT_DECODE_TOKENS: "Sum of decode tokens d over timed steps.",
    n.FIT_REQUESTS: "Sum of requests in the step over timed steps.",
    n.FIT_SECONDS_SQUARED: "Sum of t*t over timed steps (seconds^2).",
    n.FIT_PREFILL_TOKENS_SQUARED: "Sum of p*p over timed steps (tokens^2).",
    n.FIT_DECODE_TOKENS_SQUARED: "Sum of d*d over timed steps (tokens^2).",
    n.FIT_PREFILL_DECODE_TOKENS: "Sum of p*d over timed steps (tokens^2).",
    n.FIT_SECONDS_PREFILL_TOKENS: "Sum of t*p over timed steps (seconds*tokens).",
    n.FIT_SECONDS_DECODE_TOKENS: "Sum of t*d over timed steps (seconds*tokens).",
}


class PluginCollector(Collector):
    """Fresh families from every recorder at each scrape (prometheus_client's Collector)."""

    def __init__(self, exporter: PluginExporter) -> None:
        self._exporter = exporter

    def describe(self) -> list[Metric]:
        """Nothing up front: the families depend on what the engine has reported."""
        return []

    def collect(self) -> Iterator[Metric]:
        exp = self._exporter
        info = GaugeMetricFamily(
            n.PLUGIN_INFO, "The vllm-advisor stat-logger plugin is loaded.", labels=list(exp.info)
        )
        info.add_metric(list(exp.info.values()), 1.0)
        yield info
        window = GaugeMetricFamily(n.WINDOW_SECONDS, "Sliding window the plugin's quantiles cover.")
        window.add_metric([], exp.config.window_seconds)
        yield window

        summaries: dict[str, Metric] = {}
        counters: dict[str, CounterMetricFamily] = {}
        for snap in [r.snapshot() for r in exp.recorders()]:
            engine = (n.ENGINE_LABEL, snap.engine)
            for s in snap.summaries:
                m = summaries.get(s.name)
                if m is None:
                    m = summaries[s.name] = Metric(s.name, _HELP.get(s.name, s.name), "summary")
                labels = dict((engine, *s.labels))
                for q, v in s.quantiles:
                    m.add_sample(s.name, {**labels, n.QUANTILE_LABEL: repr(q)}, v)
                m.add_sample(s.name + "_count", labels, s.count)
                m.add_sample(s.name + "_sum", labels, s.total)
            for (name, lab), value in snap.counters.items():
                labels = dict((engine, *lab))
                c = counters.get(name)
                if c is None:
                    c = counters[name] = CounterMetricFamily(name, _HELP.get(name, name), labels=list(labels))
                c.add_metric(list(labels.values()), value)
        yield from summaries.values()
        yield from counters.values()


class PluginExporter:
    """The process's recorders and where their series are exported."""

    def __init__(self, config: PluginConfig, info: dict[str, str]) -> None:
        self.config = config
        self.info = dict(info)
        self._recorders: dict[str, EngineRecorder] = {}
        self._lock = threading.Lock()
        self.collector = PluginCollector(self)
        self.mode: str | None = None
        self.port: int | None = None
        self._server: Any = None

    def recorder(self, engine: str, frontend_timing: bool = True) -> EngineRecorder:
        with self._lock:
            rec = self._recorders.get(engine)
            if rec is None:
                rec = self._recorders[engine] = EngineRecorder(self.config, engine, frontend_timing)
            return rec

    def recorders(self) -> list[EngineRecorder]:
        with self._lock:
            return list(self._recorders.values())

    def start(self, registry: CollectorRegistry | None = None, rank: int = 0) -> str:
        """Export on ``registry`` (default: prometheus_client's global one) or on a port;
        returns the mode used. Idempotent."""
        if self.mode is not None:
            return self.mode
        mode = self.config.resolved_export()
        if mode == "registry":
            (registry or REGISTRY).register(self.collector)
        else:
            self.port, self._server = _serve(
                self.collector, self.config.host, self.config.port + max(rank, 0)
            )
        self.mode = mode
        self.info["export"] = mode
        self.info["port"] = str(self.port or "")
        return mode

    def stop(self, registry: CollectorRegistry | None = None) -> None:
        """Unregister or shut the port down (tests; vLLM never unloads a logger)."""
        if self.mode == "registry":
            with contextlib.suppress(KeyError):
                (registry or REGISTRY).unregister(self.collector)
        elif self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self.mode = None


def _serve(collector: Collector, host: str, port: int) -> tuple[int, Any]:
    """Serve ``collector`` alone on the first free port from ``port`` on."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    last: OSError | None = None
    for p in range(port, port + PORT_TRIES):
        try:
            server, _thread = start_http_server(p, addr=host, registry=registry)
            return p, server
        except OSError as e:
            last = e
    raise OSError(f"no free port in {port}-{port + PORT_TRIES - 1} on {host}: {last}")


_EXPORTER: PluginExporter | None = None
_EXPORTER_LOCK = threading.Lock()


def process_exporter(config: PluginConfig, info: dict[str, str], rank: int = 0) -> PluginExporter:
    """The process's one exporter, built and started on first use."""
    global _EXPORTER
    with _EXPORTER_LOCK:
        if _EXPORTER is None:
            exp = PluginExporter(config, info)
            exp.start(rank=rank)
            _EXPORTER = exp
            where = f"port {exp.config.host}:{exp.port}" if exp.mode == "port" else "vLLM's /metrics"
            log.info("vllm-advisor plugin: exporting vllm_advisor_engine_* series on %s", where)
        return _EXPORTER
