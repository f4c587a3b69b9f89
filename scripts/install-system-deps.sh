#!/usr/bin/env bash
# Debian's prometheus (with promtool) and prometheus-alertmanager, for the integration tests.
# The tests start these binaries themselves and need nothing else of the packages: the packages'
# own services are kept from starting while they install (policy-rc.d) and are disabled after,
# so nothing is left enabled or running on the host.   Usage: scripts/install-system-deps.sh
set -euo pipefail
PKGS=(prometheus prometheus-alertmanager)
SERVICES=(prometheus prometheus-alertmanager)

have_all() { command -v prometheus >/dev/null && command -v promtool >/dev/null && command -v prometheus-alertmanager >/dev/null; }

if ! have_all; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-system-deps: need root to apt-get install ${PKGS[*]}" >&2
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
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${PKGS[@]}"
fi

# Disable (and stop) the packages' services, whether this run installed them or an earlier one did.
for s in "${SERVICES[@]}"; do
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
  # a daemon the package started anyway (no policy-rc.d honoured): the packaged one runs as
  # user "prometheus"; the tests' own instances run as the caller, so they are left alone
  pkill -u prometheus -x "$s" >/dev/null 2>&1 || true
done
have_all
echo "system deps: $(prometheus --version 2>&1 | head -1); alertmanager and promtool present; services disabled"
