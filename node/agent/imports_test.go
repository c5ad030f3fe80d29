package agent

import (
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestNoTunings keeps the profile tunings out of the agent's reach: it may
// read the catalogue through nccl/machine (profile name, topology file)
// only, never the nccl package whose profiles carry NCCL and UCX values.
func TestNoTunings(t *testing.T) {
	t.Parallel()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); path == "github.com/ibkube/ibkube/nccl" {
				t.Errorf("%s imports %s: the agent reads the catalogue through nccl/machine only", name, path)
			}
		}
	}
}
