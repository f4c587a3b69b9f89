"""The dictionaries vLLM prints in its start-up lines (``non-default args: {...}``, the engine
config's ``key=value, ...``) read leniently: a literal where Python can read it, a string
where it cannot, and a line cut short still gives what it holds. Linear in the line's length.
"""

from __future__ import annotations

import ast
import re
from itertools import pairwise
from typing import Any

# --------------------------------------------------------------------------- scanners


def _scanner(sep: str) -> re.Pattern[str]:
    """The characters :func:`_scan` looks at: quotes, backslash, brackets and ``sep``."""
    return re.compile("[" + re.escape("\\'\"()[]{}" + sep) + "]")


_SCAN_RE = {sep: _scanner(sep) for sep in (",", ":", "")}


def _scan(text: str, sep: str | None = None) -> tuple[list[int], int, str]:
    """Walk ``text`` quote- and bracket-aware: the positions of ``sep`` outside quotes and
    ()[]{} nesting, the bracket depth at the end, and the quote still open at the end. Only
    the characters that matter are visited (a regular expression skips the rest)."""
    cuts: list[int] = []
    depth = 0
    quote = ""
    skip_to = -1
    pattern = _SCAN_RE.get(sep or "") or _scanner(sep or "")
    for m in pattern.finditer(text):
        i = m.start()
        if i < skip_to:
            continue  # the character after a backslash inside quotes
        c = text[i]
        if quote:
            if c == "\\":
                skip_to = i + 2
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
        elif c == sep and depth == 0:
            cuts.append(i)
    return cuts, depth, quote


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside quotes and ()[]{} nesting. Tolerates unbalanced input."""
    cuts, _, _ = _scan(text, sep)
    bounds = [-1, *cuts, len(text)]
    return [text[x + 1 : y] for x, y in pairwise(bounds)]


def open_depth(text: str) -> int:
    """Bracket depth at the end of ``text`` (quote-aware); an open quote counts as 1."""
    _, depth, quote = _scan(text)
    return depth + (1 if quote else 0)


def _literal(text: str) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False, None


# vLLM's start-up dicts nest 3 levels (compilation_config's pass_config); deeper nesting is
# not read pair by pair. Each level reads its own text once more, so the whole line costs at
# most this many passes: linear in its length (a 23 KB line of 2,000 levels took 5.5 s).
MAX_DICT_DEPTH = 8


def lenient_dict(text: str, _depth: int = 0) -> tuple[dict[str, Any], list[str]]:
    """Parse a Python dict repr, keeping every ``key: value`` pair that parses.

    Values that ``ast.literal_eval`` rejects (``<CompilationMode.NONE: 0>``, objects) are
    left out and their keys returned in the second list; nested dicts are parsed the same
    way, to ``MAX_DICT_DEPTH`` levels (a dict nested deeper is left out and named). A dict
    cut short (truncated line) keeps the complete pairs."""
    text = text.strip()
    ok, val = _literal(text)
    if ok and isinstance(val, dict):
        return {str(k): v for k, v in val.items()}, []
    body = text[1:] if text.startswith("{") else text
    if body.endswith("}") and open_depth(body[:-1]) == 0:
        body = body[:-1]
    out: dict[str, Any] = {}
    unparsed: list[str] = []
    for item in split_top(body):
        item = item.strip()
        if not item:
            continue
        kv = split_top(item, ":")
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
        elif raw.startswith("{") and _depth < MAX_DICT_DEPTH:
            sub, sub_unparsed = lenient_dict(raw, _depth + 1)
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


def parse_kv_config(text: str) -> dict[str, Any]:
    """``model='/m', tensor_parallel_size=1, x=Foo(a=1, b=2)`` -> dict. Quoted strings are
    unquoted, ints/floats/bools/None converted, nested ()/[]/{} values kept as strings."""
    out: dict[str, Any] = {}
    last: str | None = None
    for part in split_top(text):
        m = _KEY_EQ_RE.match(part)
        if m:
            last = m.group(1)
            out[last] = _scalar(m.group(2))
        elif last is not None and part.strip():
            prev = out[last]
            out[last] = f"{prev}, {part.strip()}" if prev is not None else part.strip()
    return out
