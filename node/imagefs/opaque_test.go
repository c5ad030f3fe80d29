package imagefs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// withoutCapSysAdmin runs read on an OS thread whose effective
// capabilities lack CAP_SYS_ADMIN, as the agent runs under the chart
// (capabilities: drop: [ALL]): the kernel then hides trusted.* xattrs
// from it. Capabilities belong to a thread; that thread is never unlocked,
// so it ends with the goroutine and nothing else runs on it.
func withoutCapSysAdmin(t *testing.T, read func() ([]byte, error)) ([]byte, error) {
	t.Helper()
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			done <- result{err: err}
			return
		}
		data[0].Effective &^= 1 << unix.CAP_SYS_ADMIN
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			done <- result{err: err}
			return
		}
		if trustedXattrsVisible() {
			done <- result{err: errors.New("CAP_SYS_ADMIN still effective after capset")}
			return
		}
		b, err := read()
		done <- result{b, err}
	}()
	r := <-done
	return r.b, r.err
}

// markedLayer is a layer from entries whose paths in marks get overlayfs's
// xattr (name -> value), as containerd's overlay snapshotter writes them.
func markedLayer(t *testing.T, entries map[string]string, marks map[string][2]string) string {
	t.Helper()
	dir := layer(t, entries)
	for p, kv := range marks {
		if err := unix.Lsetxattr(filepath.Join(dir, p), kv[0], []byte(kv[1]), 0); err != nil {
			t.Skipf("xattr %s unsupported here: %v", kv[0], err)
		}
	}
	return dir
}

// TestTrustedXattrHiddenWithoutCapSysAdmin: the kernel fact the agent
// works around: without CAP_SYS_ADMIN, getxattr of a set
// trusted.overlay.opaque answers ENODATA, as if it were absent.
func TestTrustedXattrHiddenWithoutCapSysAdmin(t *testing.T) {
	if os.Geteuid() != 0 || !trustedXattrsVisible() {
		t.Skip("setting trusted.* xattrs and dropping CAP_SYS_ADMIN need root with it")
	}
	t.Parallel()
	marked := markedLayer(t, map[string]string{"etc/": ""}, map[string][2]string{"etc": {"trusted.overlay.opaque", "y"}})
	_, err := withoutCapSysAdmin(t, func() ([]byte, error) {
		_, err := unix.Lgetxattr(filepath.Join(marked, "etc"), "trusted.overlay.opaque", make([]byte, 8))
		return nil, err
	})
	if !errors.Is(err, unix.ENODATA) {
		t.Fatalf("getxattr of a set trusted.overlay.opaque without CAP_SYS_ADMIN: %v; want ENODATA, as if absent", err)
	}
}

// checkRead compares a ReadFile's answer with wantErr, or else want.
func checkRead(t *testing.T, who string, got []byte, err, wantErr error, want string) {
	t.Helper()
	if wantErr != nil {
		if !errors.Is(err, wantErr) {
			t.Errorf("%s: ReadFile = %q, %v; want %v", who, got, err, wantErr)
		}
		return
	}
	if err != nil || string(got) != want {
		t.Errorf("%s: ReadFile = %q, %v; want %q", who, got, err, want)
	}
}

// TestUnionOpaqueWithoutCapSysAdmin: overlayfs marks an opaque directory
// with trusted.overlay.opaque, which a process without CAP_SYS_ADMIN
// cannot read (the kernel answers as if it were absent). Such a process
// honours what it can see (user.overlay.* with userxattr) and otherwise
// refuses a file found below a directory that may be opaque instead of
// returning a lower layer's file the kernel would hide.
func TestUnionOpaqueWithoutCapSysAdmin(t *testing.T) {
	if os.Geteuid() != 0 || !trustedXattrsVisible() {
		t.Skip("setting trusted.* xattrs and dropping CAP_SYS_ADMIN need root with it")
	}
	t.Parallel()
	type spec struct {
		entries map[string]string
		marks   map[string][2]string
	}
	lower := spec{entries: map[string]string{"etc/passwd": "lower's passwd"}}
	group := map[string]string{"etc/group": "g"}
	plain, usr := spec{entries: group}, spec{entries: map[string]string{"usr/": ""}}
	opaque := spec{group, map[string][2]string{"etc": {"trusted.overlay.opaque", "y"}}}
	userOpaque := spec{group, map[string][2]string{"etc": {"user.overlay.opaque", "y"}}}
	for _, tc := range []struct {
		name                     string
		userXattr                bool
		layers                   []spec
		privileged, unprivileged error
		want                     string
	}{
		{name: "opaque /etc hides the lower passwd", layers: []spec{opaque, lower}, privileged: ErrNotExist, unprivileged: ErrOpacityUnknown},
		{name: "a plain /etc above the passwd's layer cannot be told from an opaque one", layers: []spec{plain, lower}, unprivileged: ErrOpacityUnknown, want: "lower's passwd"},
		{name: "the topmost /etc's own passwd is certain", layers: []spec{usr, lower, plain}, want: "lower's passwd"},
		{name: "userxattr marks are honoured without privilege", userXattr: true, layers: []spec{userOpaque, lower}, privileged: ErrNotExist, unprivileged: ErrNotExist},
		{name: "userxattr mount without a mark merges", userXattr: true, layers: []spec{plain, lower}, want: "lower's passwd"},
		{name: "a trusted mark is not read on a userxattr mount", userXattr: true, layers: []spec{opaque, lower}, want: "lower's passwd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u := Union{UserXattr: tc.userXattr}
			for _, l := range tc.layers {
				u.Layers = append(u.Layers, markedLayer(t, l.entries, l.marks))
			}
			read := func() ([]byte, error) { return u.ReadFile(context.Background(), "/etc/passwd", 1024) }
			got, err := read()
			checkRead(t, "with CAP_SYS_ADMIN", got, err, tc.privileged, tc.want)
			got, err = withoutCapSysAdmin(t, read)
			checkRead(t, "without CAP_SYS_ADMIN", got, err, tc.unprivileged, tc.want)
		})
	}
}

