"""The HTTP server under every stand-in (tests/vllm_standin.py, prom_standin.py, fleet_standin.py):
a threading server on a free loopback port, torn down when the block ends."""

from __future__ import annotations

import http.server
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class QuietServer(http.server.ThreadingHTTPServer):
    """Every test's HTTP server: daemon threads, a deep backlog, quiet when a client hangs up."""

    daemon_threads = True
    request_queue_size = 256  # a fleet's Prometheus scrapes many stand-ins at once

    def handle_error(self, request: object, client_address: object) -> None:
        """A client gone mid-answer (the timeout tests hang up on purpose) is no error; the
        stdlib printed its traceback to stderr, where it landed in a later test's captured CLI
        output (a make test's clone run failed on it)."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]


@contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` on 127.0.0.1 (a free port); yields the base URL."""
    srv = QuietServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
