package nri

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/node/memlock"
)

type staticInventory inventory.Node

func (s staticInventory) Inventory() inventory.Node { return inventory.Node(s) }

var testNode = staticInventory{
	HCAs: []inventory.HCA{{Name: "mlx5_0", CharDevices: []inventory.CharDevice{{Name: "uverbs0", Major: 231, Minor: 192, Present: true}}}},
}

// fakeProc is a proc tree where the NRI socket's peer (this test process,
// which runs the adaptation) holds 64 KiB soft, 8 MiB hard.
func fakeProc(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), fmt.Sprint(os.Getpid()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "limits"), []byte("Limit                     Soft Limit           Hard Limit           Units     \nMax locked memory         65536 8388608            bytes     \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(dir)
}

type fakeRuntime struct {
	*adaptation.Adaptation
	sock    string
	plugins *pluginCount
}

// pluginCount records the runtime's count of plugins it relays to: the
// runtime reports it once a plugin has registered and synchronized, which
// is the moment a CreateContainer starts reaching that plugin.
type pluginCount struct {
	mu      sync.Mutex
	n       int
	changed chan struct{}
}

func (c *pluginCount) UpdatePluginCount(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n = n
	close(c.changed)
	c.changed = make(chan struct{})
}

func (*pluginCount) RecordPluginInvocation(string, string, error)                               {}
func (*pluginCount) RecordPluginLatency(string, string, time.Duration)                          {}
func (*pluginCount) RecordPluginAdjustments(string, string, *api.ContainerAdjustment, int, int) {}

// waitPlugins waits until the runtime relays to n plugins.
func (r fakeRuntime) waitPlugins(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		r.plugins.mu.Lock()
		got, changed := r.plugins.n, r.plugins.changed
		r.plugins.mu.Unlock()
		if got == n {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("runtime relays to %d plugins, want %d", got, n)
		}
	}
}

// startRuntime starts the runtime side of NRI (what containerd embeds) on sock.
func startRuntime(t *testing.T, sock string) fakeRuntime {
	t.Helper()
	return startRuntimeWith(t, sock, nil)
}

// startRuntimeWith starts a fake runtime that holds ctrs (what it tells a
// plugin at Synchronize).
func startRuntimeWith(t *testing.T, sock string, ctrs []*api.Container) fakeRuntime {
	t.Helper()
	syncFn := func(ctx context.Context, cb adaptation.SyncCB) error {
		_, err := cb(ctx, nil, ctrs)
		return err
	}
	update := func(context.Context, []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) { return nil, nil }
	empty := t.TempDir()
	plugins := &pluginCount{changed: make(chan struct{})}
	r, err := adaptation.New("fake-runtime", "v0", syncFn, update, adaptation.WithMetrics(plugins),
		adaptation.WithSocketPath(sock), adaptation.WithPluginPath(empty), adaptation.WithPluginConfigPath(empty))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return fakeRuntime{r, sock, plugins}
}

// proxy stands between the plugin and a fake runtime so a test can make the
// runtime "die": the socket disappears and every connection drops, as when
// containerd restarts (adaptation.Stop keeps external plugins connected).
type proxy struct {
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func startProxy(t *testing.T, front, back string) *proxy {
	t.Helper()
	l, err := net.Listen("unix", front)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("unix", back)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, b)
			p.mu.Unlock()
			go func() { io.Copy(b, c); b.Close() }()
			go func() { io.Copy(c, b); c.Close() }()
		}
	}()
	t.Cleanup(p.kill)
	return p
}

