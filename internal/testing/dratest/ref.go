package dratest

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The reference driver that ibkube's allocator benchmarks and the fleet
// set ibkube against: slices and a class of the shape kube-scheduler's
// scheduler_perf DRA tests use (test/integration/scheduler_perf/dra at
// v1.37.2: templates/resourceslice.yaml, 10 devices of 4 attributes;
// templates/deviceclass.yaml, a class selecting by driver alone).
const (
	// RefDevices is how many devices a node's reference slice holds.
	RefDevices = 10
	// RefFirstDriver is a reference driver named to sort before every
	// driver a node of ours carries (gpu.nvidia.com, ibkube's): the
	// allocator takes a node's pools in driver-name order
	// (k8s.io/dynamic-resource-allocation structured/internal
	// sortPoolsByID), so a class of it finds its device in the first
	// pool and evaluates no other driver's device, as on a node that
	// carries this driver alone.
	RefFirstDriver = "a.ref.example.com"
)

// DriverSelectors select a driver's devices by its name alone, the least a
// DeviceClass that tells drivers apart evaluates.
func DriverSelectors(driver string) []resourceapi.DeviceSelector {
	return []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driver)}}}
}

// RefClass is the reference class name over driver's devices.
func RefClass(name, driver string) *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourceapi.DeviceClassSpec{Selectors: DriverSelectors(driver)},
	}
}

// RefSlice is node's slice of driver, one pool of one slice: RefDevices
// devices with a string, an int, a bool and a version attribute.
func RefSlice(driver, node string) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + driver},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: driver, NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
		},
	}
	for i := range int64(RefDevices) {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{
			Name: fmt.Sprintf("dev-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"model": {StringValue: ptr.To("ref")}, "index": {IntValue: ptr.To(i)},
				"healthy": {BoolValue: ptr.To(true)}, "driverVersion": {VersionValue: ptr.To("1.0.0")},
			},
		})
	}
	return s
}
