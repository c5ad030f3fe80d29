package dra

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/node/config"
	"github.com/ibkube/ibkube/node/dra/slice"
)

// schedulerFeatures are the allocator features kube-scheduler v1.37.2
// passes with its default feature gates (pkg/scheduler/framework/plugins/
// dynamicresources AllocatorFeatures over pkg/features/kube_features.go):
// DRAAdminAccess GA, DRAPrioritizedList GA, DRAPartitionableDevices beta on,
// DRADeviceTaints GA, DRADeviceBindingConditions beta on with
// DRAResourceClaimDeviceStatus GA, DRAConsumableCapacity beta on,
// DRAFractionalCapacityRange beta on; DRAListTypeAttributes,
// DRAOptionalNodeOperations, DRADerivedAttributes and
// DRADeviceCompatibilityGroups alpha, off.
var schedulerFeatures = structured.Features{
	AdminAccess:             true,
	PrioritizedList:         true,
	PartitionableDevices:    true,
	DeviceTaints:            true,
	DeviceBindingAndStatus:  true,
	ConsumableCapacity:      true,
	FractionalCapacityRange: true,
}

// classLister holds the chart's DeviceClasses (one per pool, selecting on
// the pool attribute, contract.DeviceClassSelector).
type classLister map[string]*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	var out []*resourceapi.DeviceClass
	for _, c := range l {
		out = append(out, c)
	}
	return out, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

func chartClasses() classLister {
	l := classLister{}
	for name, res := range map[string]string{
		contract.DeviceClassIB: contract.ExtendedResourceIB, contract.DeviceClassSharedIB: contract.ExtendedResourceSharedIB, contract.DeviceClassRoCE: contract.ExtendedResourceRoCE,
	} {
		l[name] = &resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.DeviceClassSpec{
				Selectors:            []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: contract.DeviceClassSelector(res)}}},
				ExtendedResourceName: ptr.To(res),
			},
		}
	}
	return l
}

// scheduler runs the scheduler's structured allocator over a node's
// published slices, keeping the claims it allocated as the scheduler's
// allocated-devices cache does.
type scheduler struct {
	t         testing.TB
	slices    []*resourceapi.ResourceSlice
	classes   classLister
	allocated []*resourceapi.ResourceClaim
	cel       *cel.Cache
}

func newScheduler(t testing.TB, h *host) *scheduler {
	t.Helper()
	m := h.model(t)
	objs := slice.Objects(slice.Slices(m, h.facts(t, m)), "node-0")
	for i, s := range objs {
		s.Name = s.GenerateName + fmt.Sprint(i)
	}
	return &scheduler{t: t, slices: objs, classes: chartClasses(), cel: cel.NewCache(10, cel.Features{EnableConsumableCapacity: true})}
}

// state is the allocated state of the claims allocated so far, as
// kube-scheduler gathers it (dynamicresources foreachAllocatedDevice): admin
// access results are not allocations, shared ones are recorded by share.
func (s *scheduler) state() structured.AllocatedState {
	st := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, c := range s.allocated {
		for _, r := range c.Status.Allocation.Devices.Results {
			if ptr.Deref(r.AdminAccess, false) {
				continue
			}
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			if r.ShareID != nil {
				st.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
				if r.ConsumedCapacity != nil {
					st.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
				}
				continue
			}
			st.AllocatedDevices.Insert(id)
		}
	}
	return st
}

// allocate asks the allocator for the claim on the node; nil means the
// claim does not fit (the pod stays Pending). A fitting claim is kept as
// allocated.
func (s *scheduler) allocate(c *resourceapi.ResourceClaim) *resourceapi.AllocationResult {
	s.t.Helper()
	ctx := context.Background()
	a, err := structured.NewAllocator(ctx, schedulerFeatures, s.state(), s.classes, s.slices, s.cel)
	if err != nil {
		s.t.Fatalf("allocator: %v", err)
	}
	res, err := a.Allocate(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}}, []*resourceapi.ResourceClaim{c})
	if err != nil {
		s.t.Fatalf("allocate %s: %v", c.Name, err)
	}
	if len(res) == 0 {
		return nil
	}
	c = c.DeepCopy()
	c.Status.Allocation = &res[0]
	s.allocated = append(s.allocated, c)
	return &res[0]
}

