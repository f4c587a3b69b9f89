"""Desired replicas from the performance model (advisor/predict/replicas.py), on recordings of
real servers (vLLM 0.32 on CPU, vLLM 0.25 on an H200; replayed, no GPU here), and the
hysteresis on an injected clock."""

from __future__ import annotations

import functools
import itertools
from typing import Any

import pytest

from advisor.core.config import Config
from advisor.diagnose.ruleset import load_rules
from advisor.drive import predict as predict_cmd
from advisor.predict import perfmodel as pm
from advisor.predict import replicas as rp
from tests.paths import REPO

SESSIONS = REPO / "tests" / "fixtures" / "sessions"
H200_A = REPO / "advisor" / "data" / "sessions" / "h200-A_s256"
TARGETS = {"ttft_p95_seconds": 2.0, "itl_p95_seconds": 0.1}


@functools.cache
def _fitted(path: str) -> tuple[pm.Model, dict[str, float | None]]:
    return predict_cmd.from_source(Config(), load_rules(), session_dir=path)


def _size(path: Any, **kw: Any) -> rp.Sizing:
    model, values = _fitted(str(path))
    s = rp.size(model, values, kw.pop("targets", TARGETS), **kw)
    assert s is not None
    return s


def test_a_queue_at_capacity_needs_more_replicas_the_more_load_each_carries() -> None:
    """cpu-moe-queue: a cap of 4 with 32 clients, TTFT p95 ~39 s. One server's load needs
    several replicas; the same server as one of two (twice the load in all) needs about twice
    as many; tighter targets or more headroom need no fewer."""
    one = _size(SESSIONS / "cpu-moe-queue", current=1)
    two = _size(SESSIONS / "cpu-moe-queue", current=2)
    assert one.meets_targets and one.needed > 1
    assert 2 * one.needed - 2 <= two.needed <= 2 * one.needed + 1
    # the predicted latencies at the count, under the observed load, meet the targets
    at = one.at(one.needed)
    assert at is not None and at.ttft_p95 is not None and at.ttft_p95 <= TARGETS["ttft_p95_seconds"]
    # one fewer does not, with the headroom: the reason names the breach
    assert f"{one.needed - 1}: TTFT p95" in one.reason
    tight = _size(SESSIONS / "cpu-moe-queue", current=1, targets={**TARGETS, "ttft_p95_seconds": 1.0})
    more = _size(SESSIONS / "cpu-moe-queue", current=1, headroom=1.5)
    none = _size(SESSIONS / "cpu-moe-queue", current=1, headroom=1.0)
    assert tight.needed >= one.needed and more.needed >= one.needed >= none.needed


def test_the_curve_falls_with_more_replicas_and_reaches_past_the_count() -> None:
    s = _size(H200_A, current=1, upto=12)
    assert len(s.curve) >= 13
    ttft = [p.ttft_p95 for p in s.curve]
    assert all(a is not None and b is not None and b <= a + 1e-9 for a, b in itertools.pairwise(ttft))
    # one replica under the observed load is the measured TTFT p95 (an unchanged count predicts
    # what was measured)
    model, _ = _fitted(str(H200_A))
    assert s.curve[0].ttft_p95 == pytest.approx(model.measured["ttft_seconds_p95"])


def test_a_server_within_its_targets_needs_one() -> None:
    """cpu-healthy: 8 clients that fit, TTFT p95 just under 2 s, no queue."""
    s = _size(SESSIONS / "cpu-healthy", current=1)
    assert (s.needed, s.meets_targets, s.knob_first) == (1, True, False)
    # as one of three servers carrying the same load each, the three are needed (a fourth at
    # most, for the headroom): on a CPU a bigger batch makes every step longer, so one server
    # cannot take the three servers' load and keep TTFT p95 under 2 s
    assert 3 <= _size(SESSIONS / "cpu-healthy", current=3).needed <= 4


def test_replicas_that_cannot_meet_the_targets_stop_where_nothing_queues() -> None:
    """h200-C_b16384: ~6k-token prompts, TTFT p95 ~4 s from prefill, not from a queue: no count
    meets a 2 s target; the count is where the batch holds the load (one), not the most."""
    s = _size(SESSIONS / "h200-C_b16384", current=1)
    assert not s.meets_targets
    assert s.needed <= 2
    assert "would not help" in s.reason


