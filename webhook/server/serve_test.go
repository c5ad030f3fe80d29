package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/testing/servingcert"
	"github.com/ibkube/ibkube/webhook/config"
	"github.com/ibkube/ibkube/webhook/handler"
	"github.com/ibkube/ibkube/webhook/mutate"
)

const mib = 1 << 20

// optedIn answers every namespace as opted in, so each review reaches the core.
type optedIn struct{}

func (optedIn) Namespace(_ context.Context, name string) (mutate.Namespace, error) {
	return mutate.Namespace{Name: name, Labels: map[string]string{contract.LabelInject: contract.InjectEnabled}}, nil
}

// attackServer is the webhook's TLS server with the real handler and core on
// a loopback listener the test holds.
type attackServer struct {
	addr    string
	srv     *tlsServer
	reg     *prometheus.Registry
	entered atomic.Int64 // requests that got past the in-flight bound
}

func startAttackServer(t testing.TB, limits Limits) *attackServer {
	t.Helper()
	dir := t.TempDir()
	servingcert.Write(t, dir)
	a := &attackServer{reg: prometheus.NewRegistry()}
	h, err := handler.New(handler.Options{Config: config.Default, Namespaces: optedIn{}, Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	m, err := newLimitMetrics(a.reg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a.addr = ln.Addr().String()
	s := &tlsServer{
		certDir: dir, limits: limits, metrics: m, log: logr.Discard(), tlsOpts: []func(*tls.Config){hardenTLS},
		handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			a.entered.Add(1)
			h.ServeHTTP(w, r)
		}),
	}
	a.srv = s
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return a
}

func (a *attackServer) rejected(t testing.TB, reason string) int {
	t.Helper()
	mfs, err := a.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if labelValue(m, "reason") == reason {
				return int(m.GetCounter().GetValue())
			}
		}
	}
	return 0
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func (a *attackServer) dial(t testing.TB) *tls.Conn {
	t.Helper()
	c, err := tls.Dial("tcp", a.addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // test server with a throwaway certificate
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (a *attackServer) client() *http.Client {
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // test server with a throwaway certificate
		MaxConnsPerHost:     0,
		MaxIdleConnsPerHost: 64,
	}}
}

