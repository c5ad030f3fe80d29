// Package deviceplugin serves resource pools to the kubelet over the device plugin
// API v1beta1: one gRPC server per pool on a unix socket in the kubelet's
// device-plugins directory, registered on kubelet.sock, re-registered within
// moments when the kubelet re-creates its socket (fsnotify on the directory,
// not a poll). It only serves: what to advertise and how to allocate come
// from a Pool (node/resource).
//
// Every server start listens on a socket name never used before. The
// kubelet (1.37) keys a plugin's connection by its socket path and refuses a
// Register for a path it still holds, dropping the live connection as it
// refuses (pkg/kubelet/cm/devicemanager/plugin/v1beta1/handler.go
// connectClient -> deregisterClient; manager.go PluginConnected): a server
// restarted on the same path and registered before the kubelet has torn
// down the old stream would leave the resource stuck until the kubelet
// restarts. A fresh path cannot collide with one the kubelet holds.
package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/ibkube/ibkube/node/resource"
)

// KubeletSocket is the kubelet's registration socket's name in the socket dir.
const KubeletSocket = "kubelet.sock"

// Pool is what one plugin serves; *resource.Pool implements it.
type Pool interface {
	Devices() []*pluginapi.Device
	Allocate(ids []string) (resource.Grant, error)
	Preferred(available, mustInclude []string, size int) ([]string, error)
}

// SharedPool is a shared pool that can leave HCAs out of a slot's
// allocation; *resource.Pool implements it.
type SharedPool interface {
	AllocateShared(ids []string, heldBy map[string]string) (resource.Grant, []string, error)
	// SharedHCAs names the healthy HCAs heldBy leaves to sharers.
	SharedHCAs(heldBy map[string]string) []string
}

// Holds says which HCAs containers hold exclusively on this node (the
// kubelet's PodResources API): HCA name to the holder, for messages.
type Holds interface {
	ExclusiveHolders(ctx context.Context) (map[string]string, error)
}

// Grants records the HCAs a shared slot was given, so that the agent's
// overlap report and ibkube doctor know what each sharer reaches.
type Grants interface {
	Record(resource string, slots, hcas []string) error
}

// Spec is one plugin to serve.
type Spec struct {
	Resource  string
	Exclusive bool
	Pool      Pool
}

// Observer hears about registrations and allocations (metrics); every method
// must be safe for concurrent use.
type Observer interface {
	Registered(resource string, err error)
	Allocated(resource string, devices int)
}

// Options configure a Manager.
type Options struct {
	// SocketDir is the kubelet's device-plugins directory.
	SocketDir string
	Logger    logr.Logger
	// Observer may be nil.
	Observer Observer
	// RetryPeriod is how often a failed registration is retried while
	// kubelet.sock exists (default 5s); a re-created kubelet.sock triggers
	// registration at once regardless.
	RetryPeriod time.Duration
	// Holds, when set, makes shared plugins leave out of a slot's
	// allocation the HCAs other containers hold exclusively: the kubelet
	// counts the shared and the exclusive resource apart and would let a
	// shared container reach them. While every healthy HCA is held, the
	// shared slots are advertised Unhealthy, so that the scheduler places
	// no shared pod the slots would refuse. Nil: a slot gets every healthy
	// HCA.
	Holds Holds
	// HoldsPeriod is how often shared plugins ask Holds between
	// allocations (default 10s, the agent's rescan period): the kubelet
	// tells a device plugin nothing when a container ends, so a slot
	// advertised Unhealthy turns Healthy again within one period of an HCA
	// coming free.
	HoldsPeriod time.Duration
	// Grants, when set, records what each shared slot was given.
	Grants Grants
}

// Manager runs one plugin per pool and keeps them registered.
type Manager struct {
	opts    Options
	plugins []*plugin
}

// NewManager prepares the plugins; Run serves them.
func NewManager(opts Options, specs []Spec) *Manager {
	if opts.RetryPeriod == 0 {
		opts.RetryPeriod = 5 * time.Second
	}
	if opts.HoldsPeriod == 0 {
		opts.HoldsPeriod = 10 * time.Second
	}
	m := &Manager{opts: opts}
	for _, s := range specs {
		p := &plugin{
			resource:  s.Resource,
			exclusive: s.Exclusive,
			dir:       opts.SocketDir,
			log:       opts.Logger.WithValues("resource", s.Resource),
			observer:  opts.Observer,
			holds:     opts.Holds,
			grants:    opts.Grants,
			changed:   make(chan struct{}),
			kick:      make(chan struct{}, 1),
			listed:    make(chan struct{}),
		}
		p.setPool(s.Pool)
		m.plugins = append(m.plugins, p)
	}
	return m
}

