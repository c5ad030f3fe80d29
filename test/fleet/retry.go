//go:build fleet

package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// retryTransient runs op until it succeeds, fails in a way another try
// cannot mend, or tries attempts have failed, waiting wait between them.
// A 1,000-pod collection delete on a loaded control plane can end in an
// HTTP/2 stream reset or a server timeout after part of its work is done;
// a collection delete or a create-if-absent is safe to send again.
func retryTransient(ctx context.Context, what string, tries int, wait time.Duration, op func() error) error {
	var err error
	for i := range tries {
		if err = op(); err == nil || !transient(err) {
			return err
		}
		if i == tries-1 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (after %v)", what, ctx.Err(), err)
		case <-time.After(wait):
		}
	}
	return fmt.Errorf("%s: %d tries: %w", what, tries, err)
}

// transient: the API server was busy or the connection broke (no API
// status at all, as a stream reset gives); a refusal with a status that
// names the request (not found, invalid, forbidden, conflict) is final,
// and so is the run's own cancellation.
func transient(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsUnexpectedServerError(err)
}
