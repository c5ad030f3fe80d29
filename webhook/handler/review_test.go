package handler

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestDecodeReviewRefusesLongUIDUncopied: a review whose uid is megabytes
// long is refused without the uid being copied out of the body (the copy
// was a second body's worth of memory per forged review), and the uids
// around the bound are decoded and checked as before.
func TestDecodeReviewRefusesLongUIDUncopied(t *testing.T) {
	for _, tc := range []struct {
		name    string
		uid     string
		wantErr string
	}{
		{"a UUID", "0c6a4b8e-1111-2222-3333-444455556666", ""},
		{"at the bound", strings.Repeat("u", maxUIDBytes), ""},
		{"one over", strings.Repeat("u", maxUIDBytes+1), "request uid of 129 bytes; accepted: at most 128"},
		{"escaped, at the bound", strings.Repeat("\u00e9", maxUIDBytes/2), ""},
		{"4 MiB", strings.Repeat("u", 4<<20), "request uid of 4194304 bytes; accepted: at most 128"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := reviewBody(t, nil, func(r *admissionv1.AdmissionReview) { r.Request.UID = types.UID(tc.uid) })
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			rev, err := decodeReview(body)
			runtime.ReadMemStats(&after)
			if tc.wantErr == "" {
				if err != nil || rev.Request.UID != types.UID(tc.uid) {
					t.Fatalf("decodeReview: uid %q, %v; want %q", rev.Request.UID, err, tc.uid)
				}
				return
			}
			if !errors.Is(err, errBadReview) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("decodeReview: %v; want %q", err, tc.wantErr)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<10 {
				t.Errorf("refusing a %d-byte uid allocated %d bytes, want under 64 KiB", len(tc.uid), alloc)
			}
		})
	}
}