// Published returns once the kubelet has been sent every plugin's device
// list, or with ctx's error. Until then the node's capacity for these
// resources is not the kubelet's to admit pods on: after an agent's
// restart the kubelet holds the old server's devices as unhealthy, and a
// pod placed meanwhile (the Node's allocatable still showing the old count)
// is refused at admission with UnexpectedAdmissionError.
func (m *Manager) Published(ctx context.Context) error {
	for _, p := range m.plugins {
		select {
		case <-p.listed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the kubelet to list %s: %w", p.resource, ctx.Err())
		}
	}
	return nil
}

// SocketName is the stem of a resource's plugin socket names:
// rdma/shared_ib -> ibkube-rdma_shared_ib.sock. A server listens on
// SocketFile(resource, generation), ibkube-rdma_shared_ib.<generation>.sock.
func SocketName(resource string) string {
	return socketStem(resource) + ".sock"
}

func socketStem(resource string) string {
	return "ibkube-" + strings.NewReplacer("/", "_", ".", "_").Replace(resource)
}

// SocketFile is the socket name of one server start of a resource's plugin.
func SocketFile(resource, generation string) string {
	return socketStem(resource) + "." + generation + ".sock"
}

// IsSocketOf tells whether name is a socket name of resource's plugin, of
// any server start (SocketName itself is how agents before per-start names
// called it). Dots in a resource name become '_', so the stem's end is
// unambiguous.
func IsSocketOf(resource, name string) bool {
	if name == SocketName(resource) {
		return true
	}
	gen, ok := strings.CutPrefix(name, socketStem(resource)+".")
	if !ok {
		return false
	}
	gen, ok = strings.CutSuffix(gen, ".sock")
	return ok && gen != "" && !strings.ContainsAny(gen, "./")
}

// Update hands a plugin its pool's new state; streams see the new device
// list when it differs from the last one sent. Unknown resources are ignored.
func (m *Manager) Update(resource string, pool Pool) {
	for _, p := range m.plugins {
		if p.resource == resource {
			p.setPool(pool)
		}
	}
}

// Run serves and registers every plugin until ctx ends. It re-creates a
// plugin's socket when it disappears and re-registers every plugin when
// kubelet.sock is (re-)created.
func (m *Manager) Run(ctx context.Context) error {
	log := m.opts.Logger
	if err := os.MkdirAll(m.opts.SocketDir, 0o750); err != nil {
		return fmt.Errorf("kubelet socket dir: %w", err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch kubelet socket dir: %w", err)
	}
	defer w.Close()
	if err := w.Add(m.opts.SocketDir); err != nil {
		return fmt.Errorf("watch kubelet socket dir %s: %w", m.opts.SocketDir, err)
	}
	defer func() {
		for _, p := range m.plugins {
			p.stop()
		}
	}()
	m.removeOldSockets()
	for _, p := range m.plugins {
		if err := p.start(); err != nil {
			return err
		}
	}
	kubelet := filepath.Join(m.opts.SocketDir, KubeletSocket)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }() // registrars end before the servers stop
	for _, p := range m.plugins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.registrar(ctx, kubelet, m.opts.RetryPeriod)
		}()
		p.kickRegistration()
		if p.guardsShared() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.watchHolds(ctx, m.opts.HoldsPeriod)
			}()
		}
	}
	if _, err := os.Stat(kubelet); err != nil {
		log.Info("kubelet.sock not there yet; registering when it appears", "dir", m.opts.SocketDir)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-w.Errors:
			log.Error(err, "watching kubelet socket dir")
		case ev := <-w.Events:
			switch {
			case ev.Name == kubelet && ev.Has(fsnotify.Create):
				log.Info("kubelet.sock created: kubelet restarted, re-registering")
				for _, p := range m.plugins {
					if err := p.restartIfGone(); err != nil {
						return err
					}
					p.kickRegistration()
				}
			case ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename):
				for _, p := range m.plugins {
					if ev.Name != p.socket {
						continue
					}
					log.Info("plugin socket removed, serving it again", "resource", p.resource)
					if err := p.restartIfGone(); err != nil {
						return err
					}
					p.kickRegistration()
				}
			}
		}
	}
}

