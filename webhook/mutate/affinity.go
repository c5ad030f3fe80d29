package mutate

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ibkube/ibkube/contract"
)

// statesPartitionAffinity says whether the pod already has a pod affinity
// term, required or preferred, on the partition label: the user placed it.
func statesPartitionAffinity(a *corev1.Affinity) bool {
	if a == nil || a.PodAffinity == nil {
		return false
	}
	for _, t := range a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		if t.TopologyKey == contract.LabelPartition {
			return true
		}
	}
	for _, w := range a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
		if w.PodAffinityTerm.TopologyKey == contract.LabelPartition {
			return true
		}
	}
	return false
}

// decideJobAffinity keeps an rdma pod of a job on its job's partition: a
// required pod affinity to the job's own pods with the node partition
// label as topology key. The scheduler places the job's first pod on any
// labelled node (a pod matching its own term may go first) and every later
// one where the job already runs, so a job that no partition can hold stays
// Pending with the scheduler's "didn't match pod affinity rules" instead of
// spanning partitions that cannot reach each other over InfiniBand.
func (d *decision) decideJobAffinity() error {
	pod := d.pod
	if !d.mode.RDMA() || pod.Annotations[contract.AnnotationPlacement] == contract.PlacementAny || statesPartitionAffinity(pod.Spec.Affinity) {
		return nil
	}
	d.plan.jobAffinity = jobAffinityTerm(pod.Labels)
	return nil
}

// jobAffinityTerm is the partition term of the job a pod with these labels
// belongs to, nil for a pod of no job. The job's label is selected by
// value; its controller's UID labels by key (matchLabelKeys, GA since 1.33,
// KEP-3633): the API server adds "key In (this pod's value)" to the
// selector when it stores the pod, so a pod that copies only the job's
// name matches no term of the job's pods and neither attracts nor follows
// them. An API server before 1.31 (the field off by default) drops the
// field and the term selects by name alone.
func jobAffinityTerm(labels map[string]string) *corev1.PodAffinityTerm {
	sel := contract.JobSelector(labels)
	if sel == nil {
		return nil
	}
	return &corev1.PodAffinityTerm{
		LabelSelector:  &metav1.LabelSelector{MatchLabels: sel},
		MatchLabelKeys: contract.JobUIDKeys(labels),
		TopologyKey:    contract.LabelPartition,
	}
}

// addJobAffinity adds the job's partition term.
func (p *patcher) addJobAffinity(pod *corev1.Pod, t *corev1.PodAffinityTerm) {
	term := *t
	spec := &pod.Spec
	switch {
	case spec.Affinity == nil:
		spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term}}}
		p.add("/spec/affinity", spec.Affinity)
	case spec.Affinity.PodAffinity == nil:
		spec.Affinity.PodAffinity = &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term}}
		p.add("/spec/affinity/podAffinity", spec.Affinity.PodAffinity)
	default:
		appendItem(p, &spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution, "/spec/affinity/podAffinity/requiredDuringSchedulingIgnoredDuringExecution", term)
	}
}
