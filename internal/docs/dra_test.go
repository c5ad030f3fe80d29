package docs

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/hca/selector"
	"github.com/ibkube/ibkube/node/config"
	"github.com/ibkube/ibkube/node/dra/slice"
	"github.com/ibkube/ibkube/node/resource"
)

// attributeTable is where the one table of published device attributes
// lives: the page, the section and the table's header row.
const (
	attributePage    = "dra-driver.md"
	attributeSection = "## ResourceSlice"
	attributeHeader  = "| attribute | example | source |"
)

// TestDRAAttributeTable holds docs/dra-driver.md's attribute table to the
// attributes node/dra/slice publishes for every fixture host (as an
// InfiniBand node and as a RoCE node), to the contract's DRAAttr* names
// (an attribute no fixture shows is still declared there) and to
// contract.DRARetiredAttributes: every attribute has its row, every row
// names one, and no retired attribute is published or listed.
func TestDRAAttributeTable(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", attributePage))
	if err != nil {
		t.Fatal(err)
	}
	known := publishedAttributes(t)
	for _, a := range declaredAttributes(t) {
		if !slices.Contains(known, a) {
			known = append(known, a)
		}
	}
	for _, problem := range attributeTableDrift(string(doc), known, contract.DRARetiredAttributes()) {
		t.Errorf("docs/%s: %s", attributePage, problem)
	}
}

// TestAttributeTableDriftNamesTheRow: the check above names a missing row,
// a row with no attribute behind it, a retired attribute, and a table it
// cannot find, so that a drift cannot pass as agreement.
func TestAttributeTableDriftNamesTheRow(t *testing.T) {
	t.Parallel()
	page := func(rows ...string) string {
		return "# x\n\n" + attributeSection + "\n\ntext\n\n" + attributeHeader + "\n|---|---|---|\n" + strings.Join(rows, "\n") + "\n\n## next\n"
	}
	retired := []contract.RetiredAttribute{{Name: "mode"}}
	published := []string{"pool", "rate", "resource.kubernetes.io/pciBusID"}
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"agrees", page("| `resource.kubernetes.io/pciBusID` | a | b |", "| `pool`, `rate` (int) | c | d |"), nil},
		{"row missing", page("| `pool` | c | d |", "| `resource.kubernetes.io/pciBusID` | a | b |"),
			[]string{"no row for the published attribute rate"}},
		{"row for nothing", page("| `pool`, `rate`, `netdevs` | c | d |", "| `resource.kubernetes.io/pciBusID` | a | b |"),
			[]string{"row for netdevs, which the slice code does not publish"}},
		{"retired listed", page("| `pool`, `rate`, `mode` | c | d |", "| `resource.kubernetes.io/pciBusID` | a | b |"),
			[]string{"row for mode, which the slice code does not publish", "row for mode, which contract.DRARetiredAttributes retires"}},
		{"no table", "# x\n\n" + attributeSection + "\n\nno table here\n", []string{`no table headed "` + attributeHeader + `" under "` + attributeSection + `"`}},
	} {
		got := attributeTableDrift(tc.doc, published, retired)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: drift = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// attributeTableDrift lists what differs between the attribute table in
// doc and the published and retired attributes, nothing when they agree.
func attributeTableDrift(doc string, published []string, retired []contract.RetiredAttribute) []string {
	rows, ok := attributeRows(doc)
	if !ok {
		return []string{`no table headed "` + attributeHeader + `" under "` + attributeSection + `"`}
	}
	var out []string
	for _, a := range published {
		if !slices.Contains(rows, a) {
			out = append(out, "no row for the published attribute "+a)
		}
	}
	for _, a := range rows {
		if !slices.Contains(published, a) {
			out = append(out, "row for "+a+", which the slice code does not publish")
		}
	}
	for _, r := range retired {
		if slices.Contains(rows, r.Name) || slices.Contains(published, r.Name) {
			out = append(out, "row for "+r.Name+", which contract.DRARetiredAttributes retires")
		}
	}
	return out
}

// codeSpan is an attribute name as the table writes it, `pool`.
var codeSpan = regexp.MustCompile("`([^`]+)`")

// attributeRows reads the attribute names of the table under
// attributeSection: every code span of each row's first cell, in order.
func attributeRows(doc string) ([]string, bool) {
	_, section, _ := strings.Cut(doc, "\n"+attributeSection+"\n")
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	_, table, ok := strings.Cut(section, "\n"+attributeHeader+"\n")
	if !ok {
		return nil, false
	}
	var names []string
	for _, line := range strings.Split(table, "\n")[1:] { // [0] is the |---| row
		if !strings.HasPrefix(line, "|") {
			break
		}
		first := strings.Split(line, "|")[1]
		for _, m := range codeSpan.FindAllStringSubmatch(first, -1) {
			names = append(names, m[1])
		}
	}
	return names, true
}

// publishedAttributes are the attribute names (the standard ones with their
// domain) on any device node/dra/slice publishes for the fixture hosts,
// sorted.
func publishedAttributes(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	for _, name := range fixture.Names() {
		dir := fixture.BuildTemp(t, name)
		scan := discovery.NewScanner(discovery.Options{SysfsRoot: fixture.SysfsRoot(dir), DevRoot: fixture.DevRoot(dir), PortPoll: -1})
		node, err := scan.Scan(context.Background())
		if err != nil {
			t.Fatalf("scan fixture %s: %v", name, err)
		}
		for _, cfg := range []*config.AgentConfig{config.Default(), roceConfig()} {
			m := resource.Build(cfg, node, resource.Options{HostDevRoot: "/dev"})
			for _, s := range slice.Slices(m, slice.NodeFacts{Name: "node-0"}) {
				for _, d := range s.Devices {
					for a := range d.Attributes {
						seen[string(a)] = true
					}
				}
			}
		}
	}
	if len(seen) == 0 {
		t.Fatal("the fixture hosts publish no attribute: the walk missed the slices")
	}
	out := make([]string, 0, len(seen))
	for a := range seen {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// declaredAttributes are the values of the contract's DRAAttr* constants,
// the driver-domain attribute names, read from its source.
func declaredAttributes(t *testing.T) []string {
	t.Helper()
	dir := filepath.Join("..", "..", "contract")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			spec, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, name := range spec.Names {
				if v, ok := stringValue(spec, i); ok && strings.HasPrefix(name.Name, "DRAAttr") {
					out = append(out, v)
				}
			}
			return false
		})
	}
	if !slices.Contains(out, contract.DRAAttrPool) {
		t.Fatalf("read %v from contract's DRAAttr* constants, without %s: the reader missed them", out, contract.DRAAttrPool)
	}
	return out
}

// stringValue is the string literal spec gives its i'th name.
func stringValue(spec *ast.ValueSpec, i int) (string, bool) {
	if i >= len(spec.Values) {
		return "", false
	}
	lit, ok := spec.Values[i].(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	v, err := strconv.Unquote(lit.Value)
	return v, err == nil
}

// roceConfig puts the Ethernet ports of Mellanox HCAs in a RoCE pool, as an
// OCI node's config does: the fixtures' RoCE HCAs publish only there.
func roceConfig() *config.AgentConfig {
	c := config.Default()
	c.Pools = append(c.Pools, config.Pool{
		ResourceName: contract.ResourceRoCE, Mode: config.ModeExclusive,
		Selector: selector.Selector{Match: selector.Match{Vendors: []string{"15b3"}, LinkLayers: []string{inventory.LinkLayerEthernet}}},
	})
	return c
}
