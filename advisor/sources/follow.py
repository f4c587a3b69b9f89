"""Log followers, the I/O edge of the log source: :class:`FileFollower` (survives rotation,
copytruncate, deletion and re-creation, and a file that does not exist yet),
:class:`StreamFollower` (stdin or any pipe) and :class:`CommandFollower` (``journalctl -f``,
``docker logs -f``, ``kubectl logs -f``). Each yields raw ``str`` lines from ``.lines()``
and stops promptly on ``.close()`` (callable from another thread): every wait is bounded by
``poll_interval``. Lines longer than :data:`MAX_LINE_BYTES` are cut.

Reading falls behind when the source grows faster than its lines are taken (a flood of
request lines; parsing is the slow part): a file with more than ``max_backlog_bytes`` not yet
read, or a pipe that has not once been empty for ``max_lag_s``. Then the follower skips to
the tail (a file: to its last ``TAIL_KEEP_BYTES``; a pipe: what it holds now) rather than
drifting minutes behind the server, and counts what it skipped (``skipped_lines``,
``skipped_bytes``, ``skips``); ``behind`` is True from a skip until it reads at the tail again.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator
from typing import IO

from advisor.core.redact import redact_text
from advisor.sources.logprefix import MAX_LINE_CHARS

MAX_LINE_BYTES = 4 * MAX_LINE_CHARS
"""Byte cap for one raw line in the followers (UTF-8 can take 4 bytes per char)."""
MAX_BACKLOG_BYTES = 16 * 2**20
"""A file this far ahead of the reader is skipped to its tail (~10 s of lines as parsed)."""
MAX_LAG_S = 10.0
"""A pipe that has held more than the reader took for this long is drained to what it holds."""
TAIL_KEEP_BYTES = 2**20
"""What is still read at the end of a file skipped to its tail (the latest lines)."""
HEAD_BYTES = 4 * 2**20
"""The start of a file read from its beginning is always read (vLLM's start-up lines)."""
_COUNT_BLOCK = 2**20


class LogSourceError(Exception):
    """A log source cannot be read (command not found, stdin closed, ...)."""


# --------------------------------------------------------------------------- followers


class _LineSplitter:
    """Bytes -> decoded lines, with a per-line byte cap (the rest of a huge line is dropped)."""

    def __init__(self, max_bytes: int = MAX_LINE_BYTES, owner: LogFollower | None = None) -> None:
        self.max_bytes = max_bytes
        self.owner = owner  # counts what a skip drops
        self._buf = bytearray()
        self._discarding = False
        self._drop_partial = False

    def drop_partial(self, rest_too: bool = False) -> int:
        """After a skip: the partial line held is dropped (``rest_too``: and so is the rest
        of the line the next bytes start inside). Returns the bytes dropped."""
        n = len(self._buf)
        self._buf.clear()
        self._discarding = False
        self._drop_partial = rest_too
        return n

    def feed(self, data: bytes) -> list[str]:
        out: list[str] = []
        start = 0
        n = len(data)
        if self._drop_partial:
            nl = data.find(b"\n")
            if self.owner is not None:
                self.owner._skipped(data if nl < 0 else data[: nl + 1])
            if nl < 0:
                return out
            self._drop_partial = False
            start = nl + 1
        while start < n:
            nl = data.find(b"\n", start)
            end = n if nl < 0 else nl
            if not self._discarding:
                room = self.max_bytes - len(self._buf)
                self._buf += data[start : start + max(0, min(room, end - start))]
                if end - start > room:
                    self._discarding = True
            if nl < 0:
                break
            out.append(self._emit())
            start = nl + 1
        return out

    def _emit(self) -> str:
        text = bytes(self._buf).decode("utf-8", errors="replace").rstrip("\r")
        self._buf.clear()
        self._discarding = False
        return text

    def flush(self) -> str | None:
        """The partial last line, if any (at EOF, rotation or truncation)."""
        if not self._buf and not self._discarding:
            return None
        return self._emit()


class LogFollower:
    """Base of the followers: ``lines()`` yields raw lines until ``close()`` is called (from
    any thread) or the source ends. Every wait is bounded by ``poll_interval`` seconds and
    wakes at once on ``close()``. Usable as an iterator and as a context manager."""

    def __init__(
        self,
        poll_interval: float = 0.5,
        max_lag_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if poll_interval <= 0:
            raise ValueError("poll_interval must be > 0")
        self.poll_interval = poll_interval
        self.max_lag_s = MAX_LAG_S if max_lag_s is None else max_lag_s
        self.clock = clock
        self._stop = threading.Event()
        self.skips = 0  # times the reader fell behind and skipped to the tail
        self.skipped_lines = 0
        self.skipped_bytes = 0
        self.behind = False  # from a skip until the reader is at the tail again

    def _skipped(self, data: bytes) -> None:
        self.skipped_bytes += len(data)
        self.skipped_lines += data.count(b"\n")

    @property
    def closed(self) -> bool:
        return self._stop.is_set()

    def close(self) -> None:
        self._stop.set()

    def stop(self) -> None:
        """Alias of :meth:`close`."""
        self.close()

    def lines(self) -> Generator[str, None, None]:  # pragma: no cover - abstract
        raise NotImplementedError

    def __iter__(self) -> Iterator[str]:
        return self.lines()

    def __enter__(self) -> LogFollower:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FileFollower(LogFollower):
    """Follow a log file like ``tail -F``.

    * ``from_start``: read the file present at start from its beginning (else from its end).
      A file that appears later (created, rotated in, re-created) is always read from its
      beginning.
    * Rotation (rename + new file) and delete + re-create: the old file is read to its end,
      then the new one from its start (``rotations`` counts them).
    * Two rotations within one poll: the file in between, by then ``PATH.1``, is read whole
      before the new one (a third rotation within one poll is lost).
    * Truncation (copytruncate): reading restarts at offset 0 (``truncations`` counts them).
      As with ``tail -F``, a file truncated and refilled past the old offset between two
      polls cannot be told from one that grew.
    * A missing file is waited for.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        from_start: bool = True,
        poll_interval: float = 0.5,
        max_backlog_bytes: int | None = None,
    ) -> None:
        super().__init__(poll_interval)
        self.path = os.fspath(path)
        self.from_start = from_start
        self.max_backlog_bytes = MAX_BACKLOG_BYTES if max_backlog_bytes is None else max_backlog_bytes
        self.head_bytes = HEAD_BYTES
        self.tail_keep_bytes = TAIL_KEEP_BYTES
        self.rotations = 0
        self.truncations = 0
        self.chunk_size = 64 * 1024

    def _skip_to_tail(self, fh: IO[bytes], size: int, splitter: _LineSplitter) -> None:
        """Far behind: count the lines between here and the file's last ``TAIL_KEEP_BYTES``
        (read in large blocks, not parsed) and go on from there, at a line's start."""
        pos = fh.tell()
        target = max(pos, size - self.tail_keep_bytes)
        self.skipped_bytes += splitter.drop_partial()
        at_line_start = False
        while pos < target and not self._stop.is_set():
            block = fh.read(min(_COUNT_BLOCK, target - pos))
            if not block:
                break
            pos += len(block)
            self._skipped(block)
            at_line_start = block.endswith(b"\n")
        while not at_line_start:  # the rest of the line the skip ended in goes too
            block = fh.read(self.chunk_size)
            if not block:  # that line is still being written: its rest is dropped when it comes
                splitter.drop_partial(rest_too=True)
                break
            nl = block.find(b"\n")
            if nl >= 0:
                self._skipped(block[: nl + 1])
                fh.seek(pos + nl + 1)
                break
            pos += len(block)
            self._skipped(block)
        self.skips += 1
        self.behind = True

    def _middle_file(
        self, old: tuple[int, int] | None, new: tuple[int, int], old_mtime: float
    ) -> IO[bytes] | None:
        """``PATH.1`` (logrotate's and RotatingFileHandler's name) when it is neither the file
        just finished nor the new one, and was written after the finished one: it was rotated
        in and out between two polls (a stale ``PATH.1`` from long ago is left alone)."""
        try:
            fh = open(self.path + ".1", "rb")  # noqa: SIM115 - the caller closes it
        except OSError:
            return None
        st = os.fstat(fh.fileno())
        if (st.st_dev, st.st_ino) in (old, new) or st.st_mtime < old_mtime:
            fh.close()
            return None
        return fh

    def _stat_path(self) -> os.stat_result | None:
        try:
            return os.stat(self.path)
        except OSError:
            return None

    def lines(self) -> Generator[str, None, None]:
        fh: IO[bytes] | None = None
        ident: tuple[int, int] | None = None
        splitter = _LineSplitter(owner=self)
        first = True
        first_pos_skippable = False
        try:
            while not self._stop.is_set():
                if fh is None:
                    try:
                        fh = open(self.path, "rb")  # noqa: SIM115 - closed in finally / on rotation
                    except OSError:
                        first = False  # appears later: read it from the start
                        self._stop.wait(self.poll_interval)
                        continue
                    st = os.fstat(fh.fileno())
                    ident = (st.st_dev, st.st_ino)
                    # a file read from its beginning keeps its head (the start-up lines); one
                    # joined at its end may be skipped from anywhere
                    first_pos_skippable = first and not self.from_start
                    if first and not self.from_start:
                        fh.seek(0, os.SEEK_END)
                    first = False
                pos = fh.tell()
                if pos >= self.head_bytes or first_pos_skippable:
                    with contextlib.suppress(OSError):
                        size = os.fstat(fh.fileno()).st_size
                        if size - pos > self.max_backlog_bytes:
                            self._skip_to_tail(fh, size, splitter)
                data = fh.read(self.chunk_size)
                if data:
                    yield from splitter.feed(data)
                    continue
                self.behind = False  # at the end of the file: caught up
                # At EOF: has the path moved on, or the file shrunk?
                st_path = self._stat_path()
                if st_path is not None and (st_path.st_dev, st_path.st_ino) != ident:
                    old_mtime = os.fstat(fh.fileno()).st_mtime
                    # Drain what the writer added to the old file since our last read.
                    while data := fh.read(self.chunk_size):
                        yield from splitter.feed(data)
                    tail = splitter.flush()
                    if tail:
                        yield tail
                    fh.close()
                    fh = None
                    self.rotations += 1
                    # rotated twice within one poll: the file between (now PATH.1) is read too
                    middle = self._middle_file(ident, (st_path.st_dev, st_path.st_ino), old_mtime)
                    if middle is not None:
                        with middle:
                            while data := middle.read(self.chunk_size):
                                yield from splitter.feed(data)
                        tail = splitter.flush()
                        if tail:
                            yield tail
                        self.rotations += 1
                    continue
                try:
                    size = os.fstat(fh.fileno()).st_size
                except OSError:
                    size = fh.tell()
                if size < fh.tell():
                    tail = splitter.flush()
                    if tail:
                        yield tail
                    fh.seek(0)
                    self.truncations += 1
                    continue
                self._stop.wait(self.poll_interval)
        finally:
            if fh is not None:
                fh.close()


MAX_DRAIN_BYTES = 64 * 2**20  # one skip of a pipe drains at most this much, then reads again


def _drain(fd: int, sel: selectors.BaseSelector, follower: LogFollower) -> tuple[bool, bool]:
    """Behind on a pipe: read what it holds (and what keeps coming, up to MAX_DRAIN_BYTES)
    without splitting it into lines, counting it. Returns (EOF, ended at a line's start)."""
    drained, at_line_start = 0, True
    while drained < MAX_DRAIN_BYTES and not follower.closed and sel.select(0):
        try:
            data = os.read(fd, _COUNT_BLOCK)
        except InterruptedError:
            continue
        except OSError:
            return True, at_line_start
        if not data:
            return True, at_line_start
        drained += len(data)
        follower._skipped(data)
        at_line_start = data.endswith(b"\n")
    return False, at_line_start


def _read_fd_lines(fd: int, follower: LogFollower) -> Generator[str, None, None]:
    """Lines from a readable fd (pipe, tty) until EOF or ``close()``; waits with select. A
    pipe that has not once been empty for ``max_lag_s`` (its writer is ahead) is drained."""
    stop, poll_interval = follower._stop, follower.poll_interval
    splitter = _LineSplitter(owner=follower)
    sel = selectors.DefaultSelector()
    try:
        sel.register(fd, selectors.EVENT_READ)
        caught_up = follower.clock()
        while not stop.is_set():
            if not sel.select(0):  # empty: the reader is at the writer's tail
                caught_up, follower.behind = follower.clock(), False
                if not sel.select(poll_interval):
                    continue
            elif follower.clock() - caught_up > follower.max_lag_s:
                follower.skipped_bytes += splitter.drop_partial()
                eof, at_line_start = _drain(fd, sel, follower)
                follower.skips += 1
                follower.behind = True
                caught_up = follower.clock()
                if eof:
                    return
                splitter.drop_partial(rest_too=not at_line_start)
                continue
            try:
                data = os.read(fd, 64 * 1024)
            except InterruptedError:
                continue
            except OSError:
                break
            if not data:
                break
            yield from splitter.feed(data)
        tail = splitter.flush()
        if tail and not stop.is_set():
            yield tail
    finally:
        sel.close()


class StreamFollower(LogFollower):
    """Follow a binary stream (stdin by default) until EOF or ``close()``."""

    def __init__(
        self,
        stream: IO[bytes] | None = None,
        poll_interval: float = 0.5,
        max_lag_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(poll_interval, max_lag_s, clock)
        self.stream = stream

    def lines(self) -> Generator[str, None, None]:
        stream = self.stream
        if stream is None:
            if sys.stdin is None or sys.stdin.closed:
                raise LogSourceError("stdin is not available")
            stream = sys.stdin.buffer
        try:
            fd = stream.fileno()
        except (OSError, ValueError, AttributeError):
            fd = -1
        if fd >= 0:
            yield from _read_fd_lines(fd, self)
            return
        splitter = _LineSplitter()  # no fd (in-memory stream): plain blocking reads
        while not self._stop.is_set():
            data = stream.read(64 * 1024)
            if not data:
                break
            yield from splitter.feed(data)
        tail = splitter.flush()
        if tail:
            yield tail


class CommandFollower(LogFollower):
    """Run a command (``journalctl -u vllm -f -o cat``, ``docker logs -f c``, ``kubectl logs
    -f pod``) and follow its stdout and stderr merged. Nothing is restarted: when the command
    exits, ``lines()`` ends and ``returncode`` / ``last_lines`` say why. ``close()`` stops
    the child (SIGTERM, then SIGKILL after ``kill_timeout``)."""

    def __init__(self, cmd: list[str] | str, poll_interval: float = 0.5, kill_timeout: float = 3.0) -> None:
        super().__init__(poll_interval)
        argv = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
        if not argv:
            raise LogSourceError("empty command")
        self.argv = argv
        self.kill_timeout = kill_timeout
        self.returncode: int | None = None
        self.last_lines: deque[str] = deque(maxlen=5)
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    @property
    def exited(self) -> bool:
        return self.returncode is not None

    def describe_exit(self) -> str:
        """One line for the operator: how the command ended."""
        if self.returncode is None:
            return f"{shlex.join(self.argv)}: still running"
        tail = " | ".join(redact_text(x) for x in self.last_lines)
        return f"{shlex.join(self.argv)} exited with status {self.returncode}" + (f": {tail}" if tail else "")

    def lines(self) -> Generator[str, None, None]:
        try:
            proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            self.returncode = 127
            raise LogSourceError(f"cannot run {self.argv[0]!r}: {exc.strerror or exc}") from exc
        with self._lock:
            self._proc = proc
        if self._stop.is_set():
            self._terminate()
        assert proc.stdout is not None
        eof = False
        try:
            for line in _read_fd_lines(proc.stdout.fileno(), self):
                self.last_lines.append(line)
                yield line
            eof = not self._stop.is_set()
        finally:
            if eof:
                # Output ended (EOF): give the command time to exit by itself.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=self.kill_timeout)
            if proc.poll() is None or _group_alive(proc.pid):  # the leader, or what it started
                self._terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=self.kill_timeout)
            self.returncode = proc.returncode
            proc.stdout.close()

    def _terminate(self) -> None:
        """End the command's whole process group (it runs in a session of its own): a
        pipeline's children (``sh -c 'journalctl -f | grep vllm'``) end with it. SIGTERM, then
        SIGKILL to what is left after ``kill_timeout``."""
        with self._lock:
            proc = self._proc
        if proc is None:
            return
        pgid = proc.pid  # start_new_session: the leader's pid is the group's id
        if proc.poll() is None or _group_alive(pgid):
            _signal_group(pgid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=self.kill_timeout)
        deadline = time.monotonic() + self.kill_timeout
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if _group_alive(pgid) or proc.poll() is None:
            _signal_group(pgid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=self.kill_timeout)

    def close(self) -> None:
        super().close()
        self._terminate()


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group is left (a zombie leader not yet reaped counts)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def follow_file(
    path: str | os.PathLike[str], from_start: bool = True, poll_interval: float = 0.5
) -> FileFollower:
    """A :class:`FileFollower` for ``path`` (iterate ``.lines()``, stop with ``.close()``)."""
    return FileFollower(path, from_start=from_start, poll_interval=poll_interval)


def follow_stdin(poll_interval: float = 0.5, stream: IO[bytes] | None = None) -> StreamFollower:
    """A :class:`StreamFollower` on stdin (or ``stream``)."""
    return StreamFollower(stream, poll_interval=poll_interval)


def follow_command(cmd: list[str] | str, poll_interval: float = 0.5) -> CommandFollower:
    """A :class:`CommandFollower` running ``cmd`` (a list, or a string split like a shell)."""
    return CommandFollower(cmd, poll_interval=poll_interval)
