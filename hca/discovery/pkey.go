package discovery

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/ibkube/ibkube/hca/inventory"
)

// MaxPKeys bounds the partition table read per port. The kernel makes one
// file per entry of the port's table (ports/<n>/pkeys/0 … pkey_tbl_len-1,
// drivers/infiniband/core/sysfs.c); mlx5 and mlx4 ports have 128. A longer
// table is reported as unreadable rather than read without end or cut
// short, since a cut table could hide a second tenant key.
const MaxPKeys = 128

// readPKeys reads a port's partition table from dir (ports/<n>/pkeys): the
// used entries in index order, or the reason the table cannot be trusted.
// Entries are read by index, never by listing the directory, so a tree
// with millions of names costs no more than MaxPKeys+1 lookups.
func readPKeys(dir string) ([]inventory.PKeyEntry, string) {
	var out []inventory.PKeyEntry
	for i := 0; i <= MaxPKeys; i++ {
		path := filepath.Join(dir, strconv.Itoa(i))
		v, err := readAttr(path)
		if errors.Is(err, fs.ErrNotExist) {
			if i == 0 {
				if _, serr := os.Stat(dir); serr != nil {
					return nil, "no partition table (pkeys): " + cause(serr)
				}
				return nil, "empty partition table (no pkeys/0)"
			}
			return out, ""
		}
		if i == MaxPKeys {
			return nil, fmt.Sprintf("partition table longer than %d entries", MaxPKeys)
		}
		if err != nil {
			return nil, fmt.Sprintf("cannot read pkeys/%d: %s", i, cause(err))
		}
		k, err := inventory.ParsePKey(v)
		if err != nil {
			return nil, fmt.Sprintf("pkeys/%d: %s", i, err)
		}
		if k.Empty() {
			continue
		}
		out = append(out, inventory.PKeyEntry{Index: i, Key: k})
	}
	return out, ""
}

// readPortPKeys reads an InfiniBand port's partition table. A table that
// cannot be trusted is recorded on the port (PKeyError) and leaves the
// node without a partition, not the HCA unhealthy: verbs work on the
// default partition all the same.
func readPortPKeys(dir string, p *inventory.Port) error {
	if p.LinkLayer != inventory.LinkLayerInfiniBand {
		return nil
	}
	p.PKeys, p.PKeyError = readPKeys(filepath.Join(dir, "pkeys"))
	return nil
}
