"""One knob's change, simulated: the load inferred from the window replayed through the
scheduler simulator at today's knobs and at the changed one (the same requests for both).

Pure: it takes the fitted model (:mod:`advisor.predict.perfmodel`), the window's busy rows
(:class:`advisor.predict.intake.Row`) and the targets; it returns values.

What it gives beside the closed form's prediction: the arrival process inferred (a closed loop
of N clients, or open arrivals at a rate with their burstiness), the simulated distributions
(p50 / p95 / p99 of TTFT, TPOT and E2E), and goodput counted per request (the share of requests
meeting each target and all of them, and the output tokens/s of those meeting all), before and
after. scripts/validate_sim.py judges it against the recorded after-runs (docs/validation.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from advisor.predict import perfmodel as pm
from advisor.predict import workload as wl
from advisor.predict.intake import Row
from advisor.predict.simulator import Done, Engine, simulate

REQUESTS = 400  # simulated requests per candidate: bounds the work (steps ~ requests x output / batch)
MAX_STEPS = 400_000
DEFAULT_ENGINE = Engine(max_num_seqs=256, max_num_batched_tokens=8192, kv_blocks=10**9)
QUANTILES = (0.5, 0.95, 0.99)


def engine_of(cfg: pm.Config, defaults: Engine = DEFAULT_ENGINE) -> Engine:
    """The simulator's engine for a config; vLLM's defaults where the config does not say."""
    bs = int(cfg.block_size or defaults.block_size)
    usable = cfg.usable_kv_tokens()
    seqs = int(cfg.max_num_seqs or defaults.max_num_seqs)
    active = int(cfg.max_num_active_seqs) if cfg.max_num_active_seqs else None
    return Engine(
        max_num_seqs=max(seqs, active or 0),
        max_num_batched_tokens=int(cfg.max_num_batched_tokens or defaults.max_num_batched_tokens),
        kv_blocks=max(1, int(usable // bs)) if usable is not None else defaults.kv_blocks,
        block_size=bs,
        long_prefill_token_threshold=int(cfg.long_prefill_token_threshold or 0),
        long_prefill_token_threshold_adaptive=cfg.long_prefill_token_threshold_adaptive,
        watermark=float(cfg.watermark or 0.0),
        max_num_active_seqs=min(active, seqs) if active is not None else None,
    )


@dataclass(frozen=True)
class Outcome:
    """One simulated run: throughput, the latency distributions (seconds), goodput."""

    output_tokens_per_second: float | None
    ttft: tuple[float | None, ...]  # at QUANTILES
    tpot: tuple[float | None, ...]
    e2e: tuple[float | None, ...]
    meets: Mapping[str, float | None]  # target name (and "all") -> share of requests meeting it
    goodput_tokens_per_second: float | None
    preemptions_per_request: float
    truncated: bool

    def to_json(self) -> dict[str, Any]:
        def dist(qs: tuple[float | None, ...]) -> dict[str, float | None]:
            return {f"p{round(q * 100)}": v for q, v in zip(QUANTILES, qs, strict=True)}

        return {
            "output_tokens_per_second": self.output_tokens_per_second,
            "ttft_seconds": dist(self.ttft),
            "tpot_seconds": dist(self.tpot),
            "e2e_seconds": dist(self.e2e),
            "share_meeting": dict(self.meets),
            "goodput_tokens_per_second": self.goodput_tokens_per_second,
            "preemptions_per_request": self.preemptions_per_request,
            "truncated": self.truncated,
        }


@dataclass(frozen=True)
class Simulated:
    arrivals: wl.Arrivals
    requests: int
    before: Outcome
    after: Outcome

    def to_json(self) -> dict[str, Any]:
        a = self.arrivals
        return {
            "arrivals": {
                "kind": a.kind,
                "clients": a.clients,
                "rate_per_second": a.rate,
                "gamma_shape": a.shape if a.kind == "open" else None,
                "inferred_from": a.why,
            },
            "requests": self.requests,
            "before": self.before.to_json(),
            "after": self.after.to_json(),
        }


def _meets(done: Sequence[Done], targets: Mapping[str, float]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for name, t in targets.items():
        out[name] = wl.goodput(done, {name: t})
    out["all"] = wl.goodput(done, targets)
    return out


def outcome(
    model: pm.Model, cfg: pm.Config, reqs: Sequence[Any], arr: wl.Arrivals, targets: Mapping[str, float]
) -> Outcome:
    """``reqs`` through the engines of ``cfg`` (data-parallel copies share the load).
    ValueError without a step-time fit, or for a request the cache cannot hold."""
    if model.fit is None:
        raise ValueError("no step-time fit")
    eng = engine_of(cfg)
    results = [
        simulate(eng, model.fit, share, clients=clients, max_steps=MAX_STEPS)
        for share, clients in wl.split(reqs, arr, int(cfg.data_parallel_size))
    ]
    done = [d for r in results for d in r.done]
    end = max(r.end for r in results)
    t0 = min((d.arrival for d in done), default=0.0)
    span = end - t0
    tpots = [d.tpot for d in done if d.tpot is not None]

    def qs(xs: Sequence[float]) -> tuple[float | None, ...]:
        return tuple(wl.quantile(xs, q) for q in QUANTILES)

    return Outcome(
        output_tokens_per_second=sum(d.output for d in done) / span if span > 0 else None,
        ttft=qs([d.ttft for d in done]),
        tpot=qs(tpots),
        e2e=qs([d.e2e for d in done]),
        meets=_meets(done, targets),
        goodput_tokens_per_second=wl.goodput_tokens_per_second(done, targets, span),
        preemptions_per_request=sum(r.preemptions for r in results) / max(len(done), 1),
        truncated=any(r.truncated for r in results),
    )


def simulate_change(
    model: pm.Model,
    knob: str,
    value: float,
    rows: Sequence[Row],
    targets: Mapping[str, float],
    requests: int = REQUESTS,
    seed: int = 0,
) -> Simulated:
    """Today's knobs and ``knob=value`` under the load the rows show. ValueError (saying what is
    missing) when the simulator lacks an input: the step-time fit, the lengths, the arrivals, or
    what the knob does."""
    if model.fit is None:
        raise ValueError("no step-time fit")
    if not model.prompt_mean or not model.output_mean:
        raise ValueError("the prompt and output lengths are unknown")
    arr = wl.fit_arrivals(rows)
    cfg1, _ = pm.with_knob(model, knob, value)
    reqs = wl.requests(
        requests, (model.prompt_mean, model.prompt_p95), (model.output_mean, model.output_p95), arr, seed
    )
    return Simulated(
        arr,
        requests,
        outcome(model, model.config, reqs, arr, targets),
        outcome(model, cfg1, reqs, arr, targets),
    )
