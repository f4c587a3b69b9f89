"""A stand-in for a vLLM server's /metrics endpoint, serving pages recorded from real servers.

Used where the real server cannot be made to misbehave on demand (a hanging socket,
an HTML error page from a proxy, a 40 MB page, a restart between two scrapes). The
pages themselves are real captures; the misbehaviour is injected. Tests that use it
say so in their docstrings.
"""

from __future__ import annotations

import http.server
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from advisor.sources.session import Session
from tests.http_standin import serving

# built once: making 36 MB for each request held the answer's headers back past a 1 s scrape
# timeout on a busy machine (counted a timeout where too_large is true, make test 2026-12-06)
HUGE_PAGE = b"# HELP x y\n" + b"vllm:junk 1\n" * 3_000_000


class StandIn:
    def __init__(self, pages: list[str]) -> None:
        self.pages = pages
        self.i = 0
        self.mode = "ok"  # ok | hang | html | huge | garbage | http503 | trickle | trickle_all | gzip_bomb
        self.hits = 0
        self.bomb: bytes | None = None
        self.lock = threading.Lock()

    def next_page(self) -> str:
        with self.lock:
            page = self.pages[min(self.i, len(self.pages) - 1)]
            self.i += 1
            return page


def gzip_bomb(decoded_mib: int = 64) -> bytes:
    """A small gzip body (about 0.1% of its size) that decodes to ``decoded_mib`` MiB of zeros."""
    comp = zlib.compressobj(1, zlib.DEFLATED, 31)
    zeros = b"\0" * (1 << 20)
    out = [comp.compress(zeros) for _ in range(decoded_mib)]
    out.append(comp.flush())
    return b"".join(out)


def session_pages(path: Path) -> list[str]:
    s = Session.load(path)
    return [text for _, text in s.iter_scrapes()]


@contextmanager
def serve(standin: StandIn) -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def do_GET(self) -> None:
            standin.hits += 1
            mode = standin.mode
            if mode == "hang":
                time.sleep(3)
            # headers, then a byte every 0.5 s (on /metrics; on every path with "trickle_all")
            if (mode == "trickle" and self.path.endswith("/metrics")) or mode == "trickle_all":
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", "100000")
                self.end_headers()
                for _ in range(240):
                    if standin.mode != mode:
                        return
                    try:
                        self.wfile.write(b"#")
                        self.wfile.flush()
                    except OSError:
                        return
                    time.sleep(0.5)
                return
            if mode == "gzip_bomb":
                body = standin.bomb or gzip_bomb()
                standin.bomb = body
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Encoding", "gzip")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass
                return
            if mode == "http503":
                self.send_response(503)
                self.end_headers()
                self.wfile.write(b"Service Unavailable")
                return
            if mode == "html":
                body = b"<html><body><h1>502 Bad Gateway</h1></body></html>"
                ctype = "text/html"
            elif mode == "huge":
                body = HUGE_PAGE
                ctype = "text/plain"
            elif mode == "garbage":
                body = b"\x00\xff\xfe garbage { not prometheus\n"
                ctype = "text/plain"
            else:
                body = standin.next_page().encode()
                ctype = "text/plain; version=0.0.4"
            try:
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass

    with serving(Handler) as base:
        yield base
