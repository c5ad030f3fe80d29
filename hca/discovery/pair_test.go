package discovery

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

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
