"""The device's total and free memory (issue 13): probed where vLLM runs (NVML, else
nvidia-smi), recorded in sessions, and used to say how much more KV memory fits.

No GPU here: NVML and nvidia-smi are stand-ins with their documented shapes (said per test)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from advisor.core import steps as knob_steps
from advisor.core.config import Config
from advisor.core.model import EngineInfo, Provenanced
from advisor.diagnose.ruleset import load_rules
from advisor.drive import inputs
from advisor.predict import scoring
from advisor.sources import host as host_src
from advisor.sources.session import record
from tests.paths import REPO
from tests.sources.test_session import FIXTURE_PAGE, T0, FakeHttp, FakeTime

GiB = 2**30


class FakeNvml:
    """pynvml's calls as nvidia-ml-py documents them (a stand-in: no GPU here)."""

    def __init__(self, total: int, free: int, fail: bool = False, others: tuple[int, ...] = ()) -> None:
        self.total, self.free, self.fail = total, free, fail
        self.frees = (free, *others)  # free memory of each GPU (the same total)

    def nvmlInit(self) -> None:
        if self.fail:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.frees)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return b"NVIDIA H200"

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        free = self.frees[h]
        return SimpleNamespace(total=self.total, free=free, used=self.total - free)


def test_nvidia_smi_with_free_memory() -> None:
    """The documented csv,noheader shape of --query-gpu=name,memory.total,memory.free."""
    got = host_src.parse_nvidia_smi("NVIDIA H200, 143771 MiB, 98304 MiB\n")
    assert got["gpu_memory_gib"].value == 140.4
    assert got["gpu_memory_free_gib"].value == 96.0
    # the old two-column shape still parses, without free memory
    assert "gpu_memory_free_gib" not in host_src.parse_nvidia_smi("NVIDIA H200, 143771 MiB\n")


def test_the_probe_counts_the_gpus_nobody_serves_from() -> None:
    """Parallelism advice counts GPUs with (nearly) all memory free, not every GPU of the host."""
    smi = host_src.parse_nvidia_smi(
        "NVIDIA H200, 143771 MiB, 8000 MiB\nNVIDIA H200, 143771 MiB, 143000 MiB\n"
        "NVIDIA H200, 143771 MiB, 60000 MiB\n"
    )
    assert (smi["gpu_count"].value, smi["gpu_idle_count"].value) == (3, 1)
    nvml = host_src.host_facts(
        run=lambda c: "", nvml=FakeNvml(141 * GiB, 9 * GiB, others=(140 * GiB, 139 * GiB))
    )
    assert (nvml["gpu_count"].value, nvml["gpu_idle_count"].value) == (3, 2)


def test_nvml_first_then_nvidia_smi() -> None:
    facts = host_src.host_facts(run=lambda c: "", nvml=FakeNvml(141 * GiB, 100 * GiB))
    assert (facts["gpu_count"].value, facts["gpu_memory_gib"].value, facts["gpu_memory_free_gib"].value) == (
        1,
        141.0,
        100.0,
    )
    # NVML without a driver: nvidia-smi answers, asked for the free memory too
    asked: list[list[str]] = []

    def smi_run(cmd: list[str]) -> str:
        asked.append(cmd)
        return "NVIDIA H200, 143771 MiB, 1024 MiB\n"

    smi = host_src.host_facts(run=smi_run, nvml=FakeNvml(0, 0, fail=True))
    assert smi["gpu_memory_free_gib"].value == 1.0
    assert "--query-gpu=name,memory.total,memory.free" in asked[0]


def test_a_local_recording_keeps_the_device_memory(tmp_path: Path) -> None:
    ft = FakeTime()
    ft.now = T0
    probe = lambda: host_src.nvml_facts(FakeNvml(141 * GiB, 30 * GiB))  # noqa: E731
    record(
        "http://127.0.0.1:8000",
        tmp_path / "sess",
        duration_s=0,
        clock=ft.clock,
        sleep=ft.sleep,
        http=FakeHttp([FIXTURE_PAGE.read_text()], version=None),
        host_probe=probe,
    )
    facts = json.loads((tmp_path / "sess" / "engine.json").read_text())["facts"]
    assert facts["gpu_memory_gib"]["value"] == 141.0
    assert facts["gpu_memory_free_gib"]["value"] == 30.0
    # a remote server's GPU is not this host's: nothing probed
    record(
        "http://vllm.example:8000",
        tmp_path / "remote",
        duration_s=0,
        clock=ft.clock,
        sleep=ft.sleep,
        http=FakeHttp([FIXTURE_PAGE.read_text()], version=None),
        host_probe=probe,
    )
    remote = json.loads((tmp_path / "remote" / "engine.json").read_text()).get("facts", {})
    assert "gpu_memory_free_gib" not in remote


def test_more_kv_memory_only_as_far_as_the_device_has_free() -> None:
    """The kv-seqs-bind-r2 H200 recording (8 GiB KV, preempting) replayed with a free-memory
    fact: with 3 GiB free the advice stops at 10 GiB; with none free it is withdrawn."""

    run = REPO / "validation" / "runs" / "kv-seqs-bind-r2.before"
    adv, d = inputs.from_session(run, Config(), load_rules())
    assert d is not None and d.recommendation is not None
    assert d.recommendation.knob == "kv_cache_memory_bytes"
    limits = knob_steps.Limits.from_engine(adv.engine)

    def refine(free_gib: float) -> scoring.Refined | None:
        eng = EngineInfo(
            {**adv.engine.values, "gpu_memory_free_gib": Provenanced(free_gib, "default", "test")}
        )
        return scoring.refine(
            scoring.Observed.of(adv.intake, adv.window, Config().window_s), eng, d.signals,
            Config().targets, "kv_cache_memory_bytes", "increase", 8 * GiB, 12 * GiB, limits,
        )  # fmt: skip

    some = refine(3.0)
    assert some is not None and some.withdrawn is None
    assert some.value is not None and 8 * GiB < some.value <= 11 * GiB
    none = refine(0.5)
    assert none is not None and none.withdrawn is not None and "does not fit" in none.withdrawn


def test_a_knob_the_model_cannot_predict_here_keeps_the_rules_step() -> None:
    """gpu_memory_utilization where the KV bytes per token are unknown (no fixed KV size): the
    model cannot say, so the rule's own step stands (no prediction, nothing withdrawn)."""

    run = REPO / "validation" / "runs" / "kv-capacity.before"
    adv, d = inputs.from_session(run, Config(), load_rules())
    assert d is not None
    values = {**EngineInfo(adv.engine.values).values}
    values.pop("kv_cache_memory_bytes", None)
    values.pop("available_kv_cache_memory_gib", None)  # its log says the KV memory: not known here
    eng = EngineInfo(
        {
            **values,
            "gpu_memory_utilization": Provenanced(0.5, "cmdline"),
            "gpu_memory_gib": Provenanced(140.0, "default"),
        }
    )
    got = scoring.refine(
        scoring.Observed.of(adv.intake, adv.window, Config().window_s), eng, d.signals,
        Config().targets, "gpu_memory_utilization", "increase", 0.5, 0.55,
        knob_steps.Limits.from_engine(eng),
    )  # fmt: skip
    assert got is None
