#!/usr/bin/env bash
# cluster.sh up|down|status|stop-node N|start-node N|restart-kubelet N :
# a three-node Kubernetes on one machine for the multi-node e2e scenarios
# (make e2e-cluster). See docs/e2e.md ("The cluster") for the layout and why
# each piece is the way it is; node.sh is the single-node harness.
#
# One control plane in the network namespace ibkc-cp and three nodes, each a
# different simulated host, each with its own kubelet, containerd and
# kube-proxy in a network namespace AND a mount namespace of its own: the
# kubelet always uses /var/lib/kubelet/device-plugins/kubelet.sock and
# containerd /run/containerd and /var/run/nri/nri.sock whatever their other
# paths, so every node gets private bind mounts of those (and of the CNI
# directories and its fixture tree) in a mount namespace that is a slave of
# the host's. `ip netns exec` is not used: it remounts /sys (the kubelet then
# finds no cgroup mounts); daemons start under nsenter --net --mount.
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

# The nodes: short name -> fixture, instance type, address, pod range, GPUs
# (a fake nvidia.com/gpu capacity, for placement only) and the stand-in for
# the fixture's IPoIB netdev (a veth on the "fabric" bridge; this kernel has
# no IPoIB).
NODES=(nd hb oci)
declare -A FIXTURE=([nd]=ndv5 [hb]=hb [oci]=oci-h100)
declare -A INSTANCE=([nd]=Standard_ND96isr_H100_v5 [hb]=Standard_HB120rs_v3 [oci]=BM.GPU.H100.8)
declare -A NODE_IP=([nd]=198.18.8.11 [hb]=198.18.8.12 [oci]=198.18.8.13)
declare -A POD_CIDR=([nd]=198.19.1.0/24 [hb]=198.19.2.0/24 [oci]=198.19.3.0/24)
declare -A GPUS=([nd]=8 [hb]=0 [oci]=8)
declare -A IPOIB_IF=([nd]=ibP257p0s0 [hb]=ib0)
CP_NS=ibkc-cp
CP_IP=198.18.8.10
HOST_IP=198.18.8.1
BRIDGE=ibkc-br
FABRIC=ibkc-ib
CLUSTER_POD_CIDR=198.19.0.0/16
SERVICE_CIDR=198.19.128.0/20
CONTAINERD_MEMLOCK=${CONTAINERD_MEMLOCK:-65536:8388608}

PID_DIR=$E2E_DIR/pids
LOG_DIR=$E2E_DIR/logs
PKI=$E2E_DIR/pki
CONF=$E2E_DIR/conf
HOST_STATE=$E2E_DIR/host
NODES_DIR=$E2E_DIR/nodes
RUN_DIR=/run/ibkc
MNT_DIR=$RUN_DIR/mnt
FIXTURES=/dev/ibkc-fixture
# Where every node sees its own fixture (test/e2e/values-e2e.yaml's paths).
NODE_FIXTURE=/dev/ibk-e2e-fixture
KUBECONFIG_ADMIN=$E2E_DIR/kubeconfig
GO=${GO:-go}
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH
KUBECTL=("$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN")
SYSCTLS=(kernel.panic kernel.panic_on_oops vm.overcommit_memory vm.panic_on_oom kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
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
)
# Mount points up creates on the host (empty; down removes those it made).
HOST_DIRS=(/var/lib/kubelet /var/log/pods /var/log/containers /var/lib/cni /etc/cni /etc/cni/net.d /opt/cni /opt/cni/bin
	/var/lib/ibkube /run/containerd /run/nri /run/netns /opt/containerd "$NODE_FIXTURE" "$FIXTURES" "$RUN_DIR")

