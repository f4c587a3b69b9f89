"""What stands in front of vLLM's own log text: ANSI colours, journald, ``docker compose`` and
``kubectl`` prefixes, RFC 3339 stamps of ``--timestamps``, vLLM's process prefix
(``(EngineCore_DP0 pid=2)``), its level and ``MM-DD hh:mm:ss`` stamp. :func:`strip_prefixes`
removes them and keeps the time they carry.

Timestamps: an outer RFC3339 timestamp (``docker logs --timestamps``, ``kubectl
--timestamps``, CRI log files) wins because it carries the year and the zone; otherwise
vLLM's ``MM-DD hh:mm:ss`` read as UTC, otherwise journald's ``Mon DD hh:mm:ss``. Those two
carry no year: it is ``year`` when the caller knows it, else the year that puts the line
nearest to ``near`` (a time the lines were written around: a recording's start; default
now), so a December line read in January lands in December of the year before.
"""

from __future__ import annotations

import calendar
import json
import re
import time
from dataclasses import dataclass
from datetime import datetime

MAX_LINE_CHARS = 64 * 1024
"""What is kept of one line; the rest is dropped (a 1 MB line costs no more than this)."""


# --------------------------------------------------------------------------- secrets

# --------------------------------------------------------------------------- prefixes

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_RFC3339_RE = re.compile(
    r"^(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d)[T ](?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:[.,](?P<f>\d+))?"
    r"(?P<tz>Z|[+-]\d\d:?\d\d)?\s+(?:(?:stdout|stderr)\s+[FP]\s+)?"
)
_JOURNALD_RE = re.compile(
    r"^(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(?P<d>\d{1,2}) "
    r"(?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d) \S+ [^\s:\[]+(?:\[\d+\])?: "
)
_COMPOSE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\s+\|\s?")
_KUBECTL_PREFIX_RE = re.compile(r"^\[pod/[^\]\s]+\]\s")
PROCESS_RE = re.compile(r"^\((?P<name>[A-Za-z_][\w.-]*)\s+pid=(?P<pid>\d+)\)\s*")
LEVEL_RE = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) (?P<mo>\d\d)-(?P<d>\d\d) "
    r"(?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:[.,](?P<f>\d+))? (?:\[(?P<loc>[^\]]*)\]|(?P<loc0>[\w./-]+:\d+)\])\s?"
)
_MONTHS = {
    m: i
    for i, m in enumerate(
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], 1
    )
}


@dataclass(frozen=True)
class Prefixed:
    """A line split into its prefixes and its message (what :func:`strip_prefixes` returns)."""

    message: str
    process: str | None = None
    pid: int | None = None
    level: str | None = None
    location: str | None = None
    t: float | None = None
    has_vllm_prefix: bool = False
    """True when a process prefix or a vLLM level/timestamp prefix was found."""


def _epoch(year: int, month: int, day: int, h: int, mi: int, s: int, frac: str | None) -> float | None:
    try:
        base = calendar.timegm((year, month, day, h, mi, s, 0, 0, 0))
        datetime(year, month, day, h, mi, s)  # rejects 02-30 and friends
    except (ValueError, OverflowError):
        return None
    return base + (float("0." + frac[:9]) if frac else 0.0)


def _tz_offset(tz: str | None) -> int:
    if not tz or tz == "Z":
        return 0
    sign = -1 if tz[0] == "-" else 1
    digits = tz[1:].replace(":", "")
    return sign * (int(digits[:2]) * 3600 + int(digits[2:4]) * 60)


def clean_line(line: str) -> str:
    if len(line) > MAX_LINE_CHARS:
        line = line[:MAX_LINE_CHARS]
    if "\x1b" in line:
        line = _ANSI_RE.sub("", line)
    return line.rstrip("\r\n")


HALF_YEAR_S = 183 * 86400


def _yearless_epoch(
    year: int | None, near: float | None, month: int, day: int, h: int, mi: int, s: int, frac: str | None
) -> float | None:
    """A year-less stamp as Unix time: in ``year`` when given, else in the year (of the three
    around ``near``, default now) that puts it nearest to ``near``."""
    if year is not None:
        return _epoch(year, month, day, h, mi, s, frac)
    ref = time.time() if near is None else near
    y = time.gmtime(ref).tm_year
    best: float | None = None
    for cand in (y, y - 1, y + 1):
        t = _epoch(cand, month, day, h, mi, s, frac)
        if t is not None and (best is None or abs(t - ref) < abs(best - ref)):
            best = t
        if best is not None and abs(best - ref) <= HALF_YEAR_S:
            break  # the common case: this year, one conversion
    return best


