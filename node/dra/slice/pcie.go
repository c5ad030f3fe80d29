package slice

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ibkube/ibkube/hca/inventory"
)

// PCIeRoot returns the PCIe root complex above the PCI device at address,
// the resource.kubernetes.io/pcieRoot value ("pci0101:00"), from the
// /sys/bus/pci/devices/<address> link under sysfsRoot.
//
// k8s.io/dynamic-resource-allocation/deviceattribute wants that link to
// point at devices/pci<domain>:<bus>/..., which holds on bare metal but not
// in a Hyper-V guest, where the host bridge sits under the VMBus device
// (devices/LNXSYSTM:00/.../VMBUS:00/<instance>/pci0101:00/0101:00:00.0): an
// Azure VM's HCAs would publish no pcieRoot. The host bridge's directory is
// the same on both, so this takes the first one on the path.
func PCIeRoot(sysfsRoot, address string) (string, error) {
	link := filepath.Join(sysfsRoot, "bus", "pci", "devices", address)
	target, err := os.Readlink(link)
	if err != nil {
		return "", fmt.Errorf("PCIe root of %s: %w", address, err)
	}
	for _, elem := range strings.Split(filepath.ToSlash(target), "/") {
		if inventory.IsPCIRootComplex(elem) {
			return elem, nil
		}
	}
	return "", fmt.Errorf("PCIe root of %s: no pci<domain>:<bus> directory in %s -> %s", address, link, target)
}