log() { printf '[cluster %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

node_name() { echo "ibkc-$1"; }
mntns() { echo "$MNT_DIR/$1"; }

running() { # pidname
	local f=$PID_DIR/$1.pid
	[[ -f $f ]] && kill -0 "$(cat "$f")" 2>/dev/null
}

# start PIDNAME NETNS MNTNS CMD... : run CMD in network namespace NETNS (and
# mount namespace MNTNS unless it is -), in its own session so a signal to
# make's process group never reaches it; log to $LOG_DIR/PIDNAME.log.
start() {
	local name=$1 netns=$2 mnt=$3
	shift 3
	if running "$name"; then
		log "$name already running (pid $(cat "$PID_DIR/$name.pid"))"
		return
	fi
	local ns=(--net="/run/netns/$netns")
	[[ $mnt == - ]] || ns+=(--mount="$mnt")
	log "starting $name"
	# (fd 9 is make's e2e lock: daemons must not hold it)
	setsid nsenter "${ns[@]}" -- "$@" >>"$LOG_DIR/$name.log" 2>&1 </dev/null 9>&- &
	echo $! >"$PID_DIR/$name.pid"
}

# wait_for DESC SECONDS CMD... : poll CMD until it succeeds.
wait_for() {
	local desc=$1 secs=$2 i
	shift 2
	for ((i = 0; i < secs * 2; i++)); do
		if "$@" >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.5
	done
	die "timed out after ${secs}s waiting for $desc (logs: $LOG_DIR)"
}

stop_pid() { # pidname [signal]
	local f=$PID_DIR/$1.pid pid i sig=${2:-TERM}
	[[ -f $f ]] || return 0
	pid=$(cat "$f")
	if kill -0 "$pid" 2>/dev/null; then
		log "stopping $1 (pid $pid, SIG$sig)"
		kill -"$sig" "$pid" 2>/dev/null || true
		for ((i = 0; i < 40; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.25
		done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$f"
}

put() { # FILE: write stdin to FILE only when it differs (kube-proxy exits when its config changes)
	local tmp=$1.tmp
	cat >"$tmp"
	if cmp -s "$tmp" "$1"; then rm -f "$tmp"; else mv -f "$tmp" "$1"; fi
}

# ---------------------------------------------------------------- host state
record_host_state() {
	mkdir -p "$HOST_STATE"
	if [[ ! -f $HOST_STATE/sysctls ]]; then
		: >"$HOST_STATE/sysctls.tmp"
		for s in "${SYSCTLS[@]}"; do
			v=$(sysctl -n "$s" 2>/dev/null) && printf '%s=%s\n' "$s" "$v" >>"$HOST_STATE/sysctls.tmp"
		done
		mv "$HOST_STATE/sysctls.tmp" "$HOST_STATE/sysctls"
	fi
	if [[ ! -f $HOST_STATE/dirs ]]; then
		: >"$HOST_STATE/dirs.tmp"
		for d in "${HOST_DIRS[@]}"; do
			[[ -e $d ]] || echo "$d" >>"$HOST_STATE/dirs.tmp"
		done
		mv "$HOST_STATE/dirs.tmp" "$HOST_STATE/dirs"
	fi
	# The chart mounts the host /dev with HostToContainer propagation, which
	# needs /dev to be shared or slave; made shared before the nodes' mount
	# namespaces are created, /dev is a slave in each of them.
	[[ -f $HOST_STATE/dev-propagation ]] || findmnt -no PROPAGATION /dev >"$HOST_STATE/dev-propagation"
	if [[ $(findmnt -no PROPAGATION /dev) == private ]]; then
		log "making /dev a shared mount (restored by down)"
		mount --make-shared /dev
	fi
	[[ -f $HOST_STATE/netns ]] || { ls /run/netns 2>/dev/null || true; } >"$HOST_STATE/netns"
}

restore_host_state() {
	if [[ -f $HOST_STATE/sysctls ]]; then
		while IFS='=' read -r k v; do
			[[ -n $k ]] || continue
			cur=$(sysctl -n "$k" 2>/dev/null || true)
			if [[ $cur != "$v" ]]; then
				log "restoring sysctl $k=$v (was $cur)"
				sysctl -qw "$k=$v" || log "could not restore $k"
			fi
		done <"$HOST_STATE/sysctls"
	fi
	if [[ $(cat "$HOST_STATE/dev-propagation" 2>/dev/null) == private && $(findmnt -no PROPAGATION /dev) != private ]]; then
		log "making /dev a private mount again"
		mount --make-private /dev
	fi
	remove_cgroups
	unmount_under "$RUN_DIR" "$FIXTURES" "$NODE_FIXTURE" "$NODES_DIR"
	if [[ -f $HOST_STATE/dirs ]]; then
		# deepest first
		sort -r "$HOST_STATE/dirs" | while read -r d; do
			[[ -n $d && -e $d ]] || continue
			unmount_under "$d"
			log "removing $d (created by up)"
			rm -rf --one-file-system "$d" || log "could not remove $d"
		done
	fi
	rm -rf "$HOST_STATE"
}

unmount_under() {
	local p m
	for p in "$@"; do
		awk -v p="$p" '$2 == p || index($2, p "/") == 1 {print $2}' /proc/self/mounts | sort -r | while read -r m; do
			umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
		done
	done
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

remove_cgroups() {
	local c n
	for c in /sys/fs/cgroup/*/; do
		for n in "${NODES[@]}"; do
			[[ -d $c/ibkc-$n ]] || continue
			find "$c/ibkc-$n" -depth -type d -exec rmdir {} \; 2>/dev/null || true
			if [[ -d $c/ibkc-$n ]]; then log "cgroup $c/ibkc-$n still busy"; fi
		done
	done
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
gen_pki() {
	if [[ -f $PKI/done ]]; then return; fi
	log "generating certificates and service-account keys"
	mkdir -p "$PKI"
	(
		cd "$PKI"
		openssl req -x509 -newkey rsa:2048 -nodes -days 30 -keyout ca.key -out ca.crt -subj "/CN=ibkc-ca" 2>/dev/null
		cert() { # name subj san
			openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
			printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n%s' "$3" >"$1.ext"
			openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -out "$1.crt" -extfile "$1.ext" 2>/dev/null
		}
		cert apiserver "/CN=kube-apiserver" "subjectAltName=IP:$CP_IP,IP:198.19.128.1,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
		cert admin "/O=system:masters/CN=ibkc-admin" ""
		for n in "${NODES[@]}"; do
			cert "kubelet-$n" "/O=system:nodes/CN=system:node:$(node_name "$n")" "subjectAltName=IP:${NODE_IP[$n]}"
		done
		openssl genrsa -out sa.key 2048 2>/dev/null
		openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
		touch done
	)
}

kubeconfig() { # file cert
	put "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: ibkc
  cluster:
    server: https://$CP_IP:6443
    certificate-authority: $PKI/ca.crt
users:
- name: $2
  user:
    client-certificate: $PKI/$2.crt
    client-key: $PKI/$2.key
contexts:
- name: ibkc
  context: {cluster: ibkc, user: $2}
current-context: ibkc
EOF
}

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
    "plugins": [
      {
        "type": "bridge",
        "bridge": "cni0",
        "isGateway": true,
        "ipMasq": false,
        "hairpinMode": true,
        "ipam": {
          "type": "host-local",
          "dataDir": "$d/cni-ipam",
          "ranges": [[{"subnet": "${POD_CIDR[$n]}"}]],
          "routes": [{"dst": "0.0.0.0/0"}]
        }
      },
      {"type": "portmap", "capabilities": {"portMappings": true}}
    ]
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
	put "$c/containerd.toml" <<EOF
version = 3
root = "$d/containerd/root"
state = "/run/containerd/state"

[grpc]
  address = "/run/containerd/containerd.sock"

[ttrpc]
  address = "/run/containerd/containerd.sock.ttrpc"

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "docker.io/library/ibkube-pause:dev"

[plugins."io.containerd.cri.v1.runtime"]
  # No CAP_SYS_RESOURCE here: runc cannot write oom_score_adj -998.
  restrict_oom_score_adj = true

[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["/opt/cni/bin"]
  conf_dir = "/etc/cni/net.d"
  max_conf_num = 1

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  BinaryName = "/usr/sbin/runc"
  SystemdCgroup = false

[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "/var/run/nri/nri.sock"
  plugin_path = "$d/nri/plugins"
  plugin_config_path = "$d/nri/conf.d"
EOF
	put "$c/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
cgroupRoot: /ibkc-$n
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
address: ${NODE_IP[$n]}
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization:
  mode: Webhook
evictionHard:
  memory.available: 100Mi
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
maxPods: 250
serializeImagePulls: false
protectKernelDefaults: false
resolvConf: /etc/resolv.conf
EOF
	put "$c/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $KUBECONFIG_ADMIN
mode: iptables
hostnameOverride: $(node_name "$n")
clusterCIDR: $CLUSTER_POD_CIDR
bindAddress: ${NODE_IP[$n]}
nodePortAddresses: [primary]
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
iptables:
  masqueradeAll: true
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
}

# ---------------------------------------------------------------- control plane
control_plane_up() {
	start cp-etcd "$CP_NS" - /usr/bin/etcd --name ibkc --data-dir "$E2E_DIR/etcd" \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster ibkc=http://127.0.0.1:2380 --quota-backend-bytes 4294967296
	start cp-kube-apiserver "$CP_NS" - "$K8S_BIN/kube-apiserver" \
		--etcd-servers=http://127.0.0.1:2379 \
		--bind-address="$CP_IP" --advertise-address="$CP_IP" --secure-port=6443 \
		--service-cluster-ip-range="$SERVICE_CIDR" \
		--client-ca-file="$PKI/ca.crt" --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
		--kubelet-client-certificate="$PKI/admin.crt" --kubelet-client-key="$PKI/admin.key" \
		--kubelet-preferred-address-types=InternalIP,Hostname \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
		--authorization-mode=Node,RBAC --allow-privileged=true \
		--enable-admission-plugins=NodeRestriction \
		--enable-aggregator-routing=true \
		--profiling=false --v=1
	wait_for "kube-apiserver" 120 "${KUBECTL[@]}" get --raw /readyz
	# node-monitor-grace-period 20s (default 50s): a lost node is noticed,
	# and its pods leave the Service endpoints, within the fault scenario.
	start cp-kube-controller-manager "$CP_NS" - "$K8S_BIN/kube-controller-manager" \
		--kubeconfig="$KUBECONFIG_ADMIN" --authentication-kubeconfig="$KUBECONFIG_ADMIN" --authorization-kubeconfig="$KUBECONFIG_ADMIN" \
		--bind-address=127.0.0.1 --leader-elect=false \
		--service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
		--use-service-account-credentials=true --controllers='*,-nodeipam' \
		--node-monitor-grace-period=20s \
		--profiling=false
	start cp-kube-scheduler "$CP_NS" - "$K8S_BIN/kube-scheduler" \
		--kubeconfig="$KUBECONFIG_ADMIN" --authentication-kubeconfig="$KUBECONFIG_ADMIN" --authorization-kubeconfig="$KUBECONFIG_ADMIN" \
		--bind-address=127.0.0.1 --leader-elect=false --profiling=false
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
	local t
	for t in "$IMAGES_DIR"/*.tar; do
		[[ -e $t ]] || continue
		ctr "$1" -n k8s.io images import "$t" >>"$LOG_DIR/$1-ctr-import.log" 2>&1 || die "ctr import $t on $1 failed"
	done
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

node_ready() { # node-name
	[[ $("${KUBECTL[@]}" get node "$1" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
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
	"${KUBECTL[@]}" label node "$name" --overwrite feature.node.kubernetes.io/pci-15b3.present=true >/dev/null
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
	gen_pki
	kubeconfig "$KUBECONFIG_ADMIN" admin
	local n
	for n in "${NODES[@]}"; do
		# Built before the node's mount namespace binds it: a fixture
		# rebuilt later would be a new directory the node does not see.
		if [[ ! -d $FIXTURES/$n/sys ]]; then
			"$FIXTUREGEN" -dir "$FIXTURES/$n" -name "${FIXTURE[$n]}" >/dev/null
		fi
		mntns_up "$n"
		write_node_configs "$n"
	done
	control_plane_up
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
	"${KUBECTL[@]}" get --raw /readyz >/dev/null 2>&1 || return 0
	log "deleting workloads and pods through the API"
	"${KUBECTL[@]}" delete mutatingwebhookconfigurations,validatingwebhookconfigurations --all --wait=false >/dev/null 2>&1 || true
	"${KUBECTL[@]}" delete daemonsets,deployments,replicasets,statefulsets,jobs --all -A --wait=false >/dev/null 2>&1 || true
	"${KUBECTL[@]}" delete pods --all -A --grace-period=1 --wait=true --timeout=90s >/dev/null 2>&1 ||
		log "some pods did not go away in 90s"
}

# Sandboxes the API could not delete: stopped in containerd so CNI (Multus,
# whereabouts) releases their addresses while the API still answers.
stop_sandboxes() { # node
	running "$1-containerd" || return 0
	local ids id
	ids=$(ctr "$1" -n k8s.io tasks ls -q 2>/dev/null || true)
	for id in $ids; do ctr "$1" -n k8s.io tasks kill -s KILL "$id" >/dev/null 2>&1 || true; done
	for id in $ids; do ctr "$1" -n k8s.io tasks delete -f "$id" >/dev/null 2>&1 || true; done
}

down() {
	[[ $(id -u) == 0 ]] || die "cluster down needs root"
	local n
	delete_pods
	for n in "${NODES[@]}"; do
		stop_pid "$n-kube-proxy"
		stop_pid "$n-kubelet"
		stop_sandboxes "$n"
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
stop-node) need_node "${2:-}" && stop_node "$2" ;;
start-node) need_node "${2:-}" && start_node "$2" ;;
*) die "usage: cluster.sh up|down|status|restart-kubelet NODE|stop-node NODE|start-node NODE|pod-pid NODE CID|net-probe NODE CID IP NODE CID IP (NODE: ${NODES[*]})" ;;
esac
