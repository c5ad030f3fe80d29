package counters

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ibkube/ibkube/hca/fixture"
)

// fakeJobs is a cluster of pods and node labels the test changes.
type fakeJobs struct {
	mu         sync.Mutex
	labels     map[string]map[string]string // ns/pod -> labels
	pods       []JobPod                     // the job's running pods
	partitions map[string]string
	lists      int
	selector   map[string]string // the last RunningPods selector
}

func (f *fakeJobs) PodLabels(_ context.Context, ns, name string) (map[string]string, error) {
	return f.labels[ns+"/"+name], nil
}

func (f *fakeJobs) RunningPods(_ context.Context, _ string, sel map[string]string) ([]JobPod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	f.selector = sel
	return append([]JobPod(nil), f.pods...), nil
}

func (f *fakeJobs) NodePartition(_ context.Context, node string) (string, error) {
	return f.partitions[node], nil
}

type messageEvents struct{ got []string }

func (e *messageEvents) PodEvent(p PodInfo, reason, msg string) {
	e.got = append(e.got, p.Namespace+"/"+p.Name+" "+reason+": "+msg)
}
func (e *messageEvents) NodeEvent(string, string) {}

// TestJobSplit: a job whose running RDMA pods sit on two partitions gets
// one Event on each of this node's pods of it, naming the job, the
// partitions and the nodes, within the reading that first sees it, and a
// series an alert can use; a job on one partition gets neither, and pods
// without an rdma mode do not count.
func TestJobSplit(t *testing.T) {
	t.Parallel()
	sys := buildFixture(t, fixture.NDv5)
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	jobs := &fakeJobs{
		labels: map[string]map[string]string{"ml/llama-0": {"jobset.sigs.k8s.io/jobset-name": "llama", "batch.kubernetes.io/job-name": "llama-node-0"}},
		pods: []JobPod{
			{Name: "llama-0", Node: "nd-0", RDMA: true},
			{Name: "llama-1", Node: "nd-1", RDMA: true},
			{Name: "llama-launcher", Node: "cpu-0", RDMA: false},
		},
		partitions: map[string]string{"nd-0": "0x800b", "nd-1": "0x800b", "nd-2": "0x8012"},
	}
	events := &messageEvents{}
	m, err := NewMonitor(MonitorConfig{
		Reader: Reader{SysfsRoot: sys},
		Source: fakeSource{twoHCAs()},
		Lister: fakeLister{[]Container{{Namespace: "ml", Pod: "llama-0", Container: "c", Devices: map[string][]string{"rdma/ib": {"mlx5_0"}}}}},
		Jobs:   jobs, Events: events, Period: 15 * time.Second,
		Idle: IdleRule{Window: time.Hour, MinBytes: 1},
		Now:  func() time.Time { return now },
	}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	m.Step(context.Background())
	if len(events.got) != 0 {
		t.Fatalf("events for a job on one partition: %v", events.got)
	}
	series := func() string {
		var b strings.Builder
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == MetricJobPartitions {
				for _, mm := range mf.GetMetric() {
					b.WriteString(mm.String())
				}
			}
		}
		return b.String()
	}
	if got := testutil.CollectAndCount(m, MetricJobPartitions); got != 1 || !strings.Contains(series(), `value:"jobset.sigs.k8s.io/jobset-name=llama"`) || !strings.Contains(series(), "value:1") {
		t.Errorf("job series = %d %s", got, series())
	}

	// A third pod placed by hand on another partition.
	jobs.mu.Lock()
	jobs.pods = append(jobs.pods, JobPod{Name: "llama-2", Node: "nd-2", RDMA: true})
	jobs.mu.Unlock()
	now = now.Add(15 * time.Second)
	m.Step(context.Background())
	want := "ml/llama-0 RDMAJobSplit: job jobset.sigs.k8s.io/jobset-name=llama in namespace ml runs on 2 InfiniBand partitions: " +
		"0x800b (nodes nd-0, nd-1); 0x8012 (nodes nd-2); its pods on different partitions cannot reach each other over InfiniBand"
	if len(events.got) != 1 || !strings.HasPrefix(events.got[0], want) {
		t.Fatalf("events after the split:\n%v\nwant one starting\n%s", events.got, want)
	}
	if !strings.Contains(series(), "value:2") {
		t.Errorf("job series after the split: %s", series())
	}
	// Said once, not every reading.
	now = now.Add(15 * time.Second)
	m.Step(context.Background())
	if len(events.got) != 1 {
		t.Errorf("the split was told again: %v", events.got)
	}
	// A settled job is checked every splitSettledEvery, not every reading.
	now = now.Add(splitYoung)
	m.Step(context.Background())
	before := jobs.lists
	for i := 0; i < 4; i++ {
		now = now.Add(15 * time.Second)
		m.Step(context.Background())
	}
	if jobs.lists != before {
		t.Errorf("a settled job's pods were listed %d times in a minute", jobs.lists-before)
	}
}

