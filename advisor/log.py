"""The advisor's own structured logs (structlog): always on stderr, so that stdout carries only
what a command prints; JSON lines when stderr is not a terminal, readable columns when it is."""

from __future__ import annotations

import sys
from typing import Any

import structlog


class _Stderr:
    """Whatever sys.stderr is when a line is written (tests and click swap it)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(json_logs: bool | None = None) -> None:
    if json_logs is None:
        json_logs = not sys.stderr.isatty()
    renderer: Any = structlog.processors.JSONRenderer() if json_logs else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        logger_factory=structlog.PrintLoggerFactory(file=_Stderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
