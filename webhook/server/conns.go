package server

import (
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// newConnGrace is how long a connection may sit without a first request
// before it can be closed to make room: a client completes its TLS
// handshake and sends its request within milliseconds, so only a
// connection held open on purpose is that old.
const newConnGrace = time.Second

// connTable follows every counted connection's state (http.Server's
// ConnState) so that, at the connection cap, the connection that does the
// least is closed to make room instead of the new one: an idle kept-alive
// connection first, then one that has sent no request for newConnGrace.
// Without it, MaxConns idle connections hold the cap for the whole
// IdleTimeout and every new connection, the API server's included, is
// closed at accept.
type connTable struct {
	mu    sync.Mutex
	conns map[net.Conn]connEntry
}

type connEntry struct {
	state http.ConnState
	since time.Time
}

func newConnTable() *connTable { return &connTable{conns: map[net.Conn]connEntry{}} }

// track is the http.Server's ConnState hook. Only connections accepted
// through the capped listener are followed.
func (t *connTable) track(c net.Conn, st http.ConnState) {
	if tc, ok := c.(*tls.Conn); !ok || !isCounted(tc.NetConn()) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch st {
	case http.StateClosed, http.StateHijacked:
		delete(t.conns, c)
	default:
		t.conns[c] = connEntry{state: st, since: time.Now()}
	}
}

// evict closes the idle connection that has waited longest, else the
// oldest one without a request past newConnGrace; false when every
// connection is at work.
func (t *connTable) evict(now time.Time) bool {
	t.mu.Lock()
	var victim net.Conn
	var best connEntry
	for c, e := range t.conns {
		switch {
		case e.state == http.StateIdle && (best.state != http.StateIdle || e.since.Before(best.since)):
		case e.state == http.StateNew && best.state != http.StateIdle && now.Sub(e.since) >= newConnGrace && (victim == nil || e.since.Before(best.since)):
		default:
			continue
		}
		victim, best = c, e
	}
	if victim != nil {
		delete(t.conns, victim)
	}
	t.mu.Unlock()
	if victim == nil {
		return false
	}
	_ = victim.Close()
	return true
}

func isCounted(c net.Conn) bool {
	_, ok := c.(*countedConn)
	return ok
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

type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *countedConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}
