"""Fixtures of the CLI's contract tests: a port nothing listens on, one already taken."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest


@pytest.fixture()
def dead_url() -> str:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture()
def busy_port() -> Iterator[int]:
    """A loopback port another socket holds, listening."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield s.getsockname()[1]
