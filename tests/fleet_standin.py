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
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advisor.sources.session import Session
from tests.http_standin import serving


@dataclass
class Replay:
    """One server: recorded pages and their times relative to the first."""

    pages: list[str]
    rel_t: list[float]
    speed: float = 1.0
    start: float = field(default_factory=time.time)
    clock: Callable[[], float] = time.time
    down: bool = False
    hits: int = 0
    loop: bool = False  # start over after the last page (a restart), else hold the last page

    def page(self) -> str:
        elapsed = (self.clock() - self.start) * self.speed
        if self.loop and self.rel_t[-1] > 0:
            elapsed %= self.rel_t[-1] + 1e-9
        i = max(0, bisect.bisect_right(self.rel_t, elapsed) - 1)
        return self.pages[i]


def session_replay(path: Path, speed: float = 1.0, start: float | None = None, loop: bool = False) -> Replay:
    s = Session.load(path)
    scrapes = list(s.iter_scrapes())
    t0 = scrapes[0][0]
    return Replay(
        [text for _, text in scrapes],
        [t - t0 for t, _ in scrapes],
        speed=speed,
        start=time.time() if start is None else start,
        loop=loop,
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
