"""``compare``, ``history`` and ``baseline``: judging a knob change from benchmark files, the
experiments the daemon judged, and a baseline kept before a change.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

import click

from advisor.cli.common import EXIT_USAGE, TEXT_OR_JSON, Group, fail, load_config
from advisor.core import config as config_mod
from advisor.core import jsonout
from advisor.core.knobs import KNOBS, knob_for_flag
from advisor.drive import baseline as bl_cmd
from advisor.outputs import comparison as comparison_out
from advisor.outputs import prediction as prediction_out
from advisor.verify import baseline as bl
from advisor.verify import comparison, samples, verdict
from advisor.verify.ledger import Ledger, LedgerError, record_from_comparison


# ------------------------------------------------------------------ experiments
@click.command()
@click.argument("a", type=click.Path())
@click.argument("b", type=click.Path())
@TEXT_OR_JSON
@click.option(
    "--buckets", help="Prompt-length bucket edges, e.g. 512,2048 (default: from the prompt lengths)."
)
@click.option(
    "--knob",
    help="The change B made, as KNOB:increase|decrease (e.g. max_num_seqs:increase): its targets "
    "and its guards (less the costs it is known to trade) judge the runs.",
)
@click.option(
    "--target",
    help="The metric(s) the change was meant to move, e.g. itl_p95 (default: the --knob's, else all).",
)
@click.option("--preemptions", help="A:B counts of vllm:num_preemptions_total during each run.")
@click.option(
    "--a-again",
    "a_again",
    multiple=True,
    type=click.Path(),
    help="Another run of A's configuration under the same load (repeatable): how far the runs of "
    "one side differ is the noise a difference between A and B must pass. Near a knee under open "
    "arrivals one run each is not enough.",
)
@click.option(
    "--b-again",
    "b_again",
    multiple=True,
    type=click.Path(),
    help="Another run of B's configuration under the same load (repeatable), likewise.",
)
@click.option("--ledger", "ledger_path", type=click.Path(), help="Also record the verdict in this ledger.")
@click.option(
    "--ttft-p95-target",
    type=float,
    default=config_mod.DEFAULT_TARGETS["ttft_p95_seconds"],
    show_default=True,
    help="TTFT p95 target in seconds: a TTFT p95 that got worse but stays under it is a trade-off.",
)
@click.option(
    "--itl-p95-target",
    type=float,
    default=config_mod.DEFAULT_TARGETS["itl_p95_seconds"],
    show_default=True,
    help="ITL p95 target in seconds (also bounds TPOT p95), likewise.",
)
def compare(
    a: str,
    b: str,
    fmt: str,
    buckets: str | None,
    knob: str | None,
    target: str | None,
    preemptions: str | None,
    a_again: tuple[str, ...],
    b_again: tuple[str, ...],
    ledger_path: str | None,
    ttft_p95_target: float,
    itl_p95_target: float,
) -> None:
    """Compare two `vllm bench serve` results: keep, revert or inconclusive.

    Each may be a --save-result file (with --save-detailed: per-request intervals; without:
    reported percentiles against noise floors), or the printed "Serving Benchmark Result"
    table as pasted, with the command above it.

    A is the baseline, B the run with the changed knob, under the same load. Exit 1 when the
    loads differ (the comparison is refused). With --a-again/--b-again, more runs of either
    side set the run-to-run noise the difference must pass."""

    try:  # the flags: a wrong one is a usage error (2)
        pre = tuple(float(x) for x in preemptions.split(":")) if preemptions else None
        if pre is not None and len(pre) != 2:
            raise ValueError("--preemptions must be A:B")
        slo = samples.slo_from_targets(
            {"ttft_p95_seconds": ttft_p95_target, "itl_p95_seconds": itl_p95_target}
        )
        targets: str | tuple[str, ...] | None = target
        guards = samples.GUARDS
        if knob:
            name, _, direction = knob.partition(":")
            if direction not in ("increase", "decrease"):
                raise ValueError(f"--knob must be KNOB:increase or KNOB:decrease, got {knob!r}")

            k = knob_for_flag(name)  # any spelling vLLM has used: max_num_seqs, --max-num-seqs
            if k is None:
                raise ValueError(f"unknown knob {name!r}; known: {', '.join(sorted(KNOBS))}")
            name = k.name
            targets = target or verdict.targets_for_knob(name, direction) or None
            guards = verdict.guards_for_knob(name, direction)
    except ValueError as e:
        fail(str(e), EXIT_USAGE)
        return
    try:
        c = comparison.compare_bench_files(
            a,
            b,
            buckets=buckets,
            target=targets,
            preemptions=pre,
            settings=samples.Settings(slo=slo),
            guards=guards,
            a_again=a_again,
            b_again=b_again,
        )
    except (samples.ExperimentError, ValueError) as e:
        fail(str(e))
        return
    click.echo(jsonout.dumps(c.to_json(), indent=2) if fmt == "json" else comparison_out.render_text(c))
    if ledger_path:
        try:
            Ledger(ledger_path).add(record_from_comparison(c, time.time()))
        except LedgerError as e:
            fail(str(e))
    if not c.load.same:  # the verdict above says why; the comparison could not be made
        fail(f"{a} and {b} ran different loads: the comparison is refused (see above)")


@click.command()
@click.option(
    "--ledger", "ledger_path", type=click.Path(), help="The ledger [default: STATE_DIR/ledger.sqlite]."
)
@click.option(
    "--config", "config_file", type=click.Path(), help="The advisor's config file (for its state_dir)."
)
@click.option("--limit", default=50, show_default=True, help="Show at most this many, newest first.")
@TEXT_OR_JSON
def history(ledger_path: str | None, config_file: str | None, limit: int, fmt: str) -> None:
    """The experiments the advisor judged: knob, old -> new, verdict and why; predicted vs measured."""

    cfg = load_config(config_file)
    path = ledger_path or str(Path(cfg.state_dir) / "ledger.sqlite")
    rows: list[dict[str, Any]] = []
    if ledger_path and not Path(path).exists():  # a ledger named and not there: a typo, not "none"
        fail(f"ledger {path}: no such file")
    elif Path(path).exists():
        try:
            led = Ledger(path, read_only=True)  # reading needs no write access to the file or its dir
            damage = led.check()
            if damage:
                more = f" (and {len(damage) - 1} more)" if len(damage) > 1 else ""
                fail(
                    f"ledger {path} is damaged: {damage[0]}{more}; its rows may be wrong or missing. "
                    f"Keep a copy, then recover what SQLite can (sqlite3 {path} .recover) or restore a "
                    "backup; the daemon writes nothing into it meanwhile"
                )
            rows = led.list(limit)
        except LedgerError as e:
            fail(str(e))
            return
    if fmt == "json":
        click.echo(jsonout.dumps(rows, indent=2, default=str))
        return
    if not rows:
        click.echo(f"no experiments recorded in {path}")
        return

    for r in rows:
        when = dt.datetime.fromtimestamp(r["started_at"], dt.UTC).strftime("%Y-%m-%d %H:%M")
        reason = (r.get("reasons") or [""])[0]
        click.echo(
            f"#{r['id']} {when} {r.get('knob')} {r.get('old_value')} -> {r.get('new_value')}: "
            f"{r['verdict'].upper()} ({r['source']}) {reason}"
        )
        line = prediction_out.prediction_line(r.get("prediction"))
        if line:
            click.echo(f"    {line}")


@click.group(cls=Group)
def baseline() -> None:
    """Keep a baseline: knobs with provenance and a metrics summary, for a later comparison."""


@baseline.command("save")
@click.option("--url", help="vLLM base URL to observe for --window.")
@click.option("--daemon", "daemon_url", help="Read the current window from a running advisor daemon.")
@click.option("--session", "session_dir", type=click.Path(), help="Or summarise a recorded session.")
@click.option("--window", default="60s", show_default=True, help="How long to observe --url.")
@click.option("--interval", default="5s", show_default=True, help="Scrape interval while observing --url.")
@click.option(
    "--out", "out_file", required=True, type=click.Path(), help="The baseline file (JSON) to write."
)
def baseline_save(
    url: str | None,
    daemon_url: str | None,
    session_dir: str | None,
    window: str,
    interval: str,
    out_file: str,
) -> None:
    """Save what the server runs with and how it performs now."""

    if sum(map(bool, (url, daemon_url, session_dir))) != 1:
        fail("give exactly one of --url, --daemon, --session", EXIT_USAGE)
    try:
        doc = bl_cmd.capture(
            url=url,
            daemon_url=daemon_url,
            session_dir=session_dir,
            window_s=config_mod.parse_duration_s(window),
            interval_s=config_mod.parse_duration_s(interval),
        )
        bl.write(doc, out_file)
    except (bl.BaselineError, config_mod.ConfigError, OSError) as e:
        fail(str(e))
        return
    click.echo(
        f"baseline saved to {out_file}: {doc['summary'].get('requests_finished') or 0:.0f} requests over "
        f"{doc['summary'].get('window_seconds') or 0:.0f}s"
    )
