#!/usr/bin/env bash
# demo.sh: run by `make demo` after `make e2e-up`. Installs the chart on the
# e2e node, runs an annotated pod and shows what ibkube did to it.
set -euo pipefail
: "${ROOT:?}" "${E2E_DIR:?}" "${K8S_BIN:?}" "${HELM:?}" "${BIN:?}"
export KUBECONFIG=$E2E_DIR/kubeconfig
kubectl=("$K8S_BIN/kubectl")
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
FIXTURE=/dev/ibk-e2e-fixture

say "simulated ND H100 v5 host (8 InfiniBand HCAs, real char devices) in $FIXTURE"
go run "$ROOT/test/e2e/fixturegen" -dir "$FIXTURE" -name ndv5
ls -l "$FIXTURE/dev/infiniband" | head -4

agent=true
if [[ ! -x $BIN/ibkube-node-agent ]]; then
	echo "note: cmd/ibkube-node-agent is not built yet; installing the webhook only"
	agent=false
fi
# No Multus on this node, but its CRD, so the chart creates the IPoIB network.
nad_module=$(cd "$ROOT" && go list -m -f '{{.Dir}}' github.com/k8snetworkplumbingwg/network-attachment-definition-client)
"${kubectl[@]}" apply -f "$nad_module/artifacts/networks-crd.yaml" >/dev/null
"${kubectl[@]}" wait --for=condition=Established --timeout=60s crd/network-attachment-definitions.k8s.cni.cncf.io >/dev/null
say "helm install ibkube (chart charts/ibkube, image ibkube:dev imported into containerd)"
"$HELM" upgrade --install ibkube "$ROOT/charts/ibkube" -n ibkube-system --create-namespace \
	-f "$ROOT/test/e2e/values-e2e.yaml" --set agent.enabled=$agent --wait --timeout 5m
"${kubectl[@]}" -n ibkube-system get pods -o wide
if $agent; then
	printf 'waiting for the node to advertise rdma/ib...'
	for _ in $(seq 60); do
		n=$("${kubectl[@]}" get node ibk-e2e -o 'jsonpath={.status.allocatable.rdma/ib}' 2>/dev/null || true)
		[[ -n $n && $n != 0 ]] && break
		sleep 2
	done
	echo " rdma/ib=$n rdma/shared_ib=$("${kubectl[@]}" get node ibk-e2e -o 'jsonpath={.status.allocatable.rdma/shared_ib}')"
fi

say "opt a namespace in: label infiniband.azure.com/inject=enabled"
"${kubectl[@]}" create namespace ibkube-demo --dry-run=client -o yaml | "${kubectl[@]}" apply -f - >/dev/null
"${kubectl[@]}" label namespace ibkube-demo --overwrite infiniband.azure.com/inject=enabled pod-security.kubernetes.io/enforce=baseline
"${kubectl[@]}" -n ibkube-demo delete pod trainer --ignore-not-found --wait=true >/dev/null
"${kubectl[@]}" create -f "$ROOT/test/e2e/demo/pod.yaml"

say "the pod as written (left) and as admitted (right): what ibkube changed"
podview=$E2E_DIR/podview
go build -o "$podview" "$ROOT/test/e2e/podview"
diff -y -W 170 <("$podview" "$ROOT/test/e2e/demo/pod.yaml") \
	<("${kubectl[@]}" -n ibkube-demo get pod trainer -o yaml | "$podview" -) || true
echo "(annotations, containers' env/resources/securityContext/volumeMounts and volumes;"
echo " the whole pod: kubectl -n ibkube-demo get pod trainer -o yaml)"

say "waiting for the pod to run"
if ! "${kubectl[@]}" -n ibkube-demo wait pod/trainer --for=condition=Ready --timeout=120s; then
	"${kubectl[@]}" -n ibkube-demo describe pod trainer | tail -20
	exit 1
fi
say "what the container really got (its own report)"
"${kubectl[@]}" -n ibkube-demo logs trainer | head -1 | { python3 -m json.tool 2>/dev/null || cat; }

cat <<MSG

The node runs in network namespace ibk-e2e (API server https://198.18.0.2:6443).
  export KUBECONFIG=$KUBECONFIG
  $K8S_BIN/kubectl get pods -A
  $K8S_BIN/kubectl describe node ibk-e2e     # rdma/ib, rdma/shared_ib
Tear it down and restore the host: make demo-down
MSG
