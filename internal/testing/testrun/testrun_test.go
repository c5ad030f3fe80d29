package testrun

import (
	"context"
	"testing"
	"time"
)

// The run gets its context cancelled when its test ends, and the test's
// end waits for it to return.
func TestStartStopsAtTestEnd(t *testing.T) {
	stopped := make(chan struct{})
	t.Run("test", func(t *testing.T) {
		r := Start(context.Background(), t, "run", func(ctx context.Context) error {
			<-ctx.Done()
			close(stopped)
			return nil
		})
		ready := make(chan struct{})
		close(ready)
		r.WaitFor(t, ready, time.Minute, "ready")
	})
	select {
	case <-stopped:
	default:
		t.Fatal("the run had not returned when its test ended")
	}
}
