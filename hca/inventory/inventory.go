// Package inventory is the node agent's model of the InfiniBand/RDMA hardware
// on one node: what discovery reports, what the resource model, the CLI, the
// doctor, the CNI parent resolver and the NRI memlock plugin all read.
//
// It holds data only; discovery (sysfs, netlink) fills it and nothing here
// does I/O.
package inventory

import "strings"

// Link layers as the kernel spells them in
// /sys/class/infiniband/<dev>/ports/<n>/link_layer.
const (
	LinkLayerInfiniBand = "InfiniBand"
	LinkLayerEthernet   = "Ethernet"
)

// Port states as the kernel prints them without the numeric prefix
// (/sys/class/infiniband/<dev>/ports/<n>/state is "4: ACTIVE",
// phys_state is "5: LinkUp").
const (
	PortStateActive   = "ACTIVE"
	PortPhysStateUp   = "LinkUp"
	UnknownNUMANode   = -1
	RDMACMDeviceName  = "rdma_cm"
	DevInfinibandPath = "infiniband"
)

// Node is everything discovery found on one node.
type Node struct {
	// HCAs in a stable order (by name, natural sort: mlx5_2 before mlx5_10).
	HCAs []HCA `json:"hcas"`
	// RDMACM is the shared /dev/infiniband/rdma_cm char device, if present.
	RDMACM *CharDevice `json:"rdmaCM,omitempty"`
	// Source says how the device list was obtained ("netlink" or "sysfs").
	Source string `json:"source,omitempty"`
	// GPUs are the node's GPUs as its PCI tree shows them, sorted by PCI
	// address; discovery reads them only to name each HCA's GPUPartner.
	GPUs []GPU `json:"gpus,omitempty"`
}

// HCA is one RDMA device (a PF, VF or SF) as the kernel names it (mlx5_0).
type HCA struct {
	Name       string `json:"name"`
	NodeGUID   string `json:"nodeGUID,omitempty"`
	PCIAddress string `json:"pciAddress,omitempty"`
	VendorID   string `json:"vendorID,omitempty"` // "15b3", no 0x prefix
	DeviceID   string `json:"deviceID,omitempty"` // "101c"
	// NUMANode is the PCI device's NUMA node; UnknownNUMANode (-1) when the
	// kernel does not know (single-socket hosts, many VMs).
	NUMANode int `json:"numaNode"`
	// PCIeRoot is the PCIe root complex above the PCI device ("pci0101:00",
	// IsPCIRootComplex), the DRA attribute resource.kubernetes.io/pcieRoot;
	// "" when its sysfs path shows none.
	PCIeRoot     string       `json:"pcieRoot,omitempty"`
	Ports        []Port       `json:"ports"`
	CharDevices  []CharDevice `json:"charDevices"`
	Firmware     string       `json:"firmwareVersion,omitempty"`
	Healthy      bool         `json:"healthy"`
	HealthReason string       `json:"healthReason,omitempty"`
	// GPUPartner is the GPUs nearest this HCA in the machine's topology;
	// nil when the node has no GPU, or none shares a PCIe root or a known
	// NUMA node with the HCA.
	GPUPartner *GPUPartner `json:"gpuPartner,omitempty"`
}

// Port is one port of an HCA (numbered from 1).
type Port struct {
	Number    int    `json:"port"`
	State     string `json:"state"`     // ACTIVE, DOWN, INIT, ARMED
	PhysState string `json:"physState"` // LinkUp, Disabled, Polling
	LinkLayer string `json:"linkLayer"` // InfiniBand or Ethernet
	Rate      string `json:"rate,omitempty"`
	// Netdev is the IPoIB (InfiniBand) or Ethernet (RoCE) interface bound to
	// this port, if any.
	Netdev string `json:"netdev,omitempty"`
	// GUID is the port GUID (ports/<n>/gids/0 interface id), which an IPoIB
	// hardware address ends with.
	GUID string `json:"portGUID,omitempty"`
	// PKeys is the used entries of the partition table (InfiniBand ports
	// only), in index order; PKeyError says why it could not be read whole,
	// and PKeys is then empty.
	PKeys     []PKeyEntry `json:"pkeys,omitempty"`
	PKeyError string      `json:"pkeyError,omitempty"`
	// GIDs is the used entries of a RoCE (Ethernet) port's GID table, in
	// index order; GIDError says why it could not be read whole, and GIDs
	// is then empty. RoCEv2IPv4GIDIndex is the entry NCCL and UCX need.
	GIDs     []GIDEntry `json:"gids,omitempty"`
	GIDError string     `json:"gidError,omitempty"`
	// RoCEv2IPv4GID is RoCEv2IPv4GIDIndex as discovery found it, for
	// those who read the JSON (ibkube node -o json); nil when there is none.
	RoCEv2IPv4GID *int `json:"roceV2IPv4GIDIndex,omitempty"`
}

// CharDevice is a device node under /dev/infiniband.
type CharDevice struct {
	// Name is the node's name under /dev/infiniband: uverbs0, umad0, issm0, rdma_cm.
	Name string `json:"name"`
	// Port is the HCA port a umad/issm device belongs to; 0 for uverbs and rdma_cm.
	Port  int `json:"port,omitempty"`
	Major int `json:"major"`
	Minor int `json:"minor"`
	// Present is false when sysfs announces the device but the node under the
	// dev root is missing.
	Present bool `json:"present"`
}

// LinkLayer returns the HCA's link layer: that of its first port, or "" when
// it has no ports.
func (h HCA) LinkLayer() string {
	if len(h.Ports) == 0 {
		return ""
	}
	return h.Ports[0].LinkLayer
}

// Kinds of per-HCA char devices, as CharDevice.Kind names them and as the
// agent config's managementDevices lists the opt-in ones.
const (
	// CharUverbs is /dev/infiniband/uverbsN: the verbs interface every RDMA
	// workload opens (libibverbs).
	CharUverbs = "uverbs"
	// CharUmad is /dev/infiniband/umadN: raw management datagrams (libibumad
	// umad_open_port), for fabric diagnostics such as perfquery or
	// ibnetdiscover.
	CharUmad = "umad"
	// CharIssm is /dev/infiniband/issmN: holding it open sets the port's
	// IsSM capability bit, i.e. claims a subnet manager runs behind it.
	CharIssm = "issm"
)

// Kind is the device's kind (CharUverbs, CharUmad, CharIssm) from its name,
// or "" for anything else (rdma_cm).
func (c CharDevice) Kind() string {
	for _, k := range []string{CharUverbs, CharUmad, CharIssm} {
		if rest, ok := strings.CutPrefix(c.Name, k); ok && rest != "" && strings.Trim(rest, "0123456789") == "" {
			return k
		}
	}
	return ""
}
