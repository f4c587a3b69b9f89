"""Exact per-step sums from the stat-logger plugin: what a step-time model fits from.

The plugin (docs/plugin.md, "Per-step records") keeps, per timing ``source``, running sums over
every timed engine step of 1, t, p, d, b and the second-order terms of the least-squares normal
equations for ``t = a + b*d + c*p`` (t: step seconds, d: decode tokens, p: prefill tokens, b:
requests in the step). Their increase between two pages is the exact sums over the steps taken
in between, whatever the scrape interval: :func:`step_sums` gives them per interval, reset-aware
(a restart counts from zero, as every counter in the window), and :func:`fit` solves the normal
equations over any set of intervals (their sums add).

``source``: ``iteration_details`` (the engine's own step records: exact tokens and time, vLLM
>= 0.26 with ``--enable-logging-iteration-details``) or ``frontend`` (steps timed between their
stats' arrivals in the API server); :func:`default_source` prefers the engine's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields

from advisor.derive.window import Window
from advisor.plugin import names as pn

_SUMS = (
    ("n", pn.FIT_STEPS),
    ("seconds", pn.FIT_SECONDS),
    ("prefill", pn.FIT_PREFILL_TOKENS),
    ("decode", pn.FIT_DECODE_TOKENS),
    ("requests", pn.FIT_REQUESTS),
    ("seconds_sq", pn.FIT_SECONDS_SQUARED),
    ("prefill_sq", pn.FIT_PREFILL_TOKENS_SQUARED),
    ("decode_sq", pn.FIT_DECODE_TOKENS_SQUARED),
    ("prefill_decode", pn.FIT_PREFILL_DECODE_TOKENS),
    ("seconds_prefill", pn.FIT_SECONDS_PREFILL_TOKENS),
    ("seconds_decode", pn.FIT_SECONDS_DECODE_TOKENS),
)
SOURCES = (pn.SOURCE_DETAILS, pn.SOURCE_FRONTEND)


@dataclass(frozen=True)
class StepSums:
    """Sums over the timed steps of one interval [t0, t1] (or of several added together)."""

    t0: float
    t1: float
    source: str
    n: float = 0.0  # steps
    seconds: float = 0.0  # sum of t
    prefill: float = 0.0  # sum of p
    decode: float = 0.0  # sum of d
    requests: float = 0.0  # sum of b
    seconds_sq: float = 0.0
    prefill_sq: float = 0.0
    decode_sq: float = 0.0
    prefill_decode: float = 0.0
    seconds_prefill: float = 0.0
    seconds_decode: float = 0.0

    @property
    def mean_step_s(self) -> float | None:
        return self.seconds / self.n if self.n > 0 else None

    @property
    def mean_prefill(self) -> float | None:
        return self.prefill / self.n if self.n > 0 else None

    @property
    def mean_decode(self) -> float | None:
        return self.decode / self.n if self.n > 0 else None

    def __add__(self, other: StepSums) -> StepSums:
        vals = {f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)[3:]}
        return StepSums(min(self.t0, other.t0), max(self.t1, other.t1), self.source, **vals)


def default_source(window: Window, seconds: float | None = None) -> str | None:
    """The engine's step records when the window has any, else the front-end's; None without
    the plugin's step sums."""
    best = None
    for src in SOURCES:
        steps = window.counter_steps(pn.FIT_STEPS, seconds, {pn.SOURCE_LABEL: src})
        if any(d > 0 for _, _, d in steps):
            return src
        if steps and best is None:
            best = src
    return best


def step_sums(window: Window, seconds: float | None = None, source: str | None = None) -> list[StepSums]:
    """Per interval between consecutive pages of the last ``seconds`` (None: the whole window),
    the exact sums over the steps the plugin timed in it (``source``: see the module; None: the
    default). Intervals without a timed step are included with n == 0; empty without the plugin."""
    src = source or default_source(window, seconds)
    if src is None:
        return []
    match = {pn.SOURCE_LABEL: src}
    cols = {
        attr: {(t0, t1): d for t0, t1, d in window.counter_steps(name, seconds, match)}
        for attr, name in _SUMS
    }
    out = []
    for (t0, t1), n in cols["n"].items():
        vals = {attr: cols[attr].get((t0, t1), 0.0) for attr, _ in _SUMS}
        vals["n"] = max(n, 0.0)
        out.append(StepSums(t0, t1, src, **vals))
    return out


