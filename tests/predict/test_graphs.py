"""Which decode steps run as a full CUDA graph (advisor/predict/graphs.py), read from the recorded
servers' own start-up lines (validation/runs/: vLLM 0.25 on H100s and H200s, replayed; no GPU
here), and what the step fit makes of them. What the probed runs measured of it:
tests/verify/test_validation_runs.py."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from advisor.core.model import EngineInfo, Provenanced
from advisor.predict import graphs
from advisor.predict import perfmodel as pm
from advisor.predict.intake import Row
from advisor.sources import logfacts, logs
from advisor.sources.engine import resolve

RUNS = Path(__file__).resolve().parents[2] / "validation" / "runs"


def _argv(run: str) -> list[str]:
    return list(json.loads((RUNS / run / "serve_argv.json").read_text()))


def _flag(argv: list[str], flag: str, default: int) -> int:
    return int(argv[argv.index(flag) + 1]) if flag in argv else default


def _engine(run: str) -> EngineInfo:
    with gzip.open(RUNS / run / "vllm.log.gz", "rt") as f:
        return EngineInfo.merge([logfacts.from_log_events(logs.parse_lines(f))])


def _gpu_runs() -> list[str]:
    out = []
    for d in sorted(RUNS.iterdir()):
        argv = _argv(d.name)
        if d.name.startswith("cpu-") or "--enforce-eager" in argv or "--speculative-config" in argv:
            continue
        out.append(d.name)
    return out


def test_the_default_capture_sizes_are_what_every_recorded_server_logged() -> None:
    """Every GPU server of validation/runs logged its capture sizes in its engine config line:
    vLLM's default rule (1, 2, 4, every 8th below 256, every 16th after, up to min(2 x cap,
    512) and the budget; capture-trunc's --max-cudagraph-capture-size 8 caps it) gives each."""
    runs = _gpu_runs()
    assert len(runs) >= 40
    for run in runs:
        engine = _engine(run)
        logged = engine.get("cudagraph_capture_sizes")
        assert logged, run
        argv = _argv(run)
        cap, budget = _flag(argv, "--max-num-seqs", 256), _flag(argv, "--max-num-batched-tokens", 8192)
        mx = _flag(argv, "--max-cudagraph-capture-size", 0) or None
        assert [int(x) for x in logged.split(",")] == graphs.default_sizes(cap, budget, mx), run
        assert engine.get("cudagraph_mode") == "FULL_AND_PIECEWISE", run


@pytest.mark.parametrize(
    ("cap", "budget", "limit"),
    [(18, 1024, 16), (27, 1024, 24), (36, 8192, 32), (48, 8192, 48), (12, 1024, 8), (256, 8192, 256),
     (300, 8192, 288), (1024, 8192, 512), (64, 32, 32), (3, 8192, 2)],
)  # fmt: skip
def test_the_largest_full_decode_graph_under_a_cap(cap: int, budget: int, limit: int) -> None:
    """vLLM 0.25's CudagraphDispatcher keys full decode graphs on the capture sizes up to
    max_num_seqs: a cap between two sizes leaves the batches above the lower one without."""
    assert graphs.Graphs().full_limit(cap, budget) == limit


def test_capture_sizes_set_by_hand_stay_as_set() -> None:
    """A list that is not the default for today's cap and budget was set by hand: it stays when
    the cap moves; the default list follows the cap."""
    log = {"device": "cuda", "vllm_version": "0.25.0", "cudagraph_mode": "FULL_AND_PIECEWISE"}
    own = _info({**log, "cudagraph_capture_sizes": "1,2,4,8,12,20"})
    g = graphs.graphs_of(own, 16, 8192)
    assert g is not None and g.sizes == (1, 2, 4, 8, 12, 20)
    assert g.full_limit(40, 8192) == 20 and g.full_limit(16, 8192) == 12
    default = graphs.graphs_of(_info({**log, "cudagraph_capture_sizes": "1,2,4,8,16,24,32"}), 16, 8192)
    assert default == graphs.Graphs() and default.full_limit(40, 8192) == 40


def _info(values: dict[str, object]) -> EngineInfo:
    return EngineInfo({k: Provenanced(v, "log", "test") for k, v in values.items()})


@pytest.mark.parametrize(
    "values",
    [
        {"device": "cpu", "vllm_version": "0.32.0"},
        {"device": "cuda", "vllm_version": "0.25.0", "enforce_eager": True},
        {"device": "cuda", "vllm_version": "0.25.0", "cudagraph_mode": "PIECEWISE"},
        {"device": "cuda", "vllm_version": "0.25.0", "cudagraph_mode": "NONE"},
        {"device": "cuda", "vllm_version": "0.10.2"},  # before FULL_AND_PIECEWISE was the default
        {"device": "cuda", "vllm_version": "0.25.0", "num_speculative_tokens": 4},  # not modelled
    ],
)
def test_no_full_decode_graphs_no_limit(values: dict[str, object]) -> None:
    assert graphs.graphs_of(_info(values), 18, 1024) is None


