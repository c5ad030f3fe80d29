package layout

import (
	"path/filepath"
	"testing"
)

// TestListOversize lists, without failing, every function of cores over
// the size rule, exceptions included: `go test ./internal/layout -run
// TestListOversize -v` is the tool-free worklist before an exception goes.
func TestListOversize(t *testing.T) {
	t.Parallel()
	found, err := oversizedIn(filepath.Join("..", ".."), cores)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range found {
		t.Logf("%s: %s", o.file, o.msg)
	}
}