func (p *proxy) kill() {
	p.l.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func waitState(t *testing.T, p *Plugin, want State) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.State() != want {
		if time.Now().After(deadline) {
			t.Fatalf("plugin state %s, want %s", p.State(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func createRequest(annotations map[string]string, devices ...*api.LinuxDevice) *api.CreateContainerRequest {
	return &api.CreateContainerRequest{
		Pod: &api.PodSandbox{Id: "pod1", Name: "rdma", Namespace: "ml", Uid: "u1", Annotations: annotations},
		Container: &api.Container{Id: fmt.Sprint("c", len(devices)), PodSandboxId: "pod1", Name: "trainer",
			Linux: &api.LinuxContainer{Devices: devices}},
	}
}

var uverbs0 = &api.LinuxDevice{Path: "/dev/infiniband/uverbs0", Type: "c", Major: 231, Minor: 192}

func memlockOf(adj *api.ContainerAdjustment) []*api.POSIXRlimit {
	var out []*api.POSIXRlimit
	for _, r := range adj.GetRlimits() {
		if r.Type == memlock.RlimitType {
			out = append(out, &api.POSIXRlimit{Type: r.Type, Soft: r.Soft, Hard: r.Hard})
		}
	}
	return out
}

type recordedEvent struct {
	Pod       PodRef
	Container string
	Outcome   memlock.Outcome
}

type eventRecorder struct{ events chan recordedEvent }

func (e eventRecorder) MemlockEvent(pod PodRef, container string, d memlock.Decision) {
	e.events <- recordedEvent{pod, container, d.Outcome}
}

func (e eventRecorder) RankConfEvent(pod PodRef, container string, c memlock.RankConf) {
	e.events <- recordedEvent{pod, container, memlock.Outcome(c.Outcome)}
}

func TestPluginAgainstNRIRuntime(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "nri.sock")
	reg := prometheus.NewRegistry()
	events := eventRecorder{make(chan recordedEvent, 10)}
	p := runPlugin(t, Config{SocketPath: sock, MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}, reg, events)

	waitState(t, p, StateNoSocket)
	if got := testutil.ToFloat64(p.metrics.connected); got != 0 {
		t.Errorf("ibkube_nri_connected = %v without a socket, want 0", got)
	}
	if got := testutil.ToFloat64(p.metrics.state.WithLabelValues(string(StateNoSocket))); got != 1 {
		t.Errorf(`ibkube_nri_state{state="no_socket"} = %v without a socket, want 1`, got)
	}

	r := startRuntime(t, filepath.Join(t.TempDir(), "nri.sock"))
	front := startProxy(t, sock, r.sock)
	waitState(t, p, StateConnected)
	if got := testutil.ToFloat64(p.metrics.connected); got != 1 {
		t.Errorf("ibkube_nri_connected = %v, want 1", got)
	}
	if got := testutil.ToFloat64(p.metrics.state.WithLabelValues(string(StateNoSocket))); got != 0 {
		t.Errorf(`ibkube_nri_state{state="no_socket"} = %v once connected, want 0`, got)
	}
	if diff := cmp.Diff(&memlock.RuntimeLimit{PID: os.Getpid(), Source: "peer", Limit: memlock.Limit{Soft: 65536, Hard: 8 << 20}}, p.RuntimeLimit()); diff != "" {
		t.Errorf("runtime limit learned over SO_PEERCRED (-want +got):\n%s", diff)
	}

	ctx2 := context.Background()
	waitServed(t, r)
	tests := []struct {
		name string
		req  *api.CreateContainerRequest
		want []*api.POSIXRlimit
	}{
		{"devices and 8Mi", createRequest(map[string]string{contract.AnnotationMemlock: "8Mi"}, uverbs0), []*api.POSIXRlimit{{Type: memlock.RlimitType, Soft: 8 << 20, Hard: 8 << 20}}},
		{"unlimited clamped", createRequest(map[string]string{contract.AnnotationMemlock: "unlimited"}, uverbs0), []*api.POSIXRlimit{{Type: memlock.RlimitType, Soft: 8 << 20, Hard: 8 << 20}}},
		{"no devices", createRequest(map[string]string{contract.AnnotationMemlock: "8Mi"}), nil},
		{"bad value", createRequest(map[string]string{contract.AnnotationMemlock: "lots"}, uverbs0), nil},
	}
	for _, tt := range tests {
		rpl, err := r.CreateContainer(ctx2, tt.req)
		if err != nil {
			t.Fatalf("%s: CreateContainer: %v", tt.name, err)
		}
		if diff := cmp.Diff(tt.want, memlockOf(rpl.GetAdjust()), cmp.Comparer(func(a, b *api.POSIXRlimit) bool {
			return a.Type == b.Type && a.Soft == b.Soft && a.Hard == b.Hard
		})); diff != "" {
			t.Errorf("%s: memlock adjustment (-want +got):\n%s", tt.name, diff)
		}
	}
	if got := testutil.ToFloat64(p.metrics.decisions.WithLabelValues("clamped")); got != 1 {
		t.Errorf("clamped decisions = %v, want 1", got)
	}
	var got []recordedEvent
	for len(events.events) > 0 {
		got = append(got, <-events.events)
	}
	want := []recordedEvent{
		{PodRef{"ml", "rdma", "u1"}, "trainer", memlock.OutcomeClamped},
		{PodRef{"ml", "rdma", "u1"}, "trainer", memlock.OutcomeInvalid},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	// The runtime restarts (its process, hence the socket and the
	// connection, goes away): the plugin notices and registers again.
	front.kill()
	waitState(t, p, StateNoSocket)
	r = startRuntime(t, filepath.Join(t.TempDir(), "nri.sock"))
	startProxy(t, sock, r.sock)
	waitState(t, p, StateConnected)
	waitServed(t, r)
}

// waitServed waits until the runtime relays CreateContainer to the plugin:
// the runtime lists a plugin only once it has synchronized, a moment after
// the plugin sees itself connected.
func waitServed(t *testing.T, r fakeRuntime) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rpl, err := r.CreateContainer(context.Background(), createRequest(map[string]string{contract.AnnotationMemlock: "1Mi"}, uverbs0))
		if err != nil {
			t.Fatal(err)
		}
		if len(memlockOf(rpl.GetAdjust())) == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("runtime never relayed CreateContainer to the plugin")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ulimitAdjuster stands in for containerd's NRI ulimit-adjuster sample
// plugin: it sets RLIMIT_MEMLOCK on every container.
type ulimitAdjuster struct{}

func (ulimitAdjuster) CreateContainer(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	adj := &api.ContainerAdjustment{}
	adj.AddRlimit(memlock.RlimitType, 1<<30, 1<<30)
	return adj, nil, nil
}

// TestBesideUlimitAdjuster shows what docs/memlock.md says: NRI refuses two
// plugins adjusting the same rlimit (the container fails to be created), so
// ibkube runs after the ulimit-adjuster and leaves a memlock it set alone.
func TestBesideUlimitAdjuster(t *testing.T) {
	for _, tt := range []struct {
		name, ourIndex string
		want           []*api.POSIXRlimit
		wantEvents     []recordedEvent
		wantErr        string
	}{
		{
			name: "ibkube after the adjuster", ourIndex: "90",
			want:       []*api.POSIXRlimit{{Type: memlock.RlimitType, Soft: 1 << 30, Hard: 1 << 30}},
			wantEvents: []recordedEvent{{PodRef{"ml", "rdma", "u1"}, "trainer", memlock.OutcomeAlreadySet}},
		},
		{
			name: "ibkube before the adjuster", ourIndex: "05",
			wantErr: `plugins "10-ulimit-adjuster" and "05-ibkube-memlock" both tried to set Rlimits RLIMIT_MEMLOCK`,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "nri.sock")
			r := startRuntime(t, sock)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()

			other, err := stub.New(ulimitAdjuster{}, stub.WithPluginName("ulimit-adjuster"), stub.WithPluginIdx("10"), stub.WithSocketPath(sock))
			if err != nil {
				t.Fatal(err)
			}
			if err := other.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer other.Stop()
			r.waitPlugins(t, 1)

			events := eventRecorder{make(chan recordedEvent, 10)}
			p, err := NewPlugin(Config{SocketPath: sock, ProcRoot: fakeProc(t), PluginIndex: tt.ourIndex}, testNode, testr.New(t), nil, events)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error)
			go func() { done <- p.Run(ctx) }()
			defer func() { cancel(); <-done }()
			r.waitPlugins(t, 2)

			rpl, err := r.CreateContainer(ctx, createRequest(map[string]string{contract.AnnotationMemlock: "8Mi"}, uverbs0))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("CreateContainer error = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, memlockOf(rpl.GetAdjust()), cmp.Comparer(func(a, b *api.POSIXRlimit) bool {
				return a.Type == b.Type && a.Soft == b.Soft && a.Hard == b.Hard
			})); diff != "" {
				t.Errorf("memlock (-want +got):\n%s", diff)
			}
			// The events are sent while ibkube answers, before the runtime
			// returns: ibkube saw the adjuster's memlock and left it.
			var got []recordedEvent
			for len(events.events) > 0 {
				got = append(got, <-events.events)
			}
			if diff := cmp.Diff(tt.wantEvents, got); diff != "" {
				t.Errorf("ibkube's decisions (-want +got):\n%s", diff)
			}
		})
	}
}

