"""`make test` installs Debian's prometheus, prometheus-alertmanager and chromium for their binaries
only (scripts/install-system-deps.sh; chromium for the browser test of the daemon's page). A host that already runs those packages' services (people who
run this project often do) keeps them: the script stops and disables only what its own install
brought, and the tests run beside the host's services (tests/test_host_services.py).

The script is run with stand-ins for ``systemctl``, ``pkill``, ``apt-get`` and friends on PATH
that record their calls: a test must not install packages or touch the host's services."""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

from tests.paths import REPO

SCRIPT = REPO / "scripts" / "install-system-deps.sh"
TOOLS = ("systemctl", "pkill", "deb-systemd-helper", "update-rc.d", "apt-get")


def test_the_binaries_the_tests_need_are_installed() -> None:
    for exe in ("prometheus", "promtool", "prometheus-alertmanager", "amtool", "chromium"):
        assert shutil.which(exe), f"{exe} missing: run `make system-deps`"


def _stub_path(tmp: Path, binaries: bool) -> tuple[dict[str, str], Path]:
    """A PATH of recording stand-ins (and, with ``binaries``, the four binaries present)."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    calls = tmp / "calls"
    names = list(TOOLS) + (
        ["prometheus", "promtool", "prometheus-alertmanager", "chromium"] if binaries else []
    )
    for name in names:
        f = bin_dir / name
        f.write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\nexit 0\n')
        f.chmod(f.stat().st_mode | stat.S_IXUSR)
    for name in ("bash", "sh", "id", "rm", "printf", "chmod", "cat", "head", "echo"):
        real = shutil.which(name)
        if real and not (bin_dir / name).exists():
            (bin_dir / name).symlink_to(real)
    env = {"PATH": str(bin_dir), "HOME": str(tmp)}
    return env, calls


def test_a_host_that_already_has_the_packages_keeps_its_services_untouched(tmp_path: Path) -> None:
    env, calls = _stub_path(tmp_path, binaries=True)
    r = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    made = calls.read_text().splitlines() if calls.exists() else []
    touched = [c for c in made if c.split()[0] in TOOLS]
    assert touched == [], touched