// release forgets an allocated claim, as when its pod is gone.
func (s *scheduler) release(name string) {
	s.allocated = slices.DeleteFunc(s.allocated, func(c *resourceapi.ResourceClaim) bool { return c.Name == name })
}

// extendedClaim is the claim kube-scheduler makes for a container asking
// `resource: count` of a DRA-served extended resource
// (extendeddynamicresources.go: one ExactCount request per container and
// resource, no selectors, no constraints).
func extendedClaim(name, class string, count int64) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team", UID: types.UID(name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name:    "container-0-request-0",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count},
		}}}},
	}
}

// hcaClaim asks one device of class on the named HCA.
func hcaClaim(name, class, hca string) *resourceapi.ResourceClaim {
	c := extendedClaim(name, class, 1)
	c.Spec.Devices.Requests[0].Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
		Expression: fmt.Sprintf(`device.attributes[%q].%s == %q`, contract.DRADriverName, contract.DRAAttrRDMADevice, hca),
	}}}
	return c
}

// hcasOf names the HCAs of an allocation's devices, by the slices' rdmaDevice.
func (s *scheduler) hcasOf(a *resourceapi.AllocationResult) []string {
	var out []string
	for _, r := range a.Devices.Results {
		out = append(out, s.device(r.Device).hca)
	}
	return out
}

type publishedDevice struct {
	hca  string
	numa int64
}

func (s *scheduler) device(name string) publishedDevice {
	for _, sl := range s.slices {
		for _, d := range sl.Spec.Devices {
			if d.Name == name {
				p := publishedDevice{hca: *d.Attributes[contract.DRAAttrRDMADevice].StringValue, numa: -1}
				if n, ok := d.Attributes["resource.kubernetes.io/numaNode"]; ok {
					p.numa = *n.IntValue
				}
				return p
			}
		}
	}
	s.t.Fatalf("no published device %s", name)
	return publishedDevice{}
}

// TestAllocatorFitsWhereItLooksFirst: on an empty node of every fixture
// with both default pools, kube-scheduler's allocator gives `rdma/ib: 1`
// the first device of the slices and `rdma/shared_ib: 1` the second, so
// neither evaluates its class on more devices than that (the allocator
// walks the slices in order and takes the first fit; docs/dra-driver.md,
// "Order").
func TestAllocatorFitsWhereItLooksFirst(t *testing.T) {
	t.Parallel()
	for _, name := range []string{fixture.NDv5, fixture.NDv4, fixture.HB, fixture.Broken} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHost(t, name, nil)
			var devices []string
			for _, sl := range newScheduler(t, h).slices {
				for _, d := range sl.Spec.Devices {
					devices = append(devices, d.Name)
				}
			}
			for i, class := range []string{contract.DeviceClassIB, contract.DeviceClassSharedIB} {
				a := newScheduler(t, h).allocate(extendedClaim("pod", class, 1))
				if a == nil || len(a.Devices.Results) != 1 {
					t.Fatalf("%s on an empty node: %v, want one device", class, a)
				}
				if got := a.Devices.Results[0].Device; len(devices) <= i || got != devices[i] {
					t.Errorf("%s got %s, want the slices' device %d of %v", class, got, i, devices)
				}
			}
		})
	}
}