// removeOldSockets deletes the sockets an earlier agent left for the
// resources served here: nothing serves them, and the kubelet forgets a path
// once its stream has ended.
func (m *Manager) removeOldSockets() {
	entries, err := os.ReadDir(m.opts.SocketDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Type()&os.ModeSocket == 0 {
			continue
		}
		for _, p := range m.plugins {
			if IsSocketOf(p.resource, e.Name()) {
				if err := os.Remove(filepath.Join(m.opts.SocketDir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
					m.opts.Logger.Error(err, "remove an old plugin socket", "socket", e.Name())
				}
			}
		}
	}
}

// serving is one server start: its socket and its number in this process.
type serving struct {
	socket string
	start  uint64
}

// plugin serves one pool.
type plugin struct {
	pluginapi.UnimplementedDevicePluginServer

	resource  string
	exclusive bool
	dir       string
	socket    string // this server's; owned by Manager.Run's goroutine
	log       logr.Logger
	observer  Observer
	holds     Holds
	grants    Grants

	mu      sync.Mutex
	pool    Pool
	devices []*pluginapi.Device
	changed chan struct{} // closed and replaced when devices change
	// held is what Holds last answered (HCA to holder); allHeld says that
	// it left sharers no healthy HCA, so the slots are advertised
	// Unhealthy.
	held    map[string]string
	allHeld bool

	srv  *grpc.Server  // owned by Manager.Run's goroutine
	kick chan struct{} // asks the registrar to (re-)register now

	// listed is closed once a kubelet has been sent the device list
	// (ListAndWatch's first answer): from then on its device manager
	// admits pods onto these devices.
	listed     chan struct{}
	listedOnce sync.Once

	// starts counts the servers start has opened; registered is the
	// registration (kubelet.sock instance, server) the kubelet last
	// accepted. The registrar sends no second Register for one pair: the
	// kubelet (1.37) refuses it as "device plugin already connected" and,
	// in refusing, forgets the live connection for that socket, so when
	// that connection ends the resource is never marked unhealthy and every
	// later registration on the socket is refused until the kubelet
	// restarts (pkg/kubelet/cm/devicemanager/plugin/v1beta1/handler.go
	// connectClient -> deregisterClient, manager.go PluginConnected).
	starts     atomic.Uint64
	registered string // registrar goroutine only
	// serves is the latest server, for the registrar.
	serves atomic.Pointer[serving]
}

// kickRegistration asks the registrar to register now, dropping any backoff
// it is waiting out; kicks coalesce.
func (p *plugin) kickRegistration() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// registrar registers the plugin whenever kicked, in its own goroutine so the
// directory watch never waits on a kubelet. A failed registration is retried
// with a short backoff, then every retryPeriod while kubelet.sock exists; a
// kick starts over at once.
func (p *plugin) registrar(ctx context.Context, kubeletSocket string, retryPeriod time.Duration) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		}
	attempts:
		for {
			err := p.register(ctx, kubeletSocket)
			switch {
			case err == nil || ctx.Err() != nil:
				break attempts
			case errors.Is(err, errNoKubelet):
				p.log.V(1).Info("kubelet.sock absent; registering when it is created")
				break attempts
			}
			p.log.Error(err, "registration failed; retrying", "in", retryPeriod)
			select {
			case <-ctx.Done():
				return
			case <-p.kick:
			case <-time.After(retryPeriod):
			}
		}
	}
}

var errNoKubelet = errors.New("kubelet.sock absent")

func (p *plugin) setPool(pool Pool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pool = pool
	p.advertiseLocked()
}

// setHeld takes a new answer of Holds and advertises what follows.
func (p *plugin) setHeld(held map[string]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = held
	p.advertiseLocked()
}

