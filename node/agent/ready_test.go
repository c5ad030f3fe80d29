package agent

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/ibkube/ibkube/internal/testing/testrun"
	"github.com/ibkube/ibkube/node/resource"
)

// publishingServer stands for the DRA driver: its devices reach the API
// server when the test closes published.
type publishingServer struct {
	published chan struct{}
	updates   chan *resource.Model
}

func (s *publishingServer) Update(m *resource.Model) {
	select {
	case s.updates <- m:
	default:
	}
}

func (s *publishingServer) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

func (s *publishingServer) Published(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.published:
		return nil
	}
}

// TestReadyOnlyOncePublished: a server that can tell when its devices are
// published keeps /readyz failing (and /healthz passing) until then, so a
// DaemonSet rollout does not count the agent as available while the
// scheduler sees no devices on its node.
func TestReadyOnlyOncePublished(t *testing.T) {
	t.Parallel()
	srv := &publishingServer{published: make(chan struct{}), updates: make(chan *resource.Model, 1)}
	health := listen(t)
	a, err := New(Config{Scanner: &fakeScanner{node: node(true), hints: make(chan struct{})}, HealthListener: health, Server: srv}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	testrun.Start(context.Background(), t, "agent", a.Run)
	base := "http://" + health.Addr().String()
	// The first model reaches the server before Run returns to its loop.
	select {
	case <-srv.updates:
	case <-time.After(10 * time.Second):
		t.Fatal("the server got no model")
	}
	waitStatus(t, base+"/healthz", http.StatusOK)
	if got := status(t, base+"/readyz"); got != http.StatusServiceUnavailable {
		t.Errorf("/readyz before the devices are published = %d, want %d", got, http.StatusServiceUnavailable)
	}
	if a.Ready() {
		t.Error("Ready() before the devices are published")
	}
	close(srv.published)
	waitStatus(t, base+"/readyz", http.StatusOK)
}

func status(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitStatus polls url until it answers want; the deadline only bounds a
// failure.
func waitStatus(t *testing.T, url string, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for status(t, url) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s never answered %d", url, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
