//go:build integration

package attack

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/testing/servingcert"
	"github.com/ibkube/ibkube/internal/testing/testenv"
	"github.com/ibkube/ibkube/webhook/handler"
	"github.com/ibkube/ibkube/webhook/mutate"
)

// apiServerTimeout is the chart's timeoutSeconds for the webhook: the API
// server gives up on an admission call after it.
const apiServerTimeout = 5 * time.Second

const mib = 1 << 20

var tlsConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // loopback test server with a throwaway certificate

// post sends body once on c and returns the status, the Retry-After and
// how many bytes came back.
func post(ctx context.Context, c *http.Client, addr string, body []byte) (int, time.Duration, int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+addr+handler.Path, bytes.NewReader(body))
	if err != nil {
		return 0, 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, 0, err
	}
	defer resp.Body.Close()
	n, _ := io.Copy(io.Discard, resp.Body)
	ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	return resp.StatusCode, time.Duration(ra) * time.Second, n, nil
}

// legit is the API server's side: reviews at a steady rate over a small
// pool of kept-alive connections, each retried on 429 with Retry-After (as
// client-go's webhook client does) until the timeout.
type legit struct {
	mu   sync.Mutex
	sent int
	ok   int
	lat  []time.Duration
}

func (l *legit) run(ctx context.Context, addr string, perSecond int) *sync.WaitGroup {
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig, MaxIdleConnsPerHost: 8}}
	body := review(workerPod(), "0c6a4b8e-1111-2222-3333-444455556666", "training", "")
	return paced(ctx, perSecond, func() { l.one(c, addr, body) })
}

// paced starts send perSecond times a second, each in its own goroutine,
// until ctx ends; the WaitGroup holds every send it started.
func paced(ctx context.Context, perSecond int, send func()) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second / time.Duration(perSecond))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			wg.Go(send)
		}
	})
	return &wg
}

func (l *legit) one(c *http.Client, addr string, body []byte) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), apiServerTimeout)
	defer cancel()
	ok := false
	for ctx.Err() == nil {
		code, retry, _, err := post(ctx, c, addr, body)
		if err == nil && code == http.StatusOK {
			ok = true
			break
		}
		if err == nil && code == http.StatusTooManyRequests && retry > 0 {
			select {
			case <-time.After(retry):
			case <-ctx.Done():
			}
			continue
		}
		// A closed connection is retried at once, as the API server's
		// client does for a request it could not send.
		if err != nil && ctx.Err() == nil {
			continue
		}
		break
	}
	l.record(ok, time.Since(start))
}

// record counts one legitimate review, answered or not, and how long it took.
func (l *legit) record(ok bool, took time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent++
	if ok {
		l.ok++
		l.lat = append(l.lat, took)
	}
}

func (l *legit) summary() (sent int, answered float64, p99 time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sent == 0 {
		return 0, 0, 0
	}
	slices.Sort(l.lat)
	if len(l.lat) > 0 {
		p99 = l.lat[min(len(l.lat)-1, len(l.lat)*99/100)]
	}
	return l.sent, 100 * float64(l.ok) / float64(l.sent), p99
}

// attack is one attacker, run until ctx ends.
type attack struct {
	name string
	run  func(ctx context.Context, w *webhook, s *stats)
}

// stats are what the attacker saw.
type stats struct {
	requests, answerBytes, maxAnswer atomic.Int64
	codes                            sync.Map // status -> *atomic.Int64
}

