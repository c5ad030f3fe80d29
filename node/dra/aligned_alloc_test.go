package dra

import (
	"fmt"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/nccl"
	"github.com/ibkube/ibkube/node/config"
	"github.com/ibkube/ibkube/test/e2e/fakegpu"
	"github.com/ibkube/ibkube/webhook/aligned"
)

// gpuLayout is a machine the aligned claim is proved on: ibkube's slices
// from an HCA fixture beside a stand-in GPU driver's slice.
type gpuLayout struct {
	name       string
	fixture    string
	config     func() *config.AgentConfig
	hcaClass   string
	hcaPool    string // the pool attribute of the HCA class's devices
	gpus       func(testing.TB) []fakegpu.GPU
	hcasPerGPU int
}

func alignedLayouts() []gpuLayout {
	oci := func(withNUMA bool) func(testing.TB) []fakegpu.GPU {
		return func(t testing.TB) []fakegpu.GPU {
			return fakegpu.FromInventory(newHost(t, fixture.OCIH100, nil).scan(t).GPUs, withNUMA)
		}
	}
	return []gpuLayout{
		// Bare metal, GPUs publishing both attributes.
		{"oci-h100", fixture.OCIH100, roceConfig, contract.DeviceClassRoCE, contract.ExtendedResourceRoCE, oci(true), 2},
		// Bare metal, GPUs publishing what NVIDIA's DRA driver does: pcieRoot, no numaNode.
		{"oci-h100-pcie-root-only", fixture.OCIH100, roceConfig, contract.DeviceClassRoCE, contract.ExtendedResourceRoCE, oci(false), 2},
		// Azure ND H100 v5: a root per device, so only NUMA nodes pair (test/e2e/fakegpu's e2e layout).
		{"ndv5", fixture.NDv5, config.Default, contract.DeviceClassIB, contract.ExtendedResourceIB, ndv5GPUs, 1},
	}
}

func ndv5GPUs(t testing.TB) []fakegpu.GPU {
	topo, err := nccl.Topology("ndv5-topo.xml")
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := fakegpu.GPUs(topo)
	if err != nil {
		t.Fatal(err)
	}
	return gpus
}

// alignedNode is the scheduler over one layout, with the devices' places
// at hand.
type alignedNode struct {
	*scheduler
	layout gpuLayout
	gpus   []string // GPU device names
	hcas   []string // the HCA class's device names
	places map[structuredID]place
}

type structuredID struct{ driver, device string }

// place is where a device sits; "" and -1 where it publishes nothing.
type place struct {
	root string
	numa int64
}

func newAlignedNode(t testing.TB, l gpuLayout) *alignedNode {
	t.Helper()
	s := newScheduler(t, newHost(t, l.fixture, l.config()))
	gpuSlice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "gpus-node-0"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   fakegpu.DriverName,
			Pool:     resourceapi.ResourcePool{Name: "node-0", Generation: 1, ResourceSliceCount: 1},
			NodeName: ptr.To("node-0"),
			Devices:  fakegpu.Devices(l.gpus(t)),
		},
	}
	s.slices = append(s.slices, gpuSlice)
	s.classes[fakegpu.DeviceClass] = &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: fakegpu.DeviceClass},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q", fakegpu.DriverName),
		}}}},
	}
	n := &alignedNode{scheduler: s, layout: l, places: map[structuredID]place{}}
	for _, sl := range s.slices {
		for _, d := range sl.Spec.Devices {
			p := place{numa: -1}
			if a, ok := d.Attributes[deviceattribute.StandardDeviceAttributePCIeRoot]; ok {
				p.root = *a.StringValue
			}
			if a, ok := d.Attributes[deviceattribute.StandardDeviceAttributeNUMANode]; ok {
				p.numa = *a.IntValue
			}
			n.places[structuredID{sl.Spec.Driver, d.Name}] = p
			switch {
			case sl.Spec.Driver == fakegpu.DriverName:
				n.gpus = append(n.gpus, d.Name)
			case ptr.Deref(d.Attributes[contract.DRAAttrPool].StringValue, "") == l.hcaPool:
				n.hcas = append(n.hcas, d.Name)
			}
		}
	}
	return n
}

// hold marks devices allocated to other pods, as the scheduler's cache of
// allocated claims does.
func (n *alignedNode) hold(driver string, devices ...string) {
	for _, d := range devices {
		n.allocated = append(n.allocated, &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "busy-" + d, Namespace: "team", UID: types.UID("busy-" + d)},
			Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
				Results: []resourceapi.DeviceRequestAllocationResult{{Request: "busy", Driver: driver, Pool: "node-0", Device: d}},
			}}},
		})
	}
}

