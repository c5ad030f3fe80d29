package dra

import (
	"context"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/hca/selector"
	"github.com/ibkube/ibkube/internal/testing/dratest"
	"github.com/ibkube/ibkube/node/config"
)

// reportPercentiles adds p50 and p99 of the per-operation times in ms.
func reportPercentiles(b *testing.B, times []time.Duration) {
	if len(times) == 0 {
		return
	}
	slices.Sort(times)
	at := func(p float64) float64 {
		return float64(times[int(p*float64(len(times)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}

// BenchmarkPrepare prepares and unprepares a claim for two exclusive HCAs
// of the ND v5 fixture on a node where 30 pods already share its other
// HCAs, as the kubelet asks before a pod starts (goal: p99 <= 10 ms).
func BenchmarkPrepare(b *testing.B) {
	h := newHost(b, fixture.NDv5, nil)
	h.topology = "/var/lib/ibkube/topology/ndv5-topo.xml"
	d := newBenchDriver(b, h)
	ctx := context.Background()
	var busy []*resourceapi.ResourceClaim
	for i := range 30 {
		busy = append(busy, claim(fmt.Sprintf("busy-%d", i), "busy", shared("s", fmt.Sprintf("shared-ib-mlx5-%d", 4+i%4), types.UID(fmt.Sprint(i)))))
	}
	if _, err := d.PrepareResourceClaims(ctx, busy); err != nil {
		b.Fatal(err)
	}
	times := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		c := claim(fmt.Sprintf("claim-%d", i), "pod", alloc("nics", fmt.Sprintf("ib-mlx5-%d", i%4)), alloc("nics", fmt.Sprintf("ib-mlx5-%d", (i+1)%4)))
		times = append(times, prepareAndRelease(ctx, b, d, c))
	}
	reportPercentiles(b, times)
}

// prepareAndRelease prepares c as the kubelet does and unprepares it
// again, returning how long Prepare took.
func prepareAndRelease(ctx context.Context, b *testing.B, d *Driver, c *resourceapi.ResourceClaim) time.Duration {
	start := time.Now()
	res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
	took := time.Since(start)
	if err != nil || res[c.UID].Err != nil {
		b.Fatal(err, res[c.UID].Err)
	}
	if _, err := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: c.UID}}); err != nil {
		b.Fatal(err)
	}
	return took
}

func newBenchDriver(b *testing.B, h *host) *Driver {
	b.Helper()
	// The CDI directory is /var/run/cdi, a tmpfs on systemd hosts; /dev/shm
	// stands for it where there is one.
	cdi := b.TempDir()
	if dir, err := os.MkdirTemp("/dev/shm", "cdi"); err == nil {
		cdi = dir
		b.Cleanup(func() { os.RemoveAll(dir) })
	}
	d, err := New(Config{NodeName: "node-0", CDIDir: cdi}, discardLogger())
	if err != nil {
		b.Fatal(err)
	}
	d.Update(h.model(b))
	return d
}

// BenchmarkPortChangeToSlice measures, through the whole agent on the ND v5
// fixture, the time from a port going down in sysfs to the driver handing
// the ResourceSlice with the taint set to the publisher (goal: <= 1 s;
// discovery polls ports every 500 ms). Each iteration then brings the port
// back and waits, untimed, for the taint to clear after the hold.
func BenchmarkPortChangeToSlice(b *testing.B) {
	h := newHost(b, fixture.NDv5, nil)
	pub, stop := runAgent(b, h)
	defer stop()
	waitTainted(b, pub, nil)
	times := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		if err := fixture.SetPortState(h.dir, "mlx5_0", 1, "DOWN"); err != nil {
			b.Fatal(err)
		}
		waitTainted(b, pub, []string{"shared-ib-mlx5-0", "ib-mlx5-0"})
		times = append(times, time.Since(start))
		b.StopTimer()
		if err := fixture.SetPortState(h.dir, "mlx5_0", 1, "ACTIVE"); err != nil {
			b.Fatal(err)
		}
		waitTainted(b, pub, nil)
		b.StartTimer()
	}
	reportPercentiles(b, times)
}

