package main

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/ibkube/ibkube/internal/testing/golden"
)

func TestRunGolden(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"admitted"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			if err := run([]string{filepath.Join("testdata", name+".yaml")}, nil, &out); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", name+".golden"), out.Bytes())
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
