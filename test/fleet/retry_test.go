//go:build fleet

package fleet

import (
	"context"
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// A stream reset (what a collection delete of 1,000 pods met at 1,000
// nodes) and a busy server are tried again; a refusal that names the
// request is not.
func TestRetryTransient(t *testing.T) {
	t.Parallel()
	pods := schema.GroupResource{Resource: "pods"}
	stream := errors.New(`stream error: stream ID 3; INTERNAL_ERROR; received from peer`)
	tests := []struct {
		name      string
		errs      []error // op's results, in turn; nil after the last
		wantCalls int
		wantErr   bool
	}{
		{name: "first try", errs: nil, wantCalls: 1},
		{name: "stream reset, then done", errs: []error{stream}, wantCalls: 2},
		{name: "server timeout twice, then done", errs: []error{apierrors.NewServerTimeout(pods, "deletecollection", 1), apierrors.NewTooManyRequests("busy", 1)}, wantCalls: 3},
		{name: "internal error every time", errs: []error{apierrors.NewInternalError(stream), apierrors.NewInternalError(stream), apierrors.NewInternalError(stream)}, wantCalls: 3, wantErr: true},
		{name: "forbidden is final", errs: []error{apierrors.NewForbidden(pods, "", errors.New("no"))}, wantCalls: 1, wantErr: true},
		{name: "cancelled run is final", errs: []error{fmt.Errorf("list: %w", context.Canceled)}, wantCalls: 1, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			calls := 0
			err := retryTransient(context.Background(), "delete pods", 3, 0, func() error {
				calls++
				if calls <= len(tc.errs) {
					return tc.errs[calls-1]
				}
				return nil
			})
			if calls != tc.wantCalls || (err != nil) != tc.wantErr {
				t.Errorf("calls %d, err %v; want %d calls, error %v", calls, err, tc.wantCalls, tc.wantErr)
			}
		})
	}
}
