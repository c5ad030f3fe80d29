package nccl

import (
	"encoding/xml"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/internal/testing/golden"
)

func TestProfileForSKU(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"Standard_ND96asr_v4":            NDv4,
		"Standard_ND96amsr_A100_v4":      NDv4,
		"standard_nd96isr_h100_v5":       NDv5,
		"Standard_ND96isr_H100_v5":       NDv5,
		"Standard_ND96isr_H200_v5":       NDv5,
		"Standard_ND96isr_MI300X_v5":     NDv5MI300X,
		"Standard_ND128isr_NDR_GB200_v6": NDv6GB,
		"Standard_ND128isr_GB300_v6":     NDv6GB,
		"Standard_HB120rs_v3":            HB,
		"Standard_HB120-32rs_v3":         HB,
		"Standard_HB176rs_v4":            HB,
		"BM.GPU.H100.8":                  OCIH100RoCE,
		"BM.GPU.H200.8":                  OCIH200RoCE,
		"BM.GPU.B4.8":                    OCIB4RoCE,
		"Standard_D4s_v5":                "",
		"Standard_NC24ads_A100_v4":       "",
		"Standard_ND96isr_H300_v5":       "",
		"BM.GPU.A100-v2.8":               "",
		"BM.GPU.H100.80":                 "",
		"":                               "",
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
			if v.WholeNode {
				t.Errorf("%s: %s: whole-node values are conf-file values", p.Name, v.Name)
			}
		}
		for _, v := range append(append([]Var{}, p.NCCL...), p.Env...) {
			if v.WholeNode && p.GPUsPerNode == 0 {
				t.Errorf("%s: %s is whole-node but the profile states no GPUsPerNode", p.Name, v.Name)
			}
		}
	}
	// A caller modifying its copy must not change the catalogue.
	b := Builtin()
	b[1].NCCL[0].Value = "changed"
	if Builtin()[1].NCCL[0].Value == "changed" {
		t.Error("Builtin returns shared slices")
	}
}

// sourceCommits are the commits at which testdata/source-lines.txt was read.
var sourceCommits = map[string]string{
	"Azure/azhpc-images":            "8e9d055fb9e1f7385da734969793861c447958a1",
	"Azure/aks-rdma-infiniband":     "700dabb4fe0451d482ae09a373617ed68658b021",
	"oracle-quickstart/oci-hpc-oke": "61d210acc37f1990f27012aa4f108c5db4e52ab2",
}

// sourceLine is one setting line of a public source for one profile's
// machine, as it reads in the file (testdata/source-lines.txt).
type sourceLine struct {
	profile, source, text string
}

// leftOut names the settings the sources give that the catalogue leaves
// out on purpose, and why; every other setting is carried.
var leftOut = map[string]string{
	"NCCL_TOPO_FILE":    "node fact: the node agent supplies it from what it allocated",
	"NCCL_IB_HCA":       "node fact: the node agent supplies it from what it allocated",
	"NCCL_DEBUG":        "logging choice, not a machine fact",
	"NCCL_IB_GID_INDEX": "NCCL selects the RoCEv2 IPv4 GID itself when unset (src/transport/net_ib/connect.cc ncclIbGetGidIndex)",
}

// sourceLines reads every NCCL/RCCL setting the sources give for each
// built-in profile's machine, read at sourceCommits, so that a value is
// neither carried wrongly nor dropped silently.
func sourceLines(t *testing.T) []sourceLine {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "source-lines.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var out []sourceLine
	for i, l := range strings.Split(string(data), "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.SplitN(l, "\t", 3)
		if len(f) != 3 {
			t.Fatalf("testdata/source-lines.txt:%d: want PROFILE<tab>SOURCE:LINE<tab>TEXT, got %q", i+1, l)
		}
		out = append(out, sourceLine{f[0], f[1], f[2]})
	}
	return out
}

// settingOf reads NAME and VALUE from a source line in any of the forms the
// sources use: NAME=VALUE, NAME: VALUE  # comment, -x NAME=VALUE \\.
func settingOf(text string) (string, string) {
	text, _, _ = strings.Cut(text, "#")
	text = strings.TrimSpace(text)
	text = strings.TrimSpace(strings.TrimSuffix(text, "\\"))
	text = strings.TrimPrefix(text, "-x ")
	if k, v, ok := strings.Cut(text, "="); ok && !strings.Contains(k, ":") {
		return k, v
	}
	k, v, _ := strings.Cut(text, ":")
	return strings.TrimSpace(k), strings.TrimSpace(v)
}

