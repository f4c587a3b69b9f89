"""The replica prediction against the committed two-GPU runs (validation/runs/: real vLLM 0.25 on
H200s, replayed; no GPU here): one engine vs data parallelism 2, the table of docs/autoscaling.md."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from typing import Any

import pytest

from tests.paths import REPO


@pytest.fixture(scope="module")
def check() -> Any:
    sys.path.insert(0, str(REPO / "validation"))
    spec = importlib.util.spec_from_file_location("validation_replicas", REPO / "validation" / "replicas.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_two_replicas_move_as_measured(check: Any) -> None:
    """What the count rests on holds on the measured pair: two replicas (predicted and measured)
    nearly double throughput and cut TTFT p95 by more than half; the step time under the batch
    (TPOT p95) is predicted within 20%. (The size of the TTFT miss is stated in the doc.)"""
    ev = check.evaluate()
    rows = {r["label"]: r for r in ev["rows"]}
    one, pred, meas = rows["Output tokens/s (both replicas)"]["bench"]
    assert pred / one > 1.5 and meas / one > 1.5
    one, pred, meas = rows["TTFT p95"]["bench"]
    assert pred / one < 0.5 and meas / one < 0.5
    _, pred, meas = rows["TPOT p95"]["bench"]
    assert abs(pred / meas - 1) <= 0.20, (pred, meas)
    # the load split over two engines no longer fills either KV cache: nothing queues
    p = ev["prediction"]
    assert (p.binding_before, p.binding_after) == ("kv_cache", "load")
    # and the advisor asks for two replicas for the one-engine run
    assert ev["sizing"].needed == 2


def test_the_doc_table_is_current() -> None:
    r = subprocess.run(
        [sys.executable, str(REPO / "validation" / "replicas.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
