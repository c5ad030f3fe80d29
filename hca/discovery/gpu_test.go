package discovery_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/hca/inventory"
)

// partners renders each HCA's partner as "affinity gpu,gpu" ("-" for none).
func partners(node inventory.Node) map[string]string {
	out := map[string]string{}
	for _, h := range node.HCAs {
		out[h.Name] = "-"
		if p := h.GPUPartner; p != nil {
			out[h.Name] = string(p.Affinity) + " " + strings.Join(p.GPUs, ",")
		}
	}
	return out
}

// The pairs each fixture's topology gives, written from the sources its
// header names (not from the goldens, so a careless -update cannot bless a
// wrong pair): OCI BM.GPU.H100.8 pairs each GPU with the dual-port NIC on
// its switch; ND H100 v5 and ND A100 v4 give every device a root of its
// own, so each HCA pairs with every GPU of its NUMA node.
func TestGPUPartnersFacts(t *testing.T) {
	t.Parallel()
	const (
		ndv5NUMA0 = "numa 0001:00:00.0,0002:00:00.0,0003:00:00.0,0008:00:00.0"
		ndv5NUMA1 = "numa 0009:00:00.0,000a:00:00.0,000b:00:00.0,000c:00:00.0"
	)
	oci := map[string]string{
		// The front-end ports share only a NUMA node with GPUs.
		"mlx5_2":  "numa 0000:0f:00.0,0000:2d:00.0,0000:44:00.0,0000:5b:00.0",
		"mlx5_11": "numa 0000:89:00.0,0000:a8:00.0,0000:c0:00.0,0000:d8:00.0",
	}
	for gpu, hcas := range map[string][]int{"0f": {0, 1}, "2d": {3, 4}, "44": {5, 6}, "5b": {7, 8}, "89": {9, 10}, "a8": {12, 13}, "c0": {14, 15}, "d8": {16, 17}} {
		for _, n := range hcas {
			oci[fmt.Sprintf("mlx5_%d", n)] = "switch 0000:" + gpu + ":00.0"
		}
	}
	tests := map[string]map[string]string{
		fixture.NDv5: {
			"mlx5_0": ndv5NUMA0, "mlx5_1": ndv5NUMA0, "mlx5_2": ndv5NUMA0, "mlx5_3": ndv5NUMA0,
			"mlx5_4": ndv5NUMA1, "mlx5_5": ndv5NUMA1, "mlx5_6": ndv5NUMA1, "mlx5_7": ndv5NUMA1,
			"mlx5_8": ndv5NUMA0, // the accelerated-networking VF, NUMA node 0
		},
		fixture.NDv4: {
			"mlx5_0": "numa 0001:00:00.0,0002:00:00.0", "mlx5_1": "numa 0001:00:00.0,0002:00:00.0",
			"mlx5_2": "numa 0003:00:00.0,0004:00:00.0", "mlx5_3": "numa 0003:00:00.0,0004:00:00.0",
			"mlx5_4": "numa 000b:00:00.0,000c:00:00.0", "mlx5_5": "numa 000b:00:00.0,000c:00:00.0",
			"mlx5_6": "numa 000d:00:00.0,000e:00:00.0", "mlx5_7": "numa 000d:00:00.0,000e:00:00.0",
		},
		fixture.OCIH100: oci,
		fixture.HB:      {"mlx5_0": "-"},
		// numa_node -1 on mlx5_3 and on GPU 0004: neither pairs.
		fixture.Broken: {
			"mlx5_0": "numa 0001:00:00.0,0002:00:00.0", "mlx5_1": "numa 0001:00:00.0,0002:00:00.0",
			"mlx5_2": "numa 0003:00:00.0", "mlx5_3": "-",
		},
	}
	for name, want := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			node, err := newScanner(t, fixture.BuildTemp(t, name), nil).Scan(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, partners(node)); diff != "" {
				t.Errorf("GPU partners (-want +got):\n%s", diff)
			}
		})
	}
}

// A GPU is a function of an NVIDIA or AMD vendor ID with a display class
// (3D or VGA controller); another vendor's display function, or an NVIDIA
// function of another class (an NVSwitch bridge, audio), is none.
func TestScanGPUClassesAndVendors(t *testing.T) {
	t.Parallel()
	dir := fixture.BuildTemp(t, fixture.HB)
	sys := fixture.SysfsRoot(dir)
	add := func(bdf, class, vendor string) {
		p := filepath.Join(sys, "devices", "pci0000:00", "0000:00:01.0", bdf)
		for f, v := range map[string]string{"class": class, "vendor": vendor, "device": "0x74a1", "numa_node": "0"} {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(p, f), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink(p, filepath.Join(sys, "bus", "pci", "devices", bdf)); err != nil {
			t.Fatal(err)
		}
	}
	add("0000:02:00.0", "0x038000", "0x1002") // display controller, other subclass
	add("0000:03:00.0", "0x030000", "0x1002") // AMD VGA controller
	add("0000:04:00.0", "0x030200", "0x1002") // AMD 3D controller (Instinct)
	add("0000:05:00.0", "0x068000", "0x10de") // NVIDIA bridge
	add("0000:06:00.0", "0x030200", "0x8086") // another vendor's 3D controller
	add("0000:07:00.0", "0x030200", "0x10de") // NVIDIA 3D controller
	node, err := newScanner(t, dir, nil).Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, g := range node.GPUs {
		got = append(got, g.PCIAddress+" "+g.VendorID)
	}
	want := []string{"0000:03:00.0 1002", "0000:04:00.0 1002", "0000:07:00.0 10de"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GPUs (-want +got):\n%s", diff)
	}
}
