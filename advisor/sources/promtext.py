"""Prometheus text exposition -> canonical families, in one pass, tolerant of broken lines.

Two tokenizers feed one assembler:

- :func:`tokenize` (the fast path): one pass over the lines, only the families whose names
  start with the ``keep`` prefixes, values as floats; a label block is parsed once and
  remembered across pages (vLLM repeats the same series every scrape). A line it does not
  recognise is handed to ``prometheus_client`` alone (the reference grammar); a line neither
  can read is skipped with a :class:`~advisor.model.ParseWarning` (line number, family).
- :func:`tokenize_reference`: ``prometheus_client``'s own parser on the whole page (after the
  same ``keep`` filter); it raises on the first bad line. The differential test checks that
  both give the same families on every page both can read.

:func:`assemble` turns tokenized families into :class:`~advisor.model.Family` values with
canonical names (``names.canonical_family``), label aliases (``names.LABEL_ALIASES``) and
histograms as :class:`~advisor.model.Histogram`; it groups ``_bucket``/``_count``/``_sum``
pasted without their ``# TYPE`` line into one histogram and skips (with a warning) what
cannot be read: a bucket bound that is not a number, a non-finite count, a histogram cut off
before its ``+Inf`` bucket.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import _split_quoted, _unquote_unescape, text_string_to_metric_families

from advisor.core import names
from advisor.core.model import Family, Histogram, LabelKey, ParseWarning, Summary

# One sample as tokenized: (sample name, labels without ``le``, ``le`` or None, value, line).
Sample = tuple[str, LabelKey, str | None, float, int | None]

METRIC_TYPES = frozenset({"counter", "gauge", "summary", "histogram", "gaugehistogram", "unknown", "info"})
_SUFFIXES = {
    "counter": ("",),
    "gauge": ("",),
    "summary": ("_count", "_sum", ""),
    "histogram": ("_count", "_sum", "_bucket"),
}
_HEAD_RE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?")
_LABELS_RE = re.compile(r'(?:[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*",)*(?:[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*",?)?')
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"\\]*)"')
_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_HELP_ESCAPE_RE = re.compile(r"\\[\\n]")
_INF_WORDS = frozenset({"inf", "infinity"})
_MAX_CACHE = 20_000  # series heads remembered (a 16-engine vLLM page has ~6,000)
# "name{labels}" -> (sample name, label key, le); shared across pages (the series repeat)
_HEAD_CACHE: dict[str, tuple[str, LabelKey, str | None]] = {}


@dataclass
class RawFamily:
    """A family as the text declares it: name (counters without ``_total``, as
    prometheus_client names them), type (``unknown`` when untyped), help, samples."""

    name: str
    type: str
    help: str
    samples: list[Sample] = field(default_factory=list)


def key_of(pairs: Iterable[tuple[str, str]]) -> tuple[LabelKey, str | None]:
    """Labels -> (sorted key without ``le``, with label aliases applied; the ``le`` value)."""
    le = None
    out: dict[str, str] = {}
    for k, v in pairs:
        if k == "le":
            le = v
        else:
            out[k] = v
    for alias, canon in names.LABEL_ALIASES.items():
        if alias in out and canon not in out:
            out[canon] = out.pop(alias)
    return tuple(sorted(out.items())), le


def _parse_head(head: str) -> tuple[str, LabelKey, str | None] | None:
    """``name{a="b",...}`` in the common shape (no escapes, no spaces); None otherwise."""
    m = _HEAD_RE.fullmatch(head)
    if m is None:
        return None
    body = m.group(2)
    if not body:
        return m.group(1), (), None
    if _LABELS_RE.fullmatch(body) is None:
        return None
    pairs = _LABEL_RE.findall(body)
    seen = {k for k, _ in pairs}
    if len(seen) != len(pairs) or any(k.startswith("__") for k in seen):
        return None  # duplicates and reserved names: the reference decides
    key, le = key_of(pairs)
    return m.group(1), key, le


def _keep_comment(line: str, keep: tuple[str, ...] | None) -> bool:
    if keep is None:
        return True
    parts = line.split(None, 3)  # "# HELP name text" / "# TYPE name type"
    return len(parts) >= 3 and parts[2].startswith(keep)


def _reference_sample(line: str) -> tuple[str, dict[str, str], float]:
    """prometheus_client's reading of one sample line (raises ValueError and friends)."""
    fams = list(text_string_to_metric_families(line + "\n"))
    if len(fams) != 1 or len(fams[0].samples) != 1:
        raise ValueError("not one sample")
    s = fams[0].samples[0]
    return s.name, dict(s.labels), float(s.value)