def total(sums: Iterable[StepSums]) -> StepSums | None:
    out: StepSums | None = None
    for s in sums:
        out = s if out is None else out + s
    return out


@dataclass(frozen=True)
class StepFit:
    """``t = base_s + per_decode_s * d + per_prefill_s * p`` over ``steps`` steps; ``rmse_s``:
    the per-step residual (from the sum of t squared: exact, not per interval)."""

    base_s: float
    per_decode_s: float
    per_prefill_s: float
    steps: float
    rmse_s: float | None

    def at(self, decode: float, prefill: float) -> float:
        return self.base_s + self.per_decode_s * decode + self.per_prefill_s * prefill


def _solve(m: Sequence[Sequence[float]], y: Sequence[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; None when singular."""
    k = len(y)
    a = [[*row, y[i]] for i, row in enumerate(m)]
    scale = max((abs(a[i][i]) for i in range(k)), default=0.0) or 1.0
    for col in range(k):
        piv = max(range(col, k), key=lambda r: abs(a[r][col]))
        if abs(a[piv][col]) < 1e-12 * scale:
            return None
        a[col], a[piv] = a[piv], a[col]
        for r in range(k):
            if r != col:
                f = a[r][col] / a[col][col]
                a[r] = [u - f * v for u, v in zip(a[r], a[col], strict=True)]
    return [a[i][k] / a[i][i] for i in range(k)]


def fit(sums: StepSums | Iterable[StepSums]) -> StepFit | None:
    """Least squares of the step time on decode and prefill tokens over exactly the steps in
    ``sums``; a feature with no spread (only decode steps, say) is left out (its coefficient
    0), and so is one whose coefficient comes out negative (not physical; the rest refitted,
    as advisor/predict/perfmodel.fit_step_time does). None with fewer than 3 steps or nothing
    to fit."""
    s = sums if isinstance(sums, StepSums) else total(sums)
    if s is None or s.n < 3:
        return None
    use_d = s.decode_sq * s.n - s.decode**2 > 1e-9 * max(s.decode_sq * s.n, 1.0)
    use_p = s.prefill_sq * s.n - s.prefill**2 > 1e-9 * max(s.prefill_sq * s.n, 1.0)
    # the normal equations' rows/columns: 1, d, p
    rows = {"1": (s.n, s.decode, s.prefill), "d": (s.decode, s.decode_sq, s.prefill_decode)}
    rows["p"] = (s.prefill, s.prefill_decode, s.prefill_sq)
    rhs = {"1": s.seconds, "d": s.seconds_decode, "p": s.seconds_prefill}
    keep = ["1"] + (["d"] if use_d else []) + (["p"] if use_p else [])
    col = {"1": 0, "d": 1, "p": 2}
    while True:
        m = [[rows[r][col[c]] for c in keep] for r in keep]
        coef = _solve(m, [rhs[r] for r in keep])
        if coef is None:
            return None
        got = dict(zip(keep, coef, strict=True))
        negative = [f for f in keep[1:] if got[f] < 0]
        if not negative:
            break
        keep.remove(min(negative, key=lambda f: got[f]))  # not physical: drop it, fit the rest
    a, b, c = got.get("1", 0.0), got.get("d", 0.0), got.get("p", 0.0)
    # residual sum of squares from the sums: sum (t - a - b d - c p)^2, expanded
    rss = (
        s.seconds_sq
        - 2 * (a * s.seconds + b * s.seconds_decode + c * s.seconds_prefill)
        + a * a * s.n
        + b * b * s.decode_sq
        + c * c * s.prefill_sq
        + 2 * (a * b * s.decode + a * c * s.prefill + b * c * s.prefill_decode)
    )
    rmse = math.sqrt(max(rss, 0.0) / s.n) if s.n > 0 else None
    return StepFit(a, b, c, s.n, rmse)