def test_an_unlogged_mode_is_the_default_since_0_11() -> None:
    assert graphs.graphs_of(_info({"device": "cuda", "vllm_version": "0.11.0"}), 18, 1024) == graphs.Graphs()


def _row(running: float, step: float, steps: float = 100.0) -> Row:
    return Row(
        t=0.0, dt=step * steps, steps=steps, decode=running, prefill=0.0, running=running, waiting=0.0,
        kv_usage=None, preemptions=0.0, finished=1.0, engines=1,
    )  # fmt: skip


def test_the_piecewise_time_is_seen_where_both_kinds_ran_and_typical_where_one_did() -> None:
    """Intervals at 14 running (a full graph under a limit of 16) and at 18 (piecewise), the
    fit priced from all of them: the piecewise time is what the two groups' residuals differ by,
    weighed with the typical share of the mean decode step as one more interval; with one kind
    only, the typical share alone. Either way the recording's steps keep their fitted mean."""
    fit = pm.StepTime(0.006, 0.0, 0.0, "none", 6, None)  # 6 ms a step, as least squares left it
    rows = [_row(14, 0.005)] * 3 + [_row(18, 0.007)] * 3
    got = pm.with_graph_penalty(fit, rows, None, 16)
    assert got.piecewise_s == pytest.approx((3 * 0.002 + graphs.PIECEWISE_PRIOR * 0.006) / 4)
    assert got.speed_of(rows, None, 16) == pytest.approx(1.0)
    assert "run piecewise" in got.basis and "from 3 intervals of each kind" in got.basis
    only = pm.with_graph_penalty(fit, [_row(18, 0.006)] * 5, None, 16)
    assert only.piecewise_s == pytest.approx(graphs.PIECEWISE_PRIOR * 0.006)
    assert only.at(18, 0.0, 1.0) == pytest.approx(0.006)  # its own steps, as measured
    assert only.at(14, 0.0) == pytest.approx(0.006 - only.piecewise_s)  # within the limit: cheaper
    assert pm.with_graph_penalty(fit, rows, None, None) is fit  # no limit: nothing to price
    # a fit with no fixed part (prefill-bound: a step priced by its tokens) keeps none
    bound = pm.StepTime(0.0, 3e-4, 0.0, "decode", 6, None, "prefill-bound")
    assert pm.with_graph_penalty(bound, [_row(18, 0.0054)] * 5, None, 16).a == 0.0


def _config_line(version: str, compilation: str) -> str:
    return (
        f"(EngineCore_DP0 pid=1) INFO 12-06 10:21:01 [core.py:93] Initializing a V1 LLM engine ({version}) "
        "with config: model='/m', speculative_config=None, tokenizer='/m', dtype=torch.bfloat16, "
        "max_seq_len=8192, tensor_parallel_size=1, enforce_eager=False, kv_cache_dtype=auto, "
        f"device_config=cuda, seed=0, enable_prefix_caching=True, compilation_config={compilation}\n"
    )


@pytest.mark.parametrize(
    ("version", "compilation", "mode", "sizes"),
    [
        # 0.25's repr, as every recorded server logged it
        ("v0.25.0", "{'mode': <CompilationMode.VLLM_COMPILE: 3>, 'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: "
         "(2, 1)>, 'cudagraph_capture_sizes': [1, 2, 4, 8, 16, 24, 32], 'max_cudagraph_capture_size': 32}",
         "FULL_AND_PIECEWISE", "1,2,4,8,16,24,32"),
        # 0.11's JSON: the mode as its values, the sizes largest first
        ("v0.11.0", '{"level":3,"cudagraph_mode":[2,1],"use_cudagraph":true,"cudagraph_capture_sizes":[16,8,4,2,1],'
         '"full_cuda_graph":false}', "FULL_AND_PIECEWISE", "16,8,4,2,1"),
        ("v0.11.0", '{"level":3,"cudagraph_mode":1,"cudagraph_capture_sizes":[4,2,1]}', "PIECEWISE", "4,2,1"),
    ],
)  # fmt: skip
def test_the_graph_facts_are_read_from_either_form_of_the_config_line(
    version: str, compilation: str, mode: str, sizes: str
) -> None:
    # the engine as the advisor assembles it from the log alone (its device from device_config)
    engine = resolve(events=logs.parse_lines([_config_line(version, compilation)]), host={})
    assert engine.get("cudagraph_mode") == mode and engine.get("cudagraph_capture_sizes") == sizes
    g = graphs.graphs_of(engine, 16, 8192)
    assert (g is None) == (mode == "PIECEWISE")
    if g is not None:
        assert g.full_limit(16, 8192) == 16
