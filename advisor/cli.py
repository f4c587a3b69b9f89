"""Command-line interface (thin: parse, call one function, set the exit code).

Exit codes: 0 ok; 1 the input could not be used (clear message on stderr);
2 usage error (click); ``explain --exit-code`` returns 3 when there is advice.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from advisor import config as config_mod
from advisor.ruleset import RuleError, load_rules

FORMATS = click.Choice(["text", "json", "markdown"])
DEMO_SESSION = Path(__file__).resolve().parent / "data" / "sessions" / "h200-A_s256"


def _fail(msg: str, code: int = 1) -> None:
    click.echo(f"error: {msg}", err=True)
    sys.exit(code)


def _cfg(config_file: str | None, **flags: Any) -> config_mod.Config:
    try:
        return config_mod.load(config_file, **flags)
    except config_mod.ConfigError as e:
        _fail(f"config: {e}")
        raise  # unreachable


def _rules(rules_dir: str | None) -> list[Any]:
    try:
        return load_rules(rules_dir)
    except RuleError as e:
        _fail("invalid rules:\n" + "\n".join(e.errors))
        raise


def _color() -> bool:
    return sys.stdout.isatty()


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="vllm-advisor")
def main() -> None:
    """Find which limit hurts a vLLM server and recommend one knob to change.

    \b
    On a host:        vllm-advisor explain --url http://127.0.0.1:8000
    From a recording: vllm-advisor explain --session DIR
    A rule's docs:    vllm-advisor explain kv-preemption-seqs-bind
    The daemon:       vllm-advisor run --vllm-url http://127.0.0.1:8000
    """
    from advisor.log import configure_logging

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
@click.option("--format", "fmt", type=FORMATS, default="text", show_default=True)
@click.option("--engine-config", type=click.Path(), help="The YAML `vllm serve --config` takes.")
@click.option("--rules-dir", type=click.Path(), help="Use these rules instead of the bundled ones.")
@click.option("--config", "config_file", type=click.Path(), help="The advisor's own config file.")
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
    exit_code: bool,
) -> None:
    """What should I change, and why? (or: a rule's own docs, with RULE_ID)"""
    from advisor.outputs import explain as out

    rules = _rules(rules_dir)
    if rule_id:
        match = [r for r in rules if r.id == rule_id or rule_id in r.aliases]
        if not match:
            _fail(f"no rule {rule_id!r}; see `vllm-advisor rules list`")
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
            2,
        )
    cfg = _cfg(config_file, engine_config=engine_config, rules_dir=rules_dir)
    if prom_url:
        if not instance:
            _fail("--prometheus needs --instance (the server's `instance` label)", 2)
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
        )
    if isinstance(diagnosis, dict):  # from a daemon: already JSON
        status = diagnosis.get("status")
        if fmt == "json":
            click.echo(json.dumps(diagnosis, indent=2))
        else:
            from advisor.outputs.explain import diagnosis_from_json

            click.echo(out.render(diagnosis_from_json(diagnosis), fmt, _color()))
    else:
        status = diagnosis.status
        click.echo(out.render(diagnosis, fmt, _color()))
    if exit_code and status == "advice":
        sys.exit(3)


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
) -> Any:
    from advisor import inputs
    from advisor.session import SessionError

    try:
        if session_dir:
            _, d = inputs.from_session(session_dir, cfg, rules, config_path=engine_config)
            if d is None:
                _fail(f"{session_dir}: the session has no /metrics pages")
            return d
        if metrics_files or log_file:
            if not metrics_files:
                _fail(
                    "--log-file alone gives startup facts, not a diagnosis: add --metrics-file (or use inspect)"
                )
            _, d = inputs.from_files(list(metrics_files), log_file, cfg, rules, config_path=engine_config)
            return d
        from advisor import daemon

        if daemon_url:
            return daemon.fetch_diagnosis(daemon_url)
        return daemon.observe(
            url,
            cfg,
            rules,
            config_mod.parse_duration_s(window),
            config_mod.parse_duration_s(interval),
            engine_config=engine_config,
        )
    except (inputs.InputError, SessionError) as e:
        _fail(str(e))
    except daemon_errors() as e:
        _fail(str(e))
    except config_mod.ConfigError as e:
        _fail(str(e), 2)
    return None


