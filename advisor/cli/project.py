"""``generate`` and ``config``: the files generated from the symptom table, and the advisor's
own settings (``rules``, the table itself, is advisor/cli/rules.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from advisor.cli.common import EXIT_USAGE, Group, fail
from advisor.core import config as config_mod
from advisor.core.redact import redact_text, redact_url
from advisor.core.shown import printable
from advisor.diagnose.ruleset import rule_ids
from advisor.drive import generate as gen
from advisor.outputs.alert_config import AlertConfigError, load_alert_config


# ------------------------------------------------------------------ generate
@click.command()
@click.option(
    "--out",
    "out",
    type=click.Path(path_type=Path),
    default=Path("."),
    show_default=True,
    help="Repository root to write deploy/ and grafana/ under.",
)
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if the files under --out differ.")
@click.option(
    "--config",
    "alert_config",
    type=click.Path(),
    help="YAML with runbook_base, dashboard_base, vllm_selector, advisor_selector, "
    "ttft_p95_seconds, itl_p95_seconds, error_ratio (defaults: example.com placeholders).",
)
@click.option("--runbook-base", help="Base URL of RUNBOOK.md (the alerts' runbook_url).")
@click.option("--dashboard-base", help="Base URL of your Grafana (the alerts' dashboard_url).")
@click.option("--vllm-selector", help='Label matchers of the vLLM scrape job [default: job="vllm"].')
@click.option("--advisor-selector", help='Label matchers of the advisor job [default: job="vllm-advisor"].')
@click.option("--ttft-p95-target", type=float, help="TTFT p95 target in seconds [default: 2].")
@click.option("--itl-p95-target", type=float, help="ITL p95 target in seconds [default: 0.1].")
@click.option("--error-ratio", type=float, help="Failed-request ratio that alerts [default: 0.05].")
def generate(
    out: Path,
    check: bool,
    alert_config: str | None,
    runbook_base: str | None,
    dashboard_base: str | None,
    vllm_selector: str | None,
    advisor_selector: str | None,
    ttft_p95_target: float | None,
    itl_p95_target: float | None,
    error_ratio: float | None,
) -> None:
    """Write the alert and recording rules, dashboards, runbook and deploy bundle from rules/.

    --check compares with a checkout of the repository: run it from the repository root or give
    --out REPO."""

    if check and not gen.looks_like_checkout(out):
        fail(
            f"--check compares with the generated files of a repository checkout, and {out} has no "
            "deploy/ or grafana/: run it from the repository root or give --out REPO",
            EXIT_USAGE,
        )
    try:
        cfg = load_alert_config(
            alert_config,
            runbook_base=runbook_base,
            dashboard_base=dashboard_base,
            vllm_selector=vllm_selector,
            advisor_selector=advisor_selector,
            ttft_p95_seconds=ttft_p95_target,
            itl_p95_seconds=itl_p95_target,
            error_ratio=error_ratio,
        )
    except AlertConfigError as e:
        fail(str(e), EXIT_USAGE)
        raise
    if check:
        problems = gen.diff(out, cfg=cfg)
        for problem in problems:
            click.echo(problem)
        sys.exit(1 if problems else 0)
    for path in gen.generate(out, cfg=cfg):
        click.echo(str(path))


# ------------------------------------------------------------------ config
@click.group("config", cls=Group)
def config_group() -> None:
    """The advisor's own configuration: a commented sample, and a check of a file."""


@config_group.command("sample")
def config_sample() -> None:
    """Print the commented sample config (for `run --config FILE`)."""
    click.echo(config_mod.sample_text(), nl=False)


@config_group.command("check")
@click.argument("config_file", type=click.Path())
def config_check(config_file: str) -> None:
    """Validate a config file (and VLLM_ADVISOR_* variables): every problem at once, one
    ``error:`` line each, exit 2 if any."""
    try:
        cfg = config_mod.load(config_file, rule_ids=rule_ids)
        config_mod.parse_listen(cfg.listen)
    except config_mod.ConfigError as e:
        for problem in e.problems[:-1]:
            click.echo(f"error: config: {printable(redact_text(problem))}", err=True)
        fail(f"config: {e.problems[-1]}", EXIT_USAGE)
        return
    click.echo(
        f"{config_file}: OK (vllm_url {redact_url(cfg.vllm_url)}, listen {cfg.listen}, interval {cfg.interval_s:g}s)"
    )
