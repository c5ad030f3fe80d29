//go:build chart || integration

// Package chart tests the Helm chart in charts/ibkube: golden renders for
// several values files, the schema refusing typos, and (with the integration
// tag) a server-side dry-run of the renders against a real kube-apiserver.
//
// The helm binary comes from $HELM (make test-chart builds it);
// `make update-golden-chart` (go test -tags chart -args -update) rewrites the goldens.
package chart

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ibkube/ibkube/internal/testing/charttest"
	"github.com/ibkube/ibkube/internal/testing/errtest"
	"github.com/ibkube/ibkube/internal/testing/golden"
)

const (
	release   = "ibkube"
	namespace = "ibkube-system"
)

func kubeVersion() string {
	if v := os.Getenv("KUBE_VERSION"); v != "" {
		return v
	}
	return "1.37.2"
}

// helm runs the helm binary and returns stdout, or stderr as the error.
func helm(t testing.TB, args ...string) (string, error) {
	t.Helper()
	return charttest.Helm(t, "test-chart", args...)
}

// render is `helm template` as make manifests runs it, with extra args such
// as -f values files or --api-versions.
func render(t testing.TB, extra ...string) (string, error) {
	t.Helper()
	args := append([]string{"template", release, charttest.ChartDir(), "--namespace", namespace, "--kube-version", kubeVersion()}, extra...)
	return helm(t, args...)
}

// renderCase is one golden render: a values file under testdata plus the
// API versions the pretend cluster serves.
type renderCase struct {
	name        string
	apiVersions []string
}

// renderCases are the values files with goldens. Each testdata/<name>.values.yaml
// renders to testdata/<name>.golden.yaml.
var renderCases = []renderCase{
	{name: "defaults"},
	// Multus and the Prometheus operator installed: the NAD and the
	// ServiceMonitors appear without any value set.
	{name: "defaults-with-multus-prometheus", apiVersions: []string{"k8s.cni.cncf.io/v1", "monitoring.coreos.com/v1"}},
	{name: "cert-manager"},
	{name: "cert-manager-issuer"},
	{name: "nri-off"},
	{name: "custom-resource-names", apiVersions: []string{"k8s.cni.cncf.io/v1"}},
	{name: "ipoib-mtu-exclude"},
	{name: "hardened-extras"},
	// The PrometheusRule forced on, the Grafana dashboard ConfigMap, counters tuned.
	{name: "observability"},
	// DRA the default mode, with a RoCE pool: three DeviceClasses.
	{name: "dra"},
}

func (c renderCase) args() []string {
	args := []string{"-f", filepath.Join("testdata", c.name+".values.yaml")}
	for _, v := range c.apiVersions {
		args = append(args, "--api-versions", v)
	}
	return args
}

func TestGoldenRenders(t *testing.T) {
	for _, c := range renderCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := render(t, c.args()...)
			if err != nil {
				t.Fatal(err)
			}
			// make update-golden-chart passes -update.
			golden.Check(t, filepath.Join("testdata", c.name+".golden.yaml"), []byte(got))
		})
	}
}

// Every values file under testdata has a golden, so none is silently unused.
func TestEveryValuesFileHasACase(t *testing.T) {
	files, err := filepath.Glob("testdata/*.values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, c := range renderCases {
		known[c.name] = true
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".values.yaml")
		if !known[name] && !strings.HasPrefix(name, "invalid-") {
			t.Errorf("%s has no render case", f)
		}
	}
}

