"""Model facts (MoE or dense, experts, multimodal encoder, encoder-DP support) from a model's
config.json and from the architecture vLLM logs; the signals the parallelism rules read."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.core import defaults as vllm_defaults
from advisor.core import knobs
from advisor.core import steps as knob_steps
from advisor.core.model import EngineInfo, LogEvent, Provenanced
from advisor.derive.signals import Context, Values
from advisor.derive.window import Window
from advisor.sources import engine
from advisor.sources import modelfacts as modelfacts_src
from tests.paths import FIXTURES

MODELS = FIXTURES / "engine" / "models"


def _facts(name: str) -> dict[str, object]:
    read = modelfacts_src.read_model_config(MODELS / name)
    assert read is not None
    data, path = read
    assert path.endswith("config.json")
    return {k: p.value for k, p in modelfacts_src.model_facts(data).items()}


@pytest.mark.parametrize(
    ("name", "moe", "experts", "per_token", "encoder", "encoder_dp"),
    [
        (
            "qwen3-moe-tiny",
            True,
            8,
            2,
            False,
            False,
        ),  # built by scripts/build_tiny_model.py --shape qwen3-moe
        ("mixtral", True, 8, 2, False, False),  # num_local_experts
        ("deepseek-v3", True, 256, 8, False, False),  # n_routed_experts
        ("qwen2-vl", False, None, None, True, True),  # vision_config; a supports_encoder_tp_data family
        ("llama-dense", False, None, None, False, False),
    ],
)
def test_model_config_facts(
    name: str, moe: bool, experts: int | None, per_token: int | None, encoder: bool, encoder_dp: bool
) -> None:
    f = _facts(name)
    assert f["model_is_moe"] is moe
    assert f.get("model_num_experts") == experts
    assert f.get("model_active_experts") == per_token
    assert f["model_has_mm_encoder"] is encoder
    assert f["mm_encoder_tp_data_supported"] is encoder_dp
    assert isinstance(f["num_attention_heads"], int)


def test_nested_text_config_of_a_multimodal_moe() -> None:
    cfg = {
        "architectures": ["Llama4ForConditionalGeneration"],
        "text_config": {"num_local_experts": 16, "num_experts_per_tok": 1, "num_attention_heads": 40},
        "vision_config": {"hidden_size": 1408},
    }
    f = {k: p.value for k, p in modelfacts_src.model_facts(cfg).items()}
    assert (f["model_is_moe"], f["model_num_experts"], f["num_attention_heads"]) == (True, 16, 40)
    assert f["model_has_mm_encoder"] is True and f["mm_encoder_tp_data_supported"] is True


def test_architecture_name_only() -> None:
    moe = modelfacts_src.model_facts(None, "Qwen3MoeForCausalLM", source="log")
    assert moe["model_is_moe"].value is True and "model_num_experts" not in moe
    dense = modelfacts_src.model_facts(None, "LlamaForCausalLM", source="log")
    assert dense["model_is_moe"].value is False and "model_has_mm_encoder" not in dense
    vl = modelfacts_src.model_facts(None, "Qwen2_5_VLForConditionalGeneration", source="log")
    assert vl["model_has_mm_encoder"].value is True and vl["mm_encoder_tp_data_supported"].value is True
    # a multimodal family vLLM does not run encoder-DP for
    assert (
        modelfacts_src.model_facts(None, "LlavaForConditionalGeneration")[
            "mm_encoder_tp_data_supported"
        ].value
        is False
    )


def test_unreadable_model_configs_are_no_error(tmp_path: Path) -> None:
    assert modelfacts_src.read_model_config(None) is None
    assert modelfacts_src.read_model_config("Qwen/Qwen3-30B-A3B") is None  # a hub id
    (tmp_path / "config.json").write_text("[1, 2]")
    assert modelfacts_src.read_model_config(tmp_path) is None
    (tmp_path / "config.json").write_text("{not json")
    assert modelfacts_src.read_model_config(tmp_path) is None


def _arch_event() -> LogEvent:
    line = "INFO 11-30 13:01:51 [model.py:733] Resolved architecture: Qwen3MoeForCausalLM"
    return LogEvent(
        t=None, kind="startup", line=line, fields={"fact": "architecture", "value": "Qwen3MoeForCausalLM"}
    )


def test_resolve_reads_a_local_model_named_on_the_command_line() -> None:
    model = MODELS / "qwen3-moe-tiny"
    info = engine.resolve(argv=["vllm", "serve", str(model), "-tp", "2"], events=[_arch_event()])
    assert info.get("model_num_experts") == 8 and info.get("model_is_moe") is True
    assert info.values["model_num_experts"].source == "config"
    assert info.get("architecture") == "Qwen3MoeForCausalLM"


def test_resolve_does_not_read_a_path_only_seen_in_a_log() -> None:
    """A replay on another machine must not depend on that machine's files: the model path in
    a log is not opened; the logged architecture gives what it can."""
    ev = LogEvent(t=None, kind="startup", line="", fields={"fact": "model", "value": str(MODELS / "mixtral")})
    info = engine.resolve(events=[ev, _arch_event()])
    assert info.get("model_is_moe") is True and info.get("model_num_experts") is None
    assert info.values["model_is_moe"].source == "log"


def test_signals_of_the_parallelism_rules() -> None:
    info = EngineInfo.merge(
        [
            {
                "model_is_moe": Provenanced(True, "config"),
                "model_num_experts": Provenanced(128, "config"),
                "tensor_parallel_size": Provenanced(2, "cmdline"),
                "data_parallel_size": Provenanced(2, "cmdline"),
                "enable_expert_parallel": Provenanced(False, "default"),
                "mm_encoder_tp_mode": Provenanced("data", "cmdline"),
            }
        ]
    )
    v = Values(Context(Window(), info))
    assert v["model_is_moe"] == 1.0 and v["model_num_experts"] == 128
    assert v["tensor_x_data_parallel_size"] == 4 and v["enable_expert_parallel"] == 0.0
    assert v["mm_encoder_tp_data"] == 1.0
    assert v["model_has_mm_encoder"] is None  # unknown stays unknown


def test_media_threads_knob_is_an_environment_variable() -> None:
    k = knobs.get_knob("media_loading_thread_count")
    assert k.flag is None and k.env == "VLLM_MEDIA_LOADING_THREAD_COUNT"
    assert vllm_defaults.default_for("media_loading_thread_count", "0.32.0").value == 8
    assert knob_steps.propose("media_loading_thread_count", 8, "increase", "x2") == 16
    assert knobs.format_flag(k, 16).startswith("VLLM_MEDIA_LOADING_THREAD_COUNT=16")
    assert knobs.knob_for_flag("-ep") is knobs.KNOBS["enable_expert_parallel"]
    assert knobs.knob_for_flag("-asc") is knobs.KNOBS["api_server_count"]
    assert knobs.knob_for_flag("--mm-encoder-tp-mode") is knobs.KNOBS["mm_encoder_tp_mode"]
