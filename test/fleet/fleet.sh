#!/usr/bin/env bash
# fleet.sh up|down|status|webhook-start I|webhook-stop I [SIGNAL]:
# the control plane of the e2e (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler) and KWOK in the network namespace ibkf, for the simulated
# fleet of make fleet (docs/fleet.md). The nodes are KWOK's; the agents,
# the simulated kubelet side and the workloads run in the harness
# (test/fleet, go test -tags fleet); the webhook replicas are processes in
# the namespace, started and killed through this script.
#
# Environment (set by hack/make/fleet.mk): ROOT, E2E_DIR, K8S_BIN, KWOK,
# KWOK_STAGES (the stage files in KWOK's module), BIN.
#
# up is idempotent; down stops only the processes up recorded and deletes
# the namespace and the host end of its link.
set -euo pipefail

: "${ROOT:?}" "${E2E_DIR:?}" "${K8S_BIN:?}" "${KWOK:?}" "${KWOK_STAGES:?}" "${BIN:?}"
# shellcheck source=test/e2e/node/lib.sh
source "$ROOT/test/e2e/node/lib.sh"

LOG_TAG=fleet
CLUSTER_NAME=ibkf
NETNS=ibkf
# The control plane and the webhook replicas live on one link in the
# namespace; its host end keeps 198.18.16.0/24 routed here, so the
# harness's clients on the host never send it out of the machine.
HOST_IP=198.18.16.1
API_IP=198.18.16.10
WEBHOOK_IPS=(198.18.16.11 198.18.16.12)
HOST_LINK=ibkf-h
SERVICE_CIDR=198.19.160.0/20
HOST_DIRS=()
# Room for a fleet: the admission webhook and policy scenarios create pods
# in bursts, and the defaults (400/200 in flight) are what users run.
APISERVER_EXTRA=()
# The resource claim controller creates one ResourceClaim per pod from its
# template; at the controller-manager's default client rate (20/s) it, not
# the scheduler, would set the pace of the DRA workloads. scheduler_perf runs
# it unthrottled; so does the fleet.
CONTROLLER_MANAGER_EXTRA=(--kube-api-qps=1000 --kube-api-burst=2000)
# make fleet FLEET_PROFILE=1: the harness profiles the API server during the
# admission bursts through its /debug/pprof (off otherwise, as in the e2e).
# The scheduler's too, on its secure port at the API server's address so
# the harness outside the namespace reaches it (its bursts' profiles).
SCHEDULER_SERVING=(--bind-address=127.0.0.1 --profiling=false)
if [[ -n "${FLEET_PROFILE:-}" ]]; then
	APISERVER_PROFILING=true
	SCHEDULER_SERVING=(--bind-address="$API_IP" --profiling=true)
fi
# The nodes' Lease duration, 40 s as a kubelet's, renewed every quarter of
# it. FLEET_LEASE_SECONDS=200 slows the heartbeats fivefold (and the node
# lifecycle controller's grace with them) for a fleet whose 500 renewals a
# second the machine at hand cannot carry beside the control plane: at 5,000
# nodes on 2 cores, KWOK fell behind and the controller marked half the
# nodes Unknown (docs/fleet.md).
LEASE_SECONDS=${FLEET_LEASE_SECONDS:-40}
[[ $LEASE_SECONDS =~ ^[0-9]+$ && $LEASE_SECONDS -ge 40 ]] ||
	die "FLEET_LEASE_SECONDS=$LEASE_SECONDS: want a whole number of seconds, 40 (a kubelet's, the default) or more"
if ((LEASE_SECONDS != 40)); then
	CONTROLLER_MANAGER_EXTRA+=(--node-monitor-grace-period="$((LEASE_SECONDS * 5 / 4))s")
fi

network_up() {
	ip netns list | grep -qw "^$NETNS" || ip netns add "$NETNS"
	ip -n "$NETNS" link set lo up
	if ! ip link show "$HOST_LINK" >/dev/null 2>&1; then
		ip link add "$HOST_LINK" type veth peer name ibkf-tmp
		ip link set ibkf-tmp netns "$NETNS"
		ip -n "$NETNS" link set ibkf-tmp name eth0
	fi
	ip addr replace "$HOST_IP/24" dev "$HOST_LINK"
	ip link set "$HOST_LINK" up
	ip -n "$NETNS" addr replace "$API_IP/24" dev eth0
	for ip in "${WEBHOOK_IPS[@]}"; do ip -n "$NETNS" addr replace "$ip/24" dev eth0; done
	ip -n "$NETNS" link set eth0 up
}

network_down() {
	if ip netns list | grep -qw "^$NETNS"; then
		log "deleting network namespace $NETNS"
		ip netns del "$NETNS"
	fi
	ip link del "$HOST_LINK" 2>/dev/null || true
}