func (s *stats) saw(code int, n int64) {
	s.requests.Add(1)
	s.answerBytes.Add(n)
	for {
		m := s.maxAnswer.Load()
		if n <= m || s.maxAnswer.CompareAndSwap(m, n) {
			break
		}
	}
	v, _ := s.codes.LoadOrStore(code, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func (s *stats) codeSummary() string {
	var parts []string
	s.codes.Range(func(k, v any) bool {
		c := k.(int)
		name := strconv.Itoa(c)
		switch c {
		case 0:
			name = "conn-error"
		case 1:
			name = "opened"
		}
		parts = append(parts, fmt.Sprintf("%s×%d", name, v.(*atomic.Int64).Load()))
		return true
	})
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// flood posts body from n clients in a loop.
func flood(n int, body func() []byte) func(context.Context, *webhook, *stats) {
	return func(ctx context.Context, w *webhook, s *stats) {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				c := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}}
				b := body()
				for ctx.Err() == nil {
					code, _, got, err := post(ctx, c, w.addr, b)
					if err != nil {
						code = 0
					}
					if ctx.Err() == nil {
						s.saw(code, got)
					}
				}
			})
		}
		wg.Wait()
	}
}

// conns holds n raw connections, each opened with open and re-opened as
// soon as the server closes it.
func conns(n int, open func(net.Conn) error) func(context.Context, *webhook, *stats) {
	return func(ctx context.Context, w *webhook, s *stats) {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				for ctx.Err() == nil {
					d := &tls.Dialer{Config: tlsConfig}
					c, err := d.DialContext(ctx, "tcp", w.addr)
					if err != nil {
						s.saw(0, 0)
						continue
					}
					if err := open(c); err == nil {
						s.saw(1, 0)
						// Hold until the server closes it or the attack ends.
						go func() { <-ctx.Done(); _ = c.Close() }()
						_, _ = io.Copy(io.Discard, c)
					}
					_ = c.Close()
				}
			})
		}
		wg.Wait()
	}
}

func stalledUpload(declared, sent int) func(net.Conn) error {
	return func(c net.Conn) error {
		head := "POST " + handler.Path + " HTTP/1.1\r\nHost: ibkube-webhook\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(declared) + "\r\n\r\n"
		_, err := io.WriteString(c, head+strings.Repeat(" ", sent))
		return err
	}
}

// keptAlive sends one review and keeps the connection open, idle.
func keptAlive(body []byte) func(net.Conn) error {
	return func(c net.Conn) error {
		head := "POST " + handler.Path + " HTTP/1.1\r\nHost: ibkube-webhook\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
		if _, err := c.Write(append([]byte(head), body...)); err != nil {
			return err
		}
		return nil
	}
}

func silent(net.Conn) error { return nil }

