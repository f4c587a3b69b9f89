"""The levers past the seeds (issue 31), each on a real recording: fp8 KV as the KV rules' last
memory step, ...

The H200 recordings under validation/runs are real (vLLM 0.25.0 on one H200). Where a test needs a
state the rig did not record (a device with no memory left), it rewrites ONE line of the real log
(the start-up's "Initial free memory"), said per test, so the fact flows through the real parser.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

from prometheus_client import generate_latest

from advisor.core.config import Config
from advisor.derive.signals import CATALOG, promql
from advisor.diagnose.advise import Diagnosis
from advisor.diagnose.ruleset import load_rules
from advisor.drive import inputs
from advisor.outputs.exporter import make_registry
from advisor.outputs.state import ExportState
from tests.paths import REPO

RUNS = REPO / "validation" / "runs"
KV_BIND = RUNS / "kv-seqs-bind-r2.before"  # 8 GiB KV fixed in bytes, preempting at the cap


def _session_with_log(tmp_path: Path, run: Path, old: str, new: str, name: str = "run") -> Path:
    """A copy of a recorded session whose log has one line rewritten (``old`` -> ``new``)."""
    dst = tmp_path / name
    shutil.copytree(run, dst)
    log = dst / "vllm.log.gz"
    text = gzip.decompress(log.read_bytes()).decode()
    assert text.count(old) == 1, old
    log.write_bytes(gzip.compress(text.replace(old, new).encode()))
    return dst


def _diagnose(session: Path) -> Diagnosis:
    _, d = inputs.from_session(session, Config(), load_rules())
    assert d is not None
    return d


# ------------------------------------------------------------------ fp8 KV (issue 31, item 6)
def test_fp8_kv_when_the_device_has_no_memory_left(tmp_path: Path) -> None:
    """kv-seqs-bind-r2 (H200, 8 GiB KV fixed in bytes, preempting at the cap), its log saying the
    device started with 22 GiB free instead of 139.29 (the rewritten line): 13.49 GiB of weights,
    8 GiB of KV and the CUDA graphs leave under 1 GiB, so the KV cache cannot grow: the advice is
    the fp8 KV cache, with its numerics warning, not a larger KV size (withdrawn before: an
    inconclusive diagnosis)."""
    full = _session_with_log(
        tmp_path, KV_BIND, "Initial free memory 139.29 GiB", "Initial free memory 22.0 GiB"
    )
    d = _diagnose(full)
    assert d.status == "advice", d.reason
    rec = d.recommendation
    assert rec is not None and rec.rule == "kv-preemption-seqs-bind"
    assert (rec.knob, rec.current, rec.proposed) == ("kv_cache_dtype", "auto", "fp8")
    assert rec.change == "--kv-cache-dtype auto -> fp8"
    assert "change of numerics" in rec.note and "accuracy" in rec.note
    assert "kv_cache_memory_bytes: the device has" in rec.note and "memory cannot grow" in rec.note
    # the same recording as measured (118 GiB free): more KV memory, as before
    d0 = _diagnose(KV_BIND)
    assert d0.recommendation is not None and d0.recommendation.knob == "kv_cache_memory_bytes"


def test_fp8_kv_never_where_the_cache_is_already_fp8(tmp_path: Path) -> None:
    """The same full device, the engine already on an fp8 KV cache (the log's engine config line
    says kv_cache_dtype=fp8_e4m3, rewritten): the rule goes on past fp8 to its next knob that
    can move (one H200: no GPU to add, so the cap comes down to what the KV cache holds)."""
    full = _session_with_log(
        tmp_path, KV_BIND, "Initial free memory 139.29 GiB", "Initial free memory 22.0 GiB", "full"
    )
    fp8 = _session_with_log(tmp_path, full, "kv_cache_dtype=auto,", "kv_cache_dtype=fp8_e4m3,", "fp8")
    d = _diagnose(fp8)
    rec = d.recommendation
    assert rec is not None and rec.knob != "kv_cache_dtype", rec.change
    assert "kv_cache_dtype: the KV cache is already fp8_e4m3" in rec.note


def test_the_free_memory_and_the_kv_dtype_are_signals_with_their_twins() -> None:
    """On the real recording: the free memory its log gives (117.61 GiB) and its KV dtype (auto,
    the cache_config_info label) are signals; the exporter publishes the fact the free memory's
    PromQL twin reads."""
    d = _diagnose(KV_BIND)
    assert d.signals["gpu_memory_free_bytes"] == 117.61 * 2**30
    assert d.signals["kv_cache_fp8"] == 0.0
    text = generate_latest(
        make_registry(lambda: ExportState(diagnosis=d, up=True, rules=tuple(load_rules())))
    ).decode()
    line = next(ln for ln in text.splitlines() if 'fact="gpu_memory_free_bytes"' in ln)
    assert float(line.rsplit(" ", 1)[1]) == 117.61 * 2**30
    assert 'fact="gpu_memory_free_bytes"' in (promql(CATALOG["gpu_memory_free_bytes"]) or "")
    assert 'cache_dtype=~"fp8.*"' in (promql(CATALOG["kv_cache_fp8"]) or "")
