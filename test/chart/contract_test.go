package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/testing/charttest"
	agentconfig "github.com/ibkube/ibkube/node/config"
	webhookconfig "github.com/ibkube/ibkube/webhook/config"
)

// TestChartDefaultsMatchTheContract ties what the chart deploys with its
// default values to the contract package: the resource names the webhook
// requests and the agent advertises, the IPoIB network, and the opt-in label
// and key prefix the MutatingWebhookConfiguration selects on. It reads the
// golden renders, which the chart-tagged tests keep equal to helm's output,
// so it runs in every `go test ./...`.
func TestChartDefaultsMatchTheContract(t *testing.T) {
	t.Parallel()
	objs, err := charttest.Defaults()
	if err != nil {
		t.Fatal(err)
	}
	configFile := func(configMap, key string) string {
		t.Helper()
		cm, err := charttest.Find(objs, "ConfigMap", configMap)
		if err != nil {
			t.Fatal(err)
		}
		data, err := charttest.Data(cm, key)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}

	wh, err := webhookconfig.Parse([]byte(configFile("ibkube-webhook-config", "webhook.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	type webhookFacts struct{ Shared, Exclusive, GPU, IPoIB string }
	if diff := cmp.Diff(
		webhookFacts{contract.ResourceSharedIB, contract.ResourceExclusiveIB, contract.ResourceGPU, contract.IPoIBNetwork},
		webhookFacts{wh.Resources.Shared, wh.Resources.Exclusive, wh.GPUResource, wh.IPoIB.Name},
	); diff != "" {
		t.Errorf("the chart's webhook config (-contract +chart):\n%s", diff)
	}

	ag, err := agentconfig.Parse([]byte(configFile("ibkube-node-agent-config", "agent.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	pools := map[string]string{}
	for _, p := range ag.Pools {
		pools[p.ResourceName] = p.Mode
	}
	wantPools := map[string]string{contract.ResourceSharedIB: agentconfig.ModeShared, contract.ResourceExclusiveIB: agentconfig.ModeExclusive}
	if diff := cmp.Diff(wantPools, pools); diff != "" {
		t.Errorf("the chart's agent pools (-contract +chart):\n%s", diff)
	}

	mwc, err := charttest.Find(objs, "MutatingWebhookConfiguration", "ibkube")
	if err != nil {
		t.Fatal(err)
	}
	hooks, _ := charttest.Field(map[string]any(mwc), "webhooks").([]any)
	if len(hooks) != 1 {
		t.Fatalf("MutatingWebhookConfiguration ibkube has %d webhooks, want 1", len(hooks))
	}
	selector, _ := charttest.Field(hooks[0], "namespaceSelector", "matchLabels").(map[string]any)
	if got := selector[contract.LabelInject]; got != contract.InjectEnabled {
		t.Errorf("namespaceSelector matchLabels[%s] = %v, want %s", contract.LabelInject, got, contract.InjectEnabled)
	}
	conds, _ := charttest.Field(hooks[0], "matchConditions").([]any)
	expr, _ := charttest.Field(conds[0], "expression").(string)
	for _, want := range []string{"'" + contract.Prefix + "'", "'" + contract.ResourceGPU + "'"} {
		if !strings.Contains(expr, want) {
			t.Errorf("matchConditions expression lacks %s:\n%s", want, expr)
		}
	}

	// The IPoIB network on the exclusive HCA names the exclusive pool.
	mtu, err := charttest.Load("ipoib-mtu-exclude")
	if err != nil {
		t.Fatal(err)
	}
	excl, err := charttest.Find(mtu, "NetworkAttachmentDefinition", contract.IPoIBNetwork+"-exclusive")
	if err != nil {
		t.Fatal(err)
	}
	annos, _ := charttest.Field(map[string]any(excl), "metadata", "annotations").(map[string]any)
	if got := annos["k8s.v1.cni.cncf.io/resourceName"]; got != contract.ResourceExclusiveIB {
		t.Errorf("NAD %s resourceName %v, want %s", excl.Name(), got, contract.ResourceExclusiveIB)
	}

	withMultus, err := charttest.Load("defaults-with-multus-prometheus")
	if err != nil {
		t.Fatal(err)
	}
	nad, err := charttest.Find(withMultus, "NetworkAttachmentDefinition", contract.IPoIBNetwork)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := charttest.Field(map[string]any(nad), "spec", "config").(string)
	var conf struct {
		Name string `json:"name"`
		IPAM struct {
			Range string `json:"range"`
		} `json:"ipam"`
	}
	if err := json.Unmarshal([]byte(raw), &conf); err != nil {
		t.Fatalf("NAD %s spec.config: %v", contract.IPoIBNetwork, err)
	}
	if conf.Name != contract.IPoIBNetwork || conf.IPAM.Range != contract.IPoIBRange {
		t.Errorf("NAD config name %q, range %q; want %q, %q", conf.Name, conf.IPAM.Range, contract.IPoIBNetwork, contract.IPoIBRange)
	}
}

// TestValuesMatchTheContract reads values.yaml itself, where a user looks
// for the defaults, for the values the contract fixes.
func TestValuesMatchTheContract(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("..", "..", "charts", "ibkube", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path []string
		want any
	}{
		{[]string{"networks", "ipoib", "name"}, contract.IPoIBNetwork},
		{[]string{"networks", "ipoib", "ipam", "range"}, contract.IPoIBRange},
	} {
		if got := charttest.Field(values, tc.path...); got != tc.want {
			t.Errorf("values.yaml %s = %v, want %v", strings.Join(tc.path, "."), got, tc.want)
		}
	}
}
