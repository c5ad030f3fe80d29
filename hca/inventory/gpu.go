package inventory

// GPU is one GPU (PCI class 0x0302 3D controller or 0x0300 VGA controller)
// of a GPU vendor, as the node's PCI tree shows it.
type GPU struct {
	PCIAddress string `json:"pciAddress"`
	VendorID   string `json:"vendorID"` // "10de" NVIDIA, "1002" AMD
	DeviceID   string `json:"deviceID,omitempty"`
	// NUMANode is UnknownNUMANode (-1) when the kernel does not know it.
	NUMANode int `json:"numaNode"`
	// PCIeRoot is its PCIe root complex, as HCA.PCIeRoot.
	PCIeRoot string `json:"pcieRoot,omitempty"`
}

// Affinity says how near an HCA sits to its partner GPUs, nearest first.
// NCCL's path types name the same distances: PIX/PXB (a PCIe switch
// between them), PHB (the host bridge), NODE/SYS (the CPU)
// (NVIDIA/nccl src/graph/topo.h).
type Affinity string

// Affinities, nearest first.
const (
	// AffinitySwitch: the HCA and the GPU sit behind a common PCIe bridge
	// below the root complex (a PCIe switch), so GPUDirect RDMA traffic
	// does not cross the CPU.
	AffinitySwitch Affinity = "switch"
	// AffinityRoot: they share a PCIe root complex (the DRA attribute
	// resource.kubernetes.io/pcieRoot) but no switch.
	AffinityRoot Affinity = "root"
	// AffinityNUMA: they only share a NUMA node; traffic crosses the CPU's
	// host bridges. On Azure VMs every device has a root of its own, so
	// this is the nearest there is.
	AffinityNUMA Affinity = "numa"
)

// Rank orders affinities: 0 for the nearest (switch), larger for farther,
// and len(Affinities) for an unknown one.
func (a Affinity) Rank() int {
	for i, b := range Affinities() {
		if a == b {
			return i
		}
	}
	return len(Affinities())
}

// Affinities lists the affinities nearest first.
func Affinities() []Affinity { return []Affinity{AffinitySwitch, AffinityRoot, AffinityNUMA} }

// GPUPartner is the GPU or GPUs nearest an HCA: every GPU at the nearest
// affinity found (behind the deepest common switch where there are
// several), as PCI addresses in order.
type GPUPartner struct {
	GPUs     []string `json:"gpus"`
	Affinity Affinity `json:"affinity"`
}
