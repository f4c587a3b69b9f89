"""Command-line interface (thin: parse, call one function, set the exit code).

Exit codes (every command; ``EXIT_CODES_HELP`` is the text ``--help`` shows):
0 ok; 1 error: the command could not do its job (a server that cannot be read, an unreadable
file), one line on stderr; 2 usage: a flag, setting or config file is wrong, one line naming
it; 3 advice (``explain --exit-code``); 4 no data: the input was read but holds too little to
diagnose (insufficient data). No user mistake prints a traceback; an unforeseen error prints
one line too (``VLLM_ADVISOR_DEBUG=1`` shows its traceback).
"""

from __future__ import annotations

import datetime as dt
import inspect as _inspect
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import click

from advisor.core import config as config_mod
from advisor.core.knobs import KNOBS, knob_for_flag
from advisor.core.log import configure_logging
from advisor.diagnose.ruleset import RuleError, load_rules
from advisor.drive import baseline as bl_cmd
from advisor.drive import daemon, fleet, inputs, inspection
from advisor.drive import generate as gen
from advisor.drive import predict as predict_cmd
from advisor.drive.daemon import DaemonError
from advisor.outputs import comparison as comparison_out
from advisor.outputs import explain as out
from advisor.outputs import prediction as prediction_out
from advisor.outputs.alert_config import AlertConfigError, load_alert_config
from advisor.outputs.explain import diagnosis_from_json
from advisor.predict import scoring
from advisor.predict.perfmodel import InsufficientData
from advisor.sources import prometheus as prom_src
from advisor.sources import session
from advisor.sources.cmdline import CommandError, read_command_file
from advisor.sources.engine_config import EngineSourceError
from advisor.sources.metrics import MetricsError
from advisor.sources.prometheus import PrometheusError
from advisor.sources.session import SessionError
from advisor.verify import baseline as bl
from advisor.verify import comparison, samples, verdict
from advisor.verify.ledger import Ledger, LedgerError, record_from_comparison

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
DEMO_SESSION = Path(__file__).resolve().parent / "data" / "sessions" / "h200-A_s256"

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_ADVICE = 3
EXIT_NO_DATA = 4
EXIT_CODES_HELP = (
    "Exit codes: 0 ok, 1 error (the command could not do its job), 2 usage (a wrong flag, "
    "setting or config file), 3 advice (explain --exit-code), 4 no data (too little to diagnose)."
)


def _fail(msg: str, code: int = EXIT_ERROR) -> None:
    click.echo(f"error: {msg}", err=True)
    sys.exit(code)


class _Group(click.Group):
    """Lists every command with its whole summary (click cuts them at ~45 characters), and turns
    any error that escapes a command into one line and an exit code instead of a traceback."""

    group_class = type  # subgroups are _Group too

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, _summary(cmd)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except config_mod.ConfigError as e:
            _fail(f"config: {e}", EXIT_USAGE)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as e:  # unforeseen: one line; the traceback only on request
            if os.environ.get("VLLM_ADVISOR_DEBUG"):
                raise
            _fail(f"{type(e).__name__}: {e} (set VLLM_ADVISOR_DEBUG=1 for the traceback)")
        return None


def _summary(cmd: click.Command) -> str:
    if cmd.short_help:
        return cmd.short_help
    first = _inspect.cleandoc(cmd.help or "").split("\n\n")[0]
    return " ".join(first.split())


def _cfg(config_file: str | None, **flags: Any) -> config_mod.Config:
    try:
        return config_mod.load(config_file, **flags)
    except config_mod.ConfigError as e:
        _fail(f"config: {e}", EXIT_USAGE)
        raise  # unreachable


def _rules(rules_dir: str | None) -> list[Any]:
    try:
        return load_rules(rules_dir)
    except RuleError as e:
        _fail("invalid rules:\n" + "\n".join(e.errors))
        raise


def _color() -> bool:
    return sys.stdout.isatty()


