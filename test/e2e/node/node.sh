#!/usr/bin/env bash
# node.sh up|down|status : a single-node Kubernetes inside the network namespace
# ibk-e2e, for the e2e tests and `make demo`. See docs/e2e.md for why each
# piece is the way it is.
#
# Environment (set by hack/make/e2e.mk): ROOT, E2E_DIR, K8S_BIN, CONTAINERD_BIN,
# IMAGES_DIR, KUBE_VERSION.
#
# up is idempotent (a running daemon is kept), down stops only the processes up
# recorded, deletes pods through the API first (so CNI tears their networks
# down), and restores every host change up recorded under $E2E_DIR/host.
set -euo pipefail

: "${ROOT:?}" "${E2E_DIR:?}" "${K8S_BIN:?}" "${CONTAINERD_BIN:?}" "${IMAGES_DIR:?}"
# shellcheck source=test/e2e/node/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
NETNS=ibk-e2e
NODE_NAME=ibk-e2e
HOST_IP=198.18.0.1
NODE_IP=198.18.0.2
POD_CIDR=198.19.0.0/24
SERVICE_CIDR=198.19.128.0/20
INSTANCE_TYPE=${INSTANCE_TYPE:-Standard_ND96isr_H100_v5}
RUN_DIR=/run/ibk-e2e
CTRD_SOCK=$RUN_DIR/containerd/containerd.sock
KUBELET_ROOT=/var/lib/kubelet
NSENTER=(nsenter --net=/run/netns/$NETNS --)
LOG_TAG=e2e
CLUSTER_NAME=ibk-e2e
API_IP=$NODE_IP
APISERVER_EXTRA=()
CONTROLLER_MANAGER_EXTRA=()
# Host paths the node creates; down removes the ones that did not exist before.
HOST_DIRS=(/var/lib/kubelet /var/log/pods /var/log/containers /var/run/nri /run/containerd /opt/containerd
	/var/lib/ibkube /var/lib/cni /etc/cni /opt/cni /opt/nri /etc/nri "$RUN_DIR" /dev/ibk-e2e-fixture /run/netns
	/var/run/cdi)
CGROUP_NAMES=(kubepods)

# ---------------------------------------------------------------- host state
restore_host_state() {
	restore_sysctls_and_dev
	# Pod network namespaces containerd left behind (not ours before up).
	if [[ -d /run/netns ]]; then
		for n in /run/netns/cni-*; do
			[[ -e $n ]] || continue
			grep -qx "$(basename "$n")" "$HOST_STATE/netns" 2>/dev/null && continue
			umount "$n" 2>/dev/null || true
			rm -f "$n"
		done
	fi
	# Mounts under the paths the node used (pod volumes, shm, rootfs).
	unmount_under "$KUBELET_ROOT" "$RUN_DIR" "$E2E_DIR/containerd" /run/containerd
	remove_cgroups "${CGROUP_NAMES[@]}"
	remove_recorded_dirs
	# Left-over plugin sockets in a device-plugins dir that existed before.
	if [[ -d $KUBELET_ROOT/device-plugins ]]; then
		rm -f "$KUBELET_ROOT"/device-plugins/kubelet.sock "$KUBELET_ROOT"/device-plugins/kubelet_internal_checkpoint
	fi
	rm -rf "$HOST_STATE"
}

# ---------------------------------------------------------------- network
netns_up() {
	if ! ip netns list | grep -qw "^$NETNS"; then
		log "creating network namespace $NETNS ($HOST_IP <-> $NODE_IP)"
		ip netns add "$NETNS"
	fi
	if ! ip link show ibk-e2e-h >/dev/null 2>&1; then
		ip link add ibk-e2e-h type veth peer name ibk-e2e-n
		ip link set ibk-e2e-n netns "$NETNS"
	fi
	ip addr replace "$HOST_IP/24" dev ibk-e2e-h
	ip link set ibk-e2e-h up
	ip -n "$NETNS" addr replace "$NODE_IP/24" dev ibk-e2e-n
	ip -n "$NETNS" link set ibk-e2e-n up
	ip -n "$NETNS" link set lo up
	# Services need a route for connect() to get as far as kube-proxy's DNAT
	# (the namespace has no default route). Through lo: a packet to a service
	# IP without a rule is dropped inside the namespace, never sent out.
	ip -n "$NETNS" route replace "$SERVICE_CIDR" dev lo src "$NODE_IP"
	"${NSENTER[@]}" sh -c 'echo 1 >/proc/sys/net/ipv4/ip_forward'
}

netns_down() {
	ip link del ibk-e2e-h 2>/dev/null || true
	if ip netns list | grep -qw "^$NETNS"; then
		log "deleting network namespace $NETNS"
		ip netns del "$NETNS"
	fi
}

# ---------------------------------------------------------------- pki/config
write_configs() {
	mkdir -p "$CONF" "$E2E_DIR/cni/net.d" "$E2E_DIR/cni/ipam"
	kubeconfig "$KUBECONFIG_ADMIN" admin
	kubeconfig "$CONF/kubelet.kubeconfig" kubelet
	put "$E2E_DIR/cni/net.d/10-ibk-e2e.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "ibk-e2e",
  "plugins": $(bridge_plugins true "$E2E_DIR/cni/ipam" "$POD_CIDR")
}
EOF
	containerd_config "$CONF/containerd.toml" "$E2E_DIR/containerd/root" "$RUN_DIR/containerd/state" "$CTRD_SOCK" \
		/usr/lib/cni "$E2E_DIR/cni/net.d" "$E2E_DIR/nri"
	# The kubelet copies device health into the Node's allocatable only when
	# it computes node status (default every 10 s); 1 s lets scenario 5b
	# measure the agent's own port-down path rather than that period.
	kubelet_config "$CONF/kubelet.yaml" "$NODE_IP" "$CTRD_SOCK" "nodeStatusUpdateFrequency: 1s"
	kube_proxy_config "$CONF/kube-proxy.yaml" "$NODE_NAME" "$POD_CIDR" "$NODE_IP"
}

