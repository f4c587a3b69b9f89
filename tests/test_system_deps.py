"""`make test` installs Debian's prometheus and prometheus-alertmanager for their binaries only
(scripts/install-system-deps.sh): the packages' own services are left neither enabled nor running."""

from __future__ import annotations

import pwd
import shutil
import subprocess
from pathlib import Path

import pytest

SERVICES = ("prometheus", "prometheus-alertmanager")


def test_the_binaries_the_tests_need_are_installed() -> None:
    for exe in ("prometheus", "promtool", "prometheus-alertmanager", "amtool"):
        assert shutil.which(exe), f"{exe} missing: run `make system-deps`"


@pytest.mark.parametrize("service", SERVICES)
def test_the_packages_service_is_not_enabled(service: str) -> None:
    # what enabling a unit creates, with or without a running systemd
    assert not Path(f"/etc/systemd/system/multi-user.target.wants/{service}.service").exists()
    if shutil.which("systemctl"):
        p = subprocess.run(["systemctl", "is-enabled", f"{service}.service"], capture_output=True, text=True)
        assert p.stdout.strip() != "enabled", p.stdout + p.stderr


@pytest.mark.parametrize("service", SERVICES)
def test_the_packages_daemon_is_not_running(service: str) -> None:
    """The packaged daemons run as user "prometheus"; the tests' own instances run as the caller."""
    try:
        pwd.getpwnam("prometheus")
    except KeyError:
        return  # no such user: no packaged daemon can run as it
    p = subprocess.run(["pgrep", "-u", "prometheus", "-x", service], capture_output=True, text=True)
    assert p.returncode == 1, f"the package's {service} runs: pid {p.stdout.strip()}"
