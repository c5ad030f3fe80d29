// Package machine is the node agent's whole view of the NCCL catalogue:
// which built-in profile a node's instance type has, and the NCCL topology
// file that describes the machine. It exposes no tunings on purpose: those
// reach a pod only through the conf file of the profile the pod resolved at
// admission, below every value the user sets, so a site's override or a
// pod's choice of another profile is never beaten by the node's guess.
package machine

import "github.com/ibkube/ibkube/nccl"

// Facts are what the catalogue says about a machine.
type Facts struct {
	// Profile is the built-in profile's name.
	Profile string
	// TopologyFile names the NCCL topology XML Topology renders ("" for
	// none).
	TopologyFile string
}

// ForSKU returns the facts for a node's instance type, such as
// "Standard_ND96isr_H100_v5"; ok is false when the catalogue has no profile
// for it.
func ForSKU(sku string) (f Facts, ok bool) {
	p, ok := nccl.ProfileForSKU(sku)
	if !ok {
		return Facts{}, false
	}
	return Facts{Profile: p.Name, TopologyFile: p.TopologyFile}, true
}

// Topology returns the NCCL topology XML with that name.
func Topology(name string) ([]byte, error) { return nccl.Topology(name) }
