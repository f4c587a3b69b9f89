"""What the fleet daemon shows: the sidecar's ``vllm_advisor_*`` series for every server, with
its ``instance`` (and ``model_name``) label; the fleet's own series; ``/api/v1/diagnosis``
(the fleet worst first, or one server with ``?instance=``), a page listing the fleet (``/``) and
each server's own page and history (``/server?instance=``, ``/history?instance=``).

The per-server families come from the sidecar's own collector
(:class:`~advisor.outputs.exporter.AdvisorCollector`), relabelled: one set of series names and
meanings for a sidecar and for the fleet. Prometheus must scrape the fleet daemon with
``honor_labels: true`` so that ``instance`` stays the vLLM server's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from advisor.core import names
from advisor.derive.timeseries import Charts
from advisor.outputs import page
from advisor.outputs.exporter import (
    CONTENT_TYPE,
    AdvisorCollector,
    BoundedHTTPServer,
    QuietHandler,
    SafeCollector,
    charts_or_none,
    replicas_families,
)
from advisor.outputs.state import Deployment, FleetState, History, Member, readiness

INSTANCE = "instance"
MODEL = names.MODEL_LABEL
# On every per-server series the fleet exports, so that it never reads its own knob series back
# as a sidecar's (advisor/sources/prometheus.py asks for series without it).
ADVISED_BY = (names.OUTPUT_PREFIX.rstrip("_"), "fleet")


def member_labels(m: Member) -> dict[str, str]:
    return {INSTANCE: m.server.instance, MODEL: ",".join(m.server.models)}


class FleetCollector(Collector):
    """Every server's families merged under one name each, plus the fleet's own series."""

    def __init__(self, state: Callable[[], FleetState]) -> None:
        self._state = state

    def collect(self) -> Iterator[Metric]:
        st = self._state()
        merged: dict[str, Metric] = {}
        for m in st.worst_first():
            extra = member_labels(m)
            for fam in AdvisorCollector(lambda s=m.state: s).collect():  # type: ignore[misc]
                out = merged.get(fam.name)
                if out is None:
                    out = merged[fam.name] = Metric(fam.name, fam.documentation, fam.type, fam.unit)
                for s in fam.samples:
                    labels = {**s.labels, INSTANCE: extra[INSTANCE], ADVISED_BY[0]: ADVISED_BY[1]}
                    if not labels.get(MODEL):
                        labels[MODEL] = extra[MODEL]
                    out.add_sample(s.name, labels, s.value, s.timestamp)
        yield from merged.values()
        # one desired count per deployment: no instance label (Prometheus adds the fleet daemon's)
        yield from replicas_families(
            [({**d.labels(), ADVISED_BY[0]: ADVISED_BY[1]}, d.replicas) for d in st.deployments if d.replicas]
        )
        p = names.OUTPUT_PREFIX + "fleet_"
        yield GaugeMetricFamily(
            p + "prometheus_up",
            "1 when a cycle read Prometheus (whole answers) within two intervals.",
            value=1 if st.prometheus_up else 0,
        )
        yield GaugeMetricFamily(p + "instances", "vLLM servers advised.", value=len(st.members))
        yield GaugeMetricFamily(
            p + "instances_dropped",
            "vLLM servers behind the selector beyond those one fleet daemon follows (narrow --selector).",
            value=st.instances_dropped,
        )
        if st.cycle_seconds is not None:
            yield GaugeMetricFamily(
                p + "cycle_seconds", "Duration of the last cycle.", value=st.cycle_seconds
            )
        yield GaugeMetricFamily(
            p + "queries_per_cycle",
            "Prometheus API requests the last cycle made.",
            value=st.queries_last_cycle,
        )


def make_registry(state: Callable[[], FleetState]) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SafeCollector(FleetCollector(state)))
    return reg


def summary(m: Member) -> dict[str, Any]:
    d = m.state.diagnosis
    rec = d.recommendation if d is not None else None
    return {
        "instance": m.server.instance,
        "job": m.server.job,
        "models": list(m.server.models),
        "engines": list(m.server.engines),
        "up": m.state.up,
        "status": d.status if d is not None else "insufficient-data",
        "reason": d.reason if d is not None else "no diagnosis yet",
        "recommendation": rec.to_json() if rec is not None else None,
    }


def deployment_json(d: Deployment) -> dict[str, Any]:
    return {
        **d.labels(),
        "instances": list(d.instances),
        "up": d.up,
        "replicas": d.replicas.to_json() if d.replicas is not None else None,
    }


def fleet_readiness(st: FleetState) -> tuple[bool, dict[str, Any]]:
    """The fleet daemon's ``/readyz``: 503 until its first cycle and while Prometheus cannot be
    read (no server's advice can be trusted then); 200 otherwise, with each server's own
    readiness (one server down does not make the fleet's advice of the others untrusted)."""
    servers = {m.server.instance: readiness(m.state)[1]["why"] for m in st.members}
    why, reason = None, ""
    if st.cycles == 0:
        why, reason = "starting", "no cycle has run yet"
    elif not st.prometheus_up:
        why, reason = "prometheus-down", st.last_error or "Prometheus cannot be read"
    body = {"ready": why is None, "why": why, "reason": reason, "servers": servers}
    return why is None, body


def fleet_json(st: FleetState) -> dict[str, Any]:
    members = st.worst_first()
    worst = summary(members[0])["status"] if members else "insufficient-data"
    n_adv = sum(1 for m in members if m.state.diagnosis is not None and m.state.diagnosis.status == "advice")
    return {
        "status": worst,
        "reason": f"{len(members)} servers, {n_adv} with advice"
        + ("" if st.prometheus_up else f"; Prometheus cannot be read: {st.last_error}"),
        "recommendation": None,
        "prometheus_up": st.prometheus_up,
        "instances": [summary(m) for m in members],
        "deployments": [deployment_json(d) for d in st.deployments],
    }


@dataclass(frozen=True)
class FleetPages:
    """What the fleet's pages need beyond the state, per server (the drive layer's callables):
    the charts of one server's window, its history; the refresh interval."""

    charts: Callable[[str], Charts | None] | None = None
    history: Callable[[str], History | None] | None = None
    refresh_s: float | None = None


def landing_page(st: FleetState, refresh_s: float | None = None) -> str:
    """The fleet's ``/``: every server with its status, advice and desired replicas (outputs/page.py)."""
    return page.fleet_page(st, refresh_s=refresh_s)


def make_handler(
    state: Callable[[], FleetState], registry: CollectorRegistry, pages: FleetPages | None = None
) -> type[BaseHTTPRequestHandler]:
    src = pages or FleetPages()

    class Handler(QuietHandler):
        server_version = "vllm-advisor-fleet"

        def do_GET(self) -> None:
            path, _, query = self.path.partition("?")
            try:
                if path == "/metrics":
                    self._send(200, generate_latest(registry), CONTENT_TYPE)
                elif path == "/api/v1/diagnosis":
                    st = state()
                    asked = parse_qs(query).get("instance")
                    instance = asked[0] if asked else None
                    if instance is None:
                        self._json(200, fleet_json(st))
                        return
                    m = st.member(instance)
                    if m is None:
                        self._json(404, {"error": f"no server {instance!r} in the fleet"})
                    elif m.state.diagnosis is None:
                        self._json(
                            200,
                            {
                                "status": "insufficient-data",
                                "reason": "no diagnosis yet",
                                "recommendation": None,
                            },
                        )
                    else:
                        self._json(200, {**m.state.diagnosis.to_json(), **member_labels(m)})
                elif path == "/api/v1/replicas":
                    self._json(200, {"deployments": [deployment_json(d) for d in state().deployments]})
                elif path == "/readyz":
                    ok, body = fleet_readiness(state())
                    self._json(200 if ok else 503, body)
                elif path == "/healthz":
                    st = state()
                    self._json(
                        200, {"ok": True, "prometheus_up": st.prometheus_up, "instances": len(st.members)}
                    )
                elif path in ("/", "/index.html"):
                    self._html(200, landing_page(state(), src.refresh_s))
                elif path in ("/server", "/history"):
                    self._server_page(path, parse_qs(query).get("instance"))
                else:
                    self._send(404, b"not found\n", "text/plain")
            except BrokenPipeError:
                pass

        def _server_page(self, path: str, asked: list[str] | None) -> None:
            """One server's page (``/server``) or history (``/history``), ``?instance=`` it."""
            instance = asked[0] if asked else None
            m = state().member(instance) if instance is not None else None
            if m is None:
                what = f"no server {instance!r} in the fleet" if instance else "give ?instance="
                self._html(
                    404, page.shell("vllm-advisor fleet", f"<p>{page.e(what)}</p>", None, [("fleet", "/")])
                )
                return
            links = page.Links.for_instance(m.server.instance)
            title = f"vllm-advisor: {m.server.instance}"
            if path == "/server":
                chart = src.charts
                get = (lambda: chart(m.server.instance)) if chart is not None else None
                body = page.server_page(
                    m.state,
                    charts_or_none(get),
                    refresh_s=src.refresh_s,
                    links=links,
                    title=title,
                    charts_expected=get is not None,
                )
            else:
                h = src.history(m.server.instance) if src.history is not None else None
                body = page.history_page(
                    h or History(), refresh_s=src.refresh_s, links=links, title=f"{title} history"
                )
            self._html(200, body)

    return Handler


def make_server(
    host: str, port: int, state: Callable[[], FleetState], pages: FleetPages | None = None
) -> ThreadingHTTPServer:
    # the sidecar's server: bounded connections, timed-out reads, no spinning on EMFILE
    srv = BoundedHTTPServer((host, port), make_handler(state, make_registry(state), pages))
    srv.daemon_threads = True
    return srv
