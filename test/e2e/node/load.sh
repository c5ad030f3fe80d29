#!/usr/bin/env bash
# Busy CPU workers beside an e2e run, so a wait that gives up on a state that
# is merely "not yet" fails here before it fails on a user's busy machine
# (make e2e E2E_LOAD=2, make e2e-cluster E2E_LOAD=2; docs/e2e.md).
#
#   load.sh start N OWNER   start N workers, print their PIDs on one line
#   load.sh stop PID...     stop those workers (by PID) and wait for them
#
# Each worker is a plain shell loop at the caller's priority (no nice), so it
# competes with the node's daemons as another tenant's job would. It also
# stops on its own within a second once OWNER (the make recipe's shell) is
# gone, so a make killed with SIGKILL leaves no worker spinning.
set -euo pipefail

start() {
	local n=$1 owner=$2
	case $n in '' | *[!0-9]*) echo "load.sh: E2E_LOAD=$n: want a whole number of busy workers (e.g. 2)" >&2; exit 2 ;; esac
	kill -0 "$owner" 2>/dev/null || { echo "load.sh: owner PID $owner is not running" >&2; exit 2; }
	local pids=() i
	for ((i = 0; i < n; i++)); do
		# Arithmetic only: no fork per iteration, one core's worth each.
		bash -c 'while kill -0 "$1" 2>/dev/null; do for ((j = 0; j < 200000; j++)); do :; done; done' worker "$owner" </dev/null >/dev/null 2>&1 &
		pids+=("$!")
	done
	echo "${pids[*]}"
}

stop() {
	local pid
	for pid in "$@"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "$@"; do
		# Not our children any more (start has exited): wait on /proc.
		while [ -e "/proc/$pid" ] && ! grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null; do sleep 0.1; done
	done
}

case ${1:-} in
start) shift; start "$@" ;;
stop) shift; stop "$@" ;;
*) echo "usage: load.sh start N OWNER_PID | load.sh stop PID..." >&2; exit 2 ;;
esac
