package main

import (
	"context"
	"testing"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ibkube/ibkube/contract"
)

// TestPartitionLabelPatches: the agent's patch sets and removes only the
// partition label, and the uninstall hook takes it off every Node, leaving
// every other label alone.
func TestPartitionLabelPatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := func(name string, labels map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	cs := fake.NewClientset(
		node("nd-0", map[string]string{"kubernetes.azure.com/agentpool": "nd"}),
		node("nd-1", map[string]string{contract.LabelPartition: "0x8012", "kubernetes.azure.com/agentpool": "nd"}),
	)
	c := newAPI(cs, "nd-0")
	defer c.stop()
	v := "0x800b"
	if err := c.PatchNodeLabels(ctx, "nd-0", map[string]*string{contract.LabelPartition: &v}); err != nil {
		t.Fatal(err)
	}
	labels := func(name string) map[string]string {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Labels
	}
	if got := labels("nd-0"); got[contract.LabelPartition] != "0x800b" || got["kubernetes.azure.com/agentpool"] != "nd" {
		t.Fatalf("nd-0 labels after the patch: %v", got)
	}
	if err := removePartitionLabels(ctx, cs, testr.New(t)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"nd-0", "nd-1"} {
		got := labels(name)
		if _, ok := got[contract.LabelPartition]; ok || got["kubernetes.azure.com/agentpool"] != "nd" {
			t.Errorf("%s labels after uninstall: %v, want the agent pool label only", name, got)
		}
	}
}
