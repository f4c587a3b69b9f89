"""Prometheus text exposition -> canonical families, in one pass, tolerant of broken lines.

Two tokenizers feed one assembler:

- :func:`tokenize` (the fast path): one pass over the lines, only the families whose names
  start with the ``keep`` prefixes, values as floats; a label block is parsed once and
  remembered across pages (vLLM repeats the same series every scrape). A line it does not
  recognise is handed to ``prometheus_client`` alone (the reference grammar); a line neither
  can read is skipped with a :class:`~advisor.model.ParseWarning` (line number, family).
  Prometheus 3's UTF-8 exposition (``{"vllm:x",a="b"} 1``, quoted names in ``# HELP``/
  ``# TYPE``) is read the same way; a quoted name not read is counted as such.
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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from itertools import pairwise
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
# Prometheus 3's UTF-8 names: the name quoted inside the braces, `{"vllm:foo.bar",a="b"}`
# (no escape in it: those go to the reference grammar)
_QUOTED_HEAD_RE = re.compile(r'\{"([^"\\]+)"(?:,(.*))?\}')
_HELP_ESCAPE_RE = re.compile(r"\\[\\n]")
_INF_WORDS = frozenset({"inf", "infinity"})
_MAX_CACHE = 20_000  # series heads remembered (a 16-engine vLLM page has ~6,000)
# Caps on what one page may cost. A 16-engine vLLM page has ~5,700 samples and at most a few
# hundred series in one family; past these, samples are skipped (a warning, and counted).
MAX_SAMPLES_PER_PAGE = 100_000
MAX_SERIES_PER_FAMILY = 2_048
# No reading of a family the advisor reads comes near this (tokens in a century at 1e8/s: 3e17).
MAX_VALUE = 1e18
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
    """``name{a="b",...}`` (or Prometheus 3's ``{"name",a="b",...}``) in the common shape (no
    escapes, no spaces); None otherwise."""
    m = _HEAD_RE.fullmatch(head) if not head.startswith('{"') else _QUOTED_HEAD_RE.fullmatch(head)
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
    parts = line.split(None, 3)  # "# HELP name text" / "# TYPE name type" (the name may be quoted)
    return len(parts) >= 3 and parts[2].removeprefix('"').startswith(keep)


def _keep_sample(line: str, keep: tuple[str, ...]) -> bool:
    """A sample line of a family kept: its name starts with ``keep``, quoted or not."""
    return line.startswith(keep) or (line.startswith('{"') and line.startswith(keep, 2))


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


def _sample_name(line: str) -> tuple[str, bool]:
    """The metric name a sample line starts with (up to ``{`` or a blank), and whether it was
    quoted (Prometheus 3: ``{"name",...}``: exact, no other spelling to decide)."""
    if line.startswith('{"'):
        end = line.find('"', 2)
        name = line[2:end] if end > 2 else ""
        if name and "\\" not in name:
            return name, True
        return line, False
    sp = line.find(" ")
    b = line.find("{")
    end = b if b > 0 and (sp < 0 or b < sp) else sp
    return (line[:end] if end > 0 else line), False


def tokenize(
    text: str,
    keep: tuple[str, ...] | None,
    warnings: list[ParseWarning],
    *,
    drop_unterminated: bool,
    read: frozenset[str] | None = None,
    skipped: dict[str, int] | None = None,
) -> list[RawFamily]:
    """The fast path: the families of ``text`` (only those whose names start with ``keep``;
    with ``read``, only the samples and families so named: the rest is dropped before its labels
    are parsed and counted in ``skipped["not_read"]``). At most ``MAX_SAMPLES_PER_PAGE``
    samples are kept."""
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
    decided: dict[str, bool] = {}  # sample name -> read (this page)
    not_read = kept = over = 0
    lines = text.split("\n")
    last = len(lines)
    if lines and lines[-1] == "":
        lines.pop()
    elif lines and lines[-1].strip():
        warnings.append(
            ParseWarning(None, last, "the page does not end with a newline (cut off?)", "cut_off")
        )
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
            elif not _keep_sample(raw, keep):
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
                try:
                    cand, quoted = _unquote(parts[2])
                except ValueError:  # '# TYPE "name gauge': a quote that never closes
                    warnings.append(ParseWarning(None, lineno, f"unterminated quoted name in # {parts[1]}"))
                    continue
                if read is not None and cand not in read:  # a family never read: samples dropped by name
                    if cand != name:  # it ends the current family, as the reference reads it
                        close()
                        name, doc, typ, samples, allowed = "", "", "untyped", [], ()
                    continue
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
        if read is not None:
            sn, quoted = _sample_name(line)
            ok = decided.get(sn)
            if ok is None:  # odd names: decided by the reference grammar, later
                ok = decided[sn] = sn in read or (not quoted and not _NAME_RE.fullmatch(sn))
            if not ok:
                not_read += 1
                if (
                    sn not in allowed
                ):  # another family's sample ends the current one (as the reference reads it)
                    close()
                    name, doc, typ, samples, allowed = "", "", "untyped", [], ()
                continue
        if kept >= MAX_SAMPLES_PER_PAGE:
            if not over:
                warnings.append(
                    ParseWarning(
                        None,
                        lineno,
                        f"more than {MAX_SAMPLES_PER_PAGE} samples on the page: the rest skipped",
                        "too_many_series",
                    )
                )
            over += 1
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
                warnings.append(
                    ParseWarning(
                        sname, lineno, f"value {val[:20]!r} is out of range: skipped", "out_of_range"
                    )
                )
                continue
        if read is not None and sname not in read:
            not_read += 1  # an odd spelling of a name never read (read by the reference grammar)
            if sname not in allowed:
                close()
                name, doc, typ, samples, allowed = "", "", "untyped", [], ()
            continue
        kept += 1
        if sname in allowed:
            if not created:  # creation timestamps are never read: not kept
                samples.append((sname, key, le, v, lineno))
        else:  # a new untyped family of one sample, as prometheus_client reads it
            close()
            name, doc, typ, samples, allowed = "", "", "untyped", [], ()
            out.append(_build(sname, "", "untyped", [(sname, key, le, v, lineno)], warnings))
    close()
    if skipped is not None:
        skipped["not_read"] = skipped.get("not_read", 0) + not_read
        skipped["over_limit"] = skipped.get("over_limit", 0) + over
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


def tokenize_reference(
    text: str, keep: tuple[str, ...] | None, read: frozenset[str] | None = None
) -> list[RawFamily]:
    """prometheus_client's parser on the whole page; raises on the first line it refuses.
    ``read``: only the families and samples so named (as :func:`tokenize`)."""
    if keep is not None:
        text = (
            "\n".join(
                ln
                for ln in text.split("\n")
                if (ln.startswith("#") and _keep_comment(ln, keep)) or _keep_sample(ln, keep)
            )
            + "\n"
        )
    out = []
    for fam in text_string_to_metric_families(text):
        if read is not None and fam.name not in read:
            continue
        samples: list[Sample] = []
        for s in fam.samples:
            if read is not None and s.name not in read:
                continue
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


def _bad_reading(v: float, counter: bool) -> tuple[str, str] | None:
    """Why a value of a read family is not a reading (kind, reason), or None when it is."""
    if v - v != 0.0:  # NaN or an infinity
        return "non_finite", f"{_show(v)} is not a reading"
    if v > MAX_VALUE or v < -MAX_VALUE:
        return "out_of_range", f"{v:.3g} is out of range"
    if counter and v < 0:
        return "negative", f"a counter below zero ({v:g})"
    return None


def _show(v: float) -> str:
    return "NaN" if v != v else ("+Inf" if v > 0 else "-Inf")


def _scalars(
    raw: RawFamily, name: str, warnings: list[ParseWarning], skipped: dict[str, int] | None
) -> dict[LabelKey, Any]:
    """A scalar family's series. Those of a family the advisor reads are checked: a value that is
    not a reading, one series twice with two values (which is true is unknown: left out), more
    than ``MAX_SERIES_PER_FAMILY`` series."""
    check = name in names.READ_FAMILIES
    counter = raw.type == "counter" or name in names.COUNTERS
    series: dict[LabelKey, Any] = {}
    lines: dict[LabelKey, int | None] = {}
    conflicted: set[LabelKey] = set()
    over = 0
    for sname, key, _le, v, ln in raw.samples:
        if sname.endswith("_created"):
            continue
        if not check:
            if v != v and raw.type == "counter":
                warnings.append(ParseWarning(raw.name, ln, "NaN counter value: skipped", "non_finite"))
                continue
            series[key] = v
            continue
        bad = _bad_reading(v, counter)
        if bad is not None:
            warnings.append(ParseWarning(raw.name, ln, f"{bad[1]}: the series is left out", bad[0]))
            continue
        if key in series or key in conflicted:
            if key in conflicted or series[key] == v:
                warnings.append(
                    ParseWarning(
                        raw.name, ln, f"the same series twice (line {lines[key]}): read once", "duplicate"
                    )
                )
                continue
            warnings.append(
                ParseWarning(
                    raw.name,
                    ln,
                    f"the same series twice with two values (line {lines[key]}: {series[key]:g}, "
                    f"here {v:g}): left out",
                    "duplicate",
                )
            )
            del series[key]
            conflicted.add(key)
            continue
        if len(series) >= MAX_SERIES_PER_FAMILY:
            if not over:
                warnings.append(
                    ParseWarning(
                        raw.name,
                        ln,
                        f"more than {MAX_SERIES_PER_FAMILY} series: the rest skipped",
                        "too_many_series",
                    )
                )
            over += 1
            continue
        series[key] = v
        lines[key] = ln
    if over and skipped is not None:
        skipped["over_limit"] = skipped.get("over_limit", 0) + over
    return series


def _is_histogram(typ: str) -> bool:
    return typ in ("histogram", "gaugehistogram")


def assemble(
    raws: list[RawFamily], warnings: list[ParseWarning], skipped: dict[str, int] | None = None
) -> dict[str, Family]:
    """Tokenized families -> canonical :class:`Family` values (series merged where an old
    and a new spelling of one family are both on the page, or one family's samples come in
    several blocks). The values of the families the advisor reads are checked
    (``_bad_reading``, duplicates, ``MAX_SERIES_PER_FAMILY``); what is not a reading is left
    out and named in ``warnings``."""
    # canonical name -> (type, help, source name, series, the spelling each series came from)
    acc: dict[str, tuple[str, str, str, dict[LabelKey, Any], dict[LabelKey, str]]] = {}
    over: dict[str, int] = {}
    for raw in _untyped_histograms(raws):
        if raw.name.endswith("_created"):
            continue  # creation timestamps, never values
        name = names.canonical_family(raw.name, raw.type)
        check = name in names.READ_FAMILIES
        prev = acc.get(name)
        if prev is not None and not raw.samples:
            continue  # a declaration without samples (a `# HELP` line after them) adds nothing
        if prev is not None and prev[3] and _is_histogram(prev[0]) != _is_histogram(raw.type):
            line = raw.samples[0][4] if raw.samples else None
            warnings.append(
                ParseWarning(
                    raw.name,
                    line,
                    f"declared again as {raw.type}, first as {prev[0]}: the first kept",
                    "type_conflict",
                )
            )
            continue
        series: dict[LabelKey, Any]
        if _is_histogram(raw.type):
            before = len(warnings)
            series = dict(_histograms(raw, warnings, check, skipped))
            if not series and len(warnings) > before and prev is None:
                continue  # every series of it was unreadable: the family is unknown, not empty
        elif raw.type == "summary":
            before = len(warnings)
            series = dict(_summaries(raw, warnings))
            if not series and len(warnings) > before:
                continue
        else:
            series = _scalars(raw, name, warnings, skipped)
        if prev is None or not prev[3]:
            acc[name] = (raw.type, raw.help, raw.name, series, dict.fromkeys(series, _spelling(raw.name)))
            continue
        _t, _h, _src, merged, spelled = prev
        for key, v in series.items():
            if check and spelled.get(key) == _spelling(raw.name):  # the same series again, in another block
                old = merged.get(key)
                same = old == v
                warnings.append(
                    ParseWarning(
                        raw.name,
                        _first_line(raw),
                        "the same series twice" + (": read once" if same else " with two values: left out"),
                        "duplicate",
                    )
                )
                if not same:
                    merged.pop(key, None)
                    spelled[key] = ""  # conflicted: a third reading is left out too
                continue
            if spelled.get(key) == "":
                continue
            if check and key not in merged and len(merged) >= MAX_SERIES_PER_FAMILY:
                over[name] = over.get(name, 0) + 1
                continue
            merged[key] = v  # another spelling of the family (V0/V1): the later one
            spelled[key] = _spelling(raw.name)
        acc[name] = (raw.type, raw.help or _h, _src, merged, spelled)
    for name, n in over.items():
        warnings.append(
            ParseWarning(
                name, None, f"more than {MAX_SERIES_PER_FAMILY} series: the rest skipped", "too_many_series"
            )
        )
        if skipped is not None:
            skipped["over_limit"] = skipped.get("over_limit", 0) + n
    return {
        name: Family(name=name, type=typ, help=doc, series=series, source_name=src)
        for name, (typ, doc, src, series, _) in acc.items()
    }


def check_families(families: Mapping[str, Family], warnings: list[ParseWarning]) -> dict[str, Family]:
    """The values of the read families of a snapshot built elsewhere (from Prometheus's samples)
    checked as a parsed page's are: a series whose value is not a reading is left out and named."""
    out: dict[str, Family] = {}
    for name, fam in families.items():
        if name not in names.READ_FAMILIES:
            out[name] = fam
            continue
        counter = fam.type == "counter" or name in names.COUNTERS
        series: dict[LabelKey, Any] = {}
        for key, v in fam.series.items():
            bad: tuple[str, str] | None
            if isinstance(v, Histogram):
                values = [c for _, c in v.buckets] + [v.count, v.sum]
                bad = next(
                    (b for b in (_bad_reading(x, counter=True) for x in values) if b is not None), None
                )
                if bad is None and any(b[1] < a[1] for a, b in pairwise(v.buckets)):
                    bad = ("bad_bucket", "bucket counts go down with the bound")
            elif isinstance(v, int | float) and not isinstance(v, bool):
                bad = _bad_reading(float(v), counter)
            else:
                bad = ("unreadable", f"not a number ({type(v).__name__})")
            if bad is not None:
                warnings.append(
                    ParseWarning(fam.source_name or name, None, f"{bad[1]}: the series is left out", bad[0])
                )
                continue
            series[key] = v
        out[name] = fam if len(series) == len(fam.series) else replace(fam, series=series)
    return out


def _spelling(name: str) -> str:
    """A family's name as spelled on the page, a counter's ``_total`` aside (typed counters are
    named without it, the same samples untyped with it)."""
    return name.removesuffix("_total")


def _first_line(raw: RawFamily) -> int | None:
    return raw.samples[0][4] if raw.samples else None


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


def _histograms(
    raw: RawFamily, warnings: list[ParseWarning], check: bool = False, skipped: dict[str, int] | None = None
) -> dict[LabelKey, Histogram]:
    """A histogram family's series. With ``check`` (a family the advisor reads), a series with a
    value that is not a reading (NaN, an infinity, a negative count), a sample twice with two
    values, or counts that go down with the bound is left out whole: its buckets, count and sum
    only mean something together. Otherwise a NaN sample alone is skipped."""
    buckets: dict[LabelKey, dict[float, float]] = defaultdict(dict)
    counts: dict[LabelKey, float] = {}
    sums: dict[LabelKey, float] = {}
    last_line: dict[LabelKey, int | None] = {}
    bad: dict[LabelKey, tuple[str, str, int | None]] = {}
    for sname, key, le, v, ln in raw.samples:
        if key in bad:
            continue
        if check:
            why = _bad_reading(v, counter=True)
            if why is not None:
                bad[key] = (why[0], f"{why[1]} in {sname}: the series is left out", ln)
                continue
        elif v != v:
            warnings.append(ParseWarning(raw.name, ln, f"NaN in {sname}: skipped", "non_finite"))
            continue
        if sname.endswith("_bucket"):
            bound = _bound(le)
            if bound != bound:
                warnings.append(
                    ParseWarning(
                        raw.name, ln, f"bucket bound le={le!r} is not a number: skipped", "bad_bucket"
                    )
                )
                continue
            slot: dict[Any, float] = buckets[key]
            what = f"bucket le={le}"
        elif sname.endswith("_count"):
            slot, bound, what = counts, key, "_count"  # type: ignore[assignment]
        elif sname.endswith("_sum"):
            slot, bound, what = sums, key, "_sum"  # type: ignore[assignment]
        else:
            continue
        if check and bound in slot:
            if slot[bound] != v:
                bad[key] = ("duplicate", f"{what} twice with two values: the series is left out", ln)
            else:
                warnings.append(ParseWarning(raw.name, ln, f"{what} twice: read once", "duplicate"))
            continue
        slot[bound] = v
        if sname.endswith("_bucket"):
            last_line[key] = ln
    out: dict[LabelKey, Histogram] = {}
    over = 0
    for key, by_bound in buckets.items():
        if key in bad:
            continue
        bs = sorted(by_bound.items())
        if check and any(b[1] < a[1] for a, b in pairwise(bs)):
            bad[key] = (
                "bad_bucket",
                "bucket counts go down with the bound: the series is left out",
                last_line[key],
            )
            continue
        if not math.isinf(bs[-1][0]):
            if key not in counts:
                warnings.append(
                    ParseWarning(
                        raw.name, last_line[key], "histogram cut off (no +Inf bucket): skipped", "cut_off"
                    )
                )
                continue
            warnings.append(
                ParseWarning(raw.name, last_line[key], "no +Inf bucket: taken from _count", "cut_off")
            )
            bs.append((math.inf, counts[key]))
        if check and len(out) >= MAX_SERIES_PER_FAMILY:
            over += 1
            continue
        out[key] = Histogram(buckets=tuple(bs), count=counts.get(key, bs[-1][1]), sum=sums.get(key, 0.0))
    for kind, reason, ln in bad.values():
        warnings.append(ParseWarning(raw.name, ln, reason, kind))
    if over:
        warnings.append(
            ParseWarning(
                raw.name,
                None,
                f"more than {MAX_SERIES_PER_FAMILY} series: the rest skipped",
                "too_many_series",
            )
        )
        if skipped is not None:
            skipped["over_limit"] = skipped.get("over_limit", 0) + over
    return out
