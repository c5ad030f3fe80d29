package main

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/node/agent"
	"github.com/ibkube/ibkube/node/counters"
)

// checkEvents hands emit a fake recorder and holds every Event it recorded,
// each followed by the kind of object it is on, against want.
func checkEvents(t *testing.T, want []string, emit func(record.EventRecorder)) {
	t.Helper()
	rec := record.NewFakeRecorder(8)
	rec.IncludeObject = true
	emit(rec)
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestRecorderSink(t *testing.T) {
	t.Parallel()
	want := []string{
		"Warning RDMAIdle container trainer holds RDMA devices involvedObject{kind=Pod,apiVersion=v1}",
		"Warning RDMALinkFlapped mlx5_1 port 1: link_downed +1 involvedObject{kind=Node,apiVersion=}",
	}
	checkEvents(t, want, func(rec record.EventRecorder) {
		var sink counters.EventSink = recorderSink{rec: rec, node: "nd-0"}
		sink.PodEvent(counters.PodInfo{Namespace: "ml", Name: "train-0", UID: "u-1"}, counters.ReasonIdle, "container trainer holds RDMA devices")
		sink.NodeEvent(counters.ReasonLinkFlapped, "mlx5_1 port 1: link_downed +1")
	})
}

// TestAPI checks the reads the agent's libraries get through the binary's
// client: a pod for the counters monitor, a Node's labels for the profile.
func TestAPI(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset(
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Namespace: "ml", Name: "eval", UID: "u-7", Annotations: map[string]string{contract.AnnotationIdleWarning: "false"},
		}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "nd-0", Labels: map[string]string{agent.InstanceTypeLabel: "Standard_ND96isr_H100_v5"}}},
	)
	c := newAPI(cs, "nd-0")
	t.Cleanup(c.stop)
	ctx := context.Background()
	got, err := c.Pod(ctx, "ml", "eval")
	if err != nil {
		t.Fatal(err)
	}
	want := counters.PodInfo{Namespace: "ml", Name: "eval", UID: "u-7", Annotations: map[string]string{contract.AnnotationIdleWarning: "false"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Pod (-want +got):\n%s", diff)
	}
	if _, err := c.Pod(ctx, "ml", "gone"); err == nil || !strings.Contains(err.Error(), "get pod ml/gone") {
		t.Errorf("a missing pod: %v", err)
	}
	labels, err := c.NodeLabels(ctx, "nd-0")
	if err != nil {
		t.Fatal(err)
	}
	if got := labels[agent.InstanceTypeLabel]; got != "Standard_ND96isr_H100_v5" {
		t.Errorf("instance-type label %q, want Standard_ND96isr_H100_v5", got)
	}
	if _, err := c.NodeLabels(ctx, "gone"); err == nil || !strings.Contains(err.Error(), "get node gone") {
		t.Errorf("a missing node: %v", err)
	}
}
