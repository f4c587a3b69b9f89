"""The guard that keeps tests inside the repository (tests/readguard.py) catches what it must."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from tests import readguard


def _flagged(path: str) -> bool:
    n = len(readguard.OUTSIDE)
    readguard._hook("open", (path, "r", 0))
    hit = len(readguard.OUTSIDE) > n
    del readguard.OUTSIDE[n:]  # this test's own probes must not fail it
    return hit


def test_a_file_outside_the_repository_is_flagged() -> None:
    outside = "/var/lib/dpkg/status"  # exists on every Debian machine, and is no project data
    assert os.path.exists(outside)
    assert _flagged(outside)
    assert _flagged(os.path.relpath(outside))  # relative paths are resolved first
    assert not _flagged("/srv/no/such/page.prom")  # nothing there: nothing read


def test_the_repository_python_and_temp_files_are_inside() -> None:
    assert not _flagged(str(Path(readguard.ROOT) / "tests" / "fixtures" / "pages" / "x.prom"))
    assert not _flagged(os.path.join(tempfile.gettempdir(), "x"))
    assert not _flagged(os.path.join(sys.base_prefix, "lib", "x.py"))
    assert not _flagged("/proc/self/status")
    assert not _flagged("/etc/hosts")


def test_a_file_descriptor_is_not_a_path() -> None:
    n = len(readguard.OUTSIDE)
    readguard._hook("open", (5, "r", 0))
    assert len(readguard.OUTSIDE) == n
