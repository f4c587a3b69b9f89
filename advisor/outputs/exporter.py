"""The exporter: a prometheus_client Collector over the latest immutable state, on its
own registry, plus the JSON endpoint, the health check, the page (``/``: the diagnosis with
charts of the window, drawn by outputs/page.py) and ``/history``.

Nothing here decides anything; it renders :class:`ExportState`.
"""

from __future__ import annotations

import contextlib
import errno
import math
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from advisor.core import jsonout, names
from advisor.derive.signals import CATALOG
from advisor.derive.timeseries import Charts
from advisor.diagnose.advise import STATUSES
from advisor.outputs import explain, page
from advisor.outputs.state import ExportState, History, readiness
from advisor.predict.replicas import Desired

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _num(v: Any) -> float | None:
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, int | float):
        f = float(v)
        return None if math.isnan(f) or math.isinf(f) else f
    return None


def _label(v: Any) -> str:
    return "" if v is None else str(v)


def encodable(text: str) -> str:
    """``text`` as UTF-8 can carry it: bytes that were not UTF-8 (a command line's or a label's,
    decoded with surrogate escapes) become ``\\udcXX`` escapes instead of failing the answer."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class SafeCollector(Collector):
    """``inner``'s families with every label value and help text encodable (issue 34 G1: one
    label of bytes that were not UTF-8 emptied every ``/metrics`` answer)."""

    def __init__(self, inner: Collector) -> None:
        self.inner = inner

    def collect(self) -> Iterator[Metric]:
        for fam in self.inner.collect():
            fam.documentation = encodable(fam.documentation)
            fam.samples = [
                s._replace(labels={encodable(str(k)): encodable(str(v)) for k, v in s.labels.items()})
                for s in fam.samples
            ]
            yield fam


class AdvisorCollector(Collector):
    """Yields fresh families from the current state on every scrape."""

    def __init__(self, state: Callable[[], ExportState]) -> None:
        self._state = state

    def collect(self) -> Iterator[Metric]:
        st = self._state()
        d = st.diagnosis
        p = names.OUTPUT_PREFIX
        yield GaugeMetricFamily(
            p + "up",
            "1 when the last scrape of vLLM's /metrics succeeded and completed within two intervals (as achieved).",
            value=1 if st.up else 0,
        )
        if st.last_scrape_duration_s is not None:
            yield GaugeMetricFamily(
                p + "scrape_duration_seconds",
                "Duration of the last scrape of vLLM.",
                value=st.last_scrape_duration_s,
            )
        if st.cycle_duration_s is not None:
            yield GaugeMetricFamily(
                p + "cycle_duration_seconds",
                "Wall time of the daemon's last cycle (scrape, evaluation, publication); above the "
                "interval, cycles run back to back and are refreshed less often.",
                value=st.cycle_duration_s,
            )
        if st.cycle_interval_s is not None:
            yield GaugeMetricFamily(
                p + "cycle_interval_seconds",
                "Time between the starts of the daemon's cycles, as achieved (smoothed).",
                value=st.cycle_interval_s,
            )
        if st.last_scrape_t is not None:
            yield GaugeMetricFamily(
                p + "last_scrape_timestamp_seconds",
                "Unix time of the last successful scrape of vLLM.",
                value=st.last_scrape_t,
            )
        if st.log_source_up is not None:
            yield GaugeMetricFamily(
                p + "log_source_up",
                "1 while the vLLM log source (--log-file, --log-cmd) is being read.",
                value=1 if st.log_source_up else 0,
            )
            yield CounterMetricFamily(
                p + "log_source_restarts",
                "Times the log source ended or failed and was started again.",
                value=st.log_source_restarts,
            )
            yield CounterMetricFamily(
                p + "log_skipped_lines",
                "Log lines not read because the reader fell behind its source and skipped to the tail.",
                value=st.log_skipped_lines,
            )
            yield CounterMetricFamily(
                p + "log_skipped_bytes",
                "Bytes of log not read because the reader fell behind its source and skipped to the tail.",
                value=st.log_skipped_bytes,
            )
        if st.ledger_pending is not None:
            yield GaugeMetricFamily(
                p + "ledger_pending",
                "Judged experiments not yet written to the ledger (kept in memory, retried every cycle).",
                value=st.ledger_pending,
            )
            yield CounterMetricFamily(
                p + "ledger_write_failures",
                "Attempts to write the ledger that failed (unusable state dir, lock, full disk, damage).",
                value=st.ledger_write_failures,
            )
            yield CounterMetricFamily(
                p + "ledger_dropped",
                "Judged experiments dropped: the in-memory queue was full, or no ledger can store them.",
                value=st.ledger_dropped,
            )
        if st.state_write_ok is not None:
            yield GaugeMetricFamily(
                p + "state_write_ok",
                "1 when the last write of the state dir's diagnosis.json succeeded.",
                value=1 if st.state_write_ok else 0,
            )
        yield GaugeMetricFamily(
            p + "several_servers",
            "1 when the vLLM URL reaches more than one engine (a load balancer): advice is withheld.",
            value=1 if st.several_servers else 0,
        )
        c = CounterMetricFamily(p + "scrapes", "Scrapes of vLLM's /metrics by result.", labels=["result"])
        for result in sorted({"success", *st.scrapes}):
            c.add_metric([result], st.scrapes.get(result, 0))
        yield c
        c = CounterMetricFamily(
            p + "bad_samples",
            "Readings of vLLM's pages not read, by reason: non_finite (NaN, an infinity), negative, "
            "duplicate (a series twice), went_down or spike (a counter that went down or jumped while the "
            "engine did not restart), label_churn, unreadable, cut_off, ... (docs/reliability.md).",
            labels=["reason"],
        )
        for reason in sorted({"non_finite", "duplicate", "went_down", *st.bad_samples}):
            c.add_metric([reason], st.bad_samples.get(reason, 0))
        yield c
        g = GaugeMetricFamily(
            p + "page_samples_skipped",
            "Samples of the last page not kept: not_read (families the advisor never reads, dropped "
            "before their labels are parsed), over_limit (past the caps on series).",
            labels=["reason"],
        )
        for reason in ("not_read", "over_limit"):
            g.add_metric([reason], st.page_skipped.get(reason, 0))
        yield g
        c = CounterMetricFamily(p + "log_lines", "vLLM log lines read, by kind of event.", labels=["kind"])
        for kind in sorted({"engine_stats", "startup", "error", "unknown", *st.log_lines}):
            c.add_metric([kind], st.log_lines.get(kind, 0))
        yield c
        yield CounterMetricFamily(
            p + "knob_changes",
            "Engine knob changes noticed (restarts with new values).",
            value=st.knob_changes,
        )
        status = d.status if d is not None else "insufficient-data"
        g = GaugeMetricFamily(p + "status", "1 for the advisor's current status.", labels=["status"])
        for s in STATUSES:
            g.add_metric([s], 1 if s == status else 0)
        yield g
        if d is None:
            return
        model = _label(d.context.get("model"))
        for name, sig in CATALOG.items():
            v = _num(d.signals.get(name))
            if v is None or sig.per == "config":
                continue  # unknown; or an engine value, exported as engine_knob / engine_fact
            fam = GaugeMetricFamily(sig.series, f"{sig.help} ({sig.unit})", labels=["model_name"])
            fam.add_metric([model], v)
            yield fam
        active = {f["rule"]: f for f in d.findings}
        g = GaugeMetricFamily(
            p + "rule_active",
            "1 while a rule's conditions hold (pending or firing).",
            labels=["rule", "severity", "knob", "direction"],
        )
        for r in st.rules:
            f = active.get(r.id, {})
            k = r.knobs[0]
            g.add_metric(
                [r.id, r.severity, f.get("knob") or k.name, f.get("direction") or k.direction],
                1 if f.get("state") in ("firing", "pending") else 0,
            )
        yield g
        g = GaugeMetricFamily(
            p + "recommendation_info",
            "The one current recommendation (none when no advice).",
            labels=["rule", "severity", "knob", "flag", "direction", "current", "proposed"],
        )
        rec = d.recommendation
        if rec is not None and d.status == "advice":
            g.add_metric(
                [
                    rec.rule,
                    rec.severity,
                    rec.knob,
                    _label(rec.flag),
                    rec.direction,
                    _label(rec.current),
                    _label(rec.proposed),
                ],
                1,
            )
        yield g
        yield _predicted_family(d)
        if st.replicas is not None:
            yield from replicas_families([({"model_name": model}, st.replicas)])
        knobs = d.engine.get("knobs", {})
        g = GaugeMetricFamily(
            p + "engine_knob",
            "Engine knob values the server runs with, and where they come from.",
            labels=["knob", "source"],
        )
        for name, k in sorted(knobs.items()):
            v = _num(k.get("value"))
            if v is not None:
                g.add_metric([name, _label(k.get("source"))], v)
        yield g
        g = GaugeMetricFamily(
            p + "engine_fact",
            "Numeric facts about the server (KV capacity, GPUs).",
            labels=["fact", "source"],
        )
        facts = d.engine.get("facts", {})
        model_facts = (
            "model_is_moe",
            "model_num_experts",
            "model_has_mm_encoder",
            "mm_encoder_tp_data_supported",
        )
        for name in ("kv_cache_tokens", "max_concurrency", "gpu_count", "num_gpu_blocks", *model_facts):
            f = facts.get(name)
            v = _num(f.get("value")) if f else None
            if v is not None:
                g.add_metric([name, _label(f.get("source"))], v)
        mode = knobs.get("mm_encoder_tp_mode")
        if mode and mode.get("value") is not None:
            g.add_metric(["mm_encoder_tp_data", _label(mode.get("source"))], float(mode["value"] == "data"))
        gib = facts.get("gpu_memory_gib")
        if gib and _num(gib.get("value")) is not None:
            g.add_metric(["gpu_memory_bytes", _label(gib.get("source"))], float(gib["value"]) * 2**30)
        dev = _num(d.signals.get("device_is_gpu"))
        if dev is not None:
            g.add_metric(["device_is_gpu", _label(facts.get("device", {}).get("source"))], dev)
        free = facts.get("gpu_memory_free_gib")
        if free and _num(free.get("value")) is not None:
            g.add_metric(["gpu_memory_free_bytes", _label(free.get("source"))], float(free["value"]) * 2**30)
        yield g
        g = GaugeMetricFamily(p + "engine_info", "What the server is.", labels=["version", "model", "device"])
        g.add_metric(
            [
                _label(d.engine.get("vllm_version")),
                _label(d.engine.get("model")),
                _label(d.context.get("device")),
            ],
            1,
        )
        yield g
        if st.experiment:
            yield from _experiment_families(st.experiment)


def _predicted_family(d: Any) -> Metric:
    """The deciding model's prediction of the advised change: the steady state after it per
    metric (same load), and the closed form's confidence. Empty when there is no advice or no prediction."""
    g = GaugeMetricFamily(
        names.output_name("predicted"),
        "The advised change's predicted steady state under the same load, by the model that "
        "decided it (the scheduler simulator or the closed form); metric=confidence is the "
        "closed form's.",
        labels=["metric"],
    )
    rec = d.recommendation
    pred = rec.predicted if rec is not None and d.status == "advice" else None
    if pred:
        for metric, v in (pred.get("predicted") or {}).items():
            if _num(v) is not None:
                g.add_metric([metric], float(v))
        if _num(pred.get("confidence")) is not None:
            g.add_metric(["confidence"], float(pred["confidence"]))
    return g


