"""What the fuzz tests share (hypothesis): settings per target, text mutations, page mutations.

Every target runs a fixed number of derandomized examples in `make test` (CI sees the same ones
every time); ``FUZZ_EXAMPLES=5000`` runs that many per target instead and ``FUZZ_RANDOM=1`` draws
new ones, for a long run. Each example has a deadline: a hang check (inputs are bounded in size;
none of these takes a tenth of it on the shared 2-core machine), not a speed target.
"""

from __future__ import annotations

import contextlib
import os
import re
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from advisor.core import names


def fuzz(examples: int, deadline_s: float = 10.0) -> Any:
    """Hypothesis settings for one target: ``examples`` inputs unless FUZZ_EXAMPLES says."""
    return settings(
        max_examples=int(os.environ.get("FUZZ_EXAMPLES", examples)),
        deadline=timedelta(seconds=deadline_s),
        derandomize=not os.environ.get("FUZZ_RANDOM"),
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.function_scoped_fixture,
            HealthCheck.data_too_large,
        ],
        print_blob=True,
    )


@st.composite
def mutated(draw: Any, seeds: list[str], spaces: int = 5000) -> str:
    """A seed text with a few random cuts, insertions, duplications and character swaps."""
    text = draw(st.sampled_from(seeds))
    for _ in range(draw(st.integers(0, 4))):
        if not text:
            text = draw(st.text(max_size=20))
            continue
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 40)))
        op = draw(st.sampled_from(["cut", "insert", "dup", "swap", "spaces"]))
        if op == "cut":
            text = text[:i] + text[j:]
        elif op == "insert":
            text = text[:i] + draw(st.text(max_size=30)) + text[i:]
        elif op == "dup":
            text = text[:j] + text[i:j] * draw(st.integers(1, 50)) + text[j:]
        elif op == "swap":
            text = text[:i] + draw(st.sampled_from(list(":{}[],=&*!|>-'\"\n\t #%0.9eE"))) + text[i + 1 :]
        else:
            text = text[:i] + " " * draw(st.integers(1, spaces)) + text[i:]
    return text


# values a hostile page puts where a number goes
BAD_VALUES = ["NaN", "+Inf", "-Inf", "-1", "-0.5", "1e19", "9" * 400, "1e400", "0"]
NON_FINITE = {"NaN", "+Inf", "-Inf", "1e400"}
_SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^\n]*\})? (\S+)$")


def read_sample_lines(text: str) -> list[int]:
    """Indices of the lines of ``text`` that are samples of a family the advisor reads."""
    out = []
    for i, line in enumerate(text.split("\n")):
        m = _SAMPLE_RE.match(line)
        if m and m.group(1) in names.READ_SPELLINGS:
            out.append(i)
    return out


@st.composite
def page_mutation(draw: Any, text: str) -> tuple[str, bool]:
    """A real page with its readings made hostile: values replaced (NaN, infinities, negative,
    huge), a series printed twice with another value, a line deleted, a histogram's samples moved
    above its `# HELP` line, a counter scaled for one page; or, rarely, characters edited and the
    page cut. Returns (page, whether a non-finite value was put into a family the advisor reads
    and left readable)."""
    lines = text.split("\n")
    targets = read_sample_lines(text)
    poisoned = structural = False
    for _ in range(draw(st.integers(1, 4))):
        op = draw(
            st.sampled_from(["value", "value", "value", "dup", "delete", "scale", "move", "chars", "cut"])
        )
        if op in ("value", "dup", "delete", "scale") and targets:
            i = draw(st.sampled_from(targets))
            head, _, old = lines[i].rpartition(" ")
            if op == "value":
                lines[i] = f"{head} {draw(st.sampled_from(BAD_VALUES))}"
            elif op == "dup":
                lines.insert(i + 1, f"{head} {draw(st.sampled_from(['1', '0', '12345', old]))}")
                targets = read_sample_lines("\n".join(lines))
            elif op == "delete":
                lines[i] = ""
            else:
                with contextlib.suppress(ValueError):
                    lines[i] = f"{head} {float(old) * draw(st.sampled_from([1000.0, 0.5, 0.0])):g}"
        elif op == "move":
            fam = draw(st.sampled_from([names.TTFT, names.E2E, names.ITL, names.QUEUE_TIME]))
            block = [ln for ln in lines if ln.startswith(fam + "_")]
            rest = [
                ln for ln in lines if not ln.startswith(fam + "_") and not ln.startswith(f"# TYPE {fam} ")
            ]
            at = next((k for k, ln in enumerate(rest) if ln.startswith(f"# HELP {fam} ")), None)
            if block and at is not None:
                lines = rest[:at] + block + rest[at:]
                targets = read_sample_lines("\n".join(lines))
        elif op == "chars":
            structural = True
            body = "\n".join(lines)
            for _ in range(draw(st.integers(1, 3))):
                pos = draw(st.integers(0, max(0, len(body) - 1)))
                body = body[:pos] + draw(st.sampled_from(list('{}",=\n #\\ a1.e+_'))) + body[pos + 1 :]
            lines = body.split("\n")
            targets = read_sample_lines(body)
        else:
            structural = True
            body = "\n".join(lines)
            body = body[: draw(st.integers(0, len(body)))]
            lines = body.split("\n")
            targets = read_sample_lines(body)
    out = "\n".join(lines)
    if not structural:
        poisoned = any(out.split("\n")[i].rpartition(" ")[2] in NON_FINITE for i in read_sample_lines(out))
    return out, poisoned and not structural
