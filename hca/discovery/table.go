package discovery

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// readTable reads a per-port table the kernel makes as one file per entry
// (ports/<n>/<name>/0 … len-1, unused entries included: the GID and
// partition tables, Documentation/ABI/stable/sysfs-class-infiniband).
// Entries are read by index, never by listing the directory, so a tree with
// millions of names costs no more than max+1 lookups, and a table longer
// than max is refused rather than read without end or cut short (a cut
// table could hide the entry that matters). entry parses each index's
// value in order into the entry to keep, or says it is unused (false). The
// kept entries come back in index order; a table that cannot be trusted
// (entry's error or any other reason) comes back as none and the text
// recorded on the port.
func readTable[T any](portDir, name, title string, max int, entry func(i int, v string) (T, bool, error)) ([]T, string) {
	var out []T
	why := walkTable(portDir, name, title, max, func(i int, v string) error {
		e, used, err := entry(i, v)
		if err != nil {
			return err
		}
		if used {
			out = append(out, e)
		}
		return nil
	})
	if why != "" {
		return nil, why
	}
	return out, ""
}

// walkTable hands readTable each index and value in order, and says why
// the table cannot be trusted ("" when whole).
func walkTable(portDir, name, title string, max int, entry func(i int, v string) error) string {
	dir := filepath.Join(portDir, name)
	for i := 0; i <= max; i++ {
		v, err := readAttr(filepath.Join(dir, strconv.Itoa(i)))
		if errors.Is(err, fs.ErrNotExist) {
			if i > 0 {
				return ""
			}
			if _, serr := os.Stat(dir); serr != nil {
				return fmt.Sprintf("no %s (%s): %s", title, name, cause(serr))
			}
			return fmt.Sprintf("empty %s (no %s/0)", title, name)
		}
		if i == max {
			return fmt.Sprintf("%s longer than %d entries", title, max)
		}
		if err != nil {
			return fmt.Sprintf("cannot read %s/%d: %s", name, i, cause(err))
		}
		if err := entry(i, v); err != nil {
			return fmt.Sprintf("%s/%d: %s", name, i, err)
		}
	}
	return ""
}