// specClaim makes a ResourceClaim of spec.
func specClaim(name string, spec resourceapi.ResourceClaimSpec) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team", UID: types.UID(name)}, Spec: spec}
}

// alignment counts, in one allocation of an aligned claim, the HCAs on
// their own GPU's PCIe root and on its NUMA node, and the HCAs by the rung
// their GPU took.
type alignment struct {
	onRoot, onNUMA int
	rungs          map[string]int
}

func (n *alignedNode) alignment(t testing.TB, a *resourceapi.AllocationResult) alignment {
	t.Helper()
	type gpu struct {
		place
		rung string
	}
	gpuOf := map[int]gpu{}
	for _, r := range a.Devices.Results {
		if pair, rung, ok := contract.AlignedRungOf(r.Request); ok {
			gpuOf[pair] = gpu{n.places[structuredID{r.Driver, r.Device}], rung}
		}
	}
	out := alignment{rungs: map[string]int{}}
	for _, r := range a.Devices.Results {
		pair, ok := contract.AlignedPairOf(r.Request)
		if !ok {
			continue
		}
		g, hca := gpuOf[pair], n.places[structuredID{r.Driver, r.Device}]
		out.rungs[g.rung]++
		if g.root != "" && g.root == hca.root {
			out.onRoot++
		}
		if g.numa >= 0 && g.numa == hca.numa {
			out.onNUMA++
		}
	}
	return out
}

// freePairs is how many GPU+HCAs pairs the free devices make by key (a
// root or a NUMA node): per key, its free GPUs or its free HCAs in groups
// of k, whichever is fewer. Any GPU+HCAs pair taken from one key lowers
// that key's count by exactly one, so the allocator's first-fit over the
// ladder can reach this many and no order of pairs can reach more.
func freePairs(gpus, hcas []place, k int, key func(place) (string, bool)) int {
	g, h := map[string]int{}, map[string]int{}
	for _, p := range gpus {
		if v, ok := key(p); ok {
			g[v]++
		}
	}
	for _, p := range hcas {
		if v, ok := key(p); ok {
			h[v]++
		}
	}
	total := 0
	for v, n := range g {
		total += min(n, h[v]/k)
	}
	return total
}

func byRoot(p place) (string, bool) { return p.root, p.root != "" }
func byNUMA(p place) (string, bool) { return fmt.Sprint(p.numa), p.numa >= 0 }

// alignedFigures sums a layout's randomized run.
type alignedFigures struct {
	pods, skipped              int
	hcas                       int
	onRoot, bestRoot           int // aligned claim; the most the free devices allowed
	onNUMA, bestNUMA           int
	independentOnRoot          int // GPU claim + rdma claim, HCAs that happen to share a root with one of the pod's GPUs
	independentOnNUMA          int // and a NUMA node
	handWrittenFit, numaClaims int
	fullRootPossible, fullRoot int
}

// TestAlignedClaimPairsOnTheScheduler runs 1,000 randomized pods that fit
// per layout (1 to 8 GPUs and their HCAs, on a node whose devices other pods
// hold at random) through kube-scheduler's allocator. Whenever the free
// devices hold a GPU+HCAs pair on one PCIe root for every GPU of the pod,
// every HCA lands on its GPU's root; otherwise as many pairs as the free
// devices allow do, and the rest as many on one NUMA node as allow. It is
// never worse than docs/dra.md's hand-written numaNode claim: wherever
// that claim fits, the aligned claim puts every HCA on its GPU's NUMA node
// too. The figures (t.Log, -v) compare it with the pod's two independent
// claims, what `nvidia.com/gpu` + `rdma/ib` give today.
func TestAlignedClaimPairsOnTheScheduler(t *testing.T) {
	t.Parallel()
	const pods = 1000
	for i, l := range alignedLayouts() {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(32, uint64(i)))
			n := newAlignedNode(t, l)
			var f alignedFigures
			for p := 0; f.pods < pods && p < 4*pods; p++ {
				n.allocated = nil
				runAlignedPod(t, n, rng, p, &f)
			}
			t.Logf("%s: %d pods (%d more skipped: too few free devices for any claim), %d HCAs", l.name, f.pods, f.skipped, f.hcas)
			t.Logf("  aligned claim: %d HCAs on their GPU's PCIe root (the free devices allowed %d), %d on its NUMA node (allowed %d)", f.onRoot, f.bestRoot, f.onNUMA, f.bestNUMA)
			t.Logf("  every HCA on its GPU's root where a free pair existed for every GPU: %d of %d pods", f.fullRoot, f.fullRootPossible)
			t.Logf("  two independent claims: %d HCAs share a root with one of the pod's GPUs, %d a NUMA node", f.independentOnRoot, f.independentOnNUMA)
			t.Logf("  hand-written numaNode claim: fits %d of %d pods", f.handWrittenFit, f.numaClaims)
			if f.pods < pods {
				t.Errorf("only %d pods of %d tried fit the busy node, want %d", f.pods, f.pods+f.skipped, pods)
			}
		})
	}
}

