#!/usr/bin/env bash
# node.sh up|down|status : a single-node Kubernetes inside the network namespace
# ibk-e2e, for the e2e tests and `make demo`. See docs/e2e.md and
# /work/shared/LOCAL_CLUSTER.md for why each piece is the way it is.
#
# Environment (set by hack/make/e2e.mk): ROOT, E2E_DIR, K8S_BIN, CONTAINERD_BIN,
# IMAGES_DIR, KUBE_VERSION.
#
# up is idempotent (a running daemon is kept), down stops only the processes up
# recorded, deletes pods through the API first (so CNI tears their networks
# down), and restores every host change up recorded under $E2E_DIR/host.
set -euo pipefail

: "${ROOT:?}" "${E2E_DIR:?}" "${K8S_BIN:?}" "${CONTAINERD_BIN:?}" "${IMAGES_DIR:?}"
NETNS=ibk-e2e
NODE_NAME=ibk-e2e
HOST_IP=198.18.0.1
NODE_IP=198.18.0.2
POD_CIDR=198.19.0.0/24
SERVICE_CIDR=198.19.128.0/20
INSTANCE_TYPE=${INSTANCE_TYPE:-Standard_ND96isr_H100_v5}
# containerd's own memlock: a low soft limit so an NRI raise is visible; this
# machine caps every hard limit at 8 MiB.
CONTAINERD_MEMLOCK=${CONTAINERD_MEMLOCK:-65536:8388608}

