package discovery

import "github.com/ibkube/ibkube/hca/inventory"

// MaxPKeys bounds the partition table read per port. The kernel makes one
// file per entry of the port's table (ports/<n>/pkeys/0 … pkey_tbl_len-1,
// drivers/infiniband/core/sysfs.c); mlx5 and mlx4 ports have 128. A longer
// table is reported as unreadable rather than read without end or cut
// short, since a cut table could hide a second tenant key.
const MaxPKeys = 128

// readPKeys reads a port's partition table from its sysfs directory
// (…/ports/<n>): the used entries in index order, or the reason the table
// cannot be trusted.
func readPKeys(portDir string) ([]inventory.PKeyEntry, string) {
	return readTable(portDir, "pkeys", "partition table", MaxPKeys, func(i int, v string) (inventory.PKeyEntry, bool, error) {
		k, err := inventory.ParsePKey(v)
		return inventory.PKeyEntry{Index: i, Key: k}, err == nil && !k.Empty(), err
	})
}

// readPortPKeys reads an InfiniBand port's partition table. A table that
// cannot be trusted is recorded on the port (PKeyError) and leaves the
// node without a partition, not the HCA unhealthy: verbs work on the
// default partition all the same.
func readPortPKeys(dir string, p *inventory.Port) error {
	if p.LinkLayer != inventory.LinkLayerInfiniBand {
		return nil
	}
	p.PKeys, p.PKeyError = readPKeys(dir)
	return nil
}
