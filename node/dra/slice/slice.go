// Package slice is what the DRA driver publishes for a node, without I/O:
// the node's HCAs as ResourceSlice devices, one per HCA and config pool,
// with the shared counters that keep one HCA from an exclusive claim and
// sharers at once, split within the API's limits and ordered as the
// scheduler's allocator should try them. The driver publishes it through
// the kubeletplugin's slice controller; `ibkube node -o slices` prints the
// same objects offline.
package slice

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/node/resource"
)

// NodeFacts are what the slices need besides the resource model.
type NodeFacts struct {
	// Name is the Kubernetes node's name: the ResourceSlice pool is named
	// after it, as for every node-local driver.
	Name string
	// Held are HCAs that are healthy again but keep their unhealthy taint
	// until they have stayed healthy a while (see damper).
	Held map[string]bool
}

// Device is one published device: an HCA as one pool hands it out.
type Device struct {
	// Name is the device's name in the ResourceSlice.
	Name string
	Pool *resource.Pool
	HCA  inventory.HCA
}

// Devices lists the model's devices: per pool in config order, each pool's
// HCAs by NUMA node (see Slices for the order the slices use). An HCA in a
// shared and an exclusive pool is two devices, so a device's name is the
// pool's slug before the HCA's ("ib-mlx5-0", "shared-ib-mlx5-0"): names
// must be unique in the node's pool.
func Devices(m *resource.Model) []Device {
	return ordered(m, func(*resource.Pool, inventory.HCA) bool { return true })
}

// ordered lists the devices per pool in config order. Exclusive pools list
// their HCAs by NUMA node, the nodes with the most usable HCAs first (then
// by number, unknown last); shared pools list them in the reverse order.
func ordered(m *resource.Model, usable func(*resource.Pool, inventory.HCA) bool) []Device {
	var out []Device
	slugs := poolSlugs(m.Pools)
	for i, p := range m.Pools {
		hcas := byNUMA(p.HCAs, func(h inventory.HCA) bool { return usable(p, h) })
		if !p.Exclusive() {
			slices.Reverse(hcas)
		}
		for _, h := range hcas {
			out = append(out, Device{Name: deviceName(slugs[i], h.Name), Pool: p, HCA: h})
		}
	}
	return out
}

// byNUMA groups HCAs by NUMA node, keeping inventory order within a node:
// the nodes with the most usable HCAs first, ties by node number, unknown
// last.
func byNUMA(hcas []inventory.HCA, usable func(inventory.HCA) bool) []inventory.HCA {
	out := slices.Clone(hcas)
	n := map[int]int{}
	for _, h := range hcas {
		if usable(h) {
			n[h.NUMANode]++
		}
	}
	slices.SortStableFunc(out, func(a, b inventory.HCA) int {
		if ua, ub := a.NUMANode == inventory.UnknownNUMANode, b.NUMANode == inventory.UnknownNUMANode; ua != ub {
			if ua {
				return 1
			}
			return -1
		}
		return cmp.Or(cmp.Compare(n[b.NUMANode], n[a.NUMANode]), cmp.Compare(a.NUMANode, b.NUMANode))
	})
	return out
}

// notLabel matches what a DNS label cannot hold.
var notLabel = regexp.MustCompile(`[^a-z0-9]+`)

// slug makes s a DNS label fragment: lower case, runs of anything else a
// single dash, no dash at either end.
func slug(s string) string {
	return strings.Trim(notLabel.ReplaceAllString(strings.ToLower(s), "-"), "-")
}

// poolSlugs names each pool by its resource name's last part ("ib" for
// rdma/ib, "shared-ib" for rdma/shared_ib); a pool whose slug an earlier
// pool took gets its index appended, so names stay unique and stable.
func poolSlugs(pools []*resource.Pool) []string {
	out := make([]string, len(pools))
	seen := map[string]bool{}
	for i, p := range pools {
		_, name, _ := strings.Cut(p.Resource, "/")
		s := slug(name)
		if s == "" || seen[s] {
			s = strings.Trim(s+"-"+strconv.Itoa(i), "-")
		}
		seen[s] = true
		out[i] = s
	}
	return out
}

// maxDeviceName is a DNS label's length limit, which device names obey.
const maxDeviceName = 63

func deviceName(poolSlug, hca string) string {
	n := poolSlug + "-" + slug(hca)
	if len(n) > maxDeviceName {
		n = strings.TrimRight(n[:maxDeviceName], "-")
	}
	return n
}

