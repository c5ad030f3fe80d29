package imagefs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/api/types"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// layer builds a directory from entries: "path" -> content, "path/" a
// directory, "path@" -> a symlink to content, "path|" a FIFO.
func layer(t testing.TB, entries map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, v := range entries {
		p := filepath.Join(dir, strings.TrimRight(name, "/@|"))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case strings.HasSuffix(name, "/"):
			err = os.MkdirAll(p, 0o755)
		case strings.HasSuffix(name, "@"):
			err = os.Symlink(v, p)
		case strings.HasSuffix(name, "|"):
			err = syscall.Mkfifo(p, 0o644)
		default:
			err = os.WriteFile(p, []byte(v), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestUnionReadFile(t *testing.T) {
	t.Parallel()
	secret := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(secret, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	passwd := "mpiuser:x:1000:1000::/home/mpiuser:/bin/sh\n"
	for _, tc := range []struct {
		name    string
		layers  []map[string]string
		want    string
		wantErr error
	}{
		{name: "one directory", layers: []map[string]string{{"etc/passwd": passwd}}, want: passwd},
		{name: "upper over lower", layers: []map[string]string{{"etc/passwd": "upper"}, {"etc/passwd": "lower"}}, want: "upper"},
		{name: "lower shows through an empty upper", layers: []map[string]string{{}, {"etc/": ""}, {"etc/passwd": "lowest"}}, want: "lowest"},
		{name: "a directory merges past a layer without it", layers: []map[string]string{{"etc/": ""}, {"usr/": ""}, {"etc/passwd": "lowest"}}, want: "lowest"},
		{name: "a file in a lower layer hides that layer's lower directories", layers: []map[string]string{{"etc/": ""}, {"etc/passwd": "file"}, {"etc/passwd/": ""}}, want: "file"},
		{name: "a non-directory stops the merge", layers: []map[string]string{{"etc/": ""}, {"etc": "a file"}, {"etc/passwd": "below a file"}}, wantErr: ErrNotExist},
		{name: "absent", layers: []map[string]string{{"etc/": ""}}, wantErr: ErrNotExist},
		{name: "relative symlink inside the image", layers: []map[string]string{{"etc/passwd@": "../usr/share/passwd", "usr/share/passwd": passwd}}, want: passwd},
		{name: "symlink to the host's secret resolves in the image", layers: []map[string]string{{"etc/passwd@": secret}}, wantErr: ErrNotExist},
		{name: "dot-dot climbs no higher than the image root", layers: []map[string]string{{"etc/passwd@": "../../../../../../../../" + secret}}, wantErr: ErrNotExist},
		{name: "symlinked directory across layers", layers: []map[string]string{{"etc@": "/real"}, {"real/passwd": passwd}}, want: passwd},
		{name: "symlink loop", layers: []map[string]string{{"etc/passwd@": "/etc/passwd"}}, wantErr: ErrLoop},
		{name: "a FIFO is not read", layers: []map[string]string{{"etc/passwd|": ""}}, wantErr: ErrNotRegular},
		{name: "a directory is not read", layers: []map[string]string{{"etc/passwd/": ""}}, wantErr: ErrNotRegular},
		{name: "over the bound", layers: []map[string]string{{"etc/passwd": strings.Repeat("x", 1025)}}, wantErr: ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var u Union
			for _, l := range tc.layers {
				u.Layers = append(u.Layers, layer(t, l))
			}
			done := make(chan struct{})
			var got []byte
			var err error
			go func() { got, err = u.ReadFile(context.Background(), "/etc/passwd", 1024); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("ReadFile hangs")
			}
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v (read %q)", err, tc.wantErr, got)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("ReadFile = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestUnionWhiteouts: overlayfs's markers, as containerd's overlay
// snapshotter writes them when it applies a layer (a 0:0 char device for a
// deleted file, trusted.overlay.opaque=y for a replaced directory).
func TestUnionWhiteouts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mknod of a whiteout and trusted.* xattrs need root")
	}
	t.Parallel()
	upper := layer(t, map[string]string{"etc/": ""})
	lower := layer(t, map[string]string{"etc/passwd": "deleted above"})
	if err := unix.Mknod(filepath.Join(upper, "etc/passwd"), unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := (Union{Layers: []string{upper, lower}}).ReadFile(context.Background(), "/etc/passwd", 1024); !errors.Is(err, ErrNotExist) {
		t.Errorf("whited-out file: err = %v, want ErrNotExist", err)
	}
	opaqueUpper := layer(t, map[string]string{"etc/group": "g"})
	if err := unix.Setxattr(filepath.Join(opaqueUpper, "etc"), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		t.Skipf("trusted xattrs unsupported here: %v", err)
	}
	if _, err := (Union{Layers: []string{opaqueUpper, lower}}).ReadFile(context.Background(), "/etc/passwd", 1024); !errors.Is(err, ErrNotExist) {
		t.Errorf("file below an opaque directory: err = %v, want ErrNotExist", err)
	}
}

// FuzzUnionReadFile: whatever a symlink in an image says, and whatever path
// is asked, a read never leaves the image's layers and never hangs.
func FuzzUnionReadFile(f *testing.F) {
	for _, s := range []string{"/etc/shadow", "../../../../etc/shadow", "/etc/passwd", "a/../../b", "//etc///passwd", "."} {
		f.Add(s, "/etc/passwd")
	}
	outside := filepath.Join(f.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("host secret"), 0o600); err != nil {
		f.Fatal(err)
	}
	root := f.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		f.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "etc", "abs")); err != nil {
		f.Fatal(err)
	}
	link := filepath.Join(root, "etc", "passwd")
	f.Fuzz(func(t *testing.T, target, name string) {
		if strings.ContainsRune(target, 0) || target == "" || len(target) > 4000 {
			return
		}
		_ = os.Remove(link)
		if err := os.Symlink(target, link); err != nil {
			return
		}
		b, _ := (Union{Layers: []string{root}}).ReadFile(context.Background(), name, 1<<10)
		if strings.Contains(string(b), "host secret") {
			t.Fatalf("read %q through %q reached a file outside the image", name, target)
		}
	})
}

// TestUnionOf: the layers and where the marks are, from the mounts
// containerd's snapshotters return (overlay: upperdir over lowerdirs,
// "userxattr" for rootless; native: one bind mount).
func TestUnionOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		mount   *types.Mount
		want    Union
		wantErr bool
	}{
		{name: "overlay", mount: &types.Mount{Type: "overlay", Options: []string{"index=off", "workdir=/s/3/work", "upperdir=/s/3/fs", "lowerdir=/s/2/fs:/s/1/fs"}},
			want: Union{Layers: []string{"/s/3/fs", "/s/2/fs", "/s/1/fs"}}},
		{name: "rootless overlay", mount: &types.Mount{Type: "overlay", Options: []string{"userxattr", "upperdir=/s/3/fs", "lowerdir=/s/1/fs"}},
			want: Union{Layers: []string{"/s/3/fs", "/s/1/fs"}, UserXattr: true}},
		{name: "native", mount: &types.Mount{Type: "bind", Source: "/s/1/fs", Options: []string{"rbind", "rw"}},
			want: Union{Layers: []string{"/s/1/fs"}}},
		{name: "block device", mount: &types.Mount{Type: "ext4", Source: "/dev/loop0"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := UnionOf([]*types.Mount{tc.mount})
			if (err != nil) != tc.wantErr {
				t.Fatalf("UnionOf: %v, want error %v", err, tc.wantErr)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("UnionOf (-want +got):\n%s", d)
			}
		})
	}
}
