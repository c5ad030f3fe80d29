#!/usr/bin/env bash
# cluster.sh up|down|status|stop-node N|start-node N|restart-kubelet N :
# a four-node Kubernetes on one machine for the multi-node e2e scenarios
# (make e2e-cluster). See docs/e2e.md ("The cluster") for the layout and why
# each piece is the way it is; node.sh is the single-node harness.
#
# One control plane in the network namespace ibkc-cp and four nodes, each a
# simulated host, each with its own kubelet, containerd and
# kube-proxy in a network namespace AND a mount namespace of its own: the
# kubelet always uses /var/lib/kubelet/device-plugins/kubelet.sock and
# containerd /run/containerd and /var/run/nri/nri.sock whatever their other
# paths, so every node gets private bind mounts of those (and of the CNI
# directories, the CDI directory /var/run/cdi where the DRA agent writes
# and containerd reads prepared claims, and its fixture tree) in a mount
# namespace that is a slave of the host's. `ip netns exec` is not used: it
# remounts /sys (the kubelet then finds no cgroup mounts); daemons start
# under nsenter --net --mount.
#
# Environment (set by hack/make/e2e.mk): ROOT, E2E_DIR, K8S_BIN,
# CONTAINERD_BIN, CNI_TOOLS_BIN, IMAGES_DIR, FIXTUREGEN.
#
# up is idempotent; down stops only the processes up recorded (and the
# shims and containers inside the nodes' own mount namespaces and cgroups),
# deletes pods through the API first so CNI releases their addresses, and
# restores every host change up recorded under $E2E_DIR/host.
set -euo pipefail

: "${ROOT:?}" "${E2E_DIR:?}" "${K8S_BIN:?}" "${CONTAINERD_BIN:?}" "${CNI_TOOLS_BIN:?}" "${IMAGES_DIR:?}" "${FIXTUREGEN:?}"
# shellcheck source=test/e2e/node/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The nodes: short name -> fixture, instance type, address, pod range, GPUs
# (a fake nvidia.com/gpu capacity, for placement only) and the stand-in for
# the fixture's IPoIB netdev (a veth on the "fabric" bridge; this kernel has
# no IPoIB).
#
# InfiniBand partitions (docs/partitions.md): hb and hb2 are two VMs of one
# HB scale set, so both fixtures hold the tenant key 0x8014; nd is another
# scale set's VM with 0x800b. Two InfiniBand nodes on one partition and one
# on another, each HB node holding a single HCA: an rdma-exclusive pod of
# one HCA fills it, so where a job's second pod goes is a real choice.
NODES=(nd hb hb2 oci)
declare -A FIXTURE=([nd]=ndv5 [hb]=hb [hb2]=hb [oci]=oci-h100)
declare -A INSTANCE=([nd]=Standard_ND96isr_H100_v5 [hb]=Standard_HB120rs_v3 [hb2]=Standard_HB120rs_v3 [oci]=BM.GPU.H100.8)
declare -A NODE_IP=([nd]=198.18.8.11 [hb]=198.18.8.12 [oci]=198.18.8.13 [hb2]=198.18.8.14)
declare -A POD_CIDR=([nd]=198.19.1.0/24 [hb]=198.19.2.0/24 [oci]=198.19.3.0/24 [hb2]=198.19.4.0/24)
declare -A GPUS=([nd]=8 [hb]=0 [hb2]=0 [oci]=8)
declare -A IPOIB_IF=([nd]=ibP257p0s0 [hb]=ib0 [hb2]=ib0)
# How each node hands out HCAs: the label infiniband.azure.com/allocation
# moves a node to the chart's DRA agent (docs/dra.md); the others run the
# device plugin, so placement covers both modes side by side, and the
# 0x8014 partition spans both (hb DRA, hb2 device plugin).
declare -A ALLOCATION=([nd]=deviceplugin [hb]=dra [hb2]=deviceplugin [oci]=deviceplugin)
CP_NS=ibkc-cp
CP_IP=198.18.8.10
HOST_IP=198.18.8.1
BRIDGE=ibkc-br
FABRIC=ibkc-ib
CLUSTER_POD_CIDR=198.19.0.0/16
SERVICE_CIDR=198.19.128.0/20