REPLICAS_BASES = ("targets", "knob_first", "no_queue", "idle")
"""What the desired count rests on: the targets met, a knob advised first, where nothing queues
(no count meets the targets), an idle window."""


def replicas_basis(r: Desired) -> str:
    s = r.sizing
    if s.reason.startswith("idle"):
        return "idle"
    if s.knob_first:
        return "knob_first"
    return "targets" if s.meets_targets else "no_queue"


def replicas_families(items: list[tuple[dict[str, str], Desired]]) -> Iterator[Metric]:
    """The desired replica counts (advisor/predict/replicas.py), one set of series per labels."""
    p = names.OUTPUT_PREFIX
    if not items:
        return
    keys = list(items[0][0])
    desired = GaugeMetricFamily(
        p + "desired_replicas",
        "Replicas the performance model predicts meet the TTFT and ITL p95 targets at the observed load "
        "times the headroom, after the scale-in hold (docs/autoscaling.md).",
        labels=keys,
    )
    current = GaugeMetricFamily(
        p + "current_replicas", "Replicas serving the load now, as the advisor counts them.", labels=keys
    )
    ttft = GaugeMetricFamily(
        p + "desired_replicas_predicted_ttft_p95_seconds",
        "Predicted TTFT p95 under the observed load at the desired count and at one replica fewer.",
        labels=[*keys, "at"],
    )
    itl = GaugeMetricFamily(
        p + "desired_replicas_predicted_itl_p95_seconds",
        "Predicted ITL p95 under the observed load at the desired count and at one replica fewer.",
        labels=[*keys, "at"],
    )
    basis = GaugeMetricFamily(
        p + "desired_replicas_basis",
        "1 for what the desired count rests on: targets (met), knob_first (a knob is advised and "
        "predicted enough), no_queue (no count meets the targets: where nothing queues), idle.",
        labels=[*keys, "basis"],
    )
    for labels, r in items:
        values = [labels[k] for k in keys]
        desired.add_metric(values, r.desired)
        current.add_metric(values, r.sizing.current)
        for at, pt in (("desired", r.at_desired), ("one_fewer", r.at_one_fewer)):
            if pt is None:
                continue
            if _num(pt.ttft_p95) is not None:
                ttft.add_metric([*values, at], float(pt.ttft_p95 or 0.0))
            if _num(pt.itl_p95) is not None:
                itl.add_metric([*values, at], float(pt.itl_p95 or 0.0))
        chosen = replicas_basis(r)
        for b in REPLICAS_BASES:
            basis.add_metric([*values, b], 1 if b == chosen else 0)
    yield from (desired, current, ttft, itl, basis)


