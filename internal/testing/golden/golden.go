// Package golden compares test output with golden files under testdata;
// `go test -update` rewrites them from the current output instead. Only
// tests import it.
package golden

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// update is the -update flag of every test binary that imports this package
// (a flag must be registered before the testing package parses the command
// line, so this one is package state).
var update = flag.Bool("update", false, "rewrite golden files from the current output")

// Update reports whether the test runs with -update.
func Update() bool { return *update }

// Check compares got with the golden file at path. With -update it writes
// got there first (creating the directory).
func Check(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-want +got); if intended, rerun with -update and review the diff:\n%s", path, diff)
	}
}

// CheckJSON is Check of v as indented JSON with a final newline.
func CheckJSON(t testing.TB, path string, v any) {
	t.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	Check(t, path, append(data, '\n'))
}

// ReadYAML decodes the YAML file at path (a test input under testdata) into
// v, refusing fields v does not have: a misspelt field in an input must fail
// the test rather than go unread.
func ReadYAML(t testing.TB, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
