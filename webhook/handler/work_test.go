package handler

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/testing/floods"
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
			rec := serveReview(h, tc.body)
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

// listPod is a pod object whose spec holds list (a JSON fragment such as
// `"volumes":[` ... `]`), built from n copies of item; ours adds ibkube's
// mode annotation.
func listPod(ours bool, open, item string, n int, closing string) []byte {
	return floods.Pod(ours, "p", open, item, n, closing)
}

// mountsPod is 128 containers of n empty volumeMounts each.
func mountsPod(ours bool, n int) []byte {
	container := string(listPod(false, `"x":[`, "{}", n, "]"))
	container = `{"name":"c","volumeMounts":[` + container[strings.Index(container, "[")+1:strings.LastIndex(container, "]")] + `]}`
	return listPod(ours, `"containers":[`, container, mutate.MaxContainers, "]")
}

// TestHandlerBoundsEveryList: forged reviews of a million elements in any
// list of the pod cost a pass over their bytes, not a decoded pod: one
// ibkube looks at is refused with the count and the bound, one it does not
// is let through untouched, and neither reaches the core.
func TestHandlerBoundsEveryList(t *testing.T) {
	cases := []struct {
		name string
		pod  func(ours bool) []byte
	}{
		{"1.3M empty volumes", func(ours bool) []byte { return listPod(ours, `"volumes":[`, "{}", 1_300_000, "]") }},
		{"150k defaulted volumes", func(ours bool) []byte {
			return listPod(ours, `"volumes":[`, `{"name":"v","emptyDir":{}}`, 150_000, "]")
		}},
		{"1.3M tolerations", func(ours bool) []byte { return listPod(ours, `"tolerations":[`, "{}", 1_300_000, "]") }},
		{"128 containers of 10k volumeMounts", func(ours bool) []byte { return mountsPod(ours, 10_000) }},
		{"1.3M args", func(ours bool) []byte {
			return listPod(ours, `"containers":[{"name":"c","args":[`, `""`, 1_300_000, "]}]")
		}},
	}
	for _, tc := range cases {
		for _, ours := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/ours=%v", tc.name, ours), func(t *testing.T) {
				core := &coreStub{}
				h := newHandler(t, core.mutate, nil, nil)
				body := rawReview(t, tc.pod(ours))
				if len(body) > MaxBodyBytes {
					t.Fatalf("review of %d bytes is over the body cap", len(body))
				}
				a, alloc := postMeasured(t, h, body)
				t.Logf("%d-byte review: allocated %d bytes", len(body), alloc)
				if a.code != http.StatusOK {
					t.Fatalf("HTTP %d: %s", a.code, a.body)
				}
				if core.called {
					t.Error("the core ran")
				}
				// Reading the body itself allocates up to twice its size.
				if limit := 3*uint64(len(body)) + 1<<20; alloc > limit {
					t.Errorf("answering a %d-byte review allocated %d bytes, want at most %d", len(body), alloc, limit)
				}
				want := fmt.Sprintf("; accepted: at most %d in a pod ibkube admits", MaxReviewValues)
				switch {
				case !ours && (!a.resp.Allowed || len(a.resp.Patch) > 0):
					t.Errorf("a pod ibkube does not look at: allowed %v, patch %s", a.resp.Allowed, a.resp.Patch)
				case ours && (a.resp.Allowed || !strings.Contains(a.resp.Result.Message, want)):
					t.Errorf("allowed %v, message %v; want refused with %q", a.resp.Allowed, a.resp.Result, want)
				}
			})
		}
	}
}

// postMeasured is post with the bytes it allocated.
func postMeasured(t testing.TB, h http.Handler, body []byte) (answer, uint64) {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	a := post(t, h, body)
	runtime.ReadMemStats(&after)
	return a, after.TotalAlloc - before.TotalAlloc
}

