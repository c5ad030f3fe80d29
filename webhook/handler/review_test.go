package handler

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestDecodeReviewRefusesLongFieldsUncopied: a review whose uid or
// namespace is megabytes long is refused without the field being copied
// out of the body (the copy was a second body's worth of memory per forged
// review), and the values around the bounds are decoded and checked as
// before.
func TestDecodeReviewRefusesLongFieldsUncopied(t *testing.T) {
	uid := func(v string) reviewOpt { return func(r *admissionv1.AdmissionReview) { r.Request.UID = types.UID(v) } }
	for _, tc := range []struct {
		name, uid, namespace string
		wantErr              string
	}{
		{"a UUID", "0c6a4b8e-1111-2222-3333-444455556666", "training", ""},
		{"uid at the bound", strings.Repeat("u", maxUIDBytes), "training", ""},
		{"uid one over", strings.Repeat("u", maxUIDBytes+1), "training", "request uid of 129 bytes; accepted: at most 128"},
		{"uid escaped, at the bound", strings.Repeat("\u00e9", maxUIDBytes/2), "training", ""},
		{"uid of 4 MiB", strings.Repeat("u", 4<<20), "training", "request uid of 4194304 bytes; accepted: at most 128"},
		{"namespace of 63", "u", strings.Repeat("n", 63), ""},
		{"namespace of 4 MiB", "u", strings.Repeat("n", 4<<20), "request namespace of 4194304 bytes; accepted: a DNS-1123 label, at most 63 characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := reviewBody(t, nil, uid(tc.uid), withNamespace(tc.namespace))
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			rev, err := decodeReview(body)
			runtime.ReadMemStats(&after)
			if tc.wantErr == "" {
				if err != nil || rev.Request.UID != types.UID(tc.uid) || rev.Request.Namespace != tc.namespace {
					t.Fatalf("decodeReview: %v; want uid %q, namespace %q", err, tc.uid, tc.namespace)
				}
				return
			}
			if !errors.Is(err, errBadReview) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("decodeReview: %v; want %q", err, tc.wantErr)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<10 {
				t.Errorf("refusing a review of %d bytes allocated %d bytes, want under 64 KiB", len(body), alloc)
			}
		})
	}
}
