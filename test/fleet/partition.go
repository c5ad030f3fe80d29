//go:build fleet

package fleet

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/contract"
)

// jobSize is the pods of one job in the partition workload: four ND H100 v5
// nodes' worth of a training job, one pod per node.
const jobSize = 4

// partitionJobPod is pod i of the partition workload: a worker of job
// i/jobSize (the Job controller's label) on an ND H100 v5 node with its 8
// GPUs, annotated for exclusive RDMA. The webhook adds the HCAs and the
// required pod affinity to the job's own pods on the partition label that
// the agents write from their ports' partition tables.
func partitionJobPod(i int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("job-%04d-worker-%d", i/jobSize, i%jobSize),
			Labels: map[string]string{
				"app": "fleet", contract.JobLabelBatch: fmt.Sprintf("job-%04d", i/jobSize),
			},
			Annotations: map[string]string{contract.AnnotationMode: "rdma-exclusive", contract.AnnotationProfile: "ndv5"},
		},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{labelInstance: "Standard_ND96isr_H100_v5"},
			Tolerations:                   []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists}},
			TerminationGracePeriodSeconds: ptr.To(int64(0)),
			Containers: []corev1.Container{{Name: "trainer", Image: "fake", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{"nvidia.com/gpu": *resourceQuantity(8)},
			}}},
		},
	}
}

// partitionAffinity schedules jobs of jobSize pods through the webhook
// (it must be serving): the scheduler throughput of pods that carry the
// webhook's partition affinity, and whether every job stayed on one
// partition. The jobs fill half of the ND H100 v5 nodes: without gang
// scheduling a job whose first pod lands on a nearly full partition would
// wait for room there, which is the scheduler's business, not admission's.
func (f *fleet) partitionAffinity(t *testing.T) {
	ndv5 := 0
	for _, n := range f.nodes {
		if n.machine.fixture == "ndv5" {
			ndv5++
		}
	}
	jobs := max(1, ndv5/jobSize/2)
	labelled := f.partitionLabelled(t)
	res := partitionResult{Jobs: jobs, JobSize: jobSize, Partitions: (f.s.nodes + partitionSize(f.s.nodes) - 1) / partitionSize(f.s.nodes), LabelledNodes: labelled}
	res.throughputResult = f.burst(t, admitNS, jobs*jobSize, partitionJobPod)
	pods, err := f.admin.CoreV1().Pods(admitNS).List(f.ctx, metav1.ListOptions{LabelSelector: "app=fleet"})
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := f.admin.CoreV1().Nodes().List(f.ctx, metav1.ListOptions{LabelSelector: "type=kwok"})
	if err != nil {
		t.Fatal(err)
	}
	partition := map[string]string{}
	for _, n := range nodes.Items {
		partition[n.Name] = n.Labels[contract.LabelPartition]
	}
	on := map[string]map[string]bool{}
	for _, p := range pods.Items {
		if p.Spec.Affinity == nil || p.Spec.Affinity.PodAffinity == nil {
			res.WithoutAffinity++
		}
		if p.Spec.NodeName == "" {
			continue
		}
		job := p.Labels[contract.JobLabelBatch]
		if on[job] == nil {
			on[job] = map[string]bool{}
		}
		on[job][partition[p.Spec.NodeName]] = true
	}
	for _, parts := range on {
		if len(parts) > 1 {
			res.SplitJobs++
		}
	}
	f.report.PartitionAffinity = res
	t.Logf("throughput partition affinity (webhook): %d jobs of %d pods on %d partitions (%d nodes labelled): %d pods bound in %.1fs: %.1f pods/s; %d unbound, %d jobs split, %d pods without the affinity",
		jobs, jobSize, res.Partitions, labelled, res.Pods-res.Unbound, res.Seconds, res.PodsPerSecond, res.Unbound, res.SplitJobs, res.WithoutAffinity)
	if res.SplitJobs > 0 || res.WithoutAffinity > 0 {
		t.Errorf("partition affinity: %d jobs span partitions, %d pods came out of the webhook without the affinity (goal 0 each)", res.SplitJobs, res.WithoutAffinity)
	}
	f.deletePods(t, admitNS, "app=fleet")
}

type partitionResult struct {
	throughputResult
	Jobs, JobSize, Partitions, LabelledNodes int
	SplitJobs, WithoutAffinity               int
}

// partitionLabelled counts the nodes whose agent wrote the partition label,
// waiting until every node with an RDMA device has one.
func (f *fleet) partitionLabelled(t *testing.T) int {
	n := 0
	f.waitFor(t, "every node labelled with its partition by its agent", 2*time.Minute, func() (bool, string) {
		list, err := f.admin.CoreV1().Nodes().List(f.ctx, metav1.ListOptions{LabelSelector: contract.LabelPartition})
		if err != nil {
			return false, err.Error()
		}
		n = len(list.Items)
		return n == f.s.nodes, fmt.Sprintf("%d of %d nodes labelled", n, f.s.nodes)
	})
	return n
}