// TestCatalogueMatchesSources compares every built-in value with the source
// line it cites, and checks that each setting a source gives for a machine
// is either carried or left out with a stated reason.
func TestCatalogueMatchesSources(t *testing.T) {
	t.Parallel()
	type entry struct{ Value, Source string }
	lines := sourceLines(t)
	want := map[string]map[string]entry{}
	for _, l := range lines {
		repo, _, _ := strings.Cut(l.source, " ")
		if sourceCommits[repo] == "" {
			t.Errorf("%s: no commit recorded for %s", l.source, repo)
		}
		if want[l.profile] == nil {
			want[l.profile] = map[string]entry{}
		}
		k, v := settingOf(l.text)
		if leftOut[k] == "" {
			want[l.profile][k] = entry{v, l.source}
		}
	}
	for _, p := range Builtin() {
		got := map[string]entry{}
		for _, v := range append(append([]Var{}, p.NCCL...), p.Env...) {
			got[v.Name] = entry{v.Value, v.Source}
		}
		w := want[p.Name]
		if w == nil {
			w = map[string]entry{}
		}
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("profile %s vs its sources (-source +catalogue):\n%s", p.Name, diff)
		}
		for k := range got {
			if leftOut[k] != "" {
				t.Errorf("profile %s carries %s, which is left out on purpose (%s)", p.Name, k, leftOut[k])
			}
		}
	}
}

// TestRoCEProfiles checks the machine facts of the OCI shapes: how many
// HCAs go with each GPU (the NCCL_IB_HCA list lengths of the source) and the
// resource of the RoCE pool.
func TestRoCEProfiles(t *testing.T) {
	t.Parallel()
	lines := sourceLines(t)
	for name, hcas := range map[string]int{OCIH100RoCE: 16, OCIH200RoCE: 8, OCIB4RoCE: 16} {
		var p Profile
		for _, b := range Builtin() {
			if b.Name == name {
				p = b
			}
		}
		for _, l := range lines {
			if l.profile == name && strings.HasPrefix(l.text, "NCCL_IB_HCA=") {
				if n := len(strings.Split(strings.TrimPrefix(l.text, "NCCL_IB_HCA=="), ",")); n != hcas {
					t.Errorf("%s: source lists %d HCAs, test expects %d", name, n, hcas)
				}
			}
		}
		if p.GPUsPerNode != 8 || p.HCAsPerGPU*p.GPUsPerNode != hcas || p.ExclusiveResource != contract.ResourceRoCE {
			t.Errorf("%s: %d GPUs x %d HCAs per GPU on %q, want 8 GPUs, %d HCAs on %s", name, p.GPUsPerNode, p.HCAsPerGPU, p.ExclusiveResource, hcas, contract.ResourceRoCE)
		}
		if _, ok := Lookup(p.NCCL, "NCCL_IB_GID_INDEX"); ok {
			t.Errorf("%s sets NCCL_IB_GID_INDEX; NCCL must pick the RoCEv2 GID itself", name)
		}
	}
}

type xmlPCI struct {
	BusID    string   `xml:"busid,attr"`
	Class    string   `xml:"class,attr"`
	Speed    string   `xml:"link_speed,attr"`
	Width    string   `xml:"link_width,attr"`
	VendorID string   `xml:"vendor,attr"`
	Children []xmlPCI `xml:"pci"`
}

type xmlCPU struct {
	NUMA     string   `xml:"numaid,attr"`
	Affinity string   `xml:"affinity,attr"`
	Arch     string   `xml:"arch,attr"`
	Vendor   string   `xml:"vendor,attr"`
	Family   string   `xml:"familyid,attr"`
	Model    string   `xml:"modelid,attr"`
	PCI      []xmlPCI `xml:"pci"`
}

type xmlSystem struct {
	XMLName xml.Name `xml:"system"`
	Version string   `xml:"version,attr"`
	CPUs    []xmlCPU `xml:"cpu"`
}

// topoFacts is what one azhpc-images topology file states, written here by
// hand from the file so that the test compares our rendering with the
// source, not with another file of ours.
type topoFacts struct {
	Version string
	CPUs    []cpuFacts
}

