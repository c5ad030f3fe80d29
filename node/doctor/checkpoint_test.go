package doctor

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestGatherKubeletPluginsBoundedCheckpoint puts what a broken or hostile
// node can hold in place of the kubelet's checkpoint: doctor reports each as
// an error naming the file, at once, instead of hanging on a FIFO with no
// writer or reading /dev/zero or a huge file into memory.
func TestGatherKubeletPluginsBoundedCheckpoint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		setup func(t *testing.T, path string)
		want  string
	}{
		{"fifo", func(t *testing.T, path string) {
			must(t, syscall.Mkfifo(path, 0o600))
		}, "not a regular file (a FIFO)"},
		{"dev-zero", func(t *testing.T, path string) {
			must(t, os.Symlink("/dev/zero", path))
		}, "not a regular file (a char device)"},
		{"huge-file", func(t *testing.T, path string) {
			f, err := os.Create(path)
			must(t, err)
			// Sparse: 208 MB on the file system's books, nothing on disk.
			must(t, f.Truncate(208<<20))
			must(t, f.Close())
		}, "longer than 16777216 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			tc.setup(t, filepath.Join(dir, kubeletCheckpoint))
			done := make(chan KubeletPluginFacts, 1)
			go func() { done <- gatherKubeletPlugins(dir) }()
			var f KubeletPluginFacts
			select {
			case f = <-done:
			case <-time.After(20 * time.Second): // bounds a failure only: the read is a few system calls
				t.Fatal("reading the checkpoint did not return")
			}
			if !strings.Contains(f.Error, tc.want) || !strings.Contains(f.Error, kubeletCheckpoint) {
				t.Errorf("Error = %q, want it to name %s and say %q", f.Error, kubeletCheckpoint, tc.want)
			}
			if f.Registered != nil {
				t.Errorf("Registered = %v from an unreadable checkpoint", f.Registered)
			}
		})
	}
}
