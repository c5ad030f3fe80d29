package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/ibkube/ibkube/internal/promreg"
	"github.com/ibkube/ibkube/webhook/handler"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

// Limits bound what one client can make the webhook hold. The admission port
// is reachable from pods unless a NetworkPolicy says otherwise, so every
// resource a request pins (time, bytes, a goroutine, a connection) has a cap
// that keeps the process under its memory limit whatever clients send.
type Limits struct {
	// MaxInFlight is how many admission requests are decided at once. A
	// request takes a slot only once its body has arrived; one more waits
	// up to SlotWait, then gets 429 with Retry-After, which the API
	// server's webhook client retries (client-go rest/with_retry.go,
	// checkWait: 429 with Retry-After) within the webhook's timeoutSeconds.
	MaxInFlight int
	// SlotWait is how long a request whose body has arrived waits for a
	// slot.
	SlotWait time.Duration
	// BodyTimeout bounds the arrival of a request body, from the end of
	// its headers. The API server writes a review in one go.
	BodyTimeout time.Duration
	// MaxBufferedBytes is the shared allowance for request bodies over 64
	// KiB, arriving or being decided: each reserves its declared length
	// (the body cap when chunked) before it is read and holds it until
	// answered. One more waits in line up to BodyWait, then gets 429 with
	// Retry-After.
	MaxBufferedBytes int64
	// BodyWait is how long a body over 64 KiB waits in line for
	// MaxBufferedBytes before it is read; BodyTimeout starts after it.
	BodyWait time.Duration
	// MaxConns is how many connections are open at once. At the cap, the
	// idle kept-alive connection that waited longest (else one that has
	// not delivered a request's headers within a second) is closed to
	// admit a new one; one whose next request has begun to arrive is at
	// work. Only when every connection is at work is the new one closed at
	// accept. Readiness does not go through this listener.
	MaxConns int
	// ReadHeaderTimeout bounds the TLS handshake and the request headers;
	// ReadTimeout the whole request, body included. The API server writes a
	// review in one go, so only a stalled client comes near either.
	ReadHeaderTimeout, ReadTimeout time.Duration
	// WriteTimeout bounds handling plus the answer; the API server gives up
	// after timeoutSeconds (at most 30) anyway.
	WriteTimeout time.Duration
	// IdleTimeout closes a kept-alive connection with no request.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers (net/http's default
	// is 1 MiB, held per connection while it is read).
	MaxHeaderBytes int
	// DrainPeriod is how long the server keeps answering after it is told to
	// stop, marking every answer `Connection: close`. The API server reuses
	// kept-alive connections to a replica after it has left the Service; a
	// connection closed under a request it is writing fails that admission
	// ("write: broken pipe", not retried for a POST), while one the server
	// ends after an answer is simply not reused. Zero stops at once.
	DrainPeriod time.Duration
}

// DefaultLimits keep any traffic within 64 MiB over the idle process, a
// quarter of the chart's 256 MiB memory limit: 16 MiB of bodies over 64
// KiB held at once (four of the largest, handler.MaxBodyBytes), 64 KiB for
// each of 256 connections, 8 requests being decided (the pods being
// decoded and mutated share handler.MaxDecodeBytes), and the connections
// themselves (TLS and bufio buffers, a goroutine);
// docs/webhook-operations.md has the measured peaks.
func DefaultLimits() Limits {
	return Limits{
		MaxInFlight:       8,
		SlotWait:          2 * time.Second,
		BodyTimeout:       5 * time.Second,
		MaxBufferedBytes:  16 << 20,
		BodyWait:          5 * time.Second,
		MaxConns:          256,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      35 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    64 << 10,
		DrainPeriod:       5 * time.Second,
	}
}

