package counters

import (
	"context"
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
}

func (f *fakeJobs) PodLabels(_ context.Context, ns, name string) (map[string]string, error) {
	return f.labels[ns+"/"+name], nil
}

func (f *fakeJobs) RunningPods(context.Context, string, map[string]string) ([]JobPod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
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
