"""The committed sessions diagnosed once per test process: the cross-session tests of the rules
(each rule fires on its own session and on no other) read them from here."""

from __future__ import annotations

from functools import cache

import pytest

from advisor.core.config import Config
from advisor.diagnose.advise import Diagnosis
from advisor.diagnose.ruleset import load_rules
from advisor.drive.inputs import from_session
from tests.paths import FIXTURES

SESSIONS = FIXTURES / "sessions"
RULES = load_rules()
ALL = sorted(p.name for p in SESSIONS.iterdir() if p.is_dir() and not p.name.startswith("."))
# the tests that read every session's diagnosis share one worker, and with it the cache below:
# each session diagnosed once in the suite (~13 s of CPU), not once per worker and test file
ACROSS = pytest.mark.xdist_group("sessions")


@cache
def diagnose(name: str) -> Diagnosis:
    """The diagnosis of a committed session at its end, with the default config."""
    _, d = from_session(SESSIONS / name, Config(), RULES)
    assert d is not None
    return d


def states(d: Diagnosis) -> dict[str, str]:
    """Rule id -> its state (firing, pending, inactive, ...)."""
    return {f["rule"]: f["state"] for f in d.findings}
