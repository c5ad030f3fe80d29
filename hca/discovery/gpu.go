package discovery

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ibkube/ibkube/hca/inventory"
)

// gpuVendor says whether a PCI vendor ID is a GPU vendor discovery pairs
// HCAs with (pci.ids: 10de NVIDIA, 1002 AMD/ATI).
func gpuVendor(id string) bool { return id == "10de" || id == "1002" }

// gpuClass says whether a PCI class (sysfs "class", "0x030200") is a GPU's:
// class 03 display controller, subclass 02 3D controller as data-centre
// GPUs report, or 00 VGA controller as some do (pci.ids, "C 03").
func gpuClass(class string) bool {
	return strings.HasPrefix(class, "0x0302") || strings.HasPrefix(class, "0x0300")
}

// scanGPUs reads the node's GPUs from /sys/bus/pci/devices: each function
// of a GPU class and vendor, with its NUMA node and its place in the PCI
// tree. A function that cannot be read is no partner and no error: GPUs
// only add to what discovery reports.
func (s *Scanner) scanGPUs() ([]inventory.GPU, []pciPlace) {
	entries, err := os.ReadDir(s.sys("bus", "pci", "devices"))
	if err != nil {
		return nil, nil
	}
	var gpus []inventory.GPU
	for _, e := range entries {
		if g, ok := s.readGPU(e.Name()); ok {
			gpus = append(gpus, g)
		}
	}
	sort.Slice(gpus, func(i, j int) bool { return gpus[i].PCIAddress < gpus[j].PCIAddress })
	places := make([]pciPlace, len(gpus))
	for i := range gpus {
		places[i] = place(s.opts.SysfsRoot, gpus[i].PCIAddress, gpus[i].NUMANode)
		gpus[i].PCIeRoot = places[i].root()
	}
	return gpus, places
}

// readGPU reads one PCI function; ok is false unless it is a GPU.
func (s *Scanner) readGPU(bdf string) (inventory.GPU, bool) {
	dir := s.sys("bus", "pci", "devices", bdf)
	class, err := readAttr(filepath.Join(dir, "class"))
	if err != nil || !gpuClass(class) {
		return inventory.GPU{}, false
	}
	v, err := readAttr(filepath.Join(dir, "vendor"))
	if err != nil {
		return inventory.GPU{}, false
	}
	vendor, err := ParseHexID(v)
	if err != nil || !gpuVendor(vendor) {
		return inventory.GPU{}, false
	}
	g := inventory.GPU{PCIAddress: bdf, VendorID: vendor, NUMANode: inventory.UnknownNUMANode}
	if d, err := readAttr(filepath.Join(dir, "device")); err == nil {
		g.DeviceID, _ = ParseHexID(d)
	}
	if numa, err := readNUMANode(dir); err == nil {
		g.NUMANode = numa
	}
	return g, true
}

// readNUMANode reads the numa_node of the PCI function whose sysfs
// directory is dir.
func readNUMANode(dir string) (int, error) {
	n, err := readAttr(filepath.Join(dir, "numa_node"))
	if err != nil {
		return 0, err
	}
	return ParseNUMANode(n)
}

// NUMANode is the NUMA node of the PCI function bdf under sysfsRoot, as
// discovery reads it for GPU.NUMANode: for a function the inventory does
// not hold (another driver's device). The caller checks that bdf is a PCI
// address before it becomes part of a path.
func NUMANode(sysfsRoot, bdf string) (int, error) {
	n, err := readNUMANode(filepath.Join(sysfsRoot, "bus", "pci", "devices", bdf))
	if err != nil {
		return 0, fmt.Errorf("NUMA node of %s: %w", bdf, err)
	}
	return n, nil
}

// place finds where the PCI function bdf sits: the chain of its
// directories under /sys/devices from its root complex down, which the
// /sys/bus/pci/devices link resolves to. A function whose link cannot be
// resolved keeps only its NUMA node.
func place(sysfsRoot, bdf string, numa int) pciPlace {
	p := pciPlace{addr: bdf, numa: numa}
	devices, err1 := filepath.EvalSymlinks(filepath.Join(sysfsRoot, "devices"))
	target, err2 := filepath.EvalSymlinks(filepath.Join(sysfsRoot, "bus", "pci", "devices", bdf))
	if err1 != nil || err2 != nil {
		return p
	}
	rel, err := filepath.Rel(devices, target)
	if err != nil || strings.HasPrefix(rel, "..") {
		return p
	}
	p.chain = rootChain(strings.Split(filepath.ToSlash(rel), "/"))
	return p
}

// PCIeRoot is the PCIe root complex above the PCI function bdf under
// sysfsRoot, as discovery reads it for HCA.PCIeRoot and GPU.PCIeRoot: for
// a function the inventory does not hold (another driver's device).
func PCIeRoot(sysfsRoot, bdf string) (string, error) {
	root := place(sysfsRoot, bdf, inventory.UnknownNUMANode).root()
	if root == "" {
		return "", fmt.Errorf("PCIe root of %s: %s resolves to no pci<domain>:<bus> directory under %s",
			bdf, filepath.Join(sysfsRoot, "bus", "pci", "devices", bdf), filepath.Join(sysfsRoot, "devices"))
	}
	return root, nil
}

// placeHCAs fills each HCA's PCIeRoot, node.GPUs and each HCA's
// GPUPartner: one reading of the PCI tree for both.
func (s *Scanner) placeHCAs(node *inventory.Node) {
	gpus, places := s.scanGPUs()
	node.GPUs = gpus
	for i := range node.HCAs {
		h := &node.HCAs[i]
		if h.PCIAddress == "" {
			continue
		}
		p := place(s.opts.SysfsRoot, h.PCIAddress, h.NUMANode)
		h.PCIeRoot = p.root()
		if len(gpus) > 0 {
			h.GPUPartner = partner(p, places)
		}
	}
}