def _experiment_families(e: dict[str, Any]) -> Iterator[Metric]:
    p = names.OUTPUT_PREFIX + "experiment_"
    g = GaugeMetricFamily(
        p + "info",
        "The current or last experiment (a knob change being judged).",
        labels=["knob", "old", "new", "state", "verdict"],
    )
    g.add_metric(
        [
            _label(e.get("knob")),
            _label(e.get("old")),
            _label(e.get("new")),
            _label(e.get("state")),
            _label(e.get("verdict")),
        ],
        1,
    )
    yield g
    if e.get("started_at") is not None:
        yield GaugeMetricFamily(
            p + "started_timestamp_seconds",
            "When the experiment's after-window began.",
            value=float(e["started_at"]),
        )
    if e.get("after_requests") is not None:
        yield GaugeMetricFamily(
            p + "after_requests",
            "Requests finished in the after-window so far.",
            value=float(e["after_requests"]),
        )


def make_registry(state: Callable[[], ExportState]) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SafeCollector(AdvisorCollector(state)))
    ProcessCollector(namespace="vllm_advisor", registry=reg)
    PlatformCollector(registry=reg)
    return reg


# ------------------------------------------------------------------ HTTP
@dataclass(frozen=True)
class PageSources:
    """What the pages need beyond the state, asked for when a page is asked for (the drive
    layer's callables: they read the window under its lock): the window's charts, the history,
    and the refresh interval (the scrape interval)."""

    charts: Callable[[], Charts | None] | None = None
    history: Callable[[], History] | None = None
    refresh_s: float | None = None