PID_DIR=$E2E_DIR/pids
LOG_DIR=$E2E_DIR/logs
PKI=$E2E_DIR/pki
CONF=$E2E_DIR/conf
HOST_STATE=$E2E_DIR/host
RUN_DIR=/run/ibk-e2e
CTRD_SOCK=$RUN_DIR/containerd/containerd.sock
KUBELET_ROOT=/var/lib/kubelet
KUBECONFIG_ADMIN=$E2E_DIR/kubeconfig
NSENTER=(nsenter --net=/run/netns/$NETNS --)
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH
KUBECTL=("$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN")
# Sysctls the kubelet (and kube-proxy) may change on the host.
SYSCTLS=(kernel.panic kernel.panic_on_oops vm.overcommit_memory vm.panic_on_oom kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
# Host paths the node creates; down removes the ones that did not exist before.
HOST_DIRS=(/var/lib/kubelet /var/log/pods /var/log/containers /var/run/nri /run/containerd /opt/containerd
	/var/lib/ibkube /var/lib/cni /etc/cni /opt/cni /opt/nri /etc/nri "$RUN_DIR" /dev/ibk-e2e-fixture /run/netns
	/var/run/cdi)
CGROUP_NAMES=(kubepods)

log() { printf '[e2e %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

running() { # name
	local f=$PID_DIR/$1.pid
	[[ -f $f ]] && kill -0 "$(cat "$f")" 2>/dev/null
}

# start NAME CMD... : run CMD in the node's network namespace, in its own
# session (so a signal to make's process group never reaches it), logging to
# $LOG_DIR/NAME.log and recording its PID.
start() {
	local name=$1
	shift
	if running "$name"; then
		log "$name already running (pid $(cat "$PID_DIR/$name.pid"))"
		return
	fi
	log "starting $name"
	# (fd 9 is make's e2e lock: daemons must not hold it)
	setsid "${NSENTER[@]}" "$@" >>"$LOG_DIR/$name.log" 2>&1 </dev/null 9>&- &
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
	# needs /dev to be a shared (or slave) mount, as it is on systemd hosts.
	if [[ ! -f $HOST_STATE/dev-propagation ]]; then
		findmnt -no PROPAGATION /dev >"$HOST_STATE/dev-propagation"
	fi
	if [[ $(findmnt -no PROPAGATION /dev) == private ]]; then
		log "making /dev a shared mount (restored by down)"
		mount --make-shared /dev
	fi
	if [[ ! -f $HOST_STATE/netns ]]; then
		(ls /run/netns 2>/dev/null || true) >"$HOST_STATE/netns"
	fi
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
	remove_cgroups
	if [[ -f $HOST_STATE/dirs ]]; then
		while read -r d; do
			[[ -n $d && -e $d ]] || continue
			unmount_under "$d"
			log "removing $d (created by e2e-up)"
			rm -rf --one-file-system "$d" || log "could not remove $d"
		done <"$HOST_STATE/dirs"
	fi
	# Left-over plugin sockets in a device-plugins dir that existed before.
	if [[ -d $KUBELET_ROOT/device-plugins ]]; then
		rm -f "$KUBELET_ROOT"/device-plugins/kubelet.sock "$KUBELET_ROOT"/device-plugins/kubelet_internal_checkpoint
	fi
	rm -rf "$HOST_STATE"
}

unmount_under() {
	local p m
	for p in "$@"; do
		# deepest first
		awk -v p="$p" '$2 == p || index($2, p "/") == 1 {print $2}' /proc/self/mounts | sort -r | while read -r m; do
			umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
		done
	done
}

remove_cgroups() {
	local c n d
	for c in /sys/fs/cgroup/*; do
		for n in "${CGROUP_NAMES[@]}"; do
			[[ -d $c/$n ]] || continue
			find "$c/$n" -depth -type d -exec rmdir {} \; 2>/dev/null || true
			if [[ -d $c/$n ]]; then log "cgroup $c/$n still busy"; fi
		done
	done
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
gen_pki() {
	[[ -f $PKI/done ]] && return
	log "generating certificates and service-account keys"
	mkdir -p "$PKI"
	cd "$PKI"
	openssl req -x509 -newkey rsa:2048 -nodes -days 30 -keyout ca.key -out ca.crt -subj "/CN=ibk-e2e-ca" 2>/dev/null
	cert() { # name subj san
		openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
		printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n%s' "$3" >"$1.ext"
		openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -out "$1.crt" -extfile "$1.ext" 2>/dev/null
	}
	cert apiserver "/CN=kube-apiserver" "subjectAltName=IP:$NODE_IP,IP:198.19.128.1,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	cert admin "/O=system:masters/CN=ibk-e2e-admin" ""
	cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" ""
	openssl genrsa -out sa.key 2048 2>/dev/null
	openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
	touch done
	cd - >/dev/null
}

# put FILE: write stdin to FILE only when it differs (kube-proxy exits when
# its config file changes, so a repeated up must not touch it).
put() {
	local tmp=$1.tmp
	cat >"$tmp"
	if cmp -s "$tmp" "$1"; then rm -f "$tmp"; else mv -f "$tmp" "$1"; fi
}

kubeconfig() { # file cert
	put "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: ibk-e2e
  cluster:
    server: https://$NODE_IP:6443
    certificate-authority: $PKI/ca.crt
users:
- name: $2
  user:
    client-certificate: $PKI/$2.crt
    client-key: $PKI/$2.key
contexts:
- name: ibk-e2e
  context: {cluster: ibk-e2e, user: $2}
current-context: ibk-e2e
EOF
}

write_configs() {
	mkdir -p "$CONF" "$E2E_DIR/cni/net.d" "$E2E_DIR/cni/ipam"
	kubeconfig "$KUBECONFIG_ADMIN" admin
	kubeconfig "$CONF/kubelet.kubeconfig" kubelet
	put "$E2E_DIR/cni/net.d/10-ibk-e2e.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "ibk-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$E2E_DIR/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
	put "$CONF/containerd.toml" <<EOF
version = 3
root = "$E2E_DIR/containerd/root"
state = "$RUN_DIR/containerd/state"

[grpc]
  address = "$CTRD_SOCK"

[ttrpc]
  address = "$CTRD_SOCK.ttrpc"

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "docker.io/library/ibkube-pause:dev"

[plugins."io.containerd.cri.v1.runtime"]
  # DRA drivers (ibkube's agent in dra mode, test/e2e/fakegpu) hand devices
  # to containers as CDI specs in /var/run/cdi. containerd 2.x has CDI on and
  # reads these two directories by default; spelled out so the e2e node does
  # not hang on that default.
  # No CAP_SYS_RESOURCE here: runc cannot write oom_score_adj -998.
  restrict_oom_score_adj = true
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]

[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = "$E2E_DIR/cni/net.d"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  BinaryName = "/usr/sbin/runc"
  SystemdCgroup = false

[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "/var/run/nri/nri.sock"
  plugin_path = "$E2E_DIR/nri/plugins"
  plugin_config_path = "$E2E_DIR/nri/conf.d"
EOF
	put "$CONF/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$CTRD_SOCK
address: $NODE_IP
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
# The kubelet copies device health into the Node's allocatable only when it
# computes node status (default every 10 s); 1 s lets scenario 5b measure the
# agent's own port-down path rather than that period.
nodeStatusUpdateFrequency: 1s
serializeImagePulls: false
protectKernelDefaults: false
resolvConf: /etc/resolv.conf
EOF
	put "$CONF/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $KUBECONFIG_ADMIN
mode: iptables
hostnameOverride: $NODE_NAME
clusterCIDR: $POD_CIDR
bindAddress: $NODE_IP
nodePortAddresses: [primary]
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# Pods on one bridge reach services through the namespace's routing, so every
# service connection is masqueraded (no br_netfilter needed on the host).
iptables:
  masqueradeAll: true
# Leave the host's conntrack sysctls alone.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
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
	gen_pki
	write_configs

	start etcd /usr/bin/etcd --name ibk-e2e --data-dir "$E2E_DIR/etcd" \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster ibk-e2e=http://127.0.0.1:2380 --quota-backend-bytes 4294967296
	# DRA needs no flag on 1.37.2: resource.k8s.io/v1 is served by default,
	# and every gate ibkube's DRA mode and the e2e's DRA scenarios use is on by
	# default in every component (pkg/features/kube_features.go:
	# DRAExtendedResource and DRADeviceTaints GA, DRAConsumableCapacity and
	# ResourceHealthStatus beta and on), so the node tests the defaults a
	# cluster ships with. docs/dra.md lists them.
	start kube-apiserver "$K8S_BIN/kube-apiserver" \
		--etcd-servers=http://127.0.0.1:2379 \
		--bind-address="$NODE_IP" --advertise-address="$NODE_IP" --secure-port=6443 \
		--service-cluster-ip-range="$SERVICE_CIDR" \
		--client-ca-file="$PKI/ca.crt" --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
		--kubelet-client-certificate="$PKI/admin.crt" --kubelet-client-key="$PKI/admin.key" \
		--kubelet-preferred-address-types=InternalIP,Hostname \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
		--authorization-mode=Node,RBAC --allow-privileged=true \
		--enable-aggregator-routing=true \
		--profiling=false --v=1
	wait_for "kube-apiserver" 120 "${KUBECTL[@]}" get --raw /readyz
	start kube-controller-manager "$K8S_BIN/kube-controller-manager" \
		--kubeconfig="$KUBECONFIG_ADMIN" --authentication-kubeconfig="$KUBECONFIG_ADMIN" --authorization-kubeconfig="$KUBECONFIG_ADMIN" \
		--bind-address=127.0.0.1 --leader-elect=false \
		--service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
		--use-service-account-credentials=true --controllers='*,-nodeipam' \
		--profiling=false
	start kube-scheduler "$K8S_BIN/kube-scheduler" \
		--kubeconfig="$KUBECONFIG_ADMIN" --authentication-kubeconfig="$KUBECONFIG_ADMIN" --authorization-kubeconfig="$KUBECONFIG_ADMIN" \
		--bind-address=127.0.0.1 --leader-elect=false --profiling=false
	start containerd env PATH="$CONTAINERD_BIN:/usr/sbin:/usr/bin:/sbin:/bin" \
		prlimit --memlock="$CONTAINERD_MEMLOCK" -- "$CONTAINERD_BIN/containerd" --config "$CONF/containerd.toml"
	wait_for "containerd" 60 "$CONTAINERD_BIN/ctr" --address "$CTRD_SOCK" version
	import_images
	start_kubelet
	start kube-proxy "$K8S_BIN/kube-proxy" --config="$CONF/kube-proxy.yaml"
	wait_for "node $NODE_NAME Ready" 180 node_ready
	# A label the kubelet may not set itself (NodeRestriction): what Node
	# Feature Discovery would put on a node with a Mellanox HCA.
	"${KUBECTL[@]}" label node "$NODE_NAME" --overwrite feature.node.kubernetes.io/pci-15b3.present=true >/dev/null
	wait_for "default service account" 60 "${KUBECTL[@]}" -n default get serviceaccount default
	log "node $NODE_NAME is Ready; kubectl: KUBECONFIG=$KUBECONFIG_ADMIN $K8S_BIN/kubectl get pods -A"
}

start_kubelet() {
	start kubelet "$K8S_BIN/kubelet" --config="$CONF/kubelet.yaml" \
		--kubeconfig="$CONF/kubelet.kubeconfig" \
		--hostname-override="$NODE_NAME" --node-ip="$NODE_IP" \
		--node-labels="node.kubernetes.io/instance-type=$INSTANCE_TYPE" --v=1
}

# restart_kubelet: the fault scenario. The kubelet wipes its device-plugins
# directory on start; plugins must notice and register again.
restart_kubelet() {
	stop_pid kubelet
	start_kubelet
	wait_for "kubelet.sock re-created" 60 test -S "$KUBELET_ROOT/device-plugins/kubelet.sock"
	wait_for "node $NODE_NAME Ready" 120 node_ready
}

node_ready() {
	[[ $("${KUBECTL[@]}" get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

import_images() {
	local t
	for t in "$IMAGES_DIR"/*.tar; do
		[[ -e $t ]] || continue
		"$CONTAINERD_BIN/ctr" --address "$CTRD_SOCK" -n k8s.io images import "$t" >>"$LOG_DIR/ctr-import.log" 2>&1 ||
			die "ctr import $t failed"
	done
}

stop_pid() { # name
	local f=$PID_DIR/$1.pid pid i
	[[ -f $f ]] || return 0
	pid=$(cat "$f")
	if kill -0 "$pid" 2>/dev/null; then
		log "stopping $1 (pid $pid)"
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < 40; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.25
		done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$f"
}

delete_pods() {
	running kube-apiserver && running kubelet && running containerd || return 0
	"${KUBECTL[@]}" get --raw /readyz >/dev/null 2>&1 || return 0
	log "deleting workloads and pods through the API"
	"${KUBECTL[@]}" delete mutatingwebhookconfigurations,validatingwebhookconfigurations --all --wait=false >/dev/null 2>&1 || true
	"${KUBECTL[@]}" delete daemonsets,deployments,replicasets,statefulsets,jobs --all -A --wait=false >/dev/null 2>&1 || true
	"${KUBECTL[@]}" delete pods --all -A --grace-period=1 --wait=true --timeout=90s >/dev/null 2>&1 ||
		log "some pods did not go away in 90s"
}

# The sandboxes of any pods the API could not delete: stop them in containerd so
# CNI releases their addresses and network namespaces.
stop_sandboxes() {
	running containerd || return 0
	local c=("$CONTAINERD_BIN/ctr" --address "$CTRD_SOCK" -n k8s.io)
	local ids
	ids=$("${c[@]}" tasks ls -q 2>/dev/null || true)
	for id in $ids; do
		"${c[@]}" tasks kill -s KILL "$id" >/dev/null 2>&1 || true
	done
	sleep 1
	for id in $ids; do
		"${c[@]}" tasks delete -f "$id" >/dev/null 2>&1 || true
	done
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
	stop_sandboxes
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
