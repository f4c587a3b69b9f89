"""Real read-only and full file systems for the state-dir tests.

The tests run as root, and root writes through a file's mode bits: ``chmod 0o444`` would not
stop a write. What stops root is the kernel: a read-only bind mount (``EROFS``) and a tmpfs
of a few pages that is filled (``ENOSPC``). Both need ``mount`` (CAP_SYS_ADMIN): where it is
refused (an unprivileged container) the test is skipped, saying why; nothing is faked.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def _mount(*args: str) -> None:
    res = subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        pytest.skip(f"mount {' '.join(args)} is not permitted here: {res.stderr.strip()}")


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30, check=False)


@contextmanager
def read_only(path: Path) -> Iterator[Path]:
    """``path`` (a directory) bind-mounted read-only on itself: every write under it fails with
    EROFS, root's too, while its files read as before."""
    _mount("--bind", str(path), str(path))
    try:
        _mount("-o", "remount,ro,bind", str(path))
        yield path
    finally:
        _umount(path)


@contextmanager
def tiny_fs(path: Path, size: str = "64k") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``path`` (made if missing)."""
    path.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path))
    try:
        yield path
    finally:
        _umount(path)


def fill(path: Path) -> int:
    """Fill the file system holding ``path`` until a write fails with ENOSPC; the bytes written."""
    n = 0
    with (path / "filler").open("wb", buffering=0) as f:
        block = b"\0" * 4096
        try:
            while True:
                n += f.write(block)
        except OSError as e:
            assert e.errno == 28, e
    # the last partial page too
    try:
        with (path / "filler-tail").open("wb", buffering=0) as f:
            while True:
                n += f.write(b"\0")
    except OSError:
        pass
    os.sync()
    return n


@contextmanager
def immutable(path: Path) -> Iterator[Path]:
    """``chattr +i`` on ``path``: no process writes it, root's neither (EPERM), where the file
    system and the capability allow it (skipped otherwise)."""
    res = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        pytest.skip(f"chattr +i is not permitted here: {res.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], capture_output=True, timeout=30, check=False)
