#!/usr/bin/env bash
# Debian's podman (builds and runs the image without a daemon), runc (its OCI runtime here: crun
# 1.8 refuses hosts with cgroup controllers on both v1 and v2, "cgroups in hybrid mode not
# supported") and debootstrap (the local Debian base image), for scripts/build-image.sh and
# tests/test_image.py. Binaries only: the podman package's units (its API socket and service,
# auto-update, restart) are kept from starting while it installs (policy-rc.d) and are disabled
# after, so nothing is left enabled or running on the host.   Usage: scripts/install-image-deps.sh
set -euo pipefail
PKGS=(podman runc debootstrap)
UNITS=(podman.socket podman.service podman-auto-update.timer podman-auto-update.service podman-restart.service)

have_all() { command -v podman >/dev/null && command -v runc >/dev/null && command -v debootstrap >/dev/null; }

if ! have_all; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-image-deps: need root to apt-get install ${PKGS[*]}" >&2
    exit 1
  fi
  if ! command -v apt-get >/dev/null; then
    echo "install-image-deps: no apt-get: install ${PKGS[*]} with this system's package manager" >&2
    exit 1
  fi
  policy=/usr/sbin/policy-rc.d
  made_policy=
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\n# vllm-advisor: no service starts while packages install\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    made_policy=1
  fi
  trap '[[ -n $made_policy ]] && rm -f "$policy"' EXIT
  t0=$(date +%s)
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${PKGS[@]}"
  echo "install-image-deps: ${PKGS[*]} installed in $(($(date +%s) - t0)) s"
fi

# Disable the package's units, whether this run installed it or an earlier one did.
for u in "${UNITS[@]}"; do
  if command -v systemctl >/dev/null; then
    if [[ -d /run/systemd/system ]]; then
      systemctl disable --now "$u" >/dev/null 2>&1 || true
    else
      systemctl disable "$u" >/dev/null 2>&1 || true
    fi
  fi
  if command -v deb-systemd-helper >/dev/null; then
    deb-systemd-helper disable "$u" >/dev/null 2>&1 || true
  fi
done
have_all
echo "image deps: $(podman --version), $(runc --version | head -1), debootstrap $(dpkg-query -W -f='${Version}' debootstrap 2>/dev/null || echo present); podman's units disabled"
