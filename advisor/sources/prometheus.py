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

Every request goes through the sidecar's HTTP client (:mod:`advisor.sources.http`): one
overall deadline (per request, and per whole read with :meth:`Client.budget`), a size limit,
and abort on shutdown. Every answer's JSON is checked against the shapes the API documents.
Answers that carry ``warnings`` (a partial response) are remembered: what is read from them is
not the whole data (:attr:`History.warnings`).

Errors are distinct: :class:`PrometheusError` carries a ``kind`` in
``refused | timeout | too_large | too_many | http | bad_response | query | no_data``.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from advisor.core import knobs, names, selectors, urls
from advisor.core.config import parse_duration_s
from advisor.core.model import Family, Histogram, LabelKey, ParseWarning, Provenanced, Snapshot, label_key
from advisor.core.redact import redact_url
from advisor.core.selectors import quote, selector
from advisor.core.shown import printable
from advisor.sources import http as http_src
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
# Every answer is read through the sidecar's HTTP client (advisor/sources/http.py): one overall
# deadline, a size limit, abort on shutdown. Answers that list series (discovery) have a tighter
# limit: their JSON costs ~10x its size once decoded, and a selector that matches 100,000 series
# is a mistake to name, not a load to carry.
MAX_ANSWER_BYTES = http_src.MAX_BYTES
MAX_SERIES_ANSWER_BYTES = 8 * 1024 * 1024
MAX_SERIES = 20_000  # series one discovery answer may list (asked with Prometheus's `limit`)
DEFAULT_BUDGET_S = 30.0  # one whole read (explain --prometheus): every request within it


class _Invalid(Exception):
    """An answer of the wrong shape; the message says where (``data.result[3].values``)."""


def _dict(v: Any, where: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise _Invalid(f"{where} is {_kind(v)}, not an object")
    return v


def _list(v: Any, where: str) -> list[Any]:
    if not isinstance(v, list):
        raise _Invalid(f"{where} is {_kind(v)}, not a list")
    return v


def _labels(v: Any, where: str) -> dict[str, str]:
    d = _dict(v, where)
    for k, x in d.items():
        if not isinstance(x, str):
            raise _Invalid(f"{where}[{k!r}] is {_kind(x)}, not a label value")
    return d


def _sample(v: Any, where: str) -> tuple[float, float]:
    """``[unix_time, "value"]`` as Prometheus writes a sample."""
    pair = _list(v, where)
    if len(pair) != 2 or isinstance(pair[0], bool) or not isinstance(pair[0], int | float):
        raise _Invalid(f'{where} is not [time, "value"]')
    if not isinstance(pair[1], str):
        raise _Invalid(f"{where}'s value is {_kind(pair[1])}, not a number in a string")
    try:
        t = float(pair[0])
    except OverflowError:  # a 400-digit integer
        t = math.inf
    if not math.isfinite(t):  # NaN, Infinity (Python's JSON reads them) or beyond a float
        raise _Invalid(f"{where}'s time is not a finite number")
    try:
        return t, float(pair[1])
    except ValueError:
        raise _Invalid(f"{where}'s value {pair[1][:40]!r} is not a number") from None


def _kind(v: Any) -> str:
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }.get(type(v), type(v).__name__)