@click.group(
    cls=_Group,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=EXIT_CODES_HELP,
)
@click.version_option(package_name="vllm-advisor")
def main() -> None:
    """Find which limit hurts a vLLM server and recommend one knob to change.

    \b
    On a host:        vllm-advisor explain --url http://127.0.0.1:8000
    From a recording: vllm-advisor explain --session DIR
    A rule's docs:    vllm-advisor explain kv-preemption-seqs-bind
    The daemon:       vllm-advisor run --vllm-url http://127.0.0.1:8000
    A sample config:  vllm-advisor config sample
    """

    configure_logging()


# ------------------------------------------------------------------ explain
@main.command()
@click.argument("rule_id", required=False)
@click.option("--url", help="vLLM base URL (or its /metrics URL) to observe for --window.")
@click.option("--session", "session_dir", type=click.Path(), help="A recorded session directory to replay.")
@click.option(
    "--metrics-file",
    "metrics_files",
    multiple=True,
    type=click.Path(),
    help="Saved /metrics page (repeatable, oldest first).",
)
@click.option("--log-file", type=click.Path(), help="vLLM's log file (startup facts, stats).")
@click.option("--daemon", "daemon_url", help="Ask a running advisor daemon (its base URL).")
@click.option("--prometheus", "prom_url", help="Read a server's scrapes from this Prometheus (base URL).")
@click.option("--instance", help="With --prometheus: the server's `instance` label.")
@click.option("--model", help="With --prometheus: only this model_name's series.")
@click.option("--at", "at", default="now", show_default=True, help="With --prometheus: the window's end.")
@click.option(
    "--window", default=None, help="How long to observe --url (60s) or to read from --prometheus (15m)."
)
@click.option("--interval", default="5s", show_default=True, help="Scrape interval while observing --url.")
@TEXT_JSON_OR_MARKDOWN
@click.option("--engine-config", type=click.Path(), help="The YAML `vllm serve --config` takes.")
@click.option("--rules-dir", type=click.Path(), help="Use these rules instead of the bundled ones.")
@click.option("--config", "config_file", type=click.Path(), help="The advisor's own config file.")
@click.option(
    "--command-file",
    type=click.Path(allow_dash=True),
    help="The command the server was started with, as pasted (vllm serve ..., docker run ...; - for stdin).",
)
@click.option("--exit-code", is_flag=True, help="Exit 3 when there is advice (for scripts).")
def explain(
    rule_id: str | None,
    url: str | None,
    session_dir: str | None,
    metrics_files: tuple[str, ...],
    log_file: str | None,
    daemon_url: str | None,
    prom_url: str | None,
    instance: str | None,
    model: str | None,
    at: str,
    window: str | None,
    interval: str,
    fmt: str,
    engine_config: str | None,
    rules_dir: str | None,
    config_file: str | None,
    command_file: str | None,
    exit_code: bool,
) -> None:
    """What should I change, and why? (or: a rule's own docs, with RULE_ID)

    Exits 4 when the input holds too little to diagnose (insufficient data), 1 when it cannot
    be read at all (a server that is down), 3 with --exit-code when there is advice."""

    rules = _rules(rules_dir)
    if rule_id:
        match = [r for r in rules if r.id == rule_id or rule_id in r.aliases]
        if not match:
            _fail(f"no rule {rule_id!r}; see `vllm-advisor rules list`", EXIT_USAGE)
        r = match[0]
        if fmt == "json":
            click.echo(json.dumps(out.rule_json(r), indent=2))
        elif fmt == "markdown":
            click.echo(out.rule_markdown(r, "#"))
        else:
            click.echo(out.rule_text(r))
        return
    sources = [
        bool(url),
        bool(session_dir),
        bool(metrics_files or log_file),
        bool(daemon_url),
        bool(prom_url),
    ]
    if sum(sources) != 1:
        _fail(
            "give exactly one of --url, --session, --metrics-file/--log-file, --daemon, --prometheus, "
            "or a RULE_ID",
            EXIT_USAGE,
        )
    cfg = _cfg(config_file, engine_config=engine_config, rules_dir=rules_dir)
    if command_file and (daemon_url or prom_url):
        _fail(
            "--command-file does not go with --daemon or --prometheus (they have their own sources)",
            EXIT_USAGE,
        )
    command = _command(command_file)
    if prom_url:
        if not instance:
            _fail("--prometheus needs --instance (the server's `instance` label)", EXIT_USAGE)
        diagnosis = _diagnose_prometheus(cfg, rules, prom_url, str(instance), model, at, window or "15m")
    else:
        diagnosis = _diagnose(
            cfg,
            rules,
            url,
            session_dir,
            metrics_files,
            log_file,
            daemon_url,
            window or "60s",
            interval,
            engine_config,
            command,
        )
    if isinstance(diagnosis, dict):  # from a daemon: already JSON
        status = diagnosis.get("status")
        if fmt == "json":
            click.echo(json.dumps(diagnosis, indent=2))
        else:
            click.echo(out.render(diagnosis_from_json(diagnosis), fmt, _color()))
    else:
        status = diagnosis.status
        click.echo(out.render(diagnosis, fmt, _color()))
    if status == "insufficient-data":
        sys.exit(EXIT_NO_DATA)
    if exit_code and status == "advice":
        sys.exit(EXIT_ADVICE)


