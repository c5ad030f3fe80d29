package suitetest

import corev1 "k8s.io/api/core/v1"

// Unschedulable is the PodScheduled condition of a pod the scheduler found
// Unschedulable, nil while it has none: its Message is the scheduler's reason.
func Unschedulable(p *corev1.Pod) *corev1.PodCondition {
	for i, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}
