// Package hostileimage builds image layers on disk that make a lookup of
// /etc/passwd as costly as an image can: the tests of the image read and of
// the NRI plugin that calls it share them.
package hostileimage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Layers returns layers directories, each holding a chain of depth nested
// directories with, at its bottom, a symlink back through the whole chain
// to itself; /etc/passwd points into it. A lookup that walks it follows
// symlinks until its bound, each hop through the whole chain in every layer.
func Layers(tb testing.TB, depth, layers int) []string {
	tb.Helper()
	out := make([]string, 0, layers)
	for range layers {
		out = append(out, layer(tb, depth))
	}
	return out
}

func layer(tb testing.TB, depth int) string {
	tb.Helper()
	dir := tb.TempDir()
	target := "/" + strings.Repeat("d/", depth) + "s"
	if err := os.Mkdir(filepath.Join(dir, "etc"), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "etc", "passwd")); err != nil {
		tb.Fatal(err)
	}
	// Directory by directory from descriptors: the chain's host path is
	// longer than PATH_MAX.
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	for i := 0; i < depth && err == nil; i++ {
		if err = unix.Mkdirat(fd, "d", 0o755); err == nil {
			var next int
			next, err = unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY, 0)
			unix.Close(fd)
			fd = next
		}
	}
	if err == nil {
		err = unix.Symlinkat(target, fd, "s")
		unix.Close(fd)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return dir
}
