package suitetest

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestUnschedulable: only PodScheduled=False with the scheduler's
// Unschedulable reason counts; a pod waiting for its scheduling gates or
// already scheduled does not.
func TestUnschedulable(t *testing.T) {
	t.Parallel()
	const msg = "0/1 nodes are available: 1 Insufficient rdma/ib."
	for _, tc := range []struct {
		name string
		cond []corev1.PodCondition
		want string // the message; "" for none
	}{
		{"unschedulable", []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse},
			{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg}}, msg},
		{"scheduling gated", []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonSchedulingGated, Message: msg}}, ""},
		{"scheduled", []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}, ""},
		{"no conditions", nil, ""},
	} {
		got := Unschedulable(&corev1.Pod{Status: corev1.PodStatus{Conditions: tc.cond}})
		if (got == nil) != (tc.want == "") || got != nil && got.Message != tc.want {
			t.Errorf("%s: Unschedulable = %+v, want message %q", tc.name, got, tc.want)
		}
	}
}
