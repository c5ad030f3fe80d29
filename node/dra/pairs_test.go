package dra

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/test/e2e/fakegpu"
	"github.com/ibkube/ibkube/webhook/aligned"
)

// Prepare reads the aligned claim's request names through contract:
// they are the names webhook/aligned gives the claim's requests, for every
// pair and rung it builds.
func TestAlignedNamesAreTheContracts(t *testing.T) {
	t.Parallel()
	if diff := cmp.Diff([]string{aligned.RungPCIeRoot, aligned.RungNUMANode, aligned.RungAny}, contract.Rungs()); diff != "" {
		t.Errorf("rungs (-webhook/aligned +contract):\n%s", diff)
	}
	spec, err := aligned.Spec(aligned.Shape{GPUs: 8, HCAs: aligned.MaxHCAs, GPUClass: fakegpu.DeviceClass, HCAClass: contract.DeviceClassRoCE})
	if err != nil {
		t.Fatal(err)
	}
	var gpus, hcas int
	for _, r := range spec.Devices.Requests {
		for _, sub := range r.FirstAvailable {
			result := r.Name + "/" + sub.Name
			pair, rung, ok := contract.AlignedRungOf(result)
			if !ok || rung != sub.Name || aligned.GPURequest(pair) != r.Name {
				t.Errorf("result %q: contract reads pair %d rung %q (%v)", result, pair, rung, ok)
			}
			gpus++
		}
		if r.Exactly == nil {
			continue
		}
		if _, ok := contract.AlignedPairOf(r.Name); ok {
			hcas++
		}
	}
	if gpus != 8*len(contract.Rungs()) || hcas != aligned.MaxHCAs {
		t.Errorf("the claim of 8 GPUs and %d HCAs has %d GPU rungs and %d HCA requests", aligned.MaxHCAs, gpus, hcas)
	}
}

func TestClaimPairs(t *testing.T) {
	t.Parallel()
	hca := func(req, name, root string, numa int) claimHCA {
		return claimHCA{request: req, place: hcaPlace{name: name, root: root, numa: numa}}
	}
	gpu := func(req, id, root string, numa int) claimGPU {
		return claimGPU{request: req, place: gpuPlace{id: id, root: root, numa: numa}}
	}
	for _, tc := range []struct {
		name string
		hcas []claimHCA
		gpus []claimGPU
		want string
	}{
		{"no GPU in the claim: no pairs", []claimHCA{hca("hcas", "mlx5_0", "pci0000:00", 0)}, nil, ""},
		{"aligned: each HCA with its pair's GPU, whatever is nearer",
			[]claimHCA{hca("hca-0-0", "mlx5_0", "pci0000:00", 0), hca("hca-1-0", "mlx5_1", "pci0000:20", 0), hca("hca-2-0", "mlx5_2", "pci0000:80", 1)},
			[]claimGPU{gpu("gpu-0/pcie-root", "0000:0f:00.0", "pci0000:00", 0), gpu("gpu-1/numa-node", "0000:89:00.0", "pci0000:80", 0), gpu("gpu-2/any", "0000:2d:00.0", "pci0000:20", 0)},
			"mlx5_0=0000:0f:00.0/pcie-root,mlx5_1=0000:89:00.0/numa-node,mlx5_2=0000:2d:00.0/none"},
		{"plain claim: no GPU near", []claimHCA{hca("hcas", "mlx5_4", "pci0000:80", 1)},
			[]claimGPU{gpu("gpus", "0000:0f:00.0", "pci0000:00", 0)}, "mlx5_4=/none"},
		{"plain claim: the nearest of the claim's GPUs, all of them at that nearness",
			[]claimHCA{hca("hcas", "mlx5_0", "pci0001:00", 0), hca("hcas", "mlx5_4", "pci0005:00", 1)},
			[]claimGPU{gpu("gpus", "0001:00:00.0", "pci0101:00", 0), gpu("gpus", "0002:00:00.0", "pci0102:00", 0), gpu("gpus", "0009:00:00.0", "pci0109:00", 1)},
			"mlx5_0=0001:00:00.0+0002:00:00.0/numa-node,mlx5_4=0009:00:00.0/numa-node"},
		{"plain claim: a root beats a NUMA node", []claimHCA{hca("hcas", "mlx5_0", "pci0000:00", 0)},
			[]claimGPU{gpu("gpus", "0000:2d:00.0", "pci0000:20", 0), gpu("gpus", "0000:0f:00.0", "pci0000:00", 0)},
			"mlx5_0=0000:0f:00.0/pcie-root"},
		{"a GPU whose place is unknown is named, not dropped", []claimHCA{hca("hcas", "mlx5_0", "pci0000:00", 0)},
			[]claimGPU{gpu("gpus", "gpu-3", "", -1), gpu("gpus", "0000:89:00.0", "pci0000:80", 1)},
			"mlx5_0=gpu-3/unknown"},
		{"an HCA without a NUMA node is unknown to a GPU on another root", []claimHCA{hca("hcas", "mlx5_3", "pci0000:30", -1)},
			[]claimGPU{gpu("gpus", "0000:89:00.0", "pci0000:80", 1)}, "mlx5_3=0000:89:00.0/unknown"},
		{"one HCA in two requests is one pair", []claimHCA{hca("nics", "mlx5_0", "pci0000:00", 0), hca("ipoib", "mlx5_0", "pci0000:00", 0)},
			[]claimGPU{gpu("gpus", "0000:0f:00.0", "pci0000:00", 0)}, "mlx5_0=0000:0f:00.0/pcie-root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := pairsValue(claimPairs(tc.hcas, tc.gpus)); got != tc.want {
				t.Errorf("pairs %q, want %q", got, tc.want)
			}
		})
	}
}

