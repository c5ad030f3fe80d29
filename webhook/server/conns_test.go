package server

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/ibkube/ibkube/webhook/handler"
)

// reviewRequest is a whole review request as a client writes it, split
// after its first header line.
func reviewRequest(body []byte) (head, rest string) {
	return "POST " + handler.Path + " HTTP/1.1\r\n",
		"Host: ibkube-webhook\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + string(body)
}

// TestEvictionSparesArrivingRequest: at the connection cap, a kept-alive
// connection whose next request has begun to arrive is not closed to make
// room (net/http still calls it idle until its headers are parsed, and a
// POST closed under its client is not retried, so the API server's call
// would fall to failurePolicy); the new connection is closed at accept
// instead, and the arriving request is answered.
func TestEvictionSparesArrivingRequest(t *testing.T) {
	limits := testLimits()
	limits.MaxConns = 1
	a := startAttackServer(t, limits)
	review := bigReview(t, 1024)
	c := a.dial(t)
	r := bufio.NewReader(c)
	roundTrip := func(what string) {
		t.Helper()
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: HTTP %d", what, resp.StatusCode)
		}
	}
	head, rest := reviewRequest(review)
	if _, err := io.WriteString(c, head+rest); err != nil {
		t.Fatal(err)
	}
	roundTrip("first review")
	waitFor(t, "the connection idle", func() bool { return a.srv.conns.Load().count(http.StateIdle) == 1 })

	// The next request's first line reaches the server; the rest is still
	// on its way when a new connection arrives at the cap.
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	if nc, err := tls.Dial("tcp", a.addr, &tls.Config{InsecureSkipVerify: true}); err == nil { //nolint:gosec // test server with a throwaway certificate
		// Accepted only if a connection was closed to make room; a read
		// tells whether the server keeps it.
		_ = nc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = nc.Read(make([]byte, 1))
		_ = nc.Close()
	}
	if _, err := io.WriteString(c, rest); err != nil {
		t.Fatalf("finish the arriving request: %v", err)
	}
	roundTrip("the request arriving when the cap was reached")
	if n := a.rejected(t, "connections_evicted"); n != 0 {
		t.Errorf("connections closed to make room: %d, want 0", n)
	}
	if n := a.rejected(t, "connections"); n != 1 {
		t.Errorf("connections closed at accept: %d, want 1", n)
	}
}

// TestEvictRank: which connections may be closed to make room, in order.
func TestEvictRank(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	arriving := func(ago time.Duration) *countedConn {
		c := &countedConn{}
		c.arrived.Store(now.Add(-ago).UnixNano())
		return c
	}
	for _, tc := range []struct {
		name      string
		e         connEntry
		wantClass int
		wantOK    bool
	}{
		{"idle, quiet", connEntry{state: http.StateIdle, since: now, raw: &countedConn{}}, 0, true},
		{"idle, request arriving", connEntry{state: http.StateIdle, since: now.Add(-time.Minute), raw: arriving(10 * time.Millisecond)}, 1, false},
		{"idle, request headers stalled past the grace", connEntry{state: http.StateIdle, since: now.Add(-time.Minute), raw: arriving(requestGrace)}, 1, true},
		{"new, within the grace", connEntry{state: http.StateNew, since: now.Add(-requestGrace / 2), raw: &countedConn{}}, 1, false},
		{"new, past the grace", connEntry{state: http.StateNew, since: now.Add(-requestGrace), raw: &countedConn{}}, 1, true},
		{"active", connEntry{state: http.StateActive, since: now.Add(-time.Hour), raw: &countedConn{}}, 0, false},
	} {
		class, _, ok := evictRank(tc.e, now)
		if ok != tc.wantOK || (ok && class != tc.wantClass) {
			t.Errorf("%s: class %d, may close %v; want class %d, %v", tc.name, class, ok, tc.wantClass, tc.wantOK)
		}
	}
}

// TestPendingSeesUnreadBytes: bytes a client wrote that the server has not
// read yet are seen without reading them or blocking.
func TestPendingSeesUnreadBytes(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	server := &countedConn{Conn: sc, release: func() {}}
	defer server.Close()
	if server.pending() {
		t.Fatal("pending before the client wrote anything")
	}
	if _, err := io.WriteString(client, "POST"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the bytes seen as pending", server.pending)
	buf := make([]byte, 4)
	if _, err := io.ReadFull(server, buf); err != nil || string(buf) != "POST" {
		t.Fatalf("read after peeking: %q, %v", buf, err)
	}
	if server.pending() {
		t.Error("pending after the bytes were read")
	}
}
