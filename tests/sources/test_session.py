"""Session format: writer/reader round trip, replay order and pacing, errors, redaction,
and ``record`` driven by a fake HTTP client and an injected clock (no real waiting)."""

from __future__ import annotations

import gzip
import json
import shutil
import sys
import threading
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import requests
from click.testing import CliRunner

from advisor.cli import main
from advisor.core.redact import redact_obj, redact_text, redact_url
from advisor.sources.session import (
    FileTail,
    Session,
    SessionError,
    SessionWriter,
    parse_log_time,
    record,
    update_meta,
)
from tests.paths import FIXTURES

FIXTURE_PAGE = FIXTURES / "pages" / "cpu-0.32-baseline-during.prom"

T0 = datetime(2026, 11, 29, 23, 26, 0, tzinfo=UTC).timestamp()
STATS = (
    "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 231.5 tokens/s, "
    "Running: 8 reqs, Waiting: 8 reqs, CPU KV cache usage: 90.1%, Prefix cache hit rate: 0.0%"
)


def line_at(hms: str, msg: str = STATS, date: str = "11-29") -> str:
    return f"(APIServer pid=30081) INFO {date} {hms} [loggers.py:335] {msg}"


def make_session(
    d: Path,
    scrape_offsets: list[float],
    lines: list[str],
    started: float = T0,
    compress: bool = False,
    meta: dict[str, Any] | None = None,
) -> Path:
    w = SessionWriter(d, compress=compress)
    for off in scrape_offsets:
        w.add_scrape(started + off, f"# page at +{off}\nvllm:num_requests_running 1.0\n")
    for ln in lines:
        w.add_log_line(ln)
    w.write_engine(
        {"knobs": {"max_num_seqs": {"value": 10, "source": "cmdline", "detail": "--max-num-seqs"}}}
    )
    w.close(
        {
            "url": "http://127.0.0.1:8000",
            "started_at": datetime.fromtimestamp(started, tz=UTC).isoformat(),
            "interval_s": 2.0,
            "duration_s": max(scrape_offsets, default=0.0),
            **(meta or {}),
        }
    )
    return d


# ---------------------------------------------------------------------- round trip


@pytest.mark.parametrize("compress", [False, True])
def test_round_trip_keeps_pages_verbatim_and_in_time_order(tmp_path: Path, compress: bool) -> None:
    real = FIXTURE_PAGE.read_text()
    broken = "this is {not a prometheus page\n\x00 at all"
    w = SessionWriter(tmp_path / "s", compress=compress)
    # written out of order: the reader sorts by time
    w.add_scrape(T0 + 4.0, broken)
    w.add_scrape(T0 + 0.0, real)
    w.add_scrape(T0 + 2.0, "")
    w.add_log_line("first line\n")
    w.add_log_line("second line")
    w.write_engine({"knobs": {}, "vllm_version": "0.32.0"})
    meta = w.close({"url": "http://h:1", "started_at": "2026-11-29T23:26:00+00:00", "notes": "n"})
    assert meta["scrapes"] == 3 and meta["log_lines"] == 2 and meta["format"] == 1

    s = Session.load(tmp_path / "s")
    assert [t for t, _ in s.scrapes] == [T0, T0 + 2.0, T0 + 4.0]
    suffix = ".prom.gz" if compress else ".prom"
    assert all(p.name.endswith(suffix) for _, p in s.scrapes)
    assert s.read_scrape(0) == real
    assert s.read_scrape(1) == ""
    assert s.read_scrape(2) == broken
    assert s.read_scrape(-1) == broken
    with pytest.raises(IndexError):
        s.read_scrape(3)
    assert list(s.log_lines()) == ["first line", "second line"]
    assert s.engine == {"knobs": {}, "vllm_version": "0.32.0"}
    assert s.meta["notes"] == "n"
    assert s.meta["errors"] == [] and s.meta["advisor_version"]


