"""Every HTTP fetch the advisor makes goes through here: one overall deadline, one size limit.

vLLM's ``/metrics``, its ``/version``, ``record``, ``explain --url``, ``inspect --url``,
``baseline save`` from a daemon: all call :meth:`Client.get`. The deadline covers
connecting, the headers and the whole body (a server that trickles one byte every half
second is cut off at the deadline, not per read); the size limit counts *decoded* bytes, so
a gzip bomb stops at the limit instead of filling memory. The body is written into an
anonymous memory map that is unmapped afterwards, so memory falls back after a fault.

The standard library's ``http.client`` does the protocol; a timer shuts the socket down at
the deadline (or when :meth:`Client.abort` is called on shutdown), which wakes a read
blocked in another thread.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import mmap
import socket
import ssl
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

from advisor.core.redact import redact_url

# One limit for every page and answer: a vLLM /metrics page is 50-500 KB; 32 MiB leaves room
# for servers with many LoRA adapters or engines while bounding memory.
MAX_BYTES = 32 * 1024 * 1024
DEFAULT_TIMEOUT_S = 5.0
MAX_REDIRECTS = 3
_READ = 65536
_DECODE_STEP = 256 * 1024  # decoded bytes per step: bounds the temporaries of decompression
_REDIRECTS = (301, 302, 303, 307, 308)


class SourceError(Exception):
    """A source (a /metrics page, a Prometheus) could not be read. ``kind`` says why, for metrics
    and tests; ``url`` where, when known. Printed as ``kind: message (url)``."""

    def __init__(self, kind: str, message: str, url: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.url = redact_url(url) if url else url  # never a password from the URL's userinfo

    def __str__(self) -> str:
        where = f" ({self.url})" if self.url else ""
        return f"{self.kind}: {super().__str__()}{where}"


class FetchError(Exception):
    """A fetch failed. ``kind``: ``refused | timeout | truncated | too_large | error``."""

    def __init__(self, kind: str, message: str, url: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.url = redact_url(url) if url else url


@dataclass(frozen=True)
class Response:
    url: str
    status_code: int
    reason: str
    headers: dict[str, str]  # names in lower case
    content: bytes
    duration_s: float = 0.0
    compressed_bytes: int = field(default=0)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON; ValueError when it is not (including nesting too deep to read)."""
        try:
            return json.loads(self.content)
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None


