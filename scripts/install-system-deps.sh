#!/usr/bin/env bash
# Debian's prometheus (with promtool) and prometheus-alertmanager, for the integration tests, and
# chromium, for the browser test of the daemon's page (tests/outputs/test_page_browser.py: headless).
# The tests start these binaries themselves (tests/promstack.py: their own ports, configs and data
# dirs; tests/browser.py: a fresh profile) and need nothing else of the packages. A host that
# already has them keeps them as they are, services included (people who run this project often
# run them). Only a package this script installs has its service kept from starting (policy-rc.d,
# while it installs) and disabled after, so that nothing new is left enabled or running.
# Usage: scripts/install-system-deps.sh
set -euo pipefail
PKGS=(prometheus prometheus-alertmanager chromium)

have_all() {
  command -v prometheus >/dev/null && command -v promtool >/dev/null \
    && command -v prometheus-alertmanager >/dev/null && command -v chromium >/dev/null
}

if have_all; then
  echo "system deps: present ($(prometheus --version 2>&1 | head -1)); the host's services are left as they are"
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install-system-deps: need root to apt-get install ${PKGS[*]}" >&2
  exit 1
fi
missing=()
for p in "${PKGS[@]}"; do
  if [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true) != "install ok installed" ]]; then
    missing+=("$p")
  fi
done
policy=/usr/sbin/policy-rc.d
made_policy=
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\n# vllm-advisor: no service starts while packages install\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  made_policy=1
fi
trap '[[ -n $made_policy ]] && rm -f "$policy"' EXIT
apt-get update -q
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${PKGS[@]}"

# Disable the services of the packages this run installed (never one the host had before).
for s in "${missing[@]}"; do
  if command -v systemctl >/dev/null; then
    if [[ -d /run/systemd/system ]]; then
      systemctl disable --now "$s.service" >/dev/null 2>&1 || true
    else
      systemctl disable "$s.service" >/dev/null 2>&1 || true
    fi
  fi
  if command -v deb-systemd-helper >/dev/null; then
    deb-systemd-helper disable "$s.service" >/dev/null 2>&1 || true
  fi
  if [[ -x /etc/init.d/$s ]] && command -v update-rc.d >/dev/null; then
    update-rc.d "$s" disable >/dev/null 2>&1 || true
  fi
done
have_all
echo "system deps: $(prometheus --version 2>&1 | head -1); alertmanager, promtool and chromium present; services of what was installed (${missing[*]:-none}) disabled"
