package handler

import (
	"encoding/json"
	"net/http"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ibkube/ibkube/webhook/config"
	"github.com/ibkube/ibkube/webhook/mutate"
)

// FuzzDecodeAdmissionReview feeds arbitrary bodies to the decoder and to the
// whole handler (with the real core): nothing may panic, a decoded review
// always has a request and a uid, and the handler answers either with an HTTP
// error or with a well-formed AdmissionReview for the same uid.
func FuzzDecodeAdmissionReview(f *testing.F) {
	worker := loadPod(f, "worker-8gpu.yaml")
	f.Add(reviewBody(f, worker))
	f.Add(reviewBody(f, worker, withOperation(admissionv1.Update)))
	f.Add(reviewBody(f, map[string]any{"apiVersion": "apps/v1", "kind": "Deployment"}, func(r *admissionv1.AdmissionReview) {
		r.Request.Kind = metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	}))
	shared := worker.DeepCopy()
	shared.Annotations["infiniband.azure.com/mode"] = "rdma-shared"
	shared.Annotations["k8s.v1.cni.cncf.io/networks"] = `[{"name":"other","namespace":"x"}]`
	f.Add(reviewBody(f, shared))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","namespace":"training","object":{"metadata":{"annotations":{"infiniband.azure.com/mode":"ipoib"}},"spec":{"containers":[{"name":"c"}]}}}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","namespace":"training","object":null}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[`))

	cfg := config.Default()
	cfg.ReleaseNamespace = releaseNS
	h, err := New(Options{
		Config:           func() *config.Config { return cfg },
		Namespaces:       testNamespaces(),
		Networks:         fakeNetworks{present: map[string]bool{releaseNS + "/ibkube-ipoib": true}},
		ReleaseNamespace: releaseNS,
		Mutate:           mutate.Mutate,
	})
	if err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, body []byte) {
		rev, err := decodeReview(body)
		if err == nil && (rev.Request == nil || rev.Request.UID == "") {
			t.Fatalf("decoded review without request or uid: %+v", rev)
		}
		rec := serveReview(h, body)
		if rec.Code != http.StatusOK {
			return
		}
		if err != nil {
			t.Fatalf("HTTP 200 for a body the decoder rejects (%v)", err)
		}
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
			t.Fatalf("bad response (%v): %s", err, rec.Body.String())
		}
		if out.Response.UID != rev.Request.UID {
			t.Fatalf("response uid %q, request uid %q", out.Response.UID, rev.Request.UID)
		}
		if len(out.Response.Patch) > 0 && !json.Valid(out.Response.Patch) {
			t.Fatalf("patch is not JSON: %s", out.Response.Patch)
		}
	})
}