// advertiseLocked works out the device list from the pool and the holds
// and, when it differs from the last one, hands it to the streams. A shared
// pool whose every healthy HCA is held exclusively advertises its slots
// Unhealthy: Allocate would refuse a slot (AllocateShared), and the kubelet
// admits a pod only onto healthy devices, so the scheduler keeps shared
// pods off the node instead of the kubelet failing them at admission.
func (p *plugin) advertiseLocked() {
	devs := p.pool.Devices()
	allHeld := false
	if shared, ok := p.pool.(SharedPool); ok && p.guardsShared() && len(p.held) > 0 {
		allHeld = len(shared.SharedHCAs(p.held)) == 0 && slices.ContainsFunc(devs, func(d *pluginapi.Device) bool { return d.Health == pluginapi.Healthy })
	}
	if allHeld {
		out := make([]*pluginapi.Device, 0, len(devs))
		for _, d := range devs {
			d = proto.CloneOf(d)
			d.Health = pluginapi.Unhealthy
			out = append(out, d)
		}
		devs = out
	}
	if allHeld != p.allHeld {
		if allHeld {
			p.log.Info("every healthy HCA is held exclusively; shared slots advertised Unhealthy until one is free", "held", p.held)
		} else {
			p.log.Info("an HCA is free for sharers again; shared slots advertised as their HCAs' health says")
		}
		p.allHeld = allHeld
	}
	if p.devices != nil && equalDevices(p.devices, devs) {
		return
	}
	p.devices = devs
	close(p.changed)
	p.changed = make(chan struct{})
}

// guardsShared says whether this plugin serves shared slots that leave out
// exclusively held HCAs.
func (p *plugin) guardsShared() bool { return !p.exclusive && p.holds != nil }

// watchHolds asks Holds every period until ctx ends. An answer that cannot
// be had keeps the last one: a PodResources API that is briefly away
// neither hides nor frees every slot.
func (p *plugin) watchHolds(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	failing := false
	for {
		hctx, cancel := context.WithTimeout(ctx, holdsTimeout)
		held, err := p.holds.ExclusiveHolders(hctx)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			p.log.Error(err, "cannot list exclusively held HCAs; the shared slots' health stays as it was")
			failing = true
		case err == nil:
			failing = false
			p.setHeld(held)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func equalDevices(a, b []*pluginapi.Device) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func (p *plugin) current() (Pool, []*pluginapi.Device, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pool, p.devices, p.changed
}

// start serves on a socket name of its own: the start time (an agent
// restarted within one nanosecond of its predecessor's start is not a case)
// and this process's start count.
func (p *plugin) start() error {
	n := p.starts.Add(1)
	gen := strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + strconv.FormatUint(n, 10)
	socket := filepath.Join(p.dir, SocketFile(p.resource, gen))
	lis, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", socket, err)
	}
	p.socket = socket
	p.serves.Store(&serving{socket: socket, start: n})
	p.srv = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(p.srv, p)
	go func(srv *grpc.Server) {
		if err := srv.Serve(lis); err != nil {
			p.log.Error(err, "device plugin server stopped")
		}
	}(p.srv)
	p.log.V(1).Info("serving", "socket", p.socket)
	return nil
}

func (p *plugin) stop() {
	if p.srv != nil {
		p.srv.Stop()
		p.srv = nil
	}
	if p.socket != "" {
		_ = os.Remove(p.socket)
		p.socket = ""
	}
}

// restartIfGone serves again on a fresh socket when ours was removed (the
// kubelet empties the directory when it starts).
func (p *plugin) restartIfGone() error {
	if _, err := os.Stat(p.socket); err == nil && p.srv != nil && p.socket != "" {
		return nil
	}
	p.stop()
	return p.start()
}

func (p *plugin) register(ctx context.Context, kubeletSocket string) (err error) {
	defer func() {
		if p.observer != nil && !errors.Is(err, errNoKubelet) && ctx.Err() == nil {
			p.observer.Registered(p.resource, err)
		}
	}()
	// Fail fast and retry briefly rather than wait for readiness: a stale
	// kubelet.sock must not block the loop that watches for the new one, and
	// a just-created socket may not be listening for a few microseconds.
	// Each attempt dials anew: a gRPC connection that failed once waits out
	// its reconnect backoff (1 s) before trying again.
	for i, backoff := range registerBackoff {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.kick:
			// kubelet.sock re-created meanwhile: start over without waiting
		case <-time.After(backoff):
		}
		fi, serr := os.Stat(kubeletSocket)
		if serr != nil {
			// gone (again): its next creation kicks registration
			return fmt.Errorf("register %s: %w", p.resource, errNoKubelet)
		}
		srv := p.serves.Load()
		key := registrationKey(fi, srv.start)
		if key == p.registered {
			p.log.V(1).Info("already registered with this kubelet for this server")
			return nil
		}
		req := &pluginapi.RegisterRequest{
			Version:      pluginapi.Version,
			Endpoint:     filepath.Base(srv.socket),
			ResourceName: p.resource,
			Options:      p.options(),
		}
		if err = p.registerOnce(ctx, kubeletSocket, req); err == nil {
			p.registered = key
			p.log.Info("registered with kubelet", "attempt", i+1)
			return nil
		}
		p.log.V(1).Info("registration attempt failed", "attempt", i+1, "error", err.Error())
	}
	return fmt.Errorf("register %s with %s: %w", p.resource, kubeletSocket, err)
}

