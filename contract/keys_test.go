package contract

import (
	"os"
	"path/filepath"
	"slices"
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

// TestEnums: each enum-valued key is a user key, accepts at least two
// values, and its accepted text names every value.
func TestEnums(t *testing.T) {
	t.Parallel()
	for _, e := range Enums() {
		if !slices.Contains(UserKeys(), strings.TrimPrefix(e.Key, Prefix)) {
			t.Errorf("%s: not a user key", e.Key)
		}
		if len(e.Values) < 2 {
			t.Errorf("%s: values %q", e.Key, e.Values)
		}
		for _, v := range e.Values {
			if !strings.Contains(e.Accepted, v) {
				t.Errorf("%s: accepted text %q does not name %q", e.Key, e.Accepted, v)
			}
		}
		if got, ok := EnumOf(e.Key); !ok || got.Key != e.Key {
			t.Errorf("EnumOf(%s) = %v, %t", e.Key, got, ok)
		}
	}
}
