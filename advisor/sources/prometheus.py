"""Prometheus as a source: the pages a live scrape would have read, rebuilt from a Prometheus
(or Thanos/Mimir: anything that answers Prometheus's HTTP query API).

Every sample of one scrape carries the scrape's timestamp, so grouping a target's raw samples
by (instance, timestamp) gives back each page Prometheus read, one :class:`Snapshot` per scrape,
with the same canonical family names, types and series that :func:`metrics.parse_page` gives
for the page itself. The window, signals and rules then run unchanged: there is no second
implementation of the signals here.

The raw samples come from range-vector selectors (``selector[15m]`` evaluated at the end of the
window, ``/api/v1/query``), not from ``/api/v1/query_range``: a range query resamples on its own
step, which repeats a scrape when the step is shorter than the scrape interval and drops
scrapes when it is longer; the raw samples are the scrapes themselves. Discovery uses
``/api/v1/series``; types and help come from ``/api/v1/metadata`` (a name's suffixes when a
Prometheus does not have it).

Errors are distinct: :class:`PrometheusError` carries a ``kind`` in
``refused | timeout | http | bad_response | query | no_data``.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import requests

from advisor.core import names, selectors
from advisor.core.config import parse_duration_s
from advisor.core.model import Family, Histogram, LabelKey, Provenanced, Snapshot, label_key
from advisor.core.selectors import quote, selector
from advisor.sources.http import SourceError

DEFAULT_TIMEOUT_S = 10.0
INSTANCE = "instance"
JOB = "job"
# Target labels Prometheus adds to every series of a target: not part of the page.
TARGET_LABELS = (INSTANCE, JOB)
# The families a page is read for (what metrics.KEEP_PREFIXES and window.slim keep).
_EXTRA = ("process_start_time_seconds", "process_cpu_seconds_total", "process_resident_memory_bytes")
assert {names.canonical_family(n, "counter" if n.endswith("_total") else "gauge") for n in _EXTRA} == set(
    names.KEEP_EXTRA
)
READ_NAME_RE = "vllm:.+|ray_vllm:.+|" + "|".join(_EXTRA)
# vLLM families that every version exports: an instance with one of them is a vLLM server.
DISCOVERY_NAMES = ("vllm:num_requests_running", "vllm:num_requests_waiting")
# The advisor's own series a sidecar exports about the engine.
SIDECAR_KNOB = names.output_name("engine_knob")
SIDECAR_FACT = names.output_name("engine_fact")
SIDECAR_INFO = names.output_name("engine_info")
# The label a fleet daemon puts on what it exports (never read back as a sidecar's knobs).
FLEET_LABEL = names.OUTPUT_PREFIX.rstrip("_")
SIDECAR_SELECTOR = f'{{__name__=~"{SIDECAR_KNOB}|{SIDECAR_FACT}|{SIDECAR_INFO}",{FLEET_LABEL}!="fleet"}}'


class PrometheusError(SourceError):
    """Prometheus could not be asked, or did not answer usefully. ``kind`` says why."""


# ------------------------------------------------------------------ selectors and times
def selector_matchers(selector: str) -> str:
    """The matchers inside ``{...}``, checked (:func:`advisor.core.selectors.selector_matchers`);
    PrometheusError (kind ``query``) naming the part it could not read."""
    try:
        return selectors.selector_matchers(selector)
    except selectors.SelectorError as e:
        raise PrometheusError("query", str(e)) from None


def parse_time(text: str, now: float | None = None) -> float:
    """``--at``: ``now``, unix seconds, an RFC 3339 / ISO 8601 time (UTC unless it says), or
    ``-30m``-style times before now. Raises ValueError with what it could not read."""

    s = text.strip()
    now = time.time() if now is None else now
    if s == "now":
        return now
    if s.startswith("-"):
        return now - parse_duration_s(s[1:])
    try:
        return float(s)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"cannot read the time {text!r}: give now, -30m, unix seconds or 2026-01-31T14:00:00Z"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


# ------------------------------------------------------------------ the HTTP API
@dataclass
class Client:
    """Prometheus's HTTP query API. ``calls`` counts the requests made (for the query budget)."""

    base_url: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    session: Any = None
    calls: int = 0
    calls_by_path: dict[str, int] = field(default_factory=dict)

    def get(self, path: str, params: Mapping[str, Any] | Sequence[tuple[str, Any]]) -> Any:
        url = self.base_url.rstrip("/") + path
        if self.session is None:
            self.session = requests.Session()  # keep-alive: one connection for a cycle's queries
        getter = self.session
        self.calls += 1
        self.calls_by_path[path] = self.calls_by_path.get(path, 0) + 1
        try:
            resp = getter.get(url, params=params, timeout=(min(self.timeout_s, 3.0), self.timeout_s))
        except requests.exceptions.Timeout as e:
            raise PrometheusError("timeout", f"no answer within {self.timeout_s:g}s", url) from e
        except requests.exceptions.ConnectionError as e:
            raise PrometheusError("refused", "cannot connect to Prometheus", url) from e
        except requests.exceptions.RequestException as e:
            raise PrometheusError("http", str(e), url) from e
        try:
            body = resp.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or "status" not in body:
            if resp.status_code != 200:
                raise PrometheusError("http", f"HTTP {resp.status_code} {resp.reason or ''}".strip(), url)
            raise PrometheusError("bad_response", "not a Prometheus API answer (JSON with a status)", url)
        if body.get("status") != "success":
            kind = "query" if resp.status_code in (400, 422) else "http"
            raise PrometheusError(kind, f"{body.get('errorType', 'error')}: {body.get('error', '')}", url)
        return body.get("data")

    def raw(
        self, expr: str, range_s: float, at: float
    ) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        """Raw samples of ``expr[range]`` ending at ``at``: (labels, [(t, value)]) per series."""
        data = self.get("/api/v1/query", {"query": f"{expr}[{_range(range_s)}]", "time": _ts(at)})
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            raise PrometheusError("bad_response", f"expected a matrix for {expr!r}", self.base_url)
        out = []
        for item in data.get("result") or []:
            labels = dict(item.get("metric") or {})
            values = [(float(t), float(v)) for t, v in item.get("values") or []]
            out.append((labels, values))
        return out

    def instant(self, expr: str, at: float) -> list[tuple[dict[str, str], float]]:
        data = self.get("/api/v1/query", {"query": expr, "time": _ts(at)})
        if not isinstance(data, dict) or data.get("resultType") != "vector":
            raise PrometheusError("bad_response", f"expected a vector for {expr!r}", self.base_url)
        return [(dict(i.get("metric") or {}), float(i["value"][1])) for i in data.get("result") or []]

    def series(self, match: Sequence[str], start: float, end: float) -> list[dict[str, str]]:
        params = [("match[]", m) for m in match] + [("start", _ts(start)), ("end", _ts(end))]
        data = self.get("/api/v1/series", params)
        if not isinstance(data, list):
            raise PrometheusError("bad_response", "expected a list of series", self.base_url)
        return [dict(d) for d in data]

    def metadata(self) -> dict[str, tuple[str, str]]:
        """metric name -> (type, help), as the targets declared them. Empty when not offered."""
        try:
            data = self.get("/api/v1/metadata", {})
        except PrometheusError as e:
            if e.kind in ("refused", "timeout"):
                raise
            return {}
        out: dict[str, tuple[str, str]] = {}
        if isinstance(data, dict):
            for name, entries in data.items():
                if entries and isinstance(entries, list) and isinstance(entries[0], dict):
                    out[name] = (str(entries[0].get("type", "")), str(entries[0].get("help", "")))
        return out