// allocCase is one way to run the scheduler's allocator for a pod on a
// node: slices, classes and the cluster's allocated state.
type allocCase struct {
	name    string
	slices  []*resourceapi.ResourceSlice
	classes classLister
	state   structured.AllocatedState
	// claim, when set, replaces the row's claim for this case; noFit
	// says the claim fits nowhere on the node (Allocate gives no result).
	claim *resourceapi.ResourceClaim
	noFit bool
}

// allocRow is one BenchmarkAllocator row: the claim, the node as
// published, and what it is compared with in the same run.
type allocRow struct {
	name  string
	claim *resourceapi.ResourceClaim
	cases []allocCase
}

// BenchmarkAllocator is the scheduler's work per node and pod (what its
// Filter does: a new allocator over the node's slices and one Allocate,
// kube-scheduler v1.37.2's allocator and default features) on the ND H100
// v5 node. Each row runs its cases interleaved, one Allocate of each per
// iteration on one locked OS thread, and reports each case's thread CPU
// time (us/node for the first, the published slices; <case>-us/node for
// the others), its allocations, and the first case's CPU time as a
// multiple of each other's (x-<case>): ratios within one run, on a machine
// whose load changes run to run. The cases: "base", the same slices under
// classes without selectors (no CEL at all, below any class that tells
// drivers apart); "reference", the same slices under upstream
// scheduler_perf's class, `device.driver == "..."` alone (the floor of a
// DeviceClass with a selector: it cannot tell ibkube's pools apart);
// "shared-head", the order before the exclusive pool's first device went
// ahead of the shared pool's (the other side of that trade); "before", the
// slices as published before the allocator order and the retired
// attributes; "0-shares", the same node with no allocated shares
// elsewhere in the cluster.
func BenchmarkAllocator(b *testing.B) {
	for _, row := range allocatorRows(b) {
		b.Run(row.name, func(b *testing.B) {
			benchInterleaved(b, row)
		})
	}
}

func allocatorRows(b *testing.B) []allocRow {
	nd := func() *scheduler { return newScheduler(b, newHost(b, fixture.NDv5, nil)) }
	ib1 := extendedClaim("pod", contract.DeviceClassIB, 1)
	shared1 := extendedClaim("pod", contract.DeviceClassSharedIB, 1)
	rows := []allocRow{
		{"ib1-empty", ib1, standardCases(nd())},
		{"ib8-empty", extendedClaim("pod", contract.DeviceClassIB, 8), standardCases(nd())},
		{"shared1-empty", shared1, standardCases(nd())},
		{"shared1-30-sharers", shared1, standardCases(busy(nd()))},
		{"ib1-8-gpus", ib1, standardCases(withGPUs(nd()))},
		{"shared1-8-gpus", shared1, standardCases(withGPUs(nd()))},
	}
	for _, n := range []int{1000, 10000, 40000} {
		for _, c := range []struct {
			name  string
			claim *resourceapi.ResourceClaim
		}{{"ib1", ib1}, {"shared1", shared1}} {
			rows = append(rows,
				allocRow{fmt.Sprintf("%s-%dk-shares", c.name, n/1000), c.claim, sharesCases(nd(), n)},
				allocRow{fmt.Sprintf("%s-%dk-shares-split-pools", c.name, n/1000), c.claim, sharesCases(newScheduler(b, newHost(b, fixture.NDv5, splitPools())), n)})
		}
	}
	// A node whose shared device has sharers finds it by a map lookup
	// instead of walking the cluster's shares.
	rows = append(rows, allocRow{"shared1-30-sharers-10k-shares-split-pools", shared1, sharesCases(busy(newScheduler(b, newHost(b, fixture.NDv5, splitPools()))), 10000)})
	return rows
}

