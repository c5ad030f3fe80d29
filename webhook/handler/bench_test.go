package handler

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

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
		req := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("HTTP %d: %s", rec.Code, rec.Body.String())
		}
	}
}

// BenchmarkAdmission measures the whole admission request (decode, namespace
// lookup, mutate, patch, encode) for a realistic 8-GPU PyTorchJob worker in
// rdma-exclusive,ipoib mode, and a no-op controller-runtime defaulter on the
// very same AdmissionReview. The handler sub-benchmark reports its ratio to the
// no-op as "x-noop" (goal: at most 1.10). Figures are reported, not asserted.
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

	// The no-op runs first; the handler reports its ratio to it. (testing.Benchmark
	// cannot be nested inside a benchmark, so the floor is kept here.)
	var floorNs, floorAllocs float64
	b.Run("noop-defaulter", func(b *testing.B) {
		serveLoop(b, noop, body)
		floorNs = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		floorAllocs = testing.AllocsPerRun(200, func() { serveOnce(noop, body) })
	})
	b.Run("handler", func(b *testing.B) {
		serveLoop(b, h, body)
		if floorNs == 0 {
			return // run alone (-bench .../handler): nothing to compare with
		}
		ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		allocs := testing.AllocsPerRun(200, func() { serveOnce(h, body) })
		b.ReportMetric(ns/floorNs, "x-noop")
		b.ReportMetric(allocs/floorAllocs, "x-noop-allocs")
	})
}

func serveOnce(h http.Handler, body []byte) {
	req := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(httptest.NewRecorder(), req)
}
