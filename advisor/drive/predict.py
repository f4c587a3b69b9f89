"""The ``predict`` command's plumbing: read ``--set``, and get a fitted model and the signal
values from a session, saved pages or a live server."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from advisor.core import knobs, units
from advisor.derive import sketches
from advisor.derive.signals import Context, Values, latency_sources
from advisor.diagnose import evidence
from advisor.drive import inputs
from advisor.drive.daemon import Daemon, DaemonError
from advisor.predict import perfmodel as pm
from advisor.predict import simulated
from advisor.predict.intake import Row, rows_of
from advisor.predict.scoring import Observed, model_of


def parse_set(text: str) -> tuple[str, float]:
    """``KNOB=VALUE`` (flag spellings and byte sizes accepted) -> (knob, value). ValueError."""
    if "=" not in text:
        raise ValueError(f"--set {text!r}: expected KNOB=VALUE")
    name, raw = text.split("=", 1)
    key = name.strip().lstrip("-").replace("-", "_")
    if key not in pm.KNOBS and key not in pm.SIMULATED_ONLY:
        raise ValueError(
            f"--set {text!r}: the model moves {', '.join(pm.KNOBS)}; "
            f"the scheduler simulator alone {', '.join(pm.SIMULATED_ONLY)}"
        )
    k = knobs.KNOBS.get(key)
    if k is None:
        raise ValueError(f"--set {text!r}: this vLLM version has no {key}")
    try:
        # a size as the advice prints it ("6 GiB -> 9 GiB") is accepted as well as bytes
        value = units.parse_bytes(raw) if key.endswith("_bytes") else float(knobs.coerce(k, raw.strip()))
    except (TypeError, ValueError):
        raise ValueError(f"--set {text!r}: {raw.strip()!r} is not a value for {key}") from None
    if key in ZERO_MEANS_OFF:
        if value < 0:
            raise ValueError(f"--set {text!r}: the value must be 0 (off) or more")
    elif value <= 0:
        raise ValueError(f"--set {text!r}: the value must be positive")
    return key, value


ZERO_MEANS_OFF = pm.SIMULATED_ONLY
"""Knobs whose 0 is a value (no watermark, no long-prefill cap, the adaptive cap off): the
rollback the rules name."""


def simulator_only(knob: str) -> bool:
    """A knob only the scheduler simulator prices: its prediction is the simulator's."""
    return knob in pm.SIMULATED_ONLY