def _diagnose(
    cfg: Any,
    rules: Any,
    url: Any,
    session_dir: Any,
    metrics_files: Any,
    log_file: Any,
    daemon_url: Any,
    window: str,
    interval: str,
    engine_config: Any,
    command: Any = None,
) -> Any:

    try:
        if session_dir:
            _, d = inputs.from_session(session_dir, cfg, rules, config_path=engine_config, command=command)
            if d is None:
                _fail(f"{session_dir}: the session has no /metrics pages")
            return d
        if metrics_files or log_file:
            # a log alone: its periodic stats lines are the data (evidence.pages_from_stats)
            adv, d = inputs.from_files(
                list(metrics_files),
                log_file,
                cfg,
                rules,
                config_path=engine_config,
                command=command,
            )
            for line in adv.input_warnings:  # what was skipped on the pages, one line each
                click.echo(f"warning: {line}", err=True)
            return d

        if daemon_url:
            return daemon.fetch_diagnosis(daemon_url)
        return daemon.observe(
            url,
            cfg,
            rules,
            config_mod.parse_duration_s(window),
            config_mod.parse_duration_s(interval),
            engine_config=engine_config,
            command=command,
        )
    except (inputs.InputError, SessionError) as e:
        _fail(str(e))
    except daemon_errors() as e:
        _fail(str(e))
    except config_mod.ConfigError as e:
        _fail(str(e), EXIT_USAGE)
    return None


def _command(command_file: str | None) -> Any:
    """A pasted launch command (``--command-file``) as ``sources.engine.PastedCommand``, its
    warnings on stderr; None without the option. Reusable by any command that takes it."""
    if not command_file:
        return None

    try:
        cmd = read_command_file(command_file)
    except CommandError as e:
        _fail(str(e))
        raise
    for w in cmd.warnings:
        click.echo(f"warning: {command_file}: {w}", err=True)
    return cmd


def _diagnose_prometheus(
    cfg: Any, rules: Any, prom_url: str, instance: str, model: str | None, at: str, window: str
) -> Any:

    try:
        t = prom_src.parse_time(at)
        window_s = config_mod.parse_duration_s(window)
        history = prom_src.read_history(prom_src.Client(prom_url), instance, t, window_s, model=model)
        return inputs.from_prometheus(history, cfg, rules, t, window_s)[1]
    except (ValueError, config_mod.ConfigError) as e:
        _fail(str(e), EXIT_USAGE)
    except prom_src.PrometheusError as e:
        _fail(f"Prometheus: {e}")
    return None


def daemon_errors() -> tuple[type[BaseException], ...]:

    return (MetricsError, EngineSourceError, DaemonError, OSError)


