//go:build chart || integration

package chart

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const (
	rulesFile     = "../../charts/ibkube/files/prometheus-rules.yaml"
	dashboardFile = "../../charts/ibkube/files/grafana-dashboard.json"
)

// exportedMetrics lists every metric name the binaries define: string
// literals that start with ibkube_ in the non-test Go files of the
// packages that register metrics.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, root := range []string{"../../node", "../../webhook", "../../cmd"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil && regexp.MustCompile(`^ibkube_[a-z_]+$`).MatchString(s) {
						names[s] = true
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return names
}

var metricRef = regexp.MustCompile(`\bibkube_[a-z_]+\b`)

// usedMetrics lists the ibkube_ metrics the alert rules and the dashboard
// query, by where they are used.
func usedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	used := map[string][]string{}
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Record, Expr string
			}
		}
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			for _, m := range metricRef.FindAllString(r.Expr, -1) {
				used[m] = append(used[m], "alert "+r.Alert+r.Record)
			}
		}
	}
	raw, err = os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Name       string
				Definition string
			}
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range metricRef.FindAllString(tg.Expr, -1) {
				used[m] = append(used[m], "panel "+p.Title)
			}
		}
	}
	for _, v := range dash.Templating.List {
		for _, m := range metricRef.FindAllString(v.Definition, -1) {
			used[m] = append(used[m], "variable "+v.Name)
		}
	}
	return used
}

// TestObservedMetricsAreExported: a panel or alert over a metric no binary
// exports shows nothing and never fires, silently.
func TestObservedMetricsAreExported(t *testing.T) {
	t.Parallel()
	exported := exportedMetrics(t)
	used := usedMetrics(t)
	if len(used) < 8 {
		t.Fatalf("only %d metrics found in the rules and dashboard: %v", len(used), used)
	}
	var missing []string
	for m, where := range used {
		base := m
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if b, ok := strings.CutSuffix(m, suffix); ok && exported[b] {
				base = b
			}
		}
		if !exported[base] {
			missing = append(missing, m+" (used by "+strings.Join(where, ", ")+")")
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("metrics used but not exported by any binary:\n%s", strings.Join(missing, "\n"))
	}
	for _, want := range []string{"ibkube_rdma_port_data_bytes_total", "ibkube_rdma_container_idle", "ibkube_webhook_mutations_total", "ibkube_node_agent_hca_healthy"} {
		if !exported[want] {
			t.Errorf("the exported-metric scan missed %s: it no longer reads the definitions", want)
		}
	}
}
