"""Command-line interface (thin: parse, call one function, set the exit code).

Exit codes (every command; ``EXIT_CODES_HELP`` is the text ``--help`` shows):
0 ok; 1 error: the command could not do its job (a server that cannot be read, an unreadable
file), one line on stderr; 2 usage: a flag, setting or config file is wrong, one line naming
it; 3 advice (``explain --exit-code``); 4 no data: the input was read but holds too little to
diagnose (insufficient data). No user mistake prints a traceback; an unforeseen error prints
one line too (``VLLM_ADVISOR_DEBUG=1`` shows its traceback).
"""

from __future__ import annotations

import importlib

import click

from advisor import __version__
from advisor.cli.base import EXIT_CODES_HELP, Group

LOGS = "advisor.core.log"
"""The structured log's set-up (structlog, and with it rich's tracebacks and asyncio: about as
long to import as the rest of a start-up), loaded like a command: when a command runs."""

COMMANDS = {
    "explain": ("advisor.cli.diagnosis", "explain"),
    "predict": ("advisor.cli.diagnosis", "predict"),
    "inspect": ("advisor.cli.diagnosis", "inspect"),
    "rules": ("advisor.cli.rules", "rules"),
    "generate": ("advisor.cli.project", "generate"),
    "config": ("advisor.cli.project", "config_group"),
    "record": ("advisor.cli.serve", "record"),
    "run": ("advisor.cli.serve", "run"),
    "demo": ("advisor.cli.serve", "demo"),
    "compare": ("advisor.cli.experiments", "compare"),
    "history": ("advisor.cli.experiments", "history"),
    "baseline": ("advisor.cli.experiments", "baseline"),
}
"""Every command, by the module that defines it: loaded when the command is asked for."""


class LazyGroup(Group):
    """The top-level group: a command's module is imported when that command is resolved (its
    run, its --help, a usage error of it; the group's --help lists them all), so that
    ``--version`` or a mistyped command does not import the whole pipeline (requests,
    apscheduler, prometheus_client, the model) first.

    The module is named, and imported with ``importlib.import_module``: this is not an
    ``import`` statement moved into a function to hide an import cycle (cli is the top layer:
    nothing imports it), only the choice of when a command's module is loaded."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = COMMANDS.get(cmd_name)
        if where is None:
            return None
        command = getattr(importlib.import_module(where[0]), where[1])
        assert isinstance(command, click.Command)
        return command


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=EXIT_CODES_HELP,
)
# the version from the package itself: a source tree run without installing (the GPU rig's
# PYTHONPATH) has no distribution metadata to look it up in
@click.version_option(version=__version__, package_name="vllm-advisor")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Find which limit hurts a vLLM server and recommend one knob to change.

    \b
    On a host:        vllm-advisor explain --url http://127.0.0.1:8000
    From a recording: vllm-advisor explain --session DIR
    A rule's docs:    vllm-advisor explain kv-preemption-seqs-bind
    The daemon:       vllm-advisor run --vllm-url http://127.0.0.1:8000
    A sample config:  vllm-advisor config sample
    """

    # the structured log is the daemon's (`run`); a one-shot command says what it has to say in
    # its output and at most one `error:` line, with no log lines in front of it
    # (by name, as the commands are: not an `import` statement hiding a cycle, only the choice
    # of when the module is loaded; `--version` and `--help` never get here)
    importlib.import_module(LOGS).configure_logging(quiet=ctx.invoked_subcommand != "run")