// Validate says which limit is out of range.
func (l Limits) Validate() error {
	var errs []error
	for _, f := range [...]struct {
		name string
		v    int
	}{{"max in-flight requests", l.MaxInFlight}, {"max connections", l.MaxConns}, {"max header bytes", l.MaxHeaderBytes}} {
		if f.v < 1 {
			errs = append(errs, fmt.Errorf("%s %d: want at least 1", f.name, f.v))
		}
	}
	for _, f := range [...]struct {
		name string
		v    time.Duration
	}{{"read header timeout", l.ReadHeaderTimeout}, {"read timeout", l.ReadTimeout}, {"write timeout", l.WriteTimeout}, {"idle timeout", l.IdleTimeout},
		{"body timeout", l.BodyTimeout}, {"body wait", l.BodyWait}, {"slot wait", l.SlotWait}} {
		if f.v <= 0 {
			errs = append(errs, fmt.Errorf("%s %s: want more than 0", f.name, f.v))
		}
	}
	if l.MaxBufferedBytes < handler.MaxBodyBytes {
		errs = append(errs, fmt.Errorf("max buffered bytes %d: want at least one largest body, %d", l.MaxBufferedBytes, handler.MaxBodyBytes))
	}
	if l.DrainPeriod < 0 {
		errs = append(errs, fmt.Errorf("drain period %s: want 0 or more", l.DrainPeriod))
	}
	return errors.Join(errs...)
}

// closeWhileDraining marks every answer `Connection: close` once draining is
// set, so net/http ends each kept-alive connection right after its answer.
func closeWhileDraining(h http.Handler, draining *atomic.Bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if draining.Load() {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}

// limitMetrics count what the limits turned away.
type limitMetrics struct {
	rejected *prometheus.CounterVec
}

func newLimitMetrics(reg prometheus.Registerer) (*limitMetrics, error) {
	m := &limitMetrics{rejected: promreg.CounterVec("ibkube_webhook_overload_rejections_total", "Requests or connections turned away by the webhook's limits, by reason (in_flight: 429 after waiting for a slot; buffered_bytes: 429 after waiting in line for the body budget; body_timeout: 408, the body late; connections: closed at accept, every connection at work; connections_evicted: an idle connection closed to admit a new one).", "reason")}
	if reg != nil {
		if err := reg.Register(m.rejected); err != nil {
			return nil, fmt.Errorf("register limit metrics: %w", err)
		}
	}
	return m, nil
}

func (m *limitMetrics) reject(reason string) {
	if m != nil {
		m.rejected.WithLabelValues(reason).Inc()
	}
}

// tlsServer serves the admission handler over TLS with Limits, reloading
// tls.crt and tls.key from certDir when they change. It stands in for
// controller-runtime's webhook server, whose http.Server has no ReadTimeout,
// a 32 s header timeout and net/http's 1 MiB header cap, none of them
// settable (controller-runtime pkg/internal/httpserver/server.go).
type tlsServer struct {
	host    string
	port    int
	certDir string
	handler http.Handler
	limits  Limits
	tlsOpts []func(*tls.Config)
	metrics *limitMetrics
	log     logr.Logger

	started atomic.Bool
	addr    atomic.Pointer[string] // the readiness listener's address once serving
	conns   atomic.Pointer[connTable]
}

// Start listens on host:port and serves until ctx ends.
func (s *tlsServer) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(s.host, strconv.Itoa(s.port)))
	if err != nil {
		return fmt.Errorf("webhook server: %w", err)
	}
	return s.serve(ctx, ln)
}

// serve serves on ln (closed when serve returns) until ctx ends.
func (s *tlsServer) serve(ctx context.Context, ln net.Listener) error {
	if err := s.limits.Validate(); err != nil {
		_ = ln.Close()
		return fmt.Errorf("webhook server limits: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cfg, err := s.tlsConfig(ctx)
	if err != nil {
		_ = ln.Close()
		return err
	}
	conns := newConnTable()
	s.conns.Store(conns)
	limited := &connLimitListener{Listener: ln, max: int64(s.limits.MaxConns), table: conns, metrics: s.metrics}
	// The readiness check's own connections come through a loopback
	// listener outside the cap, so a flood of client connections cannot
	// make the replica look unready and leave the Service.
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("webhook readiness listener: %w", err)
	}
	var draining atomic.Bool
	srv := s.httpServer(ctx, conns, &draining)
	shutdownDone := make(chan struct{})
	go s.shutdownWhenDone(ctx, srv, &draining, shutdownDone)
	probeAddr := probe.Addr().String()
	s.addr.Store(&probeAddr)
	addr := ln.Addr().String()
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		_ = srv.Serve(tls.NewListener(probe, cfg)) // ends with the server
	}()
	s.started.Store(true)
	s.log.Info("serving webhook", "addr", addr, "maxInFlight", s.limits.MaxInFlight, "maxConns", s.limits.MaxConns,
		"readTimeout", s.limits.ReadTimeout.String())
	err = srv.Serve(tls.NewListener(limited, cfg))
	cancel()
	<-shutdownDone
	<-probeDone
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("webhook server: %w", err)
}