def _split_comment(line: str) -> list[str]:
    if '"' not in line:
        return line.split(None, 3)

    return list(_split_quoted(line, None, 3))


def _unquote(name: str) -> tuple[str, bool]:
    if name.startswith('"'):
        text, quoted = _unquote_unescape(name)
        return str(text), bool(quoted)
    return name, False


def _bad_value(text: str, v: float) -> bool:
    """A literal that overflowed to infinity (a 400-digit number): not a reading."""
    return math.isinf(v) and text.lower().lstrip("+-") not in _INF_WORDS


def tokenize(
    text: str, keep: tuple[str, ...] | None, warnings: list[ParseWarning], *, drop_unterminated: bool
) -> list[RawFamily]:
    """The fast path: the families of ``text`` (only those whose names start with ``keep``)."""
    out: list[RawFamily] = []
    name = ""
    doc = ""
    typ = "untyped"
    samples: list[Sample] = []
    allowed: tuple[str, ...] = ()
    created = False  # the current family is a `_created` one (never read)
    cache = _HEAD_CACHE
    if len(cache) > _MAX_CACHE:
        cache.clear()
    lines = text.split("\n")
    last = len(lines)
    if lines and lines[-1] == "":
        lines.pop()
    elif lines and lines[-1].strip():
        warnings.append(ParseWarning(None, last, "the page does not end with a newline (cut off?)"))
        if drop_unterminated:
            lines.pop()

    def close() -> None:
        if name:
            out.append(_build(name, doc, typ, samples, warnings))

    lineno = 0
    for raw in lines:
        lineno += 1
        if keep is not None:
            if raw.startswith("#"):
                if not _keep_comment(raw, keep):
                    continue
            elif not raw.startswith(keep):
                continue
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = _split_comment(line)
            if len(parts) < 2 or (len(parts) > 2 and parts[1] not in ("TYPE", "HELP")):
                continue
            cand = ""
            if len(parts) > 2:
                cand, quoted = _unquote(parts[2])
                if not quoted and _NAME_RE.fullmatch(cand) is None:
                    warnings.append(ParseWarning(cand, lineno, f"invalid metric name in # {parts[1]}"))
                    continue
            if parts[1] == "HELP":
                if cand != name:
                    close()
                    name, typ, samples, allowed = cand, "untyped", [], (cand,)
                    created = name.endswith("_created")
                doc = parts[3] if len(parts) == 4 else ""
                if "\\" in doc:
                    doc = _HELP_ESCAPE_RE.sub(lambda m: "\\" if m.group(0) == "\\\\" else "\n", doc)
            elif parts[1] == "TYPE":
                if len(parts) < 4:
                    warnings.append(ParseWarning(cand or None, lineno, "# TYPE without a type"))
                    continue
                if cand != name:
                    close()
                    name, doc, samples = cand, "", []
                    created = name.endswith("_created")
                typ = parts[3]
                allowed = tuple(name + sfx for sfx in _SUFFIXES.get(typ, ("",)))
            continue
        head, _, val = line.rpartition(" ")
        ent = cache.get(head)
        if ent is None:
            ent = _parse_head(head)
            if ent is not None:
                cache[head] = ent
        v: float | None = None
        if ent is not None and "_" not in val:
            try:
                v = float(val)
            except ValueError:
                v = None
        if ent is None or v is None:
            try:
                sname, labels, v = _reference_sample(line)
            except Exception as e:  # the reference grammar refuses it too: skip the line
                fam = _HEAD_RE.match(line)
                warnings.append(
                    ParseWarning(fam.group(1) if fam else None, lineno, f"unreadable sample line ({e})")
                )
                continue
            key, le = key_of(labels.items())
        else:
            sname, key, le = ent
            if v - v != 0.0 and _bad_value(val, v):  # only infinities (and NaN) get here
                warnings.append(ParseWarning(sname, lineno, f"value {val[:20]!r} is out of range: skipped"))
                continue
        if sname in allowed:
            if not created:  # creation timestamps are never read: not kept
                samples.append((sname, key, le, v, lineno))
        else:  # a new untyped family of one sample, as prometheus_client reads it
            close()
            name, doc, typ, samples, allowed = "", "", "untyped", [], ()
            out.append(_build(sname, "", "untyped", [(sname, key, le, v, lineno)], warnings))
    close()
    return out


