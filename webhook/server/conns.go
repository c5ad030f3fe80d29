package server

import (
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// requestGrace is how long a connection may take to deliver a request's
// headers, from its accept or from the first byte of its next request,
// before it can be closed to make room: a client writes its headers in one
// go within milliseconds of its handshake (or of reusing a kept-alive
// connection), so only a connection held open on purpose is slower.
const requestGrace = time.Second

// connTable follows every counted connection's state (http.Server's
// ConnState) so that, at the connection cap, the connection that does the
// least is closed to make room instead of the new one: an idle kept-alive
// connection first, then one that has sent no complete request headers
// within requestGrace. Without it, MaxConns idle connections hold the cap
// for the whole IdleTimeout and every new connection, the API server's
// included, is closed at accept.
//
// An idle connection whose next request has begun to arrive (bytes read
// by the server, or waiting in the kernel's receive buffer) is not idle:
// net/http marks it active only once its headers are parsed, and a POST
// closed under its client is not retried (net/http's Transport retries a
// non-idempotent request only when nothing of it was written), so the
// call would fall to the webhook's failurePolicy.
type connTable struct {
	mu    sync.Mutex
	conns map[net.Conn]connEntry
}

type connEntry struct {
	state http.ConnState
	since time.Time
	raw   *countedConn
}

func newConnTable() *connTable { return &connTable{conns: map[net.Conn]connEntry{}} }

// track is the http.Server's ConnState hook. Only connections accepted
// through the capped listener are followed.
func (t *connTable) track(c net.Conn, st http.ConnState) {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return
	}
	raw, ok := tc.NetConn().(*countedConn)
	if !ok {
		return
	}
	if st == http.StateIdle {
		// Runs on the connection's own goroutine before it waits for the
		// next request, so every byte read from here on belongs to it.
		raw.arrived.Store(0)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch st {
	case http.StateClosed, http.StateHijacked:
		delete(t.conns, c)
	default:
		t.conns[c] = connEntry{state: st, since: time.Now(), raw: raw}
	}
}

// evictRank orders the connections that may be closed to make room:
// quiet idle ones first, longest idle first; then, oldest first, new ones
// and idle ones whose request headers have not arrived within
// requestGrace. ok is false for a connection at work.
func evictRank(e connEntry, now time.Time) (class int, at time.Time, ok bool) {
	switch e.state {
	case http.StateIdle:
		if arrived := e.raw.arrived.Load(); arrived != 0 {
			at := time.Unix(0, arrived)
			return 1, at, now.Sub(at) >= requestGrace
		}
		return 0, e.since, true
	case http.StateNew:
		return 1, e.since, now.Sub(e.since) >= requestGrace
	default:
		return 0, time.Time{}, false
	}
}

// evict closes the connection that ranks first (evictRank); false when
// every connection is at work or has a request arriving. An idle
// candidate with bytes waiting in the kernel is marked as arriving and
// passed over.
func (t *connTable) evict(now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for {
		victim, quiet := t.pick(now)
		if victim == nil {
			return false
		}
		raw := t.conns[victim].raw
		if quiet && raw.pending() {
			raw.arrived.CompareAndSwap(0, now.UnixNano())
			continue
		}
		delete(t.conns, victim)
		_ = victim.Close()
		return true
	}
}

// pick is the first connection by evictRank, and whether it is a quiet
// idle one.
func (t *connTable) pick(now time.Time) (net.Conn, bool) {
	var victim net.Conn
	bestClass, bestAt := 0, time.Time{}
	for c, e := range t.conns {
		class, at, ok := evictRank(e, now)
		if !ok || (victim != nil && (class > bestClass || (class == bestClass && !at.Before(bestAt)))) {
			continue
		}
		victim, bestClass, bestAt = c, class, at
	}
	return victim, victim != nil && bestClass == 0
}

// connLimitListener keeps at most max connections open: at the cap it
// closes the least busy one (connTable.evict) to admit a new one, and
// closes the new one only when all are at work.
type connLimitListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	table   *connTable
	metrics *limitMetrics
}

func (l *connLimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			if l.table != nil && l.table.evict(time.Now()) {
				l.metrics.reject("connections_evicted")
			} else {
				l.open.Add(-1)
				l.metrics.reject("connections")
				_ = c.Close()
				continue
			}
		}
		return &countedConn{Conn: c, release: func() { l.open.Add(-1) }}, nil
	}
}

// countedConn is an accepted connection within the cap. It notes when the
// first byte of a request arrives, so an idle connection being reused is
// not closed to make room (connTable).
type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
	// arrived is when the first byte read since the connection last went
	// idle arrived (Unix nanoseconds); 0 while none has.
	arrived atomic.Int64
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.arrived.Load() == 0 {
		c.arrived.CompareAndSwap(0, time.Now().UnixNano())
	}
	return n, err
}

func (c *countedConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

// pending reports whether bytes the server has not read yet wait in the
// kernel's receive buffer: a request written by its client while the
// connection's goroutine is still to be scheduled. It peeks without
// blocking and without taking the connection's read lock, which the
// goroutine waiting for the next request holds.
func (c *countedConn) pending() bool {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var buf [1]byte
	n := 0
	var peekErr error
	if err := raw.Control(func(fd uintptr) {
		n, _, peekErr = unix.Recvfrom(int(fd), buf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	}); err != nil {
		return false
	}
	return peekErr == nil && n > 0
}
