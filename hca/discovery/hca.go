package discovery

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ibkube/ibkube/hca/inventory"
)

// hcaRead is one device being read: the HCA filled in step by step and the
// problems found on the way, which make it unhealthy at the end.
type hcaRead struct {
	h        inventory.HCA
	dir      string
	nl       *netlinkAttrs
	problems []string
}

// readHCA reads one device. ok is false only when the device disappeared
// from both netlink and sysfs while we looked; an entry that is there but
// cannot be read (a looping or dangling link, a directory we may not read, a
// FIFO where an attribute should be) is reported unhealthy with the cause.
func (s *Scanner) readHCA(name string, nl *netlinkAttrs, chars []inventory.CharDevice) (inventory.HCA, bool) {
	r := &hcaRead{
		h: inventory.HCA{
			Name:        name,
			NUMANode:    inventory.UnknownNUMANode,
			Ports:       []inventory.Port{},
			CharDevices: chars,
		},
		dir: s.sys("class", "infiniband", name),
		nl:  nl,
	}
	if r.h.CharDevices == nil {
		r.h.CharDevices = []inventory.CharDevice{}
	}
	if !ValidDeviceName(name) {
		r.problem("name %q is not an RDMA device name ibkube can hand out (accepted: letters, digits, _ . -)", name)
	}
	if usable, present := r.checkEntry(); !usable {
		return r.h, present
	}
	r.readIdentity()
	r.readPCI()
	r.readPorts(s.netdevsByPort(filepath.Join(r.dir, "device", "net")))
	r.h.Healthy, r.h.HealthReason = health(r.h, r.problems)
	return r.h, true
}

func (r *hcaRead) problem(format string, args ...any) {
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

// attr reads one attribute of the device. A missing optional attribute is
// no problem; an unreadable one always is.
func (r *hcaRead) attr(rel, what string, required bool) (string, bool) {
	v, err := readAttr(filepath.Join(r.dir, rel))
	if err != nil {
		if required || !errors.Is(err, fs.ErrNotExist) {
			r.problem("cannot read %s: %s", what, cause(err))
		}
		return "", false
	}
	return v, true
}

// checkEntry looks at the device's sysfs directory. When it is unusable the
// HCA is finished (unhealthy, with what netlink said of it), and present is
// false only when the device is gone from both netlink and sysfs.
func (r *hcaRead) checkEntry() (usable, present bool) {
	fi, err := os.Stat(r.dir)
	if err == nil && fi.IsDir() {
		return true, true
	}
	var why string
	switch {
	case err == nil:
		why = "not a directory"
	case errors.Is(err, fs.ErrNotExist):
		if _, lerr := os.Lstat(r.dir); lerr != nil {
			if r.nl == nil {
				return false, false // removed while we looked
			}
			r.h.NodeGUID, r.h.Firmware = r.nl.nodeGUID, r.nl.fw
			r.h.HealthReason = "listed by RDMA netlink but not in sysfs"
			return false, true
		}
		why = "dangling symlink"
	default:
		why = cause(err)
	}
	if r.nl != nil {
		r.h.NodeGUID, r.h.Firmware = r.nl.nodeGUID, r.nl.fw
	}
	r.problem("sysfs entry class/infiniband/%s unusable: %s", r.h.Name, why)
	r.h.HealthReason = strings.Join(r.problems, "; ")
	return false, true
}

// readIdentity reads the node GUID and firmware version, falling back to
// what RDMA netlink reported.
func (r *hcaRead) readIdentity() {
	if v, ok := r.attr("node_guid", "node_guid", r.nl == nil); ok {
		if _, g, err := ParseGUID(v); err == nil {
			r.h.NodeGUID = g
		}
	} else if r.nl != nil {
		r.h.NodeGUID = r.nl.nodeGUID
	}
	if v, ok := r.attr("fw_ver", "fw_ver", false); ok {
		r.h.Firmware = v
	} else if r.nl != nil {
		r.h.Firmware = r.nl.fw
	}
}

// readPCI reads the PCI function the device link points at (absent for
// software devices such as rxe or siw).
func (r *hcaRead) readPCI() {
	target, err := os.Readlink(filepath.Join(r.dir, "device"))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.EINVAL) {
			// EINVAL: "device" is a directory, not a link (no PCI function).
			r.problem("cannot read the device link: %s", cause(err))
		}
		return
	}
	r.h.PCIAddress = filepath.Base(target)
	if v, ok := r.attr(filepath.Join("device", "vendor"), "device/vendor", true); ok {
		r.h.VendorID, _ = ParseHexID(v)
	}
	if v, ok := r.attr(filepath.Join("device", "device"), "device/device", true); ok {
		r.h.DeviceID, _ = ParseHexID(v)
	}
	if v, ok := r.attr(filepath.Join("device", "numa_node"), "device/numa_node", false); ok {
		if n, err := ParseNUMANode(v); err == nil {
			r.h.NUMANode = n
		}
	}
}