// TestHandlerLargestAdmittedPod: a pod ibkube looks at with MaxReviewValues
// values in the review, all of them in the costliest list to decode (empty
// volumes, each a corev1.Volume), is admitted, and what it costs is
// bounded; one more value is refused with the count.
func TestHandlerLargestAdmittedPod(t *testing.T) {
	empty := rawReview(t, listPod(true, `"volumes":[`, "{}", 0, "]"))
	n := MaxReviewValues - countValues(empty)
	for _, tc := range []struct {
		volumes int
		admit   bool
	}{{n, true}, {n + 1, false}} {
		t.Run(strconv.Itoa(tc.volumes), func(t *testing.T) {
			core := &coreStub{}
			h := newHandler(t, core.mutate, nil, nil)
			body := rawReview(t, listPod(true, `"volumes":[`, "{}", tc.volumes, "]"))
			a, alloc := postMeasured(t, h, body)
			t.Logf("%d values, %d-byte review: allocated %d bytes", countValues(body), len(body), alloc)
			if a.code != http.StatusOK || core.called != tc.admit || a.resp.Allowed != tc.admit {
				t.Fatalf("HTTP %d, core ran %v, allowed %v (%s); want the core run and the pod allowed: %v", a.code, core.called, a.resp.Allowed, a.body, tc.admit)
			}
			if !tc.admit {
				want := fmt.Sprintf("holds %d JSON values", MaxReviewValues+1)
				if !strings.Contains(a.resp.Result.Message, want) {
					t.Errorf("message %q, want it to name the count (%q)", a.resp.Result.Message, want)
				}
			}
			if alloc > 16<<20 {
				t.Errorf("admitting the largest pod allocated %d bytes, want at most 16 MiB", alloc)
			}
		})
	}
}

// TestHandlerReadsOnlyOwnAnnotations: relevance is decided on ibkube's own
// annotations, escaped keys included, without copying the others; an
// ibkube annotation that is not a string is a bad pod.
func TestHandlerReadsOnlyOwnAnnotations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, annotations string
		relevant          bool
		bad               bool
	}{
		{"none", `null`, false, false},
		{"others only", `{"a":"x","b":"{\"infiniband.azure.com/mode\":1}"}`, false, false},
		{"ours", `{"a":"x","infiniband.azure.com/mode":"rdma-shared"}`, true, false},
		{"ours, escaped key", `{"infiniband\u002eazure.com/mode":"rdma-shared"}`, true, false},
		{"ours, not a string", `{"infiniband.azure.com/mode":1}`, false, true},
		{"not an object", `"x"`, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			head, err := readHead([]byte(`{"metadata":{"annotations":` + tc.annotations + `}}`))
			if (err != nil) != tc.bad {
				t.Fatalf("error %v, want one: %v", err, tc.bad)
			}
			if err != nil {
				return
			}
			if got := head.Metadata.Annotations.relevant(mutate.Namespace{}); got != tc.relevant {
				t.Errorf("relevant %v, want %v (annotations kept: %v)", got, tc.relevant, head.Metadata.Annotations.own)
			}
			for k := range head.Metadata.Annotations.own {
				if !strings.HasPrefix(k, contract.Prefix) {
					t.Errorf("kept annotation %q, not ibkube's", k)
				}
			}
		})
	}
}

// TestHeadRelevanceMatchesCore: the head decides relevance as the core
// does on the whole decoded annotations, around mutate.MaxAnnotations (where
// only the known keys decide) and with the keys ibkube writes, which do not
// count against it.
func TestHeadRelevanceMatchesCore(t *testing.T) {
	t.Parallel()
	unknown, known := contract.Prefix+"bogus", contract.AnnotationMode
	written := mutate.WrittenKeys()
	for _, others := range []int{0, 1, mutate.MaxAnnotations - 1, mutate.MaxAnnotations, mutate.MaxAnnotations + 1, 1000} {
		for _, extra := range [][]string{nil, {unknown}, {known}, {unknown, known}, written, append([]string{unknown}, written...)} {
			full := map[string]string{}
			for i := range others {
				full[fmt.Sprintf("k%d", i)] = ""
			}
			for _, k := range extra {
				full[k] = "rdma-shared"
			}
			raw, err := json.Marshal(full)
			if err != nil {
				t.Fatal(err)
			}
			var head annotationHead
			if err := head.UnmarshalJSON(raw); err != nil {
				t.Fatal(err)
			}
			for _, ns := range []mutate.Namespace{{}, {Annotations: map[string]string{contract.AnnotationMode: "rdma-shared"}}} {
				if got, want := head.relevant(ns), mutate.Relevant(full, ns); got != want {
					t.Errorf("%d other annotations and %v, namespace %v: head says relevant %v, the core %v", others, extra, ns.Annotations, got, want)
				}
			}
		}
	}
}

func TestCountValues(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{
		`1`: 1, `[]`: 1, `{}`: 1, ` [ ] `: 1, `[1]`: 2, `[1,2]`: 3, `{"a":1}`: 2, `{"a":{},"b":[]}`: 3,
		`{"a":[{},{"b":"x,y"}]}`: 5, `["a\",[b",{"c":"]"}]`: 4, `[[[]]]`: 3, `{"k\\":"v"}`: 2,
	} {
		if got := countValues([]byte(in)); got != want {
			t.Errorf("%s: %d values, want %d", in, got, want)
		}
	}
}
