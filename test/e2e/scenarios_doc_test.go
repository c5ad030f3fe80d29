package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// scenarioName is how every scenario is named in the e2e's sources: an id
// (a number with an optional letter, "c" and a number for the cluster's)
// and words, e.g. "9j-dra-exclusive-is-exclusive".
var scenarioName = regexp.MustCompile(`"(c?[0-9]+[a-z]?)-[a-z][a-z0-9-]*"`)

// docRow is a row of one of docs/e2e.md's scenario tables: "| 4b | …".
var docRow = regexp.MustCompile(`(?m)^\| (c?[0-9]+[a-z]?) \|`)

// TestScenarioTablesMatchTheScenarios holds docs/e2e.md's scenario tables
// to the scenarios the e2e runs: every scenario has a row (its own, or its
// group's: row 5 stands for 5a–5c) and every row names a scenario, so the
// page a user reads to know what is proven cannot drift from the code.
// It reads the sources, not a list of ours, and runs without the e2e tag.
func TestScenarioTablesMatchTheScenarios(t *testing.T) {
	srcs, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	code := map[string]bool{}
	for _, f := range srcs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range scenarioName.FindAllStringSubmatch(string(b), -1) {
			code[m[1]] = true
		}
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "e2e.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, m := range docRow.FindAllStringSubmatch(string(doc), -1) {
		rows[m[1]] = true
	}
	if len(code) < 20 || len(rows) < 20 {
		t.Fatalf("found %d scenarios in the sources and %d rows in docs/e2e.md; the patterns no longer match", len(code), len(rows))
	}
	group := func(id string) string { return strings.TrimRight(id, "abcdefghijklmnopqrstuvwxyz") }
	var undocumented, unknown []string
	for id := range code {
		if !rows[id] && !rows[group(id)] {
			undocumented = append(undocumented, id)
		}
	}
	for id := range rows {
		found := code[id]
		for c := range code {
			found = found || group(c) == id
		}
		if !found {
			unknown = append(unknown, id)
		}
	}
	slices.Sort(undocumented)
	slices.Sort(unknown)
	if len(undocumented) > 0 {
		t.Errorf("scenarios without a row in docs/e2e.md: %v", undocumented)
	}
	if len(unknown) > 0 {
		t.Errorf("rows of docs/e2e.md naming no scenario: %v", unknown)
	}
}
