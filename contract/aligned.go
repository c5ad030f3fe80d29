package contract

import "strings"

// The aligned GPU+HCA claim the webhook gives a pod when the config turns
// it on (docs/dra.md, "Aligned GPU and HCA pairs").
const (
	// AlignedClaim is the pod-level claim's name in spec.resourceClaims and
	// in the containers' resources.claims. A pod with several GPU
	// containers gets one claim per container, AlignedClaim + "-" + the
	// container's name.
	AlignedClaim = "ibkube-aligned"
	// DefaultGPUDeviceClass is the DeviceClass NVIDIA's DRA driver for
	// GPUs installs (NVIDIA/k8s-dra-driver-gpu, deviceclass-gpu.yaml).
	DefaultGPUDeviceClass = "gpu.nvidia.com"
)

// DeviceClassFor is the name of the DeviceClass the chart renders for the
// pool of resource ("rdma/ib" is DeviceClassIB), by the chart's rule
// (ibkube.dra.className): "ibkube-", then the name in lower case with '/',
// '_' and '.' as '-'.
func DeviceClassFor(resource string) string {
	return "ibkube-" + strings.NewReplacer("/", "-", "_", "-", ".", "-").Replace(strings.ToLower(resource))
}