// tlsConfig serves the certificate in certDir, reloaded as it changes
// until ctx ends, with the server's TLS options applied.
func (s *tlsServer) tlsConfig(ctx context.Context) (*tls.Config, error) {
	watcher, err := certwatcher.New(filepath.Join(s.certDir, "tls.crt"), filepath.Join(s.certDir, "tls.key"))
	if err != nil {
		return nil, fmt.Errorf("webhook server certificate: %w", err)
	}
	go func() {
		if err := watcher.Start(ctx); err != nil {
			s.log.Error(err, "certificate watcher")
		}
	}()
	cfg := &tls.Config{GetCertificate: watcher.GetCertificate}
	for _, o := range s.tlsOpts {
		o(cfg)
	}
	return cfg, nil
}

// httpServer is the server under the limits, tracking its connections in
// conns and closing each after its answer once draining is set.
func (s *tlsServer) httpServer(ctx context.Context, conns *connTable, draining *atomic.Bool) *http.Server {
	// Requests keep ctx's values but not its end: a request answered during
	// the drain must not see its context cancelled by the stop signal.
	reqCtx := context.WithoutCancel(ctx)
	return &http.Server{
		Handler:           closeWhileDraining(gate(s.handler, s.limits, s.metrics), draining),
		ConnState:         conns.track,
		ReadHeaderTimeout: s.limits.ReadHeaderTimeout,
		ReadTimeout:       s.limits.ReadTimeout,
		WriteTimeout:      s.limits.WriteTimeout,
		IdleTimeout:       s.limits.IdleTimeout,
		MaxHeaderBytes:    s.limits.MaxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return reqCtx },
	}
}

// shutdownWhenDone drains and then shuts srv down once ctx ends, closing
// done when it has.
func (s *tlsServer) shutdownWhenDone(ctx context.Context, srv *http.Server, draining *atomic.Bool, done chan<- struct{}) {
	defer close(done)
	<-ctx.Done()
	// The chart's preStop drain has already taken the pod out of the
	// Service, but the API server still holds kept-alive connections to
	// it: keep answering, closing each after its answer, then stop.
	if s.limits.DrainPeriod > 0 {
		draining.Store(true)
		s.log.Info("draining webhook connections", "period", s.limits.DrainPeriod.String())
		t := time.NewTimer(s.limits.DrainPeriod)
		<-t.C
	}
	sctx, scancel := context.WithTimeout(context.Background(), s.limits.WriteTimeout)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		s.log.Error(err, "webhook server shutdown")
	}
}

// StartedChecker is the readiness check: healthy once the server completes
// a TLS handshake (so the certificate is loaded), on a loopback listener of
// the same server that the connection cap does not count.
func (s *tlsServer) StartedChecker() func(*http.Request) error {
	return func(*http.Request) error {
		addr := s.addr.Load()
		if !s.started.Load() || addr == nil {
			return errors.New("webhook server has not started yet")
		}
		d := &net.Dialer{Timeout: 5 * time.Second}
		conn, err := tls.DialWithDialer(d, "tcp", *addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a liveness handshake with itself, nothing is sent
		if err != nil {
			return fmt.Errorf("webhook server is not reachable: %w", err)
		}
		return conn.Close()
	}
}

func (*tlsServer) NeedLeaderElection() bool { return false }