func attacks() []attack {
	minimal4MiB := containersFor(handler.MaxBodyBytes-1024, false)
	apiServer := containersFor(4_190_000, true)
	small := review(workerPod(), "0c6a4b8e-1111-2222-3333-444455556666", "training", "")
	return []attack{
		{"none (legitimate stream only)", func(ctx context.Context, _ *webhook, _ *stats) { <-ctx.Done() }},
		{fmt.Sprintf("the largest admitted pod (%d defaulted containers, mutated), 1 client", mutate.MaxContainers), flood(1, func() []byte { return review(widePod(mutate.MaxContainers, true), "u", "training", "wide") })},
		{fmt.Sprintf("the largest admitted pod (%d defaulted containers, mutated), 8 clients", mutate.MaxContainers), flood(8, func() []byte { return review(widePod(mutate.MaxContainers, true), "u", "training", "wide") })},
		{"forged reviews of 100,000 minimal containers (0.3 MB), 8 clients", flood(8, func() []byte { return review(widePod(100_000, false), "u", "training", "wide") })},
		{fmt.Sprintf("forged reviews of %d minimal containers (4 MiB), 8 clients", minimal4MiB), flood(8, func() []byte { return review(widePod(minimal4MiB, false), "u", "training", "wide") })},
		{fmt.Sprintf("pods of %d defaulted containers as the API server sends them (4.19 MB), 8 clients", apiServer), flood(8, func() []byte { return review(widePod(apiServer, true), "u", "training", "wide") })},
		{"valid 4 MiB reviews, 32 clients", flood(32, func() []byte { return bigReview(handler.MaxBodyBytes) })},
		{"slow bodies: 64 connections announce 4 MiB, send 1 byte, reconnect", conns(64, stalledUpload(handler.MaxBodyBytes, 1))},
		{"stalled bodies: 24 connections send 4 MiB less 1 byte, reconnect", conns(24, stalledUpload(handler.MaxBodyBytes, handler.MaxBodyBytes-1))},
		{"keep-alive flood: 300 connections send a review and stay idle, reconnect", conns(300, keptAlive(small))},
		{"silent connections: 300 connections, TLS handshake then nothing, reconnect", conns(300, silent)},
		{"echo amplification: 3.9 MB uid, 8 clients", flood(8, func() []byte { return padded("uid", 3_900_000) })},
		{"echo amplification: 3.9 MB namespace, 8 clients", flood(8, func() []byte { return padded("namespace", 3_900_000) })},
		{"echo amplification: 1.9 MB pod name in the review and the pod (refused pod), 8 clients", flood(8, func() []byte { return padded("name", 1_900_000) })},
		{fmt.Sprintf("the largest admitted pod by values (%d, all empty volumes), 8 clients", handler.MaxReviewValues), flood(8, largestByValues)},
		{"forged reviews of 1.3M empty volumes (3.9 MB), not ibkube's, 8 clients", flood(8, func() []byte { return listReview(false, `"volumes":[`, "{}", 1_300_000, "]") })},
		{"forged reviews of 1.3M empty volumes (3.9 MB), ibkube's, 8 clients", flood(8, func() []byte { return listReview(true, `"volumes":[`, "{}", 1_300_000, "]") })},
		{"150k defaulted volumes (4.05 MB), ibkube's, 8 clients", flood(8, func() []byte {
			return listReview(true, `"volumes":[`, `{"name":"v","emptyDir":{}}`, 150_000, "]")
		})},
		{"1.3M empty tolerations (3.9 MB), ibkube's, 8 clients", flood(8, func() []byte { return listReview(true, `"tolerations":[`, "{}", 1_300_000, "]") })},
		{"128 containers × 10k empty volumeMounts (3.8 MB), ibkube's, 8 clients", flood(8, func() []byte { return mountsReview(10_000) })},
	}
}

// bigReview is a valid review for a one-container pod padded by an
// annotation to size bytes.
func bigReview(size int) []byte {
	base := review([]byte(`{"metadata":{"name":"big","namespace":"training","annotations":{"pad":""}},"spec":{"containers":[{"name":"c","image":"busybox"}]}}`), "u", "training", "big")
	return bytes.Replace(base, []byte(`"pad":""`), []byte(`"pad":"`+strings.Repeat("x", size-len(base))+`"`), 1)
}

// TestAttacks runs every attack for attackTime against the binary at
// $IBKUBE_WEBHOOK_BIN, the legitimate stream at 20 reviews/s beside it
// (sent to the webhook, or as pod creates through the API server for the
// attacks through it), and prints the figures as a markdown table (also to
// $ATTACK_REPORT).
func TestAttacks(t *testing.T) {
	bin := os.Getenv("IBKUBE_WEBHOOK_BIN")
	if bin == "" {
		t.Fatal("$IBKUBE_WEBHOOK_BIN is not set: run `make bench-webhook-attack`")
	}
	attackTime := 8 * time.Second
	if v := os.Getenv("ATTACK_SECONDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatal(err)
		}
		attackTime = time.Duration(n) * time.Second
	}
	only, err := regexp.Compile(os.Getenv("ATTACK_ONLY"))
	if err != nil {
		t.Fatalf("$ATTACK_ONLY: %v", err)
	}
	kubeconfig, certDir, api := startAPIServer(t)

	var report strings.Builder
	fmt.Fprintf(&report, "Binary %s, memory limit %d MiB, GOMEMLIMIT %d MiB, %s per attack, legitimate stream 20 reviews/s (timeout %s):\n\n",
		filepath.Base(bin), memLimit/mib, goMemLimit/mib, attackTime, apiServerTimeout)
	report.WriteString("| attack | peak memory / limit | legitimate answered in time | legitimate p99 | /readyz 200 (longest failing run) | attacker saw | largest answer | webhook log |\n|---|---|---|---|---|---|---|---|\n")
	for _, list := range []struct {
		attacks []attack
		via     *apiServer // nil: the legitimate stream goes to the webhook itself
	}{{attacks(), nil}, {apiServerAttacks(api), api}} {
		for _, a := range list.attacks {
			if !only.MatchString(a.name) {
				continue
			}
			// A fresh process and cgroup for each attack, so one attack's
			// retained heap does not count in the next one's peak.
			w := startWebhook(t, bin, kubeconfig, certDir)
			d := attackTime
			if list.via != nil {
				// The API server spends seconds on each create of a pod
				// of a hundred thousand volumes before it calls the
				// webhook: a few of them need this long.
				d = max(d, 20*time.Second)
			}
			report.WriteString(runAttack(t, a, w, list.via, d))
			w.stop()
		}
	}
	t.Log("\n" + report.String())
	if p := os.Getenv("ATTACK_REPORT"); p != "" {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, p, report.String())
	}
}