def _ts(t: float) -> str:
    return f"{t:.3f}"


def _range(seconds: float) -> str:
    return f"{max(1, math.ceil(seconds))}s"


# ------------------------------------------------------------------ pages from samples
Series = tuple[dict[str, str], list[tuple[float, float]]]


def _type_of(name: str, metadata: Mapping[str, tuple[str, str]]) -> tuple[str, str]:
    for key in (name, name.removesuffix("_total")):
        if key in metadata and metadata[key][0]:
            mtype, help_ = metadata[key]
            return ("gauge" if mtype == "unknown" else mtype), help_
    return ("counter" if name.endswith("_total") else "gauge"), ""


def snapshots(
    series: Iterable[Series],
    metadata: Mapping[str, tuple[str, str]] | None = None,
    *,
    key_label: str = INSTANCE,
    drop_labels: Sequence[str] = TARGET_LABELS,
    model: str | None = None,
    after: Mapping[str, float] | None = None,
) -> dict[str, list[Snapshot]]:
    """Group raw samples into one Snapshot per (``key_label`` value, scrape time), oldest first.

    Canonical names and types as :func:`metrics.parse_page` gives for the page itself;
    ``drop_labels`` (the target's labels) are removed from each series. ``model``: keep only
    that model's series (and those without a model_name label). ``after``: per key, only
    scrapes later than this time (a daemon's new samples)."""
    meta = metadata or {}
    bucket_bases = set()
    all_series = list(series)
    for labels, _ in all_series:
        n = labels.get("__name__", "")
        if n.endswith("_bucket") and "le" in labels:
            bucket_bases.add(n[: -len("_bucket")])
    # (key, t) -> canonical family -> [type, help, source name, {labelkey: value}]
    pages: dict[str, dict[float, dict[str, list[Any]]]] = defaultdict(dict)
    # histogram parts: (key, t, family, labelkey) -> {"buckets": [...], "count": x, "sum": y}
    parts: dict[tuple[str, float, str, LabelKey], dict[str, Any]] = {}
    for labels, values in all_series:
        n = labels.get("__name__", "")
        if not n or n.endswith("_created"):
            continue
        key = labels.get(key_label)
        if key is None:
            continue
        if model is not None and labels.get(names.MODEL_LABEL, model) != model:
            continue
        role = None
        base = n
        for suffix in ("_bucket", "_sum", "_count"):
            if n.endswith(suffix) and n[: -len(suffix)] in bucket_bases:
                role, base = suffix[1:], n[: -len(suffix)]
                break
        if role is not None:
            mtype, help_ = "histogram", _type_of(base, meta)[1]
        else:
            mtype, help_ = _type_of(n, meta)
        fam_name = names.canonical_family(base, mtype)
        plain = {k: v for k, v in labels.items() if k != "__name__" and k not in drop_labels}
        le = plain.get("le")
        lk = label_key(plain)
        since = (after or {}).get(key)
        for t, v in values:
            if since is not None and t <= since:
                continue
            fams = pages[key].setdefault(t, {})
            fam = fams.get(fam_name)
            if fam is None:
                fam = fams[fam_name] = [mtype, help_, base, {}]
            if role is None:
                fam[3][lk] = v
                continue
            part = parts.setdefault((key, t, fam_name, lk), {"buckets": [], "count": None, "sum": 0.0})
            if role == "bucket" and le is not None:
                part["buckets"].append((float(le), v))
            elif role == "count":
                part["count"] = v
            elif role == "sum":
                part["sum"] = v
    for (key, t, fam_name, lk), part in parts.items():
        bs = sorted(part["buckets"])
        if not bs or not math.isinf(bs[-1][0]):
            continue  # a histogram without its +Inf bucket is not read (as parse_page does)
        count = part["count"] if part["count"] is not None else bs[-1][1]
        pages[key][t][fam_name][3][lk] = Histogram(tuple(bs), count, part["sum"])
    out: dict[str, list[Snapshot]] = {}
    for key, by_t in pages.items():
        snaps = []
        for t in sorted(by_t):
            families = {
                name: Family(name=name, type=f[0], help=f[1], series=f[3], source_name=f[2])
                for name, f in by_t[t].items()
                if f[3]
            }
            if families:
                snaps.append(Snapshot(t=t, families=families))
        out[key] = snaps
    return out


