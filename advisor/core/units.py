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
