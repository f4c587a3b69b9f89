"""Recorded sessions: a vLLM server's /metrics pages and log lines over time, on disk.

A session is the replay format for tests, the demo and bug reports. One directory holds::

    metrics/<unix-ms>.prom[.gz]   every scrape, verbatim (even one that does not parse)
    vllm.log[.gz]                 the server's log lines seen during the recording
    engine.json                   the engine's knobs with their provenance (redacted)
    meta.json                     url (credentials removed), started_at, interval_s, duration_s,
                                  scrapes, errors, advisor/vLLM versions, notes, load,
                                  log_marks (log lines read before each scrape), ...
    bench.json                    optional: the load's ``vllm bench serve`` result

Writing (``SessionWriter``, ``record``) is I/O at the edge; reading (``Session``) parses only
file names, JSON and log timestamps: the metrics pages go out as text for
``advisor.sources.metrics`` to parse. Secrets (URL userinfo, ``api_key=`` parameters,
``--api-key`` values, bearer tokens) are redacted before anything is stored.
"""

from __future__ import annotations

import bisect
import gzip
import json
import math
import re
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from queue import Empty, Queue
from typing import Any, NamedTuple, Protocol
from urllib.parse import urlsplit

from advisor import __version__
from advisor.core import engine_json, jsonout, urls
from advisor.core.redact import redact_obj, redact_text, redact_url
from advisor.sources import engine, logs
from advisor.sources import host as host_src
from advisor.sources import http as http_src
from advisor.sources import metrics as mt
from advisor.sources.host import host_facts
from advisor.sources.logprefix import MAX_LINE_CHARS

FORMAT_VERSION = 1
METRICS_DIR = "metrics"
LOG_FILE = "vllm.log"
ENGINE_FILE = "engine.json"
META_FILE = "meta.json"

_SCRAPE_NAME = re.compile(r"^(\d{1,16})\.prom(\.gz)?$")


class SessionError(ValueError):
    """A session directory that cannot be read or written; the message names the path."""


# ---------------------------------------------------------------------- writing