# ------------------------------------------------------------------ predict
@main.command()
@click.option("--session", "session_dir", type=click.Path(), help="A recorded session directory.")
@click.option("--url", help="vLLM base URL (or its /metrics URL) to observe for --window.")
@click.option(
    "--metrics-file", "metrics_files", multiple=True, type=click.Path(), help="Saved page (repeatable)."
)
@click.option("--log-file", type=click.Path(), help="vLLM's log file (startup facts).")
@click.option("--set", "setting", required=True, help="KNOB=VALUE, e.g. max_num_seqs=72.")
@click.option("--window", default="60s", show_default=True, help="How long to observe --url.")
@click.option("--interval", default="5s", show_default=True, help="Scrape interval while observing --url.")
@TEXT_OR_JSON
@click.option("--engine-config", type=click.Path(), help="The YAML `vllm serve --config` takes.")
@click.option("--config", "config_file", type=click.Path(), help="The advisor's own config file.")
def predict(
    session_dir: str | None,
    url: str | None,
    metrics_files: tuple[str, ...],
    log_file: str | None,
    setting: str,
    window: str,
    interval: str,
    fmt: str,
    engine_config: str | None,
    config_file: str | None,
) -> None:
    """What would one knob's change do, under the same load? (exit 4: too little data)"""

    if sum([bool(session_dir), bool(metrics_files), bool(url)]) != 1:
        _fail("give exactly one of --session, --metrics-file or --url", EXIT_USAGE)
    try:
        knob, value = predict_cmd.parse_set(setting)
    except ValueError as e:
        _fail(str(e), EXIT_USAGE)
        raise
    cfg = _cfg(config_file, engine_config=engine_config)
    try:
        model, values = predict_cmd.from_source(
            cfg,
            _rules(None),
            session_dir=session_dir,
            metrics_files=metrics_files,
            log_file=log_file,
            url=url,
            window_s=config_mod.parse_duration_s(window),
            interval_s=config_mod.parse_duration_s(interval),
            config_path=engine_config,
        )
        p = scoring.predict(model, knob, value, values)
    except (inputs.InputError, SessionError) as e:
        _fail(str(e))
        raise
    except InsufficientData as e:
        _fail(f"insufficient data: {e}", 4)
        raise
    except ValueError as e:
        _fail(f"cannot predict {knob}: {e}", 4)
        raise
    except daemon_errors() as e:
        _fail(str(e))
        raise
    click.echo(json.dumps(p.to_json(), indent=2) if fmt == "json" else prediction_out.render_text(p, model))


# ------------------------------------------------------------------ inspect
@main.command()
@click.option("--url", help="vLLM base URL (or its /metrics URL): read one page now.")
@click.option("--session", "session_dir", type=click.Path(), help="A recorded session directory.")
@click.option(
    "--metrics-file", "metrics_files", multiple=True, type=click.Path(), help="Saved page (repeatable)."
)
@click.option("--log-file", type=click.Path(), help="vLLM's log file.")
@click.option("--engine-config", type=click.Path(), help="The YAML `vllm serve --config` takes.")
@click.option(
    "--command-file",
    type=click.Path(allow_dash=True),
    help="The command the server was started with, as pasted (vllm serve ..., docker run ...; - for stdin).",
)
@TEXT_OR_JSON
def inspect(
    url: str | None,
    session_dir: str | None,
    metrics_files: tuple[str, ...],
    log_file: str | None,
    engine_config: str | None,
    command_file: str | None,
    fmt: str,
) -> None:
    """Show what the sources learned: engine knobs with their sources, log events, metric families."""

    if not (url or session_dir or metrics_files or log_file or command_file):
        _fail("give --url, --session, --metrics-file, --log-file or --command-file", EXIT_USAGE)
    try:
        report = inspection.inspect(
            url=url,
            session_dir=session_dir,
            metrics_files=list(metrics_files),
            log_file=log_file,
            engine_config=engine_config,
            command_file=command_file,
        )
    except inspection.InspectError as e:
        _fail(str(e))
        return
    if fmt == "json":
        click.echo(json.dumps(report, indent=2, default=str))
    else:
        click.echo(inspection.render_text(report))


# ------------------------------------------------------------------ rules
@main.group()
def rules() -> None:
    """List, show and check the symptom table (rules/*.yaml)."""


@rules.command("list")
@click.option("--rules-dir", type=click.Path(), help="Use these rules instead of the bundled ones.")
@TEXT_OR_JSON
def rules_list(rules_dir: str | None, fmt: str) -> None:
    """Every rule with its severity and knob."""

    rs = _rules(rules_dir)
    if fmt == "json":
        click.echo(json.dumps([out.rule_json(r) for r in rs], indent=2))
    else:
        click.echo(out.rules_table(rs))


