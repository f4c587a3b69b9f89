"""The log path under hostile input (issue 17): two rotations within one poll lose nothing, and
long log lines do not pile up in memory."""

from __future__ import annotations

import os
from pathlib import Path

from advisor.core.config import Config
from advisor.diagnose.ruleset import load_rules
from advisor.drive.runner import MAX_KEPT_LINE_CHARS, Advisor
from advisor.sources import follow


def test_two_rotations_within_one_poll_lose_no_file(tmp_path: Path) -> None:
    """log -> log.1 -> log.2 and a second file through log -> log.1 while the follower is
    suspended between two reads: the middle file is read, then the new one."""
    path = tmp_path / "vllm.log"
    path.write_text("a1\na2\n")
    f = follow.FileFollower(path, from_start=True, poll_interval=0.01)
    gen = f.lines()
    assert [next(gen), next(gen)] == ["a1", "a2"]
    # both rotations happen while the follower sleeps (the generator is suspended)
    os.rename(path, tmp_path / "vllm.log.1")
    path.write_text("b1\nb2\n")
    os.rename(tmp_path / "vllm.log.1", tmp_path / "vllm.log.2")
    os.rename(path, tmp_path / "vllm.log.1")
    path.write_text("c1\n")
    got = [next(gen) for _ in range(3)]
    f.close()
    assert got == ["b1", "b2", "c1"]
    assert f.rotations == 2


def test_a_stale_rotated_file_is_not_read_again(tmp_path: Path) -> None:
    """Delete and re-create (no rename) next to an old vllm.log.1: the old file stays unread."""
    old = tmp_path / "vllm.log.1"
    old.write_text("old1\n")
    os.utime(old, (1_000_000, 1_000_000))
    path = tmp_path / "vllm.log"
    path.write_text("a1\n")
    f = follow.FileFollower(path, from_start=True, poll_interval=0.01)
    gen = f.lines()
    assert next(gen) == "a1"
    path.unlink()
    path.write_text("c1\n")
    assert next(gen) == "c1"
    f.close()


def test_long_log_lines_do_not_pile_up_in_the_window() -> None:
    """Long engine-stats lines (8 KB here; up to 64 KB are read): each event keeps its parsed
    fields and at most MAX_KEPT_LINE_CHARS of raw text (it kept the whole line: +121 MB per
    2,000 lines of 64 KB)."""
    adv = Advisor(Config(), load_rules())
    pad = " x" * 4_000
    for i in range(300):
        adv.on_log_line(
            f"INFO 11-30 10:{i // 60 % 60:02d}:{i % 60:02d} [loggers.py:1] Engine 000: Avg prompt throughput: "
            f"1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs{pad}"
        )
    adv.flush_logs()
    events = adv.window.events()
    assert len(events) >= 290
    assert all(len(e.line) <= MAX_KEPT_LINE_CHARS for e in events)
    assert sum(len(e.line) for e in events) <= 300 * MAX_KEPT_LINE_CHARS
    assert events[-1].fields.get("running") == 3