def _dump_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(jsonout.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(path)


class SessionWriter:
    """Writes one session directory. Pages are stored verbatim (redacted only where a secret
    appears); ``compress`` gzips them (``.prom.gz``) to keep recorded fixtures small."""

    def __init__(self, directory: Path | str, compress: bool = False) -> None:
        self.dir = Path(directory)
        self.compress = compress
        try:
            (self.dir / METRICS_DIR).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SessionError(f"{self.dir}: cannot create the session directory: {e}") from e
        self.scrapes = 0
        self.log_lines = 0
        self._log = open(self.dir / LOG_FILE, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())
        self._closed = False

    def add_scrape(self, t: float, text: str) -> Path:
        """Store one /metrics page scraped at unix time ``t``; returns its path."""
        ms = round(t * 1000)
        suffix = ".prom.gz" if self.compress else ".prom"
        path = self.dir / METRICS_DIR / f"{ms}{suffix}"
        while path.exists():  # two scrapes in one millisecond: keep both, in order
            ms += 1
            path = self.dir / METRICS_DIR / f"{ms}{suffix}"
        data = redact_text(text).encode("utf-8")
        if self.compress:
            path.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
        else:
            path.write_bytes(data)
        self.scrapes += 1
        return path

    def add_log_line(self, line: str) -> None:
        """Append one server log line (redacted)."""
        self._log.write(redact_text(line.rstrip("\r\n")) + "\n")
        self.log_lines += 1

    def write_engine(self, d: Mapping[str, Any]) -> None:
        """Store the engine's knobs with provenance (redacted)."""
        _dump_json(self.dir / ENGINE_FILE, redact_obj(dict(d)))

    def close(self, meta: Mapping[str, Any]) -> dict[str, Any]:
        """Write meta.json (format, scrape count and versions filled in when absent); returns it."""
        if not self._closed:
            self._log.close()
            self._closed = True
        if not (self.dir / ENGINE_FILE).exists():
            self.write_engine({})
        out = dict(meta)
        out.setdefault("format", FORMAT_VERSION)
        out.setdefault("advisor_version", __version__)
        out["scrapes"] = self.scrapes
        out.setdefault("log_lines", self.log_lines)
        out.setdefault("errors", [])
        out.setdefault("notes", "")
        out.setdefault("load", None)
        if "url" in out and isinstance(out["url"], str):
            out["url"] = redact_url(out["url"])
        out = redact_obj(out)
        _dump_json(self.dir / META_FILE, out)
        return out

    def __enter__(self) -> SessionWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._closed:
            self._log.close()
            self._closed = True


def update_meta(directory: Path | str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``fields`` into an existing session's meta.json (redacted); returns the new meta."""
    session = Session.load(directory)
    meta = dict(session.meta)
    meta.update(fields)
    meta = redact_obj(meta)
    _dump_json(session.dir / META_FILE, meta)
    return meta


# ---------------------------------------------------------------------- log following


class LogFollower(Protocol):
    """Anything that hands over the log lines that appeared since the last call."""

    def read_new(self) -> list[str]: ...

    def close(self) -> list[str]: ...


class FileTail:
    """New complete lines appended to a file since the last read (truncation restarts at 0).

    ``from_start`` also takes the lines already there (a server's startup facts)."""

    def __init__(self, path: Path | str, from_start: bool = False) -> None:
        self.path = Path(path)
        self._pos = 0
        self._partial = b""
        if not from_start:
            try:
                self._pos = self.path.stat().st_size
            except OSError:
                self._pos = 0

    def read_new(self) -> list[str]:
        try:
            size = self.path.stat().st_size
            if size < self._pos:  # truncated or replaced: start over
                self._pos, self._partial = 0, b""
            with open(self.path, "rb") as fh:
                fh.seek(self._pos)
                data = fh.read()
        except OSError:
            return []
        self._pos += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        return [ln.decode("utf-8", errors="replace").rstrip("\r") for ln in lines]

    def close(self) -> list[str]:
        lines = self.read_new()
        if self._partial:
            lines.append(self._partial.decode("utf-8", errors="replace"))
            self._partial = b""
        return lines


class CommandTail:
    """Lines printed by a command such as ``journalctl -f -u vllm`` or ``kubectl logs -f``."""

    def __init__(self, cmd: str | Sequence[str]) -> None:
        argv = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
        if not argv:
            raise SessionError("log_cmd is empty")
        try:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
            )
        except OSError as e:
            raise SessionError(f"cannot run log_cmd {argv[0]!r}: {e}") from e
        self._queue: Queue[str] = Queue()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._queue.put(line.rstrip("\r\n"))

    def read_new(self) -> list[str]:
        out: list[str] = []
        while True:
            try:
                out.append(self._queue.get_nowait())
            except Empty:
                return out

    def close(self) -> list[str]:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=5)
        self._thread.join(timeout=5)
        return self.read_new()


def open_log_follower(
    log_file: Path | str | None, log_cmd: str | Sequence[str] | None, from_start: bool = False
) -> LogFollower | None:
    """The seam where the shared follower (advisor/sources/logs.py) will plug in."""
    if log_file is not None and log_cmd is not None:
        raise SessionError("give log_file or log_cmd, not both")
    if log_file is not None:
        return FileTail(log_file, from_start=from_start)
    if log_cmd is not None:
        return CommandTail(log_cmd)
    return None


# ---------------------------------------------------------------------- recording


@dataclass
class RecordResult:
    """What ``record`` wrote."""

    path: Path
    scrapes: int
    log_lines: int
    errors: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)


def _metrics_url(url: str) -> tuple[str, str]:
    """(base url, metrics url) from either form."""
    return urls.without_path_suffix(url), urls.metrics_url(url)