def test_two_scrapes_in_one_millisecond_are_both_kept(tmp_path: Path) -> None:
    w = SessionWriter(tmp_path)
    w.add_scrape(T0, "a")
    w.add_scrape(T0, "b")
    w.close({})
    s = Session.load(tmp_path)
    assert [s.read_scrape(i) for i in range(2)] == ["a", "b"]


def test_gzipped_log_and_missing_log_are_read(tmp_path: Path) -> None:
    d = make_session(tmp_path / "s", [0.0], ["x", "y"])
    (d / "vllm.log").unlink()
    assert list(Session.load(d).log_lines()) == []
    (d / "vllm.log.gz").write_bytes(gzip.compress(b"x\ny\n"))
    assert list(Session.load(d).log_lines()) == ["x", "y"]


def test_update_meta_merges(tmp_path: Path) -> None:
    d = make_session(tmp_path / "s", [0.0], [])
    update_meta(d, {"summary": {"peak_running": 10}, "notes": "changed"})
    meta = Session.load(d).meta
    assert meta["summary"] == {"peak_running": 10} and meta["notes"] == "changed" and meta["scrapes"] == 1


# ---------------------------------------------------------------------- replay


def test_replay_places_log_lines_by_their_timestamps(tmp_path: Path) -> None:
    lines = [
        "Triton is installed, but doesn't include CPU backend.",  # no stamp, at the top
        line_at("23:25:30", "startup fact"),  # before the first scrape (start-up)
        line_at("23:26:03", "stats A"),
        "Traceback (most recent call last):",  # no stamp: right after the line above
        line_at("23:26:02", "stats B (stamped earlier, printed later)"),
        line_at("23:26:05", "stats C"),
    ]
    d = make_session(tmp_path / "s", [0.5, 2.5, 4.5, 6.5], lines)
    items = list(Session.load(d).replay())
    got = [(k, text if k == "log" else f"scrape@{(t or 0.0) - T0}") for k, t, text in items]
    assert got == [
        ("log", lines[0]),  # goes with the first stamped line below it: start-up, before any scrape
        ("log", lines[1]),
        ("scrape", "scrape@0.5"),
        ("scrape", "scrape@2.5"),
        ("log", lines[2]),
        ("log", lines[3]),
        ("log", lines[4]),
        ("scrape", "scrape@4.5"),
        ("log", lines[5]),
        ("scrape", "scrape@6.5"),
    ]
    # log items carry their own timestamp, or None
    logs = [(t, text) for k, t, text in items if k == "log"]
    assert logs[0][0] is None and logs[3][0] is None
    assert logs[2][0] == T0 + 3.0 and logs[4][0] == T0 + 2.0
    # scrape items carry the page
    assert items[2].text.startswith("# page at +0.5")


@pytest.mark.parametrize(
    ("marks", "expected"),
    [
        # with the recorder's marks an unstamped line goes right after the scrape it followed
        ([0, 1, 2], ["S0", "A", "S2", "GET", "S4", "POST"]),
        # without them, right after the line above it
        (None, ["S0", "A", "GET", "POST", "S2", "S4"]),
    ],
)
def test_unstamped_lines_follow_the_scrape_they_were_read_after(
    tmp_path: Path, marks: list[int] | None, expected: list[str]
) -> None:
    lines = [line_at("23:26:01", "A"), 'INFO: 127.0.0.1:1 - "GET /metrics HTTP/1.1" 200', "POST"]
    d = make_session(tmp_path / "s", [0.0, 2.0, 4.0], lines, meta={"log_marks": marks} if marks else None)
    names = {lines[0]: "A", lines[1]: "GET", lines[2]: "POST"}
    got = [f"S{(t or 0) - T0:.0f}" if k == "scrape" else names[x] for k, t, x in Session.load(d).replay()]
    assert got == expected


