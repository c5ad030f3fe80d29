package counters

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/hca/inventory"
)

type attrSource struct {
	node inventory.Node
	attr Attribution
}

func (s attrSource) Inventory() inventory.Node { return s.node }
func (s attrSource) Attribution() Attribution  { return s.attr }

// draClaim is how the kubelet's PodResources API (1.37) lists a container
// using a claim: driver, pool and device of each allocated device.
func draClaim(claim string, devices ...string) *podresourcesv1.DynamicResource {
	dr := &podresourcesv1.DynamicResource{ClaimName: claim, ClaimNamespace: "ml"}
	for _, d := range devices {
		driver, pool := contract.DRADriverName, "nd-0"
		if strings.HasPrefix(d, "gpu-") {
			driver = "gpu.nvidia.com"
		}
		if strings.HasPrefix(d, "other-pool/") {
			pool, d = "nd-1", strings.TrimPrefix(d, "other-pool/")
		}
		dr.ClaimResources = append(dr.ClaimResources, &podresourcesv1.ClaimResource{DriverName: driver, PoolName: pool, DeviceName: d,
			CdiDevices: []*podresourcesv1.CDIDevice{{Name: contract.DRADriverName + "/hca=uid-" + claim}}})
	}
	return dr
}

func draAttribution() Attribution {
	key := func(d string) string { return DRAKey(contract.DRADriverName, "nd-0", d) }
	return Attribution{DRA: map[string]DRADevice{
		key("ib-mlx5-0"):        {HCA: "mlx5_0", Exclusive: true},
		key("ib-mlx5-1"):        {HCA: "mlx5_1", Exclusive: true},
		key("shared-ib-mlx5-0"): {HCA: "mlx5_0"},
		key("shared-ib-mlx5-1"): {HCA: "mlx5_1"},
	}}
}