def _build(
    name: str, doc: str, typ: str, samples: list[Sample], warnings: list[ParseWarning] | None
) -> RawFamily:
    """prometheus_client's ``build_metric``: counters named without ``_total``."""
    if typ == "counter":
        if name.endswith("_total"):
            name = name[:-6]
        else:
            samples = [(s[0] + "_total", *s[1:]) for s in samples]
    if typ == "untyped":
        typ = "unknown"
    if typ not in METRIC_TYPES:
        if warnings is not None:
            line = samples[0][4] if samples else None
            warnings.append(ParseWarning(name, line, f"unknown metric type {typ!r}: read as untyped"))
        typ = "unknown"
    return RawFamily(name, typ, doc, list(samples))


def tokenize_reference(text: str, keep: tuple[str, ...] | None) -> list[RawFamily]:
    """prometheus_client's parser on the whole page; raises on the first line it refuses."""
    if keep is not None:
        text = (
            "\n".join(
                ln
                for ln in text.split("\n")
                if (ln.startswith("#") and _keep_comment(ln, keep)) or ln.startswith(keep)
            )
            + "\n"
        )
    out = []
    for fam in text_string_to_metric_families(text):
        samples: list[Sample] = []
        for s in fam.samples:
            key, le = key_of(s.labels.items())
            samples.append((s.name, key, le, float(s.value), None))
        out.append(RawFamily(fam.name, fam.type, fam.documentation, samples))
    return out


# ---------------------------------------------------------------- assembly
def _untyped_histograms(raws: list[RawFamily]) -> list[RawFamily]:
    """Histograms pasted without their ``# TYPE`` line come as untyped ``X_bucket`` (with
    ``le``), ``X_count`` and ``X_sum`` families: read them as one histogram ``X``."""
    typed = {r.name for r in raws if r.type != "unknown"}
    bases = {
        r.name[: -len("_bucket")]
        for r in raws
        if r.type == "unknown" and r.name.endswith("_bucket") and all(s[2] is not None for s in r.samples)
    } - typed
    if not bases:
        return raws
    out: list[RawFamily] = []
    grouped: dict[str, RawFamily] = {}
    for r in raws:
        base = None
        if r.type == "unknown":
            for sfx in ("_bucket", "_count", "_sum"):
                if r.name.endswith(sfx) and r.name[: -len(sfx)] in bases:
                    base = r.name[: -len(sfx)]
        if base is None:
            out.append(r)
            continue
        g = grouped.get(base)
        if g is None:
            g = grouped[base] = RawFamily(base, "histogram", "", [])
            out.append(g)
        g.samples.extend(r.samples)
    return out


def assemble(raws: list[RawFamily], warnings: list[ParseWarning]) -> dict[str, Family]:
    """Tokenized families -> canonical :class:`Family` values (series merged where an old
    and a new spelling of one family are both on the page)."""
    families: dict[str, Family] = {}
    for raw in _untyped_histograms(raws):
        if raw.name.endswith("_created"):
            continue  # creation timestamps, never values
        name = names.canonical_family(raw.name, raw.type)
        series: dict[LabelKey, Any]
        if raw.type in ("histogram", "gaugehistogram"):
            before = len(warnings)
            series = dict(_histograms(raw, warnings))
            if not series and len(warnings) > before:
                continue  # every series of it was unreadable: the family is unknown, not empty
        elif raw.type == "summary":
            before = len(warnings)
            series = dict(_summaries(raw, warnings))
            if not series and len(warnings) > before:
                continue
        else:
            series = {}
            for sname, key, _le, v, _ln in raw.samples:
                if sname.endswith("_created"):
                    continue
                if v != v and raw.type == "counter":
                    warnings.append(ParseWarning(raw.name, _ln, "NaN counter value: skipped"))
                    continue
                series[key] = v
        prev = families.get(name)
        if prev is not None:
            merged = dict(prev.series)
            merged.update(series)
            series = merged
        families[name] = Family(name=name, type=raw.type, help=raw.help, series=series, source_name=raw.name)
    return families