// BenchmarkAllocatorMachines is an rdma/ib: 1 pod's Filter on an empty
// node of each machine type of the fleet (docs/fleet.md), all under one
// agent config as one DaemonSet would run it (the chart's InfiniBand pools
// and OCI's RoCE pool), against "reference-alone": a scheduler_perf-shaped
// slice (10 devices of 4 attributes) of a driver whose name sorts before
// every other, beside the same slices, and a pod asking one of its
// devices through a `device.driver` class, as the fleet's reference-alone
// burst does. An OCI BM.GPU.H100.8 node serves no rdma/ib (its ports are
// RoCE): the allocator still evaluates the class on each of its 16
// devices before it says so, where the device plugin's node simply has
// none of the resource.
func BenchmarkAllocatorMachines(b *testing.B) {
	cfg := config.Default()
	cfg.Pools = append(cfg.Pools, roceConfig().Pools...)
	ib1 := extendedClaim("pod", contract.DeviceClassIB, 1)
	for _, m := range []struct {
		fixture string
		fits    bool
	}{{fixture.NDv5, true}, {fixture.HB, true}, {fixture.OCIH100, false}} {
		b.Run("ib1-"+m.fixture, func(b *testing.B) {
			s := newScheduler(b, newHost(b, m.fixture, cfg))
			st := s.state()
			withRef := append([]*resourceapi.ResourceSlice{dratest.RefSlice(dratest.RefFirstDriver, "node-0")}, s.slices...)
			ref := dratest.RefClass("ref-first", dratest.RefFirstDriver)
			classes := maps.Clone(s.classes)
			classes[ref.Name] = ref
			benchInterleaved(b, allocRow{"ib1-" + m.fixture, ib1, []allocCase{
				{name: "published", slices: s.slices, classes: s.classes, state: st, noFit: !m.fits},
				{name: "reference-alone", slices: withRef, classes: classes, state: st, claim: extendedClaim("pod", ref.Name, 1)},
			}})
		})
	}
}

// standardCases are the published slices, base, reference, shared-head
// and before.
func standardCases(s *scheduler) []allocCase {
	st := s.state()
	return []allocCase{
		{name: "published", slices: s.slices, classes: s.classes, state: st},
		{name: "base", slices: s.slices, classes: selectorless(s.classes), state: st},
		{name: "reference", slices: s.slices, classes: driverOnly(s.classes), state: st},
		{name: "shared-head", slices: sharedHeadFirst(s.slices), classes: s.classes, state: st},
		{name: "before", slices: beforeOrder(s.slices), classes: s.classes, state: st},
	}
}

// sharesCases are the published slices with n shares allocated on other
// nodes, against none and against base.
func sharesCases(s *scheduler, n int) []allocCase {
	st := s.state()
	return []allocCase{
		{name: "published", slices: s.slices, classes: s.classes, state: sharesElsewhere(st, n)},
		{name: "0-shares", slices: s.slices, classes: s.classes, state: st},
		{name: "base", slices: s.slices, classes: selectorless(s.classes), state: sharesElsewhere(st, n)},
	}
}

