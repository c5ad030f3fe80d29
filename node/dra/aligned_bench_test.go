package dra

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/test/e2e/fakegpu"
	"github.com/ibkube/ibkube/webhook/aligned"
)

// alignedBenchCase is one pod on one node: which of the node's GPUs and
// HCAs other pods hold, and the pod's GPU count.
type alignedBenchCase struct {
	name     string
	layout   int // index in alignedLayouts
	busyGPUs []int
	busyHCAs []int
	// freeHCAs, when set, leaves only the first freeHCAs of the layout's
	// HCAs free: other pods hold the rest.
	freeHCAs   int
	gpus       int
	fits       bool
	tookMillis bool // the search may run to the timeout: one iteration only
}

func alignedBenchCases() []alignedBenchCase {
	return []alignedBenchCase{
		{name: "oci-h100/8gpu-empty", layout: 0, gpus: 8, fits: true},
		{name: "oci-h100/1gpu-empty", layout: 0, gpus: 1, fits: true},
		{name: "oci-h100/4gpu-busy", layout: 0, busyGPUs: []int{0, 5}, busyHCAs: []int{2, 3, 9, 12}, gpus: 4, fits: true},
		{name: "oci-h100/4gpu-no-root-pair", layout: 0, busyGPUs: []int{1, 3, 5, 7}, busyHCAs: []int{0, 1, 4, 5, 8, 9, 12, 13}, gpus: 4, fits: true},
		{name: "ndv5/8gpu-empty", layout: 2, gpus: 8, fits: true},
		{name: "ndv5/4gpu-busy", layout: 2, busyGPUs: []int{0, 4}, busyHCAs: []int{1, 5}, gpus: 4, fits: true},
		// Too few free GPUs: no claim fits, and the allocator's search
		// for one is exhaustive over the pairs' orders.
		{name: "oci-h100/2gpu-1-free", layout: 0, busyGPUs: []int{1, 2, 3, 4, 5, 6, 7}, gpus: 2, tookMillis: true},
		{name: "oci-h100/3gpu-2-free", layout: 0, busyGPUs: []int{2, 3, 4, 5, 6, 7}, gpus: 3, tookMillis: true},
		{name: "oci-h100/4gpu-3-free", layout: 0, busyGPUs: []int{3, 4, 5, 6, 7}, gpus: 4, tookMillis: true},
		{name: "ndv5/4gpu-3-free", layout: 2, busyGPUs: []int{3, 4, 5, 6, 7}, gpus: 4, tookMillis: true},
		// The commonest no-fit of all: a whole-node pod where one GPU is
		// held, and a pod of six where three are.
		{name: "oci-h100/6gpu-5-free", layout: 0, busyGPUs: []int{5, 6, 7}, gpus: 6, tookMillis: true},
		{name: "oci-h100/8gpu-7-free", layout: 0, busyGPUs: []int{7}, gpus: 8, tookMillis: true},
		{name: "ndv5/8gpu-7-free", layout: 2, busyGPUs: []int{7}, gpus: 8, tookMillis: true},
		// Every GPU free, too few HCAs: the search is exhaustive too.
		{name: "oci-h100/2gpu-3-hcas-free", layout: 0, freeHCAs: 3, gpus: 2, tookMillis: true},
		{name: "ndv5/4gpu-3-hcas-free", layout: 2, freeHCAs: 3, gpus: 4, tookMillis: true},
	}
}

// BenchmarkAlignedAllocator times kube-scheduler's allocator on one node
// for a pod's aligned claim and for the two independent claims the pod
// would hold without it (`nvidia.com/gpu: n` and `rdma/ib: m`), the two
// interleaved in each iteration so that both see the same machine. It
// reports each one's CPU time per Allocate (the benchmark's thread's, so
// that other work on the machine does not count, nor does the garbage
// collector's) and their ratio (aligned/independent). A case whose search
// passes 10 s, kube-scheduler's default Filter timeout
// (DRASchedulerFilterTimeout, kubernetes/kubernetes#131908), is stopped
// there and reports the CPU it had used.
func BenchmarkAlignedAllocator(b *testing.B) {
	layouts := alignedLayouts()
	for _, c := range alignedBenchCases() {
		b.Run(c.name, func(b *testing.B) {
			l := layouts[c.layout]
			n := newAlignedNode(b, l)
			for _, i := range c.busyGPUs {
				n.hold(fakegpu.DriverName, n.gpus[i])
			}
			for _, i := range c.busyHCAs {
				n.hold(contract.DRADriverName, n.hcas[i])
			}
			if c.freeHCAs > 0 {
				n.hold(contract.DRADriverName, n.hcas[c.freeHCAs:]...)
			}
			shape := aligned.Shape{GPUs: c.gpus, HCAs: c.gpus * l.hcasPerGPU, GPUClass: fakegpu.DeviceClass, HCAClass: l.hcaClass}
			spec, err := aligned.Spec(shape)
			if err != nil {
				b.Fatal(err)
			}
			alignedClaims := []*resourceapi.ResourceClaim{specClaim("pod", spec)}
			independent := []*resourceapi.ResourceClaim{
				extendedClaim("gpus", shape.GPUClass, int64(shape.GPUs)), extendedClaim("hcas", shape.HCAClass, int64(shape.HCAs)),
			}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var alignedTime, independentTime time.Duration
			iterations := 0
			b.ResetTimer()
			for ; iterations < b.N && (!c.tookMillis || iterations < 1); iterations++ {
				independentTime += timeAllocate(b, n.scheduler, independent, c.fits)
				alignedTime += timeAllocate(b, n.scheduler, alignedClaims, c.fits)
			}
			b.ReportMetric(float64(independentTime.Nanoseconds())/float64(iterations), "independent-cpu-ns/op")
			b.ReportMetric(float64(alignedTime.Nanoseconds())/float64(iterations), "aligned-cpu-ns/op")
			b.ReportMetric(float64(alignedTime)/float64(independentTime), "aligned/independent")
		})
	}
}

// timeAllocate runs one Allocate of claims on node-0, returning the CPU
// time it took, and checks it fits (or not) as the case says; a search
// stopped at 10 s counts as no fit.
func timeAllocate(b *testing.B, s *scheduler, claims []*resourceapi.ResourceClaim, fits bool) time.Duration {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := structured.NewAllocator(ctx, schedulerFeatures, s.state(), s.classes, s.slices, s.cel)
	if err != nil {
		b.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}}
	start := threadCPU(b)
	res, err := a.Allocate(ctx, node, claims)
	took := threadCPU(b) - start
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		b.Fatal(err)
	}
	if got := err == nil && len(res) == len(claims); got != fits {
		b.Fatalf("%s: fits %v, want %v (%v)", claims[0].Name, got, fits, err)
	}
	return took
}
