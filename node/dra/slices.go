package dra

import (
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/node/dra/slice"
	"github.com/ibkube/ibkube/node/resource"
)

// The slice model lives in node/dra/slice, which the offline CLI links
// without the kubelet plugin; these names keep the driver's code short.
type (
	Device    = slice.Device
	NodeFacts = slice.NodeFacts
)

// Devices lists the model's devices in the order they are published.
func Devices(m *resource.Model) []Device { return slice.Devices(m) }

func lookup(m *resource.Model, name string) (Device, error) { return slice.Lookup(m, name) }

// Resources is the node's slices as the kubeletplugin's slice controller
// takes them: one pool named after the node.
func Resources(m *resource.Model, node NodeFacts) resourceslice.DriverResources {
	var pool resourceslice.Pool
	for _, s := range slice.Slices(m, node) {
		pool.Slices = append(pool.Slices, resourceslice.Slice{Devices: s.Devices, SharedCounters: s.SharedCounters})
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{node.Name: pool}}
}

// PCIeRoot is the resource.kubernetes.io/pcieRoot of the PCI device at
// address under sysfsRoot (discovery.PCIeRoot), for devices of other
// drivers; the HCAs carry theirs in the inventory.
func PCIeRoot(sysfsRoot, address string) (string, error) {
	return discovery.PCIeRoot(sysfsRoot, address)
}
