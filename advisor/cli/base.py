"""What the command group needs before any command runs: the exit codes, the one ``error:``
line, and the group that turns any escaping error into one line. Light on purpose: ``--version``
and a usage error load this and click, not the pipeline (advisor/cli/__init__.py loads each
command's module only when that command is asked for).
"""

from __future__ import annotations

import inspect as _inspect
import os
import sys
from typing import Any

import click

from advisor.core import config as config_mod
from advisor.core.redact import redact_text
from advisor.core.shown import printable

FORMATS = click.Choice(["text", "json", "markdown"])
TEXT_OR_JSON = click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Output format.",
)
TEXT_JSON_OR_MARKDOWN = click.option(
    "--format", "fmt", type=FORMATS, default="text", show_default=True, help="Output format."
)
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_ADVICE = 3
EXIT_NO_DATA = 4
EXIT_CODES_HELP = (
    "Exit codes: 0 ok, 1 error (the command could not do its job), 2 usage (a wrong flag, "
    "setting or config file), 3 advice (explain --exit-code), 4 no data (too little to diagnose)."
)


def fail(msg: str, code: int = EXIT_ERROR) -> None:
    """One ``error:`` line (secrets removed: a URL's password, a token in an error's text;
    control characters of names it quotes escaped)."""
    click.echo(f"error: {printable(redact_text(msg), keep_newlines=True)}", err=True)
    sys.exit(code)


class Group(click.Group):
    """Lists every command with its whole summary (click cuts them at ~45 characters), and turns
    any error that escapes a command into one line and an exit code instead of a traceback."""

    group_class = type  # subgroups are Group too

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, _summary(cmd)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Click's own errors in the contract's shape: a usage error keeps click's usage line,
        then one ``error:`` line naming the mistake and where help is (exit 2)."""
        standalone = kwargs.pop("standalone_mode", True)
        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[call-overload]
        except click.exceptions.UsageError as e:
            if e.ctx is not None:
                click.echo(e.ctx.get_usage(), err=True)
                hint = f" (see '{e.ctx.command_path} --help')"
            else:
                hint = ""
            fail(f"{e.format_message().rstrip('.')}{hint}", EXIT_USAGE)
        except click.exceptions.ClickException as e:  # a bad file argument and the like
            fail(e.format_message(), e.exit_code if e.exit_code in (EXIT_ERROR, EXIT_USAGE) else EXIT_ERROR)
        except click.exceptions.Abort:
            fail("interrupted")
        if not standalone:
            return rv
        sys.exit(rv if isinstance(rv, int) else EXIT_OK)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except config_mod.ConfigError as e:
            fail(f"config: {e}", EXIT_USAGE)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as e:  # unforeseen: one line; the traceback only on request
            if os.environ.get("VLLM_ADVISOR_DEBUG"):
                raise
            fail(f"{type(e).__name__}: {e} (set VLLM_ADVISOR_DEBUG=1 for the traceback)")
        return None


def _summary(cmd: click.Command) -> str:
    if cmd.short_help:
        return cmd.short_help
    first = _inspect.cleandoc(cmd.help or "").split("\n\n")[0]
    return " ".join(first.split())
