"""The advisor's own structured logs (structlog): always on stderr, so that stdout carries only
what a command prints; JSON lines when stderr is not a terminal, readable columns when it is.

Exceptions are rendered into the line (``exception``: type, message and frames in JSON), and
the standard library's loggers (urllib3's) go through the same renderer, so the log
stays one JSON object per line."""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

from advisor.core.redact import redact_obj

# loggers of libraries that write through the standard library, and the least level kept
LIBRARY_LOGGERS = {"urllib3": logging.WARNING}
_SILENT = logging.CRITICAL + 10  # above every level: nothing is written


def _redact(logger: Any, name: str, event: dict[str, Any]) -> dict[str, Any]:
    """No secret reaches the log: every value (a URL's password, a token in an error's text,
    an argv) goes through :mod:`advisor.core.redact`, whatever the call site passed."""
    return {k: redact_obj(v) if isinstance(v, str | list | tuple | dict) else v for k, v in event.items()}


def _drop(logger: Any, name: str, event: Any) -> Any:
    raise structlog.DropEvent


class _Stderr:
    """Whatever sys.stderr is when a line is written (tests and click swap it)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


class _StderrHandler(logging.StreamHandler):
    """A stream handler on the current sys.stderr (not the one at configuration time)."""

    def __init__(self) -> None:
        super().__init__(_Stderr())


def configure_logging(json_logs: bool | None = None, quiet: bool = False) -> None:
    """``quiet``: no log lines at all (a one-shot command: what it has to say is its output and
    at most one ``error:`` line; the structured log is the daemon's, ``run``)."""
    if json_logs is None:
        json_logs = not sys.stderr.isatty()
    renderer: Any = structlog.processors.JSONRenderer() if json_logs else structlog.dev.ConsoleRenderer()
    shared: list[Any] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if json_logs:
        # the error text and frames, not only exc_info: true; never the frames' locals (secrets)
        shared.append(
            structlog.processors.ExceptionRenderer(
                structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
            )
        )
    shared.append(_redact)
    structlog.configure(
        processors=[_drop, *shared, renderer] if quiet else [*shared, renderer],
        logger_factory=structlog.PrintLoggerFactory(file=_Stderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    # the standard library's loggers (urllib3) through the same processors and renderer
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler = _StderrHandler()
    handler.setFormatter(formatter)
    handler.set_name("vllm-advisor")
    for name, level in LIBRARY_LOGGERS.items():
        lib = logging.getLogger(name)
        lib.handlers = [h for h in lib.handlers if h.get_name() != "vllm-advisor"] + [handler]
        lib.setLevel(_SILENT if quiet else level)
        lib.propagate = False