@dataclass
class Client:
    """Prometheus's HTTP query API, read through the advisor's bounded HTTP client.

    ``timeout_s``: the deadline of one request (connecting, the headers and the whole body); a
    :meth:`budget` puts one deadline over several. Every answer's JSON is checked for the shape
    the API documents: one :class:`PrometheusError` (kind ``bad_response``) says what was wrong.
    ``warnings`` collects what Prometheus said alongside its data (``partial response``, a
    truncated result): an answer with warnings is not the whole data. ``calls`` counts the
    requests made (for the query budget); :meth:`abort` ends every request in flight (SIGTERM)."""

    base_url: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    http: http_src.Client = field(default_factory=http_src.Client)
    calls: int = 0
    calls_by_path: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    _deadline: float | None = None

    @contextmanager
    def budget(self, seconds: float) -> Iterator[None]:
        """Every request made inside ends by ``seconds`` from now (one deadline for a whole read
        or cycle); an outer, earlier deadline stays."""
        outer = self._deadline
        mine = time.monotonic() + seconds
        self._deadline = mine if outer is None else min(outer, mine)
        try:
            yield
        finally:
            self._deadline = outer

    def abort(self) -> None:
        """End every request in flight now and refuse new ones (shutdown)."""
        self.http.abort()

    @property
    def shown_url(self) -> str:
        return redact_url(self.base_url)

    def get(
        self,
        path: str,
        params: Mapping[str, Any] | Sequence[tuple[str, Any]],
        max_bytes: int = MAX_ANSWER_BYTES,
    ) -> Any:
        """``data`` of a successful answer; PrometheusError otherwise (``refused | timeout |
        too_large | http | query | bad_response``)."""
        url = urls.join(self.base_url, path, params)
        shown = redact_url(urls.join(self.base_url, path))
        timeout = self.timeout_s
        if self._deadline is not None:
            timeout = min(timeout, self._deadline - time.monotonic())
            if timeout <= 0:
                raise PrometheusError("timeout", "no answer within the time allowed for this read", shown)
        self.calls += 1
        self.calls_by_path[path] = self.calls_by_path.get(path, 0) + 1
        try:
            resp = self.http.get(url, timeout, {"Accept": "application/json"}, max_bytes=max_bytes)
        except http_src.FetchError as e:
            kind = {"refused": "refused", "timeout": "timeout", "too_large": "too_large"}.get(e.kind, "http")
            raise PrometheusError(kind, e.message, shown) from None
        try:
            body = resp.json()
        except ValueError as e:
            body = None
            why = str(e)
        else:
            why = ""
        if not isinstance(body, dict) or "status" not in body:
            if resp.status_code != 200:
                raise PrometheusError("http", f"HTTP {resp.status_code} {resp.reason}".strip(), shown)
            what = f"not JSON ({why})" if body is None else "JSON without a status"
            raise PrometheusError("bad_response", f"not a Prometheus API answer: {what}", shown)
        if body.get("status") != "success":
            kind = "query" if resp.status_code in (400, 422) else "http"
            etype, err = body.get("errorType", "error"), body.get("error", "")
            raise PrometheusError(kind, f"{str(etype)[:80]}: {str(err)[:300]}", shown)
        warns = body.get("warnings")
        if warns is not None:
            if not isinstance(warns, list):
                raise PrometheusError("bad_response", f"warnings is {_kind(warns)}, not a list", shown)
            self.warnings += [f"{path}: {str(w)[:200]}" for w in warns[:10]]
        return body.get("data")

    def _checked(self, path: str, fn: Any, data: Any) -> Any:
        try:
            return fn(data)
        except _Invalid as e:
            raise PrometheusError(
                "bad_response", f"the answer to {path} is not what the API documents: {e}", self.shown_url
            ) from None

    def raw(
        self, expr: str, range_s: float, at: float
    ) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        """Raw samples of ``expr[range]`` ending at ``at``: (labels, [(t, value)]) per series."""
        data = self.get("/api/v1/query", {"query": f"{expr}[{_range(range_s)}]", "time": _ts(at)})

        def read(data: Any) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
            d = _dict(data, "data")
            if d.get("resultType") != "matrix":
                raise _Invalid(f"data.resultType is {str(d.get('resultType'))[:20]!r}, not 'matrix'")
            out = []
            for i, item in enumerate(_list(d.get("result"), "data.result")):
                w = f"data.result[{i}]"
                it = _dict(item, w)
                labels = _labels(it.get("metric"), f"{w}.metric")
                values = [
                    _sample(v, f"{w}.values[{j}]")
                    for j, v in enumerate(_list(it.get("values"), f"{w}.values"))
                ]
                out.append((labels, values))
            return out

        return self._checked("/api/v1/query", read, data)

    def instant(self, expr: str, at: float) -> list[tuple[dict[str, str], float]]:
        data = self.get("/api/v1/query", {"query": expr, "time": _ts(at)})

        def read(data: Any) -> list[tuple[dict[str, str], float]]:
            d = _dict(data, "data")
            if d.get("resultType") != "vector":
                raise _Invalid(f"data.resultType is {str(d.get('resultType'))[:20]!r}, not 'vector'")
            out = []
            for i, item in enumerate(_list(d.get("result"), "data.result")):
                w = f"data.result[{i}]"
                it = _dict(item, w)
                out.append(
                    (_labels(it.get("metric"), f"{w}.metric"), _sample(it.get("value"), f"{w}.value")[1])
                )
            return out

        return self._checked("/api/v1/query", read, data)

    def series(self, match: Sequence[str], start: float, end: float) -> list[dict[str, str]]:
        """The series behind ``match`` (at most :data:`MAX_SERIES`: more is an error that says
        to narrow the selector, read in bounded memory)."""
        params = [("match[]", m) for m in match] + [
            ("start", _ts(start)),
            ("end", _ts(end)),
            ("limit", str(MAX_SERIES + 1)),  # Prometheus >= 2.54 stops there; older ones ignore it
        ]
        try:
            data = self.get("/api/v1/series", params, max_bytes=MAX_SERIES_ANSWER_BYTES)
        except PrometheusError as e:
            if e.kind != "too_large":
                raise
            raise self._too_many(f"more than {MAX_SERIES_ANSWER_BYTES // 2**20} MiB of series") from None

        def read(data: Any) -> list[dict[str, str]]:
            return [_labels(d, f"data[{i}]") for i, d in enumerate(_list(data, "data"))]

        out: list[dict[str, str]] = self._checked("/api/v1/series", read, data)
        if len(out) > MAX_SERIES:
            raise self._too_many(f"more than {MAX_SERIES:,} series")
        return out

    def _too_many(self, what: str) -> PrometheusError:
        return PrometheusError(
            "too_many",
            f"{what} match the vLLM discovery query: narrow --selector (a job, a namespace)",
            self.shown_url,
        )

    def label_values(self, label: str, match: Sequence[str], start: float, end: float) -> list[str]:
        params = [("match[]", m) for m in match] + [("start", _ts(start)), ("end", _ts(end))]
        data = self.get(f"/api/v1/label/{label}/values", params)

        def read(data: Any) -> list[str]:
            out = _list(data if data is not None else [], "data")
            for i, v in enumerate(out):
                if not isinstance(v, str):
                    raise _Invalid(f"data[{i}] is {_kind(v)}, not a name")
            return out

        return self._checked(f"/api/v1/label/{label}/values", read, data)

    def metadata(self) -> dict[str, tuple[str, str]]:
        """metric name -> (type, help), as the targets declared them. Empty when not offered."""
        try:
            data = self.get("/api/v1/metadata", {})
        except PrometheusError as e:
            if e.kind in ("refused", "timeout", "bad_response"):
                raise
            return {}
        out: dict[str, tuple[str, str]] = {}
        if isinstance(data, dict):
            for name, entries in data.items():
                if entries and isinstance(entries, list) and isinstance(entries[0], dict):
                    out[name] = (str(entries[0].get("type", ""))[:20], str(entries[0].get("help", ""))[:500])
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
    bad: dict[tuple[str, float], list[ParseWarning]] = defaultdict(list)  # per page: what was not read
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
        bound = _bound(le) if role == "bucket" and le is not None else None
        for t, v in values:
            if since is not None and t <= since:
                continue
            if bound is not None and math.isnan(bound):  # le="" or "abc": the bucket is not read
                bad[(key, t)].append(
                    ParseWarning(
                        base,
                        None,
                        f"bucket bound le={printable(le or '')[:40]!r} is not a number",
                        "bad_bucket",
                    )
                )
                continue
            fams = pages[key].setdefault(t, {})
            fam = fams.get(fam_name)
            if fam is None:
                fam = fams[fam_name] = [mtype, help_, base, {}]
            if role is None:
                fam[3][lk] = v
                continue
            part = parts.setdefault((key, t, fam_name, lk), {"buckets": [], "count": None, "sum": 0.0})
            if role == "bucket" and bound is not None:
                part["buckets"].append((bound, v))
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
                snaps.append(Snapshot(t=t, families=families, warnings=tuple(bad.get((key, t), ()))))
        out[key] = snaps
    return out


