package discovery

import (
	"path/filepath"
	"strconv"

	"github.com/ibkube/ibkube/hca/inventory"
)

// MaxGIDs bounds the GID table read per port. The kernel makes one file per
// entry of the port's table, unused ones included (ports/<n>/gids/0 …
// gid_tbl_len-1, Documentation/ABI/stable/sysfs-class-infiniband); a
// ConnectX RoCE port has 255 or 256. A longer table is reported as
// unreadable rather than read without end.
const MaxGIDs = 1024

// zeroGID is how the kernel prints an unused entry.
const zeroGID = "0000:0000:0000:0000:0000:0000:0000:0000"

// ReadGIDs reads a RoCE port's GID table from its sysfs directory
// (…/ports/<n>): the used entries in index order, each with its type and
// netdev, or the reason the table cannot be trusted. Entries are read by
// index, never by listing the directory; an unused entry is skipped
// without reading its attributes (the kernel refuses those reads, EINVAL),
// so a sparse table (an address removed between two others) keeps its
// indexes.
func ReadGIDs(portDir string) ([]inventory.GIDEntry, string) {
	return readTable(portDir, "gids", "GID table", MaxGIDs, func(i int, v string) (inventory.GIDEntry, bool, error) {
		if _, err := ParseGID(v); err != nil || v == zeroGID {
			return inventory.GIDEntry{}, false, err
		}
		idx := strconv.Itoa(i)
		e := inventory.GIDEntry{Index: i, GID: v}
		// A type or netdev that cannot be read leaves the entry without
		// it: NCCL does the same (ncclIbRoceGetVersionNum skips on EINVAL).
		if t, err := readAttr(filepath.Join(portDir, "gid_attrs", "types", idx)); err == nil {
			e.Type = t
		}
		if n, err := readAttr(filepath.Join(portDir, "gid_attrs", "ndevs", idx)); err == nil && ValidDeviceName(n) {
			e.Netdev = n
		}
		return e, true, nil
	})
}

// readPortGIDs reads a RoCE port's GID table. A table that cannot be
// trusted is recorded on the port (GIDError) and leaves containers without
// a GID index, not the HCA unhealthy.
func readPortGIDs(dir string, p *inventory.Port) error {
	if p.LinkLayer != inventory.LinkLayerEthernet {
		return nil
	}
	p.GIDs, p.GIDError = ReadGIDs(dir)
	if i, ok := p.RoCEv2IPv4GIDIndex(); ok {
		p.RoCEv2IPv4GID = &i
	}
	return nil
}
