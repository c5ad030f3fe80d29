//go:build integration

package attack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// memLimit and goMemLimit are the chart's webhook memory limit and the
// GOMEMLIMIT it derives from it (90 %).
const (
	memLimit   = 256 << 20
	goMemLimit = memLimit / 10 * 9
)

// webhook is the running binary in its cgroup.
type webhook struct {
	cgroup   string // cgroup v1 memory directory
	addr     string // admission port
	health   string // health probe address
	pid      int
	exited   chan error
	stop     func()
	logBytes atomic.Int64
}

// countWriter counts what the webhook logs.
type countWriter struct{ n *atomic.Int64 }

func (w countWriter) Write(p []byte) (int, error) { w.n.Add(int64(len(p))); return len(p), nil }

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startWebhook runs bin in a fresh memory cgroup (cgroup v1, the
// hierarchy this machine mounts) with the chart's flags.
func startWebhook(t *testing.T, bin, kubeconfig, certDir string) *webhook {
	t.Helper()
	root := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(root, "memory.limit_in_bytes")); err != nil {
		t.Skipf("no cgroup v1 memory hierarchy at %s: %v", root, err)
	}
	cg, err := os.MkdirTemp(root, fmt.Sprintf("ibkube-attack-%d-", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(cg, "memory.limit_in_bytes"), strconv.Itoa(memLimit))
	// Swap would hide an over-limit process instead of killing it.
	if _, err := os.Stat(filepath.Join(cg, "memory.memsw.limit_in_bytes")); err == nil {
		writeFile(t, filepath.Join(cg, "memory.memsw.limit_in_bytes"), strconv.Itoa(memLimit))
	}
	writeFile(t, filepath.Join(cg, "memory.swappiness"), "0")

	w := &webhook{cgroup: cg, exited: make(chan error, 1)}
	port, health := freePort(t), freePort(t)
	w.addr, w.health = fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("127.0.0.1:%d", health)
	args := []string{
		"--config=" + filepath.Join(t.TempDir(), "absent.yaml"), "--cert-dir=" + certDir, "--cert-management=external",
		"--host=127.0.0.1", "--port=" + strconv.Itoa(port),
		"--metrics-bind-address=0", "--health-probe-bind-address=" + w.health,
		"--namespace=ibkube-system", "--check-networks=false", "--kubeconfig=" + kubeconfig, "--shutdown-drain=0s",
	}
	// The shell joins the cgroup, then becomes the webhook: nothing runs
	// outside the limit.
	cmd := exec.Command("/bin/sh", append([]string{"-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, cg, bin}, args...)...)
	cmd.Env = append(os.Environ(), "GOMEMLIMIT="+strconv.Itoa(goMemLimit))
	cmd.Stdout, cmd.Stderr = countWriter{&w.logBytes}, countWriter{&w.logBytes}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.pid = cmd.Process.Pid
	go func() { w.exited <- cmd.Wait() }()
	w.stop = func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-w.exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-w.exited
		}
		w.exited <- errors.New("stopped")
		_ = os.Remove(cg)
	}
	t.Cleanup(w.stop)
	deadline := time.Now().Add(90 * time.Second)
	for !w.ready() {
		select {
		case err := <-w.exited:
			t.Fatalf("webhook exited before it was ready: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("webhook not ready after 90 s")
		}
		// The probe itself has a 1 s timeout; this paces it.
		time.Sleep(200 * time.Millisecond)
	}
	return w
}

func writeFile(t testing.TB, path, v string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
		t.Fatal(err)
	}
}

var probeClient = &http.Client{Timeout: time.Second}

// ready is one /readyz probe, as the kubelet makes it (1 s timeout).
func (w *webhook) ready() bool {
	resp, err := probeClient.Get("http://" + w.health + "/readyz")
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// resetPeak restarts the cgroup's peak usage count.
func (w *webhook) resetPeak(t testing.TB) {
	writeFile(t, filepath.Join(w.cgroup, "memory.max_usage_in_bytes"), "0")
}

// peak is the cgroup's peak memory since the last reset, in bytes (RSS
// and page cache; the webhook writes no files).
func (w *webhook) peak(t testing.TB) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(w.cgroup, "memory.max_usage_in_bytes"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// oomKills is the cgroup's OOM kill count (memory.oom_control), or the
// failed charges when the kernel does not report kills.
func (w *webhook) oomKills(t testing.TB) int {
	t.Helper()
	f, err := os.Open(filepath.Join(w.cgroup, "memory.oom_control"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "oom_kill "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// alive reports whether the webhook still runs.
func (w *webhook) alive() error {
	select {
	case err := <-w.exited:
		w.exited <- err
		if err == nil {
			err = errors.New("exited")
		}
		return err
	default:
		return nil
	}
}

// readiness is what the /readyz probes saw.
type readiness struct {
	ok, total atomic.Int64
	// worstRun is the longest run of failed probes: the kubelet takes a
	// replica out of the Service after failureThreshold (3) in a row.
	worstRun atomic.Int64
	done     chan struct{} // closed once the last probe is counted
}

// watchReady probes /readyz every 250 ms until ctx ends.
func (w *webhook) watchReady(ctx context.Context) *readiness {
	r := &readiness{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		run := int64(0)
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			r.total.Add(1)
			if w.ready() {
				r.ok.Add(1)
				run = 0
				continue
			}
			run++
			r.worstRun.Store(max(r.worstRun.Load(), run))
		}
	}()
	return r
}