// runAlignedPod makes the node busy at random and allocates one pod.
func runAlignedPod(t *testing.T, n *alignedNode, rng *rand.Rand, pod int, f *alignedFigures) {
	t.Helper()
	l := n.layout
	busyGPU, busyHCA := rng.Float64()*0.6, rng.Float64()*0.6
	var freeGPUs, freeHCAs []place
	for _, g := range n.gpus {
		if rng.Float64() < busyGPU {
			n.hold(fakegpu.DriverName, g)
		} else {
			freeGPUs = append(freeGPUs, n.places[structuredID{fakegpu.DriverName, g}])
		}
	}
	for _, h := range n.hcas {
		if rng.Float64() < busyHCA {
			n.hold(contract.DRADriverName, h)
		} else {
			freeHCAs = append(freeHCAs, n.places[structuredID{contract.DRADriverName, h}])
		}
	}
	gpus := 1 + rng.IntN(len(n.gpus))
	shape := aligned.Shape{GPUs: gpus, HCAs: gpus * l.hcasPerGPU, GPUClass: fakegpu.DeviceClass, HCAClass: l.hcaClass}
	if len(freeGPUs) < shape.GPUs || len(freeHCAs) < shape.HCAs {
		// No claim of this pod fits; the allocator's search for one that
		// does not is exhaustive, which docs/dra.md's cost section says.
		f.skipped++
		return
	}
	f.pods++
	f.hcas += shape.HCAs
	spec, err := aligned.Spec(shape)
	if err != nil {
		t.Fatal(err)
	}
	a := n.allocate(specClaim(fmt.Sprintf("pod-%d", pod), spec))
	if a == nil {
		t.Fatalf("pod %d (%d GPUs, %d HCAs; %d GPUs and %d HCAs free): the aligned claim does not fit", pod, shape.GPUs, shape.HCAs, len(freeGPUs), len(freeHCAs))
	}
	got := n.alignment(t, a)
	bestRoot := l.hcasPerGPU * min(gpus, freePairs(freeGPUs, freeHCAs, l.hcasPerGPU, byRoot))
	bestNUMA := l.hcasPerGPU * min(gpus, freePairs(freeGPUs, freeHCAs, l.hcasPerGPU, byNUMA))
	f.onRoot, f.bestRoot, f.onNUMA, f.bestNUMA = f.onRoot+got.onRoot, f.bestRoot+bestRoot, f.onNUMA+got.onNUMA, f.bestNUMA+bestNUMA
	if bestRoot == shape.HCAs {
		f.fullRootPossible++
		if got.onRoot == shape.HCAs {
			f.fullRoot++
		}
	}
	// A pair's rung puts all its HCAs on the GPU's root or none; a lower
	// rung may still land some there.
	if got.rungs[aligned.RungPCIeRoot] != bestRoot || got.onRoot < bestRoot || got.onNUMA < bestNUMA {
		t.Errorf("pod %d (%d GPUs, %d HCAs; %d GPUs and %d HCAs free): %d HCAs on their GPU's root and %d on its NUMA node (rungs %v); the free devices allow %d and %d",
			pod, shape.GPUs, shape.HCAs, len(freeGPUs), len(freeHCAs), got.onRoot, got.onNUMA, got.rungs, bestRoot, bestNUMA)
	}
	n.release(fmt.Sprintf("pod-%d", pod))
	compareHandWritten(t, n, shape, bestNUMA, got, f)
	onRoot, onNUMA := n.independent(t, shape)
	f.independentOnRoot += onRoot
	f.independentOnNUMA += onNUMA
}