// TestUnionXattrWhiteouts: a directory whose opaque mark is "x" holds the
// other form of whiteout, a zero-size regular file marked
// overlay.whiteout (Documentation/filesystems/overlayfs.rst, "whiteouts
// and opaque directories"); the same empty file without the mark is a file.
func TestUnionXattrWhiteouts(t *testing.T) {
	if os.Geteuid() != 0 || !trustedXattrsVisible() {
		t.Skip("trusted.* xattrs need root with CAP_SYS_ADMIN")
	}
	t.Parallel()
	lower := layer(t, map[string]string{"etc/passwd": "lower's passwd"})
	whiteout := markedLayer(t, map[string]string{"etc/passwd": ""}, map[string][2]string{
		"etc": {"trusted.overlay.opaque", "x"}, "etc/passwd": {"trusted.overlay.whiteout", ""},
	})
	if b, err := (Union{Layers: []string{whiteout, lower}}).ReadFile(context.Background(), "/etc/passwd", 1024); !errors.Is(err, ErrNotExist) {
		t.Errorf("xattr whiteout: ReadFile = %q, %v; want ErrNotExist", b, err)
	}
	empty := markedLayer(t, map[string]string{"etc/passwd": ""}, map[string][2]string{"etc": {"trusted.overlay.opaque", "x"}})
	if b, err := (Union{Layers: []string{empty, lower}}).ReadFile(context.Background(), "/etc/passwd", 1024); err != nil || len(b) != 0 {
		t.Errorf("empty file without the whiteout mark: ReadFile = %q, %v; want it empty", b, err)
	}
}

// TestUnionMergeHiddenWithoutCapSysAdmin: the agent's setting. Without
// CAP_SYS_ADMIN a directory's hidden mark reads as merged, so /etc touched
// in a later layer keeps the lower layer's passwd (the common image), and
// the one case it cannot tell (an opaque /etc above) reads the lower passwd
// too; with the capability every mark is honoured.
func TestUnionMergeHiddenWithoutCapSysAdmin(t *testing.T) {
	if os.Geteuid() != 0 || !trustedXattrsVisible() {
		t.Skip("setting trusted.* xattrs and dropping CAP_SYS_ADMIN need root with it")
	}
	t.Parallel()
	lower := layer(t, map[string]string{"etc/passwd": "lower's passwd"})
	plain := layer(t, map[string]string{"etc/group": "g"})
	opaque := markedLayer(t, map[string]string{"etc/group": "g"}, map[string][2]string{"etc": {"trusted.overlay.opaque", "y"}})
	const found = "lower's passwd"
	for _, tc := range []struct {
		name                       string
		layers                     []string
		privileged                 error
		wantPrivileged, wantHidden string
	}{
		{name: "a plain /etc above the passwd's layer merges", layers: []string{plain, lower}, wantPrivileged: found, wantHidden: found},
		{name: "an opaque /etc is honoured only where its mark can be read", layers: []string{opaque, lower}, privileged: ErrNotExist, wantHidden: found},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u := Union{Layers: tc.layers, MergeHidden: true}
			read := func() ([]byte, error) { return u.ReadFile(context.Background(), "/etc/passwd", 1024) }
			got, err := read()
			checkRead(t, "with CAP_SYS_ADMIN", got, err, tc.privileged, tc.wantPrivileged)
			got, err = withoutCapSysAdmin(t, read)
			checkRead(t, "without CAP_SYS_ADMIN", got, err, nil, tc.wantHidden)
		})
	}
}
