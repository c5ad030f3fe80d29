package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/ibkube/ibkube/webhook/handler"
)

// freeBodyBytes is what every request may buffer of its body without
// asking the shared budget: a pod CREATE review from the API server is a
// few KiB, so legitimate reviews never compete for the budget, and
// MaxConns connections of this much stay a small, fixed amount.
const freeBodyBytes = 64 << 10

// bodyChunk is how much is read at a time; the buffer grows with what
// arrives, never with what the client announced.
const bodyChunk = 32 << 10

// byteBudget is the shared allowance for bodies beyond freeBodyBytes.
type byteBudget struct {
	max  int64
	used atomic.Int64
}

func (b *byteBudget) take(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

func (b *byteBudget) give(n int64) { b.used.Add(-n) }

// bufferedBody is a request body read in full; the handler takes its bytes
// instead of copying them again.
type bufferedBody struct {
	*bytes.Reader
	b []byte
}

func (b *bufferedBody) Bytes() []byte { return b.b }
func (*bufferedBody) Close() error    { return nil }

var errBudget = errors.New("body budget exhausted")

// readBody reads r's body (at most handler.MaxBodyBytes+1 bytes, by
// BodyTimeout), charging what exceeds freeBodyBytes to budget; it returns
// the body and the bytes charged, which the caller gives back.
func readBody(w http.ResponseWriter, r *http.Request, budget *byteBudget, timeout time.Duration) ([]byte, int64, error) {
	// The deadline is the body's own, from the end of the headers: a
	// client that announces a body and dribbles it out is cut off in
	// seconds, long before the connection's ReadTimeout.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(timeout))
	src := http.MaxBytesReader(w, r.Body, handler.MaxBodyBytes)
	var buf []byte
	var charged int64
	for {
		if len(buf) == cap(buf) {
			grow := min(max(bodyChunk, cap(buf)), handler.MaxBodyBytes+1-cap(buf)) // doubling, from one chunk, up to the cap
			if over := int64(cap(buf)+grow) - freeBodyBytes; over > charged {
				if !budget.take(over - charged) {
					// The rest is read and dropped (same deadline and
					// cap), so the client reads the 429 rather than a
					// connection reset under its upload, and retries.
					if _, err := io.Copy(io.Discard, src); err != nil {
						return nil, charged, err
					}
					return nil, charged, errBudget
				}
				charged = over
			}
			buf = append(make([]byte, 0, cap(buf)+grow), buf...)
		}
		n, err := src.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, charged, nil
		}
		if err != nil {
			return nil, charged, err
		}
	}
}

// gate reads each admission request's body before the request takes one
// of n slots, so a slot is only ever held by work: a client that stalls
// its upload holds its connection and at most freeBodyBytes, never a slot.
// Excess requests wait up to slotWait for a slot, then get 429 with
// Retry-After, which the API server's webhook client retries (client-go
// rest/with_retry.go, checkWait) within the webhook's timeoutSeconds.
func gate(h http.Handler, l Limits, m *limitMetrics) http.Handler {
	slots := make(chan struct{}, l.MaxInFlight)
	budget := &byteBudget{max: l.MaxBufferedBytes}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// What the handler refuses without reading (wrong method or
		// type, a declared length over the cap) needs neither.
		if r.Method != http.MethodPost || r.ContentLength > handler.MaxBodyBytes || r.Header.Get("Content-Type") != "application/json" {
			h.ServeHTTP(w, r)
			return
		}
		body, charged, err := readBody(w, r, budget, l.BodyTimeout)
		defer budget.give(charged)
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			r.Body = io.NopCloser(bytes.NewReader(nil))
			r.ContentLength = handler.MaxBodyBytes + 1
			h.ServeHTTP(w, r) // answers 413
			return
		case errors.Is(err, errBudget):
			m.reject("buffered_bytes")
			w.Header().Set("Retry-After", "1")
			http.Error(w, fmt.Sprintf("too many admission request bytes buffered (limit %d), retry", l.MaxBufferedBytes), http.StatusTooManyRequests)
			return
		case err != nil:
			m.reject("body_timeout")
			w.Header().Set("Connection", "close")
			http.Error(w, fmt.Sprintf("request body not received within %s: %v", l.BodyTimeout, err), http.StatusRequestTimeout)
			return
		}
		t := time.NewTimer(l.SlotWait)
		defer t.Stop()
		select {
		case slots <- struct{}{}:
		case <-t.C:
			m.reject("in_flight")
			w.Header().Set("Retry-After", "1")
			http.Error(w, fmt.Sprintf("too many admission requests in flight (limit %d), retry", l.MaxInFlight), http.StatusTooManyRequests)
			return
		case <-r.Context().Done():
			return
		}
		defer func() { <-slots }()
		r.Body = &bufferedBody{Reader: bytes.NewReader(body), b: body}
		r.ContentLength = int64(len(body))
		h.ServeHTTP(w, r)
	})
}
