// Package configmapdir writes a file the way the kubelet updates a ConfigMap
// volume, for tests of code that must follow such updates: each version in
// its own directory, a "..data" symlink swapped atomically, and the file a
// symlink through "..data". Only tests import it.
package configmapdir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Dir is one mounted ConfigMap directory holding one file.
type Dir struct {
	dir, name string
	n         int
}

// New returns the ConfigMap directory dir whose file is called name; nothing
// exists until the first Write.
func New(dir, name string) *Dir { return &Dir{dir: dir, name: name} }

// Path is the file as the program reads it.
func (d *Dir) Path() string { return filepath.Join(d.dir, d.name) }

// Write publishes a new version of the file.
func (d *Dir) Write(t testing.TB, content string) {
	t.Helper()
	d.n++
	v := fmt.Sprintf("..v%d", d.n)
	if err := os.Mkdir(filepath.Join(d.dir, v), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.dir, v, d.name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(d.dir, "..data_tmp")
	if err := os.Symlink(v, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(d.Path()); errors.Is(err, os.ErrNotExist) {
		if err := os.Symlink(filepath.Join("..data", d.name), d.Path()); err != nil {
			t.Fatal(err)
		}
	}
}

// Remove takes the file away as the kubelet does when the ConfigMap or the key
// is gone from an optional volume: the file's link and "..data" disappear.
func (d *Dir) Remove(t testing.TB) {
	t.Helper()
	for _, p := range []string{d.Path(), filepath.Join(d.dir, "..data")} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
}
