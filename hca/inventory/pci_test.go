package inventory_test

import (
	"testing"

	"github.com/ibkube/ibkube/hca/inventory"
)

func TestIsPCIRootComplex(t *testing.T) {
	t.Parallel()
	for dir, want := range map[string]bool{
		"pci0000:00": true, "pci0101:00": true, "pci10000:3e": true,
		"0000:00:01.0": false, "pci0000": false, "pci0000:0": false, "pciXXXX:00": false, "VMBUS:00": false,
		"PCI0000:00": false, "pci0000:3E": false, "pci0000:00:01": false,
	} {
		if got := inventory.IsPCIRootComplex(dir); got != want {
			t.Errorf("IsPCIRootComplex(%q) = %v, want %v", dir, got, want)
		}
	}
}
