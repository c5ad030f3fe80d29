package certs

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type recordRT struct{ got *http.Request }

func (r *recordRT) RoundTrip(req *http.Request) (*http.Response, error) {
	r.got = req
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
}

// TestNameSelector: the rotator's Secret list and watch carry the Secret's
// name as a field selector (which RBAC resourceNames needs); anything else
// passes unchanged.
func TestNameSelector(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, method, url string
		wantQuery         url.Values
	}{
		{name: "list", method: http.MethodGet, url: "https://api/api/v1/namespaces/ibkube-system/secrets?limit=500",
			wantQuery: url.Values{"limit": {"500"}, "fieldSelector": {"metadata.name=ibkube-webhook-tls"}}},
		{name: "watch", method: http.MethodGet, url: "https://api/api/v1/namespaces/ibkube-system/secrets?watch=true&resourceVersion=7",
			wantQuery: url.Values{"watch": {"true"}, "resourceVersion": {"7"}, "fieldSelector": {"metadata.name=ibkube-webhook-tls"}}},
		{name: "existing selector kept", method: http.MethodGet, url: "https://api/api/v1/namespaces/ibkube-system/secrets?fieldSelector=type%3Dopaque",
			wantQuery: url.Values{"fieldSelector": {"type=opaque,metadata.name=ibkube-webhook-tls"}}},
		{name: "selector not doubled", method: http.MethodGet, url: "https://api/api/v1/namespaces/ibkube-system/secrets?fieldSelector=metadata.name%3Dibkube-webhook-tls",
			wantQuery: url.Values{"fieldSelector": {"metadata.name=ibkube-webhook-tls"}}},
		{name: "get by name untouched", method: http.MethodGet, url: "https://api/api/v1/namespaces/ibkube-system/secrets/ibkube-webhook-tls",
			wantQuery: url.Values{}},
		{name: "update untouched", method: http.MethodPut, url: "https://api/api/v1/namespaces/ibkube-system/secrets/ibkube-webhook-tls",
			wantQuery: url.Values{}},
		{name: "other namespace untouched", method: http.MethodGet, url: "https://api/api/v1/namespaces/default/secrets",
			wantQuery: url.Values{}},
		{name: "webhook configurations untouched", method: http.MethodGet, url: "https://api/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations?watch=true",
			wantQuery: url.Values{"watch": {"true"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := &recordRT{}
			rt := &nameSelector{next: rec, collection: "/api/v1/namespaces/ibkube-system/secrets", selector: "metadata.name=ibkube-webhook-tls"}
			req, err := http.NewRequest(tc.method, tc.url, http.NoBody)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := rt.RoundTrip(req); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantQuery, rec.got.URL.Query()); diff != "" {
				t.Errorf("query sent (-want +got):\n%s", diff)
			}
		})
	}
}