def resolve_engine(
    log_lines: Sequence[str],
    first_page: str | None,
    *,
    near: float | None = None,
    argv: Sequence[str] | None = None,
    t: float = 0.0,
    host: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], str]:
    """engine.json content from what a recording saw, via advisor.sources.engine; ({}, why)
    when it fails (never loses the recording).

    Inputs: the server's log lines (start-up facts such as ``non-default args``), the first
    /metrics page (``vllm:cache_config_info``) and the server's command line when known.
    """
    try:
        events = list(logs.parse_lines(list(log_lines), near=near))
        snapshot = mt.parse_page(first_page, t, strict=False) if first_page else None
        info = engine.resolve(argv=list(argv) if argv else None, events=events, snapshot=snapshot, host=host)
        data = engine_json.to_json(info)
    except Exception as e:  # another module's contract; record what happened, keep the session
        return {}, f"advisor.sources.engine failed ({type(e).__name__}: {e}): engine.json left empty"
    if not isinstance(data, dict):
        return {}, "advisor.sources.engine.to_json() did not return an object: engine.json left empty"
    return data, ""


def _host(base_url: str, probe: Callable[[], Mapping[str, Any]] | None) -> Mapping[str, Any] | None:
    """The device's facts (GPUs, total and free memory) when the server runs on this host: the
    memory a "more KV memory" advice needs (``probe``: the engine source's host probe)."""
    if urlsplit(base_url).hostname not in ("127.0.0.1", "localhost", "::1"):
        return None
    try:
        return dict((probe or host_facts)())
    except Exception:  # a probe's failure must never lose the recording
        return None


def _local_server_argv(base_url: str) -> list[str] | None:
    """The vLLM server's (redacted) command line when it runs on this host, else None."""
    parts = urlsplit(base_url)
    if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        return None
    try:
        return host_src.find_vllm_process(parts.port or (443 if parts.scheme == "https" else 80))
    except Exception:  # best effort: psutil may be denied
        return None


