package handler

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ibkube/ibkube/webhook/config"
	"github.com/ibkube/ibkube/webhook/mutate"
)

// TestCostliestPodsDecodeOneAtATime: while one costliest pod ibkube admits
// (MaxReviewValues values, about 10 MB to decode and mutate) is in the
// core, a second one waits for its share of MaxDecodeBytes instead of being
// decoded beside it (here until its caller gives up), and a real worker pod
// beside them is decoded and answered at once.
func TestCostliestPodsDecodeOneAtATime(t *testing.T) {
	empty := rawReview(t, listPod(true, `"volumes":[`, "{}", 0, "]"))
	costliest := rawReview(t, listPod(true, `"volumes":[`, "{}", MaxReviewValues-countValues(empty), "]"))
	var calls, inside, most atomic.Int64
	entered, release, stop := make(chan struct{}), make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(stop) })
	core := func(pod *corev1.Pod, ns mutate.Namespace, cfg *config.Config) (mutate.Result, error) {
		if len(pod.Spec.Volumes) < 1000 { // the worker
			return mutate.Mutate(pod, ns, cfg)
		}
		n := inside.Add(1)
		defer inside.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if calls.Add(1) == 1 { // the first costliest pod stays in the core
			close(entered)
			select {
			case <-release:
			case <-stop:
			}
		}
		return mutate.Mutate(pod, ns, cfg)
	}
	h := newHandler(t, core, nil, nil)
	first := make(chan answer, 1)
	go func() { first <- post(t, h, costliest) }()
	select {
	case <-entered:
	case a := <-first:
		t.Fatalf("the first costliest pod answered HTTP %d without reaching the core: %s", a.code, a.body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, Path, bytes.NewReader(costliest))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("a second costliest pod beside the first answered HTTP %d, want 503 once its caller gave up waiting", rec.Code)
	}
	if a := post(t, h, reviewBody(t, loadPod(t, "worker-8gpu.yaml"))); a.code != http.StatusOK || a.resp == nil || !a.resp.Allowed {
		t.Errorf("a worker pod beside the costliest one answered HTTP %d: %s", a.code, a.body)
	}
	close(release)
	if a := <-first; a.code != http.StatusOK {
		t.Errorf("the first costliest pod answered HTTP %d: %s", a.code, a.body)
	}
	if got := most.Load(); got != 1 {
		t.Errorf("%d costliest pods in the core at once, want 1", got)
	}
}
