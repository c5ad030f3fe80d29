#!/usr/bin/env bash
# apt-deps.sh PKG... : install the Debian packages that are missing, idempotently.
# `apt-get update` runs once, only when something is missing. Package scripts
# must not start services: a system etcd bound to 2379 would collide with the
# etcd the tests start, so we forbid service starts during the install
# (policy-rc.d) and stop/disable etcd if a service manager started it anyway.
set -euo pipefail
# Several make runs may call this at once: the first installs, the rest wait.
exec 9>/tmp/ibkube-apt-deps.lock
flock 9
missing=()
for p in "$@"; do
	dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
stop_system_etcd() {
	if command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
		systemctl disable --now etcd.service >/dev/null 2>&1 || true
	elif [[ -x /etc/init.d/etcd ]]; then
		/etc/init.d/etcd stop >/dev/null 2>&1 || true
		command -v update-rc.d >/dev/null && update-rc.d etcd disable >/dev/null 2>&1 || true
	fi
}
if ((${#missing[@]} == 0)); then
	exit 0
fi
if [[ $(id -u) != 0 ]]; then
	echo "apt-deps: missing ${missing[*]}; run as root (sudo make apt-deps)" >&2
	exit 1
fi
echo "installing Debian packages: ${missing[*]} (~1 min)..." >&2
export DEBIAN_FRONTEND=noninteractive
policy=/usr/sbin/policy-rc.d
ours=""
if [[ ! -e $policy ]]; then
	printf '#!/bin/sh\n# written by ibkube hack/tools/apt-deps.sh for the install only\nexit 101\n' >"$policy"
	chmod 755 "$policy"
	ours=1
fi
trap '[[ -n $ours ]] && rm -f "$policy"' EXIT
apt-get -o DPkg::Lock::Timeout=600 update -qq
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
stop_system_etcd
echo "installed: ${missing[*]}" >&2
