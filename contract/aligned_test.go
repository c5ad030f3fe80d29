package contract

import "testing"

// TestDeviceClassFor ties the rule to the DeviceClasses the chart renders
// for ibkube's own pools.
func TestDeviceClassFor(t *testing.T) {
	t.Parallel()
	for res, want := range map[string]string{
		ExtendedResourceIB:          DeviceClassIB,
		ExtendedResourceSharedIB:    DeviceClassSharedIB,
		ExtendedResourceRoCE:        DeviceClassRoCE,
		"rdma/Hca_Exclusive.site-a": "ibkube-rdma-hca-exclusive-site-a",
	} {
		if got := DeviceClassFor(res); got != want {
			t.Errorf("DeviceClassFor(%q) = %q, want %q", res, got, want)
		}
	}
}
