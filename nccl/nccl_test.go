package nccl

import (
	"encoding/xml"
	"strings"
	"testing"
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
	Children []xmlPCI `xml:"pci"`
}

type xmlSystem struct {
	CPUs []struct {
		NUMA string   `xml:"numaid,attr"`
		PCI  []xmlPCI `xml:"pci"`
	} `xml:"cpu"`
}

// TestTopologies checks the embedded files against the facts they encode:
// 8 GPUs and 8 IB VFs (0101..0108), NDv4 on 4 NUMA nodes with 2 HCAs each,
// NDv5 on 2 with 4 each.
func TestTopologies(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]struct{ numa, perNUMA int }{
		"ndv4-topo.xml": {4, 2},
		"ndv5-topo.xml": {2, 4},
	} {
		b, err := Topology(name)
		if err != nil {
			t.Fatal(err)
		}
		var sys xmlSystem
		if err := xml.Unmarshal(b, &sys); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(sys.CPUs) != want.numa {
			t.Errorf("%s: %d NUMA nodes, want %d", name, len(sys.CPUs), want.numa)
		}
		hcas := map[string]bool{}
		for _, cpu := range sys.CPUs {
			gpus, ibs := 0, 0
			var walk func([]xmlPCI)
			walk = func(ps []xmlPCI) {
				for _, p := range ps {
					switch p.Class {
					case "0x030200":
						gpus++
					case "0x020700":
						ibs++
						hcas[p.BusID] = true
					}
					walk(p.Children)
				}
			}
			walk(cpu.PCI)
			if gpus != want.perNUMA || ibs != want.perNUMA {
				t.Errorf("%s numa %s: %d GPUs, %d HCAs, want %d each", name, cpu.NUMA, gpus, ibs, want.perNUMA)
			}
		}
		for i := 1; i <= 8; i++ {
			if bdf := "010" + string(rune('0'+i)) + ":00:00.0"; !hcas[bdf] {
				t.Errorf("%s: HCA %s missing", name, bdf)
			}
		}
	}
	if _, err := Topology("ndv9-topo.xml"); err == nil {
		t.Error("Topology(unknown) succeeded")
	}
}