// startAPIServer starts envtest's API server with the opted-in namespace
// training, and returns its kubeconfig and the webhook's certificate
// directory, both in files, and the way in for attacks through it.
func startAPIServer(t *testing.T) (kubeconfig, certDir string, api *apiServer) {
	t.Helper()
	cfg, env := testenv.Start(t, "bench-webhook-attack")
	cs := testenv.Clientset(t, cfg)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "training", Labels: map[string]string{contract.LabelInject: contract.InjectEnabled}}}
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig = filepath.Join(dir, "kubeconfig")
	writeFile(t, kubeconfig, string(env.KubeConfig))
	certDir = filepath.Join(dir, "certs")
	if err := os.Mkdir(certDir, 0o700); err != nil {
		t.Fatal(err)
	}
	servingcert.Write(t, certDir)
	return kubeconfig, certDir, newAPIServer(t, cfg, certDir)
}

// runAttack runs a against w for attackTime beside the legitimate stream,
// sent through api when it is not nil, and returns its row of the report.
func runAttack(t *testing.T, a attack, w *webhook, api *apiServer, attackTime time.Duration) string {
	t.Helper()
	if api != nil {
		api.point(t, w.addr)
	}
	w.resetPeak(t)
	kills := w.oomKills(t)
	logBefore := w.logBytes.Load()
	ctx, cancel := context.WithTimeout(context.Background(), attackTime)
	var s stats
	var l legit
	ready := w.watchReady(ctx)
	var lwg *sync.WaitGroup
	if api != nil {
		lwg = l.runThrough(ctx, api, 20)
	} else {
		lwg = l.run(ctx, w.addr, 20)
	}
	var awg sync.WaitGroup
	awg.Go(func() { a.run(ctx, w, &s) })
	<-ctx.Done()
	cancel()
	awg.Wait()
	lwg.Wait()
	<-ready.done
	sent, answered, p99 := l.summary()
	peak := w.peak(t)
	gone := ""
	if err := w.alive(); err != nil || w.oomKills(t) > kills {
		gone = fmt.Sprintf(" **OOM-killed** (%v)", err)
		t.Errorf("%s: the webhook was OOM-killed", a.name)
	}
	t.Logf("%s: peak %.0f MiB, legitimate %.1f%% of %d, p99 %s, readyz %d/%d (longest failing run %d), %s",
		a.name, float64(peak)/mib, answered, sent, p99, ready.ok.Load(), ready.total.Load(), ready.worstRun.Load(), s.codeSummary())
	if api != nil {
		api.logFailures(t)
	}
	return fmt.Sprintf("| %s | %.0f / %d MiB%s | %.1f %% of %d | %s | %d / %d (%d) | %s | %d B | %.1f KiB |\n",
		a.name, float64(peak)/mib, memLimit/mib, gone, answered, sent, p99.Round(time.Millisecond),
		ready.ok.Load(), ready.total.Load(), ready.worstRun.Load(), s.codeSummary(), s.maxAnswer.Load(), float64(w.logBytes.Load()-logBefore)/1024)
}