@rules.command("show")
@click.argument("rule_id")
@click.option("--rules-dir", type=click.Path(), help="Use these rules instead of the bundled ones.")
@TEXT_JSON_OR_MARKDOWN
@click.pass_context
def rules_show(ctx: click.Context, rule_id: str, rules_dir: str | None, fmt: str) -> None:
    """A rule's docs (same as `explain RULE_ID`)."""
    ctx.invoke(
        explain,
        rule_id=rule_id,
        rules_dir=rules_dir,
        fmt=fmt,
        url=None,
        session_dir=None,
        metrics_files=(),
        log_file=None,
        daemon_url=None,
        window="60s",
        interval="5s",
        engine_config=None,
        config_file=None,
        command_file=None,
        exit_code=False,
    )


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


# ------------------------------------------------------------------ record
@main.command()
@click.option("--url", required=True, help="vLLM base URL (or its /metrics URL).")
@click.option("--log-file", type=click.Path(), help="Follow this log file.")
@click.option("--log-cmd", help="Follow this command's output, e.g. 'journalctl -u vllm -f -o cat'.")
@click.option("--interval", default="5s", show_default=True, help="Scrape every DURATION.")
@click.option("--duration", default="10m", show_default=True, help="Record for DURATION (Ctrl-C ends early).")
@click.option("--out", "out_dir", required=True, type=click.Path(), help="The session directory to write.")
@click.option("--gzip/--no-gzip", "compress", default=True, show_default=True, help="Gzip each page.")
@click.option(
    "--log-from-start",
    is_flag=True,
    help="Read --log-file from its first line (start-up facts of a server that is already up).",
)
@click.option("--notes", default="", help="Free text kept in the session's meta.json.")
@click.option(
    "--command-file",
    type=click.Path(allow_dash=True),
    help="The command the server was started with, as pasted (vllm serve ..., docker run ...; - for stdin).",
)
def record(
    url: str,
    log_file: str | None,
    log_cmd: str | None,
    interval: str,
    duration: str,
    out_dir: str,
    compress: bool,
    log_from_start: bool,
    notes: str,
    command_file: str | None,
) -> None:
    """Record a session (every /metrics page, the log, the engine's knobs) for replay and bug reports.

    Exits 1 when not one /metrics page could be read (the session is still written, with the
    errors in its meta.json)."""

    if log_file and log_cmd:
        _fail("give --log-file or --log-cmd, not both", EXIT_USAGE)
    command = _command(command_file)
    try:
        total = config_mod.parse_duration_s(duration)
        progress = _progress_printer(total) if sys.stderr.isatty() else None
        res = session.record(
            url,
            out_dir,
            duration_s=total,
            interval_s=config_mod.parse_duration_s(interval),
            log_file=log_file,
            log_cmd=log_cmd,
            progress=progress,
            compress=compress,
            log_from_start=log_from_start,
            notes=notes,
            server_argv=command.argv if command is not None else None,
        )
    except (session.SessionError, ValueError, config_mod.ConfigError) as e:
        _fail(str(e))
        return
    if progress is not None:
        sys.stderr.write("\n")
    click.echo(
        f"recorded {res.scrapes} scrapes and {res.log_lines} log lines into {out_dir}"
        + (f" ({len(res.errors)} failed scrapes)" if res.errors else "")
    )
    if res.scrapes == 0:
        last = res.errors[-1]["error"] if res.errors else "no scrape was attempted"
        _fail(f"not one /metrics page could be read from {url}: {last}")


def _progress_printer(total_s: float) -> Any:
    """A one-line progress display on stderr for `record` (only on a terminal)."""
    start: list[float] = []

    def show(p: dict[str, Any]) -> None:
        t = float(p.get("t", 0.0))
        if not start:
            start.append(t)
        done = t - start[0]
        width = 30
        filled = int(width * min(1.0, done / total_s)) if total_s else width
        ok = "ok" if p.get("ok", True) else "FAILED"
        sys.stderr.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {done:5.0f}/{total_s:.0f} s, "
            f"{p.get('n', 0)} scrapes, {p.get('log_lines', 0)} log lines, last {ok}   "
        )
        sys.stderr.flush()

    return show