// Slice is one ResourceSlice's content: devices, or shared counter sets
// (the API allows one or the other in a slice).
type Slice struct {
	Devices        []resourceapi.Device
	SharedCounters []resourceapi.CounterSet
}

// Slices is what the node publishes in its pool (named after the node):
// the shared counters of its HCAs that need one first
// (ResourceSliceMaxCounterSets to a slice), then every device of the model,
// ResourceSliceMaxDevicesWithAdvancedFeatures to a slice (a device
// consuming a counter or carrying a taint makes the API allow 64, not
// 128). A node without devices has one empty slice, which says so and
// removes slices a previous run published.
//
// The device order is the scheduler's preference and its cost: its
// allocator takes the first devices that fit, in slice order, and a claim
// for `rdma/ib: N` has no constraint to say more; and it evaluates the
// class's CEL on each device it passes, building every attribute of the
// device into maps first (k8s.io/dynamic-resource-allocation/cel
// DeviceMatches), so each device before the first fit is paid for on
// every node of every scheduling attempt (see allocatorOrder).
func Slices(m *resource.Model, node NodeFacts) []Slice {
	isTainted := func(d Device) bool { return tainted(d.Pool, d.HCA, node) }
	devs := allocatorOrder(ordered(m, func(p *resource.Pool, h inventory.HCA) bool { return !tainted(p, h, node) }), isTainted)
	holds := hcaHolds(devs)
	sets, refs := counterSets(m, holds)
	var out []Slice
	for chunk := range slices.Chunk(sets, resourceapi.ResourceSliceMaxCounterSets) {
		out = append(out, Slice{SharedCounters: chunk})
	}
	var all []resourceapi.Device
	for _, d := range devs {
		all = append(all, sliceDevice(d, node, holds[d.HCA.Name], refs[d.HCA.Name]))
	}
	for chunk := range slices.Chunk(all, resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures) {
		out = append(out, Slice{Devices: chunk})
	}
	if len(out) == 0 {
		out = []Slice{{}}
	}
	return out
}

// allocatorOrder orders devs (each pool's, from ordered) for the
// allocator: the first untainted device of each exclusive pool, then the
// first of each shared pool, then the exclusive pools' other devices, then
// the shared pools' others, tainted devices last of all. The allocator
// walks a node's devices in this order for every request, evaluating the
// class on each until one fits, and no order puts two classes' devices
// first: `rdma/ib: 1` fits on the first device (one evaluation),
// `rdma/shared_ib: 1` on the second (two), `rdma/ib: N` passes one shared
// device; a tainted device never fits an untolerating request, so it costs
// nothing at the end. Exclusive first because that is the path of GPU jobs
// and the one that scales: sharers in DRA mode are capped by the
// counters' cost (docs/dra-driver.md, "Sharers at scale"), and either
// way round the second class pays one evaluation more (BenchmarkAllocator,
// against the shared device first: `rdma/ib: 1` 0.84x, `rdma/shared_ib: 1`
// 1.2x).
// Within a pool the order stays ordered's: exclusive HCAs by NUMA node,
// the nodes with the most untainted HCAs first, so that `rdma/ib: N`
// lands on one NUMA node when the first holds N, as the device plugin's
// preferred allocation packs them (ND H100 v5, mlx5_1 down: `rdma/ib: 4`
// gets mlx5_4..7, not mlx5_0,2,3,4); shared pools in the reverse order,
// so that sharers gather on the HCAs exclusive pods reach last. The order
// changes only with a taint, so in the same write.
func allocatorOrder(devs []Device, tainted func(Device) bool) []Device {
	var exclusiveHeads, sharedHeads, exclusive, shared, last []Device
	headed := map[*resource.Pool]bool{}
	for _, d := range devs {
		isTainted, head := tainted(d), !headed[d.Pool]
		switch {
		case isTainted:
			last = append(last, d)
		case d.Pool.Exclusive() && head:
			exclusiveHeads = append(exclusiveHeads, d)
		case d.Pool.Exclusive():
			exclusive = append(exclusive, d)
		case head:
			sharedHeads = append(sharedHeads, d)
		default:
			shared = append(shared, d)
		}
		if !isTainted {
			headed[d.Pool] = true
		}
	}
	return slices.Concat(exclusiveHeads, sharedHeads, exclusive, shared, last)
}

