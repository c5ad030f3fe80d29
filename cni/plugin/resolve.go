package plugin

import (
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/hca/selector"
)

// Parent policies: how the plugin picks the node interface to delegate to.
const (
	// PolicyAuto is the default: the allocated HCA when the runtime names
	// one (Multus deviceID, or the hca/hcaIndex CNI args), else first-active.
	PolicyAuto = "auto"
	// PolicyAllocated requires the HCA the device plugin allocated to the
	// pod, as Multus passes it in "deviceID" when the NAD carries the
	// k8s.v1.cni.cncf.io/resourceName annotation (or the "hca" CNI arg).
	PolicyAllocated = "allocated"
	// PolicyFirstActive takes the first candidate port that is ACTIVE.
	PolicyFirstActive = "first-active"
	// PolicyIndex takes the candidate at parent.index (or the hcaIndex CNI
	// arg), counting every candidate whatever its state, so index i names
	// the same HCA on every node of a kind and per-HCA networks line up.
	PolicyIndex = "index"
)

var policies = []string{PolicyAuto, PolicyAllocated, PolicyFirstActive, PolicyIndex}

// ParentConf is the "parent" object of the plugin's network config.
type ParentConf struct {
	// Policy is one of auto (default), allocated, first-active, index.
	Policy string `json:"policy,omitempty"`
	// Index is the candidate index for the index policy (0-based).
	Index *int `json:"index,omitempty"`
	// LinkLayer restricts candidates to InfiniBand or Ethernet (RoCE) ports.
	// Default: InfiniBand for the ipoib delegate, Ethernet for macvlan and
	// ipvlan, any for host-device.
	LinkLayer string `json:"linkLayer,omitempty"`
	// Selector restricts candidate HCAs, with the node agent's pool selector
	// syntax (vendors, deviceIDs, names, pciAddresses, linkLayers, exclude).
	Selector *selector.Selector `json:"selector,omitempty"`
	// Netdevs restricts candidates to ports whose netdev matches one of
	// these globs (path.Match syntax), e.g. ["rdma*"] for OCI's GPU fabric
	// without its front-end eth ports.
	Netdevs []string `json:"netdevs,omitempty"`
	// AllowInactive lets allocated and index take a port that is not
	// ACTIVE (by default the ADD fails with "try again later").
	AllowInactive bool `json:"allowInactive,omitempty"`
}

// Request is what the runtime says about this one attachment.
type Request struct {
	// DeviceID is the device the pod was allocated (Multus "deviceID"): an
	// HCA name (ibkube's exclusive pools), a PCI address (SR-IOV) or a netdev.
	DeviceID string
	// Index overrides ParentConf.Index (the "hcaIndex" CNI arg).
	Index *int
}

// Parent is the resolved node interface.
type Parent struct {
	HCA        string `json:"hca"`
	PCIAddress string `json:"pciAddress,omitempty"`
	Port       int    `json:"port"`
	LinkLayer  string `json:"linkLayer"`
	Netdev     string `json:"netdev"`
	State      string `json:"state"`
	// Index is the candidate's position in the HCA-aligned order.
	Index int `json:"index"`
}

// ResolveError says why no parent could be chosen; Transient errors (a
// port not ACTIVE yet, no usable port yet) ask the runtime to retry.
type ResolveError struct {
	Msg       string
	Transient bool
}

func (e *ResolveError) Error() string { return e.Msg }

// Candidates lists the ports a network may use, in the HCA-aligned order:
// HCAs by PCI address (then name), ports by number. Only ports with a
// netdev and of the configured link layer, on HCAs the selector accepts,
// count. The order does not depend on port state, so index i is stable.
func Candidates(node inventory.Node, p ParentConf) []Parent {
	hcas := append([]inventory.HCA(nil), node.HCAs...)
	sort.SliceStable(hcas, func(i, j int) bool {
		a, b := hcas[i], hcas[j]
		if a.PCIAddress != b.PCIAddress {
			if a.PCIAddress == "" || b.PCIAddress == "" {
				return b.PCIAddress == ""
			}
			return a.PCIAddress < b.PCIAddress
		}
		return inventory.NaturalLess(a.Name, b.Name)
	})
	var out []Parent
	for _, h := range hcas {
		if p.Selector != nil {
			if ok, _ := p.Selector.Select("parent.selector", h); !ok {
				continue
			}
		}
		ports := append([]inventory.Port(nil), h.Ports...)
		sort.SliceStable(ports, func(i, j int) bool { return ports[i].Number < ports[j].Number })
		for _, port := range ports {
			if port.Netdev == "" || (p.LinkLayer != "" && port.LinkLayer != p.LinkLayer) || !matchAny(p.Netdevs, port.Netdev) {
				continue
			}
			out = append(out, Parent{
				HCA: h.Name, PCIAddress: h.PCIAddress, Port: port.Number, LinkLayer: port.LinkLayer,
				Netdev: port.Netdev, State: port.State, Index: len(out),
			})
		}
	}
	return out
}