func TestFallback(t *testing.T) {
	t.Parallel()
	pairs := []Pair{
		{HCA: "mlx5_0", GPUs: []string{"0000:0f:00.0"}, Near: contract.NearPCIeRoot, Rung: aligned.RungPCIeRoot},
		{HCA: "mlx5_4", GPUs: []string{"0000:89:00.0"}, Near: contract.NearNUMANode, Rung: aligned.RungNUMANode},
	}
	for _, tc := range []struct {
		best  string
		pairs []Pair
		want  bool
	}{
		{aligned.RungPCIeRoot, pairs, true},
		{aligned.RungNUMANode, pairs, false}, // a node of NUMA pairs only (ND H100 v5) gave its best
		{aligned.RungPCIeRoot, pairs[:1], false},
		{aligned.RungPCIeRoot, []Pair{{HCA: "mlx5_0", Near: contract.NearNone}}, false}, // not an aligned claim
	} {
		msg, got := fallback("team/train-0", tc.pairs, tc.best)
		if got != tc.want {
			t.Errorf("best %s, pairs %v: fell back %v (%q), want %v", tc.best, tc.pairs, got, msg, tc.want)
		}
	}
	msg, _ := fallback("team/train-0", pairs, aligned.RungPCIeRoot)
	if want := "mlx5_4=0000:89:00.0/numa-node (rung numa-node)"; !strings.Contains(msg, want) || strings.Contains(msg, "mlx5_0") {
		t.Errorf("message %q: want the fallen pair %q named and no other", msg, want)
	}
}

func TestNodeBestRung(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fixture string
		want    string
	}{
		{fixture.OCIH100, aligned.RungPCIeRoot}, // each GPU behind its NIC's switch
		{fixture.NDv5, aligned.RungNUMANode},    // a root per device
		{fixture.HB, aligned.RungAny},           // no GPU
	} {
		h := newHost(t, tc.fixture, nil)
		if got := nodeBestRung(h.scan(t).HCAs); got != tc.want {
			t.Errorf("%s: best rung %s, want %s", tc.fixture, got, tc.want)
		}
	}
}

func TestNUMANodeRefusesWhatIsNoPCIAddress(t *testing.T) {
	t.Parallel()
	h := newHost(t, fixture.OCIH100, nil)
	if n, err := NUMANode(fixture.SysfsRoot(h.dir), "0000:0f:00.0"); err != nil || n != 0 {
		t.Errorf("NUMA node of the first GPU: %d, %v; want 0", n, err)
	}
	for _, addr := range []string{"", "..", "../../../etc", "0000:0f:00.0/../..", "gpu-0"} {
		if _, err := NUMANode(fixture.SysfsRoot(h.dir), addr); err == nil || !strings.Contains(err.Error(), "want domain:bus:device.function") {
			t.Errorf("NUMA node of %q: %v, want the refusal naming the accepted form", addr, err)
		}
	}
}

