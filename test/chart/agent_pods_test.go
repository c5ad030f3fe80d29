package chart

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ibkube/ibkube/internal/testing/charttest"
)

// TestAgentPodReads: the node agents' ClusterRoles grant get on pods (the
// pods the kubelet names on the node, read by name) and list only where the
// split-job check is on, and the agent's --split-jobs follows the same
// value; a compromised node must not be able to enumerate every pod of the
// cluster, env values included, by default. The goldens are helm's renders
// (the chart-tagged tests keep them so): defaults and dra with the check
// off, observability with agent.counters.splitJobs on.
func TestAgentPodReads(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		golden string
		split  bool
	}{
		{"defaults", false},
		{"dra", false},
		{"observability", true},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			t.Parallel()
			objs, err := charttest.Load(tc.golden)
			if err != nil {
				t.Fatal(err)
			}
			want, flag := []string{"get"}, "--split-jobs=false"
			if tc.split {
				want, flag = []string{"get", "list"}, "--split-jobs=true"
			}
			// The device-plugin agent and the DRA agent, each its own identity.
			for _, name := range []string{"ibkube-node-agent", "ibkube-node-agent-dra"} {
				role, err := charttest.Find(objs, "ClusterRole", name)
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(want, podVerbs(role)); d != "" {
					t.Errorf("ClusterRole %s verbs on pods (-want +got):\n%s", name, d)
				}
				ds, err := charttest.Find(objs, "DaemonSet", name)
				if err != nil {
					t.Fatal(err)
				}
				args, err := charttest.ContainerArgs(ds, "agent")
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Contains(args, flag) {
					t.Errorf("DaemonSet %s args %v lack %s", name, args, flag)
				}
			}
		})
	}
}

// podVerbs are the verbs a ClusterRole grants on core pods, sorted.
func podVerbs(role charttest.Object) []string {
	var verbs []string
	rules, _ := charttest.Field(map[string]any(role), "rules").([]any)
	for _, r := range rules {
		r, _ := r.(map[string]any)
		groups, _ := r["apiGroups"].([]any)
		resources, _ := r["resources"].([]any)
		if !slices.Contains(groups, any("")) || !slices.Contains(resources, any("pods")) && !slices.Contains(resources, any("*")) {
			continue
		}
		for _, v := range r["verbs"].([]any) {
			verbs = append(verbs, v.(string))
		}
	}
	slices.Sort(verbs)
	return verbs
}
