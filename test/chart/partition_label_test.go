//go:build integration

package chart

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/testing/testenv"
)

// TestAPIServerAgentLabelsOnlyItsNode installs manifests/ibkube.yaml and
// acts as the node agent's ServiceAccount with a pod-bound token's node
// claim: it may set and remove the partition label of its own Node, only to
// a value of the agent's form, and nothing else: not another Node, not
// another label, not a taint.
func TestAPIServerAgentLabelsOnlyItsNode(t *testing.T) {
	cfg, c, ctx := installedWithNodes(t, map[string]string{"kubernetes.azure.com/agentpool": "nd"}, "nd-0", "nd-1")
	agentOn := func(node string) kubernetes.Interface {
		ac := impersonate(cfg, namespace, "ibkube-node-agent")
		ac.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {node}}
		return testenv.Clientset(t, ac)
	}
	patchOpts := func(cs kubernetes.Interface, node string, p map[string]any, opts metav1.PatchOptions) error {
		body, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, body, opts)
		return err
	}
	patch := func(cs kubernetes.Interface, node string, p map[string]any) error {
		return patchOpts(cs, node, p, metav1.PatchOptions{})
	}
	labels := func(l map[string]any) map[string]any { return map[string]any{"metadata": map[string]any{"labels": l}} }
	agent := agentOn("nd-0")

	// The policy may take a moment to be enforced after it is created; a
	// dry run is admitted like a real patch and stores nothing.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		err := patchOpts(agent, "nd-1", labels(map[string]any{contract.LabelPartition: "0x800b"}), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "may not change node nd-1"), nil
	})
	if err != nil {
		t.Fatalf("the agent on nd-0 labelled nd-1 (the policy never refused it): %v", err)
	}
	if err := patch(agent, "nd-1", labels(map[string]any{contract.LabelPartition: "0x800b"})); err == nil || !strings.Contains(err.Error(), "may not change node nd-1") {
		t.Errorf("the agent on nd-0 labels nd-1: %v, want refused", err)
	}
	if err := patch(agent, "nd-0", labels(map[string]any{contract.LabelPartition: "0x800b"})); err != nil {
		t.Fatalf("label its own node: %v", err)
	}
	if err := patch(agent, "nd-0", labels(map[string]any{contract.LabelPartition: nil})); err != nil {
		t.Fatalf("remove its own node's label: %v", err)
	}
	// Only a value of the agent's form: a key of full membership as sysfs
	// prints it, or roce (partitionLabelFrom is not set by default).
	for _, v := range []string{"0xffff", contract.PartitionRoCE} {
		if err := patch(agent, "nd-0", labels(map[string]any{contract.LabelPartition: v})); err != nil {
			t.Errorf("label its own node %s: %v", v, err)
		}
	}
	for _, v := range []string{"0x7fff", "0x800B", "800b", "tenant-b", "nd"} {
		if err := patch(agent, "nd-0", labels(map[string]any{contract.LabelPartition: v})); err == nil || !strings.Contains(err.Error(), "got "+v) {
			t.Errorf("label its own node %q: %v, want refused naming the value", v, err)
		}
	}
	refused := []struct {
		name string
		body map[string]any
		says string
	}{
		{"another label", labels(map[string]any{"kubernetes.azure.com/agentpool": "other"}), "only the infiniband.azure.com/partition label"},
		{"a new label", labels(map[string]any{"node-role.kubernetes.io/gpu": ""}), "only the infiniband.azure.com/partition label"},
		{"a taint", map[string]any{"spec": map[string]any{"taints": []any{map[string]any{"key": "x", "effect": "NoSchedule"}}}}, "nothing else"},
		{"an annotation", map[string]any{"metadata": map[string]any{"annotations": map[string]any{"a": "b"}}}, "nothing else"},
	}
	for _, r := range refused {
		if err := patch(agent, "nd-0", r.body); err == nil || !strings.Contains(err.Error(), r.says) {
			t.Errorf("agent patches %s of its node: %v, want refused (%s)", r.name, err, r.says)
		}
	}
	noClaim := testenv.Clientset(t, impersonate(cfg, namespace, "ibkube-node-agent"))
	if err := patch(noClaim, "nd-0", labels(map[string]any{contract.LabelPartition: "0x800b"})); err == nil || !strings.Contains(err.Error(), "names no node") {
		t.Errorf("agent without a node claim labels a node: %v, want refused", err)
	}
	n, err := c.cs.CoreV1().Nodes().Get(ctx, "nd-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := n.Labels[contract.LabelPartition]; ok || n.Labels["kubernetes.azure.com/agentpool"] != "nd" {
		t.Errorf("nd-1 labels %v, want untouched", n.Labels)
	}
}
