"""The experiment ledger: every before/after verdict, kept in one SQLite file.

Embedded (stdlib ``sqlite3``), WAL mode so that the daemon's one writer thread and any number
of readers (``vllm-advisor history``, the exporter) never block each other for long. Each call
opens its own short-lived connection, so a :class:`Ledger` may be shared between threads.
The schema is versioned with ``PRAGMA user_version`` and created on first use.
"""

from __future__ import annotations

import builtins
import json
import os
import sqlite3
import urllib.parse
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from advisor.core import jsonout
from advisor.core.redact import redact_obj
from advisor.core.statefile import UnsafePath, refuse_link

SCHEMA_VERSION = 2
SOURCES = ("daemon", "compare")
VERDICTS = ("keep", "revert", "inconclusive")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS experiments (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    started_at    REAL NOT NULL,
    ended_at      REAL,
    knob          TEXT,
    flag          TEXT,
    old_value     TEXT,
    new_value     TEXT,
    model         TEXT,
    vllm_version  TEXT,
    gpus          TEXT,
    load_profile  TEXT NOT NULL DEFAULT '{}',
    buckets       TEXT NOT NULL DEFAULT '[]',
    verdict       TEXT NOT NULL CHECK (verdict IN ('keep', 'revert', 'inconclusive')),
    reasons       TEXT NOT NULL DEFAULT '[]',
    source        TEXT NOT NULL CHECK (source IN ('daemon', 'compare')),
    prediction    TEXT
);
CREATE INDEX IF NOT EXISTS experiments_started ON experiments (started_at);
"""
# version 1 -> 2: the model's prediction of the change and its error (advisor/predict/scoring.py)
_MIGRATIONS = {1: "ALTER TABLE experiments ADD COLUMN prediction TEXT;"}

# the schema's CHECK constraints, asked directly (a read-only connection's integrity_check skips them)
_CHECK_SQL = (
    "SELECT count(*) FROM experiments WHERE verdict NOT IN ('keep', 'revert', 'inconclusive') "
    "OR verdict IS NULL OR source NOT IN ('daemon', 'compare') OR source IS NULL"
)

_JSON_COLUMNS = ("old_value", "new_value", "load_profile", "buckets", "reasons", "prediction")


class LedgerError(RuntimeError):
    """The ledger file cannot be used (not a database, a newer schema, a bad record, a read-only
    or full disk)."""


class LedgerDamaged(LedgerError):
    """The file is damaged: not an SQLite database, or one SQLite finds corrupt. Only this is
    "damaged"; a file that cannot be opened or written (read-only, a full disk, a lock) is not."""


# SQLite's own verdicts of damage; every other error (CANTOPEN, READONLY, FULL, IOERR, BUSY,
# PERM...) is about where the file lies, not what it holds
_DAMAGE_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})


def is_damage(e: sqlite3.Error) -> bool:
    code = getattr(e, "sqlite_errorcode", None)
    if code is None:
        return False
    return (int(code) & 0xFF) in _DAMAGE_CODES


class InvalidRecord(LedgerError):
    """A record no ledger can store (an unknown verdict, a value that is not JSON)."""


@dataclass(frozen=True)
class ExperimentRecord:
    """One experiment. Times are unix seconds; ``old_value``/``new_value`` keep their JSON type;
    ``load_profile`` and ``buckets`` are JSON-able (``Comparison.to_json()`` parts)."""

    started_at: float
    verdict: str
    source: str
    ended_at: float | None = None
    knob: str | None = None
    flag: str | None = None
    old_value: Any = None
    new_value: Any = None
    model: str | None = None
    vllm_version: str | None = None
    gpus: str | None = None
    load_profile: Mapping[str, Any] = field(default_factory=dict)
    buckets: list[Any] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    prediction: Mapping[str, Any] | None = None  # predicted, measured_after, error per metric


redact = redact_obj


def record_from_comparison(
    comparison: Any,
    started_at: float,
    *,
    ended_at: float | None = None,
    source: str = "compare",
    **fields: Any,
) -> ExperimentRecord:
    """An :class:`ExperimentRecord` from an ``advisor.experiment.Comparison`` (its verdict,
    reasons, load check and buckets); ``fields`` sets knob, flag, old/new value, model..."""
    j = comparison.to_json()
    return ExperimentRecord(
        started_at=started_at,
        ended_at=ended_at,
        verdict=j["verdict"],
        source=source,
        load_profile=j["load"],
        buckets=j["buckets"],
        reasons=j["reasons"],
        **fields,
    )


class Ledger:
    """``Ledger(path).add(record) -> id``, ``.list(limit)``, ``.get(id)``.

    ``read_only``: open the file for reading only (``vllm-advisor history``, ``/history``, the
    daemon's integrity check): nothing is created or migrated, and a file on a read-only
    directory or disk is read (SQLite's ``mode=ro``; where not even that can open it, a WAL
    database without its ``-shm`` beside it on a read-only directory, ``immutable=1``)."""

    def __init__(self, path: str | Path, timeout_s: float = 5.0, read_only: bool = False) -> None:
        self.path = Path(path)
        self.timeout_s = timeout_s
        self.read_only = read_only
        self.immutable = False  # opened with immutable=1 (read-only directory)
        self.version = 0
        if read_only:
            self._read_version()
        else:
            self._ensure_schema()

    def _error(self, what: str, e: sqlite3.Error) -> LedgerError:
        if is_damage(e):
            return LedgerDamaged(f"{self.path} is not an SQLite ledger database ({e})")
        where = ""
        if what != "read" and not os.access(self.path.parent, os.W_OK):  # EROFS stops root too
            where = f" (its directory {self.path.parent} is not writable: read-only)"
        return LedgerError(f"cannot {what} ledger {self.path}: {e}{where}")

    def _refuse_links(self) -> None:
        """SQLite follows links and cannot be told not to: the ledger and its companions are
        checked first (UnsafePath names the link)."""
        for suffix in ("", "-wal", "-shm", "-journal"):
            refuse_link(self.path.with_name(self.path.name + suffix))

    def _connect(self) -> sqlite3.Connection:
        try:
            self._refuse_links()
            if self.read_only:
                conn = self._connect_ro()
            else:
                conn = sqlite3.connect(self.path, timeout=self.timeout_s)
        except sqlite3.Error as e:
            raise self._error("open", e) from None
        except UnsafePath as e:
            raise LedgerError(str(e)) from None
        conn.row_factory = sqlite3.Row
        return conn

    def _connect_ro(self) -> sqlite3.Connection:
        uri = "file:" + urllib.parse.quote(str(self.path.absolute())) + "?mode=ro"
        if not self.immutable:
            conn = sqlite3.connect(uri, uri=True, timeout=self.timeout_s)
            try:
                conn.execute("PRAGMA user_version").fetchone()
                return conn
            except sqlite3.OperationalError as e:
                conn.close()
                if is_damage(e):
                    raise
            self.immutable = True  # a read-only directory: no -shm can be made beside the file
        return sqlite3.connect(uri + "&immutable=1", uri=True, timeout=self.timeout_s)

    def _read_version(self) -> None:
        if self.path.is_dir():
            raise LedgerError(f"ledger path {self.path} is a directory")
        if not self.path.is_file():
            raise LedgerError(f"ledger {self.path}: no such file")
        conn = self._connect()
        try:
            self.version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        except sqlite3.DatabaseError as e:
            raise self._error("read", e) from None
        finally:
            conn.close()
        if self.version > SCHEMA_VERSION:
            raise LedgerError(
                f"ledger {self.path} has schema version {self.version}; this advisor knows "
                f"{SCHEMA_VERSION}: upgrade vllm-advisor"
            )

    def _ensure_schema(self) -> None:
        try:
            self._refuse_links()
        except UnsafePath as e:
            raise LedgerError(str(e)) from None
        if self.path.exists() and self.path.is_dir():
            raise LedgerError(f"ledger path {self.path} is a directory")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = self._connect()
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise LedgerError(
                    f"ledger {self.path} has schema version {version}; this advisor knows "
                    f"{SCHEMA_VERSION}: upgrade vllm-advisor"
                )
            conn.execute("PRAGMA journal_mode=WAL")
            if version < SCHEMA_VERSION:
                with conn:
                    if version == 0:
                        conn.executescript(_SCHEMA)
                    else:
                        for v in range(version, SCHEMA_VERSION):
                            conn.executescript(_MIGRATIONS[v])
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            self.version = SCHEMA_VERSION
        except sqlite3.DatabaseError as e:
            raise self._error("open", e) from None
        finally:
            conn.close()

    def add(self, record: ExperimentRecord | Mapping[str, Any]) -> int:
        """Store one experiment (secrets redacted) and return its id."""
        rec = record if isinstance(record, ExperimentRecord) else record_from_mapping(record)
        if rec.verdict not in VERDICTS:
            raise InvalidRecord(f"verdict must be one of {', '.join(VERDICTS)}, got {rec.verdict!r}")
        if rec.source not in SOURCES:
            raise InvalidRecord(f"source must be one of {', '.join(SOURCES)}, got {rec.source!r}")
        row = asdict(rec)
        row["load_profile"] = dict(rec.load_profile)
        row["prediction"] = dict(rec.prediction) if rec.prediction is not None else None
        row = {k: redact(v) for k, v in row.items()}
        for col in _JSON_COLUMNS:
            try:
                row[col] = jsonout.dumps(row[col], sort_keys=True)  # unknown (NaN) as null
            except (TypeError, ValueError) as e:
                raise InvalidRecord(f"{col} is not JSON-serialisable: {e}") from None
        cols = list(row)
        sql = f"INSERT INTO experiments ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})"
        if self.read_only:
            raise LedgerError(f"ledger {self.path} was opened read-only")
        conn = self._connect()
        try:
            with conn:
                cur = conn.execute(sql, [row[c] for c in cols])
            return int(cur.lastrowid or 0)
        except sqlite3.DatabaseError as e:
            raise self._error("write to", e) from None
        finally:
            conn.close()

    def check(self) -> builtins.list[str]:
        """What SQLite's ``PRAGMA integrity_check`` finds wrong (at most 20 lines); empty when
        the file is sound. A file that is not a database at all is one line saying why; one that
        cannot be opened or read (a read-only or full disk) raises LedgerError: it is not damage."""
        try:
            conn = self._connect()
        except LedgerDamaged as e:
            return [str(e)]
        try:
            rows = conn.execute("PRAGMA integrity_check(20)").fetchall()
            out = [str(r[0]) for r in rows if str(r[0]) != "ok"]
            if self.version >= 1 and not out:
                # a read-only connection's integrity_check skips CHECK constraints: ask them here
                bad = conn.execute(_CHECK_SQL).fetchone()[0]
                if bad:
                    out.append(f"CHECK constraint failed in experiments ({bad} rows)")
        except sqlite3.DatabaseError as e:
            if is_damage(e):
                return [str(e)]
            raise LedgerError(f"cannot check ledger {self.path}: {e}") from None
        finally:
            conn.close()
        return out

    def list(self, limit: int = 50) -> list[dict[str, Any]]:
        """The most recent experiments first (by start time, then id)."""
        return self._query(
            "SELECT * FROM experiments ORDER BY started_at DESC, id DESC LIMIT ?", (max(int(limit), 0),)
        )

    def get(self, experiment_id: int) -> dict[str, Any] | None:
        rows = self._query("SELECT * FROM experiments WHERE id = ?", (int(experiment_id),))
        return rows[0] if rows else None

    def _query(self, sql: str, params: tuple[Any, ...]) -> builtins.list[dict[str, Any]]:
        if self.version == 0:  # an empty file opened read-only: no table yet, no experiment
            return []
        conn = self._connect()
        try:
            rows = conn.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as e:
            raise self._error("read", e) from None
        finally:
            conn.close()
        out = []
        for r in rows:
            d = dict(r)
            for col in _JSON_COLUMNS:  # a version-1 ledger read as it is has no prediction
                d[col] = json.loads(d[col]) if d.get(col) is not None else None
            out.append(d)
        return out


class DurableLedger:
    """The daemon's ledger: a judged experiment is never lost to a failing disk.

    :meth:`add` queues the record and tries to write every queued record, oldest first;
    what cannot be written (the state dir missing or unusable, another writer holding SQLite's
    lock, a full disk, a damaged file) stays queued in memory and :meth:`flush` (each cycle)
    tries again until it succeeds. The queue is bounded (``max_pending``): when full, the
    oldest record is dropped and counted. The file's integrity is checked when it is first
    opened and again before each retry after a failure; a damaged ledger is never written
    into (writing into a damaged SQLite file can spread the damage): its records wait until
    the file is repaired or moved aside. ``pending``, ``failures``, ``dropped``,
    ``last_error`` and ``ok`` are for the exporter."""

    def __init__(self, path: str | Path, max_pending: int = 1000, timeout_s: float = 1.0) -> None:
        self.path = Path(path)
        self.max_pending = max_pending
        self.timeout_s = timeout_s
        self.queue: deque[ExperimentRecord] = deque()
        self.failures = 0
        self.dropped = 0
        self.written = 0
        self.last_error: str | None = None
        self.damage: builtins.list[str] = []
        self.rejected: builtins.list[str] = []  # records no ledger can store (the caller logs them)
        self._ledger: Ledger | None = None
        self._checked = False
        self.check()

    @property
    def pending(self) -> int:
        return len(self.queue)

    @property
    def ok(self) -> bool:
        return self.last_error is None and not self.damage

    def check(self) -> builtins.list[str]:
        """The file's damage (empty when sound or not there yet); remembered in ``damage``."""
        if not self.path.is_file():
            self.damage = []
            return []
        try:
            self.damage = Ledger(self.path, self.timeout_s, read_only=True).check()
        except LedgerDamaged as e:
            self.damage = [str(e)]
        except (LedgerError, OSError, sqlite3.Error) as e:
            self.damage = []  # cannot even be opened (read-only, a full disk): not damage
            self.last_error = str(e) if isinstance(e, LedgerError) else f"cannot open ledger {self.path}: {e}"
        self._checked = True
        return self.damage

    def add(self, record: ExperimentRecord, flush: bool = True) -> bool:
        """Queue ``record`` and (``flush``) write what is queued; True when all of it is in the
        ledger."""
        if len(self.queue) >= self.max_pending:
            self.queue.popleft()
            self.dropped += 1
        self.queue.append(record)
        if flush:
            self.flush()
        return not self.queue

    def flush(self) -> int:
        """Write the queued records, oldest first; how many were written. Never raises."""
        if not self.queue:
            return 0
        if not self._checked or self.last_error is not None or self.damage:
            self.check()
        if self.damage:
            self.failures += 1
            self.last_error = (
                f"ledger {self.path} is damaged ({self.damage[0]}): not written into; restore it or "
                "move it aside"
            )
            return 0
        n = 0
        try:
            if self._ledger is None:
                self._ledger = Ledger(self.path, self.timeout_s)
            while self.queue:
                try:
                    self._ledger.add(self.queue[0])
                except InvalidRecord as e:  # no retry can store it: it is dropped, and said
                    self.dropped += 1
                    self.rejected.append(f"{e}: {self.queue[0]!r}"[:500])
                self.queue.popleft()
                n += 1
        except (LedgerError, OSError, sqlite3.Error) as e:
            self._ledger = None  # opened afresh next time (the file may be replaced)
            self.failures += 1
            self.last_error = str(e) if "ledger" in str(e) else f"cannot write to ledger {self.path}: {e}"
        else:
            self.last_error = None
        self.written += n
        return n


def record_from_mapping(m: Mapping[str, Any]) -> ExperimentRecord:
    """A record from its ``asdict`` form (a row, a file); LedgerError when it is not one."""
    allowed = set(ExperimentRecord.__dataclass_fields__)
    unknown = sorted(set(m) - allowed - {"id"})
    if unknown:
        raise LedgerError(f"unknown experiment fields: {', '.join(unknown)}")
    try:
        return ExperimentRecord(**{k: v for k, v in m.items() if k in allowed})
    except TypeError as e:
        raise LedgerError(f"incomplete experiment record: {e}") from None
