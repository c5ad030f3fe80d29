package nccl

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"strconv"
	"strings"
)

// NCCL needs a topology file on Azure's ND VMs because the VM's virtual PCI
// tree hides which GPU shares a PCIe switch (and NUMA node) with which IB
// VF. Azure's HPC images ship one per size (Azure/azhpc-images
// customizations/ndv4.sh and ndv5.sh set NCCL_TOPO_FILE to
// /opt/microsoft/ndv{4,5}/topo.xml). ibkube does not ship those files: it
// describes the same facts below and renders NCCL's topology XML itself.

// PCI class codes (PCI SIG class/subclass/prog-if; Linux include/linux/pci_ids.h
// PCI_CLASS_BRIDGE_PCI, PCI_CLASS_NETWORK_INFINIBAND, PCI_CLASS_DISPLAY_3D).
// NCCL's topology reader maps 0x0604 to a PCI switch, 0x02 to a NIC and 0x03
// to a GPU (NVIDIA/nccl src/graph/topo.cc kvDictPciClass).
const (
	classPCIBridge  = "0x060400"
	classInfiniBand = "0x020700"
	class3D         = "0x030200"
)

// machine is what NCCL must be told about one VM size: its NUMA nodes, and
// behind each the PCIe switches that pair GPUs with IB HCAs.
type machine struct {
	// name goes in the system element's name attribute, which NCCL logs
	// ("Loading topology <name>", src/graph/xml.cc) so a user can tell
	// which file NCCL read; no spaces, as NCCL's attribute reader is simple.
	name string
	cpu  cpuModel
	// cpus is the number of logical CPUs; it sets the affinity masks' width.
	cpus int
	// link is every device's PCIe link, as the kernel prints
	// current_link_speed (NCCL accepts both the pre-5.7 "16 GT/s" form and
	// the later "32.0 GT/s PCIe" one: src/graph/topo.cc kvDictPciGen).
	link pciLink
	// zeroSwitchIDs writes vendor/device/subsystem IDs 0x0000 on the
	// switches, so NCCL never tries to read IDs for them from sysfs (the
	// switches are not real devices on the VM).
	zeroSwitchIDs bool
	numa          []numaNode
}

type cpuModel struct {
	arch, vendor  string
	family, model int
}

type pciLink struct {
	speed string
	width int
}

type numaNode struct {
	id int
	// firstCPU..lastCPU (inclusive) are the node's logical CPUs.
	firstCPU, lastCPU int
	// switches lists, per PCIe switch, the GPU/HCA pairs behind it.
	switches [][]gpuHCA
}

// gpuHCA is a GPU and the IB HCA NCCL should use with it, as PCI addresses.
type gpuHCA struct{ gpu, hca string }

// Facts common to both ND sizes: eight IB VFs at PCI 0101:00:00.0 …
// 0108:00:00.0, class 0x020700, 96 vCPUs (azhpc-images topology/ndv4-topo.xml
// and ndv5-topo.xml list them; learn.microsoft.com nda100-v4-series and
// nd-h100-v5-series give the 96 vCPUs and 8 GPUs / 8 IB links).
const ndVCPUs = 96

// ndv4Machine is Azure ND A100 v4 (Standard_ND96asr_v4): AMD EPYC Rome
// (family 23, model 49), PCIe Gen4 x16, four NUMA nodes of 24 vCPUs, each
// with one switch holding two GPU/HCA pairs. Source: azhpc-images
// topology/ndv4-topo.xml, whose cpu elements give numaid, affinity and the
// CPU model, and list under numaid 0 GPUs 0003, 0004 with HCAs 0103, 0104;
// numaid 1: 0001, 0002 / 0101, 0102; numaid 2: 000d, 000e / 0107, 0108;
// numaid 3: 000b, 000c / 0105, 0106. hca/fixture's ndv4 host puts
// the HCAs on the same nodes.
func ndv4Machine() machine {
	return machine{
		name: "ibkube-ndv4",
		cpu:  cpuModel{arch: "x86_64", vendor: "AuthenticAMD", family: 23, model: 49},
		cpus: ndVCPUs,
		link: pciLink{speed: "16 GT/s", width: 16},
		numa: []numaNode{
			{id: 0, firstCPU: 0, lastCPU: 23, switches: [][]gpuHCA{{
				{"0003:00:00.0", "0103:00:00.0"}, {"0004:00:00.0", "0104:00:00.0"},
			}}},
			{id: 1, firstCPU: 24, lastCPU: 47, switches: [][]gpuHCA{{
				{"0001:00:00.0", "0101:00:00.0"}, {"0002:00:00.0", "0102:00:00.0"},
			}}},
			{id: 2, firstCPU: 48, lastCPU: 71, switches: [][]gpuHCA{{
				{"000d:00:00.0", "0107:00:00.0"}, {"000e:00:00.0", "0108:00:00.0"},
			}}},
			{id: 3, firstCPU: 72, lastCPU: 95, switches: [][]gpuHCA{{
				{"000b:00:00.0", "0105:00:00.0"}, {"000c:00:00.0", "0106:00:00.0"},
			}}},
		},
	}
}