// compareHandWritten allocates docs/dra.md's hand-written claim (each GPU
// with its HCAs under one numaNode constraint, no ladder) where its NUMA
// pairs exist; where they do not it cannot fit, and the allocator's
// exhaustive search for it is not run.
func compareHandWritten(t *testing.T, n *alignedNode, shape aligned.Shape, bestNUMA int, got alignment, f *alignedFigures) {
	t.Helper()
	if bestNUMA < shape.HCAs {
		return
	}
	f.numaClaims++
	var d resourceapi.DeviceClaim
	for i := range shape.GPUs {
		gpu, hca := fmt.Sprintf("gpu-%d", i), fmt.Sprintf("hca-%d", i)
		d.Requests = append(d.Requests,
			resourceapi.DeviceRequest{Name: gpu, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: shape.GPUClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}},
			resourceapi.DeviceRequest{Name: hca, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: shape.HCAClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(shape.HCAs / shape.GPUs)}},
		)
		d.Constraints = append(d.Constraints, resourceapi.DeviceConstraint{Requests: []string{gpu, hca}, MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(deviceattribute.StandardDeviceAttributeNUMANode))})
	}
	a := n.allocate(specClaim("hand-written", resourceapi.ResourceClaimSpec{Devices: d}))
	if a == nil {
		t.Errorf("%d GPUs, %d HCAs: the hand-written numaNode claim does not fit though the free devices make its pairs", shape.GPUs, shape.HCAs)
		return
	}
	n.release("hand-written")
	f.handWrittenFit++
	if got.onNUMA < shape.HCAs {
		t.Errorf("%d GPUs, %d HCAs: the hand-written numaNode claim fits with every HCA on its GPU's NUMA node, the aligned claim put %d there", shape.GPUs, shape.HCAs, got.onNUMA)
	}
}

// independent allocates the pod as today: the scheduler's claims for
// `nvidia.com/gpu: n` and `rdma/ib: m`, no constraint between them, and
// counts the HCAs that the best pairing of its GPUs puts on a GPU's root
// and on a GPU's NUMA node.
func (n *alignedNode) independent(t testing.TB, shape aligned.Shape) (onRoot, onNUMA int) {
	t.Helper()
	ctx := t.Context()
	alloc, err := structured.NewAllocator(ctx, schedulerFeatures, n.state(), n.classes, n.slices, n.cel)
	if err != nil {
		t.Fatal(err)
	}
	res, err := alloc.Allocate(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}}, []*resourceapi.ResourceClaim{
		extendedClaim("gpus", shape.GPUClass, int64(shape.GPUs)), extendedClaim("hcas", shape.HCAClass, int64(shape.HCAs)),
	})
	if err != nil || len(res) != 2 {
		t.Fatalf("the independent claims of %d GPUs and %d HCAs: %v, %v", shape.GPUs, shape.HCAs, res, err)
	}
	var gpus, hcas []place
	for _, r := range res[0].Devices.Results {
		gpus = append(gpus, n.places[structuredID{r.Driver, r.Device}])
	}
	for _, r := range res[1].Devices.Results {
		hcas = append(hcas, n.places[structuredID{r.Driver, r.Device}])
	}
	k := shape.HCAs / shape.GPUs
	return k * freePairs(gpus, hcas, k, byRoot), k * freePairs(gpus, hcas, k, byNUMA)
}

// TestAlignedClaimNeedsBothAttributesOnTheHCA pins what docs/dra.md says
// of an HCA whose kernel does not know its NUMA node (numa_node -1, the
// broken fixture's mlx5_3): it publishes no numaNode, and since each HCA
// request sits in the numaNode constraint whatever rung its GPU took, no
// aligned claim gets it; `rdma/ib: 1` still does.
func TestAlignedClaimNeedsBothAttributesOnTheHCA(t *testing.T) {
	t.Parallel()
	l := gpuLayout{"broken", fixture.Broken, config.Default, contract.DeviceClassIB, contract.ExtendedResourceIB, ndv5GPUs, 1}
	n := newAlignedNode(t, l)
	var free []string
	for _, h := range n.hcas {
		if n.hcaName(h) != "mlx5_3" {
			n.hold(contract.DRADriverName, h)
		} else {
			free = append(free, h)
		}
	}
	if len(free) != 1 || n.places[structuredID{contract.DRADriverName, free[0]}].numa != -1 {
		t.Fatalf("the broken fixture's mlx5_3 is %v, want one device without numaNode", free)
	}
	spec, err := aligned.Spec(aligned.Shape{GPUs: 1, HCAs: 1, GPUClass: fakegpu.DeviceClass, HCAClass: l.hcaClass})
	if err != nil {
		t.Fatal(err)
	}
	if a := n.allocate(specClaim("aligned", spec)); a != nil {
		t.Errorf("the aligned claim got %v; an HCA without numaNode cannot satisfy its constraints", a.Devices.Results)
	}
	if a := n.allocate(extendedClaim("plain", l.hcaClass, 1)); a == nil {
		t.Error("rdma/ib: 1 does not fit on mlx5_3")
	}
}

// hcaName is the RDMA device an HCA device of the slices stands for.
func (n *alignedNode) hcaName(device string) string {
	for _, sl := range n.slices {
		for _, d := range sl.Spec.Devices {
			if d.Name == device && sl.Spec.Driver == contract.DRADriverName {
				return ptr.Deref(d.Attributes[contract.DRAAttrRDMADevice].StringValue, "")
			}
		}
	}
	return ""
}
