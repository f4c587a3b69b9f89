"""Many stand-in vLLM servers in one process: each replays /metrics pages recorded from a real
server, by the clock (the page recorded ``(now - start) * speed`` seconds into the session), so
that any number of scrapers (a Prometheus, the advisor's own ``--url`` scrape) read the same
server state at the same moment, as they would read a real server.

Every server answers on ``/s/<name>/metrics`` of one port (``base/s/<name>`` is its vLLM base
URL). A Prometheus scrapes them as targets with their own ``instance`` label (``__metrics_path__``
set per target: see :func:`scrape_config`). Used where a fleet cannot run here (tens to hundreds
of vLLM servers); the pages are real captures. Tests that use it say so.
"""

from __future__ import annotations

import bisect
import http.server
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from advisor.core import names
from advisor.sources.metrics import parse_page
from advisor.sources.session import Session
from tests.http_standin import serving

COUNTER_SUFFIXES = ("_total", "_count", "_sum", "_bucket")  # what only grows on a page


def _counters(page: str) -> dict[str, Fraction]:
    """The page's counter samples (histogram buckets, counts and sums included) by series, exact
    (carried on in fractions and rounded once, a counter never falls by a rounding: Prometheus
    would read that as a reset)."""
    out = {}
    for line in page.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            if key.split("{", 1)[0].endswith(COUNTER_SUFFIXES):
                out[key] = Fraction(float(value))
    return out


@dataclass
class Replay:
    """One server: recorded pages and their times relative to the first.

    ``steady`` (recorded seconds ``(t1, t2)``): past ``t2`` the pages of ``[t1, t2)`` come again
    and again, each counter carried on by what it grew over that span: the load as it was then,
    going on for as long as a test needs it (a recording ends within a minute or two, and a
    loaded machine reaches a test's later checks after its load has drained)."""

    pages: list[str]
    rel_t: list[float]
    speed: float = 1.0
    start: float = field(default_factory=time.time)
    clock: Callable[[], float] = time.time
    down: bool = False
    hits: int = 0
    loop: bool = False  # start over after the last page (a restart), else hold the last page
    steady: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        self._growth: dict[str, Fraction] = {}
        if self.steady is not None:
            i1, i2 = (max(0, bisect.bisect_right(self.rel_t, t) - 1) for t in self.steady)
            if i2 <= i1:
                raise ValueError(f"steady span {self.steady} holds no pages")
            self._i1, self._i2 = i1, i2
            c1, c2 = _counters(self.pages[i1]), _counters(self.pages[i2])
            self._growth = {k: c2[k] - v for k, v in c1.items() if k in c2}

    def page(self) -> str:
        elapsed = (self.clock() - self.start) * self.speed
        if self.steady is not None and elapsed >= self.rel_t[self._i2]:
            t1 = self.rel_t[self._i1]
            laps, into = divmod(elapsed - t1, self.rel_t[self._i2] - t1)
            i = max(self._i1, bisect.bisect_right(self.rel_t, t1 + into) - 1)
            return self._carried(self.pages[i], laps)
        if self.loop and self.rel_t[-1] > 0:
            elapsed %= self.rel_t[-1] + 1e-9
        i = max(0, bisect.bisect_right(self.rel_t, elapsed) - 1)
        return self.pages[i]

    def _carried(self, page: str, laps: float) -> str:
        lines = []
        for line in page.splitlines():
            key, _, value = line.rpartition(" ")
            if key in self._growth:
                line = f"{key} {float(Fraction(float(value)) + int(laps) * self._growth[key])!r}"
            lines.append(line)
        return "\n".join(lines) + "\n"


def _pages(path: Path) -> list[tuple[float, float]]:
    """Each page's recorded seconds from the first, and its requests running (read as the advisor
    reads them, vLLM's spellings of every version included)."""
    scrapes = list(Session.load(path).iter_scrapes())
    return [
        (t - scrapes[0][0], parse_page(page, t, strict=False).total(names.NUM_RUNNING) or 0.0)
        for t, page in scrapes
    ]


def load_span(path: Path) -> tuple[float, float]:
    """Recorded seconds (from the first page) of the first and the last page with a request
    running."""
    busy = [t for t, running in _pages(path) if running > 0]
    if not busy:
        raise ValueError(f"{path.name}: no request ever ran")
    return busy[0], busy[-1]


def idle_s(path: Path) -> float:
    """Recorded seconds from the first page to the last one before a request runs."""
    pages = _pages(path)
    for (t, _), (_, running) in itertools.pairwise(pages):
        if running > 0:
            return t
    raise ValueError(f"{path.name}: no request ever ran")


def session_replay(
    path: Path, speed: float = 1.0, start: float | None = None, loop: bool = False, steady: bool = False
) -> Replay:
    """``path``'s pages by the clock; ``steady``: its load goes on as in the middle half of it."""
    s = Session.load(path)
    scrapes = list(s.iter_scrapes())
    t0 = scrapes[0][0]
    span = None
    if steady:
        first, last = load_span(path)
        span = (first + (last - first) / 4, last - (last - first) / 4)
    return Replay(
        [text for _, text in scrapes],
        [t - t0 for t, _ in scrapes],
        speed=speed,
        start=time.time() if start is None else start,
        loop=loop,
        steady=span,
    )


@contextmanager
def serve(replays: dict[str, Replay]) -> Iterator[str]:
    """Serve ``replays`` (name -> Replay); yields the base URL (``base/s/<name>/metrics``)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: object) -> None:
            pass

        def do_GET(self) -> None:
            parts = self.path.split("?", 1)[0].strip("/").split("/")
            r = (
                replays.get(parts[1])
                if len(parts) == 3 and parts[0] == "s" and parts[2] == "metrics"
                else None
            )
            if r is None or r.down:
                code, body, ctype = (503 if r is not None else 404), b"unavailable\n", "text/plain"
            else:
                r.hits += 1
                code, body, ctype = 200, r.page().encode(), "text/plain; version=0.0.4; charset=utf-8"
            try:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass

    with serving(Handler) as base:
        yield base


def scrape_config(
    job: str, base: str, names: Sequence[str], instance: Callable[[str], str]
) -> dict[str, Any]:
    """A Prometheus scrape job for stand-ins ``names`` on ``base``: one target each, its
    ``instance`` label ``instance(name)`` (as a relabelled vLLM pod's would be)."""
    hostport = base.split("://", 1)[1]
    return {
        "job_name": job,
        "static_configs": [
            {
                "targets": [hostport],
                "labels": {"__metrics_path__": f"/s/{n}/metrics", "instance": instance(n)},
            }
            for n in names
        ],
    }