// TestAllocatorExclusiveIsExclusive runs kube-scheduler's allocator over the
// ND v5 node's published slices: one HCA goes either to an exclusive claim
// or to sharers, in either order, and comes free for the other side once
// its holders are gone; sharers share.
func TestAllocatorExclusiveIsExclusive(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		first, second string // device classes
	}{
		{"exclusive then shared", contract.DeviceClassIB, contract.DeviceClassSharedIB},
		{"shared then exclusive", contract.DeviceClassSharedIB, contract.DeviceClassIB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newScheduler(t, newHost(t, fixture.NDv5, nil))
			if a := s.allocate(hcaClaim("first", tc.first, "mlx5_0")); a == nil {
				t.Fatalf("%s on an empty node's mlx5_0 does not fit", tc.first)
			}
			if a := s.allocate(hcaClaim("second", tc.second, "mlx5_0")); a != nil {
				t.Fatalf("%s on mlx5_0 was allocated %v while a %s claim holds it", tc.second, a.Devices.Results, tc.first)
			}
			// Another HCA is free for the second side.
			if a := s.allocate(hcaClaim("elsewhere", tc.second, "mlx5_1")); a == nil {
				t.Errorf("%s on mlx5_1 does not fit while only mlx5_0 is held", tc.second)
			}
			s.release("first")
			if a := s.allocate(hcaClaim("second", tc.second, "mlx5_0")); a == nil {
				t.Errorf("%s on mlx5_0 does not fit after the %s claim is gone", tc.second, tc.first)
			}
		})
	}
	t.Run("sharers share", func(t *testing.T) {
		t.Parallel()
		s := newScheduler(t, newHost(t, fixture.NDv5, nil))
		var shares []string
		for i := range config.DefaultSharedSlots {
			a := s.allocate(hcaClaim(fmt.Sprintf("sharer-%d", i), contract.DeviceClassSharedIB, "mlx5_0"))
			if a == nil {
				t.Fatalf("sharer %d of mlx5_0 does not fit (slots %d)", i, config.DefaultSharedSlots)
			}
			if r := a.Devices.Results[0]; r.ShareID == nil || r.Device != "shared-ib-mlx5-0" {
				t.Fatalf("sharer %d got %+v, want a share of shared-ib-mlx5-0", i, r)
			} else {
				shares = append(shares, string(*r.ShareID))
			}
		}
		if len(sets.New(shares...)) != len(shares) {
			t.Errorf("share IDs repeat: %v", shares)
		}
		if a := s.allocate(hcaClaim("one-too-many", contract.DeviceClassSharedIB, "mlx5_0")); a != nil {
			t.Errorf("a sharer past the %d slots got %v", config.DefaultSharedSlots, a.Devices.Results)
		}
		if a := s.allocate(hcaClaim("exclusive", contract.DeviceClassIB, "mlx5_0")); a != nil {
			t.Errorf("an exclusive claim on the shared mlx5_0 got %v", a.Devices.Results)
		}
	})
	t.Run("the whole node", func(t *testing.T) {
		t.Parallel()
		s := newScheduler(t, newHost(t, fixture.NDv5, nil))
		if a := s.allocate(extendedClaim("one-sharer", contract.DeviceClassSharedIB, 1)); a == nil {
			t.Fatal("rdma/shared_ib: 1 does not fit on an empty node")
		}
		if a := s.allocate(extendedClaim("all-eight", contract.DeviceClassIB, 8)); a != nil {
			t.Errorf("rdma/ib: 8 got %v while a sharer holds one HCA", s.hcasOf(a))
		}
		if a := s.allocate(extendedClaim("seven", contract.DeviceClassIB, 7)); a == nil {
			t.Error("rdma/ib: 7 does not fit beside one sharer")
		}
		if a := s.allocate(extendedClaim("another-sharer", contract.DeviceClassSharedIB, 1)); a == nil {
			t.Error("a second sharer does not fit on the sharers' HCA")
		}
	})
}