@pytest.mark.parametrize("marks", [[0, 1], [2, 1, 3], [0, "1", 2], "012"])
def test_bad_log_marks_are_a_session_error(tmp_path: Path, marks: Any) -> None:
    d = make_session(tmp_path / "s", [0.0, 2.0, 4.0], [], meta={"log_marks": marks})
    with pytest.raises(SessionError, match="log_marks"):
        Session.load(d)


def test_untimestamped_lines_go_after_the_first_scrape_without_any_stamp(tmp_path: Path) -> None:
    d = make_session(tmp_path / "s", [0.0, 2.0], ["a", "b"])
    kinds = [(k, x) for k, _, x in Session.load(d).replay()]
    assert [k for k, _ in kinds] == ["scrape", "log", "log", "scrape"]


def test_log_year_comes_from_started_at_and_crosses_new_year() -> None:
    started = datetime(2026, 12, 31, 23, 59, 58, tzinfo=UTC)
    assert (
        parse_log_time(line_at("00:00:01", date="01-01"), started)
        == datetime(2027, 1, 1, 0, 0, 1, tzinfo=UTC).timestamp()
    )
    started = datetime(2027, 1, 1, 0, 0, 5, tzinfo=UTC)
    assert (
        parse_log_time(line_at("23:59:50", date="12-31"), started)
        == datetime(2026, 12, 31, 23, 59, 50, tzinfo=UTC).timestamp()
    )


def test_log_time_uses_the_recording_time_zone() -> None:
    plus1 = timezone(timedelta(hours=1))
    started = datetime(2026, 11, 29, 23, 0, 0, tzinfo=plus1)
    got = parse_log_time("INFO 11-29 23:26:03 [x.py:1] hi", started)
    assert got == datetime(2026, 11, 29, 22, 26, 3, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    "line",
    ["no stamp here", "Engine 000: Running: 8 reqs", "(APIServer pid=1) INFO 13-45 25:61:00 bad date"],
)
def test_lines_without_a_valid_stamp_have_none(line: str) -> None:
    assert parse_log_time(line, datetime(2026, 1, 1, tzinfo=UTC)) is None


def test_iso_stamps_are_read_too() -> None:
    started = datetime(2026, 11, 29, tzinfo=UTC)
    got = parse_log_time("INFO 2026-11-29 23:26:03,250 something", started)
    assert got == datetime(2026, 11, 29, 23, 26, 3, 250000, tzinfo=UTC).timestamp()