// ndv5Machine is Azure ND H100 v5 and ND H200 v5 (Standard_ND96isr_H100_v5,
// Standard_ND96isr_H200_v5: azhpc-images maps standard_nd96is*_h[1-2]00_v5
// to this one file, components/setup_sku_customizations.sh): Intel Sapphire
// Rapids (family 6, model 143), PCIe Gen5 x16, two NUMA nodes of 48 vCPUs,
// each GPU/HCA pair behind its own switch. Source: azhpc-images
// topology/ndv5-topo.xml as corrected in commit 992d7759 ("corrected CPU
// range/affinity mask on NDv5 topo file"): numaid 0 has affinity
// 00000000,0000ffff,ffffffff (vCPUs 0-47) with GPUs 0001, 0002, 0003, 0008
// paired with HCAs 0101 … 0104, numaid 1 has ffffffff,ffff0000,00000000
// (vCPUs 48-95) with GPUs 0009, 000a, 000b, 000c paired with 0105 … 0108;
// its switches carry zero vendor/device IDs. hca/fixture's ndv5
// host puts the HCAs on the same nodes.
func ndv5Machine() machine {
	return machine{
		name:          "ibkube-ndv5",
		cpu:           cpuModel{arch: "x86_64", vendor: "GenuineIntel", family: 6, model: 143},
		cpus:          ndVCPUs,
		link:          pciLink{speed: "32.0 GT/s PCIe", width: 16},
		zeroSwitchIDs: true,
		numa: []numaNode{
			{id: 0, firstCPU: 0, lastCPU: 47, switches: [][]gpuHCA{
				{{"0001:00:00.0", "0101:00:00.0"}},
				{{"0002:00:00.0", "0102:00:00.0"}},
				{{"0003:00:00.0", "0103:00:00.0"}},
				{{"0008:00:00.0", "0104:00:00.0"}},
			}},
			{id: 1, firstCPU: 48, lastCPU: 95, switches: [][]gpuHCA{
				{{"0009:00:00.0", "0105:00:00.0"}},
				{{"000a:00:00.0", "0106:00:00.0"}},
				{{"000b:00:00.0", "0107:00:00.0"}},
				{{"000c:00:00.0", "0108:00:00.0"}},
			}},
		},
	}
}

// The topology files Topology renders, as a Profile's TopologyFile names them.
const (
	topologyNDv4 = "ndv4-topo.xml"
	topologyNDv5 = "ndv5-topo.xml"
)

// topologies pairs each topology file with the machine it describes; the
// one list behind TopologyNames and machineFor.
var topologies = []struct {
	name    string
	machine func() machine
}{
	{topologyNDv4, ndv4Machine},
	{topologyNDv5, ndv5Machine},
}

// TopologyNames lists the topology files Topology renders.
func TopologyNames() []string {
	names := make([]string, len(topologies))
	for i, t := range topologies {
		names[i] = t.name
	}
	return names
}

// machineFor returns the description behind a Profile's TopologyFile name.
func machineFor(name string) (machine, bool) {
	for _, t := range topologies {
		if t.name == name {
			return t.machine(), true
		}
	}
	return machine{}, false
}

// Topology returns the NCCL topology XML with that name (a Profile's
// TopologyFile), rendered from ibkube's description of the machine, for the
// node agent to write under its state dir.
func Topology(name string) ([]byte, error) {
	m, ok := machineFor(name)
	if !ok {
		return nil, fmt.Errorf("no NCCL topology %q (known: %s)", name, strings.Join(TopologyNames(), ", "))
	}
	b, err := renderTopology(m)
	if err != nil {
		return nil, fmt.Errorf("NCCL topology %s: %w", name, err)
	}
	return b, nil
}

