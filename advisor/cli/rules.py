"""``rules``: list, show and check the symptom table; a rule's own docs (``explain RULE_ID``
is the same). Loads the rules and their renderer only: no source, no daemon.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from advisor.cli.base import EXIT_USAGE, TEXT_JSON_OR_MARKDOWN, TEXT_OR_JSON, Group, fail
from advisor.core import jsonout
from advisor.diagnose.ruleset import RuleError, load_rules
from advisor.outputs import explain as out


def checked_rules(rules_dir: str | None) -> list[Any]:
    try:
        return load_rules(rules_dir)
    except RuleError as e:
        fail("invalid rules:\n" + "\n".join(e.errors))
        raise


def rule_docs(rules: list[Any], rule_id: str, fmt: str) -> None:
    """Print a rule's own docs (by id or alias) as ``fmt``; a usage error when there is none."""
    match = [r for r in rules if r.id == rule_id or rule_id in r.aliases]
    if not match:
        fail(f"no rule {rule_id!r}; see `vllm-advisor rules list`", EXIT_USAGE)
    r = match[0]
    if fmt == "json":
        click.echo(jsonout.dumps(out.rule_json(r), indent=2))
    elif fmt == "markdown":
        click.echo(out.rule_markdown(r, "#"))
    else:
        click.echo(out.rule_text(r))


@click.group(cls=Group)
def rules() -> None:
    """List, show and check the symptom table (rules/*.yaml)."""


@rules.command("list")
@click.option("--rules-dir", type=click.Path(), help="Use these rules instead of the bundled ones.")
@TEXT_OR_JSON
def rules_list(rules_dir: str | None, fmt: str) -> None:
    """Every rule with its severity and knob."""

    rs = checked_rules(rules_dir)
    if fmt == "json":
        click.echo(jsonout.dumps([out.rule_json(r) for r in rs], indent=2))
    else:
        click.echo(out.rules_table(rs))


@rules.command("show")
@click.argument("rule_id")
@click.option("--rules-dir", type=click.Path(), help="Use these rules instead of the bundled ones.")
@TEXT_JSON_OR_MARKDOWN
def rules_show(rule_id: str, rules_dir: str | None, fmt: str) -> None:
    """A rule's docs (same as `explain RULE_ID`)."""
    rule_docs(checked_rules(rules_dir), rule_id, fmt)


@rules.command("check")
@click.argument("directory", required=False, type=click.Path())
def rules_check(directory: str | None) -> None:
    """Validate rule files; print every error with file:line."""
    try:
        rs = load_rules(directory)
    except RuleError as e:
        for err in e.errors:
            click.echo(err, err=True)
        click.echo(f"{len(e.errors)} error(s)", err=True)
        sys.exit(1)
    click.echo(f"{len(rs)} rules OK")