// Resolve picks the parent interface for one attachment. It is pure: the
// inventory comes from the caller.
func Resolve(node inventory.Node, p ParentConf, req Request) (Parent, error) {
	cands := Candidates(node, p)
	if len(cands) == 0 {
		return Parent{}, &ResolveError{Transient: true, Msg: fmt.Sprintf(
			"no candidate parent interface on this node: %s", describeNode(node, p))}
	}
	switch effectivePolicy(p.Policy, req) {
	case PolicyAllocated:
		return resolveAllocated(cands, p, req.DeviceID)
	case PolicyIndex:
		return resolveIndex(cands, p, req)
	case PolicyFirstActive:
		for _, c := range cands {
			if c.State == inventory.PortStateActive {
				return c, nil
			}
		}
		return Parent{}, &ResolveError{Transient: true, Msg: fmt.Sprintf(
			"no ACTIVE port among the candidates: %s", describe(cands))}
	default:
		return Parent{}, &ResolveError{Msg: fmt.Sprintf("unknown parent.policy %q; accepted: %s",
			p.Policy, strings.Join(policies, ", "))}
	}
}

// effectivePolicy is policy, or for auto (and unset) what the request
// carries: the allocated device, else an index, else the first active port.
func effectivePolicy(policy string, req Request) string {
	if policy != "" && policy != PolicyAuto {
		return policy
	}
	switch {
	case req.DeviceID != "":
		return PolicyAllocated
	case req.Index != nil:
		return PolicyIndex
	default:
		return PolicyFirstActive
	}
}

// resolveAllocated picks the candidate that is the allocated device (an
// HCA name, a PCI address or a netdev).
func resolveAllocated(cands []Parent, p ParentConf, deviceID string) (Parent, error) {
	if deviceID == "" {
		return Parent{}, &ResolveError{Msg: `parent.policy "allocated" needs the allocated device: ` +
			`give the NetworkAttachmentDefinition the k8s.v1.cni.cncf.io/resourceName annotation ` +
			`(e.g. rdma/ib) so Multus passes "deviceID", or set the "hca" CNI arg`}
	}
	for _, c := range cands {
		if c.HCA == deviceID || c.PCIAddress == deviceID || c.Netdev == deviceID {
			return checkActive(c, p, fmt.Sprintf("allocated device %q", deviceID))
		}
	}
	return Parent{}, &ResolveError{Msg: fmt.Sprintf(
		"allocated device %q has no candidate port on this node; candidates: %s",
		deviceID, describe(cands))}
}

// resolveIndex picks the candidate at the request's index, else at
// parent.index.
func resolveIndex(cands []Parent, p ParentConf, req Request) (Parent, error) {
	idx := p.Index
	if req.Index != nil {
		idx = req.Index
	}
	if idx == nil {
		return Parent{}, &ResolveError{Msg: `parent.policy "index" needs parent.index or the "hcaIndex" CNI arg`}
	}
	if *idx < 0 || *idx >= len(cands) {
		return Parent{}, &ResolveError{Msg: fmt.Sprintf(
			"parent index %d is out of range: this node has %d candidate(s): %s", *idx, len(cands), describe(cands))}
	}
	return checkActive(cands[*idx], p, fmt.Sprintf("index %d", *idx))
}

func matchAny(globs []string, s string) bool {
	if len(globs) == 0 {
		return true
	}
	for _, g := range globs {
		if ok, _ := path.Match(g, s); ok {
			return true
		}
	}
	return false
}

func checkActive(c Parent, p ParentConf, what string) (Parent, error) {
	if c.State != inventory.PortStateActive && !p.AllowInactive {
		return Parent{}, &ResolveError{Transient: true, Msg: fmt.Sprintf(
			"%s resolves to %s (%s port %d), whose port is %s, not ACTIVE; set parent.allowInactive to attach anyway",
			what, c.Netdev, c.HCA, c.Port, orUnknown(c.State))}
	}
	return c, nil
}

func describe(cands []Parent) string {
	parts := make([]string, len(cands))
	for i, c := range cands {
		parts[i] = fmt.Sprintf("[%d] %s (%s port %d, %s, %s)", i, c.Netdev, c.HCA, c.Port, c.LinkLayer, orUnknown(c.State))
	}
	return strings.Join(parts, ", ")
}

func describeNode(node inventory.Node, p ParentConf) string {
	if len(node.HCAs) == 0 {
		return "no RDMA device found (drivers not loaded, or the sysfs root is wrong)"
	}
	var parts []string
	for _, h := range node.HCAs {
		for _, port := range h.Ports {
			nd := port.Netdev
			if nd == "" {
				nd = "no netdev"
			}
			parts = append(parts, fmt.Sprintf("%s port %d %s %s", h.Name, port.Number, port.LinkLayer, nd))
		}
	}
	want := "any link layer"
	if p.LinkLayer != "" {
		want = "link layer " + p.LinkLayer
	}
	if p.Selector != nil {
		want += ", the parent.selector"
	}
	if len(p.Netdevs) > 0 {
		want += ", a netdev matching " + strings.Join(p.Netdevs, " or ")
	}
	return fmt.Sprintf("want a port with a netdev, %s; found %s", want, strings.Join(parts, ", "))
}

func orUnknown(s string) string {
	if s == "" {
		return "state unknown"
	}
	return s
}
