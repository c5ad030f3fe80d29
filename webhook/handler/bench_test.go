package handler

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// noopDefaulter is the floor the handler is measured against: controller-runtime's
// typed defaulter for pods doing nothing, so the cost is only its decode,
// deep-copy/compare and encode.
type noopDefaulter struct{}

func (noopDefaulter) Default(context.Context, runtime.Object) error { return nil }

func serveLoop(b *testing.B, h http.Handler, body []byte) {
	b.Helper()
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for b.Loop() {
		if rec := serveReview(h, body); rec.Code != http.StatusOK {
			b.Fatalf("HTTP %d: %s", rec.Code, rec.Body.String())
		}
	}
}

// BenchmarkAdmission measures the whole admission request (decode, namespace
// lookup, mutate, patch, encode) for a realistic 8-GPU PyTorchJob worker in
// rdma-exclusive,ipoib mode, and a no-op controller-runtime defaulter on the
// very same AdmissionReview. The handler sub-benchmark reports its time and
// allocation ratios to the no-op as "x-noop" and "x-noop-allocs" (goal: at most
// 1.10). Figures are reported, not asserted.
func BenchmarkAdmission(b *testing.B) {
	body := reviewBody(b, loadPod(b, "worker-8gpu.yaml"))

	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		b.Fatal(err)
	}
	noop := admission.WithCustomDefaulter(scheme, &corev1.Pod{}, noopDefaulter{})

	h := newHandler(b, nil, fakeNetworks{present: map[string]bool{releaseNS + "/ibkube-ipoib": true}}, prometheus.NewRegistry())
	if a := post(b, h, body); a.resp == nil || !a.resp.Allowed {
		b.Fatalf("benchmark request not admitted: %s", a.body)
	}

	b.Run("noop-defaulter", func(b *testing.B) { serveLoop(b, noop, body) })
	b.Run("handler", func(b *testing.B) {
		serveLoop(b, h, body)
		// The ratio comes from the two handlers timed alternately, so a
		// machine whose load changes between sub-benchmarks does not skew it.
		var noopTime, handlerTime time.Duration
		for range min(b.N, 2000) {
			start := time.Now()
			serveReview(noop, body)
			mid := time.Now()
			serveReview(h, body)
			noopTime += mid.Sub(start)
			handlerTime += time.Since(mid)
		}
		b.ReportMetric(float64(handlerTime)/float64(noopTime), "x-noop")
		b.ReportMetric(testing.AllocsPerRun(200, func() { serveReview(h, body) })/
			testing.AllocsPerRun(200, func() { serveReview(noop, body) }), "x-noop-allocs")
	})
}

// BenchmarkLargestAdmittedPod measures the costliest pod the handler
// admits with the real core: MaxReviewValues JSON values in the review,
// every one it can spare an empty volume (a corev1.Volume each once
// decoded), and a 1.3-million-volume review of a pod ibkube does not look
// at, answered from its head. Figures for docs/webhook-operations.md.
func BenchmarkLargestAdmittedPod(b *testing.B) {
	empty := rawReview(b, listPod(true, `"volumes":[`, "{}", 0, "]"))
	for _, bc := range []struct {
		name string
		body []byte
	}{
		{"largest-admitted", rawReview(b, listPod(true, `"volumes":[`, "{}", MaxReviewValues-countValues(empty), "]"))},
		{"1.3M-volumes-not-ours", rawReview(b, listPod(false, `"volumes":[`, "{}", 1_300_000, "]"))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := newHandler(b, nil, nil, prometheus.NewRegistry())
			if a := post(b, h, bc.body); a.resp == nil || !a.resp.Allowed {
				b.Fatalf("not admitted: %.300s", a.body)
			}
			serveLoop(b, h, bc.body)
		})
	}
}
