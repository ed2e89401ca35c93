# Sourced by scripts/check-deploy.sh and scripts/check-dashboard-live.sh.
#
# ensure_prometheus: installs Debian's `prometheus` package (it brings both `prometheus` and
# `promtool`) when either is missing, without starting its daemon. Idempotent; waits for apt
# locks held by other processes.

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo -n "$@"; fi
}

apt_get() {
  # Other processes may hold the dpkg/apt locks: wait for them rather than fail.
  as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -q "$@"
}

ensure_prometheus() {
  command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 && return 0
  echo "prometheus/promtool not found: installing Debian package 'prometheus' (its daemon is not started)"
  # A policy-rc.d that answers 101 tells the package scripts not to start the daemon. Only
  # create it if none exists, and remove only the one created here.
  local policy=/usr/sbin/policy-rc.d created=0 rc=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# temporary, scripts/lib/prometheus.sh: do not start services\nexit 101\n' |
      as_root tee "$policy" >/dev/null && as_root chmod 0755 "$policy" && created=1
  fi
  if ! apt_get install -y --no-install-recommends prometheus; then
    apt_get update && apt_get install -y --no-install-recommends prometheus || rc=$?
  fi
  [ "$created" -eq 1 ] && as_root rm -f "$policy"
  [ "$rc" -eq 0 ] || return "$rc"
  # Belt and braces: if the package did start or enable its service, stop and disable it.
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    if systemctl is-active --quiet prometheus 2>/dev/null; then as_root systemctl stop prometheus; fi
    if systemctl is-enabled --quiet prometheus 2>/dev/null; then as_root systemctl disable prometheus; fi
  elif [ -x /etc/init.d/prometheus ]; then
    if as_root /etc/init.d/prometheus status >/dev/null 2>&1; then as_root /etc/init.d/prometheus stop; fi
    as_root update-rc.d prometheus disable >/dev/null 2>&1 || true
  fi
  command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1
}