def landing_page(
    st: ExportState,
    window: Charts | None = None,
    refresh_s: float | None = None,
    charts_expected: bool = False,
) -> str:
    """The sidecar's ``/``: the whole diagnosis beside the charts of the window (outputs/page.py)."""
    return page.server_page(st, window, refresh_s=refresh_s, charts_expected=charts_expected)


def charts_or_none(get: Callable[[], Charts | None] | None) -> Charts | None:
    """The charts, or None (said once in the log) when they cannot be had: a page without charts
    is better than no page."""
    if get is None:
        return None
    try:
        return get()
    except Exception as exc:  # a bug drawing the window must not take the page down
        structlog.get_logger("vllm-advisor").warning(
            "cannot chart the window", error=f"{type(exc).__name__}: {exc}"
        )
        return None


def make_handler(
    state: Callable[[], ExportState], registry: CollectorRegistry, pages: PageSources | None = None
) -> type[BaseHTTPRequestHandler]:
    src = pages or PageSources()

    class Handler(QuietHandler):
        server_version = "vllm-advisor"

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            try:
                if path == "/metrics":
                    self._send(200, generate_latest(registry), CONTENT_TYPE)
                elif path == "/api/v1/diagnosis":
                    st = state()
                    body = (
                        explain.diagnosis_json(st.diagnosis, st.replicas)
                        if st.diagnosis
                        else {
                            "status": "insufficient-data",
                            "reason": "no diagnosis yet",
                            "recommendation": None,
                            "replicas": None,
                        }
                    )
                    self._send(200, jsonout.dumps(body, default=str).encode(), "application/json")
                elif path == "/api/v1/replicas":
                    r = state().replicas
                    self._json(200, {"replicas": r.to_json() if r is not None else None})
                elif path == "/readyz":  # the advice can be trusted (200) or why not (503)
                    ok, ready = readiness(state())
                    self._json(200 if ok else 503, ready)
                elif path == "/healthz":  # liveness: 200 while the process works, vLLM up or not
                    st = state()
                    body = {
                        "ok": True,
                        "vllm_up": st.up,
                        "last_scrape_t": st.last_scrape_t,
                        "log_source_up": st.log_source_up,
                        "several_servers": st.several_servers,
                        "status": st.diagnosis.status if st.diagnosis else None,
                    }
                    if st.ledger_pending is not None:  # what was judged and is not yet on disk
                        body["ledger_ok"] = st.ledger_error is None
                        body["ledger_pending"] = st.ledger_pending
                        body["ledger_error"] = st.ledger_error
                    if st.state_write_ok is not None:
                        body["state_ok"] = st.state_write_ok
                        body["state_error"] = st.state_error
                    self._send(200, jsonout.dumps(body).encode(), "application/json")
                elif path in ("/", "/index.html"):
                    st = state()
                    self._html(
                        200,
                        landing_page(
                            st,
                            charts_or_none(src.charts),
                            src.refresh_s,
                            charts_expected=src.charts is not None,
                        ),
                    )
                elif path == "/history":
                    h = (
                        src.history()
                        if src.history is not None
                        else History(
                            experiments_kept="This exporter keeps no ledger.",
                            advice_kept="This exporter keeps no advice.",
                        )
                    )
                    self._html(200, page.history_page(h, refresh_s=src.refresh_s))
                else:
                    self._send(404, b"not found\n", "text/plain")
            except (BrokenPipeError, ConnectionResetError, TimeoutError):
                pass

    return Handler


