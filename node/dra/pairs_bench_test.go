package dra

import (
	"context"
	"fmt"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/ibkube/ibkube/test/e2e/fakegpu"
	"github.com/ibkube/ibkube/webhook/aligned"
)

// BenchmarkPreparePairs prepares the aligned claim of a whole OCI
// BM.GPU.H100.8 (8 GPUs, 16 ports, as the scheduler's allocator gives it)
// and reports what the pairs cost inside it: "prepare" is the whole
// Prepare and Unprepare, "pairs" the report alone (the GPU slices listed
// in process, each GPU's root and NUMA node read from the fixture's sysfs).
// The API server's list of the GPU slices, one per claim, comes on top.
func BenchmarkPreparePairs(b *testing.B) {
	l := alignedLayouts()[0]
	n := newAlignedNode(b, l)
	spec, err := aligned.Spec(aligned.Shape{GPUs: 8, HCAs: 16, GPUClass: fakegpu.DeviceClass, HCAClass: l.hcaClass})
	if err != nil {
		b.Fatal(err)
	}
	a := n.allocate(specClaim("whole-node", spec))
	if a == nil {
		b.Fatal("the aligned claim of 8 GPUs does not fit an empty node")
	}
	d, _ := pairsDriver(b, n, &podEvents{})
	ctx := context.Background()
	b.Run("prepare", func(b *testing.B) {
		times := make([]time.Duration, 0, b.N)
		for i := 0; b.Loop(); i++ {
			c := specClaim(fmt.Sprintf("whole-node-%d", i), spec)
			c.UID, c.Status.Allocation = testUID(c.Name), a
			times = append(times, prepareAndRelease(ctx, b, d, c))
		}
		reportPercentiles(b, times)
	})
	b.Run("pairs", func(b *testing.B) {
		var ours []resourceapi.DeviceRequestAllocationResult
		for _, r := range a.Devices.Results {
			if r.Driver != fakegpu.DriverName {
				ours = append(ours, r)
			}
		}
		reqs, err := d.requests(d.snapshot(), ours)
		if err != nil {
			b.Fatal(err)
		}
		times := make([]time.Duration, 0, b.N)
		for b.Loop() {
			c, err := ClaimSpec(testUID("x"), "team/x", reqs)
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			d.reportPairs(ctx, reqs, a.Devices.Results, c)
			times = append(times, time.Since(start))
		}
		reportPercentiles(b, times)
	})
}
