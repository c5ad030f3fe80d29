package agent

import (
	"strings"

	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/node/resource"
)

// HCAReport is one HCA as the agent sees it: what `ibkube node -o json`
// prints and /inventory serves.
type HCAReport struct {
	Name       string `json:"name"`
	PCIAddress string `json:"pciAddress"`
	VendorID   string `json:"vendorID,omitempty"`
	DeviceID   string `json:"deviceID,omitempty"`
	NUMANode   int    `json:"numaNode"`
	LinkLayer  string `json:"linkLayer"`
	Healthy    bool   `json:"healthy"`
	// Reason is why no pool takes the HCA (naming the selector), else why
	// it is unhealthy; empty for a healthy HCA in use.
	Reason string `json:"reason"`
	// Resource is the resources the HCA feeds, comma-separated; empty when
	// the selectors exclude it.
	Resource    string       `json:"resource"`
	Resources   []string     `json:"resources"`
	Ports       []PortReport `json:"ports"`
	CharDevices []CharReport `json:"charDevices"`
	// Partition is the tenant partition key this HCA's ACTIVE InfiniBand
	// ports share ("0x800b"); empty when they share none (NodePartition
	// says why for the node).
	Partition string `json:"partition,omitempty"`
}

// PortReport is one HCA port.
type PortReport struct {
	Port      int    `json:"port"`
	State     string `json:"state"`
	PhysState string `json:"physState"`
	LinkLayer string `json:"linkLayer"`
	Rate      string `json:"rate,omitempty"`
	Netdev    string `json:"netdev"`
	// PKeys is the used entries of the port's partition table.
	PKeys     []inventory.PKeyEntry `json:"pkeys,omitempty"`
	PKeyError string                `json:"pkeyError,omitempty"`
	// RoCEv2IPv4GIDIndex is a RoCE port's GID index of its first RoCE v2
	// IPv4 entry, what NCCL_IB_GID_INDEX must be; nil when there is none.
	// GIDError says why the GID table could not be read.
	RoCEv2IPv4GIDIndex *int   `json:"roceV2IPv4GIDIndex,omitempty"`
	GIDError           string `json:"gidError,omitempty"`
}

// CharReport is one char device of an HCA.
type CharReport struct {
	Name    string `json:"name"`
	Port    int    `json:"port,omitempty"`
	Present bool   `json:"present"`
}

// Report lists every HCA of the model with its resources and reason.
func Report(m *resource.Model) []HCAReport {
	out := make([]HCAReport, 0, len(m.HCAs))
	for _, s := range m.HCAs {
		h := s.HCA
		r := HCAReport{
			Name: h.Name, PCIAddress: h.PCIAddress, VendorID: h.VendorID, DeviceID: h.DeviceID,
			NUMANode: h.NUMANode, LinkLayer: h.LinkLayer(), Healthy: s.Healthy(), Reason: s.Reason(),
			Resource: strings.Join(s.Resources, ","), Resources: s.Resources,
			Ports: []PortReport{}, CharDevices: []CharReport{},
		}
		if r.Resources == nil {
			r.Resources = []string{}
		}
		for _, p := range h.Ports {
			r.Ports = append(r.Ports, PortReport{Port: p.Number, State: p.State, PhysState: p.PhysState, LinkLayer: p.LinkLayer, Rate: p.Rate, Netdev: p.Netdev,
				PKeys: p.PKeys, PKeyError: p.PKeyError, RoCEv2IPv4GIDIndex: p.RoCEv2IPv4GID, GIDError: p.GIDError})
		}
		r.Partition = inventory.HCAPartition(h)
		for _, c := range h.CharDevices {
			r.CharDevices = append(r.CharDevices, charReport(c))
		}
		out = append(out, r)
	}
	return out
}

// NodePartition is the node's partition as the model's HCAs say.
func NodePartition(m *resource.Model) inventory.Partition {
	hcas := make([]inventory.HCA, 0, len(m.HCAs))
	for _, s := range m.HCAs {
		hcas = append(hcas, s.HCA)
	}
	return inventory.NodePartition(inventory.Node{HCAs: hcas})
}

func charReport(c inventory.CharDevice) CharReport {
	return CharReport{Name: c.Name, Port: c.Port, Present: c.Present}
}