// renderTopology writes m in NCCL's topology XML format (the format NCCL
// reads from NCCL_TOPO_FILE and writes to NCCL_TOPO_DUMP_FILE: a system
// element holding cpu elements, which hold pci elements). The PCIe switches
// get made-up addresses ffff:ff:NN.0 in order: NCCL only needs them distinct
// and absent from the VM.
func renderTopology(m machine) ([]byte, error) {
	var b bytes.Buffer
	openTag(&b, 0, "system", false, "version", "1", "name", m.name)
	sw := 0
	for _, n := range m.numa {
		mask, err := affinityMask(m.cpus, n.firstCPU, n.lastCPU)
		if err != nil {
			return nil, fmt.Errorf("numa node %d: %w", n.id, err)
		}
		openTag(&b, 1, "cpu", false,
			"numaid", strconv.Itoa(n.id), "affinity", mask, "arch", m.cpu.arch, "vendor", m.cpu.vendor,
			"familyid", strconv.Itoa(m.cpu.family), "modelid", strconv.Itoa(m.cpu.model))
		for _, pairs := range n.switches {
			sw++
			if sw > 0xff {
				return nil, fmt.Errorf("more than 255 PCIe switches")
			}
			attrs := append([]string{"busid", fmt.Sprintf("ffff:ff:%02x.0", sw), "class", classPCIBridge}, linkAttrs(m.link)...)
			if m.zeroSwitchIDs {
				attrs = append(attrs, "vendor", "0x0000", "device", "0x0000", "subsystem_vendor", "0x0000", "subsystem_device", "0x0000")
			}
			openTag(&b, 2, "pci", false, attrs...)
			for _, p := range pairs {
				for _, d := range []struct{ busID, class string }{{p.gpu, class3D}, {p.hca, classInfiniBand}} {
					if !validBusID(d.busID) {
						return nil, fmt.Errorf("numa node %d: bad PCI address %q, want dddd:bb:dd.f", n.id, d.busID)
					}
					openTag(&b, 3, "pci", true, append([]string{"busid", d.busID, "class", d.class}, linkAttrs(m.link)...)...)
				}
			}
			b.WriteString("    </pci>\n")
		}
		b.WriteString("  </cpu>\n")
	}
	b.WriteString("</system>\n")
	return b.Bytes(), nil
}

func linkAttrs(l pciLink) []string {
	return []string{"link_speed", l.speed, "link_width", strconv.Itoa(l.width)}
}

// openTag writes <name k="v" ...> (or .../> when leaf) indented by depth.
func openTag(b *bytes.Buffer, depth int, name string, leaf bool, kv ...string) {
	b.WriteString(strings.Repeat("  ", depth))
	b.WriteString("<" + name)
	for i := 0; i+1 < len(kv); i += 2 {
		b.WriteString(" " + kv[i] + `="`)
		_ = xml.EscapeText(b, []byte(kv[i+1])) // a bytes.Buffer never fails
		b.WriteString(`"`)
	}
	if leaf {
		b.WriteString("/>\n")
	} else {
		b.WriteString(">\n")
	}
}

// affinityMask formats CPUs first..last of a machine with cpus logical CPUs
// as the kernel prints a cpumask (local_cpus, and NCCL's affinity
// attribute): 32-bit hex words, most significant first, comma separated.
func affinityMask(cpus, first, last int) (string, error) {
	if cpus <= 0 || first < 0 || last < first || last >= cpus {
		return "", fmt.Errorf("CPUs %d-%d outside a %d-CPU machine", first, last, cpus)
	}
	words := make([]string, 0, (cpus+31)/32)
	for w := (cpus+31)/32 - 1; w >= 0; w-- {
		var v uint32
		for bit := 0; bit < 32; bit++ {
			if c := w*32 + bit; c >= first && c <= last {
				v |= 1 << bit
			}
		}
		words = append(words, fmt.Sprintf("%08x", v))
	}
	return strings.Join(words, ","), nil
}

// validBusID reports whether s is a PCI address dddd:bb:dd.f in lower-case
// hex, the form NCCL compares against sysfs.
func validBusID(s string) bool {
	if len(s) != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.' {
		return false
	}
	for i, c := range s {
		if i == 4 || i == 7 || i == 10 {
			continue
		}
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