// waitFor polls ok until it holds; the deadline only bounds a failure.
func waitFor(t testing.TB, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// heapBytes is the memory held by heap objects, live or not yet swept.
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// liveHeap collects garbage first, so what is left is what requests hold.
func liveHeap() uint64 {
	runtime.GC()
	return heapBytes()
}

// peakHeap samples the heap until stop is closed and returns the highest value.
func peakHeap(stop <-chan struct{}) <-chan uint64 {
	out := make(chan uint64, 1)
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		var peak uint64
		for {
			peak = max(peak, heapBytes())
			select {
			case <-stop:
				out <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return out
}

// stalledHeader is a request that announces a body it never finishes: the
// first byte of it, then nothing.
func stalledHeader(declared int) string {
	return "POST " + handler.Path + " HTTP/1.1\r\nHost: ibkube-webhook\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + strconv.Itoa(declared) + "\r\n\r\n{"
}

// readStatus reads an HTTP status line, or "" if the server closed the connection first.
func readStatus(c net.Conn) string {
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return ""
	}
	return strings.TrimSpace(line)
}

// testLimits are the defaults with a read timeout short enough for a test,
// yet long enough that 40 TLS handshakes on a loaded machine finish before
// the first stalled upload is cut off.
func testLimits() Limits {
	l := noDrain(DefaultLimits())
	l.BodyTimeout = 4 * time.Second
	l.ReadTimeout = 8 * time.Second
	return l
}

// noDrain stops a test server as soon as its test ends.
func noDrain(l Limits) Limits {
	l.DrainPeriod = 0
	return l
}

// TestStalledUploadsHoldNoSlot: 40 clients announce a 3 MiB body (under
// the cap, so the lie is believed as far as it can be), send one byte and
// stall. None of them takes a slot, and together they hold no more than
// the body budget (the first five reserve it, the rest wait in line); a
// legitimate review sent meanwhile is answered at once; each stalled
// upload is cut off with 408, at BodyTimeout or after waiting in line.
func TestStalledUploadsHoldNoSlot(t *testing.T) {
	limits := testLimits()
	a := startAttackServer(t, limits)
	const clients, declared = 40, 3 * mib
	before := liveHeap()

	conns := make([]*tls.Conn, clients)
	for i := range conns {
		conns[i] = a.dial(t)
		if _, err := io.WriteString(conns[i], stalledHeader(declared)); err != nil {
			t.Fatal(err)
		}
	}
	codes, _ := flood(t, a, 1, bigReview(t, 4096))
	if codes[http.StatusOK] != 1 {
		t.Errorf("a legitimate review beside %d stalled uploads answered %v, want 200", clients, codes)
	}
	if got := a.entered.Load(); got != 1 {
		t.Errorf("%d requests reached the handler, want only the legitimate one", got)
	}
	held := int64(liveHeap()) - int64(before)
	// A buffer sized from Content-Length for each would hold 40 x 3 MiB here.
	if held > limits.MaxBufferedBytes+4*mib {
		t.Errorf("%d stalled uploads hold %.1f MiB of heap, want at most the %d MiB budget and 4 MiB of connections (TLS and bufio buffers)",
			clients, float64(held)/mib, limits.MaxBufferedBytes/mib)
	}
	t.Logf("%d stalled uploads of a declared %d MiB hold %.2f MiB of heap", clients, declared/mib, float64(held)/mib)

	for _, c := range conns {
		if err := c.SetReadDeadline(time.Now().Add(limits.BodyWait + limits.BodyTimeout + 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		if st := readStatus(c); !strings.Contains(st, " 408 ") {
			t.Errorf("stalled upload answered %q, want 408 at the body timeout", st)
		}
	}
	if n := a.rejected(t, "body_timeout"); n != clients {
		t.Errorf("body timeouts counted: %d, want %d", n, clients)
	}
}

// bigReview is an AdmissionReview for a pod CREATE whose annotation makes the
// body size bytes long.
func bigReview(t testing.TB, size int) []byte {
	t.Helper()
	build := func(pad int) []byte {
		pod := map[string]any{
			"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": "big", "namespace": "training", "annotations": map[string]string{"pad": strings.Repeat("x", pad)}},
			"spec":     map[string]any{"containers": []map[string]any{{"name": "c", "image": "busybox"}}},
		}
		raw, err := json.Marshal(pod)
		if err != nil {
			t.Fatal(err)
		}
		body, err := json.Marshal(map[string]any{
			"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
			"request": map[string]any{
				"uid": "u1", "kind": map[string]string{"version": "v1", "kind": "Pod"},
				"resource":  map[string]string{"version": "v1", "resource": "pods"},
				"namespace": "training", "operation": "CREATE", "object": json.RawMessage(raw),
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		return body
	}
	body := build(0)
	return build(size - len(body))
}

// flood sends n concurrent POSTs of body and returns the status codes seen
// and the peak heap while they ran.
func flood(t testing.TB, a *attackServer, n int, body []byte) (map[int]int, uint64) {
	t.Helper()
	c := a.client()
	defer c.CloseIdleConnections()
	stop := make(chan struct{})
	peak := peakHeap(stop)
	codes := statusCodes(n, func() (*http.Response, error) {
		req, err := http.NewRequest(http.MethodPost, "https://"+a.addr+handler.Path, bytes.NewReader(body))
		if err != nil {
			t.Error(err)
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		return c.Do(req)
	})
	close(stop)
	return codes, <-peak
}

// TestConcurrentLargeBodiesStayBounded: 32 clients at once send the largest
// review the webhook accepts (4 MiB) and 32 more announce 8 MiB. The big ones
// beyond MaxInFlight get 429 without being read, the 8 MiB ones 413, and the
// heap stays within what MaxInFlight requests can hold.
func TestConcurrentLargeBodiesStayBounded(t *testing.T) {
	// Default timeouts: 32 TLS handshakes and 128 MiB of uploads on a small
	// CI machine take longer than testLimits allows.
	limits := noDrain(DefaultLimits())
	a := startAttackServer(t, limits)
	before := liveHeap()

	body := bigReview(t, handler.MaxBodyBytes)
	if len(body) != handler.MaxBodyBytes {
		t.Fatalf("review is %d bytes, want %d", len(body), handler.MaxBodyBytes)
	}
	codes, peak := flood(t, a, 32, body)
	if codes[http.StatusOK] == 0 {
		t.Errorf("no 4 MiB review answered 200: %v", codes)
	}
	for code, n := range codes {
		if code != http.StatusOK && code != http.StatusTooManyRequests {
			t.Errorf("%d requests answered %d, want only 200 or 429", n, code)
		}
	}
	grew := float64(int64(peak)-int64(before)) / mib
	t.Logf("32 concurrent 4 MiB reviews: %v, peak heap +%.1f MiB", codes, grew)
	// The test's own 4 MiB body and client buffers count here too; the bound
	// is what 8 requests in flight may hold, well under the chart's 256 MiB.
	if grew > 160 {
		t.Errorf("peak heap grew %.1f MiB under 32 concurrent 4 MiB reviews, want under 160 MiB", grew)
	}

	tooBig := append(body, bytes.Repeat([]byte(" "), 4*mib)...)
	codes, _ = flood(t, a, 32, tooBig)
	if codes[http.StatusRequestEntityTooLarge]+codes[http.StatusTooManyRequests]+codes[-1] != 32 || codes[http.StatusRequestEntityTooLarge] == 0 {
		t.Errorf("8 MiB reviews answered %v, want 413 (or 429, or a closed connection)", codes)
	}
}

// TestConnectionAndHeaderBounds: connections over MaxConns, while every
// connection is at work, are closed at accept, and headers over
// MaxHeaderBytes are refused.
func TestConnectionAndHeaderBounds(t *testing.T) {
	limits := testLimits()
	limits.MaxConns = 16
	a := startAttackServer(t, limits)

	// Each held connection is at work: its request is uploading.
	held := make([]*tls.Conn, limits.MaxConns)
	for i := range held {
		held[i] = a.dial(t)
		if _, err := io.WriteString(held[i], stalledHeader(mib)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every held connection active", func() bool { return a.srv.activeConns() == limits.MaxConns })
	// One more: the TLS handshake fails because the server closed it.
	c, err := tls.Dial("tcp", a.addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // test server
	if err == nil {
		_ = c.Close()
		t.Error("connection over the limit completed a TLS handshake")
	}
	if n := a.rejected(t, "connections"); n != 1 {
		t.Errorf("connections turned away: %d, want 1", n)
	}

	// A header over the cap: 431.
	_ = held[0].Close()
	waitFor(t, "the closed connection released", func() bool { return a.srv.activeConns() == limits.MaxConns-1 })
	c = a.dial(t)
	big := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\n\r\n", handler.Path, strings.Repeat("a", limits.MaxHeaderBytes+4096))
	if _, err := io.WriteString(c, big); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if st := readStatus(c); !strings.Contains(st, " 431 ") {
		t.Errorf("oversized header answered %q, want 431", st)
	}
}

// listReview is a review of a pod in namespace training whose spec holds
// n copies of item in the list opened by open (`"volumes":[`); ours adds
// ibkube's mode annotation.
func listReview(ours bool, open, item string, n int) []byte {
	var b bytes.Buffer
	b.Grow(len(item)*n + 512)
	annotations := `{}`
	if ours {
		annotations = fmt.Sprintf(`{%q:"rdma-shared"}`, contract.AnnotationMode)
	}
	fmt.Fprintf(&b, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1","kind":{"version":"v1","kind":"Pod"},`+
		`"resource":{"version":"v1","resource":"pods"},"namespace":"training","operation":"CREATE","object":`+
		`{"metadata":{"name":"lists","namespace":"training","annotations":%s},"spec":{"containers":[{"name":"c","image":"busybox"}],%s`, annotations, open)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(item)
	}
	b.WriteString("]}}}}")
	return b.Bytes()
}

// TestListFloodsStayBounded: MaxInFlight clients at once send reviews of a
// million list elements, or the costliest pod the webhook admits (every
// value it may hold an empty volume, each a corev1.Volume when decoded),
// through the real server, handler and core: the heap grows by less than
// the 64 MiB the chart's replica can spare over its idle size.
func TestListFloodsStayBounded(t *testing.T) {
	limits := noDrain(DefaultLimits())
	// Bodies beyond the budget's four wait in line however slow this
	// machine is, so each of the eight is answered and measured.
	limits.BodyWait = time.Minute
	a := startAttackServer(t, limits)
	spare := strings.Count(string(listReview(true, `"volumes":[`, "{}", 0)), ",") + 8 // every value but the volumes, generously
	for _, tc := range []struct {
		name string
		body []byte
		want int
	}{
		{"largest admitted pod", listReview(true, `"volumes":[`, "{}", handler.MaxReviewValues-spare), http.StatusOK},
		{"1.3M empty volumes, ibkube's", listReview(true, `"volumes":[`, "{}", 1_300_000), http.StatusOK},
		{"1.3M empty volumes, not ibkube's", listReview(false, `"volumes":[`, "{}", 1_300_000), http.StatusOK},
		{"150k defaulted volumes, ibkube's", listReview(true, `"volumes":[`, `{"name":"v","emptyDir":{}}`, 150_000), http.StatusOK},
	} {
		before := liveHeap()
		codes, peak := flood(t, a, limits.MaxInFlight, tc.body)
		grew := float64(int64(peak)-int64(before)) / mib
		t.Logf("%s (%d bytes), %d at once: %v, peak heap +%.1f MiB", tc.name, len(tc.body), limits.MaxInFlight, codes, grew)
		if codes[tc.want] != limits.MaxInFlight {
			t.Errorf("%s: answered %v, want %d × %d", tc.name, codes, limits.MaxInFlight, tc.want)
		}
		if grew > 64 {
			t.Errorf("%s: peak heap grew %.1f MiB, want under 64 MiB", tc.name, grew)
		}
	}
}
