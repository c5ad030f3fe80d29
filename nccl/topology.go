package nccl

import (
	"embed"
	"fmt"
)

// The NCCL topology files of Azure's HPC images, byte for byte: ND A100 v4
// (4 NUMA nodes, 2 GPU+HCA pairs each) and ND H100 v5 (2 NUMA nodes, 4
// pairs each), HCAs being the IB virtual functions 0101:00:00.0 to
// 0108:00:00.0 (class 0x020700). Source: Azure/azhpc-images (MIT)
// topology/ndv4-topo.xml and topology/ndv5-topo.xml, which
// customizations/ndv4.sh and ndv5.sh install as /opt/microsoft/ndv{4,5}/topo.xml
// and name in NCCL_TOPO_FILE. NCCL needs them because the VM's PCI tree
// hides the real GPU-NIC affinity.
//
//go:embed topology/*.xml
var topologies embed.FS

// Topology returns the embedded topology file with that name (a Profile's
// TopologyFile), for the node agent to write under its state dir.
func Topology(name string) ([]byte, error) {
	b, err := topologies.ReadFile("topology/" + name)
	if err != nil {
		return nil, fmt.Errorf("no embedded NCCL topology %q: %w", name, err)
	}
	return b, nil
}
