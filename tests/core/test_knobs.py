"""advisor.knobs: the knob table, defaults by version and hardware, step math, applicability."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from advisor.core import defaults as vllm_defaults
from advisor.core import knobs
from advisor.core.defaults import Hardware, default_for
from advisor.core.knobs import format_flag
from advisor.core.model import EngineInfo, Provenanced
from advisor.core.steps import Limits, applicable, parse_step, propose

REQUIRED = [
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "max_model_len",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "block_size",
    "kv_cache_dtype",
    "num_gpu_blocks_override",
    "kv_cache_memory_bytes",
    "api_server_count",
    "mm_processor_cache_gb",
    "mm_processor_cache_type",
    "enable_expert_parallel",
    "swap_space",
    "cpu_offload_gb",
    "replicas",
]


def test_every_required_knob_is_declared_with_a_flag_or_none_for_replicas() -> None:
    for name in REQUIRED:
        k = knobs.KNOBS[name]
        assert k.name == name
        if name == "replicas":
            assert k.flag is None
        else:
            assert k.flag == "--" + name.replace("_", "-")
        assert k.help


@pytest.mark.parametrize(
    ("spelling", "name"),
    [
        ("--max-num-seqs", "max_num_seqs"),
        ("--max_num_seqs", "max_num_seqs"),
        ("-tp", "tensor_parallel_size"),
        ("-pp", "pipeline_parallel_size"),
        ("-dp", "data_parallel_size"),
        ("--tensor_parallel_size", "tensor_parallel_size"),
        ("gpu_memory_utilization", "gpu_memory_utilization"),
    ],
)
def test_knob_for_flag_spellings(spelling: str, name: str) -> None:
    k = knobs.knob_for_flag(spelling)
    assert k is not None and k.name == name


def test_unknown_flag_is_none() -> None:
    assert knobs.knob_for_flag("--model") is None


# ---------------------------------------------------------------- defaults

H200 = Hardware(device="gpu", gpu_name="NVIDIA H200", gpu_memory_gib=140.4)
A100_80 = Hardware(device="gpu", gpu_name="NVIDIA A100-SXM4-80GB", gpu_memory_gib=80.0)
L4 = Hardware(device="gpu", gpu_name="NVIDIA L4", gpu_memory_gib=22.5)
CPU = Hardware(device="cpu")


@pytest.mark.parametrize(
    ("knob", "version", "hw", "expected"),
    [
        # today's rule (vllm/engine/arg_utils.py get_batch_defaults)
        ("max_num_seqs", "0.25.0", H200, 1024),
        ("max_num_batched_tokens", "0.25.0", H200, 8192),
        ("max_num_seqs", "0.25.0", A100_80, 256),
        ("max_num_batched_tokens", "0.25.0", A100_80, 2048),
        ("max_num_seqs", "0.25.0", L4, 256),
        ("max_num_batched_tokens", "0.25.0", L4, 2048),
        # CPU: confirmed by the 0.32.0 capture (knobs.txt: 128 and 2048 by default)
        ("max_num_seqs", "0.32.0", CPU, 128),
        ("max_num_batched_tokens", "0.32.0", CPU, 2048),
        ("max_num_seqs", "0.32.0", Hardware(device="cpu", world_size=2), 256),
        ("max_num_batched_tokens", "0.32.0", Hardware(device="cpu", usage="llm_class"), 4096),
        (
            "max_num_batched_tokens",
            "0.25.0",
            Hardware(device="gpu", gpu_memory_gib=80, usage="llm_class"),
            16384,
        ),
        # V0
        ("max_num_seqs", "0.6.3", H200, 256),
        ("max_num_batched_tokens", "0.6.3", Hardware(device="gpu", max_model_len=8192), 8192),
        ("max_num_batched_tokens", "0.6.3", Hardware(device="gpu", max_model_len=1024), 2048),
        ("max_num_batched_tokens", "0.6.3", Hardware(device="gpu", enable_chunked_prefill=True), 2048),
        ("enable_chunked_prefill", "0.7.3", L4, False),
        ("enable_chunked_prefill", "0.10.0", L4, True),
        ("enable_prefix_caching", "0.6.0", L4, False),
        ("enable_prefix_caching", "0.32.0", L4, True),
        # gpu_memory_utilization: 0.9 for most of history, 0.92 confirmed from 0.25
        ("gpu_memory_utilization", "0.6.4", L4, 0.9),
        ("gpu_memory_utilization", "0.25.0", H200, 0.92),
        ("gpu_memory_utilization", "0.32.0", CPU, 0.92),
        # block size: CPU 128 (0.32 capture), GPU 16
        ("block_size", "0.32.0", CPU, 128),
        ("block_size", "0.25.0", H200, 16),
        ("tensor_parallel_size", "0.25.0", H200, 1),
        ("kv_cache_dtype", "0.25.0", H200, "auto"),
        # asynchronous scheduling: on by default from 0.14.0, never on the CPU backend
        ("async_scheduling", "0.13.0", H200, False),
        ("async_scheduling", "0.25.0", H200, True),
        ("async_scheduling", "0.32.0", CPU, False),
    ],
)
def test_defaults_by_version_and_hardware(knob: str, version: str, hw: Hardware, expected: object) -> None:
    p = default_for(knob, version, hw)
    assert p.source == "default"
    assert p.value == expected
    assert p.detail


def test_defaults_follow_vllms_post_processing() -> None:
    # without chunked prefill the budget is at least max_model_len (V1, other GPUs: 2048)
    hw = Hardware(device="gpu", gpu_memory_gib=24, max_model_len=32768, enable_chunked_prefill=False)
    assert default_for("max_num_batched_tokens", "0.25.0", hw).value == 32768
    # the budget is capped at max_num_seqs * max_model_len, and max_num_seqs at the budget
    tiny = Hardware(device="gpu", gpu_memory_gib=24, max_model_len=4)
    assert default_for("max_num_batched_tokens", "0.25.0", tiny).value == 256 * 4
    assert default_for("max_num_seqs", "0.25.0", tiny).value == 256


def test_unknown_version_uses_the_newest_rules_and_says_so() -> None:
    p = default_for("gpu_memory_utilization", None, L4)
    assert p.value == 0.92
    assert "version unknown" in p.detail


def test_uncertain_boundary_is_flagged_in_the_detail() -> None:
    p = default_for("gpu_memory_utilization", "0.15.1", L4)
    assert "UNVERIFIED" in p.detail


def test_unknown_knob_default_raises() -> None:
    with pytest.raises(KeyError):
        default_for("no_such_knob", "0.25.0")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.32.0", (0, 32, 0)),
        ("v0.10.1.1", (0, 10, 1)),
        ("0.8.5.post1", (0, 8, 5)),
        ("0.11.0rc2.dev1+g1", (0, 11, 0)),
    ],
)
def test_parse_version(text: str, expected: tuple[int, int, int]) -> None:
    assert vllm_defaults.parse_version(text) == expected


def test_parse_version_garbage_is_none() -> None:
    assert vllm_defaults.parse_version("nightly") is None
    assert vllm_defaults.parse_version("") is None


def test_installed_vllm_engineargs_defaults_are_preferred(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM itself cannot be installed in the dev venv, so a stand-in package named
    ``vllm`` with a dataclass ``EngineArgs`` is imported through the real import system."""
    pkg = tmp_path / "vllm"
    (pkg / "engine").mkdir(parents=True)
    (pkg / "__init__.py").write_text('__version__ = "0.25.0"\n')
    (pkg / "engine" / "__init__.py").write_text("")
    (pkg / "engine" / "arg_utils.py").write_text(
        textwrap.dedent(
            """
            from dataclasses import dataclass

            @dataclass
            class EngineArgs:
                block_size: int = 32
                max_num_seqs: int | None = None
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for mod in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, mod)
    vllm_defaults._installed_vllm.cache_clear()  # looked up once per process
    try:
        p = default_for("block_size", "0.25.0", H200)
        assert p.value == 32 and "installed vllm 0.25.0" in p.detail
        # another minor version: the table, not the installed package
        assert default_for("block_size", "0.32.0", H200).value == 16
        # a None field default is resolved at run time: the table's rule applies
        assert default_for("max_num_seqs", "0.25.0", H200).value == 1024
    finally:
        for mod in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
            del sys.modules[mod]
        vllm_defaults._installed_vllm.cache_clear()


# ---------------------------------------------------------------- step math


@pytest.mark.parametrize(
    ("step", "op", "amount"),
    [
        ("-25%", "mul", 0.75),
        ("+25%", "mul", 1.25),
        ("x2", "mul", 2.0),
        ("/2", "mul", 0.5),
        ("+0.05", "add", 0.05),
    ],
)
def test_parse_step(step: str, op: str, amount: float) -> None:
    s = parse_step(step)
    assert s.op == op and s.amount == pytest.approx(amount)


@pytest.mark.parametrize("bad", ["", "25", "x0", "%", "*-2", "x2%", "=", "++1"])
def test_parse_step_rejects_garbage(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_step(bad)


MML8K = Limits(max_model_len=8192, enable_chunked_prefill=True)


@pytest.mark.parametrize(
    ("knob", "current", "direction", "step", "hint", "limits", "expected"),
    [
        ("max_num_seqs", 256, "decrease", "-25%", None, None, 192),
        ("max_num_seqs", 256, "decrease", "-25%", 128, None, 128),
        ("max_num_seqs", 256, "decrease", "-25%", 300, None, 192),  # a hint above the step changes nothing
        ("max_num_seqs", 3, "decrease", "-25%", None, None, 2),  # rounded down, at least 1 lower
        ("max_num_seqs", 1, "decrease", "-25%", None, None, None),
        ("max_num_seqs", 2, "decrease", "-25%", 0.4, None, 1),  # never below 1
        ("max_num_seqs", 16, "increase", "+25%", None, None, 20),
        ("max_num_seqs", 3, "increase", "+25%", None, None, 4),  # rounded up, at least 1 higher
        ("max_num_seqs", 4096, "increase", "x2", None, None, None),
        ("max_num_batched_tokens", 16384, "decrease", "/2", None, None, 8192),
        ("max_num_batched_tokens", 2048, "decrease", "/2", None, None, None),  # floor 2048
        ("max_num_batched_tokens", 3000, "decrease", "/2", None, None, 2048),
        ("max_num_batched_tokens", 8192, "increase", "x2", None, MML8K, 16384),
        ("max_num_batched_tokens", 16384, "increase", "x2", None, MML8K, None),  # cap max(8192, 16384)
        ("max_num_batched_tokens", 8192, "increase", "x2", None, Limits(max_model_len=32768), 16384),
        ("max_num_batched_tokens", 16384, "increase", "x2", None, Limits(max_model_len=32768), 32768),
        # without chunked prefill the budget cannot go below max_model_len
        (
            "max_num_batched_tokens",
            16384,
            "decrease",
            "/2",
            None,
            Limits(max_model_len=16384, enable_chunked_prefill=False),
            None,
        ),
        # never below max_num_seqs
        ("max_num_batched_tokens", 8192, "decrease", "/2", None, Limits(max_num_seqs=6000), 6000),
        ("gpu_memory_utilization", 0.9, "increase", "+0.05", None, None, 0.95),
        ("gpu_memory_utilization", 0.92, "increase", "+0.05", None, None, 0.95),
        ("gpu_memory_utilization", 0.95, "increase", "+0.05", None, None, None),
        ("gpu_memory_utilization", 0.2, "increase", "+0.05", None, None, 0.25),
        ("gpu_memory_utilization", 0.9, "decrease", "-0.05", None, None, 0.85),
        ("mm_processor_cache_gb", 4, "set", "=0", None, None, 0.0),
        ("mm_processor_cache_gb", 0, "set", "=0", None, None, None),
        ("mm_processor_cache_type", "lru", "set", "=shm", None, None, "shm"),
        ("mm_processor_cache_type", "shm", "set", "=shm", None, None, None),
        ("api_server_count", 1, "increase", "x2", None, None, 2),
        ("enable_prefix_caching", False, "enable", "", None, None, True),
        ("enable_prefix_caching", True, "enable", "", None, None, None),
        ("enable_prefix_caching", True, "set", "=false", None, None, False),
        ("replicas", 2, "increase", "+1", None, None, 3),
    ],
)
def test_propose_table(
    knob: str,
    current: object,
    direction: str,
    step: str,
    hint: float | None,
    limits: Limits | None,
    expected: object,
) -> None:
    assert propose(knob, current, direction, step, bound_hint=hint, limits=limits) == expected


@pytest.mark.parametrize(
    ("current", "limits", "step", "direction", "expected"),
    [
        (1, Limits(host_gpus=8, num_attention_heads=32), "x2", "increase", 2),
        (2, Limits(host_gpus=8, num_attention_heads=40), "x2", "increase", 4),
        (4, Limits(host_gpus=8, num_attention_heads=20), "x2", "increase", 5),  # 8 does not divide 20
        (4, Limits(host_gpus=4, num_attention_heads=32), "x2", "increase", None),  # no more GPUs
        (1, Limits(host_gpus=8, pipeline_parallel_size=4), "x2", "increase", 2),
        (2, Limits(host_gpus=8, pipeline_parallel_size=4), "x2", "increase", None),  # 4*4 > 8
        (1, Limits(host_gpus=None), "x2", "increase", None),  # GPU count unknown: never grow
        (1, Limits(host_gpus=8), "x2", "increase", 2),  # heads unknown: powers of two
        (2, Limits(host_gpus=8), "+1", "increase", 4),
        (8, Limits(num_attention_heads=40), "/2", "decrease", 4),
        (1, Limits(), "/2", "decrease", None),
    ],
)
def test_propose_tensor_parallel(
    current: int, limits: Limits, step: str, direction: str, expected: int | None
) -> None:
    assert propose("tensor_parallel_size", current, direction, step, limits=limits) == expected


def test_propose_rejects_bad_requests() -> None:
    with pytest.raises(ValueError):
        propose("max_num_seqs", 256, "decrease", "+25%")  # step against the direction
    with pytest.raises(ValueError):
        propose("max_num_seqs", 256, "sideways", "-25%")
    with pytest.raises(ValueError):
        propose("mm_processor_cache_type", "lru", "set", "=tmpfs")
    with pytest.raises(KeyError):
        propose("no_such_knob", 1, "increase", "x2")
    with pytest.raises(ValueError):
        propose("max_num_seqs", "many", "decrease", "-25%")


def test_propose_unknown_current_cannot_move() -> None:
    assert propose("max_num_seqs", None, "decrease", "-25%") is None


@pytest.mark.parametrize(
    ("knob", "value", "flag"),
    [
        ("max_num_seqs", 128, "--max-num-seqs 128"),
        ("gpu_memory_utilization", 0.95, "--gpu-memory-utilization 0.95"),
        ("mm_processor_cache_gb", 0.0, "--mm-processor-cache-gb 0"),
        ("mm_processor_cache_type", "shm", "--mm-processor-cache-type shm"),
        ("enable_prefix_caching", True, "--enable-prefix-caching"),
        ("enable_prefix_caching", False, "--no-enable-prefix-caching"),
        ("tensor_parallel_size", 2, "--tensor-parallel-size 2"),
    ],
)
def test_format_flag(knob: str, value: object, flag: str) -> None:
    assert format_flag(knob, value) == flag


def test_format_flag_replicas_is_a_sentence() -> None:
    assert "add a replica behind the load balancer" in format_flag("replicas", 3)


# ---------------------------------------------------------------- applicability


def _info(**values: object) -> EngineInfo:
    return EngineInfo({k: Provenanced(v, "cmdline") for k, v in values.items()})


@pytest.mark.parametrize(
    ("knob", "direction", "info", "gpus", "ok", "why"),
    [
        ("gpu_memory_utilization", "increase", _info(gpu_memory_utilization=0.9), 1, True, ""),
        (
            "gpu_memory_utilization",
            "increase",
            _info(gpu_memory_utilization=0.2, kv_cache_memory_bytes=6442450944),
            1,
            False,
            "kv_cache_memory_bytes",
        ),
        (
            "gpu_memory_utilization",
            "increase",
            _info(gpu_memory_utilization=0.9, num_gpu_blocks_override=1000),
            1,
            False,
            "num_gpu_blocks_override",
        ),
        ("gpu_memory_utilization", "increase", _info(gpu_memory_utilization=0.95), 1, False, "already"),
        ("gpu_memory_utilization", "increase", _info(device="cpu"), None, False, "CPU"),
        ("tensor_parallel_size", "increase", _info(tensor_parallel_size=1), 2, True, ""),
        (
            "tensor_parallel_size",
            "increase",
            _info(tensor_parallel_size=2, pipeline_parallel_size=2),
            4,
            False,
            "4 GPU",
        ),
        ("tensor_parallel_size", "increase", _info(tensor_parallel_size=1), None, False, "unknown"),
        ("tensor_parallel_size", "increase", _info(tensor_parallel_size=1, gpu_count=8), None, True, ""),
        ("tensor_parallel_size", "increase", _info(device="cpu"), 8, False, "CPU"),
        ("max_num_seqs", "decrease", _info(max_num_seqs=1), None, False, "lower bound"),
        ("max_num_seqs", "decrease", _info(max_num_seqs=16, device="cpu"), None, True, ""),
        (
            "max_num_batched_tokens",
            "decrease",
            _info(max_num_batched_tokens=2048),
            None,
            False,
            "lower bound",
        ),
        ("enable_prefix_caching", "enable", _info(enable_prefix_caching=True), None, False, "already"),
        ("replicas", "increase", _info(), None, True, ""),
        ("no_such_knob", "increase", _info(), None, False, "unknown knob"),
    ],
)
def test_applicable(
    knob: str, direction: str, info: EngineInfo, gpus: int | None, ok: bool, why: str
) -> None:
    got, reason = applicable(knob, direction, info, gpus)
    assert got is ok
    assert why in reason


# --------------------------------------------------------------------------------------
# issue 31: the flags per vLLM version (checked in the released wheels' arg_utils.py)


@pytest.mark.parametrize(
    ("name", "absent", "present"),
    [
        ("long_prefill_token_threshold", None, "0.11.0"),
        ("long_prefill_token_threshold_adaptive", "0.30.0", "0.31.0"),
        ("max_num_active_seqs", "0.30.0", "0.31.0"),
        ("watermark", "0.23.0", "0.24.0"),
        ("max_num_queued_reqs", "0.28.0", "0.29.0"),
        ("max_num_queued_tokens", "0.28.0", "0.29.0"),
        ("enforce_eager", None, "0.11.0"),
        ("max_cudagraph_capture_size", "0.11.0", "0.12.0"),
        ("kv_cache_dtype", None, "0.11.0"),
        ("num_speculative_tokens", "0.21.0", "0.22.0"),
        ("swap_space", "0.18.0", "0.17.0"),
    ],
)
def test_a_knob_exists_only_in_the_versions_that_have_its_flag(
    name: str, absent: str | None, present: str
) -> None:
    k = knobs.KNOBS[name]
    assert k.exists_in(present)
    assert k.exists_in(present + ".post1")
    if absent is not None:
        assert not k.exists_in(absent)


def test_an_unknown_version_is_the_newest_a_removed_knob_is_gone_there() -> None:
    assert not knobs.KNOBS["swap_space"].exists_in(None)
    assert knobs.KNOBS["max_num_active_seqs"].exists_in(None)
    assert knobs.KNOBS["max_num_seqs"].exists_in(None)


def _engine(**vals: object) -> EngineInfo:
    return EngineInfo({k: Provenanced(v, "cmdline", "test") for k, v in vals.items()})


def test_a_knob_the_running_version_lacks_is_never_applicable() -> None:
    ok, why = applicable("max_num_active_seqs", "decrease", _engine(vllm_version="0.30.0"))
    assert not ok and "0.31.0" in why and "--max-num-active-seqs" in why
    assert applicable("max_num_active_seqs", "decrease", _engine(vllm_version="0.31.0"))[0]
    ok, why = applicable("swap_space", "increase", _engine(vllm_version="0.25.0"))
    assert not ok and "removed in 0.18.0" in why
    assert applicable("swap_space", "increase", _engine(vllm_version="0.17.0"))[0]
    assert not applicable("watermark", "increase", _engine(vllm_version="0.23.0"))[0]
    assert applicable("watermark", "increase", _engine(vllm_version="0.24.0"))[0]


def test_device_memory_utilization_is_gpu_memory_utilization() -> None:
    k = knobs.knob_for_flag("--device-memory-utilization")
    assert k is knobs.KNOBS["gpu_memory_utilization"]
    assert knobs.knob_for_flag("--device_memory_utilization") is k
    assert knobs.knob_for_flag("--spec-tokens") is knobs.KNOBS["num_speculative_tokens"]


def test_the_new_levers_have_defaults() -> None:
    assert default_for("long_prefill_token_threshold", "0.32.0").value == 0
    assert default_for("watermark", "0.32.0").value == 0.0
    assert default_for("enforce_eager", "0.32.0").value is False
    assert default_for("max_num_active_seqs", "0.32.0").value is None


def test_a_long_prefill_threshold_of_no_limit_decreases_to_the_rules_value() -> None:
    """0 is no limit: a decrease sets one, at the bound the rule gives, at most max_model_len;
    from a set value it goes down to the bound; it never goes to 0 (that would lift the limit)."""
    lim = Limits(max_model_len=4096)
    assert propose("long_prefill_token_threshold", 0, "decrease", "-1", bound_hint=256, limits=lim) == 256
    assert propose("long_prefill_token_threshold", 0, "decrease", "-1", bound_hint=9000, limits=lim) == 4096
    assert propose("long_prefill_token_threshold", 0, "decrease", "-1", limits=lim) is None
    assert propose("long_prefill_token_threshold", 0, "increase", "+1", bound_hint=256, limits=lim) is None
    assert propose("long_prefill_token_threshold", 2048, "decrease", "-1", bound_hint=512, limits=lim) == 512
    assert propose("long_prefill_token_threshold", 1, "decrease", "-1", bound_hint=0, limits=lim) is None
    assert applicable("long_prefill_token_threshold", "decrease", _engine(long_prefill_token_threshold=0))[0]


def test_watermark_and_active_seqs_steps() -> None:
    """watermark from 0 up to the rule's bound (at most 0.5); max_num_active_seqs unset is
    max_num_seqs (vLLM's admission limit then), and it never goes above it."""
    assert propose("watermark", 0.0, "increase", "+0.01", bound_hint=0.03) == 0.03
    assert propose("watermark", 0.0, "increase", "+0.01", bound_hint=0.9) == 0.5
    assert propose("watermark", 0.5, "increase", "+0.01", bound_hint=0.5) is None
    lim = Limits(max_num_seqs=16)
    assert propose("max_num_active_seqs", None, "decrease", "-1", bound_hint=6, limits=lim) == 6
    assert propose("max_num_active_seqs", None, "decrease", "-1", bound_hint=6) is None  # cap unknown
    assert propose("max_num_active_seqs", 6, "increase", "x2", limits=lim) == 12
    assert propose("max_num_active_seqs", 12, "increase", "x2", limits=lim) == 16