// sliceLister serves the scheduler's slices as the API server would for
// the field selector Prepare sends.
type sliceLister struct{ slices []*resourceapi.ResourceSlice }

func (l sliceLister) List(_ context.Context, opts metav1.ListOptions) (*resourceapi.ResourceSliceList, error) {
	sel, err := fields.ParseSelector(opts.FieldSelector)
	if err != nil {
		return nil, err
	}
	out := &resourceapi.ResourceSliceList{}
	for _, s := range l.slices {
		node := ""
		if s.Spec.NodeName != nil {
			node = *s.Spec.NodeName
		}
		if sel.Matches(fields.Set{resourceapi.ResourceSliceSelectorNodeName: node, resourceapi.ResourceSliceSelectorDriver: s.Spec.Driver}) {
			out.Items = append(out.Items, *s)
		}
	}
	return out, nil
}

// podEvent is one Event the driver sent.
type podEvent struct {
	Pod, Type, Reason, Message string
}

type podEvents struct {
	mu     sync.Mutex
	events []podEvent
}

func (e *podEvents) PodEvent(pod PodRef, eventType, reason, message string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, podEvent{pod.Namespace + "/" + pod.Name, eventType, reason, message})
}

// pairsReport is what one claim's container is told, and its pod's Events.
type pairsReport struct {
	Pairs    string     `json:"pairs,omitempty"`
	Partners string     `json:"partners,omitempty"`
	Events   []podEvent `json:"events,omitempty"`
}

// pairsDriver is a driver on the layout's fixture that reads the GPU
// places from the scheduler's slices and the fixture's sysfs.
func pairsDriver(t testing.TB, n *alignedNode, events *podEvents) (d *Driver, sysfs string) {
	t.Helper()
	log := discardLogger()
	if tt, ok := t.(*testing.T); ok {
		log = testr.New(tt)
	}
	h := newHost(t, n.layout.fixture, n.layout.config())
	sysfs = fixture.SysfsRoot(h.dir)
	d, err := New(Config{
		NodeName: "node-0", CDIDir: t.TempDir(), RecoverHold: testRecoverHold, MinPublishInterval: testMinPublishInterval,
		PCIeRoot:  func(addr string) (string, error) { return PCIeRoot(sysfs, addr) },
		NUMANode:  func(addr string) (int, error) { return NUMANode(sysfs, addr) },
		Slices:    sliceLister{n.slices},
		PodEvents: events,
	}, log)
	if err != nil {
		t.Fatal(err)
	}
	d.Update(h.model(t))
	return d, sysfs
}

// prepareReport prepares claim c allocated as a, reserved for pod
// "train-0", and reads what its CDI spec tells the container.
func prepareReport(t *testing.T, d *Driver, events *podEvents, c *resourceapi.ResourceClaim, a *resourceapi.AllocationResult) pairsReport {
	t.Helper()
	c = c.DeepCopy()
	c.UID = testUID(c.Name)
	c.Status.Allocation = a
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "train-0", UID: testUID("pod-" + c.Name)}}
	events.mu.Lock()
	events.events = nil
	events.mu.Unlock()
	mustPrepare(t, d, c)
	spec, err := d.store.read(c.UID)
	if err != nil || spec == nil {
		t.Fatalf("CDI spec of %s: %v, %v", c.Name, spec, err)
	}
	var r pairsReport
	for i, dev := range spec.Devices {
		env := map[string]string{}
		for _, e := range dev.ContainerEdits.Env {
			k, v, _ := strings.Cut(e, "=")
			env[k] = v
		}
		if i > 0 && (env[contract.EnvGPUPairs] != r.Pairs || env[contract.EnvGPUPartners] != r.Partners) {
			t.Errorf("CDI device %s says %q and %q, the first said %q and %q: the container would read whichever the runtime applies last",
				dev.Name, env[contract.EnvGPUPairs], env[contract.EnvGPUPartners], r.Pairs, r.Partners)
		}
		r.Pairs, r.Partners = env[contract.EnvGPUPairs], env[contract.EnvGPUPartners]
	}
	events.mu.Lock()
	r.Events = events.events
	events.mu.Unlock()
	// The pod is gone before the next case's: its HCAs are free again.
	if _, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: c.UID}}); err != nil {
		t.Fatal(err)
	}
	return r
}

