package config

import (
	"testing"
)

// FuzzParse: any input either fails with an error or yields a config that
// validates and whose pools all have a known mode.
func FuzzParse(f *testing.F) {
	f.Add([]byte("apiVersion: ibkube.io/v1alpha1\nkind: AgentConfig\n"))
	f.Add([]byte("apiVersion: ibkube.io/v1alpha1\nkind: AgentConfig\nrescanPeriod: 2s\npools:\n- {resourceName: rdma/ib, mode: exclusive, selector: {names: [\"mlx5_*\"], exclude: [{linkLayers: [Ethernet]}]}}\n"))
	f.Add([]byte("apiVersion: ibkube.io/v1alpha1\nkind: AgentConfig\npools:\n- {resourceName: a.b/c, mode: shared, slots: 1000}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that does not validate: %v", err)
		}
		for _, p := range c.Pools {
			if p.Mode != ModeShared && p.Mode != ModeExclusive {
				t.Fatalf("mode %q accepted", p.Mode)
			}
		}
	})
}
