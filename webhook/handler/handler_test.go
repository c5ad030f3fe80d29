package handler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/testing/golden"
	"github.com/ibkube/ibkube/webhook/config"
	"github.com/ibkube/ibkube/webhook/mutate"
)

const releaseNS = "ibkube-system"

// fakeNamespaces is an in-memory NamespaceLookup.
type fakeNamespaces map[string]mutate.Namespace

func (f fakeNamespaces) Namespace(_ context.Context, name string) (mutate.Namespace, error) {
	ns, ok := f[name]
	if !ok {
		return mutate.Namespace{}, fmt.Errorf("namespace %q not found", name)
	}
	return ns, nil
}

// fakeNetworks is an in-memory NetworkLookup; apiMissing stands for a cluster
// without the NAD CRD.
type fakeNetworks struct {
	present    map[string]bool // "ns/name"
	apiMissing bool
}

func (f fakeNetworks) NetworkExists(_ context.Context, ns, name string) (bool, error) {
	if f.apiMissing {
		return false, fmt.Errorf("%w: no matches for kind", ErrNetworkAPIMissing)
	}
	return f.present[ns+"/"+name], nil
}

func testNamespaces() fakeNamespaces {
	on := map[string]string{contract.LabelInject: contract.InjectEnabled}
	return fakeNamespaces{
		"training":    {Name: "training", Labels: on},
		"plain":       {Name: "plain", Labels: map[string]string{"team": "a"}},
		"kube-system": {Name: "kube-system", Labels: on},
		releaseNS:     {Name: releaseNS, Labels: on},
	}
}

// loadPod reads a pod from testdata.
func loadPod(t testing.TB, name string) *corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	golden.ReadYAML(t, "testdata/"+name, &pod)
	return &pod
}

type reviewOpt func(*admissionv1.AdmissionReview)

func withOperation(op admissionv1.Operation) reviewOpt {
	return func(r *admissionv1.AdmissionReview) { r.Request.Operation = op }
}

func withNamespace(ns string) reviewOpt {
	return func(r *admissionv1.AdmissionReview) { r.Request.Namespace = ns }
}

// reviewBody builds the AdmissionReview the API server would send for obj.
func reviewBody(t testing.TB, obj any, opts ...reviewOpt) []byte {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	r := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       "0c6a4b8e-1111-2222-3333-444455556666",
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: "training",
			Operation: admissionv1.Create,
		},
	}
	r.Request.Object.Raw = raw
	if pod, ok := obj.(*corev1.Pod); ok && pod.Namespace != "" {
		r.Request.Namespace = pod.Namespace
	}
	for _, o := range opts {
		o(&r)
	}
	body, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// answer is what one request got back.
type answer struct {
	code int
	resp *admissionv1.AdmissionResponse
	body string
}

// serveReview posts body to h as the API server sends a review and
// returns what h wrote back.
func serveReview(h http.Handler, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func post(t testing.TB, h http.Handler, body []byte) answer {
	t.Helper()
	rec := serveReview(h, body)
	a := answer{code: rec.Code, body: rec.Body.String()}
	if rec.Code == http.StatusOK {
		var r admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
			t.Fatalf("response is not an AdmissionReview: %v\n%s", err, rec.Body.String())
		}
		if r.APIVersion == "" || r.Kind != "AdmissionReview" || r.Response == nil {
			t.Fatalf("incomplete AdmissionReview response: %s", rec.Body.String())
		}
		a.resp = r.Response
	}
	return a
}

// applyPatch applies the response's patch to the pod that was sent.
func applyPatch(t testing.TB, pod *corev1.Pod, resp *admissionv1.AdmissionResponse) *corev1.Pod {
	t.Helper()
	orig, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Patch) == 0 {
		return pod.DeepCopy()
	}
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("patchType = %v, want JSONPatch", resp.PatchType)
	}
	p, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatalf("patch is not RFC 6902: %v\n%s", err, resp.Patch)
	}
	patched, err := p.Apply(orig)
	if err != nil {
		t.Fatalf("patch does not apply to the pod sent: %v\n%s", err, resp.Patch)
	}
	var out corev1.Pod
	if err := json.Unmarshal(patched, &out); err != nil {
		t.Fatalf("patched pod: %v", err)
	}
	return &out
}

// coreStub stands in for the mutation core.
type coreStub struct {
	called bool
	res    mutate.Result
	err    error
	edit   func(*corev1.Pod) // the in-place change that res.Patch describes
}

