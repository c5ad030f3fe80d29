package nccl

import (
	"encoding/xml"
	"fmt"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ibkube/ibkube/deviceplugin/fixture"
	"github.com/ibkube/ibkube/internal/golden"
)

func TestProfileForSKU(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"Standard_ND96asr_v4":       NDv4,
		"Standard_ND96amsr_A100_v4": NDv4,
		"standard_nd96isr_h100_v5":  NDv5,
		"Standard_ND96isr_H100_v5":  NDv5,
		"Standard_HB120rs_v3":       HB,
		"Standard_HB120-32rs_v3":    HB,
		"Standard_HB176rs_v4":       HB,
		"BM.GPU.H100.8":             OCIH100RoCE,
		"Standard_D4s_v5":           "",
		"Standard_NC24ads_A100_v4":  "",
		"BM.GPU.A100-v2.8":          "",
		"":                          "",
	}
	for sku, want := range cases {
		p, ok := ProfileForSKU(sku)
		if ok != (want != "") || p.Name != want {
			t.Errorf("ProfileForSKU(%q) = %q, %v; want %q", sku, p.Name, ok, want)
		}
	}
}

func TestBuiltinProfiles(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, p := range Builtin() {
		if seen[p.Name] {
			t.Errorf("profile %s twice", p.Name)
		}
		seen[p.Name] = true
		for _, v := range p.NCCL {
			if !strings.HasPrefix(v.Name, "NCCL_") {
				t.Errorf("%s: %s in NCCL list", p.Name, v.Name)
			}
		}
		for _, v := range p.Env {
			if strings.HasPrefix(v.Name, "NCCL_") {
				t.Errorf("%s: %s must go in the NCCL list (the conf file), not env", p.Name, v.Name)
			}
		}
		if p.TopologyFile != "" {
			if _, err := Topology(p.TopologyFile); err != nil {
				t.Errorf("%s: %v", p.Name, err)
			}
		}
	}
	oci, _ := ProfileForSKU("BM.GPU.H100.8")
	for k, want := range map[string]string{"NCCL_IB_GID_INDEX": "3", "NCCL_IB_TC": "41", "NCCL_IB_TIMEOUT": "22"} {
		if got, _ := Lookup(oci.NCCL, k); got != want {
			t.Errorf("oci %s = %q, want %q", k, got, want)
		}
	}
	// A caller modifying its copy must not change the catalogue.
	b := Builtin()
	b[1].NCCL[0].Value = "changed"
	if Builtin()[1].NCCL[0].Value == "changed" {
		t.Error("Builtin returns shared slices")
	}
}

type xmlPCI struct {
	BusID    string   `xml:"busid,attr"`
	Class    string   `xml:"class,attr"`
	Speed    string   `xml:"link_speed,attr"`
	Width    string   `xml:"link_width,attr"`
	Children []xmlPCI `xml:"pci"`
}

type xmlCPU struct {
	NUMA     string   `xml:"numaid,attr"`
	Affinity string   `xml:"affinity,attr"`
	PCI      []xmlPCI `xml:"pci"`
}

type xmlSystem struct {
	XMLName xml.Name `xml:"system"`
	Version string   `xml:"version,attr"`
	CPUs    []xmlCPU `xml:"cpu"`
}

// TestTopologies checks the rendered files against the facts they encode:
// 8 GPUs and 8 IB VFs (0101..0108), NDv4 on 4 NUMA nodes with 2 HCAs each,
// NDv5 on 2 with 4 each; every HCA behind a PCIe switch shared with a GPU;
// links and versions NCCL understands.
func TestTopologies(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]struct {
		numa, perNUMA int
		speed         string
	}{
		"ndv4-topo.xml": {4, 2, "16 GT/s"},
		"ndv5-topo.xml": {2, 4, "32.0 GT/s PCIe"},
	} {
		b, err := Topology(name)
		if err != nil {
			t.Fatal(err)
		}
		var sys xmlSystem
		if err := xml.Unmarshal(b, &sys); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if sys.Version != "1" {
			t.Errorf("%s: system version %q, want 1", name, sys.Version)
		}
		if len(sys.CPUs) != want.numa {
			t.Errorf("%s: %d NUMA nodes, want %d", name, len(sys.CPUs), want.numa)
		}
		hcas := map[string]bool{}
		for _, cpu := range sys.CPUs {
			gpus, ibs := 0, 0
			for _, sw := range cpu.PCI {
				if sw.Class != classPCIBridge {
					t.Errorf("%s numa %s: %s class %s directly under the CPU, want a PCIe switch", name, cpu.NUMA, sw.BusID, sw.Class)
				}
				swGPUs, swIBs := 0, 0
				for _, p := range sw.Children {
					if p.Speed != want.speed || p.Width != "16" {
						t.Errorf("%s: %s link %q x%s, want %q x16", name, p.BusID, p.Speed, p.Width, want.speed)
					}
					switch p.Class {
					case "0x030200":
						swGPUs++
					case "0x020700":
						swIBs++
						if hcas[p.BusID] {
							t.Errorf("%s: HCA %s twice", name, p.BusID)
						}
						hcas[p.BusID] = true
					default:
						t.Errorf("%s: %s has class %s", name, p.BusID, p.Class)
					}
				}
				if swGPUs == 0 || swGPUs != swIBs {
					t.Errorf("%s switch %s: %d GPUs, %d HCAs, want pairs", name, sw.BusID, swGPUs, swIBs)
				}
				gpus += swGPUs
				ibs += swIBs
			}
			if gpus != want.perNUMA || ibs != want.perNUMA {
				t.Errorf("%s numa %s: %d GPUs, %d HCAs, want %d each", name, cpu.NUMA, gpus, ibs, want.perNUMA)
			}
		}
		for i := 1; i <= 8; i++ {
			if bdf := fmt.Sprintf("%04x:00:00.0", 0x100+i); !hcas[bdf] {
				t.Errorf("%s: HCA %s missing", name, bdf)
			}
		}
		if len(hcas) != 8 {
			t.Errorf("%s: %d HCAs, want 8", name, len(hcas))
		}
	}
	if _, err := Topology("ndv9-topo.xml"); err == nil {
		t.Error("Topology(unknown) succeeded")
	}
}

