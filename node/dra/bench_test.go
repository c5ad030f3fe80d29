package dra

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/fixture"
)

// reportPercentiles adds p50 and p99 of the per-operation times in ms.
func reportPercentiles(b *testing.B, times []time.Duration) {
	if len(times) == 0 {
		return
	}
	slices.Sort(times)
	at := func(p float64) float64 {
		return float64(times[int(p*float64(len(times)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}

// BenchmarkPrepare prepares and unprepares a claim for two exclusive HCAs
// of the ND v5 fixture on a node where 30 pods already share its other
// HCAs, as the kubelet asks before a pod starts (goal: p99 <= 10 ms).
func BenchmarkPrepare(b *testing.B) {
	h := newHost(b, fixture.NDv5, nil)
	h.topology = "/var/lib/ibkube/topology/ndv5-topo.xml"
	d := newBenchDriver(b, h)
	ctx := context.Background()
	var busy []*resourceapi.ResourceClaim
	for i := range 30 {
		busy = append(busy, claim(fmt.Sprintf("busy-%d", i), "busy", shared("s", fmt.Sprintf("shared-ib-mlx5-%d", 4+i%4), types.UID(fmt.Sprint(i)))))
	}
	if _, err := d.PrepareResourceClaims(ctx, busy); err != nil {
		b.Fatal(err)
	}
	times := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		c := claim(fmt.Sprintf("claim-%d", i), "pod", alloc("nics", fmt.Sprintf("ib-mlx5-%d", i%4)), alloc("nics", fmt.Sprintf("ib-mlx5-%d", (i+1)%4)))
		start := time.Now()
		res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
		times = append(times, time.Since(start))
		if err != nil || res[c.UID].Err != nil {
			b.Fatal(err, res[c.UID].Err)
		}
		if _, err := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: c.UID}}); err != nil {
			b.Fatal(err)
		}
	}
	reportPercentiles(b, times)
}

func newBenchDriver(b *testing.B, h *host) *Driver {
	b.Helper()
	// The CDI directory is /var/run/cdi, a tmpfs on systemd hosts; /dev/shm
	// stands for it where there is one.
	cdi := b.TempDir()
	if dir, err := os.MkdirTemp("/dev/shm", "cdi"); err == nil {
		cdi = dir
		b.Cleanup(func() { os.RemoveAll(dir) })
	}
	d, err := New(Config{NodeName: "node-0", CDIDir: cdi}, discardLogger())
	if err != nil {
		b.Fatal(err)
	}
	d.Update(h.model(b))
	return d
}

// BenchmarkPortChangeToSlice measures, through the whole agent on the ND v5
// fixture, the time from a port going down in sysfs to the driver handing
// the ResourceSlice with the taint set to the publisher (goal: <= 1 s;
// discovery polls ports every 500 ms). Each iteration then brings the port
// back and waits, untimed, for the taint to clear after the hold.
func BenchmarkPortChangeToSlice(b *testing.B) {
	h := newHost(b, fixture.NDv5, nil)
	pub, stop := runAgent(b, h)
	defer stop()
	waitTainted(b, pub, nil)
	times := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		if err := fixture.SetPortState(h.dir, "mlx5_0", 1, "DOWN"); err != nil {
			b.Fatal(err)
		}
		waitTainted(b, pub, []string{"shared-ib-mlx5-0", "ib-mlx5-0"})
		times = append(times, time.Since(start))
		b.StopTimer()
		if err := fixture.SetPortState(h.dir, "mlx5_0", 1, "ACTIVE"); err != nil {
			b.Fatal(err)
		}
		waitTainted(b, pub, nil)
		b.StartTimer()
	}
	reportPercentiles(b, times)
}

// mainShape is the node's slices as published before HCA counters: one
// slice of every device, no shared counters, and the port state as an
// attribute. It is the baseline of BenchmarkAllocator.
func mainShape(objs []*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	one := objs[0].DeepCopy()
	one.Spec.SharedCounters = nil
	one.Spec.Devices = nil
	one.Spec.Pool.ResourceSliceCount = 1
	for _, s := range objs {
		for _, d := range s.Spec.Devices {
			d = *d.DeepCopy()
			d.ConsumesCounters = nil
			d.Attributes["portState"] = resourceapi.DeviceAttribute{StringValue: ptr.To("ACTIVE")}
			one.Spec.Devices = append(one.Spec.Devices, d)
		}
	}
	return []*resourceapi.ResourceSlice{one}
}

// BenchmarkAllocator is the scheduler's work per node and pod (what its
// Filter does: a new allocator over the node's slices and one Allocate) on
// the ND v5 node, for the slices as published ("published") and as they
// were before HCA counters ("main"): an rdma/ib: 8 pod and an rdma/ib: 1
// pod (the fleet's) on an empty node, and an rdma/shared_ib: 1 pod where 30
// sharers and an rdma/ib: 4 pod run. "published-no-selector" is the
// published slices with DeviceClasses that select nothing (as upstream's
// scheduler_perf classes): what the classes' CEL costs, the allocator
// evaluating it on every device of the node.
func BenchmarkAllocator(b *testing.B) {
	for _, shape := range []string{"main", "published", "published-no-selector"} {
		for _, tc := range []struct {
			name  string
			setup func(s *scheduler)
			claim *resourceapi.ResourceClaim
		}{
			{"ib8-empty", func(*scheduler) {}, extendedClaim("pod", contract.DeviceClassIB, 8)},
			{"ib1-empty", func(*scheduler) {}, extendedClaim("pod", contract.DeviceClassIB, 1)},
			{"shared1-busy", func(s *scheduler) {
				s.allocate(extendedClaim("four", contract.DeviceClassIB, 4))
				for i := range 30 {
					s.allocate(hcaClaim(fmt.Sprintf("sharer-%d", i), contract.DeviceClassSharedIB, fmt.Sprintf("mlx5_%d", 4+i%4)))
				}
			}, extendedClaim("pod", contract.DeviceClassSharedIB, 1)},
		} {
			b.Run(shape+"/"+tc.name, func(b *testing.B) {
				s := newScheduler(b, newHost(b, fixture.NDv5, nil))
				switch shape {
				case "main":
					s.slices = mainShape(s.slices)
				case "published-no-selector":
					for _, c := range s.classes {
						c.Spec.Selectors = nil
					}
				}
				tc.setup(s)
				st := s.state()
				node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}}
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					a, err := structured.NewAllocator(ctx, schedulerFeatures, st, s.classes, s.slices, s.cel)
					if err != nil {
						b.Fatal(err)
					}
					res, err := a.Allocate(ctx, node, []*resourceapi.ResourceClaim{tc.claim})
					if err != nil || len(res) != 1 {
						b.Fatalf("allocate: %v, %d results", err, len(res))
					}
				}
			})
		}
	}
}
