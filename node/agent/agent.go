// Package agent is the node agent: it scans the node's HCAs, builds the
// resource model from the config, serves the pools to the kubelet, rescans
// on discovery's change hints and periodically, and serves /healthz,
// /inventory and Prometheus /metrics.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/node/config"
	"github.com/ibkube/ibkube/node/deviceplugin"
	"github.com/ibkube/ibkube/node/resource"
)

// Scanner is discovery as the agent uses it (*discovery.Scanner).
type Scanner interface {
	Scan(ctx context.Context) (inventory.Node, error)
	Watch(ctx context.Context) (<-chan struct{}, error)
}

// Runnable is a component that runs beside the agent until ctx ends (the
// NRI memlock plugin); an error other than ctx's stops the agent.
type Runnable func(ctx context.Context) error

// Config is everything the agent needs; main fills it from flags.
type Config struct {
	Agent   *config.AgentConfig
	Scanner Scanner
	// SysfsRoot is read for the DMI product name.
	SysfsRoot string
	// HostDevRoot prefixes every DeviceSpec.HostPath (the kubelet's /dev).
	HostDevRoot      string
	KubeletSocketDir string
	// StateDir is the host directory for files handed to containers (the
	// NCCL topology file); the agent must see it at the same path as the host.
	StateDir string
	// Nodes reads the labels of the Node named NodeName once at start, for
	// its instance type; nil (no API server) or an error means "unknown"
	// and the agent goes on.
	Nodes    NodeLabels
	NodeName string
	// Labels writes the Node's partition label; nil (no API server): not
	// labelled.
	Labels NodeLabelPatcher
	// MetricsAddr and HealthAddr are listen addresses; "" or "0" disables.
	MetricsAddr, HealthAddr string
	// MetricsListener and HealthListener, when set, are served in place of
	// MetricsAddr and HealthAddr (and closed at the end): a caller that
	// opened port 0 keeps the port it was given.
	MetricsListener, HealthListener net.Listener
	// Runnables run beside the agent (e.g. the NRI memlock plugin).
	Runnables []Runnable
	// SharedHolds and SlotGrants are handed to the device plugin servers
	// (deviceplugin.Options.Holds, .Grants): shared slots leave out HCAs
	// held exclusively, and what each slot got is recorded. Nil: neither.
	SharedHolds deviceplugin.Holds
	SlotGrants  deviceplugin.Grants
	// Server hands the pools to the kubelet; nil: the device plugin
	// servers. The DRA driver (node/dra) is the other one; a node never
	// runs both for one resource.
	Server Server
}

// Server serves the resource model to the kubelet: Update gets every new
// model (the first before Run), Run serves until ctx ends.
type Server interface {
	Update(m *resource.Model)
	Run(ctx context.Context) error
}

// devicePlugins is the device plugin manager as a Server.
type devicePlugins struct{ *deviceplugin.Manager }

func (d devicePlugins) Update(m *resource.Model) {
	for _, p := range m.Pools {
		d.Manager.Update(p.Resource, p)
	}
}

// Agent is one node agent.
type Agent struct {
	cfg     Config
	log     logr.Logger
	reg     *prometheus.Registry
	metrics *metrics

	state   atomic.Pointer[state]
	profile resource.Profile
	// serving: the kubelet server runs (/healthz); ready: and its devices
	// are published (/readyz).
	serving atomic.Bool
	ready   atomic.Bool

	// partitionLabel is the value last written to the Node, labelled
	// whether one was written; only the scan loop touches them.
	partitionLabel string
	labelled       bool
}

type state struct {
	node  inventory.Node
	model *resource.Model
}

