#!/usr/bin/env bash
# Installs Debian packages on this machine when they are missing (the test harness needs a few:
# docker.io, debootstrap, shellcheck, nginx for `nginx -t`). Usage: tests/host-packages.sh PACKAGE...
# Services the packages bring are not started (policy-rc.d): the harness starts what it needs itself.
set -euo pipefail
missing=()
find_missing() {
  missing=()
  local pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
}
find_missing "$@"
[ "${#missing[@]}" -eq 0 ] && exit 0
# one apt run at a time (make test's background prefetch installs some of them while the stages run)
# shellcheck source=tests/lab/lock.sh
. "$(dirname "$0")/lab/lock.sh"
lab_lock /var/tmp/llmfleet-apt "[packages]"
find_missing "$@"
[ "${#missing[@]}" -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "[packages] ERROR: need root to install ${missing[*]} (run: sudo apt-get install -y ${missing[*]})" >&2
  exit 1
fi
echo "[packages] installing Debian packages: ${missing[*]}"
apt-get update -qq
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  trap 'rm -f "$policy"' EXIT   # removed however the script ends: later installs must start their services
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod 0755 "$policy"
fi
status=0
DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || status=$?
[ "$status" -eq 0 ] || { echo "[packages] ERROR: apt-get install ${missing[*]} failed (exit $status); run it by hand to see why" >&2; exit "$status"; }
