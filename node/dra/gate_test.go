package dra

import (
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestCheckGates plays an API server that drops the fields of gates that
// are off, as the real one does, and expects the agent to refuse to start
// naming the gate.
func TestCheckGates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		drop   func(runtime.Object)
		shared bool
		want   string // "" = no error
	}{
		{name: "all on", shared: true},
		{name: "DRAExtendedResource off", drop: func(o runtime.Object) {
			if c, ok := o.(*resourceapi.DeviceClass); ok {
				c.Spec.ExtendedResourceName = nil
			}
		}, want: "DRAExtendedResource"},
		{name: "DRAConsumableCapacity off with shared pools", shared: true, drop: func(o runtime.Object) {
			if s, ok := o.(*resourceapi.ResourceSlice); ok && len(s.Spec.Devices) > 0 {
				s.Spec.Devices[0].AllowMultipleAllocations = nil
			}
		}, want: "DRAConsumableCapacity"},
		{name: "DRAConsumableCapacity off, exclusive pools only", drop: func(o runtime.Object) {
			if s, ok := o.(*resourceapi.ResourceSlice); ok && len(s.Spec.Devices) > 0 {
				s.Spec.Devices[0].AllowMultipleAllocations = nil
			}
		}},
		{name: "DRADeviceTaints off", drop: func(o runtime.Object) {
			if s, ok := o.(*resourceapi.ResourceSlice); ok && len(s.Spec.Devices) > 0 {
				s.Spec.Devices[0].Taints = nil
			}
		}, want: "DRADeviceTaints"},
		{name: "DRAPartitionableDevices off: counters dropped", drop: func(o runtime.Object) {
			if s, ok := o.(*resourceapi.ResourceSlice); ok {
				s.Spec.SharedCounters = nil
			}
		}, want: "DRAPartitionableDevices"},
		{name: "DRAPartitionableDevices off: consumption dropped", drop: func(o runtime.Object) {
			if s, ok := o.(*resourceapi.ResourceSlice); ok && len(s.Spec.Devices) > 0 {
				s.Spec.Devices[0].ConsumesCounters = nil
			}
		}, want: "DRAPartitionableDevices"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			client := fake.NewClientset()
			var dryRuns int
			client.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
				create := a.(k8stesting.CreateActionImpl)
				if len(create.CreateOptions.DryRun) == 1 {
					dryRuns++
				}
				o := create.GetObject().DeepCopyObject()
				if tc.drop != nil {
					tc.drop(o)
				}
				return true, o, nil
			})
			err := CheckGates(context.Background(), client.ResourceV1().DeviceClasses(), client.ResourceV1().ResourceSlices(), "node-0", tc.shared)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("CheckGates: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--allocation=deviceplugin")):
				t.Errorf("CheckGates = %v, want an error naming %s and the way back to device plugins", err, tc.want)
			}
			if dryRuns != 3 {
				t.Errorf("%d dry-run creates, want 3 (nothing may be stored)", dryRuns)
			}
		})
	}
}
