package imagefs

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ibkube/ibkube/internal/testing/hostileimage"
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
	b.ReportAllocs()
	for b.Loop() {
		if _, err := u.ReadFile(context.Background(), "/etc/passwd", 1<<20); err != nil {
			b.Fatal(err)
		}
	}
}

// cpuTime is the CPU this process has spent (user and system), in
// nanoseconds: on a shared machine ns/op counts waiting too.
func cpuTime(b *testing.B) int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkUnionHostile: the worst image for a lookup, by depth and
// layers: /etc/passwd a symlink into a chain of nested directories in
// every layer whose bottom links back through the whole chain. cpu-ms/op
// is the CPU of one lookup, B/op its heap.
func BenchmarkUnionHostile(b *testing.B) {
	for _, c := range []struct{ depth, layers int }{{64, 1}, {256, 1}, {1024, 1}, {2046, 1}, {256, 4}, {2046, 4}, {64, 128}} {
		b.Run(fmt.Sprintf("depth=%d/layers=%d", c.depth, c.layers), func(b *testing.B) {
			u := Union{Layers: hostileimage.Layers(b, c.depth, c.layers)}
			b.ReportAllocs()
			start := cpuTime(b)
			for b.Loop() {
				_, _ = u.ReadFile(context.Background(), "/etc/passwd", 1<<20)
			}
			b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N)/1e6, "cpu-ms/op")
		})
	}
}