def down_times(up: Iterable[Series], key_label: str = INSTANCE) -> dict[str, list[float]]:
    """Per key, the times Prometheus's ``up`` was 0 (the scrape failed)."""
    out: dict[str, list[float]] = defaultdict(list)
    for labels, values in up:
        key = labels.get(key_label)
        if key is not None:
            out[key].extend(t for t, v in values if v == 0)
    return {k: sorted(v) for k, v in out.items()}


# ------------------------------------------------------------------ knobs a sidecar exports
def host_of(instance: str) -> str:
    """``10.0.0.5:8000`` -> ``10.0.0.5``; ``[::1]:8000`` -> ``::1``."""
    if instance.startswith("["):
        return instance[1:].split("]", 1)[0]
    return instance.rsplit(":", 1)[0] if instance.count(":") == 1 else instance


def sidecar_engine(samples: Iterable[tuple[dict[str, str], float]], instance: str) -> dict[str, Provenanced]:
    """Knobs and facts from the advisor's own ``vllm_advisor_engine_*`` series, as a sidecar
    beside this vLLM exports them (its ``instance`` is on the same host, another port; or a
    ``vllm_instance`` label names the server). Each keeps the sidecar's source, the detail
    says it came through Prometheus."""
    host = host_of(instance)
    out: dict[str, Provenanced] = {}
    for labels, value in samples:
        target = labels.get("vllm_instance")
        if target is not None and target != instance:
            continue
        if target is None and host_of(labels.get(INSTANCE, "")) != host:
            continue
        name = labels.get("__name__")
        src = labels.get("source") or "metrics"
        detail = f"{name} via Prometheus (sidecar {labels.get(INSTANCE, '?')})"
        if name == SIDECAR_KNOB and labels.get("knob"):
            v: Any = int(value) if float(value).is_integer() else value
            out[labels["knob"]] = Provenanced(v, src, detail)
        elif name == SIDECAR_FACT and labels.get("fact"):
            fact = labels["fact"]
            if fact == "gpu_memory_bytes":
                out["gpu_memory_gib"] = Provenanced(value / 2**30, src, detail)
            else:
                out[fact] = Provenanced(int(value) if float(value).is_integer() else value, src, detail)
        elif name == SIDECAR_INFO:
            for label, key in (("version", "vllm_version"), ("model", "model"), ("device", "device")):
                if labels.get(label):
                    out[key] = Provenanced(labels[label], "metrics", detail)
    return out