def strip_outer(text: str, year: int | None, near: float | None) -> tuple[str, float | None, float | None]:
    """Strip docker/kubectl/CRI timestamps, journald and compose prefixes (any order, any
    combination). Returns (rest, exact_t, journald_t)."""
    exact_t: float | None = None
    journal_t: float | None = None
    for _ in range(4):
        m = _RFC3339_RE.match(text)
        if m:
            t = _epoch(int(m["y"]), int(m["mo"]), int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]), m["f"])
            if t is not None and exact_t is None:
                exact_t = t - _tz_offset(m["tz"])
            text = text[m.end() :]
            continue
        m = _JOURNALD_RE.match(text)
        if m:
            if journal_t is None:
                journal_t = _yearless_epoch(
                    year, near, _MONTHS[m["mon"]], int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]), None
                )
            text = text[m.end() :]
            continue
        m = _KUBECTL_PREFIX_RE.match(text) or _COMPOSE_RE.match(text)
        if m and not PROCESS_RE.match(text) and not LEVEL_RE.match(text):
            text = text[m.end() :]
            continue
        break
    return text, exact_t, journal_t


_JSON_ASCTIME_RE = re.compile(
    r"^(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d)[T ](?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:[.,](?P<f>\d+))?$"
)


def json_record(text: str) -> dict[str, object] | None:
    """A line of vLLM's JSON log format (0.32+: ``--logging-config.formatter json``, python-json-
    logger with ``%(asctime)s %(levelname)s %(name)s %(processName)s %(process)d %(message)s``,
    plus ``vllm_process_name``): the record, or None when the text is not one."""
    t = text.strip()
    if not (t.startswith('{"') and t.endswith("}")):
        return None
    try:
        rec = json.loads(t)
    except (ValueError, RecursionError):
        return None
    if not isinstance(rec, dict) or not isinstance(rec.get("message"), str):
        return None
    return rec


def _from_json(
    rec: dict[str, object], process: str | None, pid: int | None, outer_t: float | None
) -> Prefixed:
    level = rec.get("levelname")
    lvl = str(level).upper() if isinstance(level, str) else None
    if lvl == "WARN":
        lvl = "WARNING"
    name = rec.get("vllm_process_name") or rec.get("processName")
    if process is None and isinstance(name, str) and name and name != "MainProcess":
        process = name
    p = rec.get("process")
    if pid is None and isinstance(p, int) and not isinstance(p, bool):
        pid = p
    t = outer_t
    stamp = rec.get("asctime")
    if t is None and isinstance(stamp, str):
        m = _JSON_ASCTIME_RE.match(stamp.strip())
        if m:  # the server's local time, read as UTC like vLLM's own text stamps
            t = _epoch(int(m["y"]), int(m["mo"]), int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]), m["f"])
    logger = rec.get("name")
    return Prefixed(
        message=str(rec["message"]),
        process=process,
        pid=pid,
        level=lvl,
        location=logger if isinstance(logger, str) else None,
        t=t,
        has_vllm_prefix=True,
    )


def strip_prefixes(line: str, year: int | None = None, near: float | None = None) -> Prefixed:
    """Split ``line`` into its prefixes and the vLLM message (pure).

    Handles vLLM's JSON log format (0.32+; the record's ``message``, level, process and
    ``asctime``), ANSI colours, docker/kubectl ``--timestamps``, CRI ``<ts> stdout F``, journald
    ``Nov 29 23:26:03 host vllm[123]:``, compose ``svc-1  | ``, kubectl ``[pod/x/c]``, the
    process prefix ``(EngineCore_DP0 pid=2)`` and the level prefix in both its V1 form
    (``INFO 11-29 23:26:03 [loggers.py:335]``) and its V0 form (``INFO 06-16 21:24:15
    metrics.py:341]``). A level prefix that follows other text on the line (a tqdm bar
    without a newline) is found too. ``year``/``near``: how year-less stamps get their year
    (see the module's notes).
    """
    text = clean_line(line)
    text, exact_t, journal_t = strip_outer(text, year, near)
    process: str | None = None
    pid: int | None = None
    m = PROCESS_RE.match(text)
    if m:
        process, pid = m["name"], int(m["pid"])
        text = text[m.end() :]
    rec = json_record(text) if text[:2] == '{"' else None
    if rec is not None:
        return _from_json(rec, process, pid, exact_t if exact_t is not None else journal_t)
    level = loc = None
    vllm_t: float | None = None
    lm = LEVEL_RE.match(text)
    if lm is None and "-" in text and ":" in text:
        lm = LEVEL_RE.search(text)
    if lm is not None:
        level = "WARNING" if lm["level"] == "WARN" else lm["level"]
        loc = lm["loc"] if lm["loc"] is not None else lm["loc0"]
        vllm_t = _yearless_epoch(
            year, near, int(lm["mo"]), int(lm["d"]), int(lm["h"]), int(lm["mi"]), int(lm["s"]), lm["f"]
        )
        text = text[lm.end() :]
    t = exact_t if exact_t is not None else (vllm_t if vllm_t is not None else journal_t)
    return Prefixed(
        message=text,
        process=process,
        pid=pid,
        level=level,
        location=loc,
        t=t,
        has_vllm_prefix=process is not None or lm is not None,
    )
