// Package dra is the node agent's DRA (Dynamic Resource Allocation) kubelet
// plugin: it publishes the node's HCAs as devices in a ResourceSlice,
// prepares allocated claims by writing one CDI spec per claim, and reports
// device health to the kubelet.
//
// The cores are pure: Resources turns the resource model into the
// ResourceSlice content, Health turns it into the health report, and
// claimSpec turns a claim's allocation into a CDI spec. Driver holds the
// latest model and does the file I/O; Start wires it to the kubelet through
// k8s.io/dynamic-resource-allocation/kubeletplugin.
package dra

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/resourceslice"
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
	// PCIeRoots maps an HCA's PCI address to its PCIe root complex
	// ("pci0101:00"), resource.kubernetes.io/pcieRoot; an HCA missing here
	// publishes no pcieRoot.
	PCIeRoots map[string]string
}

// Device is one published device: an HCA as one pool hands it out.
type Device struct {
	// Name is the device's name in the ResourceSlice.
	Name string
	Pool *resource.Pool
	HCA  inventory.HCA
}

// Devices lists the model's devices: per pool in config order, the pool's
// HCAs in inventory order. An HCA in a shared and an exclusive pool is two
// devices, so a device's name is the pool's slug before the HCA's
// ("ib-mlx5-0", "shared-ib-mlx5-0"): names must be unique in the node's pool.
func Devices(m *resource.Model) []Device {
	var out []Device
	slugs := poolSlugs(m.Pools)
	for i, p := range m.Pools {
		for _, h := range p.HCAs {
			out = append(out, Device{Name: deviceName(slugs[i], h.Name), Pool: p, HCA: h})
		}
	}
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

// Resources is what the node publishes: one pool named after the node,
// holding every device of the model, ResourceSliceMaxDevices to a slice.
func Resources(m *resource.Model, node NodeFacts) resourceslice.DriverResources {
	var devs []resourceapi.Device
	for _, d := range Devices(m) {
		devs = append(devs, sliceDevice(d, node))
	}
	var pool resourceslice.Pool
	for chunk := range slices.Chunk(devs, resourceapi.ResourceSliceMaxDevices) {
		pool.Slices = append(pool.Slices, resourceslice.Slice{Devices: chunk})
	}
	if len(pool.Slices) == 0 {
		// An empty pool still says "this node has no devices", which
		// removes slices a previous run published.
		pool.Slices = []resourceslice.Slice{{}}
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{node.Name: pool}}
}

func sliceDevice(d Device, node NodeFacts) resourceapi.Device {
	h := d.HCA
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		contract.DRAAttrPool:       str(d.Pool.Resource),
		contract.DRAAttrMode:       str(d.Pool.Mode),
		contract.DRAAttrRDMADevice: str(h.Name),
	}
	setStr := func(name, v string) {
		if v != "" {
			attrs[resourceapi.QualifiedName(name)] = str(v)
		}
	}
	setStr(contract.DRAAttrNodeGUID, h.NodeGUID)
	setStr(contract.DRAAttrFirmware, h.Firmware)
	setStr(contract.DRAAttrVendorID, h.VendorID)
	setStr(contract.DRAAttrDeviceID, h.DeviceID)
	setStr(contract.DRAAttrPartition, inventory.HCAsPartition([]inventory.HCA{h}, []string{h.Name}).Label())
	if ports := d.Pool.Ports(h); len(ports) > 0 {
		// One device stands for the HCA; its first port (of the pool's
		// link layers) describes it. ND and OCI HCAs have one port each.
		port := ports[0]
		setStr(contract.DRAAttrLinkLayer, port.LinkLayer)
		setStr(contract.DRAAttrPortState, port.State)
		setStr(contract.DRAAttrNetdev, port.Netdev)
		if gbps, ok := RateGbps(port.Rate); ok {
			attrs[contract.DRAAttrRate] = resourceapi.DeviceAttribute{IntValue: ptr.To(gbps)}
		}
	}
	if h.PCIAddress != "" {
		attrs[deviceattribute.StandardDeviceAttributePCIBusID] = str(h.PCIAddress)
		if root, ok := node.PCIeRoots[h.PCIAddress]; ok {
			attrs[deviceattribute.StandardDeviceAttributePCIeRoot] = str(root)
		}
	}
	// The attribute's doc: devices without NUMA affinity must not publish it.
	if h.NUMANode != inventory.UnknownNUMANode {
		attrs[deviceattribute.StandardDeviceAttributeNUMANode] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(h.NUMANode))}
	}
	out := resourceapi.Device{Name: d.Name, Attributes: attrs}
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
	if ok, _ := d.Pool.Health(h); !ok {
		// NoSchedule: no new claim gets the HCA, running pods keep it (the
		// health service shows them the HCA's state). Without TimeAdded the
		// API server stamps it and the slice controller keeps that stamp.
		out.Taints = []resourceapi.DeviceTaint{{Key: contract.DRATaintUnhealthy, Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	}
	return out
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

// lookup finds a published device by name in m.
func lookup(m *resource.Model, name string) (Device, error) {
	devs := Devices(m)
	i := slices.IndexFunc(devs, func(d Device) bool { return d.Name == name })
	if i < 0 {
		names := make([]string, 0, len(devs))
		for _, d := range devs {
			names = append(names, d.Name)
		}
		return Device{}, fmt.Errorf("device %q is not on this node; it has %s", name, strings.Join(names, ", "))
	}
	return devs[i], nil
}
