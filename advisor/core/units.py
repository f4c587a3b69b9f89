"""Units: reading durations and writing a value with its unit, the same everywhere."""

from __future__ import annotations

import re

DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")


def parse_duration(text: str | int | float) -> float:
    """``500ms``, ``30s``, ``2m``, ``1h`` or a number of seconds -> seconds; ValueError else."""
    if isinstance(text, int | float):
        return float(text)
    m = DURATION_RE.match(str(text).strip())
    if not m:
        raise ValueError(f"bad duration {text!r} (use e.g. 30s, 2m, 1h)")
    mult = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2)]
    return float(m.group(1)) * mult


def fmt(x: float | None, unit: str) -> str:
    if x is None:
        return "unknown"
    if unit == "s":
        return f"{x * 1000:.1f} ms" if abs(x) < 1 else f"{x:.2f} s"
    if unit in ("tok/s",):  # three significant digits below 100 (a CPU engine's 0.07 tok/s)
        return f"{x:,.0f} tok/s" if abs(x) >= 100 or x == 0 else f"{x:.3g} tok/s"
    if unit == "/s":
        return f"{x:.2f}/s"
    return f"{x:.1f}"


_BYTE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}


def parse_bytes(text: str | int | float) -> float:
    """A size as the advice prints it or as typed: ``9GiB``, ``9 GiB``, ``512MiB``, ``8GB``,
    ``6442450944``; ValueError on anything else (and on a negative or non-finite size)."""
    if isinstance(text, bool):
        raise ValueError(f"not a size: {text!r}")
    if isinstance(text, int | float):
        x = float(text)
    else:
        s = str(text).strip()
        i = len(s)
        while i and s[i - 1].isalpha():
            i -= 1
        number, unit = s[:i].strip(), s[i:].lower()
        if unit not in _BYTE_UNITS or not number:
            raise ValueError(f"not a size (e.g. 9GiB, 512MiB, 6442450944): {text!r}")
        try:
            x = float(number) * _BYTE_UNITS[unit]
        except ValueError:
            raise ValueError(f"not a size (e.g. 9GiB, 512MiB, 6442450944): {text!r}") from None
    if x != x or x in (float("inf"), float("-inf")) or x < 0:
        raise ValueError(f"not a size: {text!r}")
    return x
