package dra

import (
	"context"
	"errors"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/contract"
)

// DeviceClassCreator is the part of the resource.k8s.io/v1 client the gate
// check uses (resourcev1.DeviceClassInterface).
type DeviceClassCreator interface {
	Create(ctx context.Context, class *resourceapi.DeviceClass, opts metav1.CreateOptions) (*resourceapi.DeviceClass, error)
}

// SliceCreator is the part of the resource.k8s.io/v1 client the gate check
// uses (resourcev1.ResourceSliceInterface).
type SliceCreator interface {
	Create(ctx context.Context, slice *resourceapi.ResourceSlice, opts metav1.CreateOptions) (*resourceapi.ResourceSlice, error)
}

// gateCounterSet is the dry-run counter set, which the dry-run device
// consumes.
const gateCounterSet = "gate-check"

// dryRun asks the API server to validate and default an object and store
// nothing.
func dryRun() metav1.CreateOptions {
	return metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
}

// gateSlice is a ResourceSlice of node in the gate check's own pool of two
// slices (one of devices, one of counters), holding neither yet.
func gateSlice(node string) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "ibkube-gate-check-"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   contract.DRADriverName,
			Pool:     resourceapi.ResourcePool{Name: "ibkube-gate-check", ResourceSliceCount: 2},
			NodeName: ptr.To(node),
		},
	}
}

func gateCounters() map[string]resourceapi.Counter {
	return map[string]resourceapi.Counter{gateCounterSet: {Value: *apiresource.NewQuantity(1, apiresource.DecimalSI)}}
}

// countersKept dry-runs a slice of shared counters (a slice holds devices
// or counters, not both) and says whether the API server kept it and the
// device's consumesCounters: the HCAs' counters keep one HCA from an
// exclusive claim and sharers at once (DRAPartitionableDevices).
func countersKept(ctx context.Context, slices SliceCreator, node string, d resourceapi.Device) (bool, error) {
	counters := gateSlice(node)
	counters.Spec.SharedCounters = []resourceapi.CounterSet{{Name: gateCounterSet, Counters: gateCounters()}}
	got, err := slices.Create(ctx, counters, dryRun())
	if err != nil {
		return false, fmt.Errorf("dry-run create of a ResourceSlice of shared counters for node %s: %w", node, err)
	}
	return len(got.Spec.SharedCounters) == 1 && len(d.ConsumesCounters) == 1, nil
}

// MinKubernetes is the oldest release whose defaults carry every gate DRA
// mode needs: DRAExtendedResource, DRAConsumableCapacity, DRADeviceTaints
// DRAPartitionableDevices and ResourceHealthStatus are beta and on by
// default from 1.36
// (k8s.io/kubernetes pkg/features/kube_features.go); in 1.37
// DRAExtendedResource is GA and locked on.
const MinKubernetes = "1.36"

// CheckGates asks the API server, by server-side dry-run creates that store
// nothing, whether it keeps the fields DRA mode relies on; an API server
// with a feature gate off drops the field silently. It checks
// extendedResourceName on a DeviceClass (DRAExtendedResource: pods asking
// rdma/ib served by DRA) and, on a ResourceSlice of this node,
// allowMultipleAllocations with a consumable capacity (DRAConsumableCapacity:
// shared pools) and a device taint (DRADeviceTaints: unhealthy HCAs kept
// from new pods); consumable capacity only matters when shared pools are
// configured. The kubelet's side (ResourceHealthStatus) cannot be seen from
// here.
func CheckGates(ctx context.Context, classes DeviceClassCreator, slices SliceCreator, node string, shared bool) error {
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "ibkube-gate-check-"},
		Spec: resourceapi.DeviceClassSpec{
			Selectors:            []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + contract.DRADriverName + `"`}}},
			ExtendedResourceName: ptr.To("ibkube.io/gate-check"),
		},
	}
	got, err := classes.Create(ctx, class, dryRun())
	if err != nil {
		return fmt.Errorf("dry-run create of a DeviceClass (is resource.k8s.io/v1 served, Kubernetes %s or later, and may the agent create deviceclasses?): %w", MinKubernetes, err)
	}
	var off []string
	if got.Spec.ExtendedResourceName == nil {
		off = append(off, "DRAExtendedResource (DeviceClass spec.extendedResourceName was dropped)")
	}
	slice := gateSlice(node)
	slice.Spec.Devices = []resourceapi.Device{{
		Name:                     "gate-check",
		AllowMultipleAllocations: ptr.To(true),
		ConsumesCounters:         []resourceapi.DeviceCounterConsumption{{CounterSet: gateCounterSet, Counters: gateCounters()}},
		Capacity:                 map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{contract.DRACapacitySlots: {Value: *apiresource.NewQuantity(1, apiresource.DecimalSI)}},
		Taints:                   []resourceapi.DeviceTaint{{Key: contract.DRATaintUnhealthy, Effect: resourceapi.DeviceTaintEffectNoSchedule}},
	}}
	gotSlice, err := slices.Create(ctx, slice, dryRun())
	if err != nil {
		return fmt.Errorf("dry-run create of a ResourceSlice for node %s (may the agent create resourceslices?): %w", node, err)
	}
	if len(gotSlice.Spec.Devices) != 1 {
		return errors.New("dry-run create of a ResourceSlice: the API server returned no device")
	}
	d := gotSlice.Spec.Devices[0]
	if shared && d.AllowMultipleAllocations == nil {
		off = append(off, "DRAConsumableCapacity (device allowMultipleAllocations was dropped)")
	}
	if len(d.Taints) == 0 {
		off = append(off, "DRADeviceTaints (device taints were dropped)")
	}
	if kept, err := countersKept(ctx, slices, node, d); err != nil {
		return err
	} else if !kept {
		off = append(off, "DRAPartitionableDevices (shared counters or a device's consumesCounters were dropped: one HCA could go to an exclusive claim and to sharers at once)")
	}
	if len(off) > 0 {
		return fmt.Errorf("DRA mode needs feature gates that are off on the API server: %v; turn them on (default on from Kubernetes %s) or run the node agent with --allocation=%s",
			off, MinKubernetes, contract.AllocationDevicePlugin)
	}
	return nil
}