// TestAllocatorExtendedResourceOneNUMANode: `rdma/ib: N` through the
// DeviceClass (the scheduler's claim has no constraint) lands on one NUMA
// node of an empty ND v5 node when one holds N, as the device plugin's
// preferred allocation does, and a second such pod takes the other.
func TestAllocatorExtendedResourceOneNUMANode(t *testing.T) {
	t.Parallel()
	for _, counts := range [][]int64{{4, 4}, {2, 2, 4}, {1, 3, 4}} {
		t.Run(fmt.Sprint(counts), func(t *testing.T) {
			t.Parallel()
			s := newScheduler(t, newHost(t, fixture.NDv5, nil))
			used := map[string]bool{}
			for i, n := range counts {
				a := s.allocate(extendedClaim(fmt.Sprintf("pod-%d", i), contract.DeviceClassIB, n))
				if a == nil {
					t.Fatalf("pod %d, rdma/ib: %d, does not fit", i, n)
				}
				numa := sets.New[int64]()
				for _, r := range a.Devices.Results {
					d := s.device(r.Device)
					numa.Insert(d.numa)
					if used[d.hca] {
						t.Errorf("%s handed out twice", d.hca)
					}
					used[d.hca] = true
				}
				if numa.Len() != 1 {
					t.Errorf("pod %d, rdma/ib: %d, got %v on NUMA nodes %v; want one NUMA node", i, n, s.hcasOf(a), sets.List(numa))
				}
			}
		})
	}
}

// TestAllocatorOneNUMANodeBesideATaint: on an ND H100 v5 node whose
// mlx5_1 (NUMA node 0) is down, `rdma/ib: 4` and then `rdma/ib: 3` land
// where the device plugin's preferred allocation puts them
// (resource.Pool.Preferred over the healthy HCAs still free, as the kubelet
// asks it): four on NUMA node 1, the one that still holds four, then NUMA
// node 0's three. In inventory order the allocator's first fit for four is
// mlx5_0, mlx5_2, mlx5_3 and mlx5_4, across both sockets.
func TestAllocatorOneNUMANodeBesideATaint(t *testing.T) {
	t.Parallel()
	h := newHost(t, fixture.NDv5, nil)
	if err := fixture.SetPortState(h.dir, "mlx5_1", 1, "DOWN"); err != nil {
		t.Fatal(err)
	}
	m := h.model(t)
	pool := m.Pool(contract.ExtendedResourceIB)
	if pool == nil {
		t.Fatalf("the model has no %s pool", contract.ExtendedResourceIB)
	}
	free := map[string]bool{}
	for _, hca := range pool.HCAs {
		if ok, _ := pool.Health(hca); ok {
			free[hca.Name] = true
		}
	}
	s := newScheduler(t, h)
	for i, n := range []int{4, 3} {
		var available []string
		for _, hca := range pool.HCAs {
			if free[hca.Name] {
				available = append(available, hca.Name)
			}
		}
		want, err := pool.Preferred(available, nil, n)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(want)
		a := s.allocate(extendedClaim(fmt.Sprintf("pod-%d", i), contract.DeviceClassIB, int64(n)))
		if a == nil {
			t.Fatalf("rdma/ib: %d does not fit", n)
		}
		got := s.hcasOf(a)
		slices.Sort(got)
		numa := sets.New[int64]()
		for _, r := range a.Devices.Results {
			numa.Insert(s.device(r.Device).numa)
		}
		if !slices.Equal(got, want) || numa.Len() != 1 {
			t.Errorf("rdma/ib: %d with mlx5_1 down got %v on NUMA nodes %v; the device plugin prefers %v", n, got, sets.List(numa), want)
		}
		for _, hca := range got {
			delete(free, hca)
		}
	}
}

// TestAllocatorSharersAndExclusivePack: sharers gather on the HCAs exclusive
// pods reach last, so that exclusive pods still land on one NUMA node each
// and never on a sharer's HCA.
func TestAllocatorSharersAndExclusivePack(t *testing.T) {
	t.Parallel()
	s := newScheduler(t, newHost(t, fixture.NDv5, nil))
	sharer := s.allocate(extendedClaim("sharer", contract.DeviceClassSharedIB, 1))
	if sharer == nil {
		t.Fatal("rdma/shared_ib: 1 does not fit on an empty node")
	}
	shared := s.hcasOf(sharer)[0]
	for i, n := range []int64{4, 3} {
		a := s.allocate(extendedClaim(fmt.Sprintf("exclusive-%d", i), contract.DeviceClassIB, n))
		if a == nil {
			t.Fatalf("rdma/ib: %d does not fit beside a sharer of %s", n, shared)
		}
		numa := sets.New[int64]()
		for _, r := range a.Devices.Results {
			numa.Insert(s.device(r.Device).numa)
		}
		if got := s.hcasOf(a); slices.Contains(got, shared) || numa.Len() != 1 {
			t.Errorf("rdma/ib: %d got %v on NUMA nodes %v beside a sharer of %s; want one NUMA node, not the sharer's HCA", n, got, sets.List(numa), shared)
		}
	}
}

