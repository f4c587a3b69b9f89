"""The SQLite experiment ledger: round trip, concurrent readers, bad files, redaction."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from advisor.verify.comparison import compare_bench_files
from advisor.verify.ledger import (
    SCHEMA_VERSION,
    ExperimentRecord,
    Ledger,
    LedgerError,
    record_from_comparison,
)
from tests.paths import FIXTURES

BENCH = FIXTURES / "bench" / "h200-vllm-0.25"


def _record(i: int = 0, **kw: object) -> ExperimentRecord:
    base: dict = {
        "started_at": 1_700_000_000.0 + i,
        "ended_at": 1_700_000_600.0 + i,
        "verdict": "keep",
        "source": "daemon",
        "knob": "max_num_batched_tokens",
        "flag": "--max-num-batched-tokens",
        "old_value": 16384,
        "new_value": 2048,
        "model": "llama-8b",
        "vllm_version": "0.25.0",
        "gpus": "1x H200",
        "load_profile": {"num_prompts": 160, "max_concurrency": 32},
        "buckets": [{"range": "all", "n_a": 160, "n_b": 160}],
        "reasons": [f"reason {i}"],
    }
    base.update(kw)
    return ExperimentRecord(**base)


def test_round_trip_creates_schema_and_keeps_types(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "ledger.db"
    led = Ledger(path)
    first = led.add(_record(0))
    second = led.add(_record(1, verdict="revert", old_value=0.9, new_value=0.95))
    assert (first, second) == (1, 2)
    got = led.get(first)
    assert got is not None
    assert got["old_value"] == 16384 and isinstance(got["old_value"], int)
    assert got["load_profile"] == {"num_prompts": 160, "max_concurrency": 32}
    assert got["reasons"] == ["reason 0"] and got["source"] == "daemon"
    assert led.get(99) is None
    rows = led.list(limit=10)
    assert [r["id"] for r in rows] == [second, first]  # newest first
    assert rows[0]["new_value"] == 0.95
    assert len(led.list(limit=1)) == 1
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert Ledger(path).list(10) == rows  # reopening keeps everything


def test_bad_records_are_rejected(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "l.db")
    with pytest.raises(LedgerError, match="verdict"):
        led.add(_record(verdict="maybe"))
    with pytest.raises(LedgerError, match="source"):
        led.add(_record(source="cron"))
    with pytest.raises(LedgerError, match="unknown experiment fields: colour"):
        led.add({"started_at": 1.0, "verdict": "keep", "source": "compare", "colour": "red"})
    with pytest.raises(LedgerError, match="incomplete"):
        led.add({"verdict": "keep", "source": "compare"})
    assert led.add({"started_at": 1.0, "verdict": "inconclusive", "source": "compare"}) == 1


def test_secrets_are_redacted_before_storage(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "l.db")
    rid = led.add(
        _record(
            load_profile={"cmdline": "vllm serve m --api-key sk-123 --port 8000", "hf_token": "hf_abc"},
            reasons=["restarted with --api-key=sk-456"],
        )
    )
    raw = b"".join(f.read_bytes() for f in tmp_path.glob("l.db*"))
    assert b"sk-123" not in raw and b"hf_abc" not in raw and b"sk-456" not in raw
    got = led.get(rid)
    assert got is not None
    assert got["load_profile"]["cmdline"] == "vllm serve m --api-key <redacted> --port 8000"
    assert got["load_profile"]["hf_token"] == "<redacted>"


def test_one_writer_thread_and_concurrent_readers(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "l.db")
    errors: list[BaseException] = []
    done = threading.Event()
    seen: list[list[int]] = [[], [], []]

    def writer() -> None:
        try:
            for i in range(40):
                led.add(_record(i))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
        finally:
            done.set()

    def reader(k: int) -> None:
        try:
            while not done.is_set():
                seen[k].append(len(Ledger(tmp_path / "l.db").list(100)))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [
        threading.Thread(target=writer),
        *(threading.Thread(target=reader, args=(k,)) for k in range(3)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    assert len(led.list(100)) == 40
    for counts in seen:  # each reader saw only committed states, never going backwards
        assert counts == sorted(counts) and all(0 <= n <= 40 for n in counts)


def test_not_a_database_and_newer_schema(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is a text file, certainly not sqlite" * 100)
    with pytest.raises(LedgerError, match="not an SQLite ledger database"):
        Ledger(junk)
    with pytest.raises(LedgerError, match="is a directory"):
        Ledger(tmp_path)
    newer = tmp_path / "newer.db"
    with sqlite3.connect(newer) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(LedgerError, match="schema version"):
        Ledger(newer)


def test_record_from_a_real_comparison(tmp_path: Path) -> None:
    c = compare_bench_files(
        BENCH / "C_b16384" / "bench.json.gz", BENCH / "C_b2048" / "bench.json.gz", target="itl_p95"
    )
    rec = record_from_comparison(
        c, 1_700_000_000.0, knob="max_num_batched_tokens", old_value=16384, new_value=2048
    )
    led = Ledger(tmp_path / "l.db")
    got = led.get(led.add(rec))
    assert got is not None
    assert got["verdict"] == "keep" and got["source"] == "compare"
    assert got["reasons"] == list(c.reasons)
    assert got["load_profile"]["same"] is True
    assert got["buckets"][0]["metrics"]["itl_p95"]["significant"] is True


V1_SCHEMA = """
CREATE TABLE experiments (
    id INTEGER PRIMARY KEY AUTOINCREMENT, started_at REAL NOT NULL, ended_at REAL, knob TEXT,
    flag TEXT, old_value TEXT, new_value TEXT, model TEXT, vllm_version TEXT, gpus TEXT,
    load_profile TEXT NOT NULL DEFAULT '{}', buckets TEXT NOT NULL DEFAULT '[]',
    verdict TEXT NOT NULL CHECK (verdict IN ('keep', 'revert', 'inconclusive')),
    reasons TEXT NOT NULL DEFAULT '[]', source TEXT NOT NULL CHECK (source IN ('daemon', 'compare'))
);
INSERT INTO experiments (started_at, verdict, source, knob, old_value, new_value)
    VALUES (1700000000.0, 'keep', 'daemon', 'max_num_seqs', '48', '72');
PRAGMA user_version = 1;
"""


def test_a_version_1_ledger_gains_the_prediction_column_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(V1_SCHEMA)
    led = Ledger(path)
    (old,) = led.list(10)
    assert (old["knob"], old["old_value"], old["new_value"], old["prediction"]) == (
        "max_num_seqs",
        48,
        72,
        None,
    )
    pred = {
        "knob": "max_num_seqs",
        "predicted": {"output_tokens_per_second": 6000.0},
        "measured_after": {"output_tokens_per_second": 5900.0},
        "error": {"output_tokens_per_second": 6000.0 / 5900.0 - 1},
    }
    rid = led.add(_record(1, prediction=pred))
    got = led.get(rid)
    assert got is not None and got["prediction"] == pred
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 2
