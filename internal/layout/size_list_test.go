package layout

import (
	"path/filepath"
	"testing"
)

// TestListOversize lists, without failing, every function under node/,
// webhook/, cmd/, hca/, cni/ and nccl/ over the size rule, exceptions
// included: `go test ./internal/layout -run TestListOversize -v` is the
// tool-free worklist for a package before it joins cores.
func TestListOversize(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	for _, top := range []string{"node/", "webhook/", "cmd/", "hca/", "cni/", "nccl/"} {
		files, err := goFiles(root, top)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			msgs, err := oversizeFile(f)
			if err != nil {
				t.Fatal(err)
			}
			rel, _ := filepath.Rel(root, f)
			for _, msg := range msgs {
				t.Logf("%s: %s", filepath.ToSlash(rel), msg)
			}
		}
	}
}
