package contract

// What the DRA driver tells a container about the GPUs next to its HCAs,
// as environment variables of the claim's CDI devices (docs/dra.md, "What
// the container is told"). Both are lists of "<hca>=<gpus>/<word>" entries
// joined by ",", in the claim's order of HCAs; <gpus> are PCI addresses
// joined by "+", empty where there is none:
//
//	IBKUBE_GPU_PAIRS=mlx5_0=0000:0f:00.0/pcie-root,mlx5_4=0000:89:00.0/numa-node,mlx5_6=/none
//	IBKUBE_GPU_PARTNERS=mlx5_0=0000:0f:00.0/switch,mlx5_4=0000:89:00.0/switch
const (
	// EnvGPUPairs pairs each HCA of the claim with the claim's own GPUs:
	// in an aligned claim the GPU of its pair, otherwise the claim's GPUs
	// nearest it, and how near (a Near word). Set only on a claim that
	// holds devices of another driver.
	EnvGPUPairs = "IBKUBE_GPU_PAIRS"
	// EnvGPUPartners names each HCA's GPU partners by the node's PCI tree,
	// whoever holds them, with the affinity `ibkube node` shows (switch,
	// root, numa); an HCA without a partner is left out. It is what a
	// container whose GPUs come from another claim compares its GPUs with.
	EnvGPUPartners = "IBKUBE_GPU_PARTNERS"
)

// How near a pair's GPU sits to its HCA, nearest first. The first three
// are the rungs of the aligned claim's ladder, spelled alike so a pair's
// word reads against the rung its GPU took.
const (
	NearPCIeRoot = "pcie-root" // one PCIe root complex (with or without a switch below it)
	NearNUMANode = "numa-node" // another root on the same NUMA node
	NearNone     = "none"      // neither: no GPU of the claim is near the HCA
	// NearUnknown: the GPU's place could not be read (its driver
	// publishes no pciBusID, pcieRoot or numaNode, or its slice could
	// not be listed).
	NearUnknown = "unknown"
)