// TestAllocatorNUMAClaim is where the order alone cannot match the device
// plugin: once a one-HCA pod holds mlx5_0, `rdma/ib: 4` takes the next four
// in order, across both NUMA nodes, where the device plugin packs NUMA node
// 1. The claim docs/dra.md gives for it, four devices with a numaNode
// matchAttribute constraint, lands on one NUMA node.
func TestAllocatorNUMAClaim(t *testing.T) {
	t.Parallel()
	s := newScheduler(t, newHost(t, fixture.NDv5, nil))
	if a := s.allocate(extendedClaim("one", contract.DeviceClassIB, 1)); a == nil {
		t.Fatal("rdma/ib: 1 does not fit")
	}
	c := extendedClaim("four-aligned", contract.DeviceClassIB, 4)
	c.Spec.Devices.Requests[0].Name = "hcas"
	c.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{MatchAttribute: ptr.To(resourceapi.FullyQualifiedName("resource.kubernetes.io/numaNode"))}}
	a := s.allocate(c)
	if a == nil {
		t.Fatal("four HCAs on one NUMA node do not fit while NUMA node 1 is free")
	}
	numa := sets.New[int64]()
	for _, r := range a.Devices.Results {
		numa.Insert(s.device(r.Device).numa)
	}
	if !numa.Equal(sets.New[int64](1)) {
		t.Errorf("the numaNode claim got %v on NUMA nodes %v, want all four on 1", s.hcasOf(a), sets.List(numa))
	}
}

// TestAllocatorEveryHCASurvivesATaint: a shared pod that wants every HCA
// (what the device plugin's rdma/shared_ib gives) fails with allocationMode
// All once one HCA is tainted unhealthy; the prioritized-list claim of
// docs/dra.md takes all but the tainted one instead.
func TestAllocatorEveryHCASurvivesATaint(t *testing.T) {
	t.Parallel()
	h := newHost(t, fixture.NDv5, nil)
	if err := fixture.SetPortState(h.dir, "mlx5_3", 1, "DOWN"); err != nil {
		t.Fatal(err)
	}
	s := newScheduler(t, h)
	all := resourceapi.DeviceSubRequest{Name: "all", DeviceClassName: contract.DeviceClassSharedIB, AllocationMode: resourceapi.DeviceAllocationModeAll}
	allClaim := extendedClaim("all", contract.DeviceClassSharedIB, 0)
	allClaim.Spec.Devices.Requests[0] = resourceapi.DeviceRequest{Name: "hcas", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: all.DeviceClassName, AllocationMode: all.AllocationMode,
	}}
	if a := s.allocate(allClaim); a != nil {
		t.Errorf("allocationMode All got %v with mlx5_3 tainted; the API says it must fail", s.hcasOf(a))
	}
	ladder := extendedClaim("ladder", contract.DeviceClassSharedIB, 0)
	ladder.Spec.Devices.Requests[0] = resourceapi.DeviceRequest{Name: "hcas", FirstAvailable: []resourceapi.DeviceSubRequest{
		all,
		{Name: "all-but-one", DeviceClassName: contract.DeviceClassSharedIB, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 7},
		{Name: "all-but-two", DeviceClassName: contract.DeviceClassSharedIB, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 6},
	}}
	a := s.allocate(ladder)
	if a == nil {
		t.Fatal("the prioritized list does not fit with one HCA tainted")
	}
	got := s.hcasOf(a)
	slices.Sort(got)
	if want := []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"}; !slices.Equal(got, want) {
		t.Errorf("the prioritized list got %v, want every healthy HCA %v", got, want)
	}
	if r := a.Devices.Results[0].Request; r != "hcas/all-but-one" {
		t.Errorf("allocated for request %q, want hcas/all-but-one", r)
	}
}

