package nodestatus

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMissingSince(t *testing.T) {
	t.Parallel()
	restart := time.Date(2026, 11, 27, 21, 0, 10, 400_000_000, time.UTC)
	node := func(heartbeat time.Time, ready corev1.ConditionStatus, ib int64) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, LastHeartbeatTime: metav1.NewTime(heartbeat)}},
			Allocatable: corev1.ResourceList{
				"rdma/ib": *resource.NewQuantity(ib, resource.DecimalSI),
			},
		}}
	}
	want := map[corev1.ResourceName]int64{"rdma/ib": 8}
	tests := []struct {
		name string
		node *corev1.Node
		want string // substring; "" for nothing missing
	}{
		{"the previous kubelet's status shows its devices", node(restart.Add(-3*time.Second), corev1.ConditionTrue, 8), "before 2026-11-27T21:00:10Z"},
		{"the new kubelet before the plugin registered", node(restart.Add(time.Second), corev1.ConditionTrue, 0), "allocatable rdma/ib 0, want 8"},
		{"the new kubelet not Ready yet", node(restart.Add(time.Second), corev1.ConditionFalse, 8), "not Ready"},
		{"the new kubelet with the plugin registered", node(restart.Add(2*time.Second), corev1.ConditionTrue, 8), ""},
		// Heartbeats carry whole seconds: one written in the restart's second
		// shows as before it, and must still count.
		{"the new kubelet in the restart's second", node(restart.Truncate(time.Second), corev1.ConditionTrue, 8), ""},
		{"no Ready condition", &corev1.Node{}, "no Ready condition"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := MissingSince(tc.node, restart, want)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("MissingSince = %q, want %q", got, tc.want)
			}
		})
	}
}
