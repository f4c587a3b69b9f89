"""What every command shares: exit codes, one-line errors, the config and rules loaders, the
output-format options, the command group that turns any escaping error into one line.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from advisor.cli.base import (
    EXIT_ADVICE,
    EXIT_CODES_HELP,
    EXIT_ERROR,
    EXIT_NO_DATA,
    EXIT_OK,
    EXIT_USAGE,
    FORMATS,
    TEXT_JSON_OR_MARKDOWN,
    TEXT_OR_JSON,
    Group,
    fail,
)
from advisor.cli.rules import checked_rules
from advisor.core import config as config_mod
from advisor.diagnose.ruleset import rule_ids
from advisor.drive.daemon import DaemonError
from advisor.sources.cmdline import CommandError, read_command_file
from advisor.sources.engine_config import EngineSourceError, from_config_file
from advisor.sources.metrics import MetricsError

DEMO_SESSION = Path(__file__).resolve().parent.parent / "data" / "sessions" / "h200-A_s256"


def load_config(config_file: str | None, **flags: Any) -> config_mod.Config:
    """The advisor's settings; an ``--engine-config`` given is read once here, so that a bad
    one is a usage error (exit 2) and not silently left out of every later resolution."""
    try:
        cfg = config_mod.load(config_file, rule_ids=rule_ids, **flags)
    except config_mod.ConfigError as e:
        fail(f"config: {e}", EXIT_USAGE)
        raise  # unreachable
    if cfg.engine_config:
        try:
            from_config_file(cfg.engine_config)
        except EngineSourceError as e:
            fail(str(e), EXIT_USAGE)
    return cfg


def use_color() -> bool:
    return sys.stdout.isatty()


def pasted_command(command_file: str | None) -> Any:
    """A pasted launch command (``--command-file``) as ``sources.engine.PastedCommand``, its
    warnings on stderr; None without the option. Reusable by any command that takes it."""
    if not command_file:
        return None

    try:
        cmd = read_command_file(command_file)
    except CommandError as e:
        fail(str(e))
        raise
    for w in cmd.warnings:
        click.echo(f"warning: {command_file}: {w}", err=True)
    return cmd


def daemon_errors() -> tuple[type[BaseException], ...]:

    return (MetricsError, EngineSourceError, DaemonError, OSError)


__all__ = [
    "DEMO_SESSION",
    "EXIT_ADVICE",
    "EXIT_CODES_HELP",
    "EXIT_ERROR",
    "EXIT_NO_DATA",
    "EXIT_OK",
    "EXIT_USAGE",
    "FORMATS",
    "TEXT_JSON_OR_MARKDOWN",
    "TEXT_OR_JSON",
    "Group",
    "checked_rules",
    "daemon_errors",
    "fail",
    "load_config",
    "pasted_command",
    "use_color",
]
