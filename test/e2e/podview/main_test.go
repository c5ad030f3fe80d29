package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestRunGolden(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"admitted"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			if err := run([]string{filepath.Join("testdata", name+".yaml")}, nil, &out); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(string(want), out.String()); d != "" {
				t.Errorf("view (-want +got):\n%s", d)
			}
		})
	}
}

func TestRunRejects(t *testing.T) {
	t.Parallel()
	for name, args := range map[string][]string{"no args": nil, "two args": {"a", "b"}, "missing file": {"testdata/none.yaml"}} {
		if err := run(args, nil, &bytes.Buffer{}); err == nil {
			t.Errorf("%s: run(%q) succeeded", name, args)
		}
	}
}