// firstGPU is the layout's first GPU and its place.
func (n *alignedNode) firstGPU() (string, place) {
	return n.gpus[0], n.places[structuredID{fakegpu.DriverName, n.gpus[0]}]
}

// holdAllBut holds every GPU but keep, and every HCA for which busy says so.
func (n *alignedNode) holdAllBut(keep string, busy func(place) bool) {
	for _, g := range n.gpus {
		if g != keep {
			n.hold(fakegpu.DriverName, g)
		}
	}
	for _, h := range n.hcas {
		if busy(n.places[structuredID{contract.DRADriverName, h}]) {
			n.hold(contract.DRADriverName, h)
		}
	}
}

// TestPairsOnTheScheduler prepares claims as kube-scheduler's allocator
// allocates them on each layout and keeps what the container is told and
// the pod's Events as goldens (testdata/pairs/<layout>.json): the aligned
// claim on an empty node, the same claim when its GPU's root pair is taken
// (numa-node) and when its NUMA node's HCAs are too (any), the pod's two
// independent claims (`nvidia.com/gpu` + `rdma/ib`, whose HCA claim
// knows no GPU), and one plain claim of GPUs and HCAs without constraints.
func TestPairsOnTheScheduler(t *testing.T) {
	t.Parallel()
	for _, l := range alignedLayouts() {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			n := newAlignedNode(t, l)
			events := &podEvents{}
			d, sysfs := pairsDriver(t, n, events)
			got := map[string]pairsReport{}
			alignedClaim := func(name string, gpus int) {
				spec, err := aligned.Spec(aligned.Shape{GPUs: gpus, HCAs: gpus * l.hcasPerGPU, GPUClass: fakegpu.DeviceClass, HCAClass: l.hcaClass})
				if err != nil {
					t.Fatal(err)
				}
				c := specClaim(name, spec)
				a := n.allocate(c)
				if a == nil {
					t.Fatalf("%s: the aligned claim of %d GPUs does not fit", name, gpus)
				}
				got[name] = prepareReport(t, d, events, c, a)
			}
			alignedClaim("aligned-2gpu-empty-node", 2)

			gpu, at := n.firstGPU()
			n.allocated = nil
			n.holdAllBut(gpu, func(p place) bool { return p.root == at.root && at.root != "" })
			alignedClaim("aligned-1gpu-root-pair-taken", 1)

			n.allocated = nil
			numa := gpuNUMA(t, sysfs, n, gpu)
			n.holdAllBut(gpu, func(p place) bool { return p.numa == numa })
			alignedClaim("aligned-1gpu-numa-pairs-taken", 1)

			n.allocated = nil
			gpus, hcas := extendedClaim("gpus", fakegpu.DeviceClass, 2), extendedClaim("hcas", l.hcaClass, int64(2*l.hcasPerGPU))
			if n.allocate(gpus) == nil {
				t.Fatal("nvidia.com/gpu: 2 does not fit an empty node")
			}
			got["independent-claims-hca-claim"] = prepareReport(t, d, events, hcas, n.allocate(hcas))

			n.allocated = nil
			plain := extendedClaim("plain-gpu-hca", fakegpu.DeviceClass, 2)
			plain.Spec.Devices.Requests = append(plain.Spec.Devices.Requests, extendedClaim("", l.hcaClass, int64(2*l.hcasPerGPU)).Spec.Devices.Requests[0])
			plain.Spec.Devices.Requests[1].Name = "hcas"
			got["plain-gpu-hca"] = prepareReport(t, d, events, plain, n.allocate(plain))

			checkPairsReports(t, l, got)
			golden(t, "pairs/"+l.name+".json", got)
		})
	}
}

// gpuNUMA is the GPU's NUMA node by the fixture's sysfs, which every
// layout knows even where the GPU driver publishes none.
func gpuNUMA(t *testing.T, sysfs string, n *alignedNode, gpu string) int64 {
	t.Helper()
	for _, sl := range n.slices {
		for _, d := range sl.Spec.Devices {
			if sl.Spec.Driver != fakegpu.DriverName || d.Name != gpu {
				continue
			}
			numa, err := NUMANode(sysfs, *d.Attributes[deviceattribute.StandardDeviceAttributePCIBusID].StringValue)
			if err != nil {
				t.Fatal(err)
			}
			return int64(numa)
		}
	}
	t.Fatalf("no GPU %s in the slices", gpu)
	return -1
}