func (p *plugin) registerOnce(ctx context.Context, kubeletSocket string, req *pluginapi.RegisterRequest) error {
	conn, err := grpc.NewClient("unix://"+kubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, req)
	return err
}

// registrationKey names one kubelet instance (its kubelet.sock file: a
// restarted kubelet creates a new one) and one server of the plugin.
func registrationKey(kubeletSock os.FileInfo, serving uint64) string {
	ino := uint64(0)
	if st, ok := kubeletSock.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	return fmt.Sprintf("%d/%d/%d", ino, kubeletSock.ModTime().UnixNano(), serving)
}

// registerBackoff are the waits before each registration attempt.
var registerBackoff = [...]time.Duration{0, 2 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond}

func (p *plugin) options() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: p.exclusive}
}

// GetDevicePluginOptions implements the device plugin API.
func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return p.options(), nil
}

// ListAndWatch sends the whole device list at once and again on every change.
func (p *plugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		_, devs, changed := p.current()
		if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return fmt.Errorf("send device list: %w", err)
		}
		p.listedOnce.Do(func() { close(p.listed) })
		p.log.V(1).Info("sent device list", "devices", len(devs))
		select {
		case <-changed:
		case <-s.Context().Done():
			return nil
		}
	}
}

// GetPreferredAllocation asks the pool for each container.
func (p *plugin) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	pool, _, _ := p.current()
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, c := range req.ContainerRequests {
		ids, err := pool.Preferred(c.AvailableDeviceIDs, c.MustIncludeDeviceIDs, int(c.AllocationSize))
		if err != nil {
			return nil, err
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// Allocate asks the pool for each container.
func (p *plugin) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	pool, _, _ := p.current()
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		g, err := p.allocate(ctx, pool, c.DevicesIds)
		if err != nil {
			p.log.Error(err, "allocate", "devices", c.DevicesIds)
			return nil, err
		}
		resp.ContainerResponses = append(resp.ContainerResponses, allocateResponse(g))
		if p.observer != nil {
			p.observer.Allocated(p.resource, len(c.DevicesIds))
		}
	}
	return resp, nil
}

// holdsTimeout bounds the PodResources List inside Allocate: the kubelet
// admits pods one at a time and waits on this answer.
const holdsTimeout = 2 * time.Second

// allocate answers one container. A shared slot leaves out the HCAs other
// containers hold exclusively; when they cannot be listed it gets every
// healthy HCA, as the device plugin API alone would give, and the agent's
// overlap report names any overlap that results.
func (p *plugin) allocate(ctx context.Context, pool Pool, ids []string) (resource.Grant, error) {
	shared, ok := pool.(SharedPool)
	if p.exclusive || !ok {
		return pool.Allocate(ids)
	}
	var held map[string]string
	if p.holds != nil {
		hctx, cancel := context.WithTimeout(ctx, holdsTimeout)
		h, err := p.holds.ExclusiveHolders(hctx)
		cancel()
		if err != nil {
			p.log.Error(err, "cannot list exclusively held HCAs; the shared slot gets every healthy HCA", "devices", ids)
		} else {
			p.setHeld(h)
		}
		held = h
	}
	g, hcas, err := shared.AllocateShared(ids, held)
	if err != nil {
		return resource.Grant{}, err
	}
	if len(held) > 0 {
		p.log.Info("shared slot leaves out exclusively held HCAs", "devices", ids, "granted", hcas, "held", held)
	}
	if p.grants != nil {
		if err := p.grants.Record(p.resource, ids, hcas); err != nil {
			p.log.Error(err, "cannot record the shared slot's HCAs; the overlap report assumes it has every HCA", "devices", ids)
		}
	}
	return g, nil
}

// PreStartContainer is not needed (PreStartRequired is false).
func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
