package nri

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ibkube/ibkube/node/memlock"

	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
	"github.com/containerd/nri/pkg/stub"
	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/internal/promreg"
)

// Defaults for Config.
const (
	DefaultPluginName = "ibkube-memlock"
	// DefaultPluginIndex orders the plugin after the usual sample plugins
	// (containerd's ulimit-adjuster is run with index 10) so that a memlock
	// they set is visible in the container we are shown and left alone.
	DefaultPluginIndex = "90"
	DefaultMinBackoff  = time.Second
	DefaultMaxBackoff  = 30 * time.Second
	// freshSocketRetry is the first wait after a failed connection to a
	// just-created socket; it doubles from there.
	freshSocketRetry = 10 * time.Millisecond
)

// Config configures the NRI plugin.
type Config struct {
	// SocketPath is the runtime's NRI socket.
	SocketPath string
	// ProcRoot is where the runtime's /proc/<pid>/limits is read.
	ProcRoot string
	// Max caps every limit set; nil means "what the runtime holds".
	Max *uint64
	// PluginName and PluginIndex register the plugin with NRI.
	PluginName, PluginIndex string
	// MinBackoff and MaxBackoff bound the wait between connection attempts.
	MinBackoff, MaxBackoff time.Duration
	// RankConfDir is the host directory (under the agent's state dir, the
	// same path in the agent's pod as on the host) where the NCCL conf file
	// of each RDMA container is written for the processes it starts with an
	// empty environment (see DecideRankConf); "" turns that off.
	RankConfDir string
	// Image reads the image's /etc/passwd for the container's user's home;
	// nil leaves the home to the container's uid and HOME. The plugin lets
	// one read run at a time, however many containers are created at once.
	Image ImageReader
	// PasswdTimeout bounds that read (default DefaultPasswdTimeout).
	PasswdTimeout time.Duration
	// GIDs reads a RoCE port's GID table at container creation; nil uses
	// the inventory's last scan.
	GIDs GIDReader
}

func (c Config) withDefaults() Config {
	if c.SocketPath == "" {
		c.SocketPath = memlock.DefaultSocketPath
	}
	if c.ProcRoot == "" {
		c.ProcRoot = "/proc"
	}
	if c.PluginName == "" {
		c.PluginName = DefaultPluginName
	}
	if c.PluginIndex == "" {
		c.PluginIndex = DefaultPluginIndex
	}
	if c.PasswdTimeout <= 0 {
		c.PasswdTimeout = DefaultPasswdTimeout
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = DefaultMinBackoff
	}
	if c.MaxBackoff < c.MinBackoff {
		c.MaxBackoff = max(DefaultMaxBackoff, c.MinBackoff)
	}
	return c
}

// Inventory gives the node's latest hardware scan (the agent implements it).
type Inventory interface {
	Inventory() inventory.Node
}

// PodRef names the pod a decision was about.
type PodRef struct{ Namespace, Name, UID string }

// EventSink receives decisions worth a pod Event (clamps, bad values, an
// NCCL conf file that could not be mounted). The agent may implement it with
// an event recorder; nil means log only.
type EventSink interface {
	MemlockEvent(pod PodRef, container string, d memlock.Decision)
	RankConfEvent(pod PodRef, container string, c memlock.RankConf)
}

// State is the NRI connection state.
type State string

// Connection states.
const (
	StateNoSocket     State = "no_socket"
	StateConnected    State = "connected"
	StateDisconnected State = "disconnected"
)

// Plugin is the NRI plugin: it keeps a connection to the runtime and answers
// CreateContainer with an RLIMIT_MEMLOCK adjustment when Decide says so.
type Plugin struct {
	cfg     Config
	inv     Inventory
	log     logr.Logger
	events  EventSink
	metrics *metrics

	runtime atomic.Pointer[memlock.RuntimeLimit]
	state   atomic.Value // State

	mu        sync.Mutex
	lastState State
	lastErr   string
}

// NewPlugin builds the plugin; reg may be nil (no metrics), events may be nil.
func NewPlugin(cfg Config, inv Inventory, log logr.Logger, reg prometheus.Registerer, events EventSink) (*Plugin, error) {
	if inv == nil {
		return nil, errors.New("memlock: nil inventory")
	}
	p := &Plugin{cfg: cfg.withDefaults(), inv: inv, log: log, events: events, metrics: newMetrics()}
	if p.cfg.Image != nil {
		p.cfg.Image = oneAtATime(p.cfg.Image)
	}
	p.state.Store(StateDisconnected)
	if reg != nil {
		if err := p.metrics.register(reg); err != nil {
			return nil, fmt.Errorf("register memlock metrics: %w", err)
		}
	}
	return p, nil
}

