package fakegpu

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/nccl"
)

// The fake GPUs sit where an ND H100 v5's do: four on each NUMA node, at
// the PCI addresses azhpc-images' topology/ndv5-topo.xml gives them (the
// topology ibkube renders, nccl/testdata/ndv5-topo.xml.golden).
func TestGPUsOfNDv5(t *testing.T) {
	topo, err := nccl.Topology("ndv5-topo.xml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := GPUs(topo)
	if err != nil {
		t.Fatal(err)
	}
	want := []GPU{
		{0, "0001:00:00.0", 0, ""}, {1, "0002:00:00.0", 0, ""}, {2, "0003:00:00.0", 0, ""}, {3, "0008:00:00.0", 0, ""},
		{4, "0009:00:00.0", 1, ""}, {5, "000a:00:00.0", 1, ""}, {6, "000b:00:00.0", 1, ""}, {7, "000c:00:00.0", 1, ""},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("GPUs (-want +got):\n%s", d)
	}
}

func TestGPUsRefusesATopologyWithoutGPUs(t *testing.T) {
	for name, xml := range map[string]string{
		"no GPU":       `<system><cpu numaid="0"><pci busid="0101:00:00.0" class="0x020700"/></cpu></system>`,
		"no NUMA node": `<system><pci busid="0001:00:00.0" class="0x030200"/></system>`,
		"bad numaid":   `<system><cpu numaid="x"><pci busid="0001:00:00.0" class="0x030200"/></cpu></system>`,
	} {
		if _, err := GPUs([]byte(xml)); err == nil {
			t.Errorf("%s: GPUs accepted %s", name, xml)
		}
	}
}

func TestDevicesCarryTheStandardAttributes(t *testing.T) {
	devs := Devices([]GPU{{Index: 5, PCIBusID: "000a:00:00.0", NUMANode: 1}})
	if len(devs) != 1 || devs[0].Name != "gpu-5" {
		t.Fatalf("devices %+v, want one named gpu-5", devs)
	}
	a := devs[0].Attributes
	if n := a["resource.kubernetes.io/numaNode"].IntValue; n == nil || *n != 1 {
		t.Errorf("numaNode %v, want 1", n)
	}
	if s := a["resource.kubernetes.io/pciBusID"].StringValue; s == nil || *s != "000a:00:00.0" {
		t.Errorf("pciBusID %v, want 000a:00:00.0", s)
	}
}

func TestCDISpec(t *testing.T) {
	data, ids, err := CDISpec("uid-1", []GPU{{Index: 0, PCIBusID: "0001:00:00.0"}, {Index: 4, PCIBusID: "0009:00:00.0"}})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"cdiVersion": "0.6.0",
		"kind":       "e2e.ibkube.io/gpu",
		"devices": []any{
			map[string]any{"name": "uid-1-gpu-0", "containerEdits": map[string]any{"env": []any{"FAKE_GPU_0=0001:00:00.0"}}},
			map[string]any{"name": "uid-1-gpu-4", "containerEdits": map[string]any{"env": []any{"FAKE_GPU_4=0009:00:00.0"}}},
		},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("spec (-want +got):\n%s", d)
	}
	wantIDs := map[string]string{"gpu-0": "e2e.ibkube.io/gpu=uid-1-gpu-0", "gpu-4": "e2e.ibkube.io/gpu=uid-1-gpu-4"}
	if d := cmp.Diff(wantIDs, ids); d != "" {
		t.Errorf("CDI IDs (-want +got):\n%s", d)
	}
	if f := CDIFile("uid-1"); f != "e2e.ibkube.io-gpu_uid-1.json" {
		t.Errorf("CDI file %q", f)
	}
}

// ociGPUs are the oci-h100 fixture's GPUs as discovery reads them.
func ociGPUs(t *testing.T, withNUMA bool) []GPU {
	t.Helper()
	dir := fixture.BuildTemp(t, fixture.OCIH100)
	node, err := discovery.NewScanner(discovery.Options{SysfsRoot: fixture.SysfsRoot(dir), DevRoot: fixture.DevRoot(dir), PortPoll: -1}).Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return FromInventory(node.GPUs, withNUMA)
}

// TestOCIH100SharesRootsWithTheFixture: each bare-metal GPU has the bus ID
// of the fixture's GPU (hca/fixture/testdata/oci-h100.tree) and sits on one
// of the PCIe roots that carry two of the oci-h100 fixture's GPU-fabric ports
// (node/dra/testdata/oci-h100.slices.json, the slices the agent publishes
// for it), one GPU per root, on NUMA node 0 below bus 0x80 and 1 above,
// and publishes numaNode only when asked.
func TestOCIH100SharesRootsWithTheFixture(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "node", "dra", "testdata", "oci-h100.slices.json"))
	if err != nil {
		t.Fatal(err)
	}
	ports := map[string]int{}
	for _, m := range regexp.MustCompile(`"resource.kubernetes.io/pcieRoot": \{\s*"string": "([^"]+)"`).FindAllStringSubmatch(string(data), -1) {
		ports[m[1]]++
	}
	tree, err := os.ReadFile(filepath.Join("..", "..", "..", "hca", "fixture", "testdata", "oci-h100.tree"))
	if err != nil {
		t.Fatal(err)
	}
	var treeGPUs []string
	for _, m := range regexp.MustCompile(`# ---- GPU at (\S+) ----`).FindAllStringSubmatch(string(tree), -1) {
		treeGPUs = append(treeGPUs, m[1])
	}
	gpus := ociGPUs(t, true)
	var busIDs []string
	var numa []int64
	for _, g := range gpus {
		busIDs = append(busIDs, g.PCIBusID)
		numa = append(numa, g.NUMANode)
	}
	if diff := cmp.Diff(treeGPUs, busIDs); diff != "" {
		t.Errorf("GPU bus IDs against the fixture's (-fixture +fake):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{0, 0, 0, 0, 1, 1, 1, 1}, numa); diff != "" {
		t.Errorf("GPU NUMA nodes (-fixture +fake):\n%s", diff)
	}
	roots := map[string]bool{}
	for _, g := range gpus {
		if ports[g.PCIeRoot] != 2 {
			t.Errorf("GPU %d on %q: the fixture has %d ports there, want 2", g.Index, g.PCIeRoot, ports[g.PCIeRoot])
		}
		if roots[g.PCIeRoot] {
			t.Errorf("two GPUs on %s", g.PCIeRoot)
		}
		roots[g.PCIeRoot] = true
	}
	for _, d := range Devices(ociGPUs(t, false)) {
		if _, ok := d.Attributes[numaNodeAttr]; ok {
			t.Errorf("%s publishes numaNode without NUMA", d.Name)
		}
		if _, ok := d.Attributes[pcieRootAttr]; !ok {
			t.Errorf("%s publishes no pcieRoot", d.Name)
		}
	}
}