def observe_url(
    url: str,
    cfg: Any,
    rules: Any,
    window_s: float,
    interval_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> Any:
    """Watch a live server (as ``explain --url``) and return its advisor (window and engine)."""
    cfg = cfg.with_overrides(vllm_url=url, interval_s=interval_s, window_s=max(window_s, cfg.min_window_s))
    daemon = Daemon(cfg, rules, persist=False)
    n = max(2, int(window_s / interval_s) + 1)
    d = None
    for i in range(n):
        d = daemon.cycle()
        if i == 0 and not daemon.advisor.up:
            break
        if i < n - 1:
            sleep(interval_s)
    if not daemon.advisor.stats.scrapes.get("success"):  # down: cannot do its job, as explain --url
        raise DaemonError(
            f"not one /metrics page could be read from {url}: {daemon.advisor.stats.last_error}"
        )
    return daemon.advisor, d


def from_source(
    cfg: Any,
    rules: Any,
    *,
    session_dir: str | None = None,
    metrics_files: Sequence[str] = (),
    log_file: str | None = None,
    url: str | None = None,
    window_s: float = 60.0,
    interval_s: float = 5.0,
    config_path: str | None = None,
) -> tuple[pm.Model, dict[str, float | None]]:
    """The fitted model and the signal values of a session, saved pages or a live server.
    Raises inputs.InputError / SessionError on bad input, pm.InsufficientData when the data
    cannot carry a model."""
    model, values, _, _ = from_source_exact(
        cfg,
        rules,
        session_dir=session_dir,
        metrics_files=metrics_files,
        log_file=log_file,
        url=url,
        window_s=window_s,
        interval_s=interval_s,
        config_path=config_path,
    )
    return model, values


def from_source_exact(
    cfg: Any,
    rules: Any,
    *,
    session_dir: str | None = None,
    metrics_files: Sequence[str] = (),
    log_file: str | None = None,
    url: str | None = None,
    window_s: float = 60.0,
    interval_s: float = 5.0,
    config_path: str | None = None,
) -> tuple[pm.Model, dict[str, float | None], dict[str, float], list[Row]]:
    """:func:`from_source`, the latencies the stat-logger plugin measured (see
    :func:`exact_latencies`; empty without it), and the window's busy rows (the simulator's
    load is fitted from them).
    Raises inputs.InputError / SessionError on bad input, pm.InsufficientData when the data
    cannot carry a model."""

    if session_dir:
        adv, d = inputs.from_session(session_dir, cfg, rules, config_path=config_path, simulate=False)
    elif metrics_files:
        adv, d = inputs.from_files(list(metrics_files), log_file, cfg, rules, config_path=config_path)
    elif url:
        adv, d = observe_url(url, cfg, rules, window_s, interval_s)
    else:
        raise ValueError("give --session, --metrics-file or --url")
    if d is None:
        raise pm.InsufficientData("no /metrics page to read")
    if len(metrics_files) == 1:  # one reading: nothing to fit a step time to (the log gives facts)
        raise pm.InsufficientData(evidence.NO_RATES)
    # the model wants the whole recording, not only the evaluation window
    ctx = Context(adv.window, adv.engine, None, dict(cfg.targets))
    values = Values(ctx).all()
    return (
        model_of(Observed.of(adv.intake, adv.window), adv.engine, values),
        values,
        exact_latencies(ctx, values),
        rows_of(adv.window.snapshots()),
    )


def simulated_change(
    model: pm.Model, knob: str, value: float, rows: Sequence[Row], targets: Mapping[str, float]
) -> tuple[simulated.Simulated | None, str | None]:
    """The change through the scheduler simulator as the advice scores it (:class:`simulated.Scorer`:
    the decision's requests, today's knobs checked against today's measurement); where that scorer
    would not decide (or the advice decides such a change by the closed form:
    :data:`simulated.NOT_DECIDING`), the simulation still and why it would not decide; None and
    why where it cannot be simulated at all."""
    scorer = simulated.Scorer(replace(model, rows=tuple(rows)), targets)
    why = scorer.why_not()
    try:
        if why is None:
            got = scorer.simulated(knob, value)
            why = simulated.not_deciding(knob, pm.with_knob(model, knob, value)[1], value)
            return got, None if why is None else f"not deciding: {why}"
        return simulated.simulate_change(model, knob, value, rows, targets), f"not deciding: {why}"
    except ValueError as e:
        return None, str(e)


def exact_latencies(ctx: Context, values: Mapping[str, float | None]) -> dict[str, float]:
    """The prediction's latency metrics that the stat-logger plugin measured (its sketches over
    the same window): metric -> seconds; empty without the plugin."""
    sources = latency_sources(ctx)
    out = {}
    for m in pm.METRICS:
        base = m.rsplit("_", 1)[0]
        v = values.get(m)
        if sources.get(base) == sketches.SOURCE_PLUGIN and v is not None:
            out[m] = v
    return out


def simulator_prediction(
    model: pm.Model, knob: str, value: float, rows: Sequence[Row], targets: Mapping[str, float]
) -> simulated.SimulatorPrediction:
    """A knob only the simulator prices (:func:`simulator_only`): the simulated change as the
    prediction. ValueError (saying why) where it cannot be simulated or the value is out of range."""
    sim, why = simulated_change(model, knob, value, rows, targets)
    if sim is None:
        raise ValueError(f"only the scheduler simulator prices {knob}, and it cannot run here: {why}")
    return simulated.predict_simulator_only(model, knob, value, sim, why)


def said_prediction(
    model: pm.Model,
    knob: str,
    value: float,
    closed: pm.Prediction,
    rows: Sequence[Row],
    targets: Mapping[str, float],
) -> tuple[simulated.SimulatorPrediction | None, simulated.Simulated | None, str | None]:
    """The prediction to say for a knob the closed form prices: the numbers of the model the
    advice would decide this change by. Where the simulator would (:func:`simulated_change`
    without a reason not to), its prediction with ``closed`` beside it; else None, and the
    simulation (None where it cannot run) with why it does not decide."""
    sim, why = simulated_change(model, knob, value, rows, targets)
    if sim is None or why is not None:
        return None, sim, why
    return simulated.predict_simulator_only(model, knob, value, sim, None, closed), sim, None
