package agent

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/go-logr/logr"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/internal/testing/kubeletstub"
	"github.com/ibkube/ibkube/node/config"
)

// runOnFixture runs a real agent (discovery on an ndv5 fixture) against a
// stub kubelet and waits for its first rdma/ib list.
func runOnFixture(b testing.TB) (dir string, stub *kubeletstub.Stub, a *Agent, stop func()) {
	b.Helper()
	dir = b.TempDir()
	if err := fixture.Build(dir, fixture.NDv5); err != nil {
		b.Fatal(err)
	}
	sockets := b.TempDir()
	stub = kubeletstub.Start(b, sockets)
	scanner := discovery.NewScanner(discovery.Options{SysfsRoot: fixture.SysfsRoot(dir), DevRoot: fixture.DevRoot(dir)})
	// The periodic rescan out of reach: a port change reaches the kubelet
	// only through discovery's port poll, as on a real host, where sysfs
	// port attributes emit no inotify event.
	cfg := config.Default()
	cfg.RescanPeriod.Duration = time.Hour
	a, err := New(Config{Agent: cfg, Scanner: scanner, SysfsRoot: fixture.SysfsRoot(dir),
		KubeletSocketDir: sockets, StateDir: b.TempDir()}, benchLogger())
	if err != nil {
		b.Fatal(err)
	}
	stopAgent := start(b, a)
	if _, err := stub.WaitList("rdma/ib", 10*time.Second, func(d []*pluginapi.Device) bool { return len(d) == 8 }); err != nil {
		b.Fatal(err)
	}
	return dir, stub, a, func() {
		stopAgent()
		stub.Stop()
	}
}

// start runs a until the returned stop, which fails tb if Run failed.
func start(tb testing.TB, a *Agent) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("Run: %v", err)
		}
	}
}

// BenchmarkPortDownToUnhealthy measures the time from a port state change
// in the fixture (sysfs state + the IPoIB netdev's carrier, as the kernel
// writes them) to the Unhealthy device on the ListAndWatch stream, and back.
// Goal: at most 1 s.
func BenchmarkPortDownToUnhealthy(b *testing.B) {
	dir, stub, _, stop := runOnFixture(b)
	defer stop()
	var down, up time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := fixture.SetPortState(dir, "mlx5_3", 1, "DOWN"); err != nil {
			b.Fatal(err)
		}
		l, err := stub.WaitHealth("rdma/ib", "mlx5_3", "Unhealthy", 10*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		down += l.At.Sub(t0)
		t1 := time.Now()
		if err := fixture.SetPortState(dir, "mlx5_3", 1, "ACTIVE"); err != nil {
			b.Fatal(err)
		}
		l, err = stub.WaitHealth("rdma/ib", "mlx5_3", "Healthy", 10*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		up += l.At.Sub(t1)
	}
	b.ReportMetric(float64(down.Milliseconds())/float64(b.N), "ms-to-unhealthy")
	b.ReportMetric(float64(up.Milliseconds())/float64(b.N), "ms-to-healthy")
}

// BenchmarkKubeletRestartToRegistration measures the time from the kubelet
// re-creating kubelet.sock to the agent's registration of both pools.
// Goal: at most 1 s.
func BenchmarkKubeletRestartToRegistration(b *testing.B) {
	_, stub, _, stop := runOnFixture(b)
	defer stop()
	for _, r := range []string{"rdma/ib", "rdma/shared_ib"} {
		if _, err := stub.WaitRegistration(r, 10*time.Second); err != nil {
			b.Fatal(err)
		}
	}
	var total time.Duration
	for b.Loop() {
		// Let the last registration's reply reach the agent: a kubelet does
		// not restart within microseconds of accepting a registration.
		time.Sleep(20 * time.Millisecond)
		// The restart wipes the plugins' sockets too, which may register a
		// plugin twice (socket removed, then kubelet.sock created): count
		// only registrations from this restart, the first of each resource.
		t0 := time.Now()
		if err := stub.Restart(); err != nil {
			b.Fatal(err)
		}
		var last time.Time
		for _, r := range []string{"rdma/ib", "rdma/shared_ib"} {
			reg, err := stub.WaitRegistration(r, 10*time.Second)
			for err == nil && reg.At.Before(t0) {
				reg, err = stub.WaitRegistration(r, 10*time.Second)
			}
			if err != nil {
				b.Fatal(err)
			}
			if reg.At.After(last) {
				last = reg.At
			}
		}
		total += last.Sub(t0)
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms-to-reregister")
}

// BenchmarkAgentMemory reports the Go heap of a running agent on the ND H100
// v5 fixture (see cmd/ibkube-node-agent for the process's resident memory).
func BenchmarkAgentMemory(b *testing.B) {
	_, _, a, stop := runOnFixture(b)
	defer stop()
	for b.Loop() {
		_ = a.Inventory()
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-inuse-MiB")
	b.ReportMetric(float64(ms.Sys)/(1<<20), "go-sys-MiB")
}

func benchLogger() logr.Logger {
	if testing.Verbose() {
		return logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return logr.Discard()
}