// State returns the current connection state.
func (p *Plugin) State() State { return p.state.Load().(State) }

// RuntimeLimit returns what was learned about the runtime's memlock at the
// last connection, or nil.
func (p *Plugin) RuntimeLimit() *memlock.RuntimeLimit { return p.runtime.Load() }

// setState records and logs (once per change) the connection state.
func (p *Plugin) setState(s State, err error) {
	p.state.Store(s)
	p.metrics.setState(s)
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	p.mu.Lock()
	changed := s != p.lastState || (s == StateDisconnected && msg != p.lastErr)
	p.lastState, p.lastErr = s, msg
	p.mu.Unlock()
	if !changed {
		return
	}
	switch s {
	case StateConnected:
		kv := []any{"socket", p.cfg.SocketPath}
		if rl := p.RuntimeLimit(); rl != nil {
			kv = append(kv, "runtimePID", rl.PID, "runtimeMemlock", memlock.FormatLimit(rl.Limit), "found", rl.Source)
		}
		p.log.Info("NRI connected: RDMA containers get RLIMIT_MEMLOCK from the pod's annotation", kv...)
	case StateNoSocket:
		p.log.Info("NRI socket absent: memlock of RDMA containers is NOT managed (containerd 1.x or NRI disabled); devices are still served",
			"socket", p.cfg.SocketPath, "fix", "enable NRI in the runtime (containerd 2.x has it on by default) or set --nri-socket")
	case StateDisconnected:
		p.log.Error(err, "NRI connection lost or refused; retrying with backoff", "socket", p.cfg.SocketPath)
	}
}

// Run keeps the plugin connected to the runtime until ctx ends: it waits
// for the socket, registers, serves, and reconnects when the runtime
// restarts. The socket's (re-)creation is seen through filesystem events,
// so a restarted runtime is joined at once rather than after the backoff;
// the backoff (MinBackoff doubling to MaxBackoff) only paces retries when
// connecting fails. It returns nil when ctx ends.
func (p *Plugin) Run(ctx context.Context) error {
	created := p.watchSocket(ctx)
	backoff := p.cfg.MinBackoff
	for ctx.Err() == nil {
		if _, err := os.Stat(p.cfg.SocketPath); err != nil {
			p.setState(StateNoSocket, nil)
		} else {
			start := time.Now()
			err := p.serveOnce(ctx)
			if ctx.Err() != nil {
				break
			}
			p.setState(StateDisconnected, err)
			if time.Since(start) > p.cfg.MaxBackoff {
				backoff = p.cfg.MinBackoff
			}
		}
		select {
		case <-ctx.Done():
		case <-created:
			// A socket is created at bind, a moment before the runtime
			// listens on it: retry quickly at first.
			backoff = min(freshSocketRetry, p.cfg.MinBackoff)
			continue
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, p.cfg.MaxBackoff)
	}
	p.metrics.connected.Set(0)
	return nil
}

// watchSocket reports creations of the NRI socket (a runtime starting or
// restarting) on the returned channel, coalesced. When the socket's
// directory cannot be watched (it does not exist, as with containerd 1.x)
// the channel never fires and Run relies on its backoff.
func (p *Plugin) watchSocket(ctx context.Context) <-chan struct{} {
	created := make(chan struct{}, 1)
	w, err := fsnotify.NewWatcher()
	if err == nil {
		err = w.Add(filepath.Dir(p.cfg.SocketPath))
		if err != nil {
			_ = w.Close()
		}
	}
	if err != nil {
		p.log.V(1).Info("cannot watch the NRI socket's directory; polling it with backoff", "socket", p.cfg.SocketPath, "error", err.Error())
		return created
	}
	go func() {
		defer w.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if ev.Name == filepath.Clean(p.cfg.SocketPath) && ev.Has(fsnotify.Create) {
					select {
					case created <- struct{}{}:
					default:
					}
				}
			case _, ok := <-w.Errors:
				if !ok {
					return
				}
			}
		}
	}()
	return created
}

