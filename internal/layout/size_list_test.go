package layout

import (
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestListOversize lists, without failing, every function under node/,
// webhook/ and cmd/ over the size rule: `go test ./internal/layout -run
// TestListOversize -v` is the tool-free worklist for the packages not yet
// in cores.
func TestListOversize(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	for _, top := range []string{"node", "webhook", "cmd", "hca", "cni", "nccl"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			msgs, err := oversizeFile(path)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			for _, msg := range msgs {
				t.Logf("%s: %s", filepath.ToSlash(rel), msg)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
