"""Untrusted text (an instance name, a label value from Prometheus) as it is shown in a line of
the terminal or a log: control characters (newlines, carriage returns, terminal escapes) become
``\\xNN``/``\\n`` escapes, so that a name cannot forge a line or move the cursor."""

from __future__ import annotations

import re

_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_CONTROL_BUT_NEWLINE_RE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def _escape(m: re.Match[str]) -> str:
    c = m.group(0)
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(
        c, f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}"
    )


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with its control characters escaped (newlines kept where ``keep_newlines``)."""
    rx = _CONTROL_BUT_NEWLINE_RE if keep_newlines else _CONTROL_RE
    return rx.sub(_escape, text)