def test_a_count_past_where_nothing_queues_says_so() -> None:
    """cpu-load-steps (a cap of 4, a queue): the TTFT target a hair above the curve's floor is met
    only far past the count at which nothing queues, where more replicas only shrink each batch;
    the reason says where nothing queues and what is predicted there, so that a count resting
    on the flat of the curve reads as one (docs/autoscaling.md, Limits). A target met before
    that count says nothing of it."""
    path = SESSIONS / "cpu-load-steps"
    model, values = _fitted(str(path))
    q = values.get("queue_share_of_ttft")

    def at(r: int) -> pm.Prediction:
        return rp.predict_at(model, r, 1, rp.HEADROOM, q)

    free = next(r for r in range(1, 65) if at(r).binding_after == "load")
    floor = at(64).predicted["ttft_seconds_p95"]
    assert floor is not None
    far = _size(path, current=1, targets={**TARGETS, "ttft_p95_seconds": floor * 1.0005})
    assert far.meets_targets and far.needed > free + 1, far.reason
    assert f"nothing queues from {free} on" in far.reason and f"({free}: TTFT p95" in far.reason
    near = _size(path, current=1)
    assert near.needed <= free and "nothing queues" not in near.reason, near.reason


def test_a_knob_predicted_enough_comes_first() -> None:
    """The diagnosis advises a per-server knob whose prediction meets both targets: the count
    stays at the current one. A prediction that misses a target, or the replicas pseudo-knob,
    leaves the model's count."""
    base = _size(SESSIONS / "cpu-moe-queue", current=2)
    enough = {"predicted": {"ttft_seconds_p95": 1.5, "itl_seconds_p95": 0.05}}
    short = {"predicted": {"ttft_seconds_p95": 2.5, "itl_seconds_p95": 0.05}}
    unknown = {"predicted": {"ttft_seconds_p95": 1.5, "itl_seconds_p95": None}}
    first = _size(SESSIONS / "cpu-moe-queue", current=2, advised=("max_num_seqs", enough))
    assert (first.needed, first.knob_first) == (2, True)
    assert "max_num_seqs" in first.reason
    for advised in (("max_num_seqs", short), ("max_num_seqs", unknown), ("replicas", enough)):
        s = _size(SESSIONS / "cpu-moe-queue", current=2, advised=advised)
        assert (s.needed, s.knob_first) == (base.needed, False), advised


def test_no_target_means_no_count() -> None:
    model, values = _fitted(str(SESSIONS / "cpu-moe-queue"))
    assert rp.size(model, values, {}) is None


def test_combine_takes_the_busiest_server_and_the_worst_latency() -> None:
    a = rp.Sizing(
        2, 3, True, False, "a", (rp.Point(1, 9.0, 0.05), rp.Point(2, 4.0, 0.05), rp.Point(3, 1.0, 0.04))
    )
    b = rp.Sizing(2, 2, True, False, "b", (rp.Point(1, 8.0, 0.07), rp.Point(2, 1.5, 0.06)))
    c = rp.combine([a, b])
    assert c is not None and (c.needed, c.current) == (3, 2)
    assert c.curve == (rp.Point(1, 9.0, 0.07), rp.Point(2, 4.0, 0.06))
    assert rp.combine([]) is None


def _s(needed: int, current: int = 2) -> rp.Sizing:
    return rp.Sizing(
        current, needed, True, False, f"{needed}", tuple(rp.Point(r, 1.0 / r, 0.05) for r in range(1, 9))
    )


def test_hold_scales_out_at_once_and_in_only_after_the_hold() -> None:
    h = rp.Hold(hold_s=300.0)
    out = [(t, h.update(t, _s(n))) for t, n in ((0, 2), (15, 4), (30, 2), (200, 2), (314, 2), (316, 2))]
    got = [(t, d.desired if d else None, d.held if d else None) for t, d in out]
    assert got == [
        (0, 2, False),
        (15, 4, False),
        (30, 4, True),
        (200, 4, True),
        (314, 4, True),
        (316, 2, False),
    ]
    d = out[-1][1]
    assert (
        d is not None and d.at_desired == rp.Point(2, 0.5, 0.05) and d.at_one_fewer == rp.Point(1, 1.0, 0.05)
    )


def test_hold_does_not_flap_on_noise() -> None:
    """A need that alternates 3, 2, 3, 2 every cycle (noise at the edge) holds 3."""
    h = rp.Hold(hold_s=60.0)
    got = [h.update(t * 5.0, _s(3 if t % 2 == 0 else 2)) for t in range(40)]
    assert {d.desired for d in got if d is not None} == {3}


def test_hold_keeps_the_last_count_while_unknown_then_has_none() -> None:
    h = rp.Hold(hold_s=60.0)
    assert h.update(0.0, None) is None
    assert h.update(10.0, _s(3)) is not None
    mid = h.update(50.0, None)
    assert mid is not None and mid.desired == 3
    assert h.update(71.0, None) is None  # nothing known for the whole hold: unknown, never a number
    assert h.upto == 0