# ------------------------------------------------------------------ run
@main.command()
@click.option(
    "--config",
    "config_file",
    type=click.Path(),
    help="YAML config (`vllm-advisor config sample` prints one).",
)
@click.option("--vllm-url", help="vLLM base URL [default: http://127.0.0.1:8000].")
@click.option(
    "--log-file", type=click.Path(), help="Follow vLLM's log file (rotation and truncation survived)."
)
@click.option(
    "--log-cmd", help="Follow a command's output: 'journalctl -u vllm -f -o cat', 'docker logs -f vllm'."
)
@click.option("--listen", help="HOST:PORT for /metrics and the API [default: 127.0.0.1:19842].")
@click.option("--interval", help="Scrape and evaluate every DURATION [default: 5s].")
@click.option("--engine-config", type=click.Path(), help="The YAML `vllm serve --config` takes.")
@click.option("--rules-dir", type=click.Path(), help="Use these rules instead of the bundled ones.")
@click.option("--state-dir", type=click.Path(), help="Where the advisor keeps its state.")
@click.option("--ttft-p95-target", type=float, help="TTFT p95 target in seconds [default: 2].")
@click.option("--itl-p95-target", type=float, help="ITL p95 target in seconds [default: 0.1].")
@click.option(
    "--replay", "replay_dir", type=click.Path(), help="Replay a recorded session as if live (demos, tests)."
)
@click.option("--speed", default=1.0, show_default=True, help="Replay speed (with --replay).")
@click.option(
    "--prometheus",
    "prom_url",
    help="Advise every vLLM server this Prometheus scrapes (the fleet daemon) instead of one --vllm-url.",
)
@click.option("--selector", default="", help="With --prometheus: which servers, e.g. '{job=\"vllm\"}'.")
@click.option(
    "--run-seconds", type=float, help="Stop after this many seconds (default: run until signalled)."
)
def run(
    config_file: str | None,
    vllm_url: str | None,
    log_file: str | None,
    log_cmd: str | None,
    listen: str | None,
    interval: str | None,
    engine_config: str | None,
    rules_dir: str | None,
    state_dir: str | None,
    ttft_p95_target: float | None,
    itl_p95_target: float | None,
    replay_dir: str | None,
    speed: float,
    prom_url: str | None,
    selector: str,
    run_seconds: float | None,
) -> None:
    """Run beside a vLLM server: scrape, diagnose and export vllm_advisor_* series continuously."""

    if log_file and log_cmd:
        _fail("give --log-file or --log-cmd, not both", EXIT_USAGE)
    cfg = _cfg(
        config_file,
        vllm_url=vllm_url,
        log_file=log_file,
        log_cmd=log_cmd,
        listen=listen,
        interval=interval,
        engine_config=engine_config,
        rules_dir=rules_dir,
        state_dir=state_dir,
    )
    targets = dict(cfg.targets)
    if ttft_p95_target is not None:
        targets["ttft_p95_seconds"] = ttft_p95_target
    if itl_p95_target is not None:
        targets["itl_p95_seconds"] = itl_p95_target
    cfg = cfg.with_overrides(targets=targets)
    config_mod.parse_listen(cfg.listen)  # a bad --listen is a usage error now, not after start-up
    rs = _rules(cfg.rules_dir)
    if replay_dir:
        sys.exit(daemon.run_replay(cfg, rs, replay_dir, speed, run_seconds))
    if prom_url:
        try:
            sys.exit(fleet.run(cfg, rs, prom_url, selector, run_seconds))
        except PrometheusError as e:
            _fail(f"--selector: {e}", EXIT_USAGE)
    sys.exit(daemon.run(cfg, rs, run_seconds))