func benchInterleaved(b *testing.B, row allocRow) {
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}}
	cache := cel.NewCache(10, cel.Features{EnableConsumableCapacity: true})
	run := func(c allocCase) {
		a, err := structured.NewAllocator(ctx, schedulerFeatures, c.state, c.classes, c.slices, cache)
		if err != nil {
			b.Fatal(err)
		}
		claim, want := row.claim, 1
		if c.claim != nil {
			claim = c.claim
		}
		if c.noFit {
			want = 0
		}
		res, err := a.Allocate(ctx, node, []*resourceapi.ResourceClaim{claim})
		if err != nil || len(res) != want {
			b.Fatalf("%s: allocate: %v, %d results, want %d", c.name, err, len(res), want)
		}
	}
	allocs := make([]float64, len(row.cases))
	for i, c := range row.cases {
		allocs[i] = testing.AllocsPerRun(20, func() { run(c) })
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu := make([]time.Duration, len(row.cases))
	n := 0
	for b.Loop() {
		for i, c := range row.cases {
			start := threadCPU(b)
			run(c)
			cpu[i] += threadCPU(b) - start
		}
		n++
	}
	us := func(i int) float64 { return float64(cpu[i].Nanoseconds()) / float64(n) / 1000 }
	b.ReportMetric(us(0), "us/node")
	b.ReportMetric(allocs[0], "allocs/node")
	for i, c := range row.cases[1:] {
		b.ReportMetric(us(i+1), c.name+"-us/node")
		b.ReportMetric(allocs[i+1], c.name+"-allocs/node")
		b.ReportMetric(us(0)/us(i+1), "x-"+c.name)
	}
}

// threadCPU is the CPU time of the calling (locked) OS thread: what one
// Filter call costs, without the time other processes of a busy machine
// take from it.
func threadCPU(b *testing.B) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ts.Nano())
}

// selectorless are the classes without their selectors.
func selectorless(l classLister) classLister {
	out := classLister{}
	for name, c := range l {
		c = c.DeepCopy()
		c.Spec.Selectors = nil
		out[name] = c
	}
	return out
}

// driverOnly are the classes with upstream scheduler_perf's selector
// (test/integration/scheduler_perf/dra/templates/deviceclass.yaml:
// `device.driver == "..."`) for ibkube's driver: every class matches every
// ibkube device, whatever its pool.
func driverOnly(l classLister) classLister {
	out := classLister{}
	for name, c := range l {
		c = c.DeepCopy()
		c.Spec.Selectors = dratest.DriverSelectors(contract.DRADriverName)
		out[name] = c
	}
	return out
}

// sharedHeadFirst is the node's slices with the first shared device moved
// to the front, as slice.Slices ordered them before the exclusive pool's
// first device went first.
func sharedHeadFirst(objs []*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	out := make([]*resourceapi.ResourceSlice, len(objs))
	for i, s := range objs {
		s = s.DeepCopy()
		devs := s.Spec.Devices
		if j := slices.IndexFunc(devs, func(d resourceapi.Device) bool { return ptr.Deref(d.AllowMultipleAllocations, false) }); j > 0 {
			head := devs[j]
			copy(devs[1:j+1], devs[:j])
			devs[0] = head
		}
		out[i] = s
	}
	return out
}

// beforeOrder is the node's slices as published before slice.Slices
// ordered them for the allocator and retired attributes: the (default)
// config's order, every shared device first, with mode, nodeGUID and
// netdev.
func beforeOrder(objs []*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	out := make([]*resourceapi.ResourceSlice, len(objs))
	for i, s := range objs {
		s = s.DeepCopy()
		slices.SortStableFunc(s.Spec.Devices, func(a, b resourceapi.Device) int {
			return cmpBool(ptr.Deref(b.AllowMultipleAllocations, false), ptr.Deref(a.AllowMultipleAllocations, false))
		})
		for j, d := range s.Spec.Devices {
			mode := config.ModeExclusive
			if ptr.Deref(d.AllowMultipleAllocations, false) {
				mode = config.ModeShared
			}
			d.Attributes["mode"] = resourceapi.DeviceAttribute{StringValue: ptr.To(mode)}
			d.Attributes["nodeGUID"] = resourceapi.DeviceAttribute{StringValue: ptr.To(fmt.Sprintf("0015:5dff:fd4b:ff%02x", j))}
			d.Attributes["netdev"] = resourceapi.DeviceAttribute{StringValue: ptr.To(fmt.Sprintf("ibP%dp0s0", 257+j))}
		}
		out[i] = s
	}
	return out
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// busy allocates what runs on the node in the 30-sharer rows: an
// rdma/ib: 4 pod and 30 rdma/shared_ib: 1 pods, where the allocator puts
// them.
func busy(s *scheduler) *scheduler {
	s.allocate(extendedClaim("four", contract.DeviceClassIB, 4))
	for i := range 30 {
		s.allocate(extendedClaim(fmt.Sprintf("sharer-%d", i), contract.DeviceClassSharedIB, 1))
	}
	return s
}

// sharesElsewhere adds n allocated shares on other nodes to st, 30 a node
// on one shared device each, as kube-scheduler records a share with its
// consumed capacity.
func sharesElsewhere(st structured.AllocatedState, n int) structured.AllocatedState {
	out := structured.AllocatedState{
		AllocatedDevices:         st.AllocatedDevices.Clone(),
		AllocatedSharedDeviceIDs: st.AllocatedSharedDeviceIDs.Clone(),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for id, c := range st.AggregatedCapacity {
		out.AggregatedCapacity[id] = c
	}
	for i := range n {
		id := structured.MakeDeviceID(contract.DRADriverName, fmt.Sprintf("node-%d", 1+i/30), "shared-ib-mlx5-7")
		out.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, ptr.To(types.UID(fmt.Sprintf("share-%d", i)))))
		out.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, map[resourceapi.QualifiedName]apiresource.Quantity{
			contract.DRACapacitySlots: apiresource.MustParse("1"),
		}))
	}
	return out
}