// serveOnce connects, registers and serves one NRI connection until it
// closes or ctx ends.
func (p *Plugin) serveOnce(ctx context.Context) error {
	closed := make(chan struct{})
	var once sync.Once
	s, err := stub.New(handler{p},
		stub.WithPluginName(p.cfg.PluginName),
		stub.WithPluginIdx(p.cfg.PluginIndex),
		stub.WithSocketPath(p.cfg.SocketPath),
		stub.WithDialer(p.dial),
		stub.WithLogger(nriLogger{p.log.WithName("nri")}),
		stub.WithOnClose(func() { once.Do(func() { close(closed) }) }),
	)
	if err != nil {
		return fmt.Errorf("create NRI stub: %w", err)
	}
	if err := s.Start(ctx); err != nil {
		s.Stop()
		return fmt.Errorf("register with NRI at %s: %w", p.cfg.SocketPath, err)
	}
	select {
	case <-closed:
		s.Stop()
		return errors.New("runtime closed the NRI connection")
	case <-ctx.Done():
		s.Stop()
		return ctx.Err()
	}
}

// dial connects to the NRI socket and learns, from the peer's credentials,
// which process the runtime is and what memlock it holds.
func (p *Plugin) dial(path string) (net.Conn, error) {
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		return nil, err
	}
	rl, err := memlock.LearnRuntimeLimit(p.cfg.ProcRoot, memlock.PeerPID(c))
	if err != nil {
		p.runtime.Store(nil)
		p.metrics.runtimeLimit.Reset()
		p.log.Error(err, "cannot read the runtime's memlock limit; only --memlock-max can cap requests", "procRoot", p.cfg.ProcRoot)
	} else {
		p.runtime.Store(&rl)
		p.metrics.runtimeLimit.WithLabelValues("soft").Set(gaugeValue(rl.Limit.Soft))
		p.metrics.runtimeLimit.WithLabelValues("hard").Set(gaugeValue(rl.Limit.Hard))
	}
	return c, nil
}

// Decide runs the pure decision for one NRI container.
func (p *Plugin) Decide(pod *api.PodSandbox, ctr *api.Container) memlock.Decision {
	in := memlock.Input{
		PodAnnotations: pod.GetAnnotations(),
		IBDevices:      memlock.DevicesOf(p.inv.Inventory()),
		Max:            p.cfg.Max,
	}
	for _, d := range ctr.GetLinux().GetDevices() {
		in.Devices = append(in.Devices, memlock.Device{Path: d.GetPath(), Type: d.GetType(), Major: d.GetMajor(), Minor: d.GetMinor()})
	}
	for _, r := range ctr.GetRlimits() {
		if r.GetType() == memlock.RlimitType {
			in.Existing = &memlock.Limit{Soft: r.GetSoft(), Hard: r.GetHard()}
		}
	}
	if rl := p.RuntimeLimit(); rl != nil {
		l := rl.Limit
		in.Runtime = &l
	}
	return memlock.Decide(in)
}

func (p *Plugin) createContainer(pod *api.PodSandbox, ctr *api.Container) *api.ContainerAdjustment {
	adj := &api.ContainerAdjustment{}
	changed := p.adjustMemlock(pod, ctr, adj)
	plan, rccl := p.imageLibraries(ctr, p.RankInputOf(pod, ctr))
	added := p.gidIndex(pod, ctr, adj, plan)
	if len(added) > 0 {
		changed = true
	}
	if p.rankConf(pod, ctr, adj, added, plan, rccl) {
		changed = true
	}
	if !changed {
		return nil
	}
	return adj
}

// adjustMemlock adds the RLIMIT_MEMLOCK Decide asks for to adj.
func (p *Plugin) adjustMemlock(pod *api.PodSandbox, ctr *api.Container, adj *api.ContainerAdjustment) bool {
	d := p.Decide(pod, ctr)
	p.metrics.decisions.WithLabelValues(string(d.Outcome)).Inc()
	if d.Outcome == memlock.OutcomeNoAnnotation {
		return false
	}
	kv := []any{"pod", pod.GetNamespace() + "/" + pod.GetName(), "container", ctr.GetName(), "outcome", d.Outcome, "requested", d.Requested}
	if d.Set {
		kv = append(kv, "soft", memlock.FormatBytes(d.Limit.Soft), "hard", memlock.FormatBytes(d.Limit.Hard))
	}
	p.log.Info(d.Reason, kv...)
	if p.events != nil && d.Outcome != memlock.OutcomeNoDevices && d.Outcome != memlock.OutcomeSet && d.Outcome != memlock.OutcomeNotNeeded {
		p.events.MemlockEvent(PodRef{Namespace: pod.GetNamespace(), Name: pod.GetName(), UID: pod.GetUid()}, ctr.GetName(), d)
	}
	if !d.Set {
		return false
	}
	adj.AddRlimit(memlock.RlimitType, d.Limit.Hard, d.Limit.Soft)
	return true
}

