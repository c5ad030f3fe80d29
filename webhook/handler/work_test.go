package handler

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/webhook/config"
	"github.com/ibkube/ibkube/webhook/mutate"
)

// minimalPod is a pod object of n containers "{}" with the given
// annotations JSON, as a forged review can send it: the cheapest way to ask
// for work per container.
func minimalPod(n int, annotations string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"metadata":{"name":"p","annotations":%s},"spec":{"containers":[`, annotations)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("{}")
	}
	b.WriteString("]}}")
	return b.Bytes()
}

func rawReview(t testing.TB, object []byte, opts ...reviewOpt) []byte {
	t.Helper()
	return reviewBody(t, nil, append([]reviewOpt{func(r *admissionv1.AdmissionReview) { r.Request.Object.Raw = object }}, opts...)...)
}

// TestHandlerBoundsContainers: a review of 100,000 minimal containers is
// refused with the count and the limit, without the core running and
// without building the containers (a few MiB of allocation at most, where
// decoding them costs hundreds); one ibkube does not look at is let
// through untouched.
func TestHandlerBoundsContainers(t *testing.T) {
	mode := fmt.Sprintf(`{%q:"rdma-shared"}`, contract.AnnotationMode)
	for _, tc := range []struct {
		name, annotations string
		n                 int
		wantMsg           string
	}{
		{"ours", mode, 100_000, fmt.Sprintf("pod has 100000 containers (containers, init containers and ephemeral containers together); accepted: at most %d", mutate.MaxContainers)},
		{"not-ours", `{}`, 100_000, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core := &coreStub{}
			h := newHandler(t, core.mutate, nil, nil)
			body := rawReview(t, minimalPod(tc.n, tc.annotations))
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			a := post(t, h, body)
			runtime.ReadMemStats(&after)
			if a.code != http.StatusOK {
				t.Fatalf("HTTP %d: %s", a.code, a.body)
			}
			if core.called {
				t.Error("the core ran on a pod over the container limit")
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8*uint64(len(body))+(1<<20) {
				t.Errorf("answering a %d-byte review allocated %d bytes", len(body), alloc)
			}
			switch {
			case tc.wantMsg == "" && (!a.resp.Allowed || len(a.resp.Patch) > 0):
				t.Errorf("a pod ibkube does not look at: allowed %v, patch %s", a.resp.Allowed, a.resp.Patch)
			case tc.wantMsg != "" && (a.resp.Allowed || !strings.Contains(a.resp.Result.Message, tc.wantMsg)):
				t.Errorf("allowed %v, message %v; want refused with %q", a.resp.Allowed, a.resp.Result, tc.wantMsg)
			}
		})
	}
}

// TestHandlerBoundsEchoes: megabytes in a review's uid, kind, namespace or
// pod name come back neither in the answer nor in a log line.
func TestHandlerBoundsEchoes(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("x", 1<<20)
	worker := loadPod(t, "worker-8gpu.yaml")
	refused := loadPod(t, "worker-8gpu.yaml")
	refused.Annotations[contract.AnnotationMode] = "rdma-bad"
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"uid", reviewBody(t, worker, func(r *admissionv1.AdmissionReview) { r.Request.UID = types.UID("u" + huge) })},
		{"kind", bytes.Replace(reviewBody(t, worker), []byte(`"kind":"AdmissionReview"`), []byte(`"kind":"`+huge+`"`), 1)},
		{"apiVersion", bytes.Replace(reviewBody(t, worker), []byte(`"apiVersion":"admission.k8s.io/v1"`), []byte(`"apiVersion":"`+huge+`"`), 1)},
		{"request namespace", reviewBody(t, worker, withNamespace(huge))},
		{"pod namespace", reviewBody(t, worker, func(r *admissionv1.AdmissionReview) {
			r.Request.Object.Raw = bytes.Replace(r.Request.Object.Raw, []byte(`"namespace":"training"`), []byte(`"namespace":"`+huge+`"`), 1)
		})},
		{"pod name in a refusal", reviewBody(t, refused, func(r *admissionv1.AdmissionReview) { r.Request.Name = huge })},
		{"pod generateName in a refusal", bytes.Replace(reviewBody(t, refused), []byte(`"generateName":"`), []byte(`"generateName":"`+huge), 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var longest int
			log := funcr.New(func(prefix, args string) {
				mu.Lock()
				defer mu.Unlock()
				longest = max(longest, len(prefix)+len(args))
			}, funcr.Options{})
			h, err := New(Options{Config: config.Default, Namespaces: testNamespaces(), Log: log})
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if n := rec.Body.Len(); n > 8<<10 {
				t.Errorf("answer of %d bytes (HTTP %d) to a review with a 1 MiB %s: %.200s", n, rec.Code, tc.name, rec.Body)
			}
			mu.Lock()
			defer mu.Unlock()
			if longest > 8<<10 {
				t.Errorf("log line of %d bytes", longest)
			}
		})
	}
}

func TestElementCount(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{
		`[]`: 0, ` [ ] `: 0, `null`: 0, `[{}]`: 1, `[{},{}]`: 2, `[ {} , {} ]`: 2,
		`[{"name":"a,b","args":["x,y",{"k":"]"}]},{"name":"\"],["}]`: 2,
		`[1]`: 1, `[[],[]]`: 2, `["a\\\",b"]`: 1, `["a\",b"]`: 1,
	} {
		var c elementCount
		if err := c.UnmarshalJSON([]byte(strings.TrimSpace(in))); err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if int(c) != want {
			t.Errorf("%s: %d elements, want %d", in, c, want)
		}
	}
}
