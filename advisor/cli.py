"""Command-line interface (thin: parse, call one function, set the exit code)."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="vllm-advisor")
def main() -> None:
    """Find which limit hurts a vLLM server and recommend one knob to change."""
