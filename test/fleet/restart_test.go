//go:build fleet

package fleet

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRestartOnFailure: an agent whose start fails is started again, as
// the kubelet restarts a container that exited, until it starts or has
// been restarted maxRestarts times; a start that never fails is not
// restarted.
func TestRestartOnFailure(t *testing.T) {
	t.Parallel()
	refused := errors.New("net/http: TLS handshake timeout")
	for _, tc := range []struct {
		name         string
		failures     int
		wantRestarts int
		wantErr      bool
	}{
		{"starts", 0, 0, false},
		{"starts on the third try", 2, 2, false},
		{"starts on the last try", maxAgentRestarts, maxAgentRestarts, false},
		{"never starts", maxAgentRestarts + 1, maxAgentRestarts, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			starts := 0
			restarts, err := restartOnFailure(context.Background(), time.Millisecond, maxAgentRestarts, func() error {
				starts++
				if starts <= tc.failures {
					return refused
				}
				return nil
			})
			if restarts != tc.wantRestarts || (err != nil) != tc.wantErr {
				t.Fatalf("restarts %d, err %v; want %d restarts, an error: %v", restarts, err, tc.wantRestarts, tc.wantErr)
			}
			if tc.wantErr && !errors.Is(err, refused) {
				t.Errorf("err %v, want the start's last error", err)
			}
			if starts != restarts+1 {
				t.Errorf("%d starts for %d restarts", starts, restarts)
			}
		})
	}
}

// TestRestartOnFailureStopsWithTheRun: a run that ends stops the restarts
// at once, with the start's error and why the run ended.
func TestRestartOnFailureStopsWithTheRun(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	refused := errors.New("refused")
	restarts, err := restartOnFailure(ctx, time.Hour, maxAgentRestarts, func() error { return refused })
	if restarts != 0 || !errors.Is(err, refused) || !errors.Is(err, context.Canceled) {
		t.Fatalf("restarts %d, err %v; want 0 restarts, the start's error and the run's end", restarts, err)
	}
}
