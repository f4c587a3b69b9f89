"""``run``, ``record`` and ``demo``: the daemon beside a server, a recording of one, and the
bundled recording diagnosed and served.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from advisor.cli.common import (
    DEMO_SESSION,
    EXIT_USAGE,
    checked_rules,
    fail,
    load_config,
    pasted_command,
    use_color,
)
from advisor.core import config as config_mod
from advisor.drive import daemon, fleet, history, inputs, scaling
from advisor.outputs import explain as out
from advisor.sources import session
from advisor.sources.prometheus import PrometheusError
from advisor.sources.session import SessionError


# ------------------------------------------------------------------ record
@click.command()
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
        fail("give --log-file or --log-cmd, not both", EXIT_USAGE)
    command = pasted_command(command_file)
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
        fail(str(e))
        return
    if progress is not None:
        sys.stderr.write("\n")
    click.echo(
        f"recorded {res.scrapes} scrapes and {res.log_lines} log lines into {out_dir}"
        + (f" ({len(res.errors)} failed scrapes)" if res.errors else "")
    )
    if res.scrapes == 0:
        last = res.errors[-1]["error"] if res.errors else "no scrape was attempted"
        fail(f"not one /metrics page could be read from {url}: {last}")


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
@click.command()
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
        fail("give --log-file or --log-cmd, not both", EXIT_USAGE)
    cfg = load_config(
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
    if cfg.log_file and not replay_dir and not Path(cfg.log_file).exists():
        # followed once it appears (a server not started yet), but a typo would otherwise go unseen
        click.echo(
            f"warning: log file {cfg.log_file} does not exist (yet); it is followed once it appears",
            err=True,
        )
    rs = checked_rules(cfg.rules_dir)
    try:
        _serve(cfg, rs, replay_dir, speed, prom_url, selector, run_seconds)
    except daemon.DaemonError as e:  # a port or a state dir in use: after its log line, one error line
        fail(str(e))


def _serve(
    cfg: Any,
    rs: Any,
    replay_dir: str | None,
    speed: float,
    prom_url: str | None,
    selector: str,
    run_seconds: float | None,
) -> None:
    if replay_dir:
        sys.exit(daemon.run_replay(cfg, rs, replay_dir, speed, run_seconds))
    if prom_url:
        try:
            sys.exit(fleet.run(cfg, rs, prom_url, selector, run_seconds))
        except PrometheusError as e:
            fail(f"--selector: {e}", EXIT_USAGE)
    sys.exit(daemon.run(cfg, rs, run_seconds))


# ------------------------------------------------------------------ demo
@click.command()
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
    """Diagnose a bundled session recorded from a real vLLM server, then serve its page and the
    exporter until Ctrl-C (the page's URL is printed)."""

    cfg = load_config(None, listen=listen)
    rs = checked_rules(None)

    advice = history.AdviceHistory()  # the advice given as the session plays, for /history
    try:
        adv, d = inputs.from_session(session_dir, cfg, rs, on_diagnosis=advice.on_diagnosis)
    except (inputs.InputError, SessionError) as e:
        fail(str(e))
        return
    if d is None:
        fail(f"{session_dir}: no pages")
        return
    config_mod.parse_listen(cfg.listen)
    click.echo(f"Replayed {session_dir} (recorded from a real vLLM server):\n")
    click.echo(out.render(d, "text", use_color(), scaling.desired_now(adv, d)))
    sys.exit(daemon.serve_static(adv, d, cfg, serve_seconds, advice))