// handler is what the NRI stub sees: Synchronize (the runtime has taken
// the plugin in), CreateContainer, and StopContainer and RemoveContainer
// (to delete a container's NCCL conf file), so the plugin subscribes to
// nothing else.
type handler struct{ p *Plugin }

func (h handler) Synchronize(_ context.Context, _ []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	h.p.removeStaleRankConfs(ctrs)
	h.p.setState(StateConnected, nil)
	return nil, nil
}

func (h handler) StopContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	h.p.removeRankConf(ctr.GetId())
	return nil, nil
}

func (h handler) RemoveContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) error {
	h.p.removeRankConf(ctr.GetId())
	return nil
}

func (h handler) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	// Never fail a container start: every problem is a "no change" decision.
	return h.p.createContainer(pod, ctr), nil, nil
}

func gaugeValue(v uint64) float64 {
	if v == memlock.Unlimited {
		return math.Inf(1)
	}
	return float64(v)
}

type metrics struct {
	connected    prometheus.Gauge
	state        *prometheus.GaugeVec
	decisions    *prometheus.CounterVec
	rankConfs    *prometheus.CounterVec
	runtimeLimit *prometheus.GaugeVec
}

func newMetrics() *metrics {
	return &metrics{
		connected:    promreg.Gauge("ibkube_nri_connected", "1 when the node agent's memlock plugin is registered with the runtime's NRI socket, else 0."),
		state:        promreg.GaugeVec("ibkube_nri_state", "1 for the memlock plugin's NRI connection state (connected; no_socket: the runtime has no NRI socket, as containerd 1.x or NRI disabled; disconnected: connection lost or refused), 0 for the others.", "state"),
		decisions:    promreg.CounterVec("ibkube_memlock_decisions_total", "Containers seen by the memlock NRI plugin, by outcome (set, clamped, invalid, no_devices, already_set, not_needed, no_cap, no_annotation).", "outcome"),
		rankConfs:    promreg.CounterVec("ibkube_nccl_rank_conf_total", "Containers seen by the NRI plugin, by what happened to the NCCL conf file that gives processes started without the container's environment its NCCL settings (written, no_devices, no_home, no_passwd, user_mount, nothing, error).", "outcome"),
		runtimeLimit: promreg.GaugeVec("ibkube_memlock_runtime_limit_bytes", "The container runtime's own RLIMIT_MEMLOCK (+Inf when unlimited), the most a container can be given.", "limit"),
	}
}

// setState exports s as the connection state.
func (m *metrics) setState(s State) {
	connected := 0.0
	if s == StateConnected {
		connected = 1
	}
	m.connected.Set(connected)
	for _, st := range []State{StateConnected, StateNoSocket, StateDisconnected} {
		v := 0.0
		if st == s {
			v = 1
		}
		m.state.WithLabelValues(string(st)).Set(v)
	}
}

func (m *metrics) register(reg prometheus.Registerer) error {
	return promreg.Register(reg, m.connected, m.state, m.decisions, m.rankConfs, m.runtimeLimit)
}

// nriLogger routes the NRI library's printf-style logs into logr.
type nriLogger struct{ log logr.Logger }

var _ nrilog.Logger = nriLogger{}

func (l nriLogger) Debugf(_ context.Context, format string, args ...any) {
	l.log.V(2).Info(fmt.Sprintf(format, args...))
}
func (l nriLogger) Infof(_ context.Context, format string, args ...any) {
	l.log.V(1).Info(fmt.Sprintf(format, args...))
}
func (l nriLogger) Warnf(_ context.Context, format string, args ...any) {
	l.log.Info(fmt.Sprintf(format, args...))
}
func (l nriLogger) Errorf(_ context.Context, format string, args ...any) {
	l.log.Error(nil, fmt.Sprintf(format, args...))
}
