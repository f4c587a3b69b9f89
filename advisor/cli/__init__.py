"""Command-line interface (thin: parse, call one function, set the exit code).

Exit codes (every command; ``EXIT_CODES_HELP`` is the text ``--help`` shows):
0 ok; 1 error: the command could not do its job (a server that cannot be read, an unreadable
file), one line on stderr; 2 usage: a flag, setting or config file is wrong, one line naming
it; 3 advice (``explain --exit-code``); 4 no data: the input was read but holds too little to
diagnose (insufficient data). No user mistake prints a traceback; an unforeseen error prints
one line too (``VLLM_ADVISOR_DEBUG=1`` shows its traceback).
"""

from __future__ import annotations

import click

from advisor.cli import diagnosis, experiments, project, serve
from advisor.cli.common import EXIT_CODES_HELP, Group
from advisor.core.log import configure_logging


@click.group(
    cls=Group,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=EXIT_CODES_HELP,
)
@click.version_option(package_name="vllm-advisor")
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
    configure_logging(quiet=ctx.invoked_subcommand != "run")


main.add_command(diagnosis.explain)
main.add_command(diagnosis.predict)
main.add_command(diagnosis.inspect)
main.add_command(project.rules)
main.add_command(project.generate)
main.add_command(project.config_group)
main.add_command(serve.record)
main.add_command(serve.run)
main.add_command(serve.demo)
main.add_command(experiments.compare)
main.add_command(experiments.history)
main.add_command(experiments.baseline)
