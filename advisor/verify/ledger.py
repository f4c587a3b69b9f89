"""The experiment ledger: every before/after verdict, kept in one SQLite file.

Embedded (stdlib ``sqlite3``), WAL mode so that the daemon's one writer thread and any number
of readers (``vllm-advisor history``, the exporter) never block each other for long. Each call
opens its own short-lived connection, so a :class:`Ledger` may be shared between threads.
The schema is versioned with ``PRAGMA user_version`` and created on first use.
"""

from __future__ import annotations

import builtins
import json
import sqlite3
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from advisor.core import jsonout
from advisor.core.redact import redact_obj

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

_JSON_COLUMNS = ("old_value", "new_value", "load_profile", "buckets", "reasons", "prediction")


class LedgerError(RuntimeError):
    """The ledger file cannot be used (not a database, a newer schema, a bad record)."""


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
    """``Ledger(path).add(record) -> id``, ``.list(limit)``, ``.get(id)``."""

    def __init__(self, path: str | Path, timeout_s: float = 5.0) -> None:
        self.path = Path(path)
        self.timeout_s = timeout_s
        self._ensure_schema()

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, timeout=self.timeout_s)
        except sqlite3.Error as e:
            raise LedgerError(f"cannot open ledger {self.path}: {e}") from None
        conn.row_factory = sqlite3.Row
        return conn

    def _ensure_schema(self) -> None:
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
        except sqlite3.DatabaseError as e:
            raise LedgerError(f"{self.path} is not an SQLite ledger database ({e})") from None
        finally:
            conn.close()

    def add(self, record: ExperimentRecord | Mapping[str, Any]) -> int:
        """Store one experiment (secrets redacted) and return its id."""
        rec = record if isinstance(record, ExperimentRecord) else _record_from_mapping(record)
        if rec.verdict not in VERDICTS:
            raise LedgerError(f"verdict must be one of {', '.join(VERDICTS)}, got {rec.verdict!r}")
        if rec.source not in SOURCES:
            raise LedgerError(f"source must be one of {', '.join(SOURCES)}, got {rec.source!r}")
        row = asdict(rec)
        row["load_profile"] = dict(rec.load_profile)
        row["prediction"] = dict(rec.prediction) if rec.prediction is not None else None
        row = {k: redact(v) for k, v in row.items()}
        for col in _JSON_COLUMNS:
            try:
                row[col] = jsonout.dumps(row[col], sort_keys=True)  # unknown (NaN) as null
            except (TypeError, ValueError) as e:
                raise LedgerError(f"{col} is not JSON-serialisable: {e}") from None
        cols = list(row)
        sql = f"INSERT INTO experiments ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})"
        conn = self._connect()
        try:
            with conn:
                cur = conn.execute(sql, [row[c] for c in cols])
            return int(cur.lastrowid or 0)
        except sqlite3.DatabaseError as e:
            raise LedgerError(f"cannot write to ledger {self.path}: {e}") from None
        finally:
            conn.close()

    def list(self, limit: int = 50) -> list[dict[str, Any]]:
        """The most recent experiments first (by start time, then id)."""
        return self._query(
            "SELECT * FROM experiments ORDER BY started_at DESC, id DESC LIMIT ?", (max(int(limit), 0),)
        )

    def get(self, experiment_id: int) -> dict[str, Any] | None:
        rows = self._query("SELECT * FROM experiments WHERE id = ?", (int(experiment_id),))
        return rows[0] if rows else None

    def _query(self, sql: str, params: tuple[Any, ...]) -> builtins.list[dict[str, Any]]:
        conn = self._connect()
        try:
            rows = conn.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as e:
            raise LedgerError(f"cannot read ledger {self.path}: {e}") from None
        finally:
            conn.close()
        out = []
        for r in rows:
            d = dict(r)
            for col in _JSON_COLUMNS:
                d[col] = json.loads(d[col]) if d[col] is not None else None
            out.append(d)
        return out


def _record_from_mapping(m: Mapping[str, Any]) -> ExperimentRecord:
    allowed = set(ExperimentRecord.__dataclass_fields__)
    unknown = sorted(set(m) - allowed - {"id"})
    if unknown:
        raise LedgerError(f"unknown experiment fields: {', '.join(unknown)}")
    try:
        return ExperimentRecord(**{k: v for k, v in m.items() if k in allowed})
    except TypeError as e:
        raise LedgerError(f"incomplete experiment record: {e}") from None
