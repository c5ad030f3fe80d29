package contract

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeListsKeys keeps the README's annotation reference in step with
// the keys the core accepts.
func TestReadmeListsKeys(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range UserKeys() {
		if !strings.Contains(string(readme), "| `"+k+"` |") {
			t.Errorf("README annotation table lacks user key %q", k)
		}
	}
	for _, k := range OwnKeys() {
		if !strings.Contains(string(readme), "`"+Prefix+k+"`") {
			t.Errorf("README lacks ibkube-written key %q", Prefix+k)
		}
	}
}