class FakeTime:
    """A clock that only moves when someone sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def test_replay_speed_paces_by_the_session_timeline(tmp_path: Path) -> None:
    lines = [line_at("23:26:03", "x")]
    d = make_session(tmp_path / "s", [0.0, 2.0, 4.0, 10.0], lines)
    ft = FakeTime()
    walls = [(ft.now, k) for k, _, _ in Session.load(d).replay(speed=10, clock=ft.clock, sleep=ft.sleep)]
    assert sum(ft.sleeps) == pytest.approx(1.0)  # 10 s of session at 10x
    assert [w - 1000.0 for w, _ in walls] == pytest.approx([0.0, 0.2, 0.3, 0.4, 1.0])
    assert [k for _, k in walls] == ["scrape", "scrape", "log", "scrape", "scrape"]


def test_replay_reads_the_log_before_the_first_page_at_once(tmp_path: Path) -> None:
    """A log that starts 80 s before the first page (a server's start-up): its lines come at
    once and the pacing starts at the first page (issue 33: `run --replay` showed vLLM DOWN for
    those 80 s)."""
    lines = [line_at("23:24:43", "start-up"), line_at("23:25:33", "loaded"), line_at("23:26:02", "x")]
    d = make_session(tmp_path / "s", [0.0, 4.0], lines)
    ft = FakeTime()
    walls = [
        (ft.now - 1000.0, k) for k, _, _ in Session.load(d).replay(speed=1, clock=ft.clock, sleep=ft.sleep)
    ]
    assert [k for _, k in walls] == ["log", "log", "scrape", "log", "scrape"]
    assert [w for w, _ in walls] == pytest.approx([0.0, 0.0, 0.0, 2.0, 4.0])


def test_replay_does_not_drift_when_the_consumer_is_slow(tmp_path: Path) -> None:
    d = make_session(tmp_path / "s", [0.0, 2.0, 4.0], [])
    ft = FakeTime()
    for _ in Session.load(d).replay(speed=1, clock=ft.clock, sleep=ft.sleep):
        ft.now += 1.5  # the consumer takes 1.5 s per item
    assert ft.sleeps == pytest.approx([0.5, 0.5])


def test_replay_as_fast_as_possible_never_sleeps(tmp_path: Path) -> None:
    d = make_session(tmp_path / "s", [0.0, 100.0], [])

    def no_sleep(s: float) -> None:
        raise AssertionError("slept")

    assert len(list(Session.load(d).replay(None, sleep=no_sleep))) == 2
    with pytest.raises(ValueError, match="speed"):
        list(Session.load(d).replay(0))


# ---------------------------------------------------------------------- errors


def test_missing_dir_is_a_session_error(tmp_path: Path) -> None:
    with pytest.raises(SessionError, match="no such session directory") as e:
        Session.load(tmp_path / "nope")
    assert isinstance(e.value, ValueError) and str(tmp_path / "nope") in str(e.value)


def test_no_metrics_is_a_session_error(tmp_path: Path) -> None:
    (tmp_path / "meta.json").write_text("{}")
    with pytest.raises(SessionError, match="no metrics/"):
        Session.load(tmp_path)
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "README").write_text("not a scrape")
    with pytest.raises(SessionError, match="no scrapes") as e:
        Session.load(tmp_path)
    assert str(tmp_path / "metrics") in str(e.value)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"started_at": "yesterday"}', "not ISO 8601"),
        ('{"started_at": 12}', "ISO 8601 string"),
        ('{"interval_s": -2}', "interval_s"),
        ('{"duration_s": "long"}', "duration_s"),
    ],
)
def test_bad_meta_json_is_a_session_error(tmp_path: Path, content: str, match: str) -> None:
    d = make_session(tmp_path / "s", [0.0], [])
    (d / "meta.json").write_text(content)
    with pytest.raises(SessionError, match=match) as e:
        Session.load(d)
    assert "meta.json" in str(e.value)


def test_bad_engine_json_and_bad_scrape_names_are_session_errors(tmp_path: Path) -> None:
    d = make_session(tmp_path / "s", [0.0], [])
    (d / "engine.json").write_text("nope")
    with pytest.raises(SessionError, match=r"engine\.json"):
        Session.load(d)
    (d / "engine.json").write_text("{}")
    (d / "metrics" / "yesterday.prom").write_text("x")
    with pytest.raises(SessionError, match="unix-ms"):
        Session.load(d)


def test_corrupt_gzip_page_is_a_session_error(tmp_path: Path) -> None:
    d = make_session(tmp_path / "s", [0.0], [], compress=True)
    s = Session.load(d)
    s.scrapes[0][1].write_bytes(b"not gzip")
    with pytest.raises(SessionError, match="gzip"):
        s.read_scrape(0)


def test_a_session_without_meta_still_loads(tmp_path: Path) -> None:
    d = make_session(tmp_path / "s", [0.0, 2.0], [line_at("23:26:01", "x")])
    (d / "meta.json").unlink()
    s = Session.load(d)
    assert s.meta == {} and s.started.timestamp() == T0
    assert [k for k, _, _ in s.replay()] == ["scrape", "log", "scrape"]


# ---------------------------------------------------------------------- redaction


def test_redact_url_drops_credentials_and_secret_params() -> None:
    got = redact_url("http://admin:hunter2@vllm.internal:8000/metrics?api_key=sk-live-1&x=1&token=t0k")
    assert "hunter2" not in got and "admin" not in got and "sk-live-1" not in got and "t0k" not in got
    assert got.startswith("http://vllm.internal:8000/metrics?") and "x=1" in got
    assert redact_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("vllm serve m --api-key sk-abc123 --port 8000", "sk-abc123"),
        ("vllm serve m --api-key=sk-abc123", "sk-abc123"),
        ("non-default args: {'model': 'm', 'api_key': 'sk-abc123', 'port': 8000}", "sk-abc123"),
        ('{"hf_token": "hf_abcdef"}', "hf_abcdef"),
        ("Authorization: Bearer eyJhbGciOi", "eyJhbGciOi"),
        ("GET http://u:p4ss@host/metrics?api_key=zzz", "p4ss"),
        ("VLLM_API_KEY=sk-abc123", "sk-abc123"),
    ],
)
def test_redact_text_removes_secrets(text: str, secret: str) -> None:
    got = redact_text(text)
    assert secret not in got
    assert redact_text(got) == got  # idempotent


@pytest.mark.parametrize(
    "clean",
    [
        line_at("23:26:03"),
        "Chunked prefill is enabled with max_num_batched_tokens=2048.",
        "non-default args: {'model': '/m', 'max_num_seqs': 10, 'max_tokens': 16, 'bos_token_id': 1}",
        "CPU KV cache size: 3,072 tokens",
    ],
)
def test_redact_text_leaves_clean_text_alone(clean: str) -> None:
    assert redact_text(clean) == clean


def test_redact_obj_redacts_secret_keys_and_strings() -> None:
    got = redact_obj(
        {"api_key": "sk-1", "args": ["--api-key", "sk-2"], "cmd": "x --api-key sk-3", "n": 3, "token": None}
    )
    assert "sk-1" not in json.dumps(got) and "sk-3" not in json.dumps(got)
    assert got["n"] == 3 and got["token"] is None


def test_stored_files_are_redacted(tmp_path: Path) -> None:
    w = SessionWriter(tmp_path)
    w.add_scrape(T0, "vllm:x 1\n")
    w.add_log_line(
        "(APIServer pid=1) INFO 11-29 23:26:03 [utils.py:1] non-default args: {'api_key': 'sk-secret'}"
    )
    w.write_engine({"argv": ["vllm", "serve", "--api-key", "sk-secret"], "api_key": "sk-secret"})
    w.close({"url": "http://u:sk-secret@h:1/?api_key=sk-secret", "notes": "served with --api-key sk-secret"})
    for p in tmp_path.rglob("*"):
        if p.is_file():
            assert "sk-secret" not in p.read_text(errors="replace"), p
    assert Session.load(tmp_path).read_scrape(0) == "vllm:x 1\n"


# ---------------------------------------------------------------------- FileTail


def test_file_tail_reads_only_new_complete_lines_and_survives_truncation(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("old line\n")
    tail = FileTail(log)
    assert tail.read_new() == []
    with open(log, "a") as fh:
        fh.write("new 1\nnew 2\npart")
    assert tail.read_new() == ["new 1", "new 2"]
    with open(log, "a") as fh:
        fh.write("ial\n")
    assert tail.read_new() == ["partial"]
    log.write_text("after rotate\n")
    assert tail.read_new() == ["after rotate"]
    with open(log, "a") as fh:
        fh.write("unterminated")
    assert tail.close() == ["unterminated"]
    assert FileTail(log, from_start=True).read_new() == ["after rotate"]
    assert FileTail(tmp_path / "missing.log").read_new() == []


# ---------------------------------------------------------------------- record


class FakeResponse:
    def __init__(self, status: int, text: str) -> None:
        self.status_code = status
        self.text = text

    def json(self) -> Any:
        return json.loads(self.text)


class FakeHttp:
    """Answers /metrics from a script of pages (str, (status, str) or an exception)."""

    def __init__(self, pages: list[Any], version: str | None = "0.32.0") -> None:
        self.pages = list(pages)
        self.version = version
        self.urls: list[str] = []

    def get(self, url: str, timeout: float) -> FakeResponse:
        self.urls.append(url)
        assert timeout > 0
        if url.endswith("/version"):
            if self.version is None:
                raise requests.ConnectionError("no /version")
            return FakeResponse(200, json.dumps({"version": self.version}))
        item = self.pages.pop(0) if self.pages else "vllm:num_requests_running 0.0\n"
        if isinstance(item, Exception):
            raise item
        if isinstance(item, tuple):
            return FakeResponse(*item)
        return FakeResponse(200, item)


def test_record_keeps_every_page_and_records_failures(tmp_path: Path) -> None:
    page = FIXTURE_PAGE.read_text()
    log = tmp_path / "server.log"
    log.write_text(line_at("23:25:00", "before the recording: not taken") + "\n")
    http = FakeHttp(
        [page, "garbage {{{", (500, "Internal Server Error"), requests.ConnectionError("refused"), page, page]
    )
    ft = FakeTime()
    ft.now = T0
    written: list[int] = []

    def sleep(s: float) -> None:
        with open(log, "a") as fh:
            fh.write(line_at(f"23:26:0{len(written)}", "between scrapes") + "\n")
        written.append(1)
        ft.sleep(s)

    seen: list[dict[str, Any]] = []
    res = record(
        "http://user:pw@vllm.example:8000/",
        tmp_path / "sess",
        duration_s=10,
        interval_s=2,
        log_file=log,
        progress=seen.append,
        clock=ft.clock,
        sleep=sleep,
        http=http,
        notes="unit",
        load={"num_prompts": 4},
    )
    assert res.scrapes == 5 and len(seen) == 6  # the refused connection stored no page
    assert [p["ok"] for p in seen] == [True, True, False, False, True, True]  # ok = HTTP 200
    assert ft.sleeps == pytest.approx([2.0] * 5)
    assert all(u == "http://user:pw@vllm.example:8000/metrics" for u in http.urls if "metrics" in u)

    s = Session.load(tmp_path / "sess")
    # the failed connection left no page; every answered page is kept verbatim
    assert [s.read_scrape(i) for i in range(len(s.scrapes))] == [
        page,
        "garbage {{{",
        "Internal Server Error",
        page,
        page,
    ]
    assert [t - T0 for t, _ in s.scrapes] == pytest.approx([0, 2, 4, 8, 10])
    errors = s.meta["errors"]
    assert [e["error"] for e in errors] == ["HTTP 500", "ConnectionError: refused"]
    assert [e["t"] - T0 for e in errors] == pytest.approx([4, 6])
    assert s.meta["url"] == "http://vllm.example:8000"
    assert s.meta["vllm_version"] == "0.32.0"
    assert s.meta["interval_s"] == 2 and s.meta["duration_s"] == pytest.approx(10)
    assert s.meta["notes"] == "unit" and s.meta["load"] == {"num_prompts": 4}
    assert s.meta["started_at"].startswith("2026-11-29") or s.meta["started_at"].startswith("2026-11-30")
    assert datetime.fromisoformat(s.meta["started_at"]).timestamp() == pytest.approx(T0)
    logs = list(s.log_lines())
    assert len(logs) == 5 and all("between scrapes" in ln for ln in logs)
    # one line is appended during each sleep; the refused scrape (t=6) stored no page
    assert s.meta["log_marks"] == [0, 1, 2, 4, 5]
    assert isinstance(s.engine, dict)


def test_record_log_from_start_takes_startup_lines_and_engine_facts(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(
        "(APIServer pid=1) INFO 11-29 23:25:00 [utils.py:1] non-default args: "
        "{'model': '/m', 'max_num_seqs': 10, 'api_key': 'sk-zzz'}\n"
        "(EngineCore_DP0 pid=2) INFO 11-29 23:25:30 [kv_cache_utils.py:2327] CPU KV cache size: 3,072 tokens\n"
    )
    ft = FakeTime()
    ft.now = T0
    record(
        "http://vllm.example:8000",
        tmp_path / "sess",
        duration_s=0,
        log_file=log,
        log_from_start=True,
        clock=ft.clock,
        sleep=ft.sleep,
        http=FakeHttp([FIXTURE_PAGE.read_text()], version=None),
    )
    s = Session.load(tmp_path / "sess")
    assert len(s.scrapes) == 1 and ft.sleeps == []
    assert len(list(s.log_lines())) == 2
    text = (tmp_path / "sess" / "vllm.log").read_text() + (tmp_path / "sess" / "engine.json").read_text()
    assert "sk-zzz" not in text
    # the startup lines are replayed before the first scrape
    assert [k for k, _, _ in s.replay()] == ["log", "log", "scrape"]
    # engine.json is either resolved or explained
    assert s.engine or "engine_note" in s.meta


def test_record_stops_on_the_event_and_still_writes_meta(tmp_path: Path) -> None:
    stop = threading.Event()
    ft = FakeTime()
    n = 0

    def sleep(s: float) -> None:
        nonlocal n
        n += 1
        ft.sleep(s)
        if n == 2:
            stop.set()

    res = record(
        "http://vllm.example:8000",
        tmp_path / "sess",
        duration_s=600,
        interval_s=2,
        clock=ft.clock,
        sleep=sleep,
        stop_event=stop,
        http=FakeHttp([]),
    )
    assert res.scrapes == 2
    assert Session.load(tmp_path / "sess").meta["scrapes"] == 2


def test_record_follows_a_log_command(tmp_path: Path) -> None:
    marker = tmp_path / "printed"
    code = (
        "import os, time\n"
        "print('(APIServer pid=1) INFO 11-29 23:26:00 [a.py:1] hello', flush=True)\n"
        "print('bye', flush=True)\n"
        # written whole, then renamed: the marker never exists empty (the wait below ends on it)
        f"with open({str(marker) + '.tmp'!r}, 'w') as f: f.write(str(os.getpid()))\n"
        f"os.replace({str(marker) + '.tmp'!r}, {str(marker)!r})\n"
        "time.sleep(60)\n"  # like journalctl -f: it never ends by itself
    )
    ft = FakeTime()

    def sleep(s: float) -> None:  # wait (bounded) until the command has printed
        deadline = time.monotonic() + 20
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        ft.sleep(s)

    record(
        "http://vllm.example:8000",
        tmp_path / "sess",
        duration_s=2,
        interval_s=2,
        log_cmd=[sys.executable, "-c", code],
        clock=ft.clock,
        sleep=sleep,
        http=FakeHttp([]),
    )
    # the command (60 s of sleep left) was stopped, not waited for: gone when record returns
    stat = Path(f"/proc/{int(marker.read_text())}/stat")
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    lines = list(Session.load(tmp_path / "sess").log_lines())
    assert lines == ["(APIServer pid=1) INFO 11-29 23:26:00 [a.py:1] hello", "bye"]


def test_record_skips_slots_missed_by_a_slow_scrape(tmp_path: Path) -> None:
    ft = FakeTime()

    class SlowHttp(FakeHttp):
        def get(self, url: str, timeout: float) -> FakeResponse:
            if url.endswith("/metrics") and len(self.urls) == 1:
                ft.now += 5.0  # the second scrape takes 5 s
            return super().get(url, timeout)

    record(
        "http://vllm.example:8000", tmp_path / "s", 10, 2, clock=ft.clock, sleep=ft.sleep, http=SlowHttp([])
    )
    s = Session.load(tmp_path / "s")
    assert [t - 1000.0 for t, _ in s.scrapes] == pytest.approx([0, 2, 8, 10])


def test_record_refuses_bad_arguments(tmp_path: Path) -> None:
    make_session(tmp_path / "old", [0.0], [])
    with pytest.raises(SessionError, match="already holds a session"):
        record("http://h:1", tmp_path / "old", duration_s=1, http=FakeHttp([]))
    with pytest.raises(SessionError, match="interval_s"):
        record("http://h:1", tmp_path / "new", duration_s=1, interval_s=0, http=FakeHttp([]))
    with pytest.raises(SessionError, match="not both"):
        record(
            "http://h:1", tmp_path / "new2", 1, 1, log_file=tmp_path / "a", log_cmd="true", http=FakeHttp([])
        )
    with pytest.raises(SessionError, match="cannot run log_cmd"):
        record("http://h:1", tmp_path / "new3", 1, 1, log_cmd=["/nonexistent/cmd"], http=FakeHttp([]))


def _damaged(tmp_path: Path, name: str) -> Path:
    """The real cpu-healthy recording with one file damaged the way a disk or a hand edit does."""
    d = tmp_path / name
    shutil.copytree(FIXTURES / "sessions" / "cpu-healthy", d)
    if name == "engine-wrong-types":
        data = json.loads((d / "engine.json").read_text())
        data["knobs"] = ["not", "an", "object"]
        (d / "engine.json").write_text(json.dumps(data))
    elif name == "engine-not-json":
        (d / "engine.json").write_text('{"knobs": {')
    elif name == "meta-wrong-types":
        data = json.loads((d / "meta.json").read_text())
        data["interval_s"] = "2s"
        (d / "meta.json").write_text(json.dumps(data))
    elif name == "page-not-gzip":
        first = sorted((d / "metrics").iterdir())[0]
        first.write_bytes(b"not gzip")
    elif name == "page-garbage":
        for p in (d / "metrics").iterdir():
            p.write_bytes(gzip.compress(b"garbage {{{\n"))
    return d


@pytest.mark.parametrize(
    "name", ["engine-wrong-types", "engine-not-json", "meta-wrong-types", "page-not-gzip", "page-garbage"]
)
def test_predict_and_explain_agree_on_a_damaged_session(tmp_path: Path, name: str) -> None:
    """Issue 23, class 6: the same damaged session gives the same exit code (and for an
    unreadable file the same one error line naming it) in ``explain`` and ``predict``."""
    d = _damaged(tmp_path, name)
    ex = CliRunner().invoke(main, ["explain", "--session", str(d)])
    pr = CliRunner().invoke(main, ["predict", "--session", str(d), "--set", "max_num_seqs=8"])
    assert ex.exit_code == pr.exit_code, (ex.output, pr.output)
    assert ex.exit_code in (1, 4)
    if ex.exit_code == 1:
        assert ex.output.splitlines()[-1] == pr.output.splitlines()[-1]
        assert str(d) in ex.output and "Error:" not in ex.output


class _Page:
    status_code = 200
    text = "# HELP vllm:num_requests_running r\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n"


class _Pages:
    def get(self, url: str, timeout: float) -> _Page:
        return _Page()


def test_a_late_scrape_is_not_followed_by_one_at_once(tmp_path: Path) -> None:
    """On a 2 s grid, the second scrape comes 1.92 s late (a busy machine: CI saw pages at 3.92 s
    and 4.00 s): the slot at 4 s is skipped, not fired 0.08 s after it (two pages that close make
    rates of nothing); the grid holds after it."""
    now = [1000.0]
    late = [1.92]

    def sleep(delay: float) -> None:
        now[0] += delay + late[0]
        late[0] = 0.0

    res = record(
        "http://127.0.0.1:9/metrics",
        tmp_path / "rec",
        duration_s=10.0,
        interval_s=2.0,
        clock=lambda: now[0],
        sleep=sleep,
        http=_Pages(),
        server_argv=[],
        host_probe=lambda: {},
    )
    s = Session.load(tmp_path / "rec")
    times = [round(t - 1000.0, 2) for t, _ in s.scrapes]
    assert times == [0.0, 3.92, 6.0, 8.0, 10.0], times
    assert res.scrapes == 5 and res.errors == []
