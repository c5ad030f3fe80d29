package discovery_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/hca/inventory"
)

// scanWithin scans dir, failing the test if the scan does not return within
// the deadline (a FIFO read would block forever).
func scanWithin(t *testing.T, dir string, d time.Duration) inventory.Node {
	t.Helper()
	type result struct {
		node inventory.Node
		err  error
	}
	done := make(chan result, 1)
	go func() {
		n, err := newScanner(t, dir, nil).Scan(context.Background())
		done <- result{n, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.node
	case <-time.After(d):
		t.Fatalf("Scan did not return within %v", d)
		return inventory.Node{}
	}
}

// scanBrokenHB scans a fresh HB tree (one HCA, mlx5_0, with one InfiniBand
// port) after mutate has broken it, within scanWithin's deadline.
func scanBrokenHB(t *testing.T, mutate func(dir string) error) inventory.Node {
	t.Helper()
	dir := fixture.BuildTemp(t, fixture.HB)
	if err := mutate(dir); err != nil {
		t.Fatal(err)
	}
	return scanWithin(t, dir, 10*time.Second)
}

// TestScanHostileTrees: what a broken or malicious tree holds is reported
// on the HCA it concerns with the real cause, never hangs the scan, never
// reads without bound, and never makes an HCA vanish.
func TestScanHostileTrees(t *testing.T) {
	t.Parallel()
	ib := func(dir string, elem ...string) string {
		return filepath.Join(append([]string{fixture.SysfsRoot(dir), "class", "infiniband"}, elem...)...)
	}
	replace := func(path string, make func(string) error) error {
		if err := os.Remove(path); err != nil {
			return err
		}
		return make(path)
	}
	tests := []struct {
		name   string
		mutate func(dir string) error
		hca    string
		reason string
	}{
		{
			name: "FIFO as port state",
			mutate: func(dir string) error {
				return replace(ib(dir, "mlx5_0", "ports", "1", "state"), func(p string) error { return unix.Mkfifo(p, 0o644) })
			},
			hca: "mlx5_0", reason: "port 1: cannot read state: not a regular file (a FIFO)",
		},
		{
			name: "vendor linked to /dev/zero",
			mutate: func(dir string) error {
				return replace(ib(dir, "mlx5_0", "device", "vendor"), func(p string) error { return os.Symlink("/dev/zero", p) })
			},
			hca: "mlx5_0", reason: "cannot read device/vendor: not a regular file (a char device)",
		},
		{
			name: "attribute far longer than a page",
			mutate: func(dir string) error {
				return replace(ib(dir, "mlx5_0", "ports", "1", "phys_state"), func(p string) error {
					return os.WriteFile(p, []byte(strings.Repeat("5: LinkUp ", 1<<16)), 0o644)
				})
			},
			hca: "mlx5_0", reason: "port 1: cannot read phys_state: longer than 4096 bytes",
		},
		{
			name: "directory where the port state should be",
			mutate: func(dir string) error {
				return replace(ib(dir, "mlx5_0", "ports", "1", "state"), func(p string) error { return os.Mkdir(p, 0o755) })
			},
			hca: "mlx5_0", reason: "port 1: cannot read state: not a regular file (a directory)",
		},
		{
			name:   "looping HCA entry",
			mutate: func(dir string) error { return os.Symlink("mlx5_9", ib(dir, "mlx5_9")) },
			hca:    "mlx5_9", reason: "sysfs entry class/infiniband/mlx5_9 unusable: too many levels of symbolic links",
		},
		{
			name: "dangling HCA entry",
			mutate: func(dir string) error {
				return os.Symlink("../../devices/pci0000:00/gone/infiniband/mlx5_7", ib(dir, "mlx5_7"))
			},
			hca: "mlx5_7", reason: "sysfs entry class/infiniband/mlx5_7 unusable: dangling symlink",
		},
		{
			name:   "HCA entry that is a file",
			mutate: func(dir string) error { return os.WriteFile(ib(dir, "mlx5_6"), nil, 0o644) },
			hca:    "mlx5_6", reason: "sysfs entry class/infiniband/mlx5_6 unusable: not a directory",
		},
		{
			name:   "terminal escape in a device name",
			mutate: func(dir string) error { return os.Symlink("mlx5_0", ib(dir, "mlx5_\x1b[2J")) },
			hca:    "mlx5_\x1b[2J", reason: `name "mlx5_\x1b[2J" is not an RDMA device name ibkube can hand out (accepted: letters, digits, _ . -); no uverbs char device in sysfs (is ib_uverbs loaded?)`,
		},
		{
			name:   "ports directory missing",
			mutate: func(dir string) error { return os.RemoveAll(ib(dir, "mlx5_0", "ports")) },
			hca:    "mlx5_0", reason: "no ports in sysfs",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := hcaByName(t, scanBrokenHB(t, tc.mutate), tc.hca)
			if h.Healthy || h.HealthReason != tc.reason {
				t.Errorf("%q: healthy=%v reason=%q, want false %q", tc.hca, h.Healthy, h.HealthReason, tc.reason)
			}
		})
	}
}

// TestScanUnreadableDirectory needs a user that permissions stop.
func TestScanUnreadableDirectory(t *testing.T) {
	t.Parallel()
	if os.Geteuid() == 0 {
		t.Skip("root reads through mode 000; the directory case is covered by TestScanHostileTrees")
	}
	dir := fixture.BuildTemp(t, fixture.HB)
	ports := filepath.Join(fixture.SysfsRoot(dir), "class", "infiniband", "mlx5_0", "ports")
	if err := os.Chmod(ports, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(ports, 0o755) })
	node := scanWithin(t, dir, 10*time.Second)
	if h := node.HCAs[0]; h.Healthy || h.HealthReason != "cannot list ports: permission denied" {
		t.Errorf("healthy=%v reason=%q", h.Healthy, h.HealthReason)
	}
}

func TestCheckSysfsRoot(t *testing.T) {
	t.Parallel()
	withIB := fixture.BuildTemp(t, fixture.HB)
	noIB := t.TempDir()
	if err := os.MkdirAll(filepath.Join(noIB, "class", "net"), 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "sys")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		root, want string
	}{
		{fixture.SysfsRoot(withIB), ""},
		{filepath.Join(noIB, "missing"), "sysfs root " + filepath.Join(noIB, "missing") + " does not exist; accepted: /sys, or a directory laid out like it"},
		{file, "sysfs root " + file + " is not a directory; accepted: /sys, or a directory laid out like it"},
		{noIB, "no " + filepath.Join(noIB, "class", "infiniband") + ": the RDMA core is not loaded (modprobe mlx5_ib, or install the NIC driver), or " + noIB + " is not a sysfs tree"},
	}
	for _, tc := range tests {
		err := discovery.CheckSysfsRoot(tc.root)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("CheckSysfsRoot(%s) = %q, want %q", tc.root, got, tc.want)
		}
	}
	// This machine's /sys is a sysfs mount without RDMA devices: the error
	// names class/infiniband, not the mount.
	var st unix.Statfs_t
	if err := unix.Statfs("/sys", &st); err == nil && st.Type == unix.SYSFS_MAGIC {
		if _, err := os.Stat("/sys/class/infiniband"); err != nil {
			if err := discovery.CheckSysfsRoot("/sys"); err == nil || !strings.Contains(err.Error(), "no /sys/class/infiniband") {
				t.Errorf("CheckSysfsRoot(/sys) = %v", err)
			}
		}
	}
}