// splitPools is a config whose shared pool is mlx5_7 alone and whose
// exclusive pool the other seven: no HCA in both, so no counters.
func splitPools() *config.AgentConfig {
	c := config.Default()
	c.Pools[0].Selector.Names = []string{"mlx5_7"}
	c.Pools[1].Selector.Exclude = []selector.Match{{Names: []string{"mlx5_7"}}}
	return c
}

// gpuDriver is the other driver of withGPUs: its name sorts before ours,
// as gpu.nvidia.com does, so the allocator passes its devices first.
const gpuDriver = "gpu.example.com"

// withGPUs adds the node's eight GPUs as a GPU DRA driver publishes them
// (attributes after NVIDIA's k8s-dra-driver-gpu: type, uuid, productName,
// brand, architecture, versions, index, minor, PCI and NUMA placement,
// and a memory capacity).
func withGPUs(s *scheduler) *scheduler {
	gpus := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "node-0-gpu.example.com-0"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: gpuDriver, NodeName: ptr.To("node-0"),
			Pool: resourceapi.ResourcePool{Name: "node-0", Generation: 1, ResourceSliceCount: 1},
		},
	}
	strAttr := func(v string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: ptr.To(v)} }
	intAttr := func(v int64) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{IntValue: ptr.To(v)} }
	verAttr := func(v string) resourceapi.DeviceAttribute {
		return resourceapi.DeviceAttribute{VersionValue: ptr.To(v)}
	}
	for i := range int64(8) {
		gpus.Spec.Devices = append(gpus.Spec.Devices, resourceapi.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"type": strAttr("gpu"), "uuid": strAttr(fmt.Sprintf("GPU-%08d-0000-0000-0000-000000000000", i)),
				"productName": strAttr("NVIDIA H100 80GB HBM3"), "brand": strAttr("Nvidia"), "architecture": strAttr("Hopper"),
				"cudaComputeCapability": verAttr("9.0.0"), "driverVersion": verAttr("580.95.5"), "cudaDriverVersion": verAttr("13.0.0"),
				"index": intAttr(i), "minor": intAttr(i),
				"resource.kubernetes.io/pciBusID": strAttr(fmt.Sprintf("0001:00:%02x.0", i)),
				"resource.kubernetes.io/pcieRoot": strAttr(fmt.Sprintf("pci0001:%02x", i)),
				"resource.kubernetes.io/numaNode": intAttr(i / 4),
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: apiresource.MustParse("80Gi")}},
		})
	}
	s.slices = append([]*resourceapi.ResourceSlice{gpus}, s.slices...)
	return s
}
