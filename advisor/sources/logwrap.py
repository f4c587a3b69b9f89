"""Lines that a terminal or ``kubectl logs`` hard-wrapped, joined again (:class:`LineJoiner`,
:func:`join_lines`): a continuation is told from a new record by vLLM's own prefixes and by
what a record's end looks like.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from advisor.sources.logdicts import open_depth
from advisor.sources.logprefix import (
    LEVEL_RE,
    MAX_LINE_CHARS,
    PROCESS_RE,
    clean_line,
    json_record,
    strip_outer,
)

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


# A periodic stats line (``Avg prompt throughput: ...``) is whole once it has its KV cache usage
# (every vLLM version prints it, V1 and V0) and ends as a record ends; before that, the lines a
# terminal broke it into are its rest, whatever the terminal's width and whether the copy kept
# the blanks at the ends of the rows.
_STATS_MARKS = ("Avg prompt throughput", "Avg generation throughput")
_STATS_KV_RE = re.compile(r"KV cache usage:\s*[\d.]+\s*%")
_STATS_WORDS = frozenset(
    [
        "avg",
        "prompt",
        "throughput",
        "generation",
        "tokens/s",
        "running",
        "reqs",
        "waiting",
        "swapped",
        "pending",
        "gpu",
        "cpu",
        "xpu",
        "npu",
        "hpu",
        "tpu",
        "kv",
        "cache",
        "usage",
        "prefix",
        "hit",
        "rate",
        "engine",
        "mm",
        "external",
        "preemptions",
        "corrupted",
        "deferred",
    ]
)
_NUMBER_RE = re.compile(r"^\d+(?:\.\d*)?$|^\.\d+$")


_HEADS = ("Avg prompt throughput", "Avg generation throughput")
_ENGINE_HEAD_RE = re.compile(r"^Engine(?:\s+(?:\d+(?::(?:\s+(?P<rest>.*))?)?)?)?$")


def _vllm_message(clean: str) -> str | None:
    """The text after vLLM's own prefixes (process, level and stamp); None without them."""
    rest, _, _ = strip_outer(clean, 1970, None)
    m = PROCESS_RE.match(rest)
    if m:
        rest = rest[m.end() :]
    lm = LEVEL_RE.match(rest)
    if lm is None and "-" in rest and ":" in rest:
        lm = LEVEL_RE.search(rest)  # after other text on the row (a progress bar without its newline)
    return rest[lm.end() :] if lm else (None if m is None else rest)


def _stats_head(msg: str) -> bool:
    """``msg`` is a stats line, or its start cut by a wrap (``Engine 000: Avg pro``)."""
    if any(m in msg for m in _STATS_MARKS):
        return True
    if msg.strip() and "Engine".startswith(msg.strip()):
        return True
    m = _ENGINE_HEAD_RE.match(msg.rstrip())
    if m is not None:
        msg = m["rest"] or ""
        if not msg:
            return True
    msg = msg.rstrip()
    return bool(msg) and any(h.startswith(msg) for h in _HEADS)


def _stats_open(line: str) -> bool:
    """A stats line that is not whole yet (cut before its KV cache usage, or mid-part)."""
    return not (_STATS_KV_RE.search(line) and _RECORD_END_RE.search(line))


def _word(w: str) -> str:
    return w.strip(",:.%").lower()


def _known(w: str) -> bool:
    c = _word(w)
    return c in _STATS_WORDS or bool(_NUMBER_RE.match(c))


def _stats_join(held: str, piece: str) -> str:
    """Two rows of a wrapped stats line as one: a blank the copy trimmed at the row's end is put
    back where the words on both sides are whole words of a stats line; a word or a number
    broken by the wrap is joined as it was."""
    if not held or not piece or held[-1].isspace() or piece[0].isspace():
        return held + piece
    if piece[0] in ",:%." or held[-1] in "([{":
        return held + piece
    if held[-1] in ",:":
        return held + " " + piece
    a = held.rsplit(None, 1)[-1]
    b = piece.split(None, 1)[0]
    if _known(a + b) and not (_NUMBER_RE.match(_word(a)) and not _NUMBER_RE.match(_word(b))):
        return held + piece  # "K" + "V", "tok" + "ens/s", "95." + "7%", "1" + "5"
    if _known(a) and _known(b):
        return held + " " + piece  # "KV" + "cache", "0.0" + "tokens/s", "Engine" + "000:"
    return held + piece