// An HCA with an exclusive device and any other device has a shared
// counter (KEP-4815) which every device of the HCA consumes, so that the
// scheduler's allocator can never give the HCA to an exclusive claim and
// to another holder at once. The allocator charges a multi-allocatable
// device's counters once, when its first share is allocated, and frees
// them with its last (k8s.io/dynamic-resource-allocation/structured,
// allocateDevice: "an allow-multiple device in use ... must not charge
// them again"). So the counter holds one unit per shared pool the HCA is
// in (at least one), a shared device consumes one and an exclusive device
// all: sharers of every shared pool fit together, an exclusive holder fits
// alone.
//
// An HCA in one pool only, or in shared pools only, needs no counter (the
// allocator keeps an exclusive device to one claim and counts a shared
// device's slots by itself), and has none: with counters, the allocator
// walks the cluster's every allocated share for each device of the node's
// pool on each attempt (v0.37 checkAvailableCounters over
// IsDeviceAllocated, kubernetes#140806), so a node without them schedules
// at the same cost however many pods share HCAs elsewhere.
func hcaHolds(devs []Device) map[string]int64 {
	shared, exclusive, all := map[string]int64{}, map[string]bool{}, map[string]int{}
	for _, d := range devs {
		all[d.HCA.Name]++
		if d.Pool.Exclusive() {
			exclusive[d.HCA.Name] = true
		} else {
			shared[d.HCA.Name]++
		}
	}
	holds := map[string]int64{}
	for h, n := range all {
		if exclusive[h] && n > 1 {
			holds[h] = max(shared[h], 1)
		}
	}
	return holds
}

// counterRef is where an HCA's counter is: its counter set and its name.
type counterRef struct{ set, counter string }

// CounterName is an HCA's counter in its counter set: "mlx5-0".
func CounterName(hca string) string {
	n := slug(hca)
	if len(n) > maxDeviceName {
		n = strings.TrimRight(n[:maxDeviceName], "-")
	}
	return n
}

// counterSetName is the i-th counter set of the node's HCAs: "hcas",
// "hcas-1", ...
func counterSetName(i int) string {
	if i == 0 {
		return contract.DRACounterSetHCAs
	}
	return contract.DRACounterSetHCAs + "-" + strconv.Itoa(i)
}

// counterSets are the counters of the HCAs that hold one, in inventory
// order, ResourceSliceMaxCountersPerCounterSet to a set: one set for every
// node ibkube knows (the allocator converts and checks each set and each
// device's consumption on every scheduling attempt, so fewer sets are less
// of its work than a set per HCA), and where each HCA's counter is.
func counterSets(m *resource.Model, holds map[string]int64) ([]resourceapi.CounterSet, map[string]counterRef) {
	var hcas []string
	for _, st := range m.HCAs {
		if _, ok := holds[st.HCA.Name]; ok {
			hcas = append(hcas, st.HCA.Name)
		}
	}
	var sets []resourceapi.CounterSet
	refs := map[string]counterRef{}
	for chunk := range slices.Chunk(hcas, resourceapi.ResourceSliceMaxCountersPerCounterSet) {
		set := resourceapi.CounterSet{Name: counterSetName(len(sets)), Counters: map[string]resourceapi.Counter{}}
		for _, h := range chunk {
			name := CounterName(h)
			set.Counters[name] = resourceapi.Counter{Value: *apiresource.NewQuantity(holds[h], apiresource.DecimalSI)}
			refs[h] = counterRef{set: set.Name, counter: name}
		}
		sets = append(sets, set)
	}
	return sets, refs
}