def _summaries(raw: RawFamily, warnings: list[ParseWarning]) -> dict[LabelKey, Summary]:
    """A summary's samples -> one :class:`Summary` per label set (without ``quantile``): its
    quantile samples, ``_count`` and ``_sum``. A series without ``_count`` is skipped (named)."""
    quants: dict[LabelKey, list[tuple[float, float]]] = defaultdict(list)
    counts: dict[LabelKey, float] = {}
    sums: dict[LabelKey, float] = {}
    lines: dict[LabelKey, int | None] = {}
    for sname, key, _le, v, ln in raw.samples:
        if sname.endswith("_count") and sname != raw.name:
            if v == v:
                counts[key] = v
            else:
                warnings.append(ParseWarning(raw.name, ln, f"NaN in {sname}: skipped"))
            continue
        if sname.endswith("_sum") and sname != raw.name:
            sums[key] = v
            continue
        q = None
        rest = []
        for k, val in key:
            if k == "quantile":
                q = _bound(val)
            else:
                rest.append((k, val))
        base = tuple(rest)
        lines[base] = ln
        if q is None or q != q or not 0.0 <= q <= 1.0:
            warnings.append(
                ParseWarning(raw.name, ln, "summary sample without a quantile in [0, 1]: skipped")
            )
            continue
        if v == v:  # an empty window may export NaN: no reading
            quants[base].append((q, v))
    out: dict[LabelKey, Summary] = {}
    for key in counts.keys() | quants.keys():
        if key not in counts:
            warnings.append(ParseWarning(raw.name, lines.get(key), "summary without _count: skipped"))
            continue
        out[key] = Summary(tuple(sorted(quants.get(key, ()))), counts[key], sums.get(key, 0.0))
    return out


_BOUNDS: dict[str | None, float] = {None: math.inf}


def _bound(le: str | None) -> float:
    """A bucket's ``le`` as a float (NaN when it is not a number), remembered across pages."""
    b = _BOUNDS.get(le)
    if b is None:
        try:
            b = math.nan if le is None or "_" in le else float(le)
        except ValueError:
            b = math.nan
        if len(_BOUNDS) < 10_000:
            _BOUNDS[le] = b
    return b


def _histograms(raw: RawFamily, warnings: list[ParseWarning]) -> dict[LabelKey, Histogram]:
    buckets: dict[LabelKey, list[tuple[float, float]]] = defaultdict(list)
    counts: dict[LabelKey, float] = {}
    sums: dict[LabelKey, float] = {}
    last_line: dict[LabelKey, int | None] = {}
    for sname, key, le, v, ln in raw.samples:
        if v != v:
            warnings.append(ParseWarning(raw.name, ln, f"NaN in {sname}: skipped"))
            continue
        if sname.endswith("_bucket"):
            bound = _bound(le)
            if bound != bound:
                warnings.append(
                    ParseWarning(raw.name, ln, f"bucket bound le={le!r} is not a number: skipped")
                )
                continue
            buckets[key].append((bound, v))
            last_line[key] = ln
        elif sname.endswith("_count"):
            counts[key] = v
        elif sname.endswith("_sum"):
            sums[key] = v
    out: dict[LabelKey, Histogram] = {}
    for key, bs in buckets.items():
        bs.sort()
        if not math.isinf(bs[-1][0]):
            if key not in counts:
                warnings.append(
                    ParseWarning(raw.name, last_line[key], "histogram cut off (no +Inf bucket): skipped")
                )
                continue
            warnings.append(ParseWarning(raw.name, last_line[key], "no +Inf bucket: taken from _count"))
            bs.append((math.inf, counts[key]))
        out[key] = Histogram(buckets=tuple(bs), count=counts.get(key, bs[-1][1]), sum=sums.get(key, 0.0))
    return out
