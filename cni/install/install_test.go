package install

import (
	"os"
	"path/filepath"
	"testing"
)

func TestBinary(t *testing.T) {
	t.Parallel()
	src := filepath.Join(t.TempDir(), "ibkube-cni")
	if err := os.WriteFile(src, []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for i, want := range []bool{true, false} {
		changed, err := Binary(src, dir, "ibkube-cni")
		if err != nil || changed != want {
			t.Fatalf("Binary() #%d = %v, %v; want changed=%v", i+1, changed, err, want)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, "ibkube-cni"))
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("installed file: %v, %v; want mode 0755", fi, err)
	}
	if err := os.WriteFile(src, []byte("v2"), 0o644); err != nil {
		t.Fatal(err)
	}
	if changed, err := Binary(src, dir, "ibkube-cni"); err != nil || !changed {
		t.Fatalf("Binary() after an upgrade = %v, %v; want changed", changed, err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "ibkube-cni")); string(got) != "v2" {
		t.Errorf("installed content = %q, want v2", got)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("dir holds %d entries, want only the binary (no temp files)", len(entries))
	}
	if _, err := Binary(src, filepath.Join(dir, "missing"), "ibkube-cni"); err == nil {
		t.Error("Binary() into a missing dir succeeded")
	}
}