func sliceDevice(d Device, node NodeFacts, hold int64, ref counterRef) resourceapi.Device {
	out := resourceapi.Device{Name: d.Name, Attributes: attributes(d, node)}
	if hold > 0 {
		consume := hold
		if !d.Pool.Exclusive() {
			consume = 1
		}
		out.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{
			CounterSet: ref.set,
			Counters:   map[string]resourceapi.Counter{ref.counter: {Value: *apiresource.NewQuantity(consume, apiresource.DecimalSI)}},
		}}
	}
	if !d.Pool.Exclusive() {
		out.AllowMultipleAllocations = ptr.To(true)
		out.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			contract.DRACapacitySlots: {
				Value: *apiresource.NewQuantity(int64(d.Pool.Slots), apiresource.DecimalSI),
				RequestPolicy: &resourceapi.CapacityRequestPolicy{
					Default: apiresource.NewQuantity(1, apiresource.DecimalSI),
					ValidRange: &resourceapi.CapacityRequestPolicyRange{
						Min:  apiresource.NewQuantity(1, apiresource.DecimalSI),
						Step: apiresource.NewQuantity(1, apiresource.DecimalSI),
					},
				},
			},
		}
	}
	if tainted(d.Pool, d.HCA, node) {
		// NoSchedule: no new claim gets the HCA, running pods keep it (the
		// health service shows them the HCA's state). Without TimeAdded the
		// API server stamps it and the slice controller keeps that stamp.
		out.Taints = []resourceapi.DeviceTaint{{Key: contract.DRATaintUnhealthy, Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	}
	return out
}

// attributes are the device's attributes: what claims select on. Each one
// is work for the scheduler on every device it passes (see Slices); mode,
// nodeGUID and netdev are retired (contract.DRARetiredAttributes): 636
// allocations for `rdma/ib: 1` before the allocator order instead of 690,
// 213 after it instead of 225 (BenchmarkAllocator), the driver's domain
// within the 8 entries a Go map holds without growing.
func attributes(d Device, node NodeFacts) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	h := d.HCA
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		contract.DRAAttrPool:       str(d.Pool.Resource),
		contract.DRAAttrRDMADevice: str(h.Name),
	}
	setStr := func(name, v string) {
		if v != "" {
			attrs[resourceapi.QualifiedName(name)] = str(v)
		}
	}
	setStr(contract.DRAAttrFirmware, h.Firmware)
	setStr(contract.DRAAttrVendorID, h.VendorID)
	setStr(contract.DRAAttrDeviceID, h.DeviceID)
	setStr(contract.DRAAttrPartition, inventory.HCAPartition(h))
	if ports := d.Pool.Ports(h); len(ports) > 0 {
		// One device stands for the HCA; its first port (of the pool's
		// link layers) describes it. ND and OCI HCAs have one port each.
		// The port's state is no attribute: it changes with the fabric,
		// and every attribute change is a slice write that requeues the
		// cluster's pending DRA pods; the unhealthy taint carries it.
		port := ports[0]
		setStr(contract.DRAAttrLinkLayer, port.LinkLayer)
		if gbps, ok := RateGbps(port.Rate); ok {
			attrs[contract.DRAAttrRate] = resourceapi.DeviceAttribute{IntValue: ptr.To(gbps)}
		}
	}
	if h.PCIAddress != "" {
		attrs[deviceattribute.StandardDeviceAttributePCIBusID] = str(h.PCIAddress)
		// Discovery reads the root once (inventory.HCA.PCIeRoot): the
		// deviceattribute package's reading finds none under a Hyper-V
		// guest's VMBus, where Azure's host bridges sit.
		if h.PCIeRoot != "" {
			attrs[deviceattribute.StandardDeviceAttributePCIeRoot] = str(h.PCIeRoot)
		}
	}
	// The attribute's doc: devices without NUMA affinity must not publish it.
	if h.NUMANode != inventory.UnknownNUMANode {
		attrs[deviceattribute.StandardDeviceAttributeNUMANode] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(h.NUMANode))}
	}
	return attrs
}

// tainted says whether the pool's device of h carries the unhealthy taint:
// the pool counts h unhealthy, or h is held tainted after being so.
func tainted(p *resource.Pool, h inventory.HCA, node NodeFacts) bool {
	ok, _ := p.Health(h)
	return !ok || node.Held[h.Name]
}

func str(s string) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{StringValue: ptr.To(s)}
}

// RateGbps reads the kernel's port rate ("400 Gb/sec (4X NDR)",
// drivers/infiniband/core/sysfs.c rate_show) as whole Gb/s; rates below
// 1 Gb/s or unreadable ones give false.
func RateGbps(rate string) (int64, bool) {
	num, _, ok := strings.Cut(strings.TrimSpace(rate), " Gb/sec")
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 1 {
		return 0, false
	}
	return int64(f), true
}

// Lookup finds a published device by name in m.
func Lookup(m *resource.Model, name string) (Device, error) {
	devs := Devices(m)
	i := slices.IndexFunc(devs, func(d Device) bool { return d.Name == name })
	if i < 0 {
		names := make([]string, 0, len(devs))
		for _, d := range devs {
			names = append(names, d.Name)
		}
		slices.Sort(names)
		return Device{}, fmt.Errorf("device %q is not on this node; it has %s", name, strings.Join(names, ", "))
	}
	return devs[i], nil
}
