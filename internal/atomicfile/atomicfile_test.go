package atomicfile

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// specName is a file name as the DRA driver's CDI store writes it.
const specName = "spec.json"

func TestWrite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, specName)
	for _, tc := range []struct {
		data string
		perm os.FileMode
	}{{"first", 0o600}, {"second, longer", 0o644}} {
		if err := Write(path, []byte(tc.data), tc.perm); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.data {
			t.Errorf("content %q, want %q", got, tc.data)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != tc.perm {
			t.Errorf("mode %v, want %v", fi.Mode().Perm(), tc.perm)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{specName}, names); diff != "" {
		t.Errorf("directory after two writes (-want +got):\n%s", diff)
	}
}

func TestWriteMissingDirectory(t *testing.T) {
	t.Parallel()
	if err := Write(filepath.Join(t.TempDir(), "none", "f"), []byte("x"), 0o644); err == nil {
		t.Error("write into a missing directory: no error")
	}
}

func TestIsTemp(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		".c1.nccl.conf.123456.tmp": true,
		"c1.nccl.conf":             false,
		"c1.tmp":                   false,
		".hidden":                  false,
	} {
		if got := IsTemp(name); got != want {
			t.Errorf("IsTemp(%q) = %t, want %t", name, got, want)
		}
	}
}