// TestAllocatorAdminAccess pins what an adminAccess request (a monitoring
// claim) gets from kube-scheduler's v1.37.2 allocator over the published
// slices. The allocator lets it past "device in use" but still charges the
// HCA's shared counter (allocateDevice calls checkAvailableCounters for
// admin requests too), so it reaches a free HCA and, through the shared
// class, an HCA sharers use (a further share is not charged again), but
// no HCA an exclusive claim holds, nor an exclusive device of a shared
// HCA. What it gets it does not hold: the workload's claims still fit
// beside it. docs/dra.md, "Admin access", says the same.
func TestAllocatorAdminAccess(t *testing.T) {
	t.Parallel()
	admin := func(name, class, hca string) *resourceapi.ResourceClaim {
		c := hcaClaim(name, class, hca)
		c.Spec.Devices.Requests[0].Exactly.AdminAccess = ptr.To(true)
		return c
	}
	for _, tc := range []struct {
		name      string
		holder    string // class of the workload claim on mlx5_0, "" for none
		admin     string // class of the admin claim on mlx5_0
		adminFits bool
	}{
		{"free HCA, exclusive class", "", contract.DeviceClassIB, true},
		{"free HCA, shared class", "", contract.DeviceClassSharedIB, true},
		{"HCA held exclusively, exclusive class", contract.DeviceClassIB, contract.DeviceClassIB, false},
		{"HCA held exclusively, shared class", contract.DeviceClassIB, contract.DeviceClassSharedIB, false},
		{"HCA sharers use, shared class", contract.DeviceClassSharedIB, contract.DeviceClassSharedIB, true},
		{"HCA sharers use, exclusive class", contract.DeviceClassSharedIB, contract.DeviceClassIB, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newScheduler(t, newHost(t, fixture.NDv5, nil))
			if tc.holder != "" && s.allocate(hcaClaim("workload", tc.holder, "mlx5_0")) == nil {
				t.Fatalf("%s on an empty node's mlx5_0 does not fit", tc.holder)
			}
			a := s.allocate(admin("monitor", tc.admin, "mlx5_0"))
			if got := a != nil; got != tc.adminFits {
				t.Fatalf("an adminAccess claim of %s on mlx5_0 fits: %v, want %v", tc.admin, got, tc.adminFits)
			}
			if a != nil && !ptr.Deref(a.Devices.Results[0].AdminAccess, false) {
				t.Errorf("the admin claim's result %+v is not marked adminAccess", a.Devices.Results[0])
			}
			if tc.holder == "" && s.allocate(hcaClaim("after", contract.DeviceClassIB, "mlx5_0")) == nil {
				t.Error("an exclusive claim on mlx5_0 does not fit beside an admin claim; admin access must hold nothing")
			}
		})
	}
}

// TestAllocatorSharersPack pins where `rdma/shared_ib: 1` pods go: the
// allocator takes the first shared device with a free slot, in slice
// order, so sharers fill one HCA's slots before the next HCA gets any; they
// are not spread over the HCAs (docs/dra.md says so beside the numaNode
// claim that places a sharer by its GPU).
func TestAllocatorSharersPack(t *testing.T) {
	t.Parallel()
	s := newScheduler(t, newHost(t, fixture.NDv5, nil))
	perHCA := map[string]int{}
	var order []string
	for i := range config.DefaultSharedSlots + 1 {
		a := s.allocate(extendedClaim(fmt.Sprintf("sharer-%d", i), contract.DeviceClassSharedIB, 1))
		if a == nil {
			t.Fatalf("sharer %d does not fit", i)
		}
		hca := s.hcasOf(a)[0]
		if perHCA[hca] == 0 {
			order = append(order, hca)
		}
		perHCA[hca]++
	}
	if len(order) != 2 || perHCA[order[0]] != config.DefaultSharedSlots || perHCA[order[1]] != 1 {
		t.Errorf("%d sharers went %v (first seen in order %v); want %d on one HCA, then the next HCA", config.DefaultSharedSlots+1, perHCA, order, config.DefaultSharedSlots)
	}
}