// New checks the config and prepares the agent; Run starts it.
func New(cfg Config, log logr.Logger) (*Agent, error) {
	if cfg.Agent == nil {
		cfg.Agent = config.Default()
	}
	if err := cfg.Agent.Validate(); err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	if cfg.Scanner == nil {
		return nil, errors.New("agent: no scanner")
	}
	if cfg.HostDevRoot == "" {
		cfg.HostDevRoot = "/dev"
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	a := &Agent{cfg: cfg, log: log, reg: reg, metrics: m}
	a.state.Store(&state{model: resource.Build(cfg.Agent, inventory.Node{}, a.modelOptions())})
	return a, nil
}

// Add runs r beside the agent (call before Run): the NRI memlock plugin,
// which needs the agent's Inventory and Registry and so is built after New.
func (a *Agent) Add(r Runnable) { a.cfg.Runnables = append(a.cfg.Runnables, r) }

// GuardShared makes the device plugin's shared slots leave out the HCAs h
// reports held exclusively and record their grants in g (call before Run).
func (a *Agent) GuardShared(h deviceplugin.Holds, g deviceplugin.Grants) {
	a.cfg.SharedHolds, a.cfg.SlotGrants = h, g
}

// Serve makes s the kubelet server instead of the device plugin servers
// (call before Run).
func (a *Agent) Serve(s Server) { a.cfg.Server = s }

// Registry is where components running beside the agent register their
// metrics; /metrics serves it.
func (a *Agent) Registry() prometheus.Registerer { return a.reg }

// Inventory returns the latest scan; safe for concurrent use.
func (a *Agent) Inventory() inventory.Node { return a.state.Load().node }

// Model returns the latest resource model; safe for concurrent use.
func (a *Agent) Model() *resource.Model { return a.state.Load().model }

func (a *Agent) modelOptions() resource.Options {
	return resource.Options{HostDevRoot: a.cfg.HostDevRoot, Profile: a.profile}
}

// Run serves until ctx ends or a component fails.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.resolveProfile(ctx)

	a.rescan(ctx, "start")
	srv := a.server()

	hints, err := a.cfg.Scanner.Watch(ctx)
	if err != nil {
		a.log.Error(err, "change events unavailable; relying on the periodic rescan", "period", a.cfg.Agent.RescanPeriod.Duration)
	}

	errs := make(chan error, 3+len(a.cfg.Runnables))
	var wg sync.WaitGroup
	launch := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx); err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	a.launchServers(srv, launch)
	a.serving.Store(true)
	a.readyWhenPublished(ctx, srv, launch)

	runErr := a.rescanUntilDone(ctx, srv, hints, errs)
	a.ready.Store(false)
	a.serving.Store(false)
	cancel()
	wg.Wait()
	return runErr
}

// server is the kubelet-facing server: the one configured (the DRA driver)
// told the model found at start, or else one device plugin per pool.
func (a *Agent) server() Server {
	if srv := a.cfg.Server; srv != nil {
		srv.Update(a.Model())
		return srv
	}
	var specs []deviceplugin.Spec
	for _, p := range a.Model().Pools {
		specs = append(specs, deviceplugin.Spec{Resource: p.Resource, Exclusive: p.Exclusive(), Pool: p})
	}
	return devicePlugins{deviceplugin.NewManager(deviceplugin.Options{
		SocketDir: a.cfg.KubeletSocketDir, Logger: a.log.WithName("server"), Observer: a.metrics,
		Holds: a.cfg.SharedHolds, Grants: a.cfg.SlotGrants, HoldsPeriod: a.cfg.Agent.RescanPeriod.Duration,
	}, specs)}
}

// launchServers starts, through launch, the kubelet-facing server, the
// metrics and health servers that are asked for, and the added runnables.
func (a *Agent) launchServers(srv Server, launch func(string, func(context.Context) error)) {
	launch("kubelet server", srv.Run)
	if lis, addr := a.cfg.MetricsListener, a.cfg.MetricsAddr; listens(lis, addr) {
		mux := http.NewServeMux()
		// One collector's bad sample (a name from sysfs that is no valid
		// label value) is logged and left out; the scrape keeps the rest.
		mux.Handle("/metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
		launch("metrics server", func(ctx context.Context) error { return serveHTTP(ctx, lis, addr, mux) })
	}
	if lis, addr := a.cfg.HealthListener, a.cfg.HealthAddr; listens(lis, addr) {
		launch("health server", func(ctx context.Context) error { return serveHTTP(ctx, lis, addr, a.healthMux()) })
	}
	for i, r := range a.cfg.Runnables {
		launch(fmt.Sprintf("runnable %d", i), r)
	}
}

// listens says whether a server is asked for: a listener handed in, or an
// address other than "" and "0" (off).
func listens(lis net.Listener, addr string) bool {
	return lis != nil || (addr != "" && addr != "0")
}

// rescanUntilDone rescans on each change hint and every rescan period until
// ctx ends (nil) or a launched server fails (its error).
func (a *Agent) rescanUntilDone(ctx context.Context, srv Server, hints <-chan struct{}, errs <-chan error) error {
	ticker := time.NewTicker(a.cfg.Agent.RescanPeriod.Duration)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			return err
		case _, ok := <-hints:
			if !ok {
				hints = nil
				continue
			}
			a.rescanAndUpdate(ctx, srv, "event")
		case <-ticker.C:
			a.rescanAndUpdate(ctx, srv, "periodic")
		}
	}
}

// publishWaiter is a Server that can tell when what it serves is usable:
// the DRA driver once its ResourceSlices are in the API, the device plugins
// once the kubelet has been sent their device lists.
type publishWaiter interface {
	Published(ctx context.Context) error
}