// The schema must turn a misspelt or mistyped value into an install error
// that names it, instead of a silently ignored setting.
func TestSchemaRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  []string
		want []string
	}{
		{name: "misspelt top-level key", set: []string{"webhok.replicas=3"}, want: []string{"webhok"}},
		{name: "misspelt nested key", set: []string{"webhook.failurPolicy=Ignore"}, want: []string{"failurPolicy"}},
		{name: "misspelt config field", set: []string{"webhook.config.capabilityPolcy=never"}, want: []string{"capabilityPolcy"}},
		{name: "misspelt agent key", set: []string{"agent.nri.socket=/run/nri.sock"}, want: []string{"socket"}},
		{name: "wrong type", set: []string{"webhook.replicas=two"}, want: []string{"replicas"}},
		{name: "bad enum", set: []string{"webhook.failurePolicy=Sometimes"}, want: []string{"failurePolicy"}},
		{name: "timeout out of range", set: []string{"webhook.timeoutSeconds=60"}, want: []string{"timeoutSeconds"}},
		{name: "bad resource name", set: []string{"rdmaResources.shared=shared_ib"}, want: []string{"shared"}},
		{name: "bad memlock", set: []string{"webhook.config.memlock=lots"}, want: []string{"memlock"}},
		{name: "fractional memlock (not whole bytes)", set: []string{"webhook.config.memlock=100m"}, want: []string{"memlock"}},
		{name: "zero memlock cap", set: []string{"agent.nri.memlockMax=0"}, want: []string{"memlockMax"}},
		{name: "NetworkPolicy without the API server's peers", set: []string{"webhook.networkPolicy.enabled=true"}, want: []string{"webhook.networkPolicy.admissionFrom", "konnectivity-agent"}},
		{name: "no request in flight", set: []string{"webhook.maxRequestsInFlight=0"}, want: []string{"maxRequestsInFlight"}},
		{name: "bad PDB eviction policy", set: []string{"webhook.podDisruptionBudget.unhealthyPodEvictionPolicy=Never"}, want: []string{"unhealthyPodEvictionPolicy"}},
		{name: "bad allocation mode", set: []string{"node.allocation=cdi"}, want: []string{"allocation"}},
		{name: "misspelt dra key", set: []string{"node.dra.cdiDirectory=/run/cdi"}, want: []string{"cdiDirectory"}},
		{name: "removed master key", set: []string{"networks.ipoib.master=ib0"}, want: []string{"master"}},
		{name: "IPoIB range in Azure's reserved space", set: []string{"networks.ipoib.enabled=true", "networks.ipoib.ipam.range=172.16.0.0/16"}, want: []string{"172.16.0.0/16", "Azure"}},
		{name: "IPoIB range with host bits", set: []string{"networks.ipoib.enabled=true", "networks.ipoib.ipam.range=192.168.1.0/16"}, want: []string{"host bits"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var args []string
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			_, err := render(t, args...)
			errtest.Names(t, err, tc.want...)
		})
	}
}

// A chart without Multus must install: no NAD unless the API is served or forced.
func TestOptionalAPIs(t *testing.T) {
	for _, tc := range []struct {
		name        string
		extra       []string
		wantKinds   []string
		unwantKinds []string
	}{
		{name: "plain cluster", unwantKinds: []string{"kind: NetworkAttachmentDefinition", "kind: ServiceMonitor"}},
		{name: "multus served", extra: []string{"--api-versions", "k8s.cni.cncf.io/v1"}, wantKinds: []string{"kind: NetworkAttachmentDefinition"}},
		{name: "multus served but off", extra: []string{"--api-versions", "k8s.cni.cncf.io/v1", "--set", "networks.ipoib.enabled=false"}, unwantKinds: []string{"kind: NetworkAttachmentDefinition"}},
		{name: "forced", extra: []string{"--set", "networks.ipoib.enabled=true", "--set", "monitoring.serviceMonitor.enabled=true"}, wantKinds: []string{"kind: NetworkAttachmentDefinition", "kind: ServiceMonitor"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := render(t, tc.extra...)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range tc.wantKinds {
				if !strings.Contains(out, k) {
					t.Errorf("render lacks %q", k)
				}
			}
			for _, k := range tc.unwantKinds {
				if strings.Contains(out, k) {
					t.Errorf("render has %q", k)
				}
			}
		})
	}
}