class BoundedHTTPServer(ThreadingHTTPServer):
    """A threading server that cannot be taken down by its clients.

    At most ``max_connections`` connections (so threads and file descriptors) at a time:
    when one more arrives, the oldest is cut (an idle or slow client, never the newcomer,
    so Prometheus gets in). Every read waits at most ``client_timeout_s``. When the
    process runs out of file descriptors, the accept loop backs off instead of spinning.
    """

    daemon_threads = True
    request_queue_size = 128
    max_connections = 32
    client_timeout_s = 5.0
    # how often serve_forever looks for a shutdown: a stop waits this long at most (the stdlib's
    # 0.5 s made every daemon stop take ~0.5 s; a select() ten times a second costs nothing)
    poll_s = 0.1

    def serve_forever(self, poll_interval: float | None = None) -> None:
        super().serve_forever(self.poll_s if poll_interval is None else poll_interval)

    def __init__(self, addr: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        self._conns: dict[socket.socket, float] = {}
        self._conns_lock = threading.Lock()
        self.evicted = 0
        if ":" in addr[0]:  # an IPv6 host (listen: "[::1]:PORT")
            self.address_family = socket.AF_INET6
        super().__init__(addr, handler)

    def _evict_oldest(self) -> None:
        with self._conns_lock:
            if not self._conns:
                return
            oldest = min(self._conns, key=self._conns.__getitem__)
            del self._conns[oldest]
            self.evicted += 1
        with contextlib.suppress(OSError):
            oldest.shutdown(socket.SHUT_RDWR)  # wakes its thread, which closes it

    def get_request(self) -> tuple[socket.socket, Any]:
        try:
            return super().get_request()
        except OSError as e:
            if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                self._evict_oldest()
                time.sleep(0.05)  # out of descriptors: shed a client and back off, never spin
            raise

    def process_request(self, request: Any, client_address: Any) -> None:
        while True:
            with self._conns_lock:
                full = len(self._conns) >= self.max_connections
                if not full:
                    self._conns[request] = time.monotonic()
                    break
            self._evict_oldest()
        request.settimeout(self.client_timeout_s)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._conns_lock:
            self._conns.pop(request, None)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that goes away is no news; anything else is one log line, not a traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            return
        structlog.get_logger("vllm-advisor").warning(
            "exporter request failed", client=str(client_address[0]), error=f"{type(exc).__name__}: {exc}"
        )

    def connections(self) -> int:
        with self._conns_lock:
            return len(self._conns)


class QuietHandler(BaseHTTPRequestHandler):
    """What the sidecar's and the fleet's handlers share: timed-out reads, no access log on
    stdout (it is the advisor's own log), HEAD as GET without the body."""

    timeout = BoundedHTTPServer.client_timeout_s  # every read on the connection

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _html(self, code: int, text: str) -> None:
        """A page, with the headers that keep a browser from running or loading anything else."""
        body = text.encode("utf-8", "backslashreplace")
        self.send_response(code)
        self.send_header("Content-Type", page.HTML)
        self.send_header("Content-Length", str(len(body)))
        for k, v in page.SECURITY_HEADERS:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, code: int, body: Any) -> None:
        self._send(code, jsonout.dumps(body, default=str).encode(), "application/json")

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        self._send(404, b"not found\n", "text/plain")


def make_server(
    host: str, port: int, state: Callable[[], ExportState], pages: PageSources | None = None
) -> ThreadingHTTPServer:
    registry = make_registry(state)
    return BoundedHTTPServer((host, port), make_handler(state, registry, pages))