func (c *coreStub) mutate(pod *corev1.Pod, _ mutate.Namespace, _ *config.Config) (mutate.Result, error) {
	c.called = true
	if c.edit != nil {
		c.edit(pod)
	}
	return c.res, c.err
}

func newHandler(t testing.TB, core func(*corev1.Pod, mutate.Namespace, *config.Config) (mutate.Result, error),
	networks NetworkLookup, reg prometheus.Registerer) *Handler {
	t.Helper()
	cfg := config.Default()
	cfg.ReleaseNamespace = releaseNS
	var m *Metrics
	if reg != nil {
		var err error
		if m, err = NewMetrics(reg); err != nil {
			t.Fatal(err)
		}
	}
	h, err := New(Options{
		Config:           func() *config.Config { return cfg },
		Namespaces:       testNamespaces(),
		Networks:         networks,
		ReleaseNamespace: releaseNS,
		Metrics:          m,
		Log:              logr.Discard(),
		Mutate:           core,
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestHandler(t *testing.T) {
	t.Parallel()
	worker := loadPod(t, "worker-8gpu.yaml")
	addAnnotation := func(p *corev1.Pod) { p.Annotations["infiniband.azure.com/injected"] = "mode=rdma-shared" }
	annotationPatch := []mutate.PatchOp{{Op: "add", Path: "/metadata/annotations/infiniband.azure.com~1injected", Value: "mode=rdma-shared"}}
	deployment := map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "d"}}

	tests := []struct {
		name     string
		body     []byte
		core     coreStub
		networks NetworkLookup
		// want
		code       int
		coreCalled bool
		allowed    bool
		patched    bool
		denial     []string // substrings of the denial message
		warnings   []string
		outcome    string
		mode       string
	}{
		{
			name: "not JSON", body: []byte("{not json"),
			code: http.StatusBadRequest, outcome: OutcomeError, mode: modeNone,
		},
		{
			name: "not an AdmissionReview", body: []byte(`{"apiVersion":"v1","kind":"Pod","request":{"uid":"x"}}`),
			code: http.StatusBadRequest, outcome: OutcomeError, mode: modeNone,
		},
		{
			name: "review without request", body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`),
			code: http.StatusBadRequest, outcome: OutcomeError, mode: modeNone,
		},
		{
			name: "not a pod", body: reviewBody(t, deployment, func(r *admissionv1.AdmissionReview) {
				r.Request.Kind = metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
				r.Request.Resource = metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
			}),
			code: http.StatusOK, allowed: true, outcome: OutcomeSkipped, mode: modeNone,
		},
		{
			name: "pod UPDATE is ignored", body: reviewBody(t, worker, withOperation(admissionv1.Update)),
			core: coreStub{res: mutate.Result{Patch: annotationPatch}, edit: addAnnotation},
			code: http.StatusOK, allowed: true, outcome: OutcomeSkipped, mode: modeNone,
		},
		{
			name: "pod DELETE is ignored", body: reviewBody(t, worker, withOperation(admissionv1.Delete)),
			code: http.StatusOK, allowed: true, outcome: OutcomeSkipped, mode: modeNone,
		},
		{
			name: "pod subresource is ignored", body: reviewBody(t, worker, func(r *admissionv1.AdmissionReview) { r.Request.SubResource = "binding" }),
			code: http.StatusOK, allowed: true, outcome: OutcomeSkipped, mode: modeNone,
		},
		{
			name: "namespace not opted in", body: reviewBody(t, worker, withNamespace("plain")),
			core: coreStub{res: mutate.Result{Patch: annotationPatch}, edit: addAnnotation},
			code: http.StatusOK, allowed: true, outcome: OutcomeSkipped, mode: modeNone,
		},
		{
			name: "kube-system is never mutated even when labelled", body: reviewBody(t, worker, withNamespace("kube-system")),
			core: coreStub{res: mutate.Result{Patch: annotationPatch}, edit: addAnnotation},
			code: http.StatusOK, allowed: true, outcome: OutcomeSkipped, mode: modeNone,
		},
		{
			name: "release namespace is never mutated even when labelled", body: reviewBody(t, worker, withNamespace(releaseNS)),
			core: coreStub{res: mutate.Result{Patch: annotationPatch}, edit: addAnnotation},
			code: http.StatusOK, allowed: true, outcome: OutcomeSkipped, mode: modeNone,
		},
		{
			name: "namespace lookup fails: HTTP error so failurePolicy decides", body: reviewBody(t, worker, withNamespace("gone")),
			code: http.StatusInternalServerError, outcome: OutcomeError, mode: modeNone,
		},
		{
			name: "refusal is a 403 denial with the core's message", body: reviewBody(t, worker),
			core: coreStub{err: &mutate.Refusal{Msg: `infiniband.azure.com/mode: invalid value "rdma": want one of rdma-shared, ...`}},
			code: http.StatusOK, coreCalled: true, denial: []string{`invalid value "rdma"`}, outcome: OutcomeRefused, mode: "rdma-exclusive,ipoib",
		},
		{
			name: "core failure that is no refusal: HTTP error", body: reviewBody(t, worker),
			core: coreStub{err: errors.New("boom")},
			code: http.StatusInternalServerError, coreCalled: true, outcome: OutcomeError, mode: "rdma-exclusive,ipoib",
		},
		{
			name: "unchanged pod with warnings", body: reviewBody(t, worker),
			core: coreStub{res: mutate.Result{Injected: true, Mode: contract.Mode{Shared: true}, Warnings: []string{"IPC_LOCK skipped: namespace enforces baseline"}}},
			code: http.StatusOK, coreCalled: true, allowed: true, warnings: []string{"IPC_LOCK skipped: namespace enforces baseline"},
			outcome: OutcomeUnchanged, mode: "rdma-shared",
		},
		{
			name: "mutated pod gets the core's ops as patch", body: reviewBody(t, worker),
			core: coreStub{res: mutate.Result{Injected: true, Mode: contract.Mode{Shared: true}, Patch: annotationPatch}, edit: addAnnotation},
			code: http.StatusOK, coreCalled: true, allowed: true, patched: true, outcome: OutcomeInjected, mode: "rdma-shared",
		},
		{
			name: "ipoib network present", body: reviewBody(t, worker),
			core:     coreStub{res: mutate.Result{Injected: true, Mode: contract.Mode{Exclusive: true, IPoIB: true}, Patch: annotationPatch}, edit: addAnnotation},
			networks: fakeNetworks{present: map[string]bool{releaseNS + "/ibkube-ipoib": true}},
			code:     http.StatusOK, coreCalled: true, allowed: true, patched: true, outcome: OutcomeInjected, mode: "rdma-exclusive,ipoib",
		},
		{
			name: "ipoib network missing: refused naming the NAD and how to create it", body: reviewBody(t, worker),
			core:     coreStub{res: mutate.Result{Injected: true, Mode: contract.Mode{Exclusive: true, IPoIB: true}, Patch: annotationPatch}, edit: addAnnotation},
			networks: fakeNetworks{present: map[string]bool{"training/ibkube-ipoib": true}},
			code:     http.StatusOK, coreCalled: true,
			denial:  []string{releaseNS + "/ibkube-ipoib", "does not exist", "--set networks.ipoib.enabled=true", "kubectl apply"},
			outcome: OutcomeRefused, mode: "rdma-exclusive,ipoib",
		},
		{
			name: "NAD API not served: refused saying the CRD is missing", body: reviewBody(t, worker),
			core:     coreStub{res: mutate.Result{Injected: true, Mode: contract.Mode{IPoIB: true}, Patch: annotationPatch}, edit: addAnnotation},
			networks: fakeNetworks{apiMissing: true},
			code:     http.StatusOK, coreCalled: true,
			denial:  []string{"Multus/NAD CRD is missing", releaseNS + "/ibkube-ipoib"},
			outcome: OutcomeRefused, mode: "ipoib",
		},
		{
			name: "rdma modes do not need the network", body: reviewBody(t, worker),
			core:     coreStub{res: mutate.Result{Injected: true, Mode: contract.Mode{Exclusive: true}, Patch: annotationPatch}, edit: addAnnotation},
			networks: fakeNetworks{apiMissing: true},
			code:     http.StatusOK, coreCalled: true, allowed: true, patched: true, outcome: OutcomeInjected, mode: "rdma-exclusive",
		},
		{
			name: "network check off: missing NAD admitted", body: reviewBody(t, worker),
			core:     coreStub{res: mutate.Result{Injected: true, Mode: contract.Mode{IPoIB: true}, Patch: annotationPatch}, edit: addAnnotation},
			networks: nil,
			code:     http.StatusOK, coreCalled: true, allowed: true, patched: true, outcome: OutcomeInjected, mode: "ipoib",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			core := tc.core
			h := newHandler(t, core.mutate, tc.networks, reg)
			got := post(t, h, tc.body)
			if got.code != tc.code {
				t.Fatalf("HTTP %d, want %d: %s", got.code, tc.code, got.body)
			}
			if core.called != tc.coreCalled {
				t.Errorf("core called = %v, want %v", core.called, tc.coreCalled)
			}
			if n := counterValue(t, h.opts.Metrics.mutations.WithLabelValues(tc.mode, tc.outcome)); n != 1 {
				t.Errorf("ibkube_webhook_mutations_total{mode=%q,outcome=%q} = %v, want 1", tc.mode, tc.outcome, n)
			}
			if n := histogramCount(t, h.opts.Metrics.latency.WithLabelValues(tc.outcome)); n != 1 {
				t.Errorf("ibkube_webhook_mutation_duration_seconds_count{outcome=%q} = %v, want 1", tc.outcome, n)
			}
			if got.code != http.StatusOK {
				return
			}
			resp := got.resp
			if resp.UID != "0c6a4b8e-1111-2222-3333-444455556666" && !strings.Contains(string(tc.body), `"uid":"x"`) {
				t.Errorf("uid = %q, not the request's", resp.UID)
			}
			if resp.Allowed != tc.allowed {
				t.Errorf("allowed = %v, want %v (status %+v)", resp.Allowed, tc.allowed, resp.Result)
			}
			if len(tc.denial) > 0 {
				if resp.Result == nil || resp.Result.Code != http.StatusForbidden || resp.Result.Reason != metav1.StatusReasonForbidden {
					t.Fatalf("denial status = %+v, want code 403 reason Forbidden", resp.Result)
				}
				for _, s := range tc.denial {
					if !strings.Contains(resp.Result.Message, s) {
						t.Errorf("denial %q does not mention %q", resp.Result.Message, s)
					}
				}
				if len(resp.Patch) > 0 {
					t.Errorf("a denial carries a patch: %s", resp.Patch)
				}
			}
			if diff := cmp.Diff(tc.warnings, resp.Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			if (len(resp.Patch) > 0) != tc.patched {
				t.Fatalf("patch = %s, want patched=%v", resp.Patch, tc.patched)
			}
			if tc.patched {
				want := worker.DeepCopy()
				core.edit(want)
				if diff := cmp.Diff(want, applyPatch(t, worker, resp)); diff != "" {
					t.Errorf("patched pod differs from the core's pod (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestHandlerRejectsBadHTTP(t *testing.T) {
	t.Parallel()
	h := newHandler(t, (&coreStub{}).mutate, nil, nil)
	body := reviewBody(t, loadPod(t, "worker-8gpu.yaml"))
	for _, tc := range []struct {
		name, method, contentType string
		want                      int
	}{
		{"GET", http.MethodGet, "application/json", http.StatusMethodNotAllowed},
		{"YAML body", http.MethodPost, "application/yaml", http.StatusUnsupportedMediaType},
		{"body over the limit", http.MethodPost, "application/json", http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := body
			if tc.want == http.StatusRequestEntityTooLarge {
				body = append(bytes.Repeat([]byte(" "), MaxBodyBytes), body...)
			}
			req := httptest.NewRequest(tc.method, Path, bytes.NewReader(body))
			req.Header.Set("Content-Type", tc.contentType)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Errorf("HTTP %d, want %d", rec.Code, tc.want)
			}
		})
	}
}

func TestHandlerEchoesReviewVersion(t *testing.T) {
	t.Parallel()
	h := newHandler(t, (&coreStub{}).mutate, nil, nil)
	body := bytes.Replace(reviewBody(t, loadPod(t, "worker-8gpu.yaml")), []byte(`"admission.k8s.io/v1"`), []byte(`"admission.k8s.io/v1beta1"`), 1)
	rec := serveReview(h, body)
	if !strings.Contains(rec.Body.String(), `"apiVersion":"admission.k8s.io/v1beta1"`) {
		t.Errorf("response does not echo v1beta1: %s", rec.Body.String())
	}
}

// TestHandlerWithCore runs the real core: whatever it decides, the patch the
// handler returns must turn the pod that was sent into exactly the pod the core
// produced in place, and a second admission of the result must change nothing.
func TestHandlerWithCore(t *testing.T) {
	t.Parallel()
	h := newHandler(t, nil, nil, nil)
	cfg := h.opts.Config()
	ns, _ := testNamespaces().Namespace(context.Background(), "training")
	for _, mode := range strings.Split(contract.AcceptedModes, ", ") {
		t.Run(mode, func(t *testing.T) {
			pod := loadPod(t, "worker-8gpu.yaml")
			pod.Annotations["infiniband.azure.com/mode"] = mode
			got := post(t, h, reviewBody(t, pod))
			if got.code != http.StatusOK {
				t.Fatalf("HTTP %d: %s", got.code, got.body)
			}
			if !got.resp.Allowed {
				t.Fatalf("denied: %+v", got.resp.Result)
			}
			want := pod.DeepCopy()
			if _, err := mutate.Mutate(want, ns, cfg); err != nil {
				t.Fatal(err)
			}
			patched := applyPatch(t, pod, got.resp)
			if diff := cmp.Diff(want, patched); diff != "" {
				t.Errorf("patched pod differs from the core's pod (-want +got):\n%s", diff)
			}
			again := post(t, h, reviewBody(t, patched))
			if again.code != http.StatusOK || len(again.resp.Patch) > 0 {
				t.Errorf("second admission not a no-op: HTTP %d patch %s", again.code, again.resp.Patch)
			}
		})
	}
}

func counterValue(t testing.TB, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func histogramCount(t testing.TB, o prometheus.Observer) uint64 {
	t.Helper()
	var m dto.Metric
	if err := o.(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// recordingNamespaces is a NamespaceLookup that records the names it was asked for.
type recordingNamespaces struct {
	fakeNamespaces
	asked []string
}

func (r *recordingNamespaces) Namespace(ctx context.Context, name string) (mutate.Namespace, error) {
	r.asked = append(r.asked, name)
	return r.fakeNamespaces.Namespace(ctx, name)
}

// TestHandlerRefusesForgedNames: a review whose namespace is no namespace name
// (a path into another resource, a parent directory) is answered 400 without
// any lookup, so the webhook's answers cannot tell whether some other object
// exists; a pod claiming a namespace other than the request's is refused too.
func TestHandlerRefusesForgedNames(t *testing.T) {
	t.Parallel()
	worker := loadPod(t, "worker-8gpu.yaml")
	for _, tc := range []struct {
		name      string
		body      []byte
		wantAsked []string
	}{
		{name: "secret path as namespace", body: reviewBody(t, worker, withNamespace("ibkube-system/secrets/ibkube-webhook-tls"))},
		{name: "parent directory", body: reviewBody(t, worker, withNamespace("../../api/v1/namespaces/kube-system"))},
		{name: "upper case", body: reviewBody(t, worker, withNamespace("Training"))},
		{name: "pod in another namespace than the request", body: reviewBody(t, worker, func(r *admissionv1.AdmissionReview) {
			r.Request.Object.Raw = bytes.Replace(r.Request.Object.Raw, []byte(`"namespace":"training"`), []byte(`"namespace":"ibkube-system"`), 1)
		}), wantAsked: []string{"training"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := &recordingNamespaces{fakeNamespaces: testNamespaces()}
			core := &coreStub{}
			h, err := New(Options{Config: config.Default, Namespaces: ns, Log: logr.Discard(), Mutate: core.mutate})
			if err != nil {
				t.Fatal(err)
			}
			rec := serveReview(h, tc.body)
			if rec.Code != http.StatusBadRequest {
				t.Errorf("HTTP %d, want 400; body %s", rec.Code, rec.Body)
			}
			if diff := cmp.Diff(tc.wantAsked, ns.asked); diff != "" {
				t.Errorf("namespaces looked up (-want +got):\n%s", diff)
			}
			if core.called {
				t.Error("the core ran on a forged review")
			}
		})
	}
}

// TestModeLabel checks the metric label stays one of the canonical modes or
// "invalid" whatever a refused pod's annotation says.
func TestModeLabel(t *testing.T) {
	t.Parallel()
	pod := func(v string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{contract.AnnotationMode: v}}}
	}
	for _, tc := range []struct {
		name string
		res  mutate.Result
		pod  *corev1.Pod
		want string
	}{
		{"injected", mutate.Result{Injected: true, Mode: contract.Mode{Exclusive: true, IPoIB: true}}, pod("rdma-exclusive,ipoib"), "rdma-exclusive,ipoib"},
		{"refused, written in another order", mutate.Result{}, pod(" ipoib , rdma-shared"), "rdma-shared,ipoib"},
		{"refused, unknown mode", mutate.Result{}, pod("rdma-shared,fast"), "invalid"},
		{"refused, conflicting modes", mutate.Result{}, pod("rdma-shared,rdma-exclusive"), "invalid"},
		{"mode none", mutate.Result{}, pod("none"), "none"},
		{"no annotation", mutate.Result{}, &corev1.Pod{}, "none"},
	} {
		if got := modeLabel(tc.res, tc.pod); got != tc.want {
			t.Errorf("%s: modeLabel = %q, want %q", tc.name, got, tc.want)
		}
	}
}