def _bound(le: str) -> float:
    """A bucket's ``le`` as a number; NaN when it is none (``""``, ``"abc"``, ``"NaN"``)."""
    try:
        return float(le)
    except ValueError:
        return math.nan


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


MAX_READING = 1e18


def _is_reading(value: float) -> bool:
    return math.isfinite(value) and 0 <= value <= MAX_READING


def sidecar_engine(samples: Iterable[tuple[dict[str, str], float]], instance: str) -> dict[str, Provenanced]:
    """Knobs and facts from the advisor's own ``vllm_advisor_engine_*`` series (see
    :func:`sidecar_readings`, which also says what was not read)."""
    return sidecar_readings(samples, instance)[0]


def _not_a_reading(value: float) -> str:
    if not math.isfinite(value):
        return "non_finite"
    return "negative" if value < 0 else "out_of_range"


def sidecar_readings(
    samples: Iterable[tuple[dict[str, str], float]], instance: str
) -> tuple[dict[str, Provenanced], tuple[ParseWarning, ...]]:
    """Knobs and facts from the advisor's own ``vllm_advisor_engine_*`` series, as a sidecar
    beside this vLLM exports them (its ``instance`` is on the same host, another port; or a
    ``vllm_instance`` label names the server). Each keeps the sidecar's source, the detail
    says it came through Prometheus. A value that is no reading (NaN, +-Inf, negative, beyond
    1e18) or a knob's value outside its bounds leaves that knob or fact unknown and is a bad
    sample, named (the second part: the same checks as a parsed page's, G5)."""
    host = host_of(instance)
    out: dict[str, Provenanced] = {}
    bad: list[ParseWarning] = []
    for labels, value in samples:
        target = labels.get("vllm_instance")
        if target is not None and target != instance:
            continue
        if target is None and host_of(labels.get(INSTANCE, "")) != host:
            continue
        name = labels.get("__name__")
        src = labels.get("source") or "metrics"
        sidecar = labels.get(INSTANCE, "?")
        detail = f"{name} via Prometheus (sidecar {sidecar})"
        sidecar = printable(sidecar)
        what = labels.get("knob") or labels.get("fact")
        if name in (SIDECAR_KNOB, SIDECAR_FACT) and what and not _is_reading(value):
            bad.append(
                ParseWarning(
                    name,
                    None,
                    f"{printable(what)} = {value!r} from the sidecar {sidecar} is no reading: left unknown",
                    _not_a_reading(value),
                )
            )
            continue
        if not _is_reading(value):
            continue
        if name == SIDECAR_KNOB and labels.get("knob"):
            v: Any = int(value) if float(value).is_integer() else value
            if not knobs.in_range(labels["knob"], v):
                bad.append(
                    ParseWarning(
                        name,
                        None,
                        f"{printable(labels['knob'])} = {v!r} from the sidecar {sidecar} is outside the knob's "
                        "range: left unknown",
                        "out_of_range",
                    )
                )
                continue
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
    return out, tuple(bad)