# ------------------------------------------------------------------ generate
@main.command()
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
        _fail(
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
        _fail(str(e), EXIT_USAGE)
        raise
    if check:
        problems = gen.diff(out, cfg=cfg)
        for problem in problems:
            click.echo(problem)
        sys.exit(1 if problems else 0)
    for path in gen.generate(out, cfg=cfg):
        click.echo(str(path))


# ------------------------------------------------------------------ experiments
@main.command()
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
    ledger_path: str | None,
    ttft_p95_target: float,
    itl_p95_target: float,
) -> None:
    """Compare two `vllm bench serve` results: keep, revert or inconclusive.

    Each may be a --save-result file (with --save-detailed: per-request intervals; without:
    reported percentiles against noise floors), or the printed "Serving Benchmark Result"
    table as pasted, with the command above it.

    A is the baseline, B the run with the changed knob, under the same load. Exit 2 when the
    loads differ (the comparison is refused)."""

    try:
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
        c = comparison.compare_bench_files(
            a,
            b,
            buckets=buckets,
            target=targets,
            preemptions=pre,
            settings=samples.Settings(slo=slo),
            guards=guards,
        )
    except (samples.ExperimentError, ValueError) as e:
        _fail(str(e))
        return
    click.echo(json.dumps(c.to_json(), indent=2) if fmt == "json" else comparison_out.render_text(c))
    if ledger_path:
        try:
            Ledger(ledger_path).add(record_from_comparison(c, time.time()))
        except LedgerError as e:
            _fail(str(e))
    if not c.load.same:
        sys.exit(2)


@main.command()
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

    cfg = _cfg(config_file)
    path = ledger_path or str(Path(cfg.state_dir) / "ledger.sqlite")
    if not Path(path).exists():
        rows: list[dict[str, Any]] = []
    else:
        try:
            rows = Ledger(path).list(limit)
        except LedgerError as e:
            _fail(str(e))
            return
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2, default=str))
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


@main.group()
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
        _fail("give exactly one of --url, --daemon, --session", EXIT_USAGE)
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
        _fail(str(e))
        return
    click.echo(
        f"baseline saved to {out_file}: {doc['summary'].get('requests_finished') or 0:.0f} requests over "
        f"{doc['summary'].get('window_seconds') or 0:.0f}s"
    )


# ------------------------------------------------------------------ demo
@main.command()
@click.option(
    "--session",
    "session_dir",
    type=click.Path(),
    default=str(DEMO_SESSION),
    show_default="the bundled H200 session",
    help="The recorded session to diagnose.",
)
@click.option("--listen", default=None, help="Serve the exporter here (default 127.0.0.1:19842).")
@click.option(
    "--serve-seconds",
    default=None,
    type=float,
    help="Stop serving after this many seconds (default: until Ctrl-C).",
)
def demo(session_dir: str, listen: str | None, serve_seconds: float | None) -> None:
    """Diagnose a bundled session recorded from a real vLLM server, then serve the exporter on it."""

    cfg = _cfg(None, listen=listen)
    rs = _rules(None)

    try:
        adv, d = inputs.from_session(session_dir, cfg, rs)
    except (inputs.InputError, SessionError) as e:
        _fail(str(e))
        return
    if d is None:
        _fail(f"{session_dir}: no pages")
        return
    config_mod.parse_listen(cfg.listen)
    click.echo(f"Replayed {session_dir} (recorded from a real vLLM server):\n")
    click.echo(out.render(d, "text", _color()))
    sys.exit(daemon.serve_static(adv, d, cfg, serve_seconds))


# ------------------------------------------------------------------ config
@main.group("config")
def config_group() -> None:
    """The advisor's own configuration: a commented sample, and a check of a file."""


@config_group.command("sample")
def config_sample() -> None:
    """Print the commented sample config (for `run --config FILE`)."""
    click.echo(config_mod.sample_text(), nl=False)


@config_group.command("check")
@click.argument("config_file", type=click.Path())
def config_check(config_file: str) -> None:
    """Validate a config file (and VLLM_ADVISOR_* variables): one line per problem, exit 2 if any."""
    cfg = config_mod.load(config_file)
    config_mod.parse_listen(cfg.listen)
    click.echo(
        f"{config_file}: OK (vllm_url {cfg.vllm_url}, listen {cfg.listen}, interval {cfg.interval_s:g}s)"
    )


if __name__ == "__main__":  # pragma: no cover
    main()