// readyWhenPublished reports Ready at once for a server that cannot tell,
// else only once the server's devices are published: a DaemonSet rollout
// counts a Ready pod as available and moves on, and pods placed on the
// node's devices before would be refused (DRA: unschedulable; device
// plugins: the kubelet still holds the old server's devices unhealthy).
func (a *Agent) readyWhenPublished(ctx context.Context, srv Server, launch func(string, func(context.Context) error)) {
	w, ok := srv.(publishWaiter)
	if !ok {
		a.ready.Store(true)
		return
	}
	start := time.Now()
	launch("readiness", func(ctx context.Context) error {
		if err := w.Published(ctx); err != nil {
			return err
		}
		a.ready.Store(true)
		a.log.Info("devices published; ready", "after", time.Since(start).String())
		return nil
	})
}

// Ready says whether the agent serves its devices and they are published
// (its /readyz).
func (a *Agent) Ready() bool { return a.ready.Load() }

func (a *Agent) resolveProfile(ctx context.Context) {
	var label string
	if a.cfg.Nodes != nil && a.cfg.Agent.Profile == "" {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		l, err := instanceType(lctx, a.cfg.Nodes, a.cfg.NodeName)
		cancel()
		if err != nil {
			a.log.Info("cannot read the Node's instance type; trying the DMI product name", "error", err.Error())
		}
		label = l
	}
	sku, source := ResolveSKU(a.cfg.Agent.Profile, label, DMIProductName(a.cfg.SysfsRoot))
	p, ok, err := NodeProfile(sku, a.cfg.StateDir)
	switch {
	case err != nil:
		a.log.Error(err, "node profile without its topology file", "sku", sku, "profile", p.Name)
	case !ok:
		a.log.Info("no node profile", "sku", sku, "source", source)
	default:
		a.log.Info("node profile", "sku", sku, "source", source, "profile", p.Name, "topologyFile", p.TopologyFile)
	}
	a.profile = p
}

// rescan scans and stores the new inventory and model; on error the last
// good state stays.
func (a *Agent) rescan(ctx context.Context, trigger string) bool {
	start := time.Now()
	node, err := a.cfg.Scanner.Scan(ctx)
	a.metrics.scanSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		a.metrics.scans.WithLabelValues(trigger, "error").Inc()
		if ctx.Err() == nil {
			a.log.Error(err, "scan failed; keeping the last inventory", "trigger", trigger)
		}
		return false
	}
	a.metrics.scans.WithLabelValues(trigger, "success").Inc()
	model := resource.Build(a.cfg.Agent, node, a.modelOptions())
	old := a.state.Swap(&state{node: node, model: model})
	a.metrics.setModel(model)
	a.logChanges(old.node, node)
	a.syncPartitionLabel(ctx, node)
	return true
}

func (a *Agent) rescanAndUpdate(ctx context.Context, srv Server, trigger string) {
	if !a.rescan(ctx, trigger) {
		return
	}
	srv.Update(a.Model())
}

func (a *Agent) logChanges(old, cur inventory.Node) {
	was := map[string]inventory.HCA{}
	for _, h := range old.HCAs {
		was[h.Name] = h
	}
	for _, h := range cur.HCAs {
		o, seen := was[h.Name]
		switch {
		case !seen:
			a.log.Info("HCA found", "hca", h.Name, "healthy", h.Healthy, "reason", h.HealthReason)
		case o.Healthy != h.Healthy || o.HealthReason != h.HealthReason:
			a.log.Info("HCA health changed", "hca", h.Name, "healthy", h.Healthy, "reason", h.HealthReason)
		}
		delete(was, h.Name)
	}
	for name := range was {
		a.log.Info("HCA gone", "hca", name)
	}
}

func (a *Agent) healthMux() *http.ServeMux {
	mux := http.NewServeMux()
	probe := func(up func() bool, down string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			if !up() {
				http.Error(w, down, http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ok\n"))
		}
	}
	// Liveness does not wait for the API server: an agent that cannot
	// publish yet is not Ready, but restarting it would not help.
	mux.HandleFunc("/healthz", probe(a.serving.Load, "starting"))
	mux.HandleFunc("/readyz", probe(a.Ready, "devices not published yet"))
	mux.HandleFunc("/inventory", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(Report(a.Model()))
	})
	return mux
}

// serveHTTP serves h on lis, or when lis is nil on a listener it opens on addr.
func serveHTTP(ctx context.Context, lis net.Listener, addr string, h http.Handler) error {
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("listen on %s: %w", addr, err)
		}
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
