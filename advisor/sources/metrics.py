"""Read vLLM's ``/metrics`` page: fetch it (requests) and parse it (prometheus_client).

Every family is normalised to its canonical name through ``names.canonical_family``
(V0/V1 renames, ``ray_vllm:`` prefixes, counters with or without ``_total``).
``engine`` and ``model_name`` labels are kept, ``_created`` series are never read
as values, histogram buckets are collected whatever the label order.

Errors are distinct and clear: :class:`MetricsError` carries a ``kind`` in
``refused | timeout | http | not_prometheus | truncated | too_large | error``.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from advisor import names
from advisor.model import Family, Histogram, LabelKey, Snapshot, label_key
from advisor.sources import http

DEFAULT_TIMEOUT_S = 5.0
# Families the advisor reads; everything else on the page (the API server's HTTP and GC
# series, often most of it) is dropped before parsing, which keeps a cycle cheap.
KEEP_PREFIXES = (names.VLLM_PREFIX, names.RAY_PREFIX, "process_")
MAX_PAGE_BYTES = http.MAX_BYTES


class MetricsError(Exception):
    """A page could not be fetched or read. ``kind`` says why, for metrics and tests."""

    def __init__(self, kind: str, message: str, url: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.url = url

    def __str__(self) -> str:
        where = f" ({self.url})" if self.url else ""
        return f"{self.kind}: {super().__str__()}{where}"


@dataclass(frozen=True)
class Page:
    text: str
    t: float
    url: str
    duration_s: float


def fetch(url: str, timeout_s: float = DEFAULT_TIMEOUT_S, session: http.Client | None = None) -> Page:
    """GET a ``/metrics`` page within ``timeout_s`` in all (advisor.sources.http: one deadline,
    one size limit). Raises :class:`MetricsError` with a distinct kind."""
    client = session or http.Client()
    try:
        resp = client.get(url, timeout_s, headers={"Accept": "text/plain"}, max_bytes=MAX_PAGE_BYTES)
    except http.FetchError as e:
        raise MetricsError(e.kind, e.message, url) from None
    if resp.status_code != 200:
        raise MetricsError("http", f"HTTP {resp.status_code} {resp.reason or ''}".strip(), url)
    ctype = resp.headers.get("content-type", "")
    text = resp.text
    if "html" in ctype.lower() or text.lstrip()[:15].lower().startswith(("<!doctype", "<html")):
        raise MetricsError("not_prometheus", "got an HTML page, not Prometheus text", url)
    return Page(text=text, t=time.time(), url=url, duration_s=resp.duration_s)


def _root_cause(e: BaseException) -> str:
    while e.__cause__ is not None or e.__context__ is not None:
        nxt = e.__cause__ or e.__context__
        assert nxt is not None
        e = nxt
    return str(e) or type(e).__name__


def _keep(line: str, prefixes: tuple[str, ...]) -> bool:
    if line.startswith("#"):
        parts = line.split(None, 3)  # "# HELP name text" / "# TYPE name type"
        return len(parts) >= 3 and parts[2].startswith(prefixes)
    return line.startswith(prefixes)


def parse_page(
    text: str, t: float, *, strict: bool = True, keep: tuple[str, ...] | None = KEEP_PREFIXES
) -> Snapshot:
    """Parse Prometheus text into a :class:`Snapshot` with canonical family names.

    ``strict`` (default) rejects a truncated page (no final newline, or a histogram
    without its ``+Inf`` bucket) rather than reading half of it. ``keep``: name prefixes
    of the families to read (None: all).
    """
    if not text.strip():
        raise MetricsError("not_prometheus", "empty page")
    head = text.lstrip()[:200].lower()
    if head.startswith(("<!doctype", "<html", "<?xml", "{")):
        raise MetricsError("not_prometheus", "not Prometheus text (looks like HTML/XML/JSON)")
    if strict and not text.endswith("\n"):
        raise MetricsError("truncated", "page does not end with a newline (cut off?)")
    if keep is not None:
        text = "\n".join(ln for ln in text.split("\n") if _keep(ln, keep)) + "\n"
    try:
        raw = list(text_string_to_metric_families(text))
    except Exception as e:  # the parser raises ValueError and friends on bad lines
        raise MetricsError("not_prometheus", f"cannot parse as Prometheus text: {e}") from e
    if not raw:
        if keep is not None:
            raise MetricsError("not_prometheus", "no vLLM metrics on the page (is this vLLM's /metrics?)")
        raise MetricsError("not_prometheus", "no metric families on the page")
    families: dict[str, Family] = {}
    for fam in raw:
        if fam.name.endswith("_created"):
            continue  # creation timestamps, never values
        name = names.canonical_family(fam.name, fam.type)
        series = _series_of(fam, strict)
        prev = families.get(name)
        if prev is not None:  # the same family under an old and a new name: keep both series
            merged = dict(prev.series)
            merged.update(series)
            series = merged
        families[name] = Family(
            name=name, type=fam.type, help=fam.documentation, series=series, source_name=fam.name
        )
    return Snapshot(t=t, families=families)


def _series_of(fam: Any, strict: bool) -> dict[LabelKey, Any]:
    if fam.type in ("histogram", "gaugehistogram"):
        buckets: dict[LabelKey, list[tuple[float, float]]] = defaultdict(list)
        counts: dict[LabelKey, float] = {}
        sums: dict[LabelKey, float] = {}
        for s in fam.samples:
            key = label_key(s.labels)
            if s.name.endswith("_bucket"):
                buckets[key].append((float(s.labels.get("le", "+Inf")), float(s.value)))
            elif s.name.endswith("_count"):
                counts[key] = float(s.value)
            elif s.name.endswith("_sum"):
                sums[key] = float(s.value)
        out: dict[LabelKey, Any] = {}
        for key, bs in buckets.items():
            bs.sort()
            if strict and not math.isinf(bs[-1][0]):
                raise MetricsError("truncated", f"histogram {fam.name} has no +Inf bucket (cut off?)")
            count = counts.get(key, bs[-1][1])
            out[key] = Histogram(buckets=tuple(bs), count=count, sum=sums.get(key, 0.0))
        return out
    out2: dict[LabelKey, Any] = {}
    for s in fam.samples:
        if s.name.endswith("_created"):
            continue
        out2[label_key(s.labels)] = float(s.value)
    return out2


def read_file(path: str, t: float | None = None) -> Snapshot:
    """Parse a saved page. Raises MetricsError (with the path) or OSError."""
    with open(path, "rb") as fh:
        data = fh.read(MAX_PAGE_BYTES + 1)
    if len(data) > MAX_PAGE_BYTES:
        raise MetricsError("too_large", f"file larger than {MAX_PAGE_BYTES} bytes", path)
    if path.endswith(".gz"):
        try:
            data = http.decompress_bounded(data, MAX_PAGE_BYTES)
        except ValueError as e:
            raise MetricsError("too_large" if "larger" in str(e) else "error", str(e), path) from None
    try:
        return parse_page(data.decode("utf-8", errors="replace"), t if t is not None else 0.0)
    except MetricsError as e:
        raise MetricsError(e.kind, str(e.args[0]), path) from e


def engines(snapshot: Snapshot) -> list[str]:
    return snapshot.label_values(names.ENGINE_LABEL)


def model_names(snapshot: Snapshot) -> list[str]:
    return snapshot.label_values(names.MODEL_LABEL)


def vllm_families(snapshot: Snapshot) -> list[str]:
    return sorted(n for n in snapshot.families if n.startswith(names.VLLM_PREFIX))
