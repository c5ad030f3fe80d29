package contract

// Extended resource names the node agent advertises and the webhook
// requests by default. They are the names the NVIDIA Network Operator's RDMA
// shared device plugin and SR-IOV device plugin examples use, so pods
// written for those keep working.
const (
	// ResourceSharedIB is the shared pool: one slot per container, standing
	// for every InfiniBand HCA of the node.
	ResourceSharedIB = "rdma/shared_ib"
	// ResourceExclusiveIB is the exclusive pool: one device per InfiniBand
	// HCA.
	ResourceExclusiveIB = "rdma/ib"
	// ResourceRoCE is the exclusive pool of RoCE ports, which a RoCE
	// profile requests instead of ResourceExclusiveIB.
	ResourceRoCE = "rdma/roce"
	// ResourceGPU is the resource that marks a GPU container by default.
	ResourceGPU = "nvidia.com/gpu"
)

// DefaultMemlock is the memlock annotation value the webhook writes when its
// config names none.
const DefaultMemlock = "unlimited"
