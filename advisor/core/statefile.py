"""Files in the daemon's state dir, opened without following symbolic links.

The state dir holds what the daemon writes (``daemon.lock``, ``diagnosis.json``,
``advice-history.json``, ``experiment.json``, the ledger). A symbolic link there is one the
daemon did not make: following it would let whoever can write the directory make the daemon
truncate or overwrite any file it can reach (``daemon.lock`` -> ``/etc/passwd``). Every open
here passes ``O_NOFOLLOW``, and a link is refused with an error naming it. The directory
itself may be a link (an operator's choice, made before the daemon runs): only the files in it
are checked.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

LINK_HINT = "refusing to follow it: remove the link, or give the daemon a --state-dir of its own"


class UnsafePath(OSError):
    """A path in the state dir that is a symbolic link (or otherwise not a plain file)."""


def _refused(path: Path) -> UnsafePath:
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    return UnsafePath(
        errno.ELOOP, f"{path} is a symbolic link (to {target}) the daemon did not make: {LINK_HINT}"
    )


def refuse_link(path: str | Path) -> None:
    """Raise :class:`UnsafePath` when ``path`` is a symbolic link (for files another library
    opens, such as SQLite's, which cannot be asked not to follow one)."""
    p = Path(path)
    if p.is_symlink():
        raise _refused(p)


def open_fd(path: str | Path, flags: int, mode: int = 0o644) -> int:
    """``os.open`` with ``O_NOFOLLOW``: a link is :class:`UnsafePath`, naming it."""
    p = Path(path)
    try:
        return os.open(p, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _refused(p) from None
        raise


def read_text(path: str | Path) -> str:
    fd = open_fd(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        return f.read().decode()


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through ``PATH.tmp`` and a rename, following no link. A write
    that fails (a full disk) removes its temporary file and raises the OSError."""
    p = Path(path)
    refuse_link(p)
    tmp = p.with_name(p.name + ".tmp")
    fd = open_fd(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode())
        os.replace(tmp, p)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if e.filename is None:  # a write's ENOSPC names no file: name it
            e.filename = str(tmp)
        raise


def remove(path: str | Path) -> None:
    """Remove ``path`` if it is there (a link is removed, never followed)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
