//go:build promtool

package chart

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The chart's alert rules, run through promtool (make test-promtool builds
// it and sets $PROMTOOL). A tag of its own so that make test-chart, which
// has helm but not promtool, does not need it.

func promtool(t *testing.T, args ...string) string {
	t.Helper()
	bin := os.Getenv("PROMTOOL")
	if bin == "" {
		t.Fatal("$PROMTOOL is not set: run `make test-promtool`, which builds promtool and sets it")
	}
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestPrometheusRules runs Prometheus's own checker and rule unit tests on
// the rules the chart ships: syntax, and each alert firing (or not) on
// input series.
func TestPrometheusRules(t *testing.T) {
	promtool(t, "check", "rules", "../../charts/ibkube/files/prometheus-rules.yaml")
	promtool(t, "test", "rules", filepath.Join("testdata", "promtool", "rules_test.yaml"))
}