def reresolve_engine(directory: Path | str, argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Recompute a recorded session's engine.json from its own log and first page (for
    sessions recorded before the engine resolver existed, or after it improved)."""
    s = Session.load(directory)
    lines = list(s.log_lines())
    data, note = resolve_engine(
        lines, s.read_scrape(0), near=s.started.timestamp(), argv=argv, t=s.scrapes[0][0]
    )
    _dump_json(s.dir / ENGINE_FILE, redact_obj(data))
    meta = dict(s.meta)
    meta.pop("engine_note", None)
    if note:
        meta["engine_note"] = note
    _dump_json(s.dir / META_FILE, redact_obj(meta))
    return data


_VERSION_IN_LOG = re.compile(r"(?:vLLM API server version|\bversion)\s+v?(\d+\.\d+\.\d+[\w.+-]*)")


def _vllm_version(base_url: str, timeout_s: float, log_lines: Sequence[str], http: Any) -> str | None:
    try:
        r = http.get(base_url + "/version", timeout=timeout_s)
        if r.status_code == 200:
            v = r.json().get("version")
            if isinstance(v, str) and v:
                return v
    except Exception:  # best effort: older servers have no /version
        pass
    for line in log_lines:
        m = _VERSION_IN_LOG.search(line)
        if m:
            return m.group(1)
    return None


def record(
    url: str,
    out_dir: Path | str,
    duration_s: float,
    interval_s: float = 2.0,
    log_file: Path | str | None = None,
    log_cmd: str | Sequence[str] | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] | None = None,
    stop_event: threading.Event | None = None,
    *,
    timeout_s: float = 5.0,
    log_from_start: bool = False,
    compress: bool = False,
    notes: str = "",
    load: Mapping[str, Any] | None = None,
    extra_meta: Mapping[str, Any] | None = None,
    http: Any = None,
    server_argv: Sequence[str] | None = None,
    host_probe: Callable[[], Mapping[str, Any]] | None = None,
) -> RecordResult:
    """Scrape ``url``'s /metrics every ``interval_s`` for ``duration_s`` into a session dir.

    Every page is kept verbatim, even one that does not parse; a failed scrape goes into
    meta's ``errors`` and the recording goes on. Log lines from ``log_file`` (new bytes
    appended since the start, or everything with ``log_from_start``) or ``log_cmd`` are
    collected between scrapes. ``stop_event`` (or Ctrl-C) ends the recording early and still
    writes meta.json. ``sleep`` defaults to waiting on ``stop_event`` (or ``time.sleep``).
    ``progress`` gets a dict per scrape (n, t, ok, bytes, log_lines). engine.json comes from
    advisor.sources.engine over the log, the first page and the server's command line
    (``server_argv``, or the local process listening on the URL's port).
    """
    if duration_s < 0 or interval_s <= 0:
        raise SessionError(f"{out_dir}: duration_s must be >= 0 and interval_s > 0")
    out = Path(out_dir)
    if (out / META_FILE).exists() or any((out / METRICS_DIR).glob("*.prom*")):
        raise SessionError(f"{out}: already holds a session; record into a new directory")
    base_url, metrics_url = _metrics_url(url)
    http = http if http is not None else http_src.Client()  # one deadline and size limit per fetch
    pause: Callable[[float], object]
    default_pause = stop_event.wait if stop_event is not None else time.sleep
    pause = sleep if sleep is not None else default_pause
    follower = open_log_follower(log_file, log_cmd, from_start=log_from_start)
    writer = SessionWriter(out, compress=compress)
    errors: list[dict[str, Any]] = []
    log_marks: list[int] = []  # log lines read when each stored scrape was taken
    head_lines: list[str] = []  # the first lines, for the engine resolver and the version
    first_page: str | None = None
    interrupted = False

    def take_logs(lines: list[str]) -> None:
        for line in lines:
            writer.add_log_line(line)
            if len(head_lines) < 2000:
                head_lines.append(line)

    start = clock()
    started_at = datetime.fromtimestamp(start, tz=UTC).astimezone()
    deadline = start + duration_s
    n = slot = 0
    try:
        while True:
            # drain the log first, so that every line read before this scrape is marked as such
            if follower is not None:
                take_logs(follower.read_new())
            t = clock()
            ok, size = False, 0
            try:
                r = http.get(metrics_url, timeout=timeout_s)
                writer.add_scrape(t, r.text)
                log_marks.append(writer.log_lines)
                size = len(r.text)
                if r.status_code == 200:
                    ok = True
                    if first_page is None:
                        first_page = r.text
                else:
                    errors.append({"t": t, "error": f"HTTP {r.status_code}"})
            except Exception as e:  # a failed scrape is data, not a crash
                errors.append({"t": t, "error": redact_text(f"{type(e).__name__}: {e}")})
            n += 1
            if progress is not None:
                progress({"n": n, "t": t, "ok": ok, "bytes": size, "log_lines": writer.log_lines})
            # the next slot on the start + k * interval grid; slots missed by a slow scrape
            # are skipped rather than fired back to back, and so is a slot less than half an
            # interval after a late scrape (two pages 0.08 s apart, seen on a busy machine,
            # make rates of nothing)
            slot = max(slot + 1, math.floor((clock() - start) / interval_s) + 1)
            if start + slot * interval_s - t < interval_s / 2:
                slot += 1
            next_t = start + slot * interval_s
            if next_t > deadline + 1e-9 or (stop_event is not None and stop_event.is_set()):
                break
            delay = next_t - clock()
            if delay > 0:
                pause(delay)
            if stop_event is not None and stop_event.is_set():
                break
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if follower is not None:
            take_logs(follower.close())
    end = clock()
    engine, engine_note = resolve_engine(
        head_lines,
        first_page,
        near=started_at.timestamp(),
        argv=server_argv if server_argv is not None else _local_server_argv(base_url),
        t=start,
        host=_host(base_url, host_probe),
    )
    writer.write_engine(engine)
    meta: dict[str, Any] = {
        "url": redact_url(base_url),
        "started_at": started_at.isoformat(timespec="milliseconds"),
        "started_at_unix": start,
        "interval_s": interval_s,
        "duration_s": round(end - start, 3),
        "errors": errors,
        "log_marks": log_marks,
        "vllm_version": _vllm_version(base_url, timeout_s, head_lines, http),
        "log_source": (
            str(log_file) if log_file is not None else (redact_text(str(log_cmd)) if log_cmd else None)
        ),
        "notes": notes,
        "load": dict(load) if load is not None else None,
    }
    if engine_note:
        meta["engine_note"] = engine_note
    if interrupted:
        meta["interrupted"] = True
    if extra_meta:
        meta.update(extra_meta)
    written = writer.close(meta)
    return RecordResult(out, writer.scrapes, writer.log_lines, errors, written)


# ---------------------------------------------------------------------- reading

_LOG_TS = re.compile(
    r"^(?:\([^)]*\)\s+)?(?:[A-Z]+\s+)?"  # (APIServer pid=1) INFO
    r"(?:(?P<year>\d{4})-)?(?P<mon>\d{2})-(?P<day>\d{2})[ T]"
    r"(?P<h>\d{2}):(?P<m>\d{2}):(?P<s>\d{2})(?:[.,](?P<frac>\d{1,6}))?"
)


def parse_log_time(line: str, started: datetime) -> float | None:
    """Unix time of a vLLM log line's ``MM-DD HH:MM:SS`` stamp (or ``YYYY-MM-DD ...``), in
    ``started``'s time zone; the year (when absent) is the one that puts the line nearest to
    ``started`` (a session over New Year). None when the line carries no stamp."""
    m = _LOG_TS.match(line)
    if not m:
        return None
    tz: tzinfo = started.tzinfo or UTC
    frac = m.group("frac") or ""
    micro = int(frac.ljust(6, "0")) if frac else 0
    years = [int(m.group("year"))] if m.group("year") else [started.year - 1, started.year, started.year + 1]
    best: float | None = None
    for year in years:
        try:
            dt = datetime(
                year,
                int(m.group("mon")),
                int(m.group("day")),
                int(m.group("h")),
                int(m.group("m")),
                int(m.group("s")),
                micro,
                tzinfo=tz,
            )
        except ValueError:
            continue
        ts = dt.timestamp()
        if best is None or abs(ts - started.timestamp()) < abs(best - started.timestamp()):
            best = ts
    return best


class ReplayItem(NamedTuple):
    """One replayed item: ("scrape", t, page) or ("log", t_or_None, line)."""

    kind: str
    t: float | None
    text: str


MAX_JSON_BYTES = 16 * 2**20  # meta.json and engine.json are a few KiB


def _read_bounded(path: Path, limit: int) -> bytes:
    """The file's bytes (decompressed when it ends in .gz), never more than ``limit``."""
    try:
        with path.open("rb") as fh:
            data = fh.read(limit + 1)
    except OSError as e:
        raise SessionError(f"{path}: cannot read: {e.strerror or e}") from e
    if path.name.endswith(".gz"):
        try:
            data = http_src.decompress_bounded(data, limit)
        except ValueError as e:
            if "larger" in str(e):
                raise SessionError(f"{path}: {e}: not a recorded page") from None
            raise SessionError(f"{path}: not a valid gzip file: {e}") from None
    if len(data) > limit:
        raise SessionError(f"{path}: larger than {limit // 2**20} MiB")
    return data


def _read_text(path: Path) -> str:
    return _read_bounded(path, mt.MAX_PAGE_BYTES).decode("utf-8", errors="replace")


def _load_json_object(path: Path, what: str) -> dict[str, Any]:
    raw = _read_bounded(path, MAX_JSON_BYTES)
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise SessionError(f"{path}: cannot read {what}: {e}") from e
    except json.JSONDecodeError as e:
        raise SessionError(f"{path}: {what} is not valid JSON: {e}") from e
    except RecursionError:
        raise SessionError(f"{path}: {what} is not valid: JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise SessionError(f"{path}: {what} must be a JSON object, got {type(data).__name__}")
    return data


@dataclass
class Session:
    """A recorded session, loaded lazily: file names and JSON now, pages and logs on demand."""

    dir: Path
    meta: dict[str, Any]
    engine: dict[str, Any]
    scrapes: list[tuple[float, Path]]
    started: datetime

    @classmethod
    def load(cls, directory: Path | str) -> Session:
        d = Path(directory)
        if not d.is_dir():
            raise SessionError(f"{d}: no such session directory")
        meta_path = d / META_FILE
        # a recording cut short has no meta.json yet: it is still worth replaying
        meta = _load_json_object(meta_path, "meta.json") if meta_path.exists() else {}
        engine_path = d / ENGINE_FILE
        engine = _load_json_object(engine_path, "engine.json") if engine_path.exists() else {}
        try:
            engine_json.from_json(engine)  # a damaged engine.json is the session's fault, said so here
        except engine_json.EngineJsonError as e:
            raise SessionError(f"{engine_path}: {e}") from None
        mdir = d / METRICS_DIR
        if not mdir.is_dir():
            raise SessionError(f"{d}: no {METRICS_DIR}/ directory: not a session")
        scrapes: list[tuple[float, Path]] = []
        for p in mdir.iterdir():
            m = _SCRAPE_NAME.match(p.name)
            if m:
                scrapes.append((int(m.group(1)) / 1000.0, p))
            elif p.name.endswith((".prom", ".prom.gz")):
                raise SessionError(f"{p}: scrape files are named <unix-ms>.prom or <unix-ms>.prom.gz")
        if not scrapes:
            raise SessionError(f"{mdir}: no scrapes (<unix-ms>.prom[.gz]) in the session")
        scrapes.sort(key=lambda s: (s[0], s[1].name))
        started = cls._started(meta, meta_path, scrapes[0][0])
        for key in ("interval_s", "duration_s"):
            v = meta.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or v < 0):
                raise SessionError(f"{meta_path}: {key} must be a non-negative number, got {v!r}")
        session = cls(d, meta, engine, scrapes, started)
        session.log_marks()  # validates
        return session

    @staticmethod
    def _started(meta: Mapping[str, Any], meta_path: Path, first_t: float) -> datetime:
        raw = meta.get("started_at")
        if raw is None:
            return datetime.fromtimestamp(first_t, tz=UTC).astimezone()
        if not isinstance(raw, str):
            raise SessionError(f"{meta_path}: started_at must be an ISO 8601 string, got {raw!r}")
        try:
            dt = datetime.fromisoformat(raw)
        except ValueError as e:
            raise SessionError(f"{meta_path}: started_at {raw!r} is not ISO 8601: {e}") from e
        if dt.tzinfo is None:  # naive: the recording machine's local time
            dt = dt.astimezone()
        return dt

    # -------------------------------------------------------------- access
    def read_scrape(self, i: int) -> str:
        """The i-th page (time order), verbatim."""
        if not -len(self.scrapes) <= i < len(self.scrapes):
            raise IndexError(f"{self.dir}: scrape {i} out of range (0..{len(self.scrapes) - 1})")
        return _read_text(self.scrapes[i][1])

    def iter_scrapes(self) -> Iterator[tuple[float, str]]:
        for i, (t, _) in enumerate(self.scrapes):
            yield t, self.read_scrape(i)

    def log_path(self) -> Path | None:
        for name in (LOG_FILE, LOG_FILE + ".gz"):
            p = self.dir / name
            if p.exists():
                return p
        return None

    def log_lines(self) -> Iterator[str]:
        """The recorded log lines, without line ends (none when the session has no log)."""
        p = self.log_path()
        if p is None:
            return
        if p.name.endswith(".gz"):
            yield from (line[:MAX_LINE_CHARS] for line in _read_text(p).splitlines())
            return
        with open(p, encoding="utf-8", errors="replace") as fh:
            while True:  # a line is cut at MAX_LINE_CHARS: its rest is skipped, never held
                line = fh.readline(MAX_LINE_CHARS)
                if not line:
                    return
                if not line.endswith("\n"):
                    while (rest := fh.readline(MAX_LINE_CHARS)) and not rest.endswith("\n"):
                        pass
                yield line.rstrip("\r\n")

    def bench(self) -> dict[str, Any] | None:
        """The load's saved ``vllm bench serve`` result, when the session has one."""
        p = self.dir / "bench.json"
        return _load_json_object(p, "bench.json") if p.exists() else None

    # -------------------------------------------------------------- replay
    def log_marks(self) -> list[int] | None:
        """meta's ``log_marks`` (written by ``record``): ``log_marks[k]`` is how many log lines
        had been read when scrape k was taken. None when the session has none."""
        marks = self.meta.get("log_marks")
        if marks is None:
            return None
        ok = (
            isinstance(marks, list)
            and len(marks) == len(self.scrapes)
            and all(isinstance(m, int) and not isinstance(m, bool) and m >= 0 for m in marks)
            and marks == sorted(marks)
        )
        if not ok:
            raise SessionError(
                f"{self.dir / META_FILE}: log_marks must be {len(self.scrapes)} non-decreasing line counts"
            )
        return list(marks)

    def timeline(self) -> Iterator[tuple[float, str, float | None, str | int]]:
        """(effective time, kind, t, line or scrape index) in replay order; reads no page.

        Scrapes come in time order. Log lines keep their file order. A line is placed by its
        own timestamp (before a scrape taken in the same second or later); a line without
        one (a traceback, an access-log line) right after the scrape that preceded it in the
        recording (``log_marks``), or, without marks, right after the line above it. Unstamped
        lines at the top of the log go with the first placed line below them (right after the
        first scrape when none is). Placement never goes backwards, so a line stamped earlier
        than the one above it stays below it.
        """
        scrapes = self.scrapes
        marks = self.log_marks()
        i = 0

        def scrapes_before(key: tuple[float, int]) -> Iterator[tuple[float, str, float | None, str | int]]:
            nonlocal i
            while i < len(scrapes) and (scrapes[i][0], 1) < key:
                yield scrapes[i][0], "scrape", scrapes[i][0], i
                i += 1

        prev: tuple[float, int] | None = None
        leading: list[str] = []
        for j, line in enumerate(self.log_lines()):
            ts = parse_log_time(line, self.started)
            k = bisect.bisect_right(marks, j) - 1 if marks else -1
            key: tuple[float, int] | None
            if ts is not None:
                key = (ts, 0)
            elif k >= 0:
                key = (scrapes[k][0], 2)
            else:
                key = prev
            if key is None:
                leading.append(line)
                continue
            if prev is not None:
                key = max(key, prev)
            yield from scrapes_before(key)
            for ln in leading:
                yield key[0], "log", None, ln
            leading.clear()
            yield key[0], "log", ts, line
            prev = key
        if leading:
            key = (scrapes[0][0], 2)
            yield from scrapes_before(key)
            for ln in leading:
                yield key[0], "log", None, ln
        yield from scrapes_before((float("inf"), 0))

    def replay(
        self,
        speed: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> Iterator[ReplayItem]:
        """Yield ("scrape", t, page) and ("log", t_or_None, line) in time order.

        ``speed`` None: as fast as possible; ``speed`` 10: ten times real time, pacing with the
        injected ``clock``/``sleep`` against the session's own timeline (no drift: each item
        waits for its own due time, not a fixed gap after the previous one). The pacing starts
        at the first page: log lines before it (a server's start-up, written before the first
        scrape) are yielded at once, so a replay's first diagnosis comes with its first item.
        """
        if speed is not None and not speed > 0:
            raise ValueError(f"speed must be > 0 or None, got {speed!r}")
        wall0: float | None = None
        t0 = 0.0
        for eff, kind, t, payload in self.timeline():
            if speed is not None:
                if wall0 is None:
                    if kind == "scrape":
                        wall0, t0 = clock(), eff
                else:
                    delay = (eff - t0) / speed - (clock() - wall0)
                    if delay > 0:
                        sleep(delay)
            if isinstance(payload, int):
                yield ReplayItem(kind, t, self.read_scrape(payload))
            else:
                yield ReplayItem(kind, t, payload)