# ---------------------------------------------------------------- up/down
up() {
	[[ $(id -u) == 0 ]] || die "e2e-up needs root"
	for b in "$K8S_BIN"/{kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kube-proxy,kubectl} \
		"$CONTAINERD_BIN"/{containerd,ctr,containerd-shim-runc-v2} /usr/bin/etcd /usr/sbin/runc /usr/lib/cni/bridge; do
		[[ -x $b ]] || die "missing $b (make tools)"
	done
	mkdir -p "$PID_DIR" "$LOG_DIR"
	record_host_state
	mkdir -p "$RUN_DIR/containerd" "$E2E_DIR/etcd" "$E2E_DIR/containerd/root"
	netns_up
	gen_pki kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" ""
	write_configs

	control_plane_up "" "$NETNS"
	start containerd "$NETNS" - env PATH="$CONTAINERD_BIN:/usr/sbin:/usr/bin:/sbin:/bin" \
		prlimit --memlock="$CONTAINERD_MEMLOCK" -- "$CONTAINERD_BIN/containerd" --config "$CONF/containerd.toml"
	wait_for "containerd" 60 "$CONTAINERD_BIN/ctr" --address "$CTRD_SOCK" version
	import_tarballs "$LOG_DIR/ctr-import.log" "$CONTAINERD_BIN/ctr" --address "$CTRD_SOCK"
	start_kubelet
	start kube-proxy "$NETNS" - "$K8S_BIN/kube-proxy" --config="$CONF/kube-proxy.yaml"
	wait_for "node $NODE_NAME Ready" 180 node_ready "$NODE_NAME"
	# A label the kubelet may not set itself (NodeRestriction): what Node
	# Feature Discovery would put on a node with a Mellanox HCA.
	"${KUBECTL[@]}" label node "$NODE_NAME" --overwrite feature.node.kubernetes.io/pci-15b3.present=true >/dev/null
	wait_for "default service account" 60 "${KUBECTL[@]}" -n default get serviceaccount default
	log "node $NODE_NAME is Ready; kubectl: KUBECONFIG=$KUBECONFIG_ADMIN $K8S_BIN/kubectl get pods -A"
}

start_kubelet() {
	start kubelet "$NETNS" - "$K8S_BIN/kubelet" --config="$CONF/kubelet.yaml" \
		--kubeconfig="$CONF/kubelet.kubeconfig" \
		--hostname-override="$NODE_NAME" --node-ip="$NODE_IP" \
		--node-labels="node.kubernetes.io/instance-type=$INSTANCE_TYPE" --v=1
}

# restart_kubelet: the fault scenario. The kubelet wipes its device-plugins
# directory on start; plugins must notice and register again.
restart_kubelet() {
	stop_pid kubelet
	# The kubelet re-creates its socket on start; removed here so the wait
	# below cannot see the old one (the Node's Ready may also still be the
	# old kubelet's: scenario 5a waits for a status the new one wrote).
	rm -f "$KUBELET_ROOT/device-plugins/kubelet.sock"
	start_kubelet
	wait_for "kubelet.sock re-created" 60 test -S "$KUBELET_ROOT/device-plugins/kubelet.sock"
	wait_for "node $NODE_NAME Ready" 120 node_ready "$NODE_NAME"
}

delete_pods() {
	running kube-apiserver && running kubelet && running containerd || return 0
	delete_pods_via_api
}

# Shims are started by containerd but detach from it: stop the ones whose
# socket lives under our state dir (never any other containerd's).
stop_shims() {
	local p
	for p in $(pgrep -f containerd-shim-runc-v2 || true); do
		if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- "$CTRD_SOCK"; then
			kill -KILL "$p" 2>/dev/null || true
		fi
	done
	# the containers' processes die with their cgroups below
	for c in /sys/fs/cgroup/{freezer,pids,memory}/kubepods; do
		[[ -d $c ]] || continue
		find "$c" -name cgroup.procs -exec cat {} + 2>/dev/null | while read -r p; do kill -KILL "$p" 2>/dev/null || true; done
	done
}

down() {
	[[ $(id -u) == 0 ]] || die "e2e-down needs root"
	delete_pods
	stop_pid ibkube-agent
	stop_pid kube-proxy
	stop_pid kubelet
	if running containerd; then stop_tasks "$CONTAINERD_BIN/ctr" --address "$CTRD_SOCK"; fi
	stop_pid containerd
	stop_shims
	stop_pid kube-scheduler
	stop_pid kube-controller-manager
	stop_pid kube-apiserver
	stop_pid etcd
	netns_down
	restore_host_state
	rm -rf "$RUN_DIR" "$E2E_DIR/etcd" "$E2E_DIR/containerd" "$E2E_DIR/cni" "$E2E_DIR/nri" "$PID_DIR"
	log "node down; host restored"
}

status() {
	local n
	for n in etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy; do
		if running "$n"; then echo "$n: running (pid $(cat "$PID_DIR/$n.pid"))"; else echo "$n: stopped"; fi
	done
}

case ${1:-} in
up) up ;;
down) down ;;
status) status ;;
restart-kubelet) restart_kubelet ;;
*) die "usage: node.sh up|down|status|restart-kubelet" ;;
esac
