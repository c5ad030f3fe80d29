package server

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/ibkube/ibkube/internal/testing/servingcert"
)

// TestStopDrainsKeptAliveConnections: after the stop signal the server keeps
// answering on a connection the client already holds, and marks the answer
// Connection: close, so the client drops that connection after the answer
// instead of writing its next request into a socket the server closes.
func TestStopDrainsKeptAliveConnections(t *testing.T) {
	dir := t.TempDir()
	servingcert.Write(t, dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	limits := DefaultLimits()
	limits.DrainPeriod = 2 * time.Second
	s := &tlsServer{
		certDir: dir, limits: limits, log: logr.Discard(), tlsOpts: []func(*tls.Config){hardenTLS},
		handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := r.Context().Err(); err != nil {
				http.Error(w, "request context ended: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
			_, _ = io.WriteString(w, "ok")
		}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.serve(ctx, ln) }()

	var conns int
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // test server with a throwaway certificate
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conns++
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
		MaxIdleConnsPerHost: 1,
	}}
	get := func() *http.Response {
		t.Helper()
		resp, err := client.Get("https://" + ln.Addr().String() + "/")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp
	}
	// Serving (the listener is open, so the first dial waits for Serve):
	// the connection is kept alive.
	if r := get(); r.StatusCode != http.StatusOK || r.Close {
		t.Fatalf("before stop: status %d, Connection: close %v; want 200 kept alive", r.StatusCode, r.Close)
	}

	cancel()
	// Draining: the request on the kept-alive connection is answered, with a
	// live request context, and the connection is closed after it.
	deadline := time.Now().Add(time.Minute)
	for {
		r := get()
		if r.StatusCode != http.StatusOK {
			t.Fatalf("during drain: status %d, want 200", r.StatusCode)
		}
		if r.Close {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no answer carried Connection: close after the stop signal")
		}
	}
	if conns != 1 {
		t.Errorf("%d connections dialled before the drain answer, want the one kept alive", conns)
	}
	if err := <-done; err != nil {
		t.Fatalf("serve after drain: %v", err)
	}
}
