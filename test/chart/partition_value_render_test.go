//go:build chart

package chart

import (
	"strconv"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestNodeLabelPolicyPartitionFrom: agent.config.partitionLabelFrom reaches
// the node-label policy as the CEL string the format check compares with
// (TestNodeLabelPolicyPartitionFormat runs the check itself), and is the
// empty string by default.
func TestNodeLabelPolicyPartitionFrom(t *testing.T) {
	t.Parallel()
	for _, from := range []string{"", "oci.oraclecloud.com/rdma.hpc_island_id"} {
		args := []string{}
		if from != "" {
			args = append(args, "--set", "agent.config.partitionLabelFrom="+from)
		}
		out, err := render(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		found := false
		for _, o := range decodeAll(t, out) {
			if o.GetKind() != "ValidatingAdmissionPolicy" || o.GetName() != "ibkube-node-agent-node-labels" {
				continue
			}
			vars, _, _ := unstructured.NestedSlice(o.Object, "spec", "variables")
			for _, v := range vars {
				m, _ := v.(map[string]any)
				if m["name"] == "partitionFrom" {
					got, _ = m["expression"].(string)
					found = true
				}
			}
		}
		if want := strconv.Quote(from); !found || got != want {
			t.Errorf("partitionLabelFrom %q: the policy's partitionFrom variable is %q (found %v), want %s", from, got, found, want)
		}
	}
}
