package counters

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/hca/inventory"
)

type fakeSource struct{ node inventory.Node }

func (f fakeSource) Inventory() inventory.Node { return f.node }
func (f fakeSource) Attribution() Attribution {
	return Attribution{Pools: map[string]PoolView{"rdma/ib": {Exclusive: true, HCAs: []string{"mlx5_0", "mlx5_1"}}}}
}

type fakeLister struct{ cs []Container }

func (f fakeLister) List(context.Context) ([]Container, error) { return f.cs, nil }

type fakePods struct {
	byPod map[string]map[string]string
	asked []string
}

func (f *fakePods) Pod(_ context.Context, ns, pod string) (PodInfo, error) {
	f.asked = append(f.asked, ns+"/"+pod)
	return PodInfo{Namespace: ns, Name: pod, UID: "uid-" + pod, Annotations: f.byPod[ns+"/"+pod]}, nil
}

type recordedEvent struct{ Object, Reason string }

type fakeEvents struct {
	mu     sync.Mutex
	events []recordedEvent
}

func (f *fakeEvents) PodEvent(p PodInfo, reason, _ string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, recordedEvent{"pod " + p.Namespace + "/" + p.Name + " " + p.UID, reason})
}

func (f *fakeEvents) NodeEvent(reason, _ string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, recordedEvent{"node", reason})
}

func twoHCAs() inventory.Node {
	return inventory.Node{HCAs: []inventory.HCA{
		{Name: "mlx5_0", Ports: []inventory.Port{{Number: 1}}},
		{Name: "mlx5_1", Ports: []inventory.Port{{Number: 1}}},
	}}
}

// TestMonitor drives the monitor through a clock it controls over the ND
// H100 v5 fixture: a pod that holds mlx5_0 and moves data shows its bytes
// under its name, a pod that holds mlx5_1 and moves nothing gets one Event,
// a pod that opted out gets none, and a flapping port raises a node Event.
func TestMonitor(t *testing.T) {
	t.Parallel()
	sys := buildFixture(t, fixture.NDv5)
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	events := &fakeEvents{}
	pods := &fakePods{byPod: map[string]map[string]string{"ml/quiet": {contract.AnnotationIdleWarning: "false"}}}
	m, reg := idleMonitor(t, sys, fakeSource{twoHCAs()}, fakeLister{[]Container{
		{Namespace: "ml", Pod: "rdma", Container: "c", Devices: map[string][]string{"rdma/ib": {"mlx5_0"}}},
		{Namespace: "ml", Pod: "tcp", Container: "c", Devices: map[string][]string{"rdma/ib": {"mlx5_1"}}},
		{Namespace: "ml", Pod: "quiet", Container: "c", Devices: map[string][]string{"rdma/ib": {"mlx5_1"}}},
	}}, pods, events, &now)
	busyMinutes(t, sys, m, &now, func(i int) {
		if i == 6 {
			writeCounter(t, sys, "mlx5_1", 1, "counters/"+LinkDowned, "1")
		}
	})

	want := `
# HELP ibkube_rdma_port_data_bytes_total Data bytes through an HCA port (sysfs port_xmit_data/port_rcv_data x 4), by direction (xmit, rcv); holder_namespace/holder_pod/holder_container name the holder of an exclusively allocated HCA and are empty otherwise.
# TYPE ibkube_rdma_port_data_bytes_total counter
ibkube_rdma_port_data_bytes_total{direction="rcv",hca="mlx5_0",holder_container="c",holder_namespace="ml",holder_pod="rdma",port="1"} 1.6016004e+07
ibkube_rdma_port_data_bytes_total{direction="rcv",hca="mlx5_1",holder_container="c",holder_namespace="ml",holder_pod="tcp",port="1"} 3.2016004e+07
ibkube_rdma_port_data_bytes_total{direction="xmit",hca="mlx5_0",holder_container="c",holder_namespace="ml",holder_pod="rdma",port="1"} 2.2307456e+07
ibkube_rdma_port_data_bytes_total{direction="xmit",hca="mlx5_1",holder_container="c",holder_namespace="ml",holder_pod="tcp",port="1"} 3.2016e+07
# HELP ibkube_rdma_container_idle 1 when a container holds RDMA devices, has held them longer than the idle window, and its HCAs moved less than the threshold in that window; 0 otherwise.
# TYPE ibkube_rdma_container_idle gauge
ibkube_rdma_container_idle{holder_container="c",holder_namespace="ml",holder_pod="quiet"} 0
ibkube_rdma_container_idle{holder_container="c",holder_namespace="ml",holder_pod="rdma"} 0
ibkube_rdma_container_idle{holder_container="c",holder_namespace="ml",holder_pod="tcp"} 1
# HELP ibkube_rdma_idle_containers Containers on this node whose RDMA devices sit idle (see ibkube_rdma_container_idle).
# TYPE ibkube_rdma_idle_containers gauge
ibkube_rdma_idle_containers 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), MetricDataBytes, MetricContainerIdle, MetricIdleContainers); err != nil {
		t.Error(err)
	}
	wantEvents := []recordedEvent{{"pod ml/tcp uid-tcp", ReasonIdle}, {"node", ReasonLinkFlapped}}
	if diff := cmp.Diff(wantEvents, events.events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	// The idle pod is warned once, not at every reading.
	now = now.Add(time.Minute)
	m.Step(context.Background())
	if n := len(events.events); n != 2 {
		t.Errorf("%d events after another idle reading, want still 2: %+v", n, events.events)
	}
	// Only the idle pods' annotations are read, once each.
	if diff := cmp.Diff([]string{"ml/quiet", "ml/tcp"}, pods.asked); diff != "" {
		t.Errorf("annotation lookups (-want +got):\n%s", diff)
	}
	problems, err := testutil.CollectAndLint(m)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }

// idleMonitor is a Monitor over the fixture sys with a minute's period and
// a 5-minute, 1 MiB idle rule, its clock reading *now, registered in a
// fresh registry.
func idleMonitor(t *testing.T, sys string, src Source, l Lister, pods Pods, events *fakeEvents, now *time.Time) (*Monitor, *prometheus.Registry) {
	t.Helper()
	m, err := NewMonitor(MonitorConfig{
		Reader: Reader{SysfsRoot: sys},
		Source: src,
		Lister: l,
		Pods:   pods,
		Events: events,
		Period: time.Minute,
		Idle:   IdleRule{Window: 5 * time.Minute, MinBytes: 1 << 20},
		Now:    func() time.Time { return *now },
	}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	return m, reg
}

// busyMinutes steps m seven times a minute apart, calling before(i) ahead
// of each step: mlx5_0 starts at the fixture's 4004000 units each way and,
// from the second step on, sends 1 MiB (262144 units) a minute. It returns
// mlx5_0's last xmit reading.
func busyMinutes(t *testing.T, sys string, m *Monitor, now *time.Time, before func(i int)) uint64 {
	t.Helper()
	xmit := uint64(4004000)
	for i := 0; i <= 6; i++ {
		if i > 0 {
			xmit += 262144
			writeCounter(t, sys, "mlx5_0", 1, "counters/"+XmitData, itoa(xmit))
			*now = now.Add(time.Minute)
		}
		if before != nil {
			before(i)
		}
		m.Step(context.Background())
	}
	return xmit
}