def _diagnose_prometheus(
    cfg: Any, rules: Any, prom_url: str, instance: str, model: str | None, at: str, window: str
) -> Any:
    from advisor import inputs
    from advisor.sources import prometheus as prom_src

    try:
        t = prom_src.parse_time(at)
        window_s = config_mod.parse_duration_s(window)
        history = prom_src.read_history(prom_src.Client(prom_url), instance, t, window_s, model=model)
        return inputs.from_prometheus(history, cfg, rules, t, window_s)[1]
    except (ValueError, config_mod.ConfigError) as e:
        _fail(str(e), 2)
    except prom_src.PrometheusError as e:
        _fail(f"Prometheus: {e}")
    return None


def daemon_errors() -> tuple[type[BaseException], ...]:
    from advisor.daemon import DaemonError
    from advisor.sources.engine import EngineSourceError
    from advisor.sources.metrics import MetricsError

    return (MetricsError, EngineSourceError, DaemonError, OSError)


# ------------------------------------------------------------------ inspect
@main.command()
@click.option("--url", help="vLLM base URL (or its /metrics URL): read one page now.")
@click.option("--session", "session_dir", type=click.Path(), help="A recorded session directory.")
@click.option(
    "--metrics-file", "metrics_files", multiple=True, type=click.Path(), help="Saved page (repeatable)."
)
@click.option("--log-file", type=click.Path(), help="vLLM's log file.")
@click.option("--engine-config", type=click.Path(), help="The YAML `vllm serve --config` takes.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def inspect(
    url: str | None,
    session_dir: str | None,
    metrics_files: tuple[str, ...],
    log_file: str | None,
    engine_config: str | None,
    fmt: str,
) -> None:
    """Show what the sources learned: engine knobs with their sources, log events, metric families."""
    from advisor import inspection

    if not (url or session_dir or metrics_files or log_file):
        _fail("give --url, --session, --metrics-file or --log-file", 2)
    try:
        report = inspection.inspect(
            url=url,
            session_dir=session_dir,
            metrics_files=list(metrics_files),
            log_file=log_file,
            engine_config=engine_config,
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
@click.option("--rules-dir", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
def rules_list(rules_dir: str | None, fmt: str) -> None:
    """Every rule with its severity and knob."""
    from advisor.outputs import explain as out

    rs = _rules(rules_dir)
    if fmt == "json":
        click.echo(json.dumps([out.rule_json(r) for r in rs], indent=2))
    else:
        click.echo(out.rules_table(rs))


@rules.command("show")
@click.argument("rule_id")
@click.option("--rules-dir", type=click.Path())
@click.option("--format", "fmt", type=FORMATS, default="text")
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
@click.option("--interval", default="5s", show_default=True)
@click.option("--duration", default="10m", show_default=True)
@click.option("--out", "out_dir", required=True, type=click.Path(), help="The session directory to write.")
@click.option("--gzip/--no-gzip", "compress", default=True, show_default=True, help="Gzip each page.")
@click.option(
    "--log-from-start",
    is_flag=True,
    help="Read --log-file from its first line (start-up facts of a server that is already up).",
)
@click.option("--notes", default="", help="Free text kept in the session's meta.json.")
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
) -> None:
    """Record a session (every /metrics page, the log, the engine's knobs) for replay and bug reports."""
    from advisor import session

    if log_file and log_cmd:
        _fail("give --log-file or --log-cmd, not both", 2)
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
    "--config", "config_file", type=click.Path(), help="YAML config (see deploy/vllm-advisor.yaml)."
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
    from advisor import daemon

    if log_file and log_cmd:
        _fail("give --log-file or --log-cmd, not both", 2)
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
    rs = _rules(cfg.rules_dir)
    if replay_dir:
        sys.exit(daemon.run_replay(cfg, rs, replay_dir, speed, run_seconds))
    if prom_url:
        from advisor import fleet
        from advisor.sources.prometheus import PrometheusError

        try:
            sys.exit(fleet.run(cfg, rs, prom_url, selector, run_seconds))
        except PrometheusError as e:
            _fail(f"--selector: {e}", 2)
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
    """Write the alert and recording rules, dashboards, runbook and deploy bundle from rules/."""
    from advisor import generate as gen
    from advisor.outputs.alerts import AlertConfigError, load_alert_config

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
        _fail(str(e), 2)
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
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
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
    """Compare two `vllm bench serve --save-result --save-detailed` files: keep, revert or inconclusive.

    A is the baseline, B the run with the changed knob, under the same load. Exit 2 when the
    loads differ (the comparison is refused)."""
    import time

    from advisor import experiment as ex

    try:
        pre = tuple(float(x) for x in preemptions.split(":")) if preemptions else None
        if pre is not None and len(pre) != 2:
            raise ValueError("--preemptions must be A:B")
        slo = ex.slo_from_targets({"ttft_p95_seconds": ttft_p95_target, "itl_p95_seconds": itl_p95_target})
        targets: str | tuple[str, ...] | None = target
        guards = ex.GUARDS
        if knob:
            name, _, direction = knob.partition(":")
            if direction not in ("increase", "decrease"):
                raise ValueError(f"--knob must be KNOB:increase or KNOB:decrease, got {knob!r}")
            from advisor.knobs import KNOBS, knob_for_flag

            k = knob_for_flag(name)  # any spelling vLLM has used: max_num_seqs, --max-num-seqs
            if k is None:
                raise ValueError(f"unknown knob {name!r}; known: {', '.join(sorted(KNOBS))}")
            name = k.name
            targets = target or ex.targets_for_knob(name, direction) or None
            guards = ex.guards_for_knob(name, direction)
        c = ex.compare_bench_files(
            a,
            b,
            buckets=buckets,
            target=targets,
            preemptions=pre,
            settings=ex.Settings(slo=slo),
            guards=guards,
        )
    except (ex.ExperimentError, ValueError) as e:
        _fail(str(e))
        return
    click.echo(json.dumps(c.to_json(), indent=2) if fmt == "json" else ex.render_text(c))
    if ledger_path:
        from advisor.ledger import Ledger, LedgerError, record_from_comparison

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
@click.option("--config", "config_file", type=click.Path())
@click.option("--limit", default=50, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def history(ledger_path: str | None, config_file: str | None, limit: int, fmt: str) -> None:
    """The experiments the advisor judged: knob, old -> new, verdict and why."""
    from advisor.ledger import Ledger, LedgerError

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
    import datetime as dt

    for r in rows:
        when = dt.datetime.fromtimestamp(r["started_at"], dt.UTC).strftime("%Y-%m-%d %H:%M")
        reason = (r.get("reasons") or [""])[0]
        click.echo(
            f"#{r['id']} {when} {r.get('knob')} {r.get('old_value')} -> {r.get('new_value')}: "
            f"{r['verdict'].upper()} ({r['source']}) {reason}"
        )


@main.group()
def baseline() -> None:
    """Keep a baseline: knobs with provenance and a metrics summary, for a later comparison."""


@baseline.command("save")
@click.option("--url", help="vLLM base URL to observe for --window.")
@click.option("--daemon", "daemon_url", help="Read the current window from a running advisor daemon.")
@click.option("--session", "session_dir", type=click.Path(), help="Or summarise a recorded session.")
@click.option("--window", default="60s", show_default=True)
@click.option("--interval", default="5s", show_default=True)
@click.option("--out", "out_file", required=True, type=click.Path())
def baseline_save(
    url: str | None,
    daemon_url: str | None,
    session_dir: str | None,
    window: str,
    interval: str,
    out_file: str,
) -> None:
    """Save what the server runs with and how it performs now."""
    from advisor import baseline as bl

    if sum(map(bool, (url, daemon_url, session_dir))) != 1:
        _fail("give exactly one of --url, --daemon, --session", 2)
    try:
        doc = bl.capture(
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
@click.option("--session", "session_dir", type=click.Path(), default=str(DEMO_SESSION), show_default=True)
@click.option("--listen", default=None, help="Serve the exporter here (default 127.0.0.1:19842).")
@click.option(
    "--serve-seconds",
    default=None,
    type=float,
    help="Stop serving after this many seconds (default: until Ctrl-C).",
)
def demo(session_dir: str, listen: str | None, serve_seconds: float | None) -> None:
    """Diagnose a bundled session recorded from a real vLLM server, then serve the exporter on it."""
    from advisor import daemon, inputs
    from advisor.outputs import explain as out

    cfg = _cfg(None, listen=listen)
    rs = _rules(None)
    adv, d = inputs.from_session(session_dir, cfg, rs)
    if d is None:
        _fail(f"{session_dir}: no pages")
        return
    click.echo(f"Replayed {session_dir} (recorded from a real vLLM server):\n")
    click.echo(out.render(d, "text", _color()))
    daemon.serve_static(adv, d, cfg, serve_seconds)


if __name__ == "__main__":  # pragma: no cover
    main()