// checkPairsReports pins, beside the goldens, what a user would notice:
// which cases send the fall-back Event and which claims report pairs.
func checkPairsReports(t *testing.T, l gpuLayout, got map[string]pairsReport) {
	t.Helper()
	wantEvent := map[string]bool{
		"aligned-1gpu-root-pair-taken":  l.name != "ndv5", // ND H100 v5 pairs on NUMA nodes only: numa-node is its best
		"aligned-1gpu-numa-pairs-taken": true,
	}
	for name, r := range got {
		if sent := len(r.Events) > 0; sent != wantEvent[name] {
			t.Errorf("%s: Events %v, want an Event %v", name, r.Events, wantEvent[name])
		}
		for _, e := range r.Events {
			if e.Type != corev1.EventTypeWarning || e.Reason != ReasonGPUAlignmentFellBack || e.Pod != "team/train-0" {
				t.Errorf("%s: Event %+v, want a Warning %s on team/train-0", name, e, ReasonGPUAlignmentFellBack)
			}
		}
		if hasPairs := r.Pairs != ""; hasPairs == (name == "independent-claims-hca-claim") {
			t.Errorf("%s: pairs %q; a claim reports pairs exactly when it holds GPUs", name, r.Pairs)
		}
		if r.Partners == "" {
			t.Errorf("%s: no GPU partners, though every HCA of %s has one", name, l.fixture)
		}
	}
	if r := got["aligned-2gpu-empty-node"]; strings.Contains(r.Pairs, contract.NearNone) || strings.Contains(r.Pairs, contract.NearUnknown) {
		t.Errorf("aligned claim on an empty node: %q, want every HCA on its GPU's root or NUMA node", r.Pairs)
	}
}

// TestFallbackEventOncePerAllocation: the kubelet asks to prepare a claim
// again after a restart of either side; the pod hears of its fall back
// once, when the spec is written.
func TestFallbackEventOncePerAllocation(t *testing.T) {
	t.Parallel()
	n := newAlignedNode(t, alignedLayouts()[0])
	events := &podEvents{}
	d, _ := pairsDriver(t, n, events)
	gpu, at := n.firstGPU()
	n.holdAllBut(gpu, func(p place) bool { return p.root == at.root })
	spec, err := aligned.Spec(aligned.Shape{GPUs: 1, HCAs: 2, GPUClass: fakegpu.DeviceClass, HCAClass: n.layout.hcaClass})
	if err != nil {
		t.Fatal(err)
	}
	c := specClaim("fell-back", spec)
	c.UID = testUID(c.Name)
	c.Status.Allocation = n.allocate(c)
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "train-0", UID: testUID("pod")}}
	for range 3 {
		mustPrepare(t, d, c)
	}
	if len(events.events) != 1 {
		t.Errorf("%d Events after three prepares of one allocation, want 1: %v", len(events.events), events.events)
	}
}

// blockingSlices answers no list until the caller gives up.
type blockingSlices struct{}

func (blockingSlices) List(ctx context.Context, _ metav1.ListOptions) (*resourceapi.ResourceSliceList, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestPairsWithoutTheGPUSlices: a GPU whose slice cannot be read (an API
// server that does not answer within gpuLookupTimeout) pairs as unknown,
// by its device name, and the claim is prepared all the same.
func TestPairsWithoutTheGPUSlices(t *testing.T) {
	t.Parallel()
	n := newAlignedNode(t, alignedLayouts()[0])
	d, _ := pairsDriver(t, n, &podEvents{})
	d.cfg.Slices = blockingSlices{}
	spec, err := aligned.Spec(aligned.Shape{GPUs: 1, HCAs: 2, GPUClass: fakegpu.DeviceClass, HCAClass: n.layout.hcaClass})
	if err != nil {
		t.Fatal(err)
	}
	c := specClaim("no-slices", spec)
	got := prepareReport(t, d, &podEvents{}, c, n.allocate(c))
	if want := "mlx5_0=gpu-0/unknown,mlx5_1=gpu-0/unknown"; got.Pairs != want {
		t.Errorf("pairs %q, want %q", got.Pairs, want)
	}
}
