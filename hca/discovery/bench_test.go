package discovery_test

import (
	"context"
	"testing"
	"time"

	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/hca/fixture"
)

// BenchmarkScanNDv5 is one full discovery of the ND H100 v5 fixture (9 HCAs).
func BenchmarkScanNDv5(b *testing.B) {
	dir := fixture.BuildTemp(b, fixture.NDv5)
	s := newScanner(b, dir, nil)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Scan(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPortDownToHint is the time from a port state change in the
// fixture to the Watch hint, through the port poll at its default period
// (the path a host without a netdev on the port takes). Each change follows
// the previous hint, which came right after a poll, so every iteration waits
// about one whole period: this is the worst case; a change at a random
// instant waits half a period on average.
func BenchmarkPortDownToHint(b *testing.B) {
	dir := fixture.BuildTemp(b, fixture.NDv5)
	s := discovery.NewScanner(discovery.Options{SysfsRoot: fixture.SysfsRoot(dir), DevRoot: fixture.DevRoot(dir)})
	hints := watch(b, s)
	states := []string{"DOWN", "ACTIVE"}
	i := 0
	var total time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := fixture.SetPortState(dir, "mlx5_0", 1, states[i%2]); err != nil {
			b.Fatal(err)
		}
		i++
		select {
		case <-hints:
			total += time.Since(t0)
		case <-time.After(5 * time.Second):
			b.Fatal("no hint")
		}
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-hint")
}