// TestTopologiesMatchFixtures checks that each HCA sits on the same NUMA
// node, with the same CPUs, as in deviceplugin/fixture's fake host of that
// size, which the node agent's tests run on.
func TestTopologiesMatchFixtures(t *testing.T) {
	t.Parallel()
	for file, host := range map[string]string{"ndv4-topo.xml": "ndv4", "ndv5-topo.xml": "ndv5"} {
		entries, err := fixture.Entries(host)
		if err != nil {
			t.Fatal(err)
		}
		// sysfs facts per PCI address: numa_node and local_cpulist.
		hostNUMA := map[string]string{}
		for _, e := range entries {
			dir, leaf := path.Split(e.Path)
			if e.Kind == fixture.File && (leaf == "numa_node" || leaf == "local_cpulist") {
				bdf := path.Base(dir)
				hostNUMA[bdf] += leaf + "=" + e.Data + " "
			}
		}
		b, err := Topology(file)
		if err != nil {
			t.Fatal(err)
		}
		var sys xmlSystem
		if err := xml.Unmarshal(b, &sys); err != nil {
			t.Fatal(err)
		}
		m, _ := machineFor(file)
		got, want := map[string]string{}, map[string]string{}
		for i, cpu := range sys.CPUs {
			n := m.numa[i]
			for _, sw := range cpu.PCI {
				for _, p := range sw.Children {
					if p.Class != classInfiniBand {
						continue
					}
					got[p.BusID] = fmt.Sprintf("numa_node=%s local_cpulist=%d-%d ", cpu.NUMA, n.firstCPU, n.lastCPU)
					want[p.BusID] = hostNUMA[p.BusID]
				}
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s vs fixture %s (-fixture +xml):\n%s", file, host, diff)
		}
	}
}

// TestTopologyGolden compares the rendered files with testdata/*.golden;
// go test ./nccl -update rewrites them, for a reviewer to read the diff.
func TestTopologyGolden(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"ndv4-topo.xml", "ndv5-topo.xml"} {
		got, err := Topology(name)
		if err != nil {
			t.Fatal(err)
		}
		golden.Check(t, filepath.Join("testdata", name+".golden"), got)
	}
}

func TestAffinityMask(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cpus, first, last int
		want              string
	}{
		{96, 0, 23, "00000000,00000000,00ffffff"},
		{96, 24, 47, "00000000,0000ffff,ff000000"},
		{96, 48, 95, "ffffffff,ffff0000,00000000"},
		{96, 0, 47, "00000000,0000ffff,ffffffff"},
		{8, 0, 7, "000000ff"},
		{32, 31, 31, "80000000"},
		{33, 32, 32, "00000001,00000000"},
		{96, 0, 96, "ERR"},
		{96, 5, 4, "ERR"},
		{96, -1, 4, "ERR"},
	} {
		got, err := affinityMask(c.cpus, c.first, c.last)
		if err != nil {
			got = "ERR"
		}
		if got != c.want {
			t.Errorf("affinityMask(%d, %d, %d) = %q, %v; want %q", c.cpus, c.first, c.last, got, err, c.want)
		}
	}
}

func TestRenderRefusesBadBusID(t *testing.T) {
	t.Parallel()
	m := ndv4Machine()
	m.numa[0].switches[0][0].hca = "0103:00:00"
	if _, err := renderTopology(m); err == nil || !strings.Contains(err.Error(), "0103:00:00") {
		t.Errorf("renderTopology with a bad bus ID: err = %v, want it named", err)
	}
}
