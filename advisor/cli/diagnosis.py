"""``explain``, ``predict`` and ``inspect``: what should change, what a change would do, and
what the sources learned.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from advisor.cli.common import (
    EXIT_ADVICE,
    EXIT_NO_DATA,
    EXIT_USAGE,
    TEXT_JSON_OR_MARKDOWN,
    TEXT_OR_JSON,
    checked_rules,
    daemon_errors,
    fail,
    load_config,
    pasted_command,
    use_color,
)
from advisor.cli.rules import rule_docs
from advisor.core import config as config_mod
from advisor.core import jsonout
from advisor.drive import daemon, inputs, inspection, scaling
from advisor.drive import predict as predict_cmd
from advisor.outputs import explain as out
from advisor.outputs import prediction as prediction_out
from advisor.outputs.explain import diagnosis_from_json
from advisor.predict import scoring
from advisor.predict.perfmodel import InsufficientData
from advisor.sources import prometheus as prom_src
from advisor.sources.session import SessionError


# ------------------------------------------------------------------ explain
@click.command()
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

    rules = checked_rules(rules_dir)
    if rule_id:
        rule_docs(rules, rule_id, fmt)
        return
    sources = [
        bool(url),
        bool(session_dir),
        bool(metrics_files or log_file),
        bool(daemon_url),
        bool(prom_url),
    ]
    if sum(sources) != 1:
        fail(
            "give exactly one of --url, --session, --metrics-file/--log-file, --daemon, --prometheus, "
            "or a RULE_ID",
            EXIT_USAGE,
        )
    cfg = load_config(config_file, engine_config=engine_config, rules_dir=rules_dir)
    if command_file and (daemon_url or prom_url):
        fail(
            "--command-file does not go with --daemon or --prometheus (they have their own sources)",
            EXIT_USAGE,
        )
    command = pasted_command(command_file)
    if prom_url:
        if not instance:
            fail("--prometheus needs --instance (the server's `instance` label)", EXIT_USAGE)
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
    if isinstance(diagnosis, dict):  # from a daemon: already JSON, with its desired replicas
        status = diagnosis.get("status")
        if fmt == "json":
            click.echo(jsonout.dumps(diagnosis, indent=2))
        else:
            replicas = out.replicas_from_json(diagnosis.get("replicas"))
            click.echo(out.render(diagnosis_from_json(diagnosis), fmt, use_color(), replicas))
    else:
        adv, diagnosis = diagnosis
        status = diagnosis.status
        click.echo(out.render(diagnosis, fmt, use_color(), scaling.desired_now(adv, diagnosis)))
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
            adv, d = inputs.from_session(session_dir, cfg, rules, config_path=engine_config, command=command)
            if d is None:
                fail(f"{session_dir}: the session has no /metrics pages")
            return adv, d
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
            if d is None:
                fail("nothing to diagnose", EXIT_NO_DATA)
            return adv, d

        if daemon_url:
            return daemon.fetch_diagnosis(daemon_url)
        return daemon.observe_advisor(
            url,
            cfg,
            rules,
            config_mod.parse_duration_s(window),
            config_mod.parse_duration_s(interval),
            engine_config=engine_config,
            command=command,
        )
    except inputs.NoData as e:
        fail(str(e), EXIT_NO_DATA)
    except (inputs.InputError, SessionError) as e:
        fail(str(e))
    except daemon_errors() as e:
        fail(str(e))
    except config_mod.ConfigError as e:
        fail(str(e), EXIT_USAGE)
    return None


def _diagnose_prometheus(
    cfg: Any, rules: Any, prom_url: str, instance: str, model: str | None, at: str, window: str
) -> Any:

    try:
        t = prom_src.parse_time(at)
        window_s = config_mod.parse_duration_s(window)
    except (ValueError, config_mod.ConfigError) as e:
        fail(str(e), EXIT_USAGE)
        raise
    try:
        history = prom_src.read_history(prom_src.Client(prom_url), instance, t, window_s, model=model)
    except prom_src.PrometheusError as e:
        fail(f"Prometheus: {e}")
        raise
    return inputs.from_prometheus(history, cfg, rules, t, window_s)


# ------------------------------------------------------------------ predict
@click.command()
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
        fail("give exactly one of --session, --metrics-file or --url", EXIT_USAGE)
    try:
        knob, value = predict_cmd.parse_set(setting)
    except ValueError as e:
        fail(str(e), EXIT_USAGE)
        raise
    cfg = load_config(config_file, engine_config=engine_config)
    try:
        model, values, exact, rows = predict_cmd.from_source_exact(
            cfg,
            checked_rules(None),
            session_dir=session_dir,
            metrics_files=metrics_files,
            log_file=log_file,
            url=url,
            window_s=config_mod.parse_duration_s(window),
            interval_s=config_mod.parse_duration_s(interval),
            config_path=engine_config,
        )
        sp = None
        if predict_cmd.simulator_only(knob):
            sp = predict_cmd.simulator_prediction(model, knob, value, rows, cfg.targets)
        else:
            p = scoring.predict(model, knob, value, values)
    except inputs.NoData as e:
        fail(str(e), EXIT_NO_DATA)
        raise
    except (inputs.InputError, SessionError) as e:
        fail(str(e))
        raise
    except InsufficientData as e:
        fail(f"insufficient data: {e}", 4)
        raise
    except ValueError as e:
        fail(f"cannot predict {knob}: {e}", 4)
        raise
    except daemon_errors() as e:
        fail(str(e))
        raise
    sim, why_not = None, None
    if sp is None:  # the simulator's numbers where the advice would decide this change by them
        sp, sim, why_not = predict_cmd.said_prediction(model, knob, value, p, rows, cfg.targets)
    if sp is not None:  # the prediction is the simulator's
        if fmt == "json":
            doc = sp.to_json()
            if exact:
                doc["measured_exact"] = {"source": "stat-logger plugin", **exact}
            doc["simulated"] = sp.sim.to_json()
            if sp.not_deciding:
                doc["simulated"]["not_deciding"] = sp.not_deciding
            click.echo(jsonout.dumps(doc, indent=2))
        else:
            click.echo(prediction_out.render_simulator_text(sp, exact, model))
            click.echo(prediction_out.render_simulated(sp.sim, sp.not_deciding, model))
        return
    if fmt == "json":
        doc = p.to_json()
        doc["predicted_by"] = "closed form"
        if exact:
            doc["measured_exact"] = {"source": "stat-logger plugin", **exact}
        doc["simulated"] = sim.to_json() if sim is not None else {"unavailable": why_not}
        if sim is not None and why_not:
            doc["simulated"]["not_deciding"] = why_not
        click.echo(jsonout.dumps(doc, indent=2))
    else:
        click.echo(prediction_out.render_text(p, model, exact))
        click.echo(prediction_out.render_simulated(sim, why_not, model))


# ------------------------------------------------------------------ inspect
@click.command()
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
        fail("give --url, --session, --metrics-file, --log-file or --command-file", EXIT_USAGE)
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
        fail(str(e))
        return
    if fmt == "json":
        click.echo(jsonout.dumps(report, indent=2, default=str))
    else:
        click.echo(inspection.render_text(report))
