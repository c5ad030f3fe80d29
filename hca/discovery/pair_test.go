package discovery

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/hca/inventory"
)

// at is a place from a path under /sys/devices.
func at(path string, numa int) pciPlace {
	dirs := strings.Split(path, "/")
	return pciPlace{addr: dirs[len(dirs)-1], chain: rootChain(dirs), numa: numa}
}

func TestPartner(t *testing.T) {
	t.Parallel()
	const (
		// Upstream ports of switches: root complex, root port, upstream port.
		sw0 = "pci0000:00/0000:00:01.0/0000:0a:00.0/"
		sw1 = "pci0000:00/0000:00:02.0/0000:1a:00.0/"
		// A switch below sw0's downstream port 2: nearer than sw0 alone.
		nested = sw0 + "0000:0b:02.0/0000:20:00.0/"
		vmbus  = "LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/"
	)
	hca := at(sw0+"0000:0b:00.0/0000:0c:00.0", 0)
	tests := []struct {
		name string
		hca  pciPlace
		gpus []pciPlace
		want *inventory.GPUPartner
	}{
		{"no GPUs", hca, nil, nil},
		{"same switch beats same root", hca, []pciPlace{at(sw1+"0000:1b:00.0/0000:1c:00.0", 0), at(sw0+"0000:0b:03.0/0000:0f:00.0", 0)},
			&inventory.GPUPartner{GPUs: []string{"0000:0f:00.0"}, Affinity: inventory.AffinitySwitch}},
		{"deepest common switch", at(nested+"0000:21:00.0/0000:22:00.0", 0), []pciPlace{at(sw0+"0000:0b:03.0/0000:0f:00.0", 0), at(nested+"0000:21:01.0/0000:23:00.0", 0)},
			&inventory.GPUPartner{GPUs: []string{"0000:23:00.0"}, Affinity: inventory.AffinitySwitch}},
		{"two GPUs behind the same switch", hca, []pciPlace{at(sw0+"0000:0b:03.0/0000:0f:00.0", 0), at(sw0+"0000:0b:04.0/0000:10:00.0", 0)},
			&inventory.GPUPartner{GPUs: []string{"0000:0f:00.0", "0000:10:00.0"}, Affinity: inventory.AffinitySwitch}},
		{"same root, other root port", hca, []pciPlace{at(sw1+"0000:1b:00.0/0000:1c:00.0", 1), at("pci0000:80/0000:80:01.0/0000:81:00.0", 0)},
			&inventory.GPUPartner{GPUs: []string{"0000:1c:00.0"}, Affinity: inventory.AffinityRoot}},
		{"same NUMA node only", hca, []pciPlace{at("pci0000:80/0000:80:01.0/0000:81:00.0", 1), at("pci0000:40/0000:40:01.0/0000:41:00.0", 0)},
			&inventory.GPUPartner{GPUs: []string{"0000:41:00.0"}, Affinity: inventory.AffinityNUMA}},
		{"Hyper-V: a root per device, the VMBus above it is no root", at(vmbus+"guid-a/pci0101:00/0101:00:00.0", 0),
			[]pciPlace{at(vmbus+"guid-b/pci0001:00/0001:00:00.0", 0), at(vmbus+"guid-c/pci0009:00/0009:00:00.0", 1), at(vmbus+"guid-d/pci0002:00/0002:00:00.0", 0)},
			&inventory.GPUPartner{GPUs: []string{"0001:00:00.0", "0002:00:00.0"}, Affinity: inventory.AffinityNUMA}},
		{"NUMA -1 on the HCA pairs with nothing", at("pci0000:40/0000:40:01.0/0000:41:00.0", -1), []pciPlace{at("pci0000:80/0000:80:01.0/0000:81:00.0", -1)}, nil},
		{"NUMA -1 on the GPU pairs with nothing", hca, []pciPlace{at("pci0000:80/0000:80:01.0/0000:81:00.0", -1)}, nil},
		{"an unresolved GPU still pairs by NUMA", hca, []pciPlace{{addr: "0000:99:00.0", numa: 0}},
			&inventory.GPUPartner{GPUs: []string{"0000:99:00.0"}, Affinity: inventory.AffinityNUMA}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.want, partner(tt.hca, tt.gpus)); diff != "" {
				t.Errorf("partner (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPCIeRootFacts: every fixture HCA's PCIeRoot is the host bridge its
// tree records (hca/fixture/testdata/*.tree, the /sys/bus/pci/devices
// link of each function): on Azure ND, HB and the broken host, one
// Hyper-V virtual PCI bus per VF, its host bridge pci<domain>:00 below
// the VMBus device (the accelerated-networking NIC included); on OCI
// BM.GPU.H100.8, the root complex above each GPU-fabric NIC's PCIe switch,
// shared by a NIC's two ports, and the front-end ports' own root ports.
func TestPCIeRootFacts(t *testing.T) {
	t.Parallel()
	vmbus := func(n int) map[string]string {
		out := map[string]string{}
		for i := range n {
			out[fmt.Sprintf("mlx5_%d", i)] = fmt.Sprintf("pci%04x:00", 0x101+i)
		}
		return out
	}
	ndv5 := vmbus(8)
	ndv5["mlx5_8"] = "pci5a2c:00"
	want := map[string]map[string]string{
		fixture.NDv5:   ndv5,
		fixture.NDv4:   vmbus(8),
		fixture.HB:     vmbus(1),
		fixture.Broken: vmbus(4),
		fixture.OCIH100: {
			"mlx5_0": "pci0000:00", "mlx5_1": "pci0000:00", "mlx5_2": "pci0000:10",
			"mlx5_3": "pci0000:20", "mlx5_4": "pci0000:20", "mlx5_5": "pci0000:3e", "mlx5_6": "pci0000:3e",
			"mlx5_7": "pci0000:50", "mlx5_8": "pci0000:50", "mlx5_9": "pci0000:80", "mlx5_10": "pci0000:80",
			"mlx5_11": "pci0000:90", "mlx5_12": "pci0000:a0", "mlx5_13": "pci0000:a0",
			"mlx5_14": "pci0000:b0", "mlx5_15": "pci0000:b0", "mlx5_16": "pci0000:d0", "mlx5_17": "pci0000:d0",
		},
	}
	if diff := cmp.Diff(fixture.Names(), slices.Sorted(maps.Keys(want))); diff != "" {
		t.Fatalf("fixtures without recorded roots (-fixtures +recorded):\n%s", diff)
	}
	for name, roots := range want {
		dir := fixture.BuildTemp(t, name)
		node, err := NewScanner(Options{SysfsRoot: fixture.SysfsRoot(dir), DevRoot: fixture.DevRoot(dir)}).Scan(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, h := range node.HCAs {
			got[h.Name] = h.PCIeRoot
		}
		if diff := cmp.Diff(roots, got); diff != "" {
			t.Errorf("%s: PCIeRoot by HCA (-recorded +discovered):\n%s", name, diff)
		}
	}
}
