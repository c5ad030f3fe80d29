package discovery

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ibkube/ibkube/hca/fixture"
)

// BenchmarkPortPollNDv5 is one port poll of the ND H100 v5 fixture (nine
// HCAs, one port each: 18 small reads), the work Watch does every PortPoll.
// cpu-ns/poll is the process's CPU time (user+system, getrusage) per poll,
// which unlike ns/op does not count time spent waiting for a core on a busy
// machine; cpu-%-at-default is that as a share of one core at
// DefaultPortPoll.
// The fixture is on tmpfs; a real sysfs read also runs the driver's
// ib_query_port (mlx5 answers from a cached port state for state and
// phys_state), so read the figure as a floor, not a ceiling.
func BenchmarkPortPollNDv5(b *testing.B) {
	dir := fixture.BuildTemp(b, fixture.NDv5)
	p := newPortPoller(fixture.SysfsRoot(dir), nil)
	p.refresh()
	if len(p.files) != 18 {
		b.Fatalf("polling %d files, want 18 (9 ports)", len(p.files))
	}
	b.ReportAllocs()
	before := cpuTime(b)
	for b.Loop() {
		if p.poll() {
			b.Fatal("a port changed in an idle fixture")
		}
	}
	perPoll := (cpuTime(b) - before) / time.Duration(b.N)
	b.ReportMetric(float64(perPoll.Nanoseconds()), "cpu-ns/poll")
	b.ReportMetric(100*float64(perPoll)/float64(DefaultPortPoll), "cpu-%-at-default")
}

func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