class _Watch:
    """Shuts a socket down at a deadline or on abort; remembers that it did."""

    def __init__(self) -> None:
        self.sock: socket.socket | None = None
        self.fired: str | None = None  # "deadline" | "abort"
        self._lock = threading.RLock()  # re-entrant: abort() may run in a signal handler

    def fire(self, why: str) -> None:
        with self._lock:
            if self.fired is not None:
                return
            self.fired = why
            sock = self.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class Client:
    """Fetches with a deadline and a size limit. Thread-safe; ``abort()`` ends every fetch in
    flight (and refuses new ones) so that a shutdown never waits on a hanging server."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.RLock()  # re-entrant: abort() may run in a signal handler
        self._watches: set[_Watch] = set()
        self._aborted = False

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            watches = list(self._watches)
        for w in watches:
            w.fire("abort")

    def get(
        self,
        url: str,
        timeout: float = DEFAULT_TIMEOUT_S,
        headers: dict[str, str] | None = None,
        max_bytes: int | None = None,
    ) -> Response:
        """GET ``url``, following a few redirects, all within ``timeout`` seconds in total, the
        answer at most ``max_bytes`` (default: the client's limit) once decoded.
        Raises :class:`FetchError`."""
        limit = self.max_bytes if max_bytes is None else min(max_bytes, self.max_bytes)
        if not (timeout > 0):
            raise FetchError("error", f"timeout must be > 0 seconds, got {timeout!r}", url)
        t0 = time.monotonic()
        deadline = t0 + timeout
        for _ in range(MAX_REDIRECTS + 1):
            resp = self._once(url, deadline, timeout, headers or {}, limit)
            loc = resp.headers.get("location")
            if resp.status_code in _REDIRECTS and loc:
                url = urljoin(url, loc)
                continue
            return Response(
                resp.url,
                resp.status_code,
                resp.reason,
                resp.headers,
                resp.content,
                time.monotonic() - t0,
                resp.compressed_bytes,
            )
        raise FetchError("error", f"more than {MAX_REDIRECTS} redirects", url)

    def _once(self, url: str, deadline: float, timeout: float, extra: dict[str, str], limit: int) -> Response:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as e:
            raise FetchError("error", f"not a valid URL: {e}", url) from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise FetchError("error", "not an http(s) URL", url)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise FetchError("timeout", f"no answer within {timeout:g}s", url)
        conn: http.client.HTTPConnection
        if parts.scheme == "https":
            conn = http.client.HTTPSConnection(
                parts.hostname, port, timeout=remaining, context=ssl.create_default_context()
            )
        else:
            conn = http.client.HTTPConnection(parts.hostname, port, timeout=remaining)
        watch = _Watch()
        with self._lock:
            if self._aborted:
                raise FetchError("timeout", "cancelled: the advisor is stopping", url)
            self._watches.add(watch)
        timer = threading.Timer(remaining, watch.fire, args=("deadline",))
        timer.daemon = True
        timer.start()
        try:
            return self._exchange(conn, watch, parts, url, extra, timeout, limit)
        finally:
            timer.cancel()
            with self._lock:
                self._watches.discard(watch)
            conn.close()

    def _exchange(
        self,
        conn: http.client.HTTPConnection,
        watch: _Watch,
        parts: Any,
        url: str,
        extra: dict[str, str],
        timeout: float,
        limit: int,
    ) -> Response:
        stage = "connecting"
        try:
            conn.connect()
            with watch._lock:
                watch.sock = conn.sock
                fired = watch.fired
            if fired is not None:
                raise OSError("deadline")
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            hdrs = {"Accept-Encoding": "gzip", "Connection": "close", "User-Agent": "vllm-advisor"}
            if parts.username is not None:
                cred = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
                hdrs["Authorization"] = "Basic " + base64.b64encode(cred.encode()).decode()
            hdrs.update(extra)
            stage = "waiting for an answer"
            conn.request("GET", path, headers=hdrs)
            resp = conn.getresponse()
            headers = {k.lower(): v for k, v in resp.getheaders()}
            declared = headers.get("content-length", "").strip()
            if declared.isdigit() and int(declared) > limit:
                # too large by its own header: not read (reading the limit's worth first took
                # longer than a 1 s timeout on a busy machine, a timeout where too_large is true)
                raise FetchError("too_large", f"answer of {int(declared)} bytes, larger than {limit}", url)
            stage = "reading the body"
            body, raw = self._body(resp, headers.get("content-encoding", "").strip().lower(), url, limit)
            if watch.fired is not None:  # the socket was shut under the read: not a whole answer
                raise OSError(watch.fired)
            if declared.isdigit() and raw != int(declared):
                raise http.client.IncompleteRead(b"", int(declared) - raw)
            return Response(url, resp.status, resp.reason or "", headers, body, 0.0, raw)
        except FetchError:
            raise
        except Exception as e:
            if watch.fired == "abort":
                raise FetchError("timeout", "cancelled: the advisor is stopping", url) from None
            if watch.fired == "deadline" or isinstance(e, TimeoutError):
                raise FetchError("timeout", f"timed out after {timeout:g}s ({stage})", url) from None
            if stage == "connecting":
                raise FetchError("refused", f"cannot connect: {_describe(e)}", url) from None
            if isinstance(e, http.client.IncompleteRead | http.client.RemoteDisconnected | ConnectionError):
                raise FetchError(
                    "truncated", f"connection broke while {stage}: {_describe(e)}", url
                ) from None
            if isinstance(e, http.client.HTTPException):
                raise FetchError("error", f"not a valid HTTP answer: {_describe(e)}", url) from None
            raise FetchError("error", f"{stage}: {_describe(e)}", url) from None

    def _body(self, resp: http.client.HTTPResponse, encoding: str, url: str, limit: int) -> tuple[bytes, int]:
        """The answer's body, decoded, at most ``limit`` bytes. It is written into an anonymous
        memory map of ``limit`` bytes (pages are taken only as they are written, and handed back
        to the system when it is closed, so memory falls back after a huge answer); decoding
        goes in small steps, so no large temporary is ever made."""
        dec = zlib.decompressobj(wbits=47) if encoding in ("gzip", "x-gzip", "deflate") else None
        buf = mmap.mmap(-1, limit + 1)
        pos = raw = 0

        def put(data: bytes) -> None:
            nonlocal pos
            if pos + len(data) > limit:
                what = " once decompressed" if dec is not None else ""
                raise FetchError("too_large", f"answer larger than {limit} bytes{what}", url)
            buf[pos : pos + len(data)] = data
            pos += len(data)

        try:
            while True:
                chunk = resp.read1(_READ)
                if not chunk:
                    break
                raw += len(chunk)
                if raw > limit:
                    raise FetchError("too_large", f"answer larger than {limit} bytes", url)
                if dec is None:
                    put(chunk)
                    continue
                try:
                    put(dec.decompress(chunk, _DECODE_STEP))
                    while dec.unconsumed_tail:
                        put(dec.decompress(dec.unconsumed_tail, _DECODE_STEP))
                except zlib.error as e:
                    raise FetchError("error", f"cannot decompress the answer: {e}", url) from None
            if dec is not None:
                put(dec.flush(_DECODE_STEP))
                if not dec.eof and raw:
                    raise FetchError("truncated", "compressed answer cut off", url)
            return buf[:pos], raw
        finally:
            buf.close()


def _describe(e: BaseException) -> str:
    while e.__cause__ is not None or e.__context__ is not None:
        nxt = e.__cause__ or e.__context__
        assert nxt is not None
        e = nxt
    return str(e) or type(e).__name__


def decompress_bounded(data: bytes, limit: int = MAX_BYTES) -> bytes:
    """gzip-decompress ``data`` but never past ``limit`` bytes (ValueError beyond it, or when
    ``data`` is not gzip)."""
    dec = zlib.decompressobj(wbits=47)
    try:
        out = dec.decompress(data, limit + 1)
    except zlib.error as e:
        raise ValueError(f"cannot decompress: {e}") from None
    if len(out) > limit:
        raise ValueError(f"larger than {limit} bytes once decompressed")
    return out