# The scheduler with scheduler_perf's client rate (its default, 50 QPS,
# would cap binding at ~50 pods/s) and its default plugins.
scheduler_config() {
	put "$CONF/scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $KUBECONFIG_ADMIN
  qps: 5000
  burst: 5000
leaderElection:
  leaderElect: false
EOF
}

kwok_config() {
	local f
	# KWOK renews every node's Lease each 10 s (a quarter of its 40 s
	# duration) with 4 renewals in flight by default: at 1,000 nodes on a
	# loaded API server that falls behind, the node lifecycle controller
	# marks nodes Unknown and taints them unreachable, and the scheduler
	# skips them. Real kubelets renew from their own machines; the fleet
	# gives KWOK the parallelism to keep up.
	cat >"$CONF/kwok-stages.build" <<-EOF
		apiVersion: config.kwok.x-k8s.io/v1alpha1
		kind: KwokConfiguration
		options:
		  nodeLeaseParallelism: 64
		  nodeLeaseDurationSeconds: $LEASE_SECONDS
		  nodePlayStageParallelism: 16
		  podPlayStageParallelism: 16
		---
	EOF
	for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
		pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
		[[ -f $KWOK_STAGES/$f ]] || die "KWOK stage $KWOK_STAGES/$f missing (make kwok downloads the module)"
		{
			cat "$KWOK_STAGES/$f"
			echo "---"
		} >>"$CONF/kwok-stages.build"
	done
	put "$CONF/kwok.yaml" <"$CONF/kwok-stages.build"
	rm -f "$CONF/kwok-stages.build"
}

up() {
	mkdir -p "$PID_DIR" "$LOG_DIR" "$CONF"
	network_up
	gen_pki
	kubeconfig "$KUBECONFIG_ADMIN" admin
	scheduler_config
	kwok_config
	# control_plane_up starts the scheduler with its flags; the fleet's
	# scheduler reads its client rate from the config file instead.
	control_plane_up "" "$NETNS"
	stop_pid kube-scheduler
	start kube-scheduler "$NETNS" - "$K8S_BIN/kube-scheduler" --config="$CONF/scheduler.yaml" \
		--authentication-kubeconfig="$KUBECONFIG_ADMIN" --authorization-kubeconfig="$KUBECONFIG_ADMIN" \
		"${SCHEDULER_SERVING[@]}" --v=2
	start kwok "$NETNS" - "$KWOK" --kubeconfig="$KUBECONFIG_ADMIN" --config="$CONF/kwok.yaml" \
		--manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
		--cidr=198.19.0.0/16 --node-ip=198.18.16.20 --server-address=127.0.0.1:10247
	wait_for "the default service account" 60 "${KUBECTL[@]}" get serviceaccount default
	log "control plane and KWOK up (KUBECONFIG=$KUBECONFIG_ADMIN)"
}

down() {
	local i
	for i in 0 1; do stop_pid "webhook-$i"; done
	for p in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do stop_pid "$p"; done
	network_down
	# The agents' plugin sockets and the nodes' fixture trees.
	rm -rf "$E2E_DIR/etcd" "$E2E_DIR/nodes" /run/ibkf
}

status() {
	local p
	for p in etcd kube-apiserver kube-controller-manager kube-scheduler kwok webhook-0 webhook-1; do
		if running "$p"; then echo "$p: running (pid $(cat "$PID_DIR/$p.pid"))"; else echo "$p: stopped"; fi
	done
}

# webhook_start I: replica I of ibkube-webhook on WEBHOOK_IPS[I]:9443, its
# probes on 127.0.0.1:1808I, serving certificates in $E2E_DIR/webhook.
webhook_start() {
	local i=$1
	start "webhook-$i" "$NETNS" - "$BIN/ibkube-webhook" --kubeconfig="$KUBECONFIG_ADMIN" \
		--config="$E2E_DIR/webhook/config.yaml" --cert-dir="$E2E_DIR/webhook" \
		--host="${WEBHOOK_IPS[$i]}" --port=9443 --namespace=ibkube-system --check-networks=false \
		--cert-management=external --metrics-bind-address=0 --health-probe-bind-address="${WEBHOOK_IPS[$i]}:8081"
	# The webhook is on the control plane's admission path: it runs at the
	# API server's priority, whatever the caller's.
	renice -n "$(ps -o ni= -p "$(cat "$PID_DIR/kube-apiserver.pid")")" -p "$(cat "$PID_DIR/webhook-$i.pid")" >/dev/null
}

case ${1:-} in
up) up ;;
down) down ;;
status) status ;;
webhook-start) webhook_start "${2:?replica}" ;;
webhook-stop) stop_pid "webhook-${2:?replica}" "${3:-TERM}" ;;
*)
	echo "usage: $0 up|down|status|webhook-start I|webhook-stop I [SIGNAL]" >&2
	exit 2
	;;
esac
