# lib.sh: what the single-node harness (node.sh) and the four-node cluster
# (cluster.sh) do alike. Sourced, never run, once E2E_DIR and K8S_BIN are
# set. The sourcing script then sets:
#   LOG_TAG        the prefix of its log lines
#   HOST_DIRS      (array) host paths up may create; down removes them
#   CLUSTER_NAME API_IP SERVICE_CIDR: the cluster's name in certificates,
#                  kubeconfigs and etcd, the API server's address, the
#                  service range

PID_DIR=$E2E_DIR/pids
LOG_DIR=$E2E_DIR/logs
PKI=$E2E_DIR/pki
CONF=$E2E_DIR/conf
HOST_STATE=$E2E_DIR/host
KUBECONFIG_ADMIN=$E2E_DIR/kubeconfig
KUBECTL=("$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN")
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH
# containerd's own memlock: a low soft limit so an NRI raise is visible; this
# machine caps every hard limit at 8 MiB.
CONTAINERD_MEMLOCK=${CONTAINERD_MEMLOCK:-65536:8388608}
# Sysctls the kubelet (and kube-proxy) may change on the host; down restores
# them.
SYSCTLS=(kernel.panic kernel.panic_on_oops vm.overcommit_memory vm.panic_on_oom kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

log() { printf '[%s %s] %s\n' "$LOG_TAG" "$(date +%T)" "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}

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

# put FILE: write stdin to FILE only when it differs (kube-proxy exits when
# its config file changes, so a repeated up must not touch it).
put() {
	local tmp=$1.tmp
	cat >"$tmp"
	if cmp -s "$tmp" "$1"; then rm -f "$tmp"; else mv -f "$tmp" "$1"; fi
}

# ---------------------------------------------------------------- host state
record_host_state() {
	local s v d
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
	# needs /dev to be shared or slave, as it is on systemd hosts; made
	# shared before any node's mount namespace is created, /dev is a slave
	# in each of them.
	[[ -f $HOST_STATE/dev-propagation ]] || findmnt -no PROPAGATION /dev >"$HOST_STATE/dev-propagation"
	if [[ $(findmnt -no PROPAGATION /dev) == private ]]; then
		log "making /dev a shared mount (restored by down)"
		mount --make-shared /dev
	fi
	[[ -f $HOST_STATE/netns ]] || { ls /run/netns 2>/dev/null || true; } >"$HOST_STATE/netns"
}

# restore_sysctls_and_dev: the sysctls and the propagation of /dev as
# record_host_state found them.
restore_sysctls_and_dev() {
	local k v cur
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
}

# remove_recorded_dirs: the host paths up created, deepest first.
remove_recorded_dirs() {
	local d
	[[ -f $HOST_STATE/dirs ]] || return 0
	sort -r "$HOST_STATE/dirs" | while read -r d; do
		[[ -n $d && -e $d ]] || continue
		unmount_under "$d"
		log "removing $d (created by up)"
		rm -rf --one-file-system "$d" || log "could not remove $d"
	done
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

remove_cgroups() { # name...: the cgroups of that name in every hierarchy
	local c n
	for c in /sys/fs/cgroup/*/; do
		c=${c%/}
		for n in "$@"; do
			[[ -d $c/$n ]] || continue
			find "$c/$n" -depth -type d -exec rmdir {} \; 2>/dev/null || true
			if [[ -d $c/$n ]]; then log "cgroup $c/$n still busy"; fi
		done
	done
}

# ---------------------------------------------------------------- pki/config
# gen_pki [NAME SUBJECT SAN]...: a CA, the API server's and the admin's
# certificates, service-account keys, and one more certificate for each
# triple (the kubelets').
gen_pki() {
	if [[ -f $PKI/done ]]; then return; fi
	log "generating certificates and service-account keys"
	mkdir -p "$PKI"
	(
		cd "$PKI"
		openssl req -x509 -newkey rsa:2048 -nodes -days 30 -keyout ca.key -out ca.crt -subj "/CN=$CLUSTER_NAME-ca" 2>/dev/null
		cert() { # name subj san
			openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
			printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n%s' "$3" >"$1.ext"
			openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -out "$1.crt" -extfile "$1.ext" 2>/dev/null
		}
		cert apiserver "/CN=kube-apiserver" "subjectAltName=IP:$API_IP,IP:198.19.128.1,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
		cert admin "/O=system:masters/CN=$CLUSTER_NAME-admin" ""
		while (($# >= 3)); do
			cert "$1" "$2" "$3"
			shift 3
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
- name: $CLUSTER_NAME
  cluster:
    server: https://$API_IP:6443
    certificate-authority: $PKI/ca.crt
users:
- name: $2
  user:
    client-certificate: $PKI/$2.crt
    client-key: $PKI/$2.key
contexts:
- name: $CLUSTER_NAME
  context: {cluster: $CLUSTER_NAME, user: $2}
current-context: $CLUSTER_NAME
EOF
}

# bridge_plugins IP_MASQ IPAM_DIR SUBNET: the plugin list of the pods'
# network: a bridge with host-local addresses from SUBNET, and portmap.
bridge_plugins() {
	cat <<EOF
[
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": $1,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$2",
        "ranges": [[{"subnet": "$3"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
EOF
}

# containerd_config FILE ROOT STATE SOCKET CNI_BIN CNI_CONF NRI_DIR [CNI_LINE]
containerd_config() {
	put "$1" <<EOF
version = 3
root = "$2"
state = "$3"

[grpc]
  address = "$4"

[ttrpc]
  address = "$4.ttrpc"

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "docker.io/library/ibkube-pause:dev"

[plugins."io.containerd.cri.v1.runtime"]
  # No CAP_SYS_RESOURCE here: runc cannot write oom_score_adj -998.
  restrict_oom_score_adj = true
  # DRA drivers (ibkube's agent in dra mode, test/e2e/fakegpu) hand devices
  # to containers as CDI specs in /var/run/cdi. containerd 2.x has CDI on and
  # reads these two directories by default; spelled out so the node does not
  # hang on that default.
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]

[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["$5"]
  conf_dir = "$6"${8:+
  $8}

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  BinaryName = "/usr/sbin/runc"
  SystemdCgroup = false

[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "/var/run/nri/nri.sock"
  plugin_path = "$7/plugins"
  plugin_config_path = "$7/conf.d"
EOF
}

# kubelet_config FILE ADDRESS RUNTIME_SOCKET [EXTRA_YAML]
kubelet_config() {
	put "$1" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$3
address: $2
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
resolvConf: /etc/resolv.conf${4:+
$4}
EOF
}

# kube_proxy_config FILE HOSTNAME CLUSTER_CIDR BIND_ADDRESS
kube_proxy_config() {
	put "$1" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $KUBECONFIG_ADMIN
mode: iptables
hostnameOverride: $2
clusterCIDR: $3
bindAddress: $4
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

# ---------------------------------------------------------------- control plane
# control_plane_up PIDPREFIX NETNS: etcd, kube-apiserver (plus the arguments
# in the array APISERVER_EXTRA), kube-controller-manager (plus
# CONTROLLER_MANAGER_EXTRA) and kube-scheduler (at klog level
# E2E_SCHEDULER_V when set, for reading its DRA allocator) in NETNS; the API
# server's /debug/pprof only with APISERVER_PROFILING=true (make fleet
# FLEET_PROFILE=1 profiles it during the admission bursts). The controller
# manager runs without node IPAM (pod ranges are static); Kubernetes 1.37's
# has no cloud controllers left to turn off, and refuses to start when
# --controllers names one (cmd/kube-controller-manager/names).
control_plane_up() {
	local p=$1 netns=$2
	start "${p}etcd" "$netns" - /usr/bin/etcd --name "$CLUSTER_NAME" --data-dir "$E2E_DIR/etcd" \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster "$CLUSTER_NAME=http://127.0.0.1:2380" --quota-backend-bytes 4294967296
	start "${p}kube-apiserver" "$netns" - "$K8S_BIN/kube-apiserver" \
		--etcd-servers=http://127.0.0.1:2379 \
		--bind-address="$API_IP" --advertise-address="$API_IP" --secure-port=6443 \
		--service-cluster-ip-range="$SERVICE_CIDR" \
		--client-ca-file="$PKI/ca.crt" --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
		--kubelet-client-certificate="$PKI/admin.crt" --kubelet-client-key="$PKI/admin.key" \
		--kubelet-preferred-address-types=InternalIP,Hostname \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
		--authorization-mode=Node,RBAC --allow-privileged=true \
		"${APISERVER_EXTRA[@]}" \
		--enable-aggregator-routing=true \
		--profiling="${APISERVER_PROFILING:-false}" --v=1
	wait_for "kube-apiserver" 120 "${KUBECTL[@]}" get --raw /readyz
	start "${p}kube-controller-manager" "$netns" - "$K8S_BIN/kube-controller-manager" \
		--kubeconfig="$KUBECONFIG_ADMIN" --authentication-kubeconfig="$KUBECONFIG_ADMIN" --authorization-kubeconfig="$KUBECONFIG_ADMIN" \
		--bind-address=127.0.0.1 --leader-elect=false \
		--service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
		--use-service-account-credentials=true --controllers='*,-nodeipam' \
		"${CONTROLLER_MANAGER_EXTRA[@]}" \
		--profiling=false
	start "${p}kube-scheduler" "$netns" - "$K8S_BIN/kube-scheduler" \
		--kubeconfig="$KUBECONFIG_ADMIN" --authentication-kubeconfig="$KUBECONFIG_ADMIN" --authorization-kubeconfig="$KUBECONFIG_ADMIN" \
		--bind-address=127.0.0.1 --leader-elect=false --profiling=false \
		${E2E_SCHEDULER_V:+--v="$E2E_SCHEDULER_V"}
}

node_ready() { # node-name
	[[ $("${KUBECTL[@]}" get node "$1" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

# import_tarballs LOG CTR...: every image tarball into containerd (CTR is the
# ctr command line that reaches it).
import_tarballs() {
	local log=$1 t
	shift
	for t in "$IMAGES_DIR"/*.tar; do
		[[ -e $t ]] || continue
		"$@" -n k8s.io images import "$t" >>"$log" 2>&1 || die "ctr import $t failed (log: $log)"
	done
}

# delete_pods_via_api: workloads and pods through the API, so that CNI tears their
# networks down; a no-op when the API server does not answer.
delete_pods_via_api() {
	"${KUBECTL[@]}" get --raw /readyz >/dev/null 2>&1 || return 0
	log "deleting workloads and pods through the API"
	"${KUBECTL[@]}" delete mutatingwebhookconfigurations,validatingwebhookconfigurations --all --wait=false >/dev/null 2>&1 || true
	"${KUBECTL[@]}" delete daemonsets,deployments,replicasets,statefulsets,jobs --all -A --wait=false >/dev/null 2>&1 || true
	"${KUBECTL[@]}" delete pods --all -A --grace-period=1 --wait=true --timeout=90s >/dev/null 2>&1 ||
		log "some pods did not go away in 90s"
}

# stop_tasks CTR...: the sandboxes of any pods the API could not delete,
# stopped in containerd so CNI releases their addresses and network
# namespaces.
stop_tasks() {
	local ids id
	ids=$("$@" -n k8s.io tasks ls -q 2>/dev/null || true)
	for id in $ids; do "$@" -n k8s.io tasks kill -s KILL "$id" >/dev/null 2>&1 || true; done
	[[ -z $ids ]] || sleep 1
	for id in $ids; do "$@" -n k8s.io tasks delete -f "$id" >/dev/null 2>&1 || true; done
}
