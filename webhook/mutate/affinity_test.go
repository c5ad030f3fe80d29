package mutate

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ibkube/ibkube/contract"
)

// Labels as each controller writes them on its pods (contract/partition.go
// names the sources).
var (
	jobPod = map[string]string{
		contract.JobLabelBatch: "train", "job-name": "train",
		contract.JobUIDLabelBatch: "uid-job", contract.JobUIDLabelBatchLegacy: "uid-job",
		"batch.kubernetes.io/job-completion-index": "0",
	}
	jobSetPod = map[string]string{
		contract.JobLabelJobSet: "llama", contract.JobUIDLabelJobSet: "uid-jobset",
		contract.JobLabelBatch: "llama-node-0", contract.JobUIDLabelBatch: "uid-child", contract.JobUIDLabelBatchLegacy: "uid-child",
	}
	lwsPod = map[string]string{
		contract.JobLabelLWS: "serve", contract.LWSGroupIndexLabel: "1",
		"leaderworkerset.sigs.k8s.io/group-key": "3b5f0c", "leaderworkerset.sigs.k8s.io/worker-index": "2",
	}
	kubeflowPod = map[string]string{
		contract.JobLabelKubeflow: "bert", "training.kubeflow.org/replica-type": "worker", "training.kubeflow.org/replica-index": "3",
	}
)

// TestJobAffinityTerm: the term selects the job by its label and its
// controller's UID labels by key, the UID paired with the job label taken.
func TestJobAffinityTerm(t *testing.T) {
	t.Parallel()
	term := func(sel map[string]string, keys ...string) *corev1.PodAffinityTerm {
		return &corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: sel}, MatchLabelKeys: keys, TopologyKey: contract.LabelPartition}
	}
	legacyOnly := map[string]string{contract.JobLabelBatch: "old", contract.JobUIDLabelBatchLegacy: "uid-old"}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   *corev1.PodAffinityTerm
	}{
		{"job", jobPod, term(map[string]string{contract.JobLabelBatch: "train"}, contract.JobUIDLabelBatch, contract.JobUIDLabelBatchLegacy)},
		{"job labelled before 1.27", legacyOnly, term(map[string]string{contract.JobLabelBatch: "old"}, contract.JobUIDLabelBatchLegacy)},
		{"jobset: its own UID, not the child Job's", jobSetPod, term(map[string]string{contract.JobLabelJobSet: "llama"}, contract.JobUIDLabelJobSet)},
		{"leaderworkerset: no UID label", lwsPod, term(map[string]string{contract.JobLabelLWS: "serve", contract.LWSGroupIndexLabel: "1"})},
		{"kubeflow: no UID label", kubeflowPod, term(map[string]string{contract.JobLabelKubeflow: "bert"})},
		{"job name without its UID", map[string]string{contract.JobLabelBatch: "x"}, term(map[string]string{contract.JobLabelBatch: "x"})},
		{"no job", map[string]string{"app": "x", contract.JobUIDLabelBatch: "u"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if d := cmp.Diff(tc.want, jobAffinityTerm(tc.labels)); d != "" {
				t.Errorf("jobAffinityTerm (-want +got):\n%s", d)
			}
		})
	}
}

// TestJobAffinityIgnoresDecoy: once the API server has merged the term's
// matchLabelKeys (as kube-apiserver's pod strategy does at create), the
// job's term matches its siblings and not a pod that copies the job's name
// label, or its name and a foreign UID; before, any pod carrying the name
// matched, and the scheduler placed the job after it.
func TestJobAffinityIgnoresDecoy(t *testing.T) {
	t.Parallel()
	with := func(base map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range base {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	for _, tc := range []struct {
		name        string
		rank, other map[string]string
		match       bool
	}{
		{"job sibling", jobPod, with(jobPod, "batch.kubernetes.io/job-completion-index", "1"), true},
		{"job decoy with the name only", jobPod, map[string]string{contract.JobLabelBatch: "train"}, false},
		{"job decoy with the legacy UID only", jobPod, map[string]string{contract.JobLabelBatch: "train", contract.JobUIDLabelBatchLegacy: "uid-job"}, false},
		{"recreated job of the same name", jobPod, with(jobPod, contract.JobUIDLabelBatch, "uid-new", contract.JobUIDLabelBatchLegacy, "uid-new"), false},
		{"jobset sibling of another child Job", jobSetPod, with(jobSetPod, contract.JobLabelBatch, "llama-node-1", contract.JobUIDLabelBatch, "uid-child-1"), true},
		{"jobset decoy with the name only", jobSetPod, map[string]string{contract.JobLabelJobSet: "llama"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sel, err := metav1.LabelSelectorAsSelector(storedSelector(jobAffinityTerm(tc.rank), tc.rank))
			if err != nil {
				t.Fatal(err)
			}
			if got := sel.Matches(labels.Set(tc.other)); got != tc.match {
				t.Errorf("the rank's term %s matches %v: %v, want %v", sel, tc.other, got, tc.match)
			}
		})
	}
}

// storedSelector is the term's selector as the API server stores it:
// each matchLabelKeys key the pod carries becomes "key In (value)"
// (k8s.io/kubernetes pkg/registry/core/pod/strategy.go
// applyMatchLabelKeysAndMismatchLabelKeys).
func storedSelector(term *corev1.PodAffinityTerm, podLabels map[string]string) *metav1.LabelSelector {
	sel := term.LabelSelector.DeepCopy()
	for _, k := range term.MatchLabelKeys {
		if v, ok := podLabels[k]; ok {
			sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpIn, Values: []string{v}})
		}
	}
	return sel
}