// TestJoinsRestartedRuntimeAtOnce: with a backoff far beyond the test's
// patience, only the socket's creation event can bring the plugin to the
// runtime, both when the runtime starts after the agent and when it
// restarts (containers created meanwhile would miss their memlock).
func TestJoinsRestartedRuntimeAtOnce(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "nri.sock")
	p := runPlugin(t, Config{SocketPath: sock, MinBackoff: time.Hour, MaxBackoff: time.Hour}, nil, nil)

	waitState(t, p, StateNoSocket)
	r := startRuntime(t, filepath.Join(t.TempDir(), "nri.sock"))
	front := startProxy(t, sock, r.sock)
	waitState(t, p, StateConnected)
	waitServed(t, r)

	front.kill() // the runtime goes away: its socket and the connection
	for deadline := time.Now().Add(10 * time.Second); p.State() == StateConnected; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("plugin still connected after the runtime went away")
		}
	}
	r = startRuntime(t, filepath.Join(t.TempDir(), "nri.sock"))
	startProxy(t, sock, r.sock)
	waitState(t, p, StateConnected)
	waitServed(t, r)
}

// runPlugin runs a plugin (reading the fake /proc) until the test ends.
func runPlugin(t *testing.T, cfg Config, reg prometheus.Registerer, events EventSink) *Plugin {
	t.Helper()
	cfg.ProcRoot = fakeProc(t)
	p, err := NewPlugin(cfg, testNode, testr.New(t), reg, events)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return p
}
