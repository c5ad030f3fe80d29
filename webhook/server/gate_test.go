package server

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/ibkube/ibkube/webhook/handler"
)

func (s *tlsServer) activeConns() int { return s.conns.Load().count(http.StateActive) }

// TestIdleConnectionsMakeRoom: MaxConns clients each send a review and keep
// their connection alive, idle. A new client is not closed at accept for
// the idle timeout: the idle connection that waited longest is closed to
// make room, and the new client's review is answered.
func TestIdleConnectionsMakeRoom(t *testing.T) {
	limits := testLimits()
	limits.MaxConns = 16
	a := startAttackServer(t, limits)
	review := bigReview(t, 4096)
	for range limits.MaxConns {
		// One client each, so each keeps its own connection.
		codes, _ := floodWith(t, a, a.client(), 1, review)
		if codes[http.StatusOK] != 1 {
			t.Fatalf("review answered %v", codes)
		}
	}
	waitFor(t, "every connection idle", func() bool { return a.srv.conns.Load().count(http.StateIdle) == limits.MaxConns })
	codes, _ := floodWith(t, a, a.client(), 1, review)
	if codes[http.StatusOK] != 1 {
		t.Errorf("a new client beside %d idle connections answered %v, want 200", limits.MaxConns, codes)
	}
	if n := a.rejected(t, "connections_evicted"); n != 1 {
		t.Errorf("idle connections closed to make room: %d, want 1", n)
	}
	if n := a.rejected(t, "connections"); n != 0 {
		t.Errorf("connections closed at accept: %d, want 0", n)
	}
}

// TestReadinessUnderConnectionFlood: with every connection of the cap at
// work, the readiness check still completes its handshake, so the kubelet
// keeps the replica in the Service.
func TestReadinessUnderConnectionFlood(t *testing.T) {
	limits := testLimits()
	limits.MaxConns = 16
	a := startAttackServer(t, limits)
	for range limits.MaxConns {
		c := a.dial(t)
		if _, err := io.WriteString(c, stalledHeader(mib)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every connection active", func() bool { return a.srv.activeConns() == limits.MaxConns })
	if err := a.srv.StartedChecker()(nil); err != nil {
		t.Errorf("readiness with the connection cap full: %v", err)
	}
}

// floodWith is flood with the given client.
func floodWith(t testing.TB, a *attackServer, c *http.Client, n int, body []byte) (map[int]int, error) {
	t.Helper()
	codes := map[int]int{}
	for range n {
		req, err := http.NewRequest(http.MethodPost, "https://"+a.addr+handler.Path, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		code := -1
		if err == nil {
			code = resp.StatusCode
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		codes[code]++
	}
	return codes, nil
}
