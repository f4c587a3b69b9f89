"""What the window's evidence is worth: an engine that stopped counting tokens while requests
wait (a stall), and readings that could not be trusted (bad samples). Neither is ever "healthy".

A stalled engine is itself a finding: its counters stop while its queue stays, so every rate
reads zero and a window holding only the stall looks calm to rules that ask for throughput,
preemptions or latency. :func:`stall` finds it from what the pages show over time; the
diagnosis says so instead of advising a knob (no knob makes a hung engine run).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from advisor.core import names
from advisor.derive.window import Window

# No token counted for this long while requests wait or run: stalled. A decode step takes
# milliseconds and a prefill chunk well under a second on a GPU; the slowest CPU server of the
# tests counts tokens every few seconds under load.
STALL_AFTER_S = 30.0


@dataclass(frozen=True)
class Stall:
    """Tokens stopped: since ``since`` (the first page showing the final counts), for ``seconds``,
    with ``waiting`` and ``running`` requests on the latest page."""

    seconds: float
    since: float
    waiting: float | None
    running: float | None

    def describe(self) -> str:
        who = ", ".join(
            f"{v:.0f} {what}"
            for v, what in ((self.waiting, "waiting"), (self.running, "running"))
            if v is not None
        )
        return (
            f"engine stalled: {who}, 0 tokens/s for {self.seconds:.0f} s (no prompt or generation token "
            "counted): no knob makes an engine that does not run faster; check its log, its process and "
            "the device (or whether the page is a stale copy)"
        )


def stall(window: Window, seconds: float | None = None) -> Stall | None:
    """How long the prompt and generation token counters have stood still (up to the latest
    page) while every page showed requests waiting or running; None when the counters or the
    request gauges are unknown. A stall of 0 s: tokens are counted, or nothing is asked."""
    gen = window.totals(names.GENERATION_TOKENS, seconds)
    if not gen or gen[-1][1] is None:
        return None
    prompt = dict(window.totals(names.PROMPT_TOKENS, seconds))
    waiting = dict(window.totals(names.NUM_WAITING, seconds))
    running = dict(window.totals(names.NUM_RUNNING, seconds))
    t_last, g_last = gen[-1]
    w_last, r_last = waiting.get(t_last), running.get(t_last)
    if w_last is None and r_last is None:
        return None

    def busy(t: float) -> bool:
        return (waiting.get(t) or 0.0) + (running.get(t) or 0.0) > 0

    since = t_last
    if busy(t_last):
        p_last = prompt.get(t_last)
        for t, g in reversed(gen[:-1]):
            if g != g_last or prompt.get(t) != p_last or not busy(t):
                break
            since = t
    return Stall(t_last - since, since, w_last, r_last)


def sleeping(window: Window) -> str | None:
    """Why the engine is neither stalled nor idle: it sleeps (vLLM's sleep mode, 0.29+:
    ``vllm:engine_sleep_state{sleep_state="awake"}`` 0 on the latest page; level 1 offloaded its
    weights to CPU memory, level 2 discarded them). None when awake or unknown (no series)."""
    latest = window.latest
    if latest is None:
        return None
    awake = latest.values(names.ENGINE_SLEEP_STATE, {names.SLEEP_STATE_LABEL: "awake"})
    if not awake or min(awake) >= 0.5:
        return None
    asleep = sum(1 for v in awake if v < 0.5)
    level2 = any(
        v >= 0.5 for v in latest.values(names.ENGINE_SLEEP_STATE, {names.SLEEP_STATE_LABEL: "discard_all"})
    )
    level1 = any(
        v >= 0.5
        for v in latest.values(names.ENGINE_SLEEP_STATE, {names.SLEEP_STATE_LABEL: "weights_offloaded"})
    )
    level = (
        "sleep level 2: weights discarded"
        if level2
        else "sleep level 1: weights offloaded to CPU memory"
        if level1
        else "asleep"
    )
    who = "the engine is" if len(awake) == 1 else f"{asleep} of {len(awake)} engines are"
    return (
        f"sleeping: {who} asleep (vllm:engine_sleep_state, {level}): neither stalled nor idle; "
        "no advice until it wakes (POST /wake_up)"
    )


def stalled(window: Window, seconds: float | None = None, after_s: float = STALL_AFTER_S) -> Stall | None:
    """The stall, when it has lasted ``after_s`` or longer."""
    s = stall(window, seconds)
    return s if s is not None and s.seconds >= after_s else None


def unreadable(window: Window, seconds: float | None = None) -> str | None:
    """What of the window's pages could not be read or trusted, in one line; None when all was."""
    bad = window.bad_samples(seconds)
    if not bad:
        return None
    kinds = Counter(w.kind for w in bad)
    first = bad[0]
    what = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in kinds.most_common())
    fam = f"{first.family}: " if first.family else ""
    return f"{len(bad)} readings in the window could not be trusted ({what}; first: {fam}{first.reason})"