# ------------------------------------------------------------------ one server's history
@dataclass(frozen=True)
class History:
    """What Prometheus holds about one server over a window: its pages, its failed scrapes,
    what a sidecar said about its engine, and the warnings Prometheus answered with (a partial
    response: then the pages are not the whole data)."""

    instance: str
    snapshots: tuple[Snapshot, ...]
    down: tuple[float, ...]
    engine: Mapping[str, Provenanced]
    queries: int
    warnings: tuple[str, ...] = ()
    bad_sidecar: tuple[ParseWarning, ...] = ()  # the sidecar's series that are no reading (G5)


def read_history(
    client: Client,
    instance: str,
    at: float,
    window_s: float,
    *,
    model: str | None = None,
    selector_text: str = "",
    budget_s: float = DEFAULT_BUDGET_S,
) -> History:
    """Rebuild ``instance``'s pages of the ``window_s`` before ``at``, every request within one
    deadline (``budget_s``). Raises PrometheusError (kind ``no_data``, naming the instances it
    has) when Prometheus has none."""
    with client.budget(budget_s):
        return _read_history(client, instance, at, window_s, model, selector_text)


def _read_history(
    client: Client, instance: str, at: float, window_s: float, model: str | None, selector_text: str
) -> History:
    extra = selector_matchers(selector_text)
    inst = f"{INSTANCE}={quote(instance)}"
    calls0 = client.calls
    warned0 = len(client.warnings)
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
        shown = ", ".join(printable(s) for s in seen[:10])
        hint = f"; instances with vLLM series then: {shown}" if seen else "; none has any"
        what = f"instance {instance!r}" + (f" model {model!r}" if model else "")
        raise PrometheusError(
            "no_data",
            f"no vLLM series for {what} in the {window_s:g}s before {_ts(at)}{hint}",
            client.shown_url,
        )
    up = client.raw(selector('__name__="up"', inst, extra), window_s, at)
    sidecar = client.instant(SIDECAR_SELECTOR, at)
    engine, bad = sidecar_readings(sidecar, instance)
    return History(
        instance=instance,
        snapshots=tuple(pages),
        down=tuple(down_times(up).get(instance, [])),
        engine=engine,
        queries=client.calls - calls0,
        warnings=tuple(client.warnings[warned0:]),
        bad_sidecar=bad,
    )
