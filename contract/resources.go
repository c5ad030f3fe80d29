package contract

// Extended resource names the node agent advertises and the webhook
// requests by default. They are ibkube's own; the chart's rdmaResources
// renames both sides at once (for example to the NVIDIA Network Operator's
// rdma/rdma_shared_device_a, for pods written against it).
const (
	// ResourceSharedIB is the shared pool: one slot per container, standing
	// for every InfiniBand HCA of the node.
	ResourceSharedIB = "rdma/shared_ib"
	// ResourceExclusiveIB is the exclusive pool: one device per InfiniBand
	// HCA.
	ResourceExclusiveIB = "rdma/ib"
	// ResourceRoCE is the exclusive pool of RoCE ports the docs describe
	// for OCI (cmd/ibkube/testdata/node/oci-h100-roce.yaml); the OCI
	// profiles request it instead of ResourceExclusiveIB.
	ResourceRoCE = "rdma/roce"
	// ResourceGPU is the resource that marks a GPU container by default: the
	// one NVIDIA's k8s-device-plugin advertises.
	ResourceGPU = "nvidia.com/gpu"
)

// DefaultMemlock is the memlock annotation value the webhook writes when its
// config names none.
const DefaultMemlock = "unlimited"