def _unglue(line: str) -> list[str]:
    """Split records glued by a stray ``$`` end-of-line mark; drop a trailing one from a vLLM
    line (``cat -A`` marks every line so)."""
    if "$" not in line:
        return [line]
    parts = _GLUE_RE.split(line.rstrip("\r\n"))
    out = []
    for part in parts:
        if part.endswith("$") and (PROCESS_RE.search(part[:120]) or LEVEL_RE.search(part[:200])):
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
        self._stats = False  # the held line is a stats line not yet whole

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
                if open_depth(tail) > 0:
                    return True
                return marker == _CONFIG_MARKER and tail.rstrip().endswith((",", "="))
        return False

    @staticmethod
    def _json(line: str) -> bool:
        """A whole record of vLLM's JSON log format (0.32+): never wrapped, never a piece."""
        rest, _, _ = strip_outer(clean_line(line), 1970, None)
        m = PROCESS_RE.match(rest)
        if m:
            rest = rest[m.end() :]
        return rest[:2] == '{"' and json_record(rest) is not None

    @classmethod
    def _hold(cls, line: str) -> bool:
        if cls._json(line):
            return False
        return _CONFIG_MARKER in line or cls._open(line)

    @staticmethod
    def _piece(line: str) -> str | None:
        """The line minus its outer prefixes when it has no recognised prefix, else None."""
        clean = clean_line(line)
        if not clean.strip():
            return None
        rest, _, _ = strip_outer(clean, 1970, None)  # only the text matters here
        if PROCESS_RE.match(rest) or LEVEL_RE.match(rest) or _CONT_PREFIX_RE.match(rest):
            return None
        if rest[:2] == '{"' and json_record(rest) is not None:
            return None
        return rest

    @staticmethod
    def _wrappable(clean: str) -> bool:
        """A vLLM line as long as a terminal is wide that does not end as a record ends: it
        may have been hard-wrapped. (A complete stats line ends with ``%``, and is passed on at
        once: a live follower does not wait for the next line to see it.)"""
        if not WRAP_MIN_COLS <= len(clean) <= WRAP_MAX_COLS or _RECORD_END_RE.search(clean):
            return False
        rest, _, _ = strip_outer(clean, 1970, None)
        return bool(PROCESS_RE.match(rest) or LEVEL_RE.match(rest))

    def feed(self, line: str) -> list[str]:
        if "$" in line:
            return [x for part in _unglue(line) for x in self._feed(part)]
        return self._feed(line)

    def _feed(self, line: str) -> list[str]:
        out: list[str] = []
        if self._pending is not None and self._stats:
            piece = self._piece(line) if self._count < self.max_continuations else None
            if (
                piece is not None
                and len(clean_line(line)) <= WRAP_MAX_COLS
                and not _NOT_CONT_RE.match(piece)
                and piece.strip()
            ):
                joined = _stats_join(self._pending, piece)[:MAX_LINE_CHARS]
                self._count += 1
                if (
                    _stats_open(joined)
                    and len(joined) < MAX_LINE_CHARS
                    and self._count < self.max_continuations
                ):
                    self._pending = joined
                    return out
                self._pending = None
                self._stats = False
                out.append(joined)
                return out
            out.append(self._pending)
            self._pending = None
            self._stats = False
            self._wrap_width = None
        if self._pending is not None:
            piece = self._piece(line) if self._count < self.max_continuations else None
            wrapped = (
                piece is not None
                and self._wrap_width is not None
                and len(clean_line(line)) <= self._wrap_width  # a wrap's rest is never wider than it
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
                if self._wrap_width is not None and len(clean_line(line)) != self._wrap_width:
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
        clean = clean_line(line)
        msg = _vllm_message(clean) if len(clean) <= WRAP_MAX_COLS or "Avg" in clean else None
        head = (msg is not None and _stats_head(msg)) or any(mk in clean for mk in _STATS_MARKS)
        if head and _stats_open(clean):
            self._pending = clean
            self._count = 0
            self._stats = True
            self._wrap_width = None
        elif self._hold(clean):
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
        self._stats = False
        return [p]


def join_lines(lines: Iterable[str], max_continuations: int = 200) -> Iterator[str]:
    """Logical lines from physical ones (see :class:`LineJoiner`)."""
    joiner = LineJoiner(max_continuations)
    for line in lines:
        yield from joiner.feed(line)
    yield from joiner.flush()
