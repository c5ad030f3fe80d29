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
