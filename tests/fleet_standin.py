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


def counters(page: str) -> dict[str, Fraction]:
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
class Gate:
    """Recorded seconds ``[t1, t2)`` (snapped to the pages' times by the replay) that a replay
    plays again and again once it reaches ``t2``, each counter carried on by what it grew over the
    span: the load as it was then, going on. With ``laps`` set, the replay goes on past ``t2`` after that many laps;
    unset, it never does (a recording ends within a minute or two, and a loaded machine reaches a
    test's later checks after its load has drained; a test can hold a phase until it has seen
    what it waits for)."""

    t1: float
    t2: float
    laps: int | None = None


@dataclass
class Replay:
    """One server: recorded pages and their times relative to the first, played by the clock
    through its ``gates`` (in order, none overlapping)."""

    pages: list[str]
    rel_t: list[float]
    speed: float = 1.0
    start: float = field(default_factory=time.time)
    clock: Callable[[], float] = time.time
    down: bool = False
    hits: int = 0
    loop: bool = False  # start over after the last page (a restart), else hold the last page
    gates: list[Gate] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._growth: list[dict[str, Fraction]] = []
        for k, g in enumerate(self.gates):
            i1, i2 = (max(0, bisect.bisect_right(self.rel_t, t) - 1) for t in (g.t1, g.t2))
            if i2 <= i1:
                raise ValueError(f"gate [{g.t1}, {g.t2}) holds no pages")
            if k and self.rel_t[i1] < self.gates[k - 1].t2:
                raise ValueError(f"gate [{g.t1}, {g.t2}) overlaps the one before it")
            g.t1, g.t2 = self.rel_t[i1], self.rel_t[i2]
            c1, c2 = counters(self.pages[i1]), counters(self.pages[i2])
            self._growth.append({key: c2[key] - v for key, v in c1.items() if key in c2})

    def _where(self, now: float) -> tuple[float, int | None, list[tuple[int, dict[str, Fraction]]]]:
        """Recorded seconds shown at ``now``, the gate looping then (its index), and the laps
        carried (each gate's laps and its counters' growth over a lap)."""
        pos = (now - self.start) * self.speed
        carried: list[tuple[int, dict[str, Fraction]]] = []
        for i, (g, growth) in enumerate(zip(self.gates, self._growth, strict=True)):
            t1, t2 = g.t1, g.t2
            if pos < t2:
                break
            lap, into = divmod(pos - t2, t2 - t1)
            if g.laps is None or lap < g.laps:  # at t2 the page of t1 with one lap's growth
                return t1 + into, i, [*carried, (int(lap) + 1, growth)]
            pos -= g.laps * (t2 - t1)
            carried.append((g.laps, growth))
        if self.loop and not self.gates and self.rel_t[-1] > 0:
            pos %= self.rel_t[-1] + 1e-9
        return pos, None, carried

    def position(self, now: float) -> float:
        """Recorded seconds (from the first page) of the page shown at ``now``."""
        return self._where(now)[0]

    def laps_to_leave(self, i: int, now: float) -> int:
        """Laps gate ``i`` must have for this replay to leave it at the end of the lap it is in
        (0 where it has not reached the gate, its laps where it has left)."""
        _, looping, carried = self._where(now)
        if looping == i:
            return carried[-1][0]
        return carried[i][0] if i < len(carried) else 0

    def page(self) -> str:
        pos, _, carried = self._where(self.clock())
        page = self.pages[max(0, bisect.bisect_right(self.rel_t, pos) - 1)]
        return self._carried(page, carried) if carried else page

    @staticmethod
    def _carried(page: str, carried: list[tuple[int, dict[str, Fraction]]]) -> str:
        lines = []
        for line in page.splitlines():
            key, _, value = line.rpartition(" ")
            grown = [laps * growth[key] for laps, growth in carried if key in growth]
            if grown:
                line = f"{key} {float(Fraction(float(value)) + sum(grown))!r}"
            lines.append(line)
        return "\n".join(lines) + "\n"


def release(replays: Sequence[Replay], i: int, now: float) -> None:
    """Let ``replays`` go on past their gate ``i`` together, each at the end of a lap: as many
    laps for each, so that one ahead of another stays as far ahead, and none goes back."""
    laps = max(r.laps_to_leave(i, now) for r in replays)
    for r in replays:
        r.gates[i].laps = laps


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
    path: Path,
    speed: float = 1.0,
    start: float | None = None,
    loop: bool = False,
    steady: bool = False,
    gates: Sequence[tuple[float, float]] = (),
) -> Replay:
    """``path``'s pages by the clock, held at ``gates`` (recorded seconds from the first page)
    until released; ``steady``: past them, its load goes on as in the middle half of it."""
    s = Session.load(path)
    scrapes = list(s.iter_scrapes())
    t0 = scrapes[0][0]
    held = [Gate(t1, t2) for t1, t2 in gates]
    if steady:
        first, last = load_span(path)
        held.append(Gate(first + (last - first) / 4, last - (last - first) / 4))
    return Replay(
        [text for _, text in scrapes],
        [t - t0 for t, _ in scrapes],
        speed=speed,
        start=time.time() if start is None else start,
        loop=loop,
        gates=held,
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
