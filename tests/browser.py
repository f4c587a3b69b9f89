"""Debian's chromium, headless, driven through playwright (its Python package; it downloads no
browser here: ``executable_path`` is the system's chromium, installed by
scripts/install-system-deps.sh). A fresh profile per launch, and the flags that keep a browser
from reaching for the network on a machine that has none (background networking, component
updates, sync, QUIC).

:func:`open_page` loads a URL and keeps what a test checks besides the DOM: console messages,
page errors, dialogs (``alert()``: script ran) and every request the page made.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, sync_playwright

from tests.paths import REPO
from tests.promstack import free_port

T = TypeVar("T")

CHROMIUM = "/usr/bin/chromium"
FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
)
ARTIFACTS = REPO / "test-artifacts"  # git-ignored: the screenshots the browser tests take


@dataclass
class Loaded:
    page: Page
    console: list[tuple[str, str]] = field(default_factory=list)  # (type, text)
    errors: list[str] = field(default_factory=list)  # uncaught page errors
    dialogs: list[str] = field(default_factory=list)  # alert/confirm/prompt messages
    requests: list[str] = field(default_factory=list)  # every URL the page asked for

    def problems(self) -> list[str]:
        """Console errors and warnings, page errors and dialogs: none on a sound page."""
        bad = [f"console {t}: {m}" for t, m in self.console if t in ("error", "warning")]
        return bad + [f"page error: {x}" for x in self.errors] + [f"dialog: {x}" for x in self.dialogs]

    def elsewhere(self, origin: str) -> list[str]:
        """Requests to anywhere but ``origin`` (scheme://host:port)."""
        return [u for u in self.requests if not (u == origin or u.startswith(origin + "/"))]


@contextmanager
def chromium(width: int = 1280, height: int = 900) -> Iterator[Any]:
    """A headless chromium with a fresh profile (removed after)."""
    if not Path(CHROMIUM).exists():
        raise AssertionError(f"{CHROMIUM} missing: run `make system-deps` (Debian's chromium)")
    profile = tempfile.mkdtemp(prefix="advisor-chromium-")
    try:
        with sync_playwright() as p:
            ctx = p.chromium.launch_persistent_context(
                profile,
                executable_path=CHROMIUM,
                headless=True,
                args=list(FLAGS),
                viewport={"width": width, "height": height},
            )
            try:
                yield ctx
            finally:
                ctx.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def open_page(ctx: Any, url: str) -> Loaded:
    page = ctx.new_page()
    seen = Loaded(page)
    page.on("console", lambda m: seen.console.append((m.type, m.text)))
    page.on("pageerror", lambda exc: seen.errors.append(str(exc)))
    page.on("request", lambda r: seen.requests.append(r.url))

    def dialog(d: Any) -> None:
        seen.dialogs.append(d.message)
        d.dismiss()

    page.on("dialog", dialog)
    page.goto(url, wait_until="load")
    return seen


def read_when(page: Page, read: Callable[[Page], T | None], timeout_s: float) -> T | None:
    """``read(page)`` again every half second until it gives something (not None) or ``timeout_s``
    passes; None then. A page with ``<meta http-equiv="refresh">`` reloads itself every interval,
    and a read that meets that navigation fails ("execution context was destroyed", a reload
    ERR_ABORTED): such a read is simply taken again on the page that came. A test never reloads
    a self-refreshing page itself, which races the page's own refresh."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            got = read(page)
        except PlaywrightError:
            got = None
        if got is not None or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


def screenshot(page: Page, name: str, folder: Path = ARTIFACTS, height: int | None = None) -> Path:
    """A full-page PNG (or its top ``height`` pixels) under ``folder`` (by default test-artifacts/,
    git-ignored); returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    clip = None
    if height is not None:
        full = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
        clip = {"x": 0, "y": 0, "width": full[0], "height": min(height, full[1])}
    page.screenshot(path=str(path), full_page=True, clip=clip)
    return path


@contextmanager
def replaying(session: Path, work: Path, speed: float = 25.0, timeout_s: float = 90.0) -> Iterator[str]:
    """``vllm-advisor run --replay SESSION`` (this venv's console script) on a free loopback
    port with its own state dir; yields its base URL once the replay has finished (the daemon
    then holds the session's final state), and ends it with SIGTERM."""
    port = free_port()
    work.mkdir(parents=True, exist_ok=True)
    log = work / "advisor.log"
    exe = Path(sys.executable).parent / "vllm-advisor"
    argv = [str(exe), "run", "--replay", str(session), "--speed", str(speed)]
    argv += ["--listen", f"127.0.0.1:{port}", "--state-dir", str(work / "state"), "--run-seconds", "600"]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=work)
        try:
            deadline = time.monotonic() + timeout_s
            while "replay finished" not in log.read_text(errors="replace"):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        f"the replay did not finish: {log.read_text(errors='replace')[-2000:]}"
                    )
                time.sleep(0.2)
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