type cpuFacts struct {
	NUMA, Affinity, Arch, Vendor, Family, Model string
	// Switches: per PCIe switch, its bus ID, link, whether its IDs are
	// zeroed, and its children as "busid class".
	Switches []switchFacts
}

type switchFacts struct {
	BusID, Link string
	ZeroIDs     bool
	Devices     []string
}

// sourceTopologies are the facts of Azure/azhpc-images topology/*.xml at
// commit 8e9d055fb9e1f7385da734969793861c447958a1 (2026-07-29), which
// includes 992d7759 (NDv5 CPU masks corrected, 2025-01-27) and 4a4565a0
// (NDv4 CPU affinity fixed, 2025-01-29). Link "16 GT/s x16" stands for
// link_speed="16 GT/s" link_width="16" on every pci element of the file.
var sourceTopologies = map[string]topoFacts{
	"ndv4-topo.xml": {Version: "1", CPUs: []cpuFacts{
		{"0", "00000000,00000000,00ffffff", "x86_64", "AuthenticAMD", "23", "49", []switchFacts{
			{"ffff:ff:01.0", "16 GT/s x16", false, []string{"0003:00:00.0 0x030200", "0103:00:00.0 0x020700", "0004:00:00.0 0x030200", "0104:00:00.0 0x020700"}},
		}},
		{"1", "00000000,0000ffff,ff000000", "x86_64", "AuthenticAMD", "23", "49", []switchFacts{
			{"ffff:ff:02.0", "16 GT/s x16", false, []string{"0001:00:00.0 0x030200", "0101:00:00.0 0x020700", "0002:00:00.0 0x030200", "0102:00:00.0 0x020700"}},
		}},
		{"2", "000000ff,ffff0000,00000000", "x86_64", "AuthenticAMD", "23", "49", []switchFacts{
			{"ffff:ff:03.0", "16 GT/s x16", false, []string{"000d:00:00.0 0x030200", "0107:00:00.0 0x020700", "000e:00:00.0 0x030200", "0108:00:00.0 0x020700"}},
		}},
		{"3", "ffffff00,00000000,00000000", "x86_64", "AuthenticAMD", "23", "49", []switchFacts{
			{"ffff:ff:04.0", "16 GT/s x16", false, []string{"000b:00:00.0 0x030200", "0105:00:00.0 0x020700", "000c:00:00.0 0x030200", "0106:00:00.0 0x020700"}},
		}},
	}},
	"ndv5-topo.xml": {Version: "1", CPUs: []cpuFacts{
		{"0", "00000000,0000ffff,ffffffff", "x86_64", "GenuineIntel", "6", "143", []switchFacts{
			{"ffff:ff:01.0", "32.0 GT/s PCIe x16", true, []string{"0001:00:00.0 0x030200", "0101:00:00.0 0x020700"}},
			{"ffff:ff:02.0", "32.0 GT/s PCIe x16", true, []string{"0002:00:00.0 0x030200", "0102:00:00.0 0x020700"}},
			{"ffff:ff:03.0", "32.0 GT/s PCIe x16", true, []string{"0003:00:00.0 0x030200", "0103:00:00.0 0x020700"}},
			{"ffff:ff:04.0", "32.0 GT/s PCIe x16", true, []string{"0008:00:00.0 0x030200", "0104:00:00.0 0x020700"}},
		}},
		{"1", "ffffffff,ffff0000,00000000", "x86_64", "GenuineIntel", "6", "143", []switchFacts{
			{"ffff:ff:05.0", "32.0 GT/s PCIe x16", true, []string{"0009:00:00.0 0x030200", "0105:00:00.0 0x020700"}},
			{"ffff:ff:06.0", "32.0 GT/s PCIe x16", true, []string{"000a:00:00.0 0x030200", "0106:00:00.0 0x020700"}},
			{"ffff:ff:07.0", "32.0 GT/s PCIe x16", true, []string{"000b:00:00.0 0x030200", "0107:00:00.0 0x020700"}},
			{"ffff:ff:08.0", "32.0 GT/s PCIe x16", true, []string{"000c:00:00.0 0x030200", "0108:00:00.0 0x020700"}},
		}},
	}},
}