// DRA-prepared containers are found through the PodResources API's
// dynamic_resources: the agent's devices map to their HCAs, exclusive or
// shared; other drivers and other pools are not the agent's.
func TestHoldersFromDynamicResources(t *testing.T) {
	t.Parallel()
	pods := []*podresourcesv1.PodResources{
		{Namespace: "ml", Name: "train-0", Containers: []*podresourcesv1.ContainerResources{
			{Name: "trainer", DynamicResources: []*podresourcesv1.DynamicResource{draClaim("train-0-rdma", "ib-mlx5-1", "gpu-0"), draClaim("stray", "other-pool/ib-mlx5-0")}},
		}},
		{Namespace: "ml", Name: "nb", Containers: []*podresourcesv1.ContainerResources{
			{Name: "nb", DynamicResources: []*podresourcesv1.DynamicResource{draClaim("nb-rdma", "shared-ib-mlx5-0")}},
			{Name: "gpu-only", DynamicResources: []*podresourcesv1.DynamicResource{draClaim("nb-gpu", "gpu-1")}},
		}},
	}
	got := Holders(FromPodResources(pods), draAttribution())
	want := []Holder{
		{Namespace: "ml", Pod: "nb", Container: "nb", Shared: []string{"mlx5_0"}},
		{Namespace: "ml", Pod: "train-0", Container: "trainer", Exclusive: []string{"mlx5_1"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Holders (-want +got):\n%s", diff)
	}
}

// The monitor attributes a DRA-prepared container's traffic to it and warns
// when its HCA sits idle, as for a device-plugin container.
func TestMonitorDRAHolders(t *testing.T) {
	t.Parallel()
	sys := buildFixture(t, fixture.NDv5)
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	events := &fakeEvents{}
	pods := []*podresourcesv1.PodResources{
		{Namespace: "ml", Name: "rdma", Containers: []*podresourcesv1.ContainerResources{
			{Name: "c", DynamicResources: []*podresourcesv1.DynamicResource{draClaim("rdma-claim", "ib-mlx5-0")}}}},
		{Namespace: "ml", Name: "tcp", Containers: []*podresourcesv1.ContainerResources{
			{Name: "c", DynamicResources: []*podresourcesv1.DynamicResource{draClaim("tcp-claim", "ib-mlx5-1")}}}},
	}
	m, reg := idleMonitor(t, sys, attrSource{twoHCAs(), draAttribution()}, fakeLister{FromPodResources(pods)}, &fakePods{}, events, &now)
	xmit := busyMinutes(t, sys, m, &now, nil)
	want := `
# HELP ibkube_rdma_container_idle 1 when a container holds RDMA devices, has held them longer than the idle window, and its HCAs moved less than the threshold in that window; 0 otherwise.
# TYPE ibkube_rdma_container_idle gauge
ibkube_rdma_container_idle{holder_container="c",holder_namespace="ml",holder_pod="rdma"} 0
ibkube_rdma_container_idle{holder_container="c",holder_namespace="ml",holder_pod="tcp"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), MetricContainerIdle); err != nil {
		t.Error(err)
	}
	if got := sample(t, reg, MetricDataBytes, `hca="mlx5_0"`, `direction="xmit"`, `holder_pod="rdma"`); got != float64(xmit*DataOctetsPerUnit) {
		t.Errorf("mlx5_0 xmit bytes under holder ml/rdma = %v, want %v", got, xmit*DataOctetsPerUnit)
	}
	if diff := cmp.Diff([]recordedEvent{{"pod ml/tcp uid-tcp", ReasonIdle}}, events.events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// sample gathers reg and returns the value of the one sample of name whose
// labels contain every matcher.
func sample(t *testing.T, reg *prometheus.Registry, name string, matchers ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	samples:
		for _, mt := range mf.GetMetric() {
			var labels []string
			for _, l := range mt.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			all := strings.Join(labels, ",")
			for _, want := range matchers {
				if !strings.Contains(all, want) {
					continue samples
				}
			}
			if c := mt.GetCounter(); c != nil {
				return c.GetValue()
			}
			return mt.GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s sample with %v", name, matchers)
	return 0
}

type switchLister struct{ cs *[]Container }

func (s switchLister) List(context.Context) ([]Container, error) { return *s.cs, nil }

// An exclusive HCA reached by a sharer's recorded slot raises one node
// Event naming both while it lasts, and the gauge counts it; a sharer
// whose slot left that HCA out is no overlap.
func TestMonitorReportsExclusiveSharedOnce(t *testing.T) {
	t.Parallel()
	sys := buildFixture(t, fixture.NDv5)
	events := &fakeEvents{}
	attr := Attribution{Pools: map[string]PoolView{
		"rdma/ib":        {Exclusive: true, HCAs: []string{"mlx5_0", "mlx5_1"}},
		"rdma/shared_ib": {HCAs: []string{"mlx5_0", "mlx5_1"}, Grants: map[string][]string{"slot-1": {"mlx5_1"}, "slot-2": {"mlx5_0", "mlx5_1"}}},
	}}
	excl := Container{Namespace: "ml", Pod: "train", Container: "c", Devices: map[string][]string{"rdma/ib": {"mlx5_0"}}}
	leftOut := Container{Namespace: "dev", Pod: "a", Container: "c", Devices: map[string][]string{"rdma/shared_ib": {"slot-1"}}}
	reaching := Container{Namespace: "dev", Pod: "b", Container: "c", Devices: map[string][]string{"rdma/shared_ib": {"slot-2"}}}
	cs := []Container{excl, leftOut}
	m, err := NewMonitor(MonitorConfig{
		Reader: Reader{SysfsRoot: sys}, Source: attrSource{twoHCAs(), attr}, Lister: switchLister{&cs},
		Events: events, Period: time.Minute, Idle: IdleRule{Window: 5 * time.Minute, MinBytes: 1},
	}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	ctx := context.Background()
	overlapEvents := func() int {
		n := 0
		for _, e := range events.events {
			if e.Reason == ReasonExclusiveShared {
				n++
			}
		}
		return n
	}
	m.Step(ctx)
	if n := overlapEvents(); n != 0 {
		t.Fatalf("%d overlap events with the sharer's slot leaving mlx5_0 out, want 0", n)
	}
	cs = []Container{excl, leftOut, reaching}
	m.Step(ctx)
	m.Step(ctx)
	if n := overlapEvents(); n != 1 {
		t.Errorf("%d overlap events over two readings of one overlap, want 1", n)
	}
	if got := sample(t, reg, MetricExclusiveShared); got != 1 {
		t.Errorf("%s = %v, want 1", MetricExclusiveShared, got)
	}
	cs = []Container{excl, leftOut}
	m.Step(ctx)
	if got := sample(t, reg, MetricExclusiveShared); got != 0 {
		t.Errorf("%s after the sharer left = %v, want 0", MetricExclusiveShared, got)
	}
	cs = []Container{excl, leftOut, reaching}
	m.Step(ctx)
	if n := overlapEvents(); n != 2 {
		t.Errorf("%d overlap events after the overlap came back, want 2", n)
	}
	if want := "HCA mlx5_0 is held exclusively by ml/train/c and shared by dev/b/c"; Overlaps(Holders(cs, attr))[0].Message() != want {
		t.Errorf("message %q, want %q", Overlaps(Holders(cs, attr))[0].Message(), want)
	}
}