func TestFindSplitUnlabelledNode(t *testing.T) {
	t.Parallel()
	s := FindSplit("ml", "batch.kubernetes.io/job-name=x", []JobPod{{Name: "a", Node: "nd-0", RDMA: true}, {Name: "b", Node: "nd-9", RDMA: true}},
		map[string]string{"nd-0": "0x800b"})
	if got := s.Partitions(); len(got) != 2 || got[0] != Unlabelled || got[1] != "0x800b" {
		t.Errorf("partitions = %v, want the unlabelled node as its own", got)
	}
}

// TestJobSplitListsByUID: the check lists a job's pods by its label and its
// controller's UID labels, as the partition affinity selects them, so a
// pod that copies only a job's name is not counted as the job's (a decoy
// with RDMA on another partition would raise a false split); the job is
// still named by its label alone in Events and the metric.
func TestJobSplitListsByUID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   jobRef
	}{
		{"job", map[string]string{"batch.kubernetes.io/job-name": "train", "batch.kubernetes.io/controller-uid": "u1", "controller-uid": "u1"},
			jobRef{map[string]string{"batch.kubernetes.io/job-name": "train", "batch.kubernetes.io/controller-uid": "u1", "controller-uid": "u1"}, "batch.kubernetes.io/job-name=train"}},
		{"jobset, not its child Job's UID", map[string]string{"jobset.sigs.k8s.io/jobset-name": "llama", "jobset.sigs.k8s.io/jobset-uid": "u2",
			"batch.kubernetes.io/job-name": "llama-node-0", "batch.kubernetes.io/controller-uid": "u3"},
			jobRef{map[string]string{"jobset.sigs.k8s.io/jobset-name": "llama", "jobset.sigs.k8s.io/jobset-uid": "u2"}, "jobset.sigs.k8s.io/jobset-name=llama"}},
		{"leaderworkerset group", map[string]string{"leaderworkerset.sigs.k8s.io/name": "s", "leaderworkerset.sigs.k8s.io/group-index": "1"},
			jobRef{map[string]string{"leaderworkerset.sigs.k8s.io/name": "s", "leaderworkerset.sigs.k8s.io/group-index": "1"}, "leaderworkerset.sigs.k8s.io/group-index=1,leaderworkerset.sigs.k8s.io/name=s"}},
		{"no job", map[string]string{"app": "x", "controller-uid": "u"}, jobRef{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := jobOf(tc.labels)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("jobOf = %+v, want %+v", got, tc.want)
			}
		})
	}

	sys := buildFixture(t, fixture.NDv5)
	jobs := &fakeJobs{
		labels:     map[string]map[string]string{"ml/train-0": {"batch.kubernetes.io/job-name": "train", "batch.kubernetes.io/controller-uid": "u1"}},
		pods:       []JobPod{{Name: "train-0", Node: "nd-0", RDMA: true}},
		partitions: map[string]string{"nd-0": "0x800b"},
	}
	m, err := NewMonitor(MonitorConfig{
		Reader: Reader{SysfsRoot: sys},
		Source: fakeSource{twoHCAs()},
		Lister: fakeLister{[]Container{{Namespace: "ml", Pod: "train-0", Container: "c", Devices: map[string][]string{"rdma/ib": {"mlx5_0"}}}}},
		Jobs:   jobs, Events: &messageEvents{}, Period: 15 * time.Second,
		Idle: IdleRule{Window: time.Hour, MinBytes: 1},
	}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	m.Step(context.Background())
	if want := map[string]string{"batch.kubernetes.io/job-name": "train", "batch.kubernetes.io/controller-uid": "u1"}; !reflect.DeepEqual(jobs.selector, want) {
		t.Errorf("RunningPods selector %v, want %v", jobs.selector, want)
	}
	if err := testutil.CollectAndCompare(m, strings.NewReader(`
# HELP ibkube_rdma_job_partitions InfiniBand partitions the running RDMA pods of a job are on (job_name is the job's label selector), for each job with a pod holding RDMA devices on this node; above 1 the job is split and its ranks cannot all reach each other.
# TYPE ibkube_rdma_job_partitions gauge
ibkube_rdma_job_partitions{job_name="batch.kubernetes.io/job-name=train",job_namespace="ml"} 1
`), MetricJobPartitions); err != nil {
		t.Error(err)
	}
}
