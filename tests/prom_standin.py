"""A stand-in for a Prometheus that misbehaves: it answers the HTTP query API from recorded
real pages (the samples Prometheus stores for them), or turns hostile on request: it trickles
its answer one byte at a time, stalls, answers JSON of the wrong types, adds ``warnings`` and
drops half the series (a partial response), or lists 100,000 series. Instant queries answer
each series' latest sample within ``lookback_s``.

A real Prometheus cannot be made to do these on demand; the tests that use this say so. The
answers it builds follow Prometheus's documented API shapes (``status``, ``data``,
``resultType``, ``warnings``).
"""

from __future__ import annotations

import http.server
import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client.parser import text_string_to_metric_families

from advisor.sources.session import Session
from tests.http_standin import serving

Sample = tuple[dict[str, str], list[tuple[float, float]]]


def stored_samples(session: Path, instance: str, job: str = "vllm") -> tuple[list[Sample], dict[str, Any]]:
    """The samples a Prometheus stores for a recorded session's pages scraped as ``instance``,
    and its metadata (``/api/v1/metadata``'s shape)."""
    by_series: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
    meta: dict[str, list[dict[str, str]]] = {}
    for t, text in Session.load(session).iter_scrapes():
        for fam in text_string_to_metric_families(text):
            declared = fam.name + ("_total" if fam.type == "counter" else "")
            meta[declared] = [{"type": fam.type, "help": fam.documentation, "unit": ""}]
            for s in fam.samples:
                labels = {"__name__": s.name, **s.labels, "job": job, "instance": instance}
                by_series.setdefault(tuple(sorted(labels.items())), []).append((t, s.value))
    return [(dict(k), v) for k, v in by_series.items()], meta


@dataclass
class Behaviour:
    """What the stand-in does. ``mode``: ``normal``, ``trickle`` (one byte every
    ``trickle_s``), ``stall`` (headers, then nothing), ``body`` (answer ``body`` verbatim to
    every query), ``partial`` (half the series and a ``warnings`` list), ``many_series``
    (``/api/v1/series`` lists ``n_series`` servers)."""

    mode: str = "normal"
    trickle_s: float = 0.5
    body: bytes = b""
    warnings: tuple[str, ...] = ("partial response",)
    n_series: int = 100_000
    requests: list[str] = field(default_factory=list)
    sent: list[int] = field(default_factory=lambda: [0])  # bytes of answers written (trickle counts each)
    lookback_s: float = 300.0  # an instant query's lookback (Prometheus's default)
    # answers by request (:func:`answer_key`): ``replies`` are served verbatim instead of the
    # computed answer (the fuzz targets' mutated real answers); every body sent is kept in
    # ``answered``
    replies: dict[str, bytes] = field(default_factory=dict)
    answered: dict[str, bytes] = field(default_factory=dict)


def answer_key(path: str, query: dict[str, list[str]]) -> str:
    """A request as ``replies`` and ``answered`` name it: the path and its query or matchers."""
    return path + " " + "|".join(query.get("query", []) + query.get("match[]", []))


@contextmanager
def serve(samples: list[Sample], metadata: dict[str, Any], behaviour: Behaviour) -> Iterator[str]:
    """Serve the query API over ``samples``; yields the base URL."""

    def answer(path: str, q: dict[str, list[str]]) -> Any:
        if path == "/api/v1/metadata":
            return metadata
        if path == "/api/v1/series":
            if behaviour.mode == "many_series":
                return [
                    {
                        "__name__": "vllm:num_requests_running",
                        "instance": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}:8000",
                        "job": "vllm",
                        "model_name": "m",
                        "engine": "0",
                    }
                    for i in range(behaviour.n_series)
                ]
            names = {"vllm:num_requests_running", "vllm:num_requests_waiting"}
            return [lab for lab, _ in samples if lab["__name__"] in names]
        if path == "/api/v1/label/__name__/values":
            return sorted({lab["__name__"] for lab, _ in samples})
        if path == "/api/v1/query":
            return _query(q.get("query", [""])[0], float(q.get("time", ["0"])[0]))
        return None

    def _query(expr: str, at: float) -> dict[str, Any]:
        # the few shapes the advisor asks: `{matchers}[Ns]` (raw) and `{matchers}` (instant)
        rng = None
        if expr.endswith("s]") and "[" in expr:
            expr, _, r = expr.rpartition("[")
            rng = float(r[:-2])
        chosen = [(lab, vals) for lab, vals in samples if _matches(lab, expr)]
        if rng is None:  # the latest sample within the lookback, per series
            vec = []
            for lab, vals in chosen:
                recent = [(t, v) for t, v in vals if at - behaviour.lookback_s < t <= at]
                if recent:
                    t, v = recent[-1]
                    vec.append({"metric": lab, "value": [t, repr(v) if v == v else "NaN"]})
            return {"resultType": "vector", "result": vec}
        out = []
        for lab, vals in chosen:
            vs = [[t, repr(v) if v == v else "NaN"] for t, v in vals if at - rng < t <= at]
            if vs:
                out.append({"metric": lab, "values": vs})
        if behaviour.mode == "partial":
            out = out[::2]
        return {"resultType": "matrix", "result": out}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: object) -> None:
            pass

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            behaviour.requests.append(parts.path)
            key = answer_key(parts.path, parse_qs(parts.query))
            if key in behaviour.replies:
                body = behaviour.replies[key]
            elif behaviour.mode == "body" and parts.path.startswith("/api/"):
                body = behaviour.body
            else:
                data = answer(parts.path, parse_qs(parts.query))
                doc: dict[str, Any] = {"status": "success", "data": data}
                if behaviour.mode == "partial":
                    doc["warnings"] = list(behaviour.warnings)
                body = json.dumps(doc).encode()
            behaviour.answered[key] = body
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if behaviour.mode == "trickle":
                    for i in range(len(body)):
                        self.wfile.write(body[i : i + 1])
                        self.wfile.flush()
                        behaviour.sent[0] += 1
                        time.sleep(behaviour.trickle_s)
                elif behaviour.mode == "stall":
                    time.sleep(3600)
                else:
                    self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass

    with serving(Handler) as base:
        yield base


def _matches(labels: dict[str, str], expr: str) -> bool:
    """A small reading of ``{a="b",c=~"d|e",f!~"g"}``: enough for the advisor's own queries."""
    inner = expr.strip()
    if not (inner.startswith("{") and inner.endswith("}")):
        return False
    for m in re.finditer(r'(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"', inner):
        name, op, value = m.group(1), m.group(2), m.group(3).replace('\\"', '"').replace("\\\\", "\\")
        have = labels.get(name, "")
        ok = {
            "=": have == value,
            "!=": have != value,
            "=~": re.fullmatch(value, have) is not None,
            "!~": re.fullmatch(value, have) is None,
        }[op]
        if not ok:
            return False
    return True


def wait_for(fn: Callable[[], Any], timeout: float) -> Any:
    """Poll ``fn`` until truthy (for subprocess tests, which have no clock to inject)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.05)
    return None
