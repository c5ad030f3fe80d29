package discovery

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// CheckSysfsRoot tells a command run by a person why a sysfs root cannot
// list RDMA devices, where Scan alone would report "no HCAs": the root does
// not exist or is not a directory; it is the real /sys but not a sysfs mount
// (a container that did not mount it); or it has no class/infiniband (the
// RDMA core is not loaded, or the path is not a sysfs tree). The agent does
// not call it: for the agent a missing class/infiniband is a node whose
// drivers load later.
func CheckSysfsRoot(root string) error {
	fi, err := os.Stat(root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("sysfs root %s does not exist; accepted: /sys, or a directory laid out like it", root)
	case err != nil:
		return fmt.Errorf("sysfs root: %w", err)
	case !fi.IsDir():
		return fmt.Errorf("sysfs root %s is not a directory; accepted: /sys, or a directory laid out like it", root)
	}
	if filepath.Clean(root) == "/sys" {
		var st unix.Statfs_t
		if err := unix.Statfs(root, &st); err != nil {
			return fmt.Errorf("sysfs root: statfs %s: %w", root, err)
		}
		if st.Type != unix.SYSFS_MAGIC {
			return fmt.Errorf("%s is not a sysfs mount (filesystem magic %#x, sysfs is %#x): mount sysfs there, or pass the host's sysfs as --sysfs-root", root, st.Type, unix.SYSFS_MAGIC)
		}
	}
	class := filepath.Join(root, "class", "infiniband")
	fi, err = os.Stat(class)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("no %s: the RDMA core is not loaded (modprobe mlx5_ib, or install the NIC driver), or %s is not a sysfs tree", class, root)
	case err != nil:
		return fmt.Errorf("sysfs root: %w", err)
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory, so %s is not a sysfs tree", class, root)
	}
	return nil
}