NODES_DIR=$E2E_DIR/nodes
RUN_DIR=/run/ibkc
MNT_DIR=$RUN_DIR/mnt
FIXTURES=/dev/ibkc-fixture
# Where every node sees its own fixture (test/e2e/values-e2e.yaml's paths).
NODE_FIXTURE=/dev/ibk-e2e-fixture
GO=${GO:-go}
LOG_TAG=cluster
CLUSTER_NAME=ibkc
API_IP=$CP_IP
APISERVER_EXTRA=(--enable-admission-plugins=NodeRestriction)
# node-monitor-grace-period 20s (default 50s): a lost node is noticed, and
# its pods leave the Service endpoints, within the fault scenario.
CONTROLLER_MANAGER_EXTRA=(--node-monitor-grace-period=20s)
# Host path -> the node's own directory, bound in the node's mount namespace.
# $NODES_DIR/<n>/<name> on disk; run/* under $RUN_DIR/<n> (tmpfs).
BINDS=(
	/var/lib/kubelet=kubelet
	/var/log/pods=log-pods
	/var/log/containers=log-containers
	/var/lib/cni=cni-state
	/etc/cni/net.d=cni-conf
	/opt/cni/bin=cni-bin
	/var/lib/ibkube=ibkube
	/run/containerd=run/containerd
	/run/nri=run/nri
	/run/netns=run/netns
	/run/cdi=run/cdi
)
# Mount points up creates on the host (empty; down removes those it made).
HOST_DIRS=(/var/lib/kubelet /var/log/pods /var/log/containers /var/lib/cni /etc/cni /etc/cni/net.d /opt/cni /opt/cni/bin
	/var/lib/ibkube /run/containerd /run/nri /run/netns /run/cdi /opt/containerd "$NODE_FIXTURE" "$FIXTURES" "$RUN_DIR")

node_name() { echo "ibkc-$1"; }
mntns() { echo "$MNT_DIR/$1"; }

# ---------------------------------------------------------------- host state
restore_host_state() {
	restore_sysctls_and_dev
	remove_cgroups "${NODES[@]/#/ibkc-}"
	unmount_under "$RUN_DIR" "$FIXTURES" "$NODE_FIXTURE" "$NODES_DIR"
	remove_recorded_dirs
	rm -rf "$HOST_STATE"
}