// TestAllocatorRetiredAttributeIsAnError: a claim whose selector reads an
// attribute the driver no longer publishes gets the scheduler's CEL
// runtime error, which the pod's events show, instead of a silent "no
// device fits"; a selector guarding it with has() is a plain non-match,
// and the replacement docs/dra.md names selects what it did.
func TestAllocatorRetiredAttributeIsAnError(t *testing.T) {
	t.Parallel()
	s := newScheduler(t, newHost(t, fixture.NDv5, nil))
	ctx := context.Background()
	allocate := func(expr string) ([]resourceapi.AllocationResult, error) {
		c := extendedClaim("pod", contract.DeviceClassIB, 1)
		c.Spec.Devices.Requests[0].Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}
		a, err := structured.NewAllocator(ctx, schedulerFeatures, s.state(), s.classes, s.slices, s.cel)
		if err != nil {
			t.Fatalf("allocator: %v", err)
		}
		return a.Allocate(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}}, []*resourceapi.ResourceClaim{c})
	}
	for _, r := range contract.DRARetiredAttributes() {
		t.Run(r.Name, func(t *testing.T) {
			t.Parallel()
			read := fmt.Sprintf(`device.attributes[%q].%s`, contract.DRADriverName, r.Name)
			res, err := allocate(read + ` == "x"`)
			if err == nil || !strings.Contains(err.Error(), "no such key: "+r.Name) {
				t.Errorf("a claim reading %s got %v, %v; want the CEL error no such key", r.Name, res, err)
			}
			if res, err := allocate(fmt.Sprintf(`has(%s)`, read)); err != nil || len(res) != 0 {
				t.Errorf("a claim reading %s under has() got %v, %v; want no device and no error", r.Name, res, err)
			}
			if res, err := allocate(r.Instead); err != nil || len(res) != 1 {
				t.Errorf("the replacement %s got %v, %v; want a device", r.Instead, res, err)
			}
		})
	}
}

// TestAllocatorSplitPools: with the shared pool on mlx5_7 and the
// exclusive pool on the other seven HCAs, the slices carry no counters
// (no HCA is in both) and the allocator keeps the two apart by the pools
// alone: sharers share mlx5_7, rdma/ib: 7 takes the rest, an eighth does
// not fit.
func TestAllocatorSplitPools(t *testing.T) {
	t.Parallel()
	s := newScheduler(t, newHost(t, fixture.NDv5, splitPools()))
	for _, sl := range s.slices {
		if len(sl.Spec.SharedCounters) > 0 {
			t.Errorf("slice %s has counters %v; no HCA is shared and exclusive", sl.Name, sl.Spec.SharedCounters)
		}
	}
	for i := range 2 {
		a := s.allocate(extendedClaim(fmt.Sprintf("sharer-%d", i), contract.DeviceClassSharedIB, 1))
		if a == nil || !slices.Equal(s.hcasOf(a), []string{"mlx5_7"}) {
			t.Fatalf("sharer %d got %v, want a share of mlx5_7", i, a)
		}
	}
	a := s.allocate(extendedClaim("seven", contract.DeviceClassIB, 7))
	if a == nil || slices.Contains(s.hcasOf(a), "mlx5_7") {
		t.Fatalf("rdma/ib: 7 got %v, want the seven exclusive HCAs", a)
	}
	if a := s.allocate(extendedClaim("eighth", contract.DeviceClassIB, 1)); a != nil {
		t.Errorf("rdma/ib: 1 got %v while the seven exclusive HCAs are held", s.hcasOf(a))
	}
}

// TestRetiredAttributesDocumented: docs/dra.md's table of retired
// attributes names each one contract.DRARetiredAttributes lists.
func TestRetiredAttributesDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "dra.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(doc), "### Retired attributes")
	for _, r := range contract.DRARetiredAttributes() {
		if !strings.Contains(table, "| `"+r.Name+"` |") {
			t.Errorf("docs/dra.md's retired attributes have no row for %s", r.Name)
		}
	}
}
