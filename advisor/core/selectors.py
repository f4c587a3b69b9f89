"""PromQL selectors: label matchers read and checked one by one, and values quoted. Shared by
the Prometheus source (which queries with them) and the alerts (which write them)."""

from __future__ import annotations

import re

MATCHER_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*')


class SelectorError(ValueError):
    """A selector that is not label matchers in braces; the message names the part."""


def selector_matchers(selector: str) -> str:
    """The matchers inside ``{...}`` (``{job="vllm"}`` -> ``job="vllm"``), checked one by one.
    Raises SelectorError with the part it could not read."""
    s = selector.strip()
    if not s:
        return ""
    if not (s.startswith("{") and s.endswith("}")):
        raise SelectorError(f'a selector is label matchers in braces, like {{job="vllm"}}: {s!r}')
    inner = s[1:-1].strip().rstrip(",")
    if not inner:
        return ""
    pos = 0
    parts = []
    while pos < len(inner):
        m = MATCHER_RE.match(inner, pos)
        if m is None:
            raise SelectorError(f"cannot read the matcher at {inner[pos:]!r} in {s!r}")
        parts.append(f'{m.group(1)}{m.group(2)}"{m.group(3)}"')
        pos = m.end()
        if pos < len(inner):
            if inner[pos] != ",":
                raise SelectorError(f"expected ',' at {inner[pos:]!r} in {s!r}")
            pos += 1
    return ",".join(parts)


def quote(value: str) -> str:
    """A label value as a PromQL string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def selector(*matchers: str) -> str:
    return "{" + ",".join(m for m in matchers if m) + "}"