# Every kubelet gets its own cgroup root, /ibkc-<node>, in every v1
# hierarchy (cpuset needs its cpus and mems copied from the parent).
make_cgroups() { # node
	local c
	for c in /sys/fs/cgroup/*/; do
		c=${c%/}
		if [[ -L $c || ! -f $c/cgroup.procs ]]; then continue; fi
		mkdir -p "$c/ibkc-$1"
		if [[ -f $c/cpuset.cpus ]]; then
			[[ -n $(cat "$c/ibkc-$1/cpuset.cpus") ]] || cat "$c/cpuset.cpus" >"$c/ibkc-$1/cpuset.cpus"
			[[ -n $(cat "$c/ibkc-$1/cpuset.mems") ]] || cat "$c/cpuset.mems" >"$c/ibkc-$1/cpuset.mems"
		fi
	done
}

cgroup_procs() { # node: PIDs in the node's cgroups
	local c
	for c in /sys/fs/cgroup/{pids,memory,freezer,cpu}/ibkc-"$1"; do
		[[ -d $c ]] || continue
		find "$c" -name cgroup.procs -exec cat {} + 2>/dev/null
	done | sort -u
}

# ---------------------------------------------------------------- network
# A bridge joins the control plane's and the nodes' namespaces
# (198.18.8.0/24; the host end keeps the subnet routed here so a host-side
# kubectl never sends it out of the machine). A second bridge with no address
# stands for the InfiniBand fabric: each IB node's stand-in IPoIB netdev is a
# veth on it. Pod ranges are routed node to node; nothing leaves the machine.
link_to_bridge() { # netns inner-name host-name bridge [addr]
	local ns=$1 inner=$2 hostend=$3 br=$4 addr=${5:-}
	if ! ip link show "$hostend" >/dev/null 2>&1; then
		ip link add "$hostend" type veth peer name "ibkc-tmp"
		ip link set ibkc-tmp netns "$ns"
		ip -n "$ns" link set ibkc-tmp name "$inner"
	fi
	ip link set "$hostend" master "$br" up
	[[ -z $addr ]] || ip -n "$ns" addr replace "$addr" dev "$inner"
	ip -n "$ns" link set "$inner" up
}

network_up() {
	local n m
	for br in "$BRIDGE" "$FABRIC"; do
		ip link show "$br" >/dev/null 2>&1 || ip link add "$br" type bridge
		ip link set "$br" up
	done
	ip addr replace "$HOST_IP/24" dev "$BRIDGE"
	for ns in "$CP_NS" "${NODES[@]/#/ibkc-}"; do
		ip netns list | grep -qw "^$ns" || ip netns add "$ns"
		ip -n "$ns" link set lo up
	done
	link_to_bridge "$CP_NS" eth0 ibkc-cp-h "$BRIDGE" "$CP_IP/24"
	for n in "${NODES[@]}"; do
		local ns=ibkc-$n
		link_to_bridge "$ns" eth0 "ibkc-$n-h" "$BRIDGE" "${NODE_IP[$n]}/24"
		nsenter --net="/run/netns/$ns" sh -c 'echo 1 >/proc/sys/net/ipv4/ip_forward'
		# Services: connect() reaches kube-proxy's DNAT through lo; an
		# unmatched packet dies inside the namespace (no default route).
		ip -n "$ns" route replace "$SERVICE_CIDR" dev lo src "${NODE_IP[$n]}"
		for m in "${NODES[@]}"; do
			[[ $m == "$n" ]] || ip -n "$ns" route replace "${POD_CIDR[$m]}" via "${NODE_IP[$m]}"
		done
		ip -n "$CP_NS" route replace "${POD_CIDR[$n]}" via "${NODE_IP[$n]}"
		if [[ -n ${IPOIB_IF[$n]:-} ]]; then
			link_to_bridge "$ns" "${IPOIB_IF[$n]}" "ibkc-$n-ib" "$FABRIC"
		fi
	done
}

network_down() {
	local ns
	for ns in "${NODES[@]/#/ibkc-}" "$CP_NS"; do
		if ip netns list | grep -qw "^$ns"; then
			log "deleting network namespace $ns"
			ip netns del "$ns"
		fi
	done
	for br in "$BRIDGE" "$FABRIC"; do ip link del "$br" 2>/dev/null || true; done
}

# ---------------------------------------------------------------- mount namespaces
# A node's mount namespace lives as long as its file under $MNT_DIR is
# mounted (unshare --mount=FILE), so daemons started later join it.
mntns_up() { # node
	local n=$1 f b hp sub src
	f=$(mntns "$n")
	mkdir -p "$MNT_DIR"
	if ! findmnt -n "$MNT_DIR" >/dev/null; then
		# A mount namespace file may only be bound on a private mount.
		mount --bind "$MNT_DIR" "$MNT_DIR"
		mount --make-private "$MNT_DIR"
	fi
	findmnt -n "$f" >/dev/null && return 0
	touch "$f"
	unshare --mount="$f" --propagation slave true
	# The copy of $MNT_DIR would keep the other nodes' namespaces alive.
	nsenter --mount="$f" -- umount -l "$MNT_DIR" 2>/dev/null || true
	for b in "${BINDS[@]}"; do
		hp=${b%%=*} sub=${b#*=}
		if [[ $sub == run/* ]]; then src=$RUN_DIR/$n/${sub#run/}; else src=$NODES_DIR/$n/$sub; fi
		mkdir -p "$src" "$hp"
		nsenter --mount="$f" -- mount --bind "$src" "$hp"
	done
	mkdir -p "$NODE_FIXTURE"
	nsenter --mount="$f" -- mount --bind "$FIXTURES/$n" "$NODE_FIXTURE"
}

mntns_inode() { stat -L -c %i "$(mntns "$1")" 2>/dev/null; }

# Processes inside the node's mount namespace (containerd's shims) and in its
# cgroups (the containers), besides the daemons recorded by PID.
kill_node_leftovers() { # node
	local n=$1 ino p
	ino=$(mntns_inode "$n") || true
	if [[ -n $ino ]]; then
		for p in /proc/[0-9]*; do
			[[ $(readlink "$p/ns/mnt" 2>/dev/null) == "mnt:[$ino]" ]] || continue
			kill -KILL "${p#/proc/}" 2>/dev/null || true
		done
	fi
	for p in $(cgroup_procs "$n"); do kill -KILL "$p" 2>/dev/null || true; done
}

mntns_down() { # node
	local f
	f=$(mntns "$1")
	if findmnt -n "$f" >/dev/null; then
		log "releasing the mount namespace of $(node_name "$1")"
		umount "$f" || umount -l "$f"
	fi
	rm -f "$f"
}

# ---------------------------------------------------------------- pki/config
write_node_configs() { # node
	local n=$1 d=$NODES_DIR/$1 c=$CONF/$1 b
	mkdir -p "$c" "$d/cni-conf/whereabouts.d" "$d/cni-bin" "$d/cni-ipam"
	kubeconfig "$c/kubelet.kubeconfig" "kubelet-$n"
	# CNI binaries: the Debian plugins, Multus and whereabouts; the agent's
	# init container adds ibkube-cni (the chart's cni.binDir, /opt/cni/bin).
	for b in /usr/lib/cni/* "$CNI_TOOLS_BIN/multus" "$CNI_TOOLS_BIN/whereabouts"; do
		ln -sfn "$b" "$d/cni-bin/$(basename "$b")"
	done
	# Multus (thin plugin) is the runtime's network: the bridge below is the
	# cluster network, NetworkAttachmentDefinitions named in the pod's
	# k8s.v1.cni.cncf.io/networks annotation are added as net1, net2...
	put "$d/cni-conf/00-multus.conf" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "multus-cni-network",
  "type": "multus",
  "kubeconfig": "$KUBECONFIG_ADMIN",
  "cniDir": "/var/lib/cni/multus",
  "binDir": "/opt/cni/bin",
  "logFile": "$LOG_DIR/$n-multus.log",
  "logLevel": "verbose",
  "delegates": [{
    "cniVersion": "1.0.0",
    "name": "ibkc-pods",
    "plugins": $(bridge_plugins false "$d/cni-ipam" "${POD_CIDR[$n]}")
  }]
}
EOF
	# whereabouts finds its datastore in this file (what its DaemonSet
	# writes on a real node); the NAD carries only the range.
	put "$d/cni-conf/whereabouts.d/whereabouts.conf" <<EOF
{
  "datastore": "kubernetes",
  "kubernetes": {"kubeconfig": "$KUBECONFIG_ADMIN"},
  "log_file": "$LOG_DIR/$n-whereabouts.log",
  "log_level": "verbose"
}
EOF
	containerd_config "$c/containerd.toml" "$d/containerd/root" /run/containerd/state /run/containerd/containerd.sock \
		/opt/cni/bin /etc/cni/net.d "$d/nri" "max_conf_num = 1"
	kubelet_config "$c/kubelet.yaml" "${NODE_IP[$n]}" /run/containerd/containerd.sock "cgroupRoot: /ibkc-$n"
	kube_proxy_config "$c/kube-proxy.yaml" "$(node_name "$n")" "$CLUSTER_POD_CIDR" "${NODE_IP[$n]}"
}

# ---------------------------------------------------------------- nodes
ctr() { # node args...
	local n=$1
	shift
	"$CONTAINERD_BIN/ctr" --address "$RUN_DIR/$n/containerd/containerd.sock" "$@"
}

start_containerd() { # node
	local n=$1
	start "$n-containerd" "ibkc-$n" "$(mntns "$n")" env PATH="$CONTAINERD_BIN:/usr/sbin:/usr/bin:/sbin:/bin" \
		prlimit --memlock="$CONTAINERD_MEMLOCK" -- "$CONTAINERD_BIN/containerd" --config "$CONF/$n/containerd.toml"
	wait_for "containerd on $(node_name "$n")" 60 ctr "$n" version
}

start_kubelet() { # node
	local n=$1
	start "$n-kubelet" "ibkc-$n" "$(mntns "$n")" "$K8S_BIN/kubelet" --config="$CONF/$n/kubelet.yaml" \
		--kubeconfig="$CONF/$n/kubelet.kubeconfig" \
		--hostname-override="$(node_name "$n")" --node-ip="${NODE_IP[$n]}" \
		--node-labels="node.kubernetes.io/instance-type=${INSTANCE[$n]},ibkube.io/e2e-node=$n" --v=1
}

import_images() { # node
	import_tarballs "$LOG_DIR/$1-ctr-import.log" ctr "$1"
	# A second tag of the same image for the helm upgrade scenario (a new
	# image tag rolls every ibkube pod).
	ctr "$1" -n k8s.io images tag --force docker.io/library/ibkube:dev docker.io/library/ibkube:e2e-upgrade >>"$LOG_DIR/$1-ctr-import.log" 2>&1
}

# The CRDs of the secondary-network chain, read from the Go module cache
# (never copied into the repository): Multus's NetworkAttachmentDefinition
# (from the NAD client module ibkube itself requires) and whereabouts' IP
# pools and reservations (from hack/tools/whereabouts' module).
apply_crds() {
	local nad wb
	nad=$(cd "$ROOT" && "$GO" list -m -f '{{.Dir}}' github.com/k8snetworkplumbingwg/network-attachment-definition-client)
	wb=$(cd "$ROOT/hack/tools/whereabouts" && GONOSUMDB=github.com/k8snetworkplumbingwg/whereabouts "$GO" list -m -f '{{.Dir}}' github.com/k8snetworkplumbingwg/whereabouts)
	"${KUBECTL[@]}" apply -f "$nad/artifacts/networks-crd.yaml" \
		-f "$wb/doc/crds/whereabouts.cni.cncf.io_ippools.yaml" \
		-f "$wb/doc/crds/whereabouts.cni.cncf.io_overlappingrangeipreservations.yaml" >/dev/null
	"${KUBECTL[@]}" wait --for=condition=Established --timeout=60s crd/network-attachment-definitions.k8s.cni.cncf.io \
		crd/ippools.whereabouts.cni.cncf.io crd/overlappingrangeipreservations.whereabouts.cni.cncf.io >/dev/null 2>&1 ||
		die "the NetworkAttachmentDefinition and whereabouts CRDs are not established"
}

# pod_pid NODE CONTAINER_ID: the host PID of a running container.
pod_pid() {
	local pid
	pid=$(ctr "$1" -n k8s.io tasks ls 2>/dev/null | awk -v id="$2" '$1 == id {print $2}')
	[[ -n $pid && $pid != 0 ]] || die "container $2 has no running task on $(node_name "$1")"
	echo "$pid"
}

# net_probe SRV_NODE SRV_CID SRV_IP CLI_NODE CLI_CID CLI_IP: a TCP exchange
# between two pods' network namespaces (listener bound to SRV_IP, client
# bound to CLI_IP), printing what the client received.
net_probe() {
	local spid cpid lpid out rc=0
	spid=$(pod_pid "$1" "$2")
	cpid=$(pod_pid "$4" "$5")
	nsenter -t "$spid" -n socat -T10 "TCP-LISTEN:7777,bind=$3,reuseaddr" SYSTEM:'echo ibkube-over-net1' &
	lpid=$!
	wait_for "listener on $3:7777" 10 sh -c "nsenter -t $spid -n ss -Hltn 'sport = :7777' | grep -q 7777"
	out=$(nsenter -t "$cpid" -n socat -T10 - "TCP:$3:7777,bind=$6,connect-timeout=5" </dev/null 2>&1) || rc=$?
	kill "$lpid" 2>/dev/null || true
	wait "$lpid" 2>/dev/null || true
	echo "$out"
	return $rc
}

node_up() { # node
	local n=$1
	make_cgroups "$n"
	start_containerd "$n"
	import_images "$n"
	start_kubelet "$n"
	start "$n-kube-proxy" "ibkc-$n" "$(mntns "$n")" "$K8S_BIN/kube-proxy" --config="$CONF/$n/kube-proxy.yaml"
}

node_labels() { # node
	local n=$1 name
	name=$(node_name "$n")
	# What Node Feature Discovery would set on a host with a Mellanox device
	# (the kubelet may not set it itself: NodeRestriction).
	"${KUBECTL[@]}" label node "$name" --overwrite feature.node.kubernetes.io/pci-15b3.present=true \
		"infiniband.azure.com/allocation=${ALLOCATION[$n]}" >/dev/null
	if ((GPUS[$n] > 0)); then
		# A GPU count for placement only, as a device plugin would report it.
		"${KUBECTL[@]}" patch node "$name" --subresource=status --type=merge \
			-p "{\"status\":{\"capacity\":{\"nvidia.com/gpu\":\"${GPUS[$n]}\"}}}" >/dev/null
	fi
}

# restart_kubelet NODE: the kubelet wipes its device-plugins directory on
# start; plugins must notice and register again.
restart_kubelet() { # node
	local n=$1
	stop_pid "$n-kubelet"
	# The kubelet re-creates its socket on start; removed here so the wait
	# below cannot see the old one.
	rm -f "$NODES_DIR/$n/kubelet/device-plugins/kubelet.sock"
	start_kubelet "$n"
	wait_for "kubelet.sock re-created on $(node_name "$n")" 60 test -S "$NODES_DIR/$n/kubelet/device-plugins/kubelet.sock"
}

# stop_node NODE: the node is lost: its kubelet and containerd are killed,
# and so are its containers (what a crashed host leaves), but its network
# namespace stays so its pods' addresses answer with resets, not silence.
stop_node() {
	local n=$1
	stop_pid "$n-kubelet" KILL
	stop_pid "$n-containerd" KILL
	stop_pid "$n-kube-proxy" KILL
	kill_node_leftovers "$n"
}

start_node() {
	local n=$1
	make_cgroups "$n"
	start_containerd "$n"
	start_kubelet "$n"
	start "$n-kube-proxy" "ibkc-$n" "$(mntns "$n")" "$K8S_BIN/kube-proxy" --config="$CONF/$n/kube-proxy.yaml"
	wait_for "node $(node_name "$n") Ready" 180 node_ready "$(node_name "$n")"
}

up() {
	[[ $(id -u) == 0 ]] || die "cluster up needs root"
	for b in "$K8S_BIN"/{kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kube-proxy,kubectl} \
		"$CONTAINERD_BIN"/{containerd,ctr,containerd-shim-runc-v2} "$CNI_TOOLS_BIN"/{multus,whereabouts} "$FIXTUREGEN" \
		/usr/bin/etcd /usr/sbin/runc /usr/lib/cni/bridge /usr/lib/cni/macvlan; do
		[[ -x $b ]] || die "missing $b (make e2e-cluster-tools)"
	done
	mkdir -p "$PID_DIR" "$LOG_DIR" "$E2E_DIR/etcd"
	record_host_state
	network_up
	local pki=() n
	for n in "${NODES[@]}"; do
		pki+=("kubelet-$n" "/O=system:nodes/CN=system:node:$(node_name "$n")" "subjectAltName=IP:${NODE_IP[$n]}")
	done
	gen_pki "${pki[@]}"
	kubeconfig "$KUBECONFIG_ADMIN" admin
	for n in "${NODES[@]}"; do
		# Built before the node's mount namespace binds it: a fixture
		# rebuilt later would be a new directory the node does not see.
		if [[ ! -d $FIXTURES/$n/sys ]]; then
			"$FIXTUREGEN" -dir "$FIXTURES/$n" -name "${FIXTURE[$n]}" >/dev/null
		fi
		mntns_up "$n"
		write_node_configs "$n"
	done
	control_plane_up cp- "$CP_NS"
	apply_crds
	for n in "${NODES[@]}"; do node_up "$n"; done
	for n in "${NODES[@]}"; do
		wait_for "node $(node_name "$n") Ready" 180 node_ready "$(node_name "$n")"
		node_labels "$n"
	done
	wait_for "default service account" 60 "${KUBECTL[@]}" -n default get serviceaccount default
	log "cluster is Ready; kubectl: KUBECONFIG=$KUBECONFIG_ADMIN $K8S_BIN/kubectl get nodes"
}

delete_pods() {
	running cp-kube-apiserver || return 0
	delete_pods_via_api
}

down() {
	[[ $(id -u) == 0 ]] || die "cluster down needs root"
	local n
	delete_pods
	for n in "${NODES[@]}"; do
		stop_pid "$n-kube-proxy"
		stop_pid "$n-kubelet"
		if running "$n-containerd"; then stop_tasks ctr "$n"; fi
		stop_pid "$n-containerd"
		kill_node_leftovers "$n"
	done
	for n in cp-kube-scheduler cp-kube-controller-manager cp-kube-apiserver cp-etcd; do stop_pid "$n"; done
	for n in "${NODES[@]}"; do mntns_down "$n"; done
	if findmnt -n "$MNT_DIR" >/dev/null; then umount "$MNT_DIR" || umount -l "$MNT_DIR"; fi
	network_down
	restore_host_state
	rm -rf --one-file-system "$RUN_DIR" "$FIXTURES" "$NODES_DIR" "$E2E_DIR/etcd" "$PID_DIR"
	log "cluster down; host restored"
}

status() {
	local n
	for n in cp-etcd cp-kube-apiserver cp-kube-controller-manager cp-kube-scheduler "${NODES[@]/%/-containerd}" "${NODES[@]/%/-kubelet}" "${NODES[@]/%/-kube-proxy}"; do
		if running "$n"; then echo "$n: running (pid $(cat "$PID_DIR/$n.pid"))"; else echo "$n: stopped"; fi
	done
}

# scheduler_metrics: the kube-scheduler's Prometheus text, read inside the
# control plane's namespace (it serves on 127.0.0.1 there) with the admin
# client certificate, which its delegated authorization allows.
scheduler_metrics() {
	nsenter --net="/run/netns/$CP_NS" curl -sS --fail --max-time 10 -k \
		--cert "$PKI/admin.crt" --key "$PKI/admin.key" https://127.0.0.1:10259/metrics
}

need_node() {
	[[ -n ${FIXTURE[${1:-}]:-} ]] || die "want a node: ${NODES[*]}"
}

case ${1:-} in
up) up ;;
down) down ;;
status) status ;;
pod-pid) need_node "${2:-}" && pod_pid "$2" "${3:?container id}" ;;
net-probe) need_node "${2:-}" && need_node "${5:-}" && net_probe "$2" "${3:?}" "${4:?}" "$5" "${6:?}" "${7:?}" ;;
restart-kubelet) need_node "${2:-}" && restart_kubelet "$2" ;;
scheduler-metrics) scheduler_metrics ;;
stop-node) need_node "${2:-}" && stop_node "$2" ;;
start-node) need_node "${2:-}" && start_node "$2" ;;
*) die "usage: cluster.sh up|down|status|scheduler-metrics|restart-kubelet NODE|stop-node NODE|start-node NODE|pod-pid NODE CID|net-probe NODE CID IP NODE CID IP (NODE: ${NODES[*]})" ;;
esac
