//go:build chart || integration

package chart

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ibkube/ibkube/contract"
	agentconfig "github.com/ibkube/ibkube/node/config"
)

// TestChartFallbacksMatchTheContract renders the chart where its templates
// fall back to a resource name of their own (one pool renamed, the other
// left to the chart), and holds that name to the contract.
func TestChartFallbacksMatchTheContract(t *testing.T) {
	for _, tc := range []struct {
		set  string
		want map[string]string
	}{
		{"rdmaResources.shared=rdma/site_shared", map[string]string{"rdma/site_shared": agentconfig.ModeShared, contract.ResourceExclusiveIB: agentconfig.ModeExclusive}},
		{"rdmaResources.exclusive=rdma/site_ib", map[string]string{contract.ResourceSharedIB: agentconfig.ModeShared, "rdma/site_ib": agentconfig.ModeExclusive}},
	} {
		t.Run(tc.set, func(t *testing.T) {
			t.Parallel()
			out, err := render(t, "--set", tc.set)
			if err != nil {
				t.Fatal(err)
			}
			var agentYAML string
			for _, obj := range decodeAll(t, out) {
				if obj.GetKind() == "ConfigMap" {
					files, _, _ := unstructuredStringMap(obj.Object, "data")
					if f, ok := files["agent.yaml"]; ok {
						agentYAML = f
					}
				}
			}
			cfg, err := agentconfig.Parse([]byte(agentYAML))
			if err != nil {
				t.Fatalf("agent.yaml: %v\n%s", err, agentYAML)
			}
			got := map[string]string{}
			for _, p := range cfg.Pools {
				got[p.ResourceName] = p.Mode
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("agent pools (-want +got):\n%s", diff)
			}
		})
	}
}
