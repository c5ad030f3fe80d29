package server

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ibkube/ibkube/webhook/handler"
)

// holdingServer is the gate over a handler that counts the bodies inside
// it and holds each until the test releases it.
type holdingServer struct {
	*httptest.Server
	inside, most  atomic.Int64
	release, stop chan struct{}
}

func startHoldingServer(t *testing.T, l Limits) *holdingServer {
	t.Helper()
	s := &holdingServer{release: make(chan struct{}), stop: make(chan struct{})}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.inside.Add(1)
		for m := s.most.Load(); n > m && !s.most.CompareAndSwap(m, n); m = s.most.Load() {
		}
		select {
		case <-s.release:
		case <-s.stop: // the test has ended
		}
		s.inside.Add(-1)
		_, _ = io.Copy(io.Discard, r.Body)
	})
	s.Server = httptest.NewServer(gate(h, l, nil))
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(s.stop) }) // first: the handlers end, then the server
	return s
}

// postAll sends n reviews of body at once and returns their status codes
// once all are answered.
func postAll(t *testing.T, url string, n int, body []byte) <-chan map[int]int {
	t.Helper()
	out := make(chan map[int]int, 1)
	go func() {
		out <- statusCodes(n, func() (*http.Response, error) {
			return http.Post(url+handler.Path, "application/json", bytes.NewReader(body))
		})
	}()
	return out
}

// statusCodes runs send n times at once and counts the status codes it
// got, -1 for a request that failed; each body is read and closed.
func statusCodes(n int, send func() (*http.Response, error)) map[int]int {
	var (
		mu    sync.Mutex
		codes = map[int]int{}
		wg    sync.WaitGroup
	)
	for range n {
		wg.Go(func() {
			code := -1
			if resp, err := send(); err == nil {
				code = resp.StatusCode
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return codes
}

// TestLargeBodiesWaitInLine: with a budget of two 3 MiB bodies, six sent
// at once are all answered, never more than two held at once: the others
// wait in line for the budget instead of being refused, and none is read
// before its turn.
func TestLargeBodiesWaitInLine(t *testing.T) {
	l := noDrain(DefaultLimits())
	l.MaxBufferedBytes = 6 * mib
	l.BodyWait = time.Minute // only the test's release orders them
	s := startHoldingServer(t, l)
	const clients = 6
	done := postAll(t, s.URL, clients, bytes.Repeat([]byte("x"), 3*mib))
	for left := clients; left > 0; left-- {
		waitFor(t, "the budget's bodies in the handler", func() bool { return s.inside.Load() == int64(min(2, left)) })
		s.release <- struct{}{}
	}
	codes := <-done
	if codes[http.StatusOK] != clients {
		t.Errorf("%d bodies of 3 MiB against a 6 MiB budget answered %v, want %d × 200", clients, codes, clients)
	}
	if got := s.most.Load(); got > 2 {
		t.Errorf("%d bodies of 3 MiB held at once, want at most 2 (6 MiB)", got)
	}
}

// TestOverBudgetWaitEnds: a body that waits longer than BodyWait for the
// budget gets 429 with Retry-After, its upload read to the end; a small
// review beside it does not wait at all.
func TestOverBudgetWaitEnds(t *testing.T) {
	l := noDrain(DefaultLimits())
	l.MaxBufferedBytes = handler.MaxBodyBytes
	l.BodyWait = 200 * time.Millisecond
	s := startHoldingServer(t, l)
	first := postAll(t, s.URL, 1, bytes.Repeat([]byte("x"), handler.MaxBodyBytes))
	waitFor(t, "the first body in the handler", func() bool { return s.inside.Load() == 1 })

	resp, err := http.Post(s.URL+handler.Path, "application/json", bytes.NewReader(bytes.Repeat([]byte("x"), 2*mib)))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a body over the held budget answered %d (Retry-After %q), want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}

	small := postAll(t, s.URL, 1, bytes.Repeat([]byte("x"), 4096))
	waitFor(t, "the small review in the handler beside the full budget", func() bool { return s.inside.Load() == 2 })
	s.release <- struct{}{}
	s.release <- struct{}{}
	if codes := <-small; codes[http.StatusOK] != 1 {
		t.Errorf("small review answered %v, want 200", codes)
	}
	if codes := <-first; codes[http.StatusOK] != 1 {
		t.Errorf("first body answered %v, want 200", codes)
	}
}

// TestBodyReadAllocatesOnce: a body is read into one buffer of its size,
// declared or chunked, so a 4 MiB review allocates 4 MiB, not the 8 MiB of
// a buffer doubled up to it, whose outgrown halves the collector must find.
func TestBodyReadAllocatesOnce(t *testing.T) {
	body := bytes.Repeat([]byte("x"), handler.MaxBodyBytes)
	var got int64
	h := http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got, _ = io.Copy(io.Discard, r.Body) })
	g := gate(h, noDrain(DefaultLimits()), nil)
	for _, tc := range []struct {
		name    string
		declare int64
	}{{"declared length", int64(len(body))}, {"chunked", -1}} {
		const rounds = 4
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range rounds {
			r := httptest.NewRequest(http.MethodPost, handler.Path, bytes.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			r.ContentLength = tc.declare
			g.ServeHTTP(httptest.NewRecorder(), r)
		}
		runtime.ReadMemStats(&after)
		if got != int64(len(body)) {
			t.Fatalf("%s: the handler read %d bytes, want %d", tc.name, got, len(body))
		}
		per := float64(after.TotalAlloc-before.TotalAlloc) / rounds
		t.Logf("%s: %.2f MiB allocated per 4 MiB body", tc.name, per/mib)
		if per > 1.25*float64(len(body)) {
			t.Errorf("%s: %.2f MiB allocated per 4 MiB body, want at most 5 MiB (one buffer)", tc.name, per/mib)
		}
	}
}