// factsOf reduces a rendered topology to the shape of topoFacts.
func factsOf(t *testing.T, name string, b []byte) topoFacts {
	t.Helper()
	var sys xmlSystem
	if err := xml.Unmarshal(b, &sys); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	link := func(p xmlPCI) string { return p.Speed + " x" + p.Width }
	got := topoFacts{Version: sys.Version}
	for _, c := range sys.CPUs {
		cf := cpuFacts{NUMA: c.NUMA, Affinity: c.Affinity, Arch: c.Arch, Vendor: c.Vendor, Family: c.Family, Model: c.Model}
		for _, sw := range c.PCI {
			if sw.Class != classPCIBridge {
				t.Errorf("%s numa %s: %s class %s directly under the CPU, want a PCIe switch", name, c.NUMA, sw.BusID, sw.Class)
			}
			sf := switchFacts{BusID: sw.BusID, Link: link(sw), ZeroIDs: sw.VendorID == "0x0000"}
			for _, d := range sw.Children {
				if link(d) != link(sw) {
					t.Errorf("%s: %s link %q, its switch %q", name, d.BusID, link(d), link(sw))
				}
				sf.Devices = append(sf.Devices, d.BusID+" "+d.Class)
			}
			cf.Switches = append(cf.Switches, sf)
		}
		got.CPUs = append(got.CPUs, cf)
	}
	return got
}

// TestTopologiesMatchSource checks every rendered topology against the facts
// of the azhpc-images file it stands for: NUMA ids, CPU affinity masks, CPU
// model, switches, and which GPU sits with which HCA on which NUMA node.
func TestTopologiesMatchSource(t *testing.T) {
	t.Parallel()
	for _, name := range TopologyNames() {
		want, ok := sourceTopologies[name]
		if !ok {
			t.Errorf("topology %s has no facts recorded from its source in sourceTopologies", name)
			continue
		}
		b, err := Topology(name)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, factsOf(t, name, b)); diff != "" {
			t.Errorf("%s differs from azhpc-images topology/%s (-source +rendered):\n%s", name, name, diff)
		}
	}
	if _, err := Topology("ndv9-topo.xml"); err == nil {
		t.Error("Topology(unknown) succeeded")
	}
}

// TestProfilesTopologyExists checks that every profile naming a topology
// file names one Topology renders.
func TestProfilesTopologyExists(t *testing.T) {
	t.Parallel()
	for _, p := range Builtin() {
		if p.TopologyFile == "" {
			continue
		}
		if _, err := Topology(p.TopologyFile); err != nil {
			t.Errorf("profile %s: %v", p.Name, err)
		}
	}
}

// TestTopologiesMatchFixtures checks that each HCA sits on the same NUMA
// node, with the same CPUs, as in hca/fixture's fake host of that
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
	for _, name := range TopologyNames() {
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

// TestProfilesDocListsEveryValue keeps docs/profiles.md's table of every
// profile and value, with its source file and line, in step with the
// catalogue.
func TestProfilesDocListsEveryValue(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "docs", "profiles.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "| `") && strings.Count(line, "|") == 5 && strings.Contains(line, "=") {
			rows++
		}
	}
	want := 0
	for _, p := range Builtin() {
		if !strings.Contains(string(doc), "| `"+p.Name+"` |") {
			t.Errorf("docs/profiles.md does not list profile %s", p.Name)
		}
		for _, v := range append(append([]Var{}, p.NCCL...), p.Env...) {
			want++
			where := "conf file"
			if !strings.HasPrefix(v.Name, "NCCL_") {
				where = "env"
			}
			if v.WholeNode {
				where += ", whole machine only"
			}
			repo, file, _ := strings.Cut(v.Source, " ")
			row := fmt.Sprintf("| `%s` | `%s=%s` | %s | %s `%s` |", p.Name, v.Name, v.Value, where, repo, file)
			if !strings.Contains(string(doc), row) {
				t.Errorf("docs/profiles.md lacks the row\n%s", row)
			}
		}
	}
	if rows != want {
		t.Errorf("docs/profiles.md has %d value rows, the catalogue %d values", rows, want)
	}
	for repo, commit := range sourceCommits {
		if !strings.Contains(string(doc), "`"+commit+"`") {
			t.Errorf("docs/profiles.md does not give the commit %s of %s", commit, repo)
		}
	}
}
