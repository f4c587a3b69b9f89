"""Which decode steps vLLM runs as one full CUDA graph, and what the others cost.

Pure: it reads the engine's facts and knobs and returns values.

Since 0.11.0 vLLM's default CUDA-graph mode on a GPU is ``FULL_AND_PIECEWISE``: a step that only
decodes (every request one token) replays one captured graph of the whole forward pass; any
other step runs the model's compiled pieces as graphs with attention between them, launched from
Python layer by layer (``PIECEWISE``), or eagerly when it has more tokens than the largest
capture size. The full decode graphs are captured only for the capture sizes up to
``max_num_seqs`` (``CudagraphDispatcher.initialize_cudagraph_keys`` in vLLM 0.25): a decode
batch larger than the largest of them is padded to the next size, has no full graph there, and
runs piecewise. With the default sizes (1, 2, 4, then every 8th to 256, every 16th to
``min(2 x max_num_seqs, 512)``), a cap of 18 decodes 17 or 18 requests piecewise, a cap of 27
25-27, a cap of 36 33-36; a cap of 16, 24, 32 or 48 never does.

Measured on H100 and H200 leases (vLLM 0.25, an 8B model; docs/prediction.md, "Full CUDA graphs
for decode batches"): a piecewise decode step took 1.15-2.1x the time of a full-graph one at
the same batch (the median of nine runs, 1.35), more where the host's CPU is slower, since a
piecewise step is bound by the Python that launches it. That is :data:`PIECEWISE_PRIOR`, used
where a recording has no steps of one of the two kinds to fit it from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from advisor.core.defaults import FULL_DECODE_GRAPHS_SINCE, parse_version
from advisor.core.model import EngineInfo

PIECEWISE_PRIOR = 0.35
"""A decode step run piecewise takes this share of a full-graph decode step more (the median of
the measured runs; 0.15-1.1 by lease): the typical cost, where a recording cannot show its own."""

FULL_DECODE_MODES = ("FULL_AND_PIECEWISE", "FULL_DECODE_ONLY", "FULL")
"""vLLM's CUDAGraphMode values whose decode steps replay a full graph."""

_MAX_DEFAULT = 512  # the default capture sizes stop here (min(2 x max_num_seqs, 512))


def default_sizes(max_num_seqs: int, budget: int, max_size: int | None = None) -> list[int]:
    """vLLM's default CUDA-graph capture sizes (``VllmConfig._set_cudagraph_sizes``, 0.25): 1,
    2, 4, every 8th below 256, every 16th from 256, up to ``max_size`` (default
    ``min(2 x max_num_seqs, 512)``) and never past the token budget, which is itself captured
    where it fits."""
    top = max_size if max_size is not None else min(2 * max_num_seqs, _MAX_DEFAULT)
    top = min(top, budget)
    sizes = [s for s in (1, 2, 4) if s <= top]
    if top >= 8:
        sizes += range(8, min(top + 1, 256), 8)
    if top >= 256:
        sizes += range(256, top + 1, 16)
    if budget <= top:
        sizes.append(budget)
    return sorted(set(sizes))


@dataclass(frozen=True)
class Graphs:
    """How the engine captures CUDA graphs: ``sizes`` the capture sizes where they were set by
    hand (None: vLLM's default list, which follows the cap and the budget), ``max_size`` the
    largest capture size where it was set by hand (None: the default)."""

    sizes: tuple[int, ...] | None = None
    max_size: int | None = None

    def full_limit(self, max_num_seqs: float | None, budget: float | None) -> int | None:
        """The largest decode batch replayed as a full graph under this cap and budget (a larger
        one runs piecewise); None where it cannot be told (no cap or budget known)."""
        if max_num_seqs is None or budget is None or max_num_seqs < 1 or budget < 1:
            return None
        cap, b = int(max_num_seqs), int(budget)
        sizes = (
            [s for s in self.sizes if s <= b]
            if self.sizes is not None
            else default_sizes(cap, b, self.max_size)
        )
        full = [s for s in sizes if s <= cap]
        return max(full) if full else 0


_SIZES_RE = re.compile(r"^\s*\d+(\s*,\s*\d+)*\s*$")


def graphs_of(engine: EngineInfo, max_num_seqs: float | None, budget: float | None) -> Graphs | None:
    """The engine's CUDA-graph capture, where its decode steps can replay a full graph: a GPU
    engine, not eager, in a full-decode mode (its start-up line's ``cudagraph_mode``; unlogged,
    vLLM's default since 0.11.0). None otherwise: every decode step is then alike (the CPU
    backend, ``--enforce-eager``, ``PIECEWISE`` or ``NONE``, a release before 0.11.0), or not
    modelled (speculative decoding, whose decode steps carry several tokens a request)."""
    device = str(engine.get("device") or "").lower()
    if device in ("", "cpu") or engine.get("enforce_eager") is True:
        return None
    if engine.get("num_speculative_tokens"):
        return None  # a decode step of 1 + k tokens a request: its graphs are not keyed by requests here
    mode = engine.get("cudagraph_mode")
    if mode is not None:
        if str(mode).upper() not in FULL_DECODE_MODES:
            return None
    else:
        version = parse_version(engine.get("vllm_version"))
        if version is not None and version < FULL_DECODE_GRAPHS_SINCE:
            return None
    max_size = engine.get("max_cudagraph_capture_size")
    max_size = int(max_size) if isinstance(max_size, int | float) and not isinstance(max_size, bool) else None
    logged = engine.get("cudagraph_capture_sizes")
    sizes = None
    if isinstance(logged, str) and _SIZES_RE.match(logged):
        listed = tuple(sorted({int(x) for x in logged.split(",")}))
        # the default list for today's cap and budget: it follows them; any other was set by hand
        if (
            max_num_seqs is None
            or budget is None
            or list(listed) != default_sizes(int(max_num_seqs), int(budget))
        ):
            sizes = listed
        max_size = None  # the list says it (and a default list's largest follows the cap)
    elif max_size is not None and max_num_seqs is not None and budget is not None:
        default = default_sizes(int(max_num_seqs), int(budget))
        if default and max_size == default[-1]:
            max_size = None  # the default's own largest size follows the cap: not a setting
    return Graphs(sizes, max_size)
