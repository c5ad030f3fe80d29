//go:build chart || integration

package chart

import (
	"os"
	"path/filepath"
	"testing"

	agentconfig "github.com/ibkube/ibkube/node/config"
	webhookconfig "github.com/ibkube/ibkube/webhook/config"
)

// The config files the chart writes must be accepted by the binaries that
// read them: a values combination that renders but fails the webhook's or
// the agent's strict parser would crash-loop the pods.
func TestRenderedConfigsParse(t *testing.T) {
	for _, c := range renderCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(filepath.Join("testdata", c.name+".golden.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			found := map[string]bool{}
			for _, obj := range decodeAll(t, string(data)) {
				if obj.GetKind() != "ConfigMap" {
					continue
				}
				files, _, _ := unstructuredStringMap(obj.Object, "data")
				if f, ok := files["webhook.yaml"]; ok {
					found["webhook.yaml"] = true
					if _, err := webhookconfig.Parse([]byte(f)); err != nil {
						t.Errorf("ConfigMap %s webhook.yaml is refused by the webhook: %v\n%s", obj.GetName(), err, f)
					}
				}
				if f, ok := files["agent.yaml"]; ok {
					found["agent.yaml"] = true
					if _, err := agentconfig.Parse([]byte(f)); err != nil {
						t.Errorf("ConfigMap %s agent.yaml is refused by the node agent: %v\n%s", obj.GetName(), err, f)
					}
				}
			}
			for _, f := range []string{"webhook.yaml", "agent.yaml"} {
				if !found[f] {
					t.Errorf("no ConfigMap with %s in the render", f)
				}
			}
		})
	}
}
