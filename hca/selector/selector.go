// Package selector decides which HCAs feed a resource pool: vendor and
// device IDs, names and PCI addresses (globs), link layer, and exclusions.
// It is pure: it reads inventory values and does no I/O.
package selector

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/ibkube/ibkube/hca/inventory"
)

// Match is a conjunction of criteria: an HCA matches when every non-empty
// list has at least one entry that matches it (AND across fields, OR within
// a field). An empty Match matches every HCA.
type Match struct {
	// Vendors are PCI vendor IDs, four lower-case hex digits without 0x ("15b3").
	Vendors []string `json:"vendors,omitempty"`
	// DeviceIDs are PCI device IDs, four lower-case hex digits ("101c").
	DeviceIDs []string `json:"deviceIDs,omitempty"`
	// Names are RDMA device names or globs (path.Match syntax): "mlx5_*".
	Names []string `json:"names,omitempty"`
	// PCIAddresses are PCI addresses or globs: "0101:00:00.0", "01*:00:00.0".
	PCIAddresses []string `json:"pciAddresses,omitempty"`
	// LinkLayers are InfiniBand or Ethernet (RoCE); an HCA matches when any of
	// its ports runs one of them.
	LinkLayers []string `json:"linkLayers,omitempty"`
}

// Selector selects the HCAs its Match accepts, minus those any Exclude entry
// matches.
type Selector struct {
	Match   `json:",inline"`
	Exclude []Match `json:"exclude,omitempty"`
}

// LinkLayers are the accepted link layer values.
var linkLayers = []string{inventory.LinkLayerInfiniBand, inventory.LinkLayerEthernet}

var hexID = regexp.MustCompile(`^[0-9a-f]{4}$`)

// Validate checks the selector; field is its path in the config file
// ("pools[0].selector") so errors name the exact field.
func (s Selector) Validate(field string) error {
	if err := s.Match.validate(field); err != nil {
		return err
	}
	for i, m := range s.Exclude {
		if err := m.validate(fmt.Sprintf("%s.exclude[%d]", field, i)); err != nil {
			return err
		}
	}
	return nil
}

func (m Match) validate(field string) error {
	for i, v := range m.Vendors {
		if !hexID.MatchString(v) {
			return fmt.Errorf("%s.vendors[%d]: %q is not a PCI vendor ID; accepted: four lower-case hex digits without 0x, e.g. 15b3", field, i, v)
		}
	}
	for i, v := range m.DeviceIDs {
		if !hexID.MatchString(v) {
			return fmt.Errorf("%s.deviceIDs[%d]: %q is not a PCI device ID; accepted: four lower-case hex digits without 0x, e.g. 101c", field, i, v)
		}
	}
	for i, v := range m.Names {
		if err := validGlob(v); err != nil {
			return fmt.Errorf("%s.names[%d]: %q is not a valid name or glob (%v); accepted: a device name like mlx5_0 or a glob like mlx5_*", field, i, v, err)
		}
	}
	for i, v := range m.PCIAddresses {
		if err := validGlob(v); err != nil {
			return fmt.Errorf("%s.pciAddresses[%d]: %q is not a valid PCI address or glob (%v); accepted: an address like 0101:00:00.0 or a glob like 01*:00:00.0", field, i, v, err)
		}
	}
	for i, v := range m.LinkLayers {
		if !slices.Contains(linkLayers, v) {
			return fmt.Errorf("%s.linkLayers[%d]: %q is not a link layer; accepted: %s", field, i, v, strings.Join(linkLayers, ", "))
		}
	}
	return nil
}

func validGlob(p string) error {
	if p == "" {
		return fmt.Errorf("empty")
	}
	_, err := path.Match(p, "")
	return err
}

// Select reports whether the selector takes h and, when it does not, why,
// naming the selector field that refused it; field is the selector's path
// ("pools[1].selector").
func (s Selector) Select(field string, h inventory.HCA) (bool, string) {
	if ok, why := s.Match.matches(h); !ok {
		return false, fmt.Sprintf("%s.%s", field, why)
	}
	for i, m := range s.Exclude {
		if ok, _ := m.matches(h); ok {
			return false, fmt.Sprintf("%s.exclude[%d] matches (%s)", field, i, m)
		}
	}
	return true, ""
}

// matches reports whether h meets every criterion, and otherwise which one
// failed, e.g. `linkLayers [InfiniBand] does not match Ethernet`.
func (m Match) matches(h inventory.HCA) (bool, string) {
	if len(m.Vendors) > 0 && !slices.Contains(m.Vendors, h.VendorID) {
		return false, fmt.Sprintf("vendors %v does not match %q", m.Vendors, h.VendorID)
	}
	if len(m.DeviceIDs) > 0 && !slices.Contains(m.DeviceIDs, h.DeviceID) {
		return false, fmt.Sprintf("deviceIDs %v does not match %q", m.DeviceIDs, h.DeviceID)
	}
	if len(m.Names) > 0 && !anyGlob(m.Names, h.Name) {
		return false, fmt.Sprintf("names %v does not match %q", m.Names, h.Name)
	}
	if len(m.PCIAddresses) > 0 && !anyGlob(m.PCIAddresses, h.PCIAddress) {
		return false, fmt.Sprintf("pciAddresses %v does not match %q", m.PCIAddresses, h.PCIAddress)
	}
	if len(m.LinkLayers) > 0 {
		have := portLinkLayers(h)
		if !slices.ContainsFunc(have, func(l string) bool { return slices.Contains(m.LinkLayers, l) }) {
			return false, fmt.Sprintf("linkLayers %v does not match %s", m.LinkLayers, describe(have))
		}
	}
	return true, ""
}

// String renders the non-empty criteria, e.g. "names [mlx5_8]".
func (m Match) String() string {
	var parts []string
	add := func(name string, v []string) {
		if len(v) > 0 {
			parts = append(parts, fmt.Sprintf("%s %v", name, v))
		}
	}
	add("vendors", m.Vendors)
	add("deviceIDs", m.DeviceIDs)
	add("names", m.Names)
	add("pciAddresses", m.PCIAddresses)
	add("linkLayers", m.LinkLayers)
	if len(parts) == 0 {
		return "everything"
	}
	return strings.Join(parts, ", ")
}

func anyGlob(patterns []string, s string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, s); ok {
			return true
		}
	}
	return false
}

func portLinkLayers(h inventory.HCA) []string {
	var out []string
	for _, p := range h.Ports {
		if p.LinkLayer != "" && !slices.Contains(out, p.LinkLayer) {
			out = append(out, p.LinkLayer)
		}
	}
	return out
}

func describe(layers []string) string {
	if len(layers) == 0 {
		return "(no ports)"
	}
	return strings.Join(layers, ",")
}
