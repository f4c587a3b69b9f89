"""A recorded session is read within bounds (issue 23, class 3): a page that is a gzip bomb, a
meta.json nested 200,000 deep or larger than any real one, a log line of 40 MB without a newline.
Each is one SessionError naming the file (or, for the log line, a line cut at 64 KiB), never an
unbounded read: the bomb decoded in full before, the nesting was a RecursionError.

The sessions are copies of the bundled H200 recording with one file replaced.
"""

from __future__ import annotations

import shutil
import tracemalloc
from pathlib import Path

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.cli.common import DEMO_SESSION
from advisor.sources.logprefix import MAX_LINE_CHARS
from advisor.sources.metrics import MAX_PAGE_BYTES
from advisor.sources.session import Session, SessionError
from tests.vllm_standin import gzip_bomb


@pytest.fixture()
def copy(tmp_path: Path) -> Path:
    d = tmp_path / "s"
    shutil.copytree(DEMO_SESSION, d)
    return d


def test_a_page_that_is_a_gzip_bomb_is_refused_without_decoding_it(copy: Path) -> None:
    first = sorted((copy / "metrics").iterdir())[0]
    first.write_bytes(gzip_bomb(512))  # 512 MiB of zeros in ~0.5 MB
    s = Session.load(copy)
    tracemalloc.start()
    with pytest.raises(SessionError) as e:
        s.read_scrape(0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert first.name in str(e.value) and "larger than" in str(e.value)
    # bounded by the page limit (32 MiB decoded, zlib's buffers), not by what the bomb holds
    assert peak < 2.5 * MAX_PAGE_BYTES, f"{peak / 2**20:.0f} MiB"
    res = CliRunner().invoke(main, ["explain", "--session", str(copy)])
    assert res.exit_code == 1 and "larger than" in res.output and "Traceback" not in res.output


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", "nested too deeply"),
        (b'{"pad": "' + b"x" * (17 * 2**20) + b'"}', "larger than"),
    ],
    ids=["deep", "huge"],
)
def test_meta_json_nested_or_huge_is_one_clear_error(copy: Path, body: bytes, words: str) -> None:
    (copy / "meta.json").write_bytes(body)
    with pytest.raises(SessionError) as e:
        Session.load(copy)
    assert "meta.json" in str(e.value) and words in str(e.value)


def test_a_40mb_log_line_is_cut_not_held(copy: Path) -> None:
    log = copy / "vllm.log"
    with log.open("ab") as fh:
        fh.write(b"INFO 11-30 10:00:00 [x.py:1] " + b"y" * (40 * 2**20))  # no newline
    s = Session.load(copy)
    tracemalloc.start()
    longest = max(len(line) for line in s.log_lines())
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert longest <= MAX_LINE_CHARS
    assert peak < 16 * 2**20, f"{peak / 2**20:.0f} MiB"
