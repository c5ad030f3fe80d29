package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/ibkube/ibkube/webhook/handler"
)

// freeBodyBytes is the largest body a request reads without reserving from
// the shared budget: a pod CREATE review from the API server is a few KiB,
// so legitimate reviews never wait for the budget, and MaxConns
// connections of this much stay a small, fixed amount.
const freeBodyBytes = 64 << 10

// bodyBudget is the shared allowance for bodies over freeBodyBytes. A body
// reserves its whole size before its first byte is read (the declared
// Content-Length; the cap when chunked) and holds it until its answer is
// written, and its buffer is allocated once at that size: the bodies held
// at once, arriving or being decided, never pass max however many clients
// send, and none leaves a trail of outgrown buffers for the collector.
// Requests wait for it in arrival order (semaphore.Weighted is FIFO), so a
// large review is delayed behind others rather than refused.
type bodyBudget struct {
	sem *semaphore.Weighted
}

func newBodyBudget(maxBytes int64) *bodyBudget {
	return &bodyBudget{sem: semaphore.NewWeighted(maxBytes)}
}

// bodySize is what a request's body may take: its declared length, or the
// cap when it declares none (chunked).
func bodySize(r *http.Request) int64 {
	if r.ContentLength < 0 {
		return handler.MaxBodyBytes
	}
	return r.ContentLength
}

// reserve takes n bytes of the budget, waiting in line for at most wait
// or until ctx ends; release gives them back. A body of at most
// freeBodyBytes takes nothing.
func (b *bodyBudget) reserve(ctx context.Context, n int64, wait time.Duration) (release func(), err error) {
	if n <= freeBodyBytes {
		return func() {}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := b.sem.Acquire(ctx, n); err != nil {
		return nil, err
	}
	return func() { b.sem.Release(n) }, nil
}

// bufferedBody is a request body read in full; the handler takes its bytes
// instead of copying them again.
type bufferedBody struct {
	*bytes.Reader
	b []byte
}

func (b *bufferedBody) Bytes() []byte { return b.b }
func (*bufferedBody) Close() error    { return nil }

// readBody reads r's body of at most size bytes (bodySize, which the
// caller reserved) into one buffer of that size, by timeout from now.
func readBody(w http.ResponseWriter, r *http.Request, size int64, timeout time.Duration) ([]byte, error) {
	// The deadline is the body's own, from the end of the headers: a
	// client that announces a body and dribbles it out is cut off in
	// seconds, long before the connection's ReadTimeout.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(timeout))
	src := http.MaxBytesReader(w, r.Body, handler.MaxBodyBytes)
	buf := make([]byte, size)
	n, err := io.ReadFull(src, buf)
	switch {
	case r.ContentLength >= 0:
		// net/http ends the body at its Content-Length: a shorter one is
		// io.ErrUnexpectedEOF.
		return buf, err
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return buf[:n], nil
	case err != nil:
		return nil, err
	}
	// A chunked body that filled the cap: anything more is over it.
	if _, err := src.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf, nil
}

// gate reserves each admission request's body from the budget, reads it,
// and only then lets the request take one of n slots, so a slot is only
// ever held by work: a client that stalls its upload holds its connection
// and its reservation until BodyTimeout, never a slot. Excess requests
// wait up to BodyWait for the budget and up to SlotWait for a slot, then
// get 429 with Retry-After, which the API server's webhook client retries
// (client-go rest/with_retry.go, checkWait) within the webhook's
// timeoutSeconds.
func gate(h http.Handler, l Limits, m *limitMetrics) http.Handler {
	slots := make(chan struct{}, l.MaxInFlight)
	budget := newBodyBudget(l.MaxBufferedBytes)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// What the handler refuses without reading (wrong method or
		// type, a declared length over the cap) needs neither.
		if r.Method != http.MethodPost || r.ContentLength > handler.MaxBodyBytes || r.Header.Get("Content-Type") != "application/json" {
			h.ServeHTTP(w, r)
			return
		}
		size := bodySize(r)
		release, err := budget.reserve(r.Context(), size, l.BodyWait)
		if err != nil {
			refuseOverBudget(h, w, r, l, m)
			return
		}
		defer release()
		body, err := readBody(w, r, size, l.BodyTimeout)
		if !bodyRead(h, w, r, err, l, m) {
			return
		}
		if !takeSlot(w, r, slots, l, m) {
			return
		}
		defer func() { <-slots }()
		r.Body = &bufferedBody{Reader: bytes.NewReader(body), b: body}
		r.ContentLength = int64(len(body))
		h.ServeHTTP(w, r)
	})
}

// refuseOverBudget answers a request that waited for the body budget in
// vain: 429 with Retry-After, its body read and dropped first (same
// deadline and cap, no buffer), so the client reads the 429 rather than a
// connection reset under its upload, and retries. A client that has gone
// gets nothing.
func refuseOverBudget(h http.Handler, w http.ResponseWriter, r *http.Request, l Limits, m *limitMetrics) {
	if r.Context().Err() != nil {
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(l.BodyTimeout))
	if _, err := io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, handler.MaxBodyBytes)); err != nil {
		bodyRead(h, w, r, err, l, m)
		return
	}
	m.reject("buffered_bytes")
	w.Header().Set("Retry-After", "1")
	http.Error(w, fmt.Sprintf("too many admission request bytes held (limit %d), retry", l.MaxBufferedBytes), http.StatusTooManyRequests)
}

// bodyRead answers a request whose body could not be read (over the cap:
// h answers 413; late: 408, the connection closed), and says whether it
// was.
func bodyRead(h http.Handler, w http.ResponseWriter, r *http.Request, err error, l Limits, m *limitMetrics) bool {
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
		return true
	case errors.As(err, &tooLarge):
		r.Body = io.NopCloser(bytes.NewReader(nil))
		r.ContentLength = handler.MaxBodyBytes + 1
		h.ServeHTTP(w, r)
	default:
		m.reject("body_timeout")
		w.Header().Set("Connection", "close")
		http.Error(w, fmt.Sprintf("request body not received within %s: %v", l.BodyTimeout, err), http.StatusRequestTimeout)
	}
	return false
}

// takeSlot waits up to SlotWait for one of the in-flight slots, answering
// 429 with Retry-After when none frees, and says whether it took one.
func takeSlot(w http.ResponseWriter, r *http.Request, slots chan struct{}, l Limits, m *limitMetrics) bool {
	t := time.NewTimer(l.SlotWait)
	defer t.Stop()
	select {
	case slots <- struct{}{}:
		return true
	case <-t.C:
		m.reject("in_flight")
		w.Header().Set("Retry-After", "1")
		http.Error(w, fmt.Sprintf("too many admission requests in flight (limit %d), retry", l.MaxInFlight), http.StatusTooManyRequests)
		return false
	case <-r.Context().Done():
		return false
	}
}
