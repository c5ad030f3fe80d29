//go:build chart || integration

package chart

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestRenderFacts checks, straight from the renders, what the issue promises
// users of the chart, so a careless `make update-golden-chart` cannot bless
// losing it: the webhook's availability and hardening, what the webhook
// configuration selects, the agent's placement, and the optional pieces
// (cert-manager, NetworkPolicy, ServiceMonitor) wired to what they serve.
func TestRenderFacts(t *testing.T) {
	t.Parallel()
	objs := func(t *testing.T, valuesFile string, apiVersions ...string) map[string]*unstructured.Unstructured {
		t.Helper()
		out, err := render(t, renderCase{name: valuesFile, apiVersions: apiVersions}.args()...)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]*unstructured.Unstructured{}
		for _, o := range decodeAll(t, out) {
			m[o.GetKind()+"/"+o.GetName()] = o
		}
		return m
	}
	get := func(t *testing.T, m map[string]*unstructured.Unstructured, key string) map[string]any {
		t.Helper()
		o, ok := m[key]
		if !ok {
			t.Fatalf("render has no %s", key)
		}
		return o.Object
	}
	// at reads a value by path; ints index lists.
	at := func(v any, path ...any) any {
		for _, p := range path {
			switch k := p.(type) {
			case string:
				m, _ := v.(map[string]any)
				v = m[k]
			case int:
				l, _ := v.([]any)
				if k >= len(l) {
					return nil
				}
				v = l[k]
			}
		}
		return v
	}
	want := func(t *testing.T, what string, got, want any) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}

	t.Run("defaults", func(t *testing.T) {
		t.Parallel()
		m := objs(t, "defaults")
		dep := get(t, m, "Deployment/ibkube-webhook")
		pod := at(dep, "spec", "template", "spec")
		c := at(pod, "containers", 0)
		want(t, "webhook replicas", at(dep, "spec", "replicas"), 2)
		want(t, "spread topologyKey", at(pod, "topologySpreadConstraints", 0, "topologyKey"), "kubernetes.io/hostname")
		// Replicas never share a node while another could take one; on one
		// node (one domain, skew 0) both still run.
		want(t, "spread whenUnsatisfiable", at(pod, "topologySpreadConstraints", 0, "whenUnsatisfiable"), "DoNotSchedule")
		want(t, "spread nodeTaintsPolicy", at(pod, "topologySpreadConstraints", 0, "nodeTaintsPolicy"), "Honor")
		want(t, "GOMEMLIMIT (90% of the 256Mi limit)", envValue(at(c, "env"), "GOMEMLIMIT"), "230MiB")
		want(t, "liveness probe", at(c, "livenessProbe", "httpGet", "path"), "/healthz")
		want(t, "readiness probe", at(c, "readinessProbe", "httpGet", "path"), "/readyz")
		if at(c, "resources", "requests", "cpu") == nil || at(c, "resources", "requests", "memory") == nil {
			t.Errorf("webhook container has no cpu/memory requests: %v", at(c, "resources"))
		}
		want(t, "runAsNonRoot", at(pod, "securityContext", "runAsNonRoot"), true)
		want(t, "seccomp", at(pod, "securityContext", "seccompProfile", "type"), "RuntimeDefault")
		want(t, "readOnlyRootFilesystem", at(c, "securityContext", "readOnlyRootFilesystem"), true)
		want(t, "allowPrivilegeEscalation", at(c, "securityContext", "allowPrivilegeEscalation"), false)
		want(t, "capabilities dropped", at(c, "securityContext", "capabilities", "drop"), []any{"ALL"})

		pdb := get(t, m, "PodDisruptionBudget/ibkube-webhook")
		want(t, "PDB minAvailable", at(pdb, "spec", "minAvailable"), 1)
		want(t, "PDB unhealthyPodEvictionPolicy", at(pdb, "spec", "unhealthyPodEvictionPolicy"), "AlwaysAllow")
		want(t, "PDB selector", at(pdb, "spec", "selector", "matchLabels"), at(dep, "spec", "selector", "matchLabels"))

		hook := at(get(t, m, "MutatingWebhookConfiguration/ibkube"), "webhooks", 0)
		want(t, "rules", at(hook, "rules"), []any{map[string]any{"apiGroups": []any{""}, "apiVersions": []any{"v1"},
			"operations": []any{"CREATE"}, "resources": []any{"pods"}, "scope": "Namespaced"}})
		want(t, "namespaceSelector opt-in", at(hook, "namespaceSelector", "matchLabels", "infiniband.azure.com/inject"), "enabled")
		excluded, _ := at(hook, "namespaceSelector", "matchExpressions", 0, "values").([]any)
		if !slices.Contains(excluded, any(namespace)) || !slices.Contains(excluded, any("kube-system")) {
			t.Errorf("namespaceSelector excludes %v, want %s and kube-system", excluded, namespace)
		}
		if expr, _ := at(hook, "matchConditions", 0, "expression").(string); !strings.Contains(expr, "infiniband.azure.com/") || !strings.Contains(expr, "nvidia.com/gpu") {
			t.Errorf("matchConditions %q: want pods with an ibkube annotation or a GPU only", expr)
		}
		want(t, "sideEffects", at(hook, "sideEffects"), "None")
		want(t, "reinvocationPolicy", at(hook, "reinvocationPolicy"), "IfNeeded")
		want(t, "failurePolicy", at(hook, "failurePolicy"), "Fail")
		if s, _ := strconv.Atoi(fmt.Sprint(at(hook, "timeoutSeconds"))); s < 1 || s > 10 {
			t.Errorf("timeoutSeconds = %v, want a small value (1-10)", at(hook, "timeoutSeconds"))
		}

		ds := at(get(t, m, "DaemonSet/ibkube-node-agent"), "spec", "template", "spec")
		want(t, "agent priorityClassName", at(ds, "priorityClassName"), "system-node-critical")
		want(t, "agent hostNetwork", at(ds, "hostNetwork"), true)
		if a := fmt.Sprint(at(ds, "affinity")); !strings.Contains(a, "feature.node.kubernetes.io/pci-15b3.present") {
			t.Errorf("agent affinity %s does not select Mellanox PCI presence (NFD)", a)
		}
		if tol := fmt.Sprint(at(ds, "tolerations")); !strings.Contains(tol, "nvidia.com/gpu") {
			t.Errorf("agent tolerations %s do not tolerate GPU taints", tol)
		}
		// A memlock cap by default, and injected pods ask for exactly it.
		if args := fmt.Sprint(at(ds, "containers", 0, "args")); !strings.Contains(args, "--memlock-max=64Gi") {
			t.Errorf("agent args %s: want the default --memlock-max=64Gi", args)
		}
		if cfg := fmt.Sprint(at(get(t, m, "ConfigMap/ibkube-webhook-config"), "data", "webhook.yaml")); !strings.Contains(cfg, "memlock: 64Gi") {
			t.Errorf("webhook config %s: want memlock 64Gi, the agent's cap", cfg)
		}
		if vols := fmt.Sprint(at(ds, "volumes")); !strings.Contains(vols, "path:/proc") {
			t.Errorf("agent volumes %s: with NRI on, the host /proc is needed for the runtime's limits", vols)
		}
	})

	t.Run("NRI off: no /proc, no memlock cap", func(t *testing.T) {
		t.Parallel()
		m := objs(t, "nri-off")
		ds := at(get(t, m, "DaemonSet/ibkube-node-agent"), "spec", "template", "spec")
		if vols := fmt.Sprint(at(ds, "volumes")); strings.Contains(vols, "path:/proc") {
			t.Errorf("agent volumes %s mount the host /proc although NRI is off", vols)
		}
		if args := fmt.Sprint(at(ds, "containers", 0, "args")); strings.Contains(args, "--proc-root") || strings.Contains(args, "--memlock-max") {
			t.Errorf("agent args %s: --proc-root and --memlock-max mean nothing without NRI", args)
		}
		if cfg := fmt.Sprint(at(get(t, m, "ConfigMap/ibkube-webhook-config"), "data", "webhook.yaml")); strings.Contains(cfg, "memlock") {
			t.Errorf("webhook config %s: without NRI no cap applies, memlock stays the binary's default", cfg)
		}
	})

	t.Run("cert-manager", func(t *testing.T) {
		t.Parallel()
		m := objs(t, "cert-manager")
		mwc := get(t, m, "MutatingWebhookConfiguration/ibkube")
		want(t, "inject-ca-from", at(mwc, "metadata", "annotations", "cert-manager.io/inject-ca-from"), namespace+"/ibkube-webhook")
		cert := get(t, m, "Certificate/ibkube-webhook")
		if dns := fmt.Sprint(at(cert, "spec", "dnsNames")); !strings.Contains(dns, "ibkube-webhook."+namespace+".svc") {
			t.Errorf("serving Certificate dnsNames %s lack the Service's name", dns)
		}
		pod := at(get(t, m, "Deployment/ibkube-webhook"), "spec", "template", "spec")
		if args := fmt.Sprint(at(pod, "containers", 0, "args")); !strings.Contains(args, "--cert-management=external") {
			t.Errorf("webhook args %s: with cert-manager the webhook must not manage its own certificates", args)
		}
		if vols := fmt.Sprint(at(pod, "volumes")); !strings.Contains(vols, "secretName:"+fmt.Sprint(at(cert, "spec", "secretName"))) {
			t.Errorf("webhook volumes %s do not mount the Certificate's Secret %v", vols, at(cert, "spec", "secretName"))
		}
	})

	t.Run("NetworkPolicy and ServiceMonitor", func(t *testing.T) {
		t.Parallel()
		m := objs(t, "hardened-extras", "monitoring.coreos.com/v1")
		dep := get(t, m, "Deployment/ibkube-webhook")
		np := get(t, m, "NetworkPolicy/ibkube-webhook")
		want(t, "NetworkPolicy podSelector", at(np, "spec", "podSelector", "matchLabels"), at(dep, "spec", "selector", "matchLabels"))
		admission, metrics := at(np, "spec", "ingress", 0), at(np, "spec", "ingress", 1)
		want(t, "admission port", at(admission, "ports", 0, "port"), 9443)
		want(t, "admission only from the API server's peers", at(admission, "from"), []any{map[string]any{"ipBlock": map[string]any{"cidr": "10.224.0.4/32"}}})
		want(t, "metrics port", at(metrics, "ports", 0, "port"), 8080)
		want(t, "metrics only from the monitoring namespace", at(metrics, "from", 0, "namespaceSelector", "matchLabels", "kubernetes.io/metadata.name"), "monitoring")
		if n := len(at(np, "spec", "ingress").([]any)); n != 2 {
			t.Errorf("NetworkPolicy has %d ingress rules, want 2 (admission, metrics)", n)
		}
		if args := fmt.Sprint(at(dep, "spec", "template", "spec", "containers", 0, "args")); !strings.Contains(args, "--max-requests-in-flight=4") {
			t.Errorf("webhook args %s lack --max-requests-in-flight=4", args)
		}
		sm := get(t, m, "ServiceMonitor/ibkube-webhook")
		svc := get(t, m, "Service/ibkube-webhook")
		for k, v := range at(sm, "spec", "selector", "matchLabels").(map[string]any) {
			want(t, "Service label "+k+" the ServiceMonitor selects", at(svc, "metadata", "labels", k), v)
		}
		port := at(sm, "spec", "endpoints", 0, "port")
		if ports := fmt.Sprint(at(svc, "spec", "ports")); !strings.Contains(ports, fmt.Sprintf("name:%v", port)) {
			t.Errorf("ServiceMonitor scrapes port %v, the Service has %s", port, ports)
		}
	})
}

// envValue is the value of the env var name in a container's env list.
func envValue(env any, name string) any {
	l, _ := env.([]any)
	for _, e := range l {
		if m, _ := e.(map[string]any); m["name"] == name {
			return m["value"]
		}
	}
	return nil
}
