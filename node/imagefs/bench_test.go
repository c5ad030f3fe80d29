package imagefs

import (
	"strings"
	"testing"
)

// BenchmarkUnionReadPasswd: reading /etc/passwd (a Debian-sized file)
// through a five-layer overlay snapshot, the read done inside NRI's
// CreateContainer for every container holding ibkube's devices.
func BenchmarkUnionReadPasswd(b *testing.B) {
	passwd := strings.Repeat("user:x:1000:1000::/home/user:/bin/sh\n", 40)
	var u Union
	for i := range 5 {
		entries := map[string]string{"usr/lib/x/": ""}
		if i == 3 {
			entries["etc/passwd"] = passwd
		}
		u.Layers = append(u.Layers, layer(b, entries))
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := u.ReadFile("/etc/passwd", 1<<20); err != nil {
			b.Fatal(err)
		}
	}
}
