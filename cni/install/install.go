// Package install copies the ibkube-cni binary into the node's CNI bin
// directory: the node agent's DaemonSet runs `ibkube-cni install <dir>` in
// an init container with the host's CNI bin dir mounted at <dir>.
package install

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/ibkube/ibkube/internal/atomicfile"
)

// Binary copies src to dir/name atomically (a temporary file renamed over
// the old one), so a runtime never executes a half-written plugin, and
// skips the copy when the installed file already has the same content.
func Binary(src, dir, name string) (changed bool, err error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", src, err)
	}
	dst := filepath.Join(dir, name)
	if cur, err := os.ReadFile(dst); err == nil && string(cur) == string(data) {
		return false, nil
	}
	if err := atomicfile.Write(dst, data, 0o755); err != nil {
		return false, fmt.Errorf("install %s: %w", dst, err)
	}
	return true, nil
}
