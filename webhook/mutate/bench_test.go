package mutate

import (
	"testing"
)

// BenchmarkMutate runs the core on a realistic 8-GPU PyTorchJob worker pod
// (rdma-exclusive,ipoib, profile ndv5). Mutate works in place, so each
// iteration first deep-copies the pod; BenchmarkDeepCopy reports that share
// alone, to subtract.
func BenchmarkMutate(b *testing.B) {
	pod := readPod(b, "pytorchjob-worker")
	ns := goldenCases[0].ns
	cfg := testConfig()
	b.ReportAllocs()
	for b.Loop() {
		p := pod.DeepCopy()
		if _, err := Mutate(p, ns, cfg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMutateReadmission is the reinvocation case: an already-mutated
// pod, nothing to change.
func BenchmarkMutateReadmission(b *testing.B) {
	pod := readPod(b, "pytorchjob-worker")
	ns := goldenCases[0].ns
	cfg := testConfig()
	if _, err := Mutate(pod, ns, cfg); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Mutate(pod, ns, cfg); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDeepCopy(b *testing.B) {
	pod := readPod(b, "pytorchjob-worker")
	b.ReportAllocs()
	for b.Loop() {
		_ = pod.DeepCopy()
	}
}

// BenchmarkMutateAligned is BenchmarkMutate's pod with alignedClaims on:
// its GPUs and HCAs become the aligned claim (the difference is the
// claim's decision, AlignedShapes included, and its patch).
func BenchmarkMutateAligned(b *testing.B) {
	pod := readPod(b, "pytorchjob-worker")
	ns := goldenCases[0].ns
	cfg := alignedConfig()
	if res, err := Mutate(pod.DeepCopy(), ns, cfg); err != nil || !hasAlignedClaim(res) {
		b.Fatalf("pod not aligned: %v", err)
	}
	b.ReportAllocs()
	for b.Loop() {
		p := pod.DeepCopy()
		if _, err := Mutate(p, ns, cfg); err != nil {
			b.Fatal(err)
		}
	}
}

func hasAlignedClaim(res Result) bool {
	for _, op := range res.Patch {
		if op.Path == "/spec/resourceClaims" {
			return true
		}
	}
	return false
}
