"""Quantiles over a sliding time window: a ring of DDSketches, one per time slot.

DDSketch (DataDog's ``ddsketch``) answers any quantile within a relative error ``alpha``
of the exact sample quantile (the value at rank ``floor(q*(n-1))``), and sketches with the
same ``alpha`` merge exactly; so the window is ``slots`` sketches of ``window/slots``
seconds each, and a read merges the current slot with the ``slots-1`` before it: the
quantiles cover the requests of the last ``window - window/slots`` to ``window`` seconds.
Old slots are replaced lazily on the next add or read: no timer, no thread.
"""

from __future__ import annotations

from collections.abc import Iterable

from ddsketch import DDSketch


class WindowedSketch:
    """Sliding-window quantiles plus cumulative count and sum (the summary's counters)."""

    __slots__ = ("_alpha", "_idx", "_sketches", "_slot_s", "_slots", "count", "total")

    def __init__(self, window_s: float, slots: int, relative_accuracy: float) -> None:
        self._alpha = relative_accuracy
        self._slots = max(1, int(slots))
        self._slot_s = window_s / self._slots
        self._idx: list[int] = [-1] * self._slots
        self._sketches: list[DDSketch | None] = [None] * self._slots
        self.count = 0.0
        self.total = 0.0

    def _slot(self, now: float) -> DDSketch:
        idx = int(now // self._slot_s)
        i = idx % self._slots
        sk = self._sketches[i]
        if sk is None or self._idx[i] != idx:
            sk = DDSketch(self._alpha)
            self._sketches[i] = sk
            self._idx[i] = idx
        return sk

    def add(self, value: float, now: float, weight: float = 1.0) -> None:
        """Record ``value`` (``weight`` times) at monotonic time ``now``."""
        self._slot(now).add(value, weight)
        self.count += weight
        self.total += value * weight

    def add_many(self, values: Iterable[float], now: float) -> None:
        """Record several values; equal ones are added once with their multiplicity (the
        ITLs of one step are mostly the same number)."""
        sk = self._slot(now)
        counts: dict[float, int] = {}
        for v in values:
            counts[v] = counts.get(v, 0) + 1
        for v, c in counts.items():
            sk.add(v, float(c))
            self.count += c
            self.total += v * c

    def window(self, now: float) -> DDSketch | None:
        """The merged sketch of the window ending at ``now``; None when it holds nothing."""
        cur = int(now // self._slot_s)
        merged: DDSketch | None = None
        for idx, sk in zip(self._idx, self._sketches, strict=True):
            if sk is None or sk.count == 0 or not cur - self._slots < idx <= cur:
                continue
            if merged is None:
                merged = DDSketch(self._alpha)
            merged.merge(sk)
        return merged

    def quantiles(self, now: float, qs: Iterable[float]) -> list[tuple[float, float]]:
        """``[(q, value)]`` over the window; empty when the window holds no value."""
        merged = self.window(now)
        if merged is None:
            return []
        out = []
        for q in qs:
            v = merged.get_quantile_value(q)
            if v is not None:
                out.append((q, float(v)))
        return out
