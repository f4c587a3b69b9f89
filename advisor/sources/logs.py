"""vLLM log reader: raw lines -> typed :class:`advisor.model.LogEvent` values.

Two layers, kept apart on purpose:

* **Pure parsing** (no I/O, no clock): :func:`parse_line` turns one logical line into one
  event; :class:`LineJoiner` / :func:`join_lines` rejoin lines that a terminal or
  ``kubectl logs`` hard-wrapped; :func:`parse_lines` does both; :class:`LogCounts` counts
  events by kind; :func:`collect_facts` folds startup facts into a dict.
* **Followers** (the I/O edge): :class:`FileFollower` (survives rotation, copytruncate,
  deletion and re-creation, and a file that does not exist yet), :class:`StreamFollower`
  (stdin or any pipe) and :class:`CommandFollower` (``journalctl -f``, ``docker logs -f``,
  ``kubectl logs -f``). Each yields raw ``str`` lines from ``.lines()`` and stops promptly on
  ``.close()`` (callable from another thread): every wait is bounded by ``poll_interval``.

Design choices worth knowing:

* One line gives one event. A line that carries several startup facts (``CPU KV cache size:
  3,072 tokens, Maximum concurrency for ...``, the engine-config line with its version)
  returns the first fact as ``fields['fact']``/``fields['value']`` and the rest in
  ``fields['also']`` as a list of ``{"fact": ..., "value": ...}`` dicts.
  :func:`event_facts` flattens both into ``[(fact, value), ...]``.
* Percentages become ratios (``GPU KV cache usage: 98.8%`` -> ``kv_cache_usage=0.988``);
  throughputs stay tokens/s; ``iteration`` elapsed time is in seconds.
* Timestamps: an outer RFC3339 timestamp (``docker logs --timestamps``, ``kubectl
  --timestamps``, CRI log files) wins because it carries the year and the zone; otherwise
  vLLM's ``MM-DD hh:mm:ss`` read as UTC, otherwise journald's ``Mon DD hh:mm:ss``. Those two
  carry no year: it is ``year`` when the caller knows it, else the year that puts the line
  nearest to ``near`` (a time the lines were written around: a recording's start; default
  now), so a December line read in January lands in December of the year before.
* Secrets: ``LogEvent.line`` is stored ANSI-free, capped at :data:`MAX_LINE_CHARS` and
  passed through :func:`advisor.redact.redact_text`; parsed dicts go through :func:`advisor.redact.redact_obj`.
* Nothing here raises on bad input: unrecognised, binary or oversized lines become
  ``kind="unknown"`` events.
"""

from __future__ import annotations

import ast
import calendar
import contextlib
import os
import re
import selectors
import shlex
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from typing import IO, Any

from advisor.core.model import EVENT_KINDS, LogEvent
from advisor.core.redact import redact_obj, redact_text

__all__ = [
    "MAX_LINE_BYTES",
    "MAX_LINE_CHARS",
    "CommandFollower",
    "FileFollower",
    "LineJoiner",
    "LogCounts",
    "LogFollower",
    "LogSourceError",
    "Prefixed",
    "StreamFollower",
    "collect_facts",
    "count_events",
    "event_facts",
    "follow_command",
    "follow_file",
    "follow_stdin",
    "join_lines",
    "parse_line",
    "parse_lines",
    "strip_prefixes",
]

MAX_LINE_CHARS = 64 * 1024
"""What is kept of one line; the rest is dropped (a 1 MB line costs no more than this)."""
MAX_LINE_BYTES = 4 * MAX_LINE_CHARS
"""Byte cap for one raw line in the followers (UTF-8 can take 4 bytes per char)."""