# ------------------------------------------------------------------ one server's history
@dataclass(frozen=True)
class History:
    """What Prometheus holds about one server over a window: its pages, its failed scrapes,
    and what a sidecar said about its engine."""

    instance: str
    snapshots: tuple[Snapshot, ...]
    down: tuple[float, ...]
    engine: Mapping[str, Provenanced]
    queries: int


def read_history(
    client: Client,
    instance: str,
    at: float,
    window_s: float,
    *,
    model: str | None = None,
    selector_text: str = "",
) -> History:
    """Rebuild ``instance``'s pages of the ``window_s`` before ``at``. Raises PrometheusError
    (kind ``no_data``, naming the instances it has) when Prometheus has none."""
    extra = selector_matchers(selector_text)
    inst = f"{INSTANCE}={quote(instance)}"
    calls0 = client.calls
    metadata = client.metadata()
    read = selector(f"__name__=~{quote(READ_NAME_RE)}", '__name__!~".+_created"', inst, extra)
    raw = client.raw(read, window_s, at)
    pages = snapshots(raw, metadata, model=model).get(instance, [])
    if not pages:
        seen = sorted(
            {
                s.get(INSTANCE, "?")
                for s in client.series(
                    [selector(f"__name__=~{quote('|'.join(DISCOVERY_NAMES))}", extra)], at - window_s, at
                )
            }
        )
        hint = f"; instances with vLLM series then: {', '.join(seen[:10])}" if seen else "; none has any"
        what = f"instance {instance!r}" + (f" model {model!r}" if model else "")
        raise PrometheusError(
            "no_data",
            f"no vLLM series for {what} in the {window_s:g}s before {_ts(at)}{hint}",
            client.base_url,
        )
    up = client.raw(selector('__name__="up"', inst, extra), window_s, at)
    sidecar = client.instant(SIDECAR_SELECTOR, at)
    return History(
        instance=instance,
        snapshots=tuple(pages),
        down=tuple(down_times(up).get(instance, [])),
        engine=sidecar_engine(sidecar, instance),
        queries=client.calls - calls0,
    )
