package imagefs

import (
	"bytes"
	"os"

	"golang.org/x/sys/unix"
)

// trustedXattrsVisible tells whether this process reads trusted.*
// extended attributes: the kernel shows them only to a task with
// CAP_SYS_ADMIN in the initial user namespace (fs/xattr.c
// xattr_permission; getxattr answers ENODATA to any other, as if the
// attribute were absent), so without it an opaque directory cannot be told
// from a plain one.
func trustedXattrsVisible() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil || data[0].Effective&(1<<unix.CAP_SYS_ADMIN) == 0 {
		return false
	}
	return initialUserNamespace()
}

// initialUserNamespace tells whether this process's user namespace maps
// every uid to itself, as only the initial one does.
func initialUserNamespace() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false
	}
	f := bytes.Fields(b)
	return len(f) == 3 && string(f[0]) == "0" && string(f[1]) == "0" && string(f[2]) == "4294967295"
}
