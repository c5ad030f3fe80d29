// Package atomicfile replaces a file so that a reader of it sees the old
// content or the new, never a part: container runtimes read CDI specs, the
// kubelet's pods read NCCL files, and the webhook its certificates while
// ibkube rewrites them.
package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
)

// Write replaces path with data and mode perm (umask aside). The data goes to
// a temporary file in path's directory, renamed over path once complete. The
// temporary name starts with a dot and ends in .tmp, so a reader that scans
// the directory for files like path (CDI specs end in .json) skips it.
func Write(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*"+tempSuffix)
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

const tempSuffix = ".tmp"

// IsTemp reports whether name (a base name) has the form of Write's
// temporary files, which a crash between create and rename leaves behind
// for the owner of the directory to remove.
func IsTemp(name string) bool {
	return strings.HasPrefix(name, ".") && strings.HasSuffix(name, tempSuffix)
}
