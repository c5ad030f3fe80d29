package inventory

import "strings"

// IsPCIRootComplex says whether a directory under /sys/devices is a PCI
// root complex (host bridge): pci<domain>:<bus>, as drivers/pci/probe.c
// pci_register_host_bridge names it ("pci%04x:%02x"). The
// resource.kubernetes.io/pcieRoot DRA attribute is this name, and two PCI
// functions below the same one share a root.
func IsPCIRootComplex(dir string) bool {
	rest, ok := strings.CutPrefix(dir, "pci")
	dom, bus, ok2 := strings.Cut(rest, ":")
	return ok && ok2 && len(dom) >= 4 && len(bus) == 2 && isLowerHex(dom) && isLowerHex(bus)
}

func isLowerHex(s string) bool {
	return strings.Trim(s, "0123456789abcdef") == ""
}
