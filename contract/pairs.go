package contract

import (
	"slices"
	"strconv"
	"strings"
)

// What the DRA driver tells a container about the GPUs next to its HCAs,
// as environment variables of the claim's CDI devices (docs/dra.md, "What
// the container is told"). Both are lists of "<hca>=<gpus>/<word>" entries
// joined by ",", in the claim's order of HCAs; <gpus> are PCI addresses
// joined by "+", empty where no GPU of the claim is near an HCA outside an
// aligned claim (whose pairs always name their GPU):
//
//	IBKUBE_GPU_PAIRS=mlx5_0=0000:0f:00.0/pcie-root,mlx5_4=0000:89:00.0/numa-node,mlx5_6=0000:2d:00.0/none
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

// The rungs of the aligned claim's ladder (webhook/aligned builds the
// claim), best first: each pair's GPU request has one subrequest per rung,
// and an allocation result's request names the rung taken,
// "gpu-<pair>/<rung>"; the pair's HCA requests are "hca-<pair>-<j>".
const (
	RungPCIeRoot = "pcie-root"
	RungNUMANode = "numa-node"
	RungAny      = "any"
)

// Rungs lists the rungs best first.
func Rungs() []string { return []string{RungPCIeRoot, RungNUMANode, RungAny} }

// AlignedRungOf reads which pair and rung an allocation result's request
// ("gpu-3/numa-node") stands for; ok is false for any other request.
func AlignedRungOf(request string) (pair int, rung string, ok bool) {
	name, rung, found := strings.Cut(request, "/")
	idx, isGPU := strings.CutPrefix(name, "gpu-")
	if !found || !isGPU || !slices.Contains(Rungs(), rung) {
		return 0, "", false
	}
	pair, err := strconv.Atoi(idx)
	return pair, rung, err == nil
}

// AlignedPairOf reads which pair an HCA request ("hca-3-1") belongs to.
func AlignedPairOf(request string) (pair int, ok bool) {
	rest, isHCA := strings.CutPrefix(request, "hca-")
	idx, j, found := strings.Cut(rest, "-")
	if !isHCA || !found {
		return 0, false
	}
	pair, err := strconv.Atoi(idx)
	if _, errJ := strconv.Atoi(j); err != nil || errJ != nil {
		return 0, false
	}
	return pair, true
}

// How near a pair's GPU sits to its HCA, nearest first. The first two are
// spelled as the rungs, so a pair's word reads against the rung its GPU
// took.
const (
	NearPCIeRoot = RungPCIeRoot // one PCIe root complex (with or without a switch below it)
	NearNUMANode = RungNUMANode // another root on the same NUMA node
	NearNone     = "none"       // neither: no GPU of the claim is near the HCA
	// NearUnknown: the GPU's place could not be read (its driver
	// publishes no pciBusID, pcieRoot or numaNode, or its slice could
	// not be listed).
	NearUnknown = "unknown"
)