class LogSourceError(Exception):
    """A log source cannot be read (command not found, stdin closed, ...)."""


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
_PROCESS_RE = re.compile(r"^\((?P<name>[A-Za-z_][\w.-]*)\s+pid=(?P<pid>\d+)\)\s*")
_LEVEL_RE = re.compile(
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


def _clean(line: str) -> str:
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


def _strip_outer(text: str, year: int | None, near: float | None) -> tuple[str, float | None, float | None]:
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
        if m and not _PROCESS_RE.match(text) and not _LEVEL_RE.match(text):
            text = text[m.end() :]
            continue
        break
    return text, exact_t, journal_t


def strip_prefixes(line: str, year: int | None = None, near: float | None = None) -> Prefixed:
    """Split ``line`` into its prefixes and the vLLM message (pure).

    Handles ANSI colours, docker/kubectl ``--timestamps``, CRI ``<ts> stdout F``, journald
    ``Nov 29 23:26:03 host vllm[123]:``, compose ``svc-1  | ``, kubectl ``[pod/x/c]``, the
    process prefix ``(EngineCore_DP0 pid=2)`` and the level prefix in both its V1 form
    (``INFO 11-29 23:26:03 [loggers.py:335]``) and its V0 form (``INFO 06-16 21:24:15
    metrics.py:341]``). A level prefix that follows other text on the line (a tqdm bar
    without a newline) is found too. ``year``/``near``: how year-less stamps get their year
    (see the module's notes).
    """
    text = _clean(line)
    text, exact_t, journal_t = _strip_outer(text, year, near)
    process: str | None = None
    pid: int | None = None
    m = _PROCESS_RE.match(text)
    if m:
        process, pid = m["name"], int(m["pid"])
        text = text[m.end() :]
    level = loc = None
    vllm_t: float | None = None
    lm = _LEVEL_RE.match(text)
    if lm is None and "-" in text and ":" in text:
        lm = _LEVEL_RE.search(text)
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


# --------------------------------------------------------------------------- scanners


def _scan(text: str, sep: str | None = None) -> tuple[list[int], int, str]:
    """Walk ``text`` quote- and bracket-aware: the positions of ``sep`` outside quotes and
    ()[]{} nesting, the bracket depth at the end, and the quote still open at the end."""
    cuts: list[int] = []
    depth = 0
    quote = ""
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
        elif c == sep and depth == 0:
            cuts.append(i)
        i += 1
    return cuts, depth, quote


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside quotes and ()[]{} nesting. Tolerates unbalanced input."""
    cuts, _, _ = _scan(text, sep)
    bounds = [-1, *cuts, len(text)]
    return [text[x + 1 : y] for x, y in pairwise(bounds)]


def _open_depth(text: str) -> int:
    """Bracket depth at the end of ``text`` (quote-aware); an open quote counts as 1."""
    _, depth, quote = _scan(text)
    return depth + (1 if quote else 0)


def _literal(text: str) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False, None


def _lenient_dict(text: str) -> tuple[dict[str, Any], list[str]]:
    """Parse a Python dict repr, keeping every ``key: value`` pair that parses.

    Values that ``ast.literal_eval`` rejects (``<CompilationMode.NONE: 0>``, objects) are
    left out and their keys returned in the second list; nested dicts are parsed the same
    way. A dict cut short (truncated line) keeps the complete pairs."""
    text = text.strip()
    ok, val = _literal(text)
    if ok and isinstance(val, dict):
        return {str(k): v for k, v in val.items()}, []
    body = text[1:] if text.startswith("{") else text
    if body.endswith("}") and _open_depth(body[:-1]) == 0:
        body = body[:-1]
    out: dict[str, Any] = {}
    unparsed: list[str] = []
    for item in _split_top(body):
        item = item.strip()
        if not item:
            continue
        kv = _split_top(item, ":")
        if len(kv) < 2:
            continue
        ok, key = _literal(kv[0].strip())
        if not ok:
            continue
        key = str(key)
        raw = ":".join(kv[1:]).strip()
        ok, v = _literal(raw)
        if ok:
            out[key] = v
        elif raw.startswith("{"):
            sub, sub_unparsed = _lenient_dict(raw)
            out[key] = sub
            unparsed.extend(f"{key}.{s}" for s in sub_unparsed)
        else:
            unparsed.append(key)
    return out, unparsed


_KEY_EQ_RE = re.compile(r"^\s*([A-Za-z_]\w*)=(.*)$", re.DOTALL)
_INT_RE = re.compile(r"^[-+]?\d+$")
_FLOAT_RE = re.compile(r"^[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?$")


def _scalar(raw: str) -> Any:
    s = raw.strip()
    if s == "None":
        return None
    if s in ("True", "False"):
        return s == "True"
    if _INT_RE.match(s):
        return int(s)
    if _FLOAT_RE.match(s):
        return float(s)
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        ok, v = _literal(s)
        return v if ok else s[1:-1]
    return s


def _parse_kv_config(text: str) -> dict[str, Any]:
    """``model='/m', tensor_parallel_size=1, x=Foo(a=1, b=2)`` -> dict. Quoted strings are
    unquoted, ints/floats/bools/None converted, nested ()/[]/{} values kept as strings."""
    out: dict[str, Any] = {}
    last: str | None = None
    for part in _split_top(text):
        m = _KEY_EQ_RE.match(part)
        if m:
            last = m.group(1)
            out[last] = _scalar(m.group(2))
        elif last is not None and part.strip():
            prev = out[last]
            out[last] = f"{prev}, {part.strip()}" if prev is not None else part.strip()
    return out


# --------------------------------------------------------------------------- recognisers

_STATS_MARK = "Avg prompt throughput"
_STATS_PART_RE = re.compile(
    r"^\s*(?P<key>[A-Za-z][A-Za-z /_-]*?)\s*:\s*(?P<num>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)"
    r"\s*(?P<unit>%|[A-Za-z/]+)?\s*$"
)
_MAX_STATS_PART = 200
_MAX_STATS_BODY = 4096
_ENGINE_HEAD_RE = re.compile(r"\bEngine\s+(\d+)\s*:\s*")
_DEVICE_KV_RE = re.compile(r"^(?:(?P<dev>[A-Z]{2,4}) )?KV cache usage$")
_V0_PREFIX_HIT_RE = re.compile(r"^Prefix cache hit rate: GPU: (?P<gpu>[\d.]+)%, CPU: (?P<cpu>[\d.]+)%\.?\s*$")
_STATS_KEYS: dict[str, tuple[str, type]] = {
    "avg prompt throughput": ("prompt_throughput", float),
    "avg generation throughput": ("generation_throughput", float),
    "running": ("running", int),
    "waiting": ("waiting", int),
    "pending": ("waiting", int),
    "swapped": ("swapped", int),
    "deferred": ("deferred", int),
    "preemptions": ("preemptions", int),
    "corrupted": ("corrupted", int),
    "prefix cache hit rate": ("prefix_cache_hit_rate", float),
    "gpu prefix cache hit rate": ("prefix_cache_hit_rate", float),
    "cpu prefix cache hit rate": ("cpu_prefix_cache_hit_rate", float),
    "external prefix cache hit rate": ("external_prefix_cache_hit_rate", float),
    "mm cache hit rate": ("mm_cache_hit_rate", float),
}

_ITER_RE = re.compile(r"^Iteration\((?P<i>\d+)\):\s*(?P<rest>.*)$")
# (?<!\d) and a bounded count keep this linear on a long run of digits
_ITER_PART_RE = re.compile(
    r"(?<!\d)(\d{1,18}) (context requests|context tokens|generation requests|generation tokens)"
)
_ITER_TIME_RE = re.compile(r"elapsed time:\s*([\d.]+)\s*ms")

_PREEMPT_RE = re.compile(
    r"Sequence group (?P<id>\S+) is preempted by (?:PreemptionMode\.)?(?P<mode>\w+) mode"
)
_PREEMPT_CUM_RE = re.compile(r"total_num_cumulative_preemption=(\d+)")

_NON_DEFAULT_RE = re.compile(r"non-default args:\s*(?P<d>\{.*)$", re.DOTALL)
_ENGINE_CFG_RE = re.compile(
    r"Initializing an? (?:V\d+ )?LLM engine(?: \(v?(?P<v>[^)\s]*)\))? with config:\s*(?P<cfg>.*)$", re.DOTALL
)
_CHUNKED_RE = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)")
_AVAIL_KV_RE = re.compile(r"Available KV cache memory:\s*(-?[\d.]+)\s*GiB")
# per rank; vLLM before 0.7 said "Loading model weights took 14.99 GB" (GiB, in fact)
_WEIGHTS_RE = re.compile(r"(?:Model loading|Loading model weights) took\s*(-?[\d.]+)\s*Gi?B")
_KV_SIZE_RE = re.compile(r"(?:(?P<dev>[A-Z]{2,4}) )?KV cache size:\s*(?P<n>[\d,]+)\s*tokens")
_MAX_CONC_RE = re.compile(r"Maximum concurrency for (?P<tok>[\d,]+) tokens per request:\s*(?P<x>[\d.]+)x")
_BLOCKS_RE = re.compile(
    r"(?:^|(?<=[\s#]))(?:# )?(?P<dev>[A-Z]{2,4}) blocks: (?P<g>\d+)(?:,\s*(?:# )?CPU blocks: (?P<c>\d+))?"
)
# V0.6 (one line, two spellings) and V0.7 (prose over three lines) memory profiling reports
_MEM_PROFILE_RE = re.compile(r"Memory profiling results:")
_MEM_PROFILE_KV_RE = re.compile(r"\b(total_gpu_memory|kv_cache_size|gpu_memory_utilization)=([\d.]+)")
_MEM_BUDGET_RE = re.compile(
    r"total_gpu_memory \((?P<total>[\d.]+)\s*GiB\) x gpu_memory_utilization \((?P<util>[\d.]+)\)"
)
_MEM_KV_REST_RE = re.compile(r"the rest of the memory reserved for KV Cache is (?P<kv>-?[\d.]+)\s*GiB")
# vllm-ascend's worker, in bytes: "Available memory: 43599749939, total memory: 65452113920"
_ASCEND_MEM_RE = re.compile(r"^Available memory: (?P<avail>-?\d+), total memory: (?P<total>\d+)\s*$")
_SPEC_MARK = "SpecDecoding metrics:"
_SPEC_V0_MARK = "Speculative metrics:"
_SPEC_PART_RE = re.compile(
    r"(?P<key>[A-Za-z][A-Za-z -]*?):\s*(?P<num>[-+]?(?:\d+(?:\.\d*)?|\.\d+)|nan)\s*(?P<unit>%)?"
)
_SPEC_KEYS = {
    "mean acceptance length": "mean_acceptance_length",
    "accepted throughput": "accepted_throughput",
    "drafted throughput": "drafted_throughput",
    "accepted": "accepted_tokens",
    "drafted": "drafted_tokens",
    "avg draft acceptance rate": "acceptance_rate",
    "draft acceptance rate": "acceptance_rate",
    "system efficiency": "system_efficiency",
    "number of speculative tokens": "num_speculative_tokens",
    "number of accepted tokens": "accepted_tokens",
    "number of draft tokens": "drafted_tokens",
    "number of emitted tokens": "emitted_tokens",
}
_BANNER_CHARS = frozenset("█▄▀")
_BANNER_VERSION_RE = re.compile(r"\bversion\s+v?(\d+\.\d+[\w.+-]*)\s*$")
_BANNER_MODEL_RE = re.compile(r"\bmodel\s+(\S.*)")  # rstrip()ed: a lazy .*?\s*$ is quadratic on spaces
_API_VERSION_RE = re.compile(r"vLLM API server version v?(\d+\.\d+[\w.+-]*)")
_STARTING_RE = re.compile(r"Starting vLLM (?:API )?server\b.{0,200}?\bon (?P<url>\S+)")
_MAX_MODEL_LEN_RE = re.compile(r"^Using max model len (\d+)")
_NUM_BLOCKS_IS_RE = re.compile(r"\bnum_gpu_blocks is:?\s*(\d+)")
_ARCH_RE = re.compile(r"^Resolved architecture: (\S+)")

_FREE_MEM_RE = re.compile(
    r"Free memory on device(?: \S+)? \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup is less than "
    r"desired GPU memory utilization \((?P<util>[\d.]+), (?P<req>[\d.]+) GiB\)"
)
_MAX_SEQ_KV_RE = re.compile(
    r"The model's max seq len \((?P<seq>\d+)\) is larger than the maximum number of tokens that can be "
    r"stored in KV cache \((?P<kv>\d+)\)"
)
_MAX_SEQ_KV_V1_RE = re.compile(
    r"max seq len \((?P<seq>\d+)\),?\s*\(?(?P<need>[\d.]+) GiB KV cache is needed, which is larger than "
    r"the available KV cache memory \((?P<avail>[\d.]+) GiB\)"
)
_OOM_RE = re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory")
_ENGINE_EXC_RE = re.compile(r"EngineCore (?:encountered a fatal error|hit an exception)")
# a traceback's source line (``    raise ValueError(``, ``File "x.py", line 3``) quotes code, not an error
_SOURCE_LINE_RE = re.compile(r"^(?:raise\b|File \"|return\b|\^+$|~+)")
_REQUEST_LOG_RE = re.compile(r"^(?:Received request|Added request|Generated response)")


def _num(text: str) -> int:
    return int(text.replace(",", ""))


def _parse_stats(msg: str) -> dict[str, Any] | None:
    marks = [i for i in (msg.find(_STATS_MARK), msg.find("Avg generation throughput")) if i >= 0]
    if not marks:
        return None
    fields: dict[str, Any] = {}
    hm = _ENGINE_HEAD_RE.search(msg)
    if hm and hm.start() <= min(marks):
        fields["engine"] = str(int(hm.group(1)))
        idx = hm.end()
    else:
        idx = min(marks)
    body = msg[idx : idx + _MAX_STATS_BODY].rstrip()  # a real stats line is < 1 KB
    if body.endswith("."):
        body = body[:-1]
    extra: dict[str, Any] = {}
    v0 = False
    for part in _split_top(body):
        part = part.strip()
        if not part or len(part) > _MAX_STATS_PART:
            continue  # a real part is "Running: 3 reqs"; a long one only costs (the pattern backtracks)
        m = _STATS_PART_RE.match(part)
        if not m:
            key, _, rest = part.partition(":")
            if rest:
                extra[re.sub(r"\W+", "_", key.strip().lower()).strip("_")] = rest.strip()
            continue
        key = m["key"].strip()
        lkey = key.lower()
        try:
            value = float(m["num"])
        except ValueError:
            continue
        if m["unit"] == "%":
            value = round(value / 100.0, 10)
        if lkey in ("swapped", "pending"):
            v0 = True
        dm = _DEVICE_KV_RE.match(key)
        if dm:
            dev = dm["dev"]
            if "kv_cache_usage" in fields and dev == "CPU":
                fields["cpu_kv_cache_usage"] = value
            elif "kv_cache_usage" not in fields:
                fields["kv_cache_usage"] = value
                if dev:
                    fields["device"] = dev
            continue
        spec = _STATS_KEYS.get(lkey)
        if spec is None:
            extra[re.sub(r"\W+", "_", lkey).strip("_")] = value
            continue
        name, typ = spec
        fields[name] = int(value) if typ is int and value == value and abs(value) != float("inf") else value
    if "prompt_throughput" not in fields and "generation_throughput" not in fields:
        return None
    fields["format"] = "v0" if v0 else "v1"
    if extra:
        fields["extra"] = extra
    return fields


def _parse_spec(msg: str) -> dict[str, Any] | None:
    """``SpecDecoding metrics: Mean acceptance length: 2.71, ..., Avg Draft acceptance rate:
    57.3%`` (V1; older V1 put ``Draft acceptance rate`` first) and V0's ``Speculative
    metrics: Draft acceptance rate: 0.651, System efficiency: 0.570, ...``: acceptance rate
    as a ratio, mean acceptance length, accepted and drafted tokens; format ``spec_decode``."""
    idx = msg.find(_SPEC_MARK)
    idx = idx + len(_SPEC_MARK) if idx >= 0 else msg.find(_SPEC_V0_MARK) + len(_SPEC_V0_MARK)
    fields: dict[str, Any] = {}
    for part in _split_top(msg[idx:].rstrip(". ")):
        m = _SPEC_PART_RE.match(part.strip())
        if not m:
            continue
        name = _SPEC_KEYS.get(m["key"].strip().lower())
        if name is None:
            continue
        try:
            value = float(m["num"])
        except ValueError:
            continue
        if m["unit"] == "%" or (name == "acceptance_rate" and value > 1.0):
            value = round(value / 100.0, 10)
        fields[name] = int(value) if name.endswith("_tokens") and value.is_integer() else value
    if not fields:
        return None
    fields["format"] = "spec_decode"
    return fields


def _parse_iteration(msg: str) -> dict[str, Any] | None:
    m = _ITER_RE.match(msg)
    if not m:
        return None
    fields: dict[str, Any] = {"iteration": int(m["i"])}
    rest = m["rest"]
    for n, what in _ITER_PART_RE.findall(rest):
        fields[what.replace(" ", "_")] = int(n)
    tm = _ITER_TIME_RE.search(rest)
    if tm:
        with contextlib.suppress(ValueError):
            fields["elapsed_seconds"] = float(tm.group(1)) / 1000.0
    fields["dummy"] = "(dummy)" in rest
    return fields


def _facts(msg: str) -> list[dict[str, Any]]:
    """Every startup fact in ``msg``, in order of appearance."""
    out: list[dict[str, Any]] = []
    m = _NON_DEFAULT_RE.search(msg)
    if m:
        args, unparsed = _lenient_dict(m["d"])
        fact: dict[str, Any] = {"fact": "non_default_args", "value": redact_obj(args)}
        if unparsed:
            fact["unparsed"] = unparsed
        return [fact]
    m = _ENGINE_CFG_RE.search(msg)
    if m:
        cfg = redact_obj(_parse_kv_config(m["cfg"]))
        out.append({"fact": "engine_config", "value": cfg})
        if m["v"]:
            out.append({"fact": "vllm_version", "value": m["v"]})
        return out
    if any(c in _BANNER_CHARS for c in msg):
        vm = _BANNER_VERSION_RE.search(msg)
        if vm:
            out.append({"fact": "vllm_version", "value": vm.group(1)})
        mm = _BANNER_MODEL_RE.search(msg)
        if mm:
            out.append({"fact": "model", "value": mm.group(1).rstrip()})
        return out
    found: list[tuple[int, dict[str, Any]]] = []
    for km in _KV_SIZE_RE.finditer(msg):
        item: dict[str, Any] = {"fact": "kv_cache_tokens", "value": _num(km["n"])}
        if km["dev"]:
            item["device"] = km["dev"]
        found.append((km.start(), item))
    for cm in _MAX_CONC_RE.finditer(msg):
        found.append((cm.start(), {"fact": "max_concurrency", "value": float(cm["x"])}))
        found.append(
            (cm.start() + 1, {"fact": "max_concurrency_tokens_per_request", "value": _num(cm["tok"])})
        )
    for rx, name, conv in (
        (_CHUNKED_RE, "max_num_batched_tokens", int),
        (_AVAIL_KV_RE, "available_kv_cache_memory_gib", float),
        (_WEIGHTS_RE, "model_weights_gib", float),
        (_MAX_MODEL_LEN_RE, "max_model_len", int),
        (_NUM_BLOCKS_IS_RE, "num_gpu_blocks", int),
        (_ARCH_RE, "architecture", str),
        (_API_VERSION_RE, "vllm_version", str),
    ):
        for fm in rx.finditer(msg):
            try:
                found.append((fm.start(), {"fact": name, "value": conv(fm.group(1))}))
            except ValueError:
                continue
    if _MEM_PROFILE_RE.search(msg):
        renamed = {"total_gpu_memory": "gpu_memory_gib", "kv_cache_size": "available_kv_cache_memory_gib"}
        for pm in _MEM_PROFILE_KV_RE.finditer(msg):
            name = renamed.get(pm.group(1), pm.group(1))
            with contextlib.suppress(ValueError):
                found.append((pm.start(), {"fact": name, "value": float(pm.group(2).rstrip("."))}))
    mb = _MEM_BUDGET_RE.search(msg)
    if mb:
        found.append((mb.start(), {"fact": "gpu_memory_gib", "value": float(mb["total"])}))
        found.append((mb.start() + 1, {"fact": "gpu_memory_utilization", "value": float(mb["util"])}))
    mk = _MEM_KV_REST_RE.search(msg)
    if mk:
        found.append((mk.start(), {"fact": "available_kv_cache_memory_gib", "value": float(mk["kv"])}))
    am = _ASCEND_MEM_RE.match(msg)
    if am:
        gib = float(1 << 30)
        found.append(
            (0, {"fact": "available_kv_cache_memory_gib", "value": round(int(am["avail"]) / gib, 3)})
        )
        found.append((1, {"fact": "gpu_memory_gib", "value": round(int(am["total"]) / gib, 3)}))
    bm = _BLOCKS_RE.search(msg)
    if bm:
        found.append((bm.start(), {"fact": "num_gpu_blocks", "value": int(bm["g"]), "device": bm["dev"]}))
        if bm["c"] is not None:
            found.append((bm.start() + 1, {"fact": "num_cpu_blocks", "value": int(bm["c"])}))
    sm = _STARTING_RE.search(msg)
    if sm:
        found.append((sm.start(), {"fact": "api_server_url", "value": sm["url"]}))
    found.sort(key=lambda p: p[0])
    return [f for _, f in found]


def _error(msg: str) -> dict[str, Any] | None:
    if _REQUEST_LOG_RE.match(msg) or _SOURCE_LINE_RE.match(msg):
        return None  # request logs can quote any prompt text; source lines quote code
    if "No available memory for the cache blocks" in msg:
        return {"error": "no_kv_memory"}
    if "is less than desired GPU memory utilization" in msg:
        out: dict[str, Any] = {"error": "free_memory_below_utilization"}
        m = _FREE_MEM_RE.search(msg)
        if m:
            out.update(
                free_gib=float(m["free"]),
                total_gib=float(m["total"]),
                gpu_memory_utilization=float(m["util"]),
                requested_gib=float(m["req"]),
            )
        return out
    m = _MAX_SEQ_KV_RE.search(msg)
    if m:
        return {
            "error": "max_seq_len_above_kv_capacity",
            "max_seq_len": int(m["seq"]),
            "kv_cache_tokens": int(m["kv"]),
        }
    m = _MAX_SEQ_KV_V1_RE.search(msg)
    if m:
        return {
            "error": "max_seq_len_above_kv_capacity",
            "max_seq_len": int(m["seq"]),
            "needed_gib": float(m["need"]),
            "available_gib": float(m["avail"]),
        }
    if "EngineCore failed to start" in msg or "Engine core initialization failed" in msg:
        return {"error": "engine_start_failed"}
    if _ENGINE_EXC_RE.search(msg):
        return {"error": "engine_core_exception"}
    if _OOM_RE.search(msg):
        return {"error": "out_of_memory"}
    return None


def parse_line(line: str, year: int | None = None, near: float | None = None) -> LogEvent:
    """Turn one logical log line into a :class:`LogEvent` (pure; never raises).

    ``year`` completes vLLM's year-less timestamps; without it, the year nearest to ``near``
    (a Unix time the line was written around, default now) does.
    Kinds and fields:

    * ``engine_stats``: ``engine`` (str), ``prompt_throughput``, ``generation_throughput``
      (tokens/s), ``running``, ``waiting`` (V0 ``Pending``), ``swapped``, ``deferred``,
      ``preemptions``, ``corrupted`` (ints, absent when not printed), ``kv_cache_usage``,
      ``cpu_kv_cache_usage``, ``prefix_cache_hit_rate``, ``cpu_prefix_cache_hit_rate``,
      ``external_prefix_cache_hit_rate``, ``mm_cache_hit_rate`` (ratios 0..1), ``device``
      (``GPU``/``CPU``/...), ``format`` (``v1``, ``v0``, or ``v0_prefix_cache`` for V0's
      separate ``Prefix cache hit rate: GPU: x%, CPU: y%`` line), ``extra`` (unknown parts).
    * ``iteration``: ``iteration``, ``context_requests``, ``context_tokens``,
      ``generation_requests``, ``generation_tokens``, ``elapsed_seconds``, ``dummy``.
    * ``preemption``: ``mode`` (``recompute``/``swap``), ``cumulative`` (int or None),
      ``request_id``.
    * ``startup``: ``fact``, ``value`` (+ ``device`` on KV facts, ``unparsed`` keys on
      ``non_default_args``) and ``also`` for further facts on the same line.
    * ``error``: ``error`` plus the numbers the message carries.
    * ``unknown``: everything else.

    Every event also carries ``level`` and ``pid`` in ``fields`` when the line had them.
    """
    try:
        return _parse_line(line, year, near)
    except Exception as exc:  # defensive: a parser bug must not stop a follower
        return LogEvent("unknown", None, {"parse_error": type(exc).__name__}, None, redact_text(_clean(line)))


def _parse_line(line: str, year: int | None, near: float | None) -> LogEvent:
    if not isinstance(line, str):
        line = (
            bytes(line).decode("utf-8", errors="replace")
            if isinstance(line, bytes | bytearray)
            else str(line)
        )
    p = strip_prefixes(line, year, near)
    msg = p.message.strip()
    base: dict[str, Any] = {}
    if p.level:
        base["level"] = p.level
    if p.pid is not None:
        base["pid"] = p.pid
    stored = redact_text(_clean(line))

    def ev(kind: str, fields: dict[str, Any]) -> LogEvent:
        return LogEvent(kind, p.t, {**base, **fields}, p.process, stored)

    if _STATS_MARK in msg or "Avg generation throughput" in msg:
        stats = _parse_stats(msg)
        if stats is not None:
            return ev("engine_stats", stats)
    if _SPEC_MARK in msg or _SPEC_V0_MARK in msg:
        spec = _parse_spec(msg)
        if spec is not None:
            return ev("engine_stats", spec)
    if not p.has_vllm_prefix and p.message[:1].isspace():
        return ev("unknown", {})  # an indented line: a traceback's source, a warning's code
    bm = _BLOCKS_RE.search(msg)
    if bm and int(bm["g"]) == 0:
        # the engine found no memory for a single KV block: it cannot serve (vLLM then raises)
        return ev("error", {"error": "no_kv_blocks", "num_gpu_blocks": 0, "device": bm["dev"]})
    m = _V0_PREFIX_HIT_RE.match(msg)
    if m:
        return ev(
            "engine_stats",
            {
                "prefix_cache_hit_rate": round(float(m["gpu"]) / 100.0, 10),
                "cpu_prefix_cache_hit_rate": round(float(m["cpu"]) / 100.0, 10),
                "format": "v0_prefix_cache",
            },
        )
    if msg.startswith("Iteration("):
        it = _parse_iteration(msg)
        if it is not None:
            return ev("iteration", it)
    m = _PREEMPT_RE.search(msg)
    if m:
        cm = _PREEMPT_CUM_RE.search(msg)
        return ev(
            "preemption",
            {
                "mode": m["mode"].lower(),
                "cumulative": int(cm.group(1)) if cm else None,
                "request_id": m["id"],
            },
        )
    facts = _facts(msg)
    if facts:
        first = dict(facts[0])
        if len(facts) > 1:
            first["also"] = facts[1:]
        return ev("startup", first)
    err = _error(msg)
    if err is not None:
        return ev("error", err)
    return ev("unknown", {})


def event_facts(event: LogEvent) -> list[tuple[str, Any]]:
    """All ``(fact, value)`` pairs a startup event carries (its own and ``also``)."""
    if event.kind != "startup":
        return []
    out: list[tuple[str, Any]] = []
    if "fact" in event.fields:
        out.append((event.fields["fact"], event.fields.get("value")))
    for item in event.fields.get("also", ()) or ():
        if isinstance(item, Mapping) and "fact" in item:
            out.append((item["fact"], item.get("value")))
    return out


def collect_facts(events: Iterable[LogEvent]) -> dict[str, Any]:
    """Fold startup facts into one dict; a later fact replaces an earlier one (a server
    restart in the same log wins). ``non_default_args`` and ``engine_config`` are dicts."""
    out: dict[str, Any] = {}
    for e in events:
        for k, v in event_facts(e):
            out[k] = v
    return out


# --------------------------------------------------------------------------- wrapped lines

_DICT_MARKERS = ("non-default args:", "args: Namespace(")
_CONFIG_MARKER = "with config:"
_CONT_PREFIX_RE = re.compile(
    r"^(?:INFO|DEBUG|WARNING|ERROR|CRITICAL):\s|^\[[WEI]\d{4} |^Traceback |^\S+\.py:\d+: "
)
_CONFIG_CONT_RE = re.compile(r"^(?:[,_=)\]}]|[A-Za-z_]\w*=)")
"""How a wrapped piece of a *balanced* engine-config line starts: a separator, the rest of
an identifier (``_name=``) or a fresh ``key=``."""


# Terminal and viewer widths a hard wrap happens at (a wrapped line is exactly that long).
WRAP_MIN_COLS = 80
WRAP_MAX_COLS = 400
# How a line that is not the rest of a wrapped one starts (indented code, a traceback, an
# exception, torch's ``[rank0]:`` lines, a comment); one space may start a rest (a wrap there).
_NOT_CONT_RE = re.compile(
    r"^(?:\s\s|\t|[\[#(]|Traceback\b|File \"|During handling\b|The above exception\b|"
    r"[\w.]*(?:Error|Exception|Warning|Interrupt|Exit)\b:)"
)
# How a complete record ends: a percentage, a closing bracket or quote, a full stop after a
# word, an HTTP status, a unit.
_RECORD_END_RE = re.compile(r"(?:[%)\]}>!\"']|(?<![\d.])\.|\bOK|\breqs|tokens/s|GiB|seconds)\s*$")
# Two records glued where a viewer showed the end of line as ``$`` (``cat -A``, vim's list mode).
_GLUE_RE = re.compile(
    r"\$(?=\([A-Za-z_][\w.-]*\s+pid=\d+\)\s|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:)"
)


def _unglue(line: str) -> list[str]:
    """Split records glued by a stray ``$`` end-of-line mark; drop a trailing one from a vLLM
    line (``cat -A`` marks every line so)."""
    if "$" not in line:
        return [line]
    parts = _GLUE_RE.split(line.rstrip("\r\n"))
    out = []
    for part in parts:
        if part.endswith("$") and (_PROCESS_RE.search(part[:120]) or _LEVEL_RE.search(part[:200])):
            part = part[:-1]
        out.append(part)
    return out


class LineJoiner:
    """Rejoin hard-wrapped lines (terminal or ``kubectl logs`` wrapping) before parsing.

    Three kinds of line are *held* until the next line shows whether it continues them:

    * any line with a vLLM prefix between :data:`WRAP_MIN_COLS` and :data:`WRAP_MAX_COLS`
      long (a terminal or viewer may have broken it there, mid-token): a following line
      without a recognised prefix, not indented and not a traceback's or an exception's
      line, is its rest when it starts mid-token (not with a capital) or the held line ends
      mid-list (``,``/``:``/``=``/a space); further pieces follow while each is exactly as
      long as the first (the wrap width);

    * a ``non-default args: {...}`` (or V0 ``args: Namespace(...)``) line whose brackets
      (quote-aware) are still open: any following line without a recognised prefix is
      appended, until the brackets close;
    * an engine ``with config: ...`` line: a following line without a recognised prefix is
      appended when the config is still open (brackets, trailing ``,``/``=``) or when the
      new piece starts like a continuation (``,``, ``_``, ``)``, or ``key=``).

    A recognised prefix is a vLLM process prefix, a vLLM level prefix, uvicorn's ``INFO:``,
    a glog ``[W1129 ...`` line, a ``Traceback`` or a ``file.py:N:`` warning. Pieces are
    appended verbatim (hard wraps split inside tokens, so no separator is added) after their
    own outer prefixes (docker/journald timestamps) are stripped. At most
    ``max_continuations`` pieces and :data:`MAX_LINE_CHARS` are joined. Limitation: a config
    line wrapped where it is balanced and whose next piece starts mid-value (``...bf`` /
    ``loat16, ...``) is not rejoined.

    ``feed(line)`` returns the lines now complete; call ``flush()`` at the end (a follower
    may also flush when idle: a held line waits for the next one).
    """

    def __init__(self, max_continuations: int = 200) -> None:
        self.max_continuations = max_continuations
        self._pending: str | None = None
        self._count = 0
        self._wrap_width: int | None = None  # the held line may continue: a hard wrap at this width

    @property
    def pending(self) -> bool:
        return self._pending is not None

    @staticmethod
    def _open(line: str) -> bool:
        """True when a dict/config line's brackets are still open (or a config ends in ,/=)."""
        for marker in (*_DICT_MARKERS, _CONFIG_MARKER):
            idx = line.find(marker)
            if idx >= 0:
                tail = line[idx + len(marker) :]
                if _open_depth(tail) > 0:
                    return True
                return marker == _CONFIG_MARKER and tail.rstrip().endswith((",", "="))
        return False

    @classmethod
    def _hold(cls, line: str) -> bool:
        return _CONFIG_MARKER in line or cls._open(line)

    @staticmethod
    def _piece(line: str) -> str | None:
        """The line minus its outer prefixes when it has no recognised prefix, else None."""
        clean = _clean(line)
        if not clean.strip():
            return None
        rest, _, _ = _strip_outer(clean, 1970, None)  # only the text matters here
        if _PROCESS_RE.match(rest) or _LEVEL_RE.match(rest) or _CONT_PREFIX_RE.match(rest):
            return None
        return rest

    @staticmethod
    def _wrappable(clean: str) -> bool:
        """A vLLM line as long as a terminal is wide that does not end as a record ends: it
        may have been hard-wrapped. (A complete stats line ends with ``%``, and is passed on at
        once: a live follower does not wait for the next line to see it.)"""
        if not WRAP_MIN_COLS <= len(clean) <= WRAP_MAX_COLS or _RECORD_END_RE.search(clean):
            return False
        rest, _, _ = _strip_outer(clean, 1970, None)
        return bool(_PROCESS_RE.match(rest) or _LEVEL_RE.match(rest))

    def feed(self, line: str) -> list[str]:
        if "$" in line:
            return [x for part in _unglue(line) for x in self._feed(part)]
        return self._feed(line)

    def _feed(self, line: str) -> list[str]:
        out: list[str] = []
        if self._pending is not None:
            piece = self._piece(line) if self._count < self.max_continuations else None
            wrapped = (
                piece is not None
                and self._wrap_width is not None
                and len(_clean(line)) <= self._wrap_width  # a wrap's rest is never wider than it
                and not _NOT_CONT_RE.match(piece)
                # mid-token (``usa``/``ge: 98%``) or mid-list (``reqs, ``/``Waiting: 3``); a
                # capitalised line after a complete one is a line of its own (a library's print)
                and (
                    not piece[:1].isupper()
                    or self._pending[-1:].isupper()  # ``G``/``PU KV cache usage``
                    or self._pending.endswith((",", ":", "(", "=", " "))
                )
            )
            if piece is not None and (
                wrapped
                or self._open(self._pending)
                or (_CONFIG_MARKER in self._pending and _CONFIG_CONT_RE.match(piece))
            ):
                joined = (self._pending + piece)[:MAX_LINE_CHARS]
                self._count += 1
                if self._wrap_width is not None and len(_clean(line)) != self._wrap_width:
                    self._wrap_width = None  # a shorter piece ends the wrapped line
                if len(joined) < MAX_LINE_CHARS and (self._hold(joined) or self._wrap_width is not None):
                    self._pending = joined
                    return out
                self._pending = None
                self._wrap_width = None
                out.append(joined)
                return out
            out.append(self._pending)
            self._pending = None
            self._wrap_width = None
        clean = _clean(line)
        if self._hold(clean):
            self._pending = clean
            self._count = 0
            self._wrap_width = len(clean) if self._wrappable(clean) else None
        elif self._wrappable(clean):
            self._pending = clean
            self._count = 0
            self._wrap_width = len(clean)
        else:
            out.append(line)
        return out

    def flush(self) -> list[str]:
        """Release a held line (end of input, or the source went idle)."""
        if self._pending is None:
            return []
        p, self._pending = self._pending, None
        self._wrap_width = None
        return [p]


def join_lines(lines: Iterable[str], max_continuations: int = 200) -> Iterator[str]:
    """Logical lines from physical ones (see :class:`LineJoiner`)."""
    joiner = LineJoiner(max_continuations)
    for line in lines:
        yield from joiner.feed(line)
    yield from joiner.flush()


def parse_lines(
    lines: Iterable[str], year: int | None = None, join: bool = True, near: float | None = None
) -> Iterator[LogEvent]:
    """Events from raw lines: rejoin wrapped lines (unless ``join=False``), then
    :func:`parse_line` each (``year``/``near`` as there)."""
    src = join_lines(lines) if join else lines
    for line in src:
        yield parse_line(line, year, near)


# --------------------------------------------------------------------------- counting


@dataclass
class LogCounts:
    """Events counted by kind (every kind in ``model.EVENT_KINDS`` is present, 0 or more)."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(EVENT_KINDS, 0))

    def add(self, event: LogEvent) -> None:
        kind = event.kind if event.kind in self.counts else "unknown"
        self.counts[kind] += 1

    def update(self, events: Iterable[LogEvent]) -> LogCounts:
        for e in events:
            self.add(e)
        return self

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def as_dict(self) -> dict[str, int]:
        return dict(self.counts)


def count_events(events: Iterable[LogEvent]) -> dict[str, int]:
    """``{kind: count}`` over all of ``EVENT_KINDS`` (for ``inspect``)."""
    return LogCounts().update(events).as_dict()


# --------------------------------------------------------------------------- followers


class _LineSplitter:
    """Bytes -> decoded lines, with a per-line byte cap (the rest of a huge line is dropped)."""

    def __init__(self, max_bytes: int = MAX_LINE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._buf = bytearray()
        self._discarding = False

    def feed(self, data: bytes) -> list[str]:
        out: list[str] = []
        start = 0
        n = len(data)
        while start < n:
            nl = data.find(b"\n", start)
            end = n if nl < 0 else nl
            if not self._discarding:
                room = self.max_bytes - len(self._buf)
                self._buf += data[start : start + max(0, min(room, end - start))]
                if end - start > room:
                    self._discarding = True
            if nl < 0:
                break
            out.append(self._emit())
            start = nl + 1
        return out

    def _emit(self) -> str:
        text = bytes(self._buf).decode("utf-8", errors="replace").rstrip("\r")
        self._buf.clear()
        self._discarding = False
        return text

    def flush(self) -> str | None:
        """The partial last line, if any (at EOF, rotation or truncation)."""
        if not self._buf and not self._discarding:
            return None
        return self._emit()


class LogFollower:
    """Base of the followers: ``lines()`` yields raw lines until ``close()`` is called (from
    any thread) or the source ends. Every wait is bounded by ``poll_interval`` seconds and
    wakes at once on ``close()``. Usable as an iterator and as a context manager."""

    def __init__(self, poll_interval: float = 0.5) -> None:
        if poll_interval <= 0:
            raise ValueError("poll_interval must be > 0")
        self.poll_interval = poll_interval
        self._stop = threading.Event()

    @property
    def closed(self) -> bool:
        return self._stop.is_set()

    def close(self) -> None:
        self._stop.set()

    def stop(self) -> None:
        """Alias of :meth:`close`."""
        self.close()

    def lines(self) -> Generator[str, None, None]:  # pragma: no cover - abstract
        raise NotImplementedError

    def __iter__(self) -> Iterator[str]:
        return self.lines()

    def __enter__(self) -> LogFollower:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FileFollower(LogFollower):
    """Follow a log file like ``tail -F``.

    * ``from_start``: read the file present at start from its beginning (else from its end).
      A file that appears later (created, rotated in, re-created) is always read from its
      beginning.
    * Rotation (rename + new file) and delete + re-create: the old file is read to its end,
      then the new one from its start (``rotations`` counts them).
    * Two rotations within one poll: the file in between, by then ``PATH.1``, is read whole
      before the new one (a third rotation within one poll is lost).
    * Truncation (copytruncate): reading restarts at offset 0 (``truncations`` counts them).
      As with ``tail -F``, a file truncated and refilled past the old offset between two
      polls cannot be told from one that grew.
    * A missing file is waited for.
    """

    def __init__(
        self, path: str | os.PathLike[str], from_start: bool = True, poll_interval: float = 0.5
    ) -> None:
        super().__init__(poll_interval)
        self.path = os.fspath(path)
        self.from_start = from_start
        self.rotations = 0
        self.truncations = 0
        self.chunk_size = 64 * 1024

    def _middle_file(
        self, old: tuple[int, int] | None, new: tuple[int, int], old_mtime: float
    ) -> IO[bytes] | None:
        """``PATH.1`` (logrotate's and RotatingFileHandler's name) when it is neither the file
        just finished nor the new one, and was written after the finished one: it was rotated
        in and out between two polls (a stale ``PATH.1`` from long ago is left alone)."""
        try:
            fh = open(self.path + ".1", "rb")  # noqa: SIM115 - the caller closes it
        except OSError:
            return None
        st = os.fstat(fh.fileno())
        if (st.st_dev, st.st_ino) in (old, new) or st.st_mtime < old_mtime:
            fh.close()
            return None
        return fh

    def _stat_path(self) -> os.stat_result | None:
        try:
            return os.stat(self.path)
        except OSError:
            return None

    def lines(self) -> Generator[str, None, None]:
        fh: IO[bytes] | None = None
        ident: tuple[int, int] | None = None
        splitter = _LineSplitter()
        first = True
        try:
            while not self._stop.is_set():
                if fh is None:
                    try:
                        fh = open(self.path, "rb")  # noqa: SIM115 - closed in finally / on rotation
                    except OSError:
                        first = False  # appears later: read it from the start
                        self._stop.wait(self.poll_interval)
                        continue
                    st = os.fstat(fh.fileno())
                    ident = (st.st_dev, st.st_ino)
                    if first and not self.from_start:
                        fh.seek(0, os.SEEK_END)
                    first = False
                data = fh.read(self.chunk_size)
                if data:
                    yield from splitter.feed(data)
                    continue
                # At EOF: has the path moved on, or the file shrunk?
                st_path = self._stat_path()
                if st_path is not None and (st_path.st_dev, st_path.st_ino) != ident:
                    old_mtime = os.fstat(fh.fileno()).st_mtime
                    # Drain what the writer added to the old file since our last read.
                    while data := fh.read(self.chunk_size):
                        yield from splitter.feed(data)
                    tail = splitter.flush()
                    if tail:
                        yield tail
                    fh.close()
                    fh = None
                    self.rotations += 1
                    # rotated twice within one poll: the file between (now PATH.1) is read too
                    middle = self._middle_file(ident, (st_path.st_dev, st_path.st_ino), old_mtime)
                    if middle is not None:
                        with middle:
                            while data := middle.read(self.chunk_size):
                                yield from splitter.feed(data)
                        tail = splitter.flush()
                        if tail:
                            yield tail
                        self.rotations += 1
                    continue
                try:
                    size = os.fstat(fh.fileno()).st_size
                except OSError:
                    size = fh.tell()
                if size < fh.tell():
                    tail = splitter.flush()
                    if tail:
                        yield tail
                    fh.seek(0)
                    self.truncations += 1
                    continue
                self._stop.wait(self.poll_interval)
        finally:
            if fh is not None:
                fh.close()


def _read_fd_lines(fd: int, stop: threading.Event, poll_interval: float) -> Generator[str, None, None]:
    """Lines from a readable fd (pipe, tty) until EOF or ``stop``; waits with select."""
    splitter = _LineSplitter()
    sel = selectors.DefaultSelector()
    try:
        sel.register(fd, selectors.EVENT_READ)
        while not stop.is_set():
            if not sel.select(poll_interval):
                continue
            try:
                data = os.read(fd, 64 * 1024)
            except InterruptedError:
                continue
            except OSError:
                break
            if not data:
                break
            yield from splitter.feed(data)
        tail = splitter.flush()
        if tail and not stop.is_set():
            yield tail
    finally:
        sel.close()


class StreamFollower(LogFollower):
    """Follow a binary stream (stdin by default) until EOF or ``close()``."""

    def __init__(self, stream: IO[bytes] | None = None, poll_interval: float = 0.5) -> None:
        super().__init__(poll_interval)
        self.stream = stream

    def lines(self) -> Generator[str, None, None]:
        stream = self.stream
        if stream is None:
            if sys.stdin is None or sys.stdin.closed:
                raise LogSourceError("stdin is not available")
            stream = sys.stdin.buffer
        try:
            fd = stream.fileno()
        except (OSError, ValueError, AttributeError):
            fd = -1
        if fd >= 0:
            yield from _read_fd_lines(fd, self._stop, self.poll_interval)
            return
        splitter = _LineSplitter()  # no fd (in-memory stream): plain blocking reads
        while not self._stop.is_set():
            data = stream.read(64 * 1024)
            if not data:
                break
            yield from splitter.feed(data)
        tail = splitter.flush()
        if tail:
            yield tail


class CommandFollower(LogFollower):
    """Run a command (``journalctl -u vllm -f -o cat``, ``docker logs -f c``, ``kubectl logs
    -f pod``) and follow its stdout and stderr merged. Nothing is restarted: when the command
    exits, ``lines()`` ends and ``returncode`` / ``last_lines`` say why. ``close()`` stops
    the child (SIGTERM, then SIGKILL after ``kill_timeout``)."""

    def __init__(self, cmd: list[str] | str, poll_interval: float = 0.5, kill_timeout: float = 3.0) -> None:
        super().__init__(poll_interval)
        argv = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
        if not argv:
            raise LogSourceError("empty command")
        self.argv = argv
        self.kill_timeout = kill_timeout
        self.returncode: int | None = None
        self.last_lines: deque[str] = deque(maxlen=5)
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    @property
    def exited(self) -> bool:
        return self.returncode is not None

    def describe_exit(self) -> str:
        """One line for the operator: how the command ended."""
        if self.returncode is None:
            return f"{shlex.join(self.argv)}: still running"
        tail = " | ".join(redact_text(x) for x in self.last_lines)
        return f"{shlex.join(self.argv)} exited with status {self.returncode}" + (f": {tail}" if tail else "")

    def lines(self) -> Generator[str, None, None]:
        try:
            proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            self.returncode = 127
            raise LogSourceError(f"cannot run {self.argv[0]!r}: {exc.strerror or exc}") from exc
        with self._lock:
            self._proc = proc
        if self._stop.is_set():
            self._terminate()
        assert proc.stdout is not None
        eof = False
        try:
            for line in _read_fd_lines(proc.stdout.fileno(), self._stop, self.poll_interval):
                self.last_lines.append(line)
                yield line
            eof = not self._stop.is_set()
        finally:
            if eof:
                # Output ended (EOF): give the command time to exit by itself.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=self.kill_timeout)
            if proc.poll() is None:
                self._terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=self.kill_timeout)
            self.returncode = proc.returncode
            proc.stdout.close()

    def _terminate(self) -> None:
        with self._lock:
            proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            proc.wait(timeout=self.kill_timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=self.kill_timeout)

    def close(self) -> None:
        super().close()
        self._terminate()


def follow_file(
    path: str | os.PathLike[str], from_start: bool = True, poll_interval: float = 0.5
) -> FileFollower:
    """A :class:`FileFollower` for ``path`` (iterate ``.lines()``, stop with ``.close()``)."""
    return FileFollower(path, from_start=from_start, poll_interval=poll_interval)


def follow_stdin(poll_interval: float = 0.5, stream: IO[bytes] | None = None) -> StreamFollower:
    """A :class:`StreamFollower` on stdin (or ``stream``)."""
    return StreamFollower(stream, poll_interval=poll_interval)


def follow_command(cmd: list[str] | str, poll_interval: float = 0.5) -> CommandFollower:
    """A :class:`CommandFollower` running ``cmd`` (a list, or a string split like a shell)."""
    return CommandFollower(cmd, poll_interval=poll_interval)
