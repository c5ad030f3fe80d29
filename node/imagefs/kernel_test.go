package imagefs

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestUnionAgreesWithKernelOverlay: for each image, the kernel's own
// overlayfs, mounted over the same layers, and Union read the same
// /etc/passwd (or find none). Symlinks are relative: the mounted overlay
// resolves an absolute one against the host's root, Union against the
// image's.
func TestUnionAgreesWithKernelOverlay(t *testing.T) {
	if os.Geteuid() != 0 || !trustedXattrsVisible() {
		t.Skip("mounting overlayfs and setting trusted.* xattrs need root with CAP_SYS_ADMIN")
	}
	type marked struct {
		entries map[string]string
		marks   map[string][2]string
		char    []string // whiteouts as the 0:0 char device
	}
	opaque := func(v string) [2]string { return [2]string{"trusted.overlay.opaque", v} }
	for _, tc := range []struct {
		name   string
		layers []marked
	}{
		{"lower through upper", []marked{{entries: map[string]string{"etc/group": "g"}}, {entries: map[string]string{"etc/passwd": "lower"}}}},
		{"upper wins", []marked{{entries: map[string]string{"etc/passwd": "upper"}}, {entries: map[string]string{"etc/passwd": "lower"}}}},
		{"merge past a layer without the directory", []marked{{entries: map[string]string{"etc/": ""}}, {entries: map[string]string{"usr/": ""}}, {entries: map[string]string{"etc/passwd": "lowest"}}}},
		{"a file stops the merge", []marked{{entries: map[string]string{"etc/": ""}}, {entries: map[string]string{"etc": "f"}}, {entries: map[string]string{"etc/passwd": "lowest"}}}},
		{"char-device whiteout", []marked{{entries: map[string]string{"etc/": ""}, char: []string{"etc/passwd"}}, {entries: map[string]string{"etc/passwd": "lower"}}}},
		{"whiteout of the directory", []marked{{char: []string{"etc"}}, {entries: map[string]string{"etc/passwd": "lower"}}}},
		{"opaque y", []marked{{entries: map[string]string{"etc/group": "g"}, marks: map[string][2]string{"etc": opaque("y")}}, {entries: map[string]string{"etc/passwd": "lower"}}}},
		{"opaque y in a middle layer", []marked{{entries: map[string]string{"etc/": ""}}, {entries: map[string]string{"etc/group": "g"}, marks: map[string][2]string{"etc": opaque("y")}}, {entries: map[string]string{"etc/passwd": "lower"}}}},
		{"opaque x merges", []marked{{entries: map[string]string{"etc/group": "g"}, marks: map[string][2]string{"etc": opaque("x")}}, {entries: map[string]string{"etc/passwd": "lower"}}}},
		{"xattr whiteout", []marked{{entries: map[string]string{"etc/passwd": ""}, marks: map[string][2]string{"etc": opaque("x"), "etc/passwd": {"trusted.overlay.whiteout", ""}}}, {entries: map[string]string{"etc/passwd": "lower"}}}},
		{"relative symlink across layers", []marked{{entries: map[string]string{"etc/passwd@": "../usr/passwd"}}, {entries: map[string]string{"usr/passwd": "linked"}}}},
		{"symlinked directory", []marked{{entries: map[string]string{"etc@": "usr/etc"}}, {entries: map[string]string{"usr/etc/passwd": "via dir"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var u Union
			for _, l := range tc.layers {
				dir := markedLayer(t, l.entries, l.marks)
				charWhiteouts(t, dir, l.char)
				u.Layers = append(u.Layers, dir)
			}
			merged := t.TempDir()
			if err := unix.Mount("overlay", merged, "overlay", unix.MS_RDONLY, "lowerdir="+strings.Join(u.Layers, ":")); err != nil {
				t.Skipf("mount overlay: %v", err)
			}
			t.Cleanup(func() { _ = unix.Unmount(merged, unix.MNT_DETACH) })
			kernel, kerr := os.ReadFile(filepath.Join(merged, "etc/passwd"))
			got, err := u.ReadFile(context.Background(), "/etc/passwd", 1024)
			switch {
			case errors.Is(kerr, fs.ErrNotExist) || errors.Is(kerr, unix.ENOTDIR):
				if !errors.Is(err, ErrNotExist) {
					t.Errorf("the kernel finds no /etc/passwd; Union read %q, %v", got, err)
				}
			case kerr != nil:
				t.Fatalf("kernel read: %v", kerr)
			case err != nil || string(got) != string(kernel):
				t.Errorf("the kernel reads %q; Union %q, %v", kernel, got, err)
			}
		})
	}
}

// charWhiteouts adds whiteouts of the usual form, 0:0 character devices,
// at paths in dir.
func charWhiteouts(t *testing.T, dir string, paths []string) {
	t.Helper()
	for _, c := range paths {
		p := filepath.Join(dir, c)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mknod(p, unix.S_IFCHR, 0); err != nil {
			t.Fatal(err)
		}
	}
}
