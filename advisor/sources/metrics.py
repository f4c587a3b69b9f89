"""Read vLLM's ``/metrics`` page: fetch it (sources/http.py) and parse it (the fast path in
:mod:`advisor.sources.promtext`, checked against prometheus_client).

Every family is normalised to its canonical name through ``names.canonical_family``
(V0/V1 renames, ``ray_vllm:`` prefixes, counters with or without ``_total``).
``engine`` and ``model_name`` labels are kept, ``_created`` series are never read
as values, histogram buckets are collected whatever the label order.

Errors are distinct and clear: :class:`MetricsError` carries a ``kind`` in
``refused | timeout | http | not_prometheus | truncated | too_large | error``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from advisor.core import names
from advisor.core.model import Family, ParseWarning, Snapshot
from advisor.plugin import names as plugin_names
from advisor.sources import http, promtext

DEFAULT_TIMEOUT_S = 5.0
# Families the advisor reads; everything else on the page (the API server's HTTP and GC
# series, often most of it) is dropped before parsing, which keeps a cycle cheap. The
# stat-logger plugin's series (advisor/plugin, docs/plugin.md) are read when present.
KEEP_PREFIXES = (names.VLLM_PREFIX, names.RAY_PREFIX, "process_", plugin_names.PREFIX)
MAX_PAGE_BYTES = http.MAX_BYTES
# The families read (canonical names) and every spelling of their samples: vLLM's
# (``names.READ_FAMILIES``) and the plugin's.
READ_FAMILIES = names.READ_FAMILIES | plugin_names.FAMILIES
READ_SPELLINGS = names.READ_SPELLINGS | frozenset(
    f + sfx for f in plugin_names.FAMILIES for sfx in ("", "_total", "_count", "_sum")
)


class MetricsError(http.SourceError):
    """A page could not be fetched or read. ``kind`` says why, for metrics and tests."""


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


def _refuse_non_text(text: str) -> None:
    if not text.strip():
        raise MetricsError("not_prometheus", "empty page")
    head = text.lstrip()[:200].lower()
    if head.startswith(("<!doctype", "<html", "<?xml", "{")):
        raise MetricsError("not_prometheus", "not Prometheus text (looks like HTML/XML/JSON)")


# the default of ``read``: the families the advisor reads, unless every family is asked for
READ_DEFAULT: frozenset[str] = frozenset({"(default)"})


def _read_names(read: frozenset[str] | None, keep: tuple[str, ...] | None) -> frozenset[str] | None:
    if read is READ_DEFAULT:
        return READ_SPELLINGS if keep is not None else None
    return read


def parse_page(
    text: str,
    t: float,
    *,
    strict: bool = True,
    keep: tuple[str, ...] | None = KEEP_PREFIXES,
    read: frozenset[str] | None = READ_DEFAULT,
) -> Snapshot:
    """Parse Prometheus text into a :class:`Snapshot` with canonical family names (the fast
    path, :mod:`advisor.sources.promtext`).

    What cannot be read is skipped and named in ``Snapshot.warnings`` (family, line, why): a
    broken or hand-elided line, a bad sample (``le="abc"``, a 400-digit value, NaN in a
    counter), a histogram cut off before its ``+Inf`` bucket. Only what is not Prometheus
    text at all raises :class:`MetricsError`. ``strict`` (default): a last line without its
    newline may be cut mid-value and is skipped (with a warning); otherwise it is read.
    ``keep``: name prefixes of the families to read (None: all). ``read``: the names of the
    families kept (default: those the advisor reads, ``READ_SPELLINGS``, unless ``keep``
    is None; None: every family): the others are dropped before their labels are parsed and
    counted in ``Snapshot.skipped``. The values of the families the advisor reads are checked:
    NaN, infinities, negative counters, duplicate series and more series than
    ``promtext.MAX_SERIES_PER_FAMILY`` are bad samples (``ParseWarning.kind``).
    """
    _refuse_non_text(text)
    warnings: list[ParseWarning] = []
    skipped: dict[str, int] = {}
    read = _read_names(read, keep)
    raws = promtext.tokenize(text, keep, warnings, drop_unterminated=strict, read=read, skipped=skipped)
    families = _only_read(promtext.assemble(raws, warnings, skipped), read, skipped)
    return _snapshot(t, families, warnings, keep, skipped)


def _only_read(
    families: dict[str, Family], read: frozenset[str] | None, skipped: dict[str, int]
) -> dict[str, Family]:
    """With ``read``, what is left of another family (a `_bucket` series that is no histogram)
    is dropped too: the snapshot holds the families the advisor reads, nothing else."""
    if read is None:
        return families
    out = {}
    for name, fam in families.items():
        if name in READ_FAMILIES:
            out[name] = fam
        else:
            skipped["not_read"] = skipped.get("not_read", 0) + len(fam.series)
    return out


def parse_page_reference(
    text: str,
    t: float,
    *,
    keep: tuple[str, ...] | None = KEEP_PREFIXES,
    read: frozenset[str] | None = READ_DEFAULT,
) -> Snapshot:
    """The same page read by ``prometheus_client``'s parser (the reference the fast path is
    checked against, and the bare parse the benchmark compares with). Raises
    :class:`MetricsError` on the first line it cannot read."""
    _refuse_non_text(text)
    warnings: list[ParseWarning] = []
    skipped: dict[str, int] = {}
    try:
        read = _read_names(read, keep)
        raws = promtext.tokenize_reference(text, keep, read)
    except Exception as e:  # the parser raises ValueError and friends on bad lines
        raise MetricsError("not_prometheus", f"cannot parse as Prometheus text: {e}") from e
    families = _only_read(promtext.assemble(raws, warnings, skipped), read, skipped)
    return _snapshot(t, families, warnings, keep, skipped)


def _snapshot(
    t: float,
    families: dict[str, Family],
    warnings: list[ParseWarning],
    keep: tuple[str, ...] | None,
    skipped: dict[str, int] | None = None,
) -> Snapshot:
    if not families:
        why = f" ({len(warnings)} unreadable lines, first: {warnings[0]})" if warnings else ""
        if keep is not None:
            unread = (skipped or {}).get("not_read", 0)
            if unread and not why:  # vLLM's page, or a piece of one, without what the advisor reads
                raise MetricsError(
                    "not_prometheus",
                    f"none of the families the advisor reads is on the page ({unread} samples of "
                    "families it does not read): is this the whole of vLLM's /metrics?",
                )
            raise MetricsError(
                "not_prometheus", f"no vLLM metrics on the page (is this vLLM's /metrics?){why}"
            )
        raise MetricsError("not_prometheus", f"no metric families on the page{why}")
    warnings.sort(key=lambda w: (w.line is None, w.line or 0))  # in page order
    return Snapshot(t=t, families=families, warnings=tuple(warnings), skipped=dict(skipped or {}))


def checked(snapshot: Snapshot) -> Snapshot:
    """A snapshot not parsed here (rebuilt from Prometheus's samples) with its values checked as a
    parsed page's are (``promtext.check_families``); a parsed page comes back unchanged."""
    warnings: list[ParseWarning] = []
    families = promtext.check_families(snapshot.families, warnings)
    if not warnings:
        return snapshot
    return Snapshot(
        t=snapshot.t, families=families, warnings=(*snapshot.warnings, *warnings), skipped=snapshot.skipped
    )


def describe_warning(w: ParseWarning, where: str = "") -> str:
    """One line for a skipped part of a page: ``FILE:LINE: family: why``."""
    loc = (
        f"{where}:{w.line}"
        if where and w.line is not None
        else (where or (f"line {w.line}" if w.line else ""))
    )
    fam = f"{w.family}: " if w.family else ""
    return f"{loc}: {fam}{w.reason}" if loc else f"{fam}{w.reason}"


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
