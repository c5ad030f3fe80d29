// Package servingcert writes the serving certificate the webhook's tests
// listen with, so every test that starts a webhook server on loopback uses
// the same one.
package servingcert

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/ibkube/ibkube/internal/testing/suitetest"
)

// Write writes tls.crt and tls.key for 127.0.0.1 into dir, the names the
// webhook's cert directory holds, issued by a throwaway CA (the tests'
// clients do not verify it) that suitetest's suites use as well.
func Write(t testing.TB, dir string) {
	t.Helper()
	certPEM, keyPEM := suitetest.NewCA(t, "ibkube-webhook test CA").
		Issue(t, 2, nil, []net.IP{net.IPv4(127, 0, 0, 1)})
	for name, data := range map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
