"""The host the advisor runs on: the vLLM process listening on a port (psutil) and the GPUs
(NVML when ``nvidia-ml-py`` is installed, else ``nvidia-smi``): their count, total and free
memory, and how many are idle. Source "default", detail "host probe (...)".
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

import psutil

from advisor.core.model import Provenanced
from advisor.core.redact import redact_argv
from advisor.sources.cmdline import env_knob_assignments, from_cmdline, looks_like_vllm


def find_vllm_process(port: int | None = None) -> list[str] | None:
    """The (redacted) argv of the vLLM server on this host: the process listening on
    ``port`` when it can be seen and looks like vLLM, else a process whose command line
    looks like ``vllm serve`` / ``python -m vllm.entrypoints.openai.api_server`` /
    ``vllm.entrypoints.cli.main serve`` (one naming ``--port PORT`` preferred). None when
    nothing is found; processes we may not inspect are skipped, never an error. The knobs that
    are environment variables of the process (VLLM_MEDIA_LOADING_THREAD_COUNT) come first as
    ``NAME=value`` words, where its environment may be read; no other variable is kept."""

    def _cmdline(pid: int) -> list[str] | None:
        try:
            proc = psutil.Process(pid)
            cl = proc.cmdline()
        except (psutil.Error, OSError):
            return None
        try:
            env = env_knob_assignments(proc.environ())
        except (psutil.Error, OSError):
            env = []
        return [*env, *cl] if cl else cl

    if port is not None:
        try:
            conns = psutil.net_connections(kind="inet")
        except (psutil.Error, OSError):
            conns = []
        for c in conns:
            laddr = getattr(c, "laddr", None)
            if c.status == psutil.CONN_LISTEN and laddr and laddr.port == port and c.pid:
                cl = _cmdline(c.pid)
                if cl and looks_like_vllm(cl):
                    return redact_argv(cl)
    candidates: list[list[str]] = []
    me = os.getpid()
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        cl = _cmdline(proc.pid)
        if cl and looks_like_vllm(cl):
            candidates.append(cl)
    if not candidates:
        return None
    if port is not None:
        for cl in candidates:
            info = from_cmdline(cl, read_config=False)
            p = info.get("port")
            if p is not None and str(p.value) == str(port):
                return redact_argv(cl)
            if p is None and port == 8000:
                return redact_argv(cl)
        return None
    return redact_argv(candidates[0])


HOST_DETAIL = "host probe (nvidia-smi)"


def _gib(text: str) -> float | None:
    m = re.match(r"^([\d.]+)\s*(MiB|GiB|MB|GB)?$", text.strip())
    if not m:
        return None
    mem = float(m.group(1))
    unit = (m.group(2) or "MiB").lower()
    return round(mem / 1024 if unit in ("mib", "mb") else mem, 1)


def parse_nvidia_smi(text: str) -> dict[str, Provenanced]:
    """``nvidia-smi --query-gpu=name,memory.total,memory.free --format=csv,noheader`` output ->
    gpu_count, gpu_name, gpu_memory_gib and (where the column is there) gpu_memory_free_gib, of
    the first GPU. Empty on odd output."""
    rows = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 2 or not parts[0]:
            continue
        total = _gib(parts[1])
        if total is None:
            continue
        free = _gib(parts[2]) if len(parts) > 2 else None
        rows.append((parts[0], total, free))
    if not rows:
        return {}
    out = {
        "gpu_count": Provenanced(len(rows), "default", HOST_DETAIL),
        "gpu_name": Provenanced(rows[0][0], "default", HOST_DETAIL),
        "gpu_memory_gib": Provenanced(rows[0][1], "default", HOST_DETAIL),
    }
    if rows[0][2] is not None:
        out["gpu_memory_free_gib"] = Provenanced(rows[0][2], "default", HOST_DETAIL)
    if all(r[2] is not None for r in rows):
        idle = sum(1 for _, total, free in rows if _idle(total, free))
        out["gpu_idle_count"] = Provenanced(idle, "default", HOST_DETAIL)
    return out


IDLE_GPU_FREE_SHARE = 0.95  # a GPU with this share of its memory free runs no server


def _idle(total: float, free: float | None) -> bool:
    """A GPU nobody serves from: (nearly) all its memory free. Parallelism advice counts these,
    not every GPU of the host, since the others may hold other servers."""
    return free is not None and total > 0 and free >= IDLE_GPU_FREE_SHARE * total


NVML_DETAIL = "host probe (NVML)"


def nvml_facts(nvml: Any) -> dict[str, Provenanced]:
    """The same facts from NVML (the ``nvidia-ml-py`` package, imported as ``pynvml``): GPU count,
    and the first GPU's name, total and free memory. Empty when NVML cannot start (no driver)."""
    try:
        nvml.nvmlInit()
        try:
            count = int(nvml.nvmlDeviceGetCount())
            if count < 1:
                return {}
            h = nvml.nvmlDeviceGetHandleByIndex(0)
            name = nvml.nvmlDeviceGetName(h)
            mem = nvml.nvmlDeviceGetMemoryInfo(h)
            others = [
                nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(1, count)
            ]
        finally:
            nvml.nvmlShutdown()
    except Exception:  # NVMLError and friends: no facts, not a failure
        return {}
    if isinstance(name, bytes):
        name = name.decode(errors="replace")
    return {
        "gpu_count": Provenanced(count, "default", NVML_DETAIL),
        "gpu_name": Provenanced(str(name), "default", NVML_DETAIL),
        "gpu_memory_gib": Provenanced(round(mem.total / 2**30, 1), "default", NVML_DETAIL),
        "gpu_memory_free_gib": Provenanced(round(mem.free / 2**30, 1), "default", NVML_DETAIL),
        "gpu_idle_count": Provenanced(
            sum(1 for m in (mem, *others) if _idle(m.total, m.free)), "default", NVML_DETAIL
        ),
    }


def host_facts(run: Callable[[list[str]], str] | None = None, nvml: Any = None) -> dict[str, Provenanced]:
    """GPU count, name, total and free memory: from NVML where ``nvidia-ml-py`` is importable,
    else from nvidia-smi when it is present; ``{}`` when both are absent or fail (no GPU facts
    is not "no GPU": other accelerators exist)."""
    if nvml is None and run is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            nvml = None
    if nvml is not None:
        facts = nvml_facts(nvml)
        if facts or (run is None and shutil.which("nvidia-smi") is None):
            return facts
    cmd = ["nvidia-smi", "--query-gpu=name,memory.total,memory.free", "--format=csv,noheader"]
    if run is None:
        if shutil.which("nvidia-smi") is None:
            return {}

        def run(c: list[str]) -> str:
            return subprocess.run(c, capture_output=True, text=True, timeout=10, check=True).stdout

    try:
        return parse_nvidia_smi(run(cmd))
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}
