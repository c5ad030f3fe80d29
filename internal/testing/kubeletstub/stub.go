// Package kubeletstub is a stand-in kubelet for device plugin tests: it
// serves the real Registration API on kubelet.sock in a directory and, like
// the kubelet, connects back to each registered plugin, reads its options
// and follows its ListAndWatch stream.
//
// It keeps the kubelet 1.37 device manager's books (kubernetes
// pkg/kubelet/cm/devicemanager/plugin/v1beta1/handler.go and manager.go):
// clients are listed per resource and told apart by socket path only; an
// endpoint is connected per (resource, socket path); a Register for a path
// whose endpoint is still connected is refused ("device plugin already
// connected") and, through deregisterClient, drops every client of that path,
// the live one included; when a stream ends, the endpoint is disconnected only
// if a client of its path is still listed. So a refused duplicate leaves an
// endpoint that nothing ever disconnects, and every later Register on that
// path is refused until the kubelet restarts.
package kubeletstub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Registration is one Register call as the stub saw it.
type Registration struct {
	Request *pluginapi.RegisterRequest
	// Options are what the plugin's GetDevicePluginOptions returned.
	Options *pluginapi.DevicePluginOptions
	At      time.Time
}

// List is one ListAndWatch message.
type List struct {
	Devices []*pluginapi.Device
	At      time.Time
}

// Stub is the fake kubelet.
type Stub struct {
	pluginapi.UnimplementedRegistrationServer

	dir string

	mu            sync.Mutex
	srv           *grpc.Server
	registrations map[string]chan Registration
	refusals      map[string]chan Refusal
	lists         map[string]chan List
	// clients is the handler's list per resource (server.clients);
	// endpoints the manager's store per resource and socket path
	// (ManagerImpl.endpointStore). A kubelet restart empties both.
	clients   map[string][]*client
	endpoints map[string]map[string]*client
	// teardown, when not nil, holds back what the kubelet does once a
	// plugin's stream ends, until it is closed.
	teardown chan struct{}
	ctx      context.Context
	cancel   context.CancelFunc
}

// client is one connection the stub made to a registered plugin.
type client struct {
	path string
	conn *grpc.ClientConn
}

// Refusal is one Register call the stub refused.
type Refusal struct {
	Request *pluginapi.RegisterRequest
	Err     error
}

// Start serves kubelet.sock in dir until tb ends (or Stop), failing tb if
// it cannot.
func Start(tb testing.TB, dir string) *Stub {
	tb.Helper()
	s := &Stub{dir: dir, registrations: map[string]chan Registration{}, refusals: map[string]chan Refusal{}, lists: map[string]chan List{}}
	if err := s.listen(); err != nil {
		tb.Fatalf("kubelet stub in %s: %v", dir, err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// Socket is the path of kubelet.sock.
func (s *Stub) Socket() string { return filepath.Join(s.dir, "kubelet.sock") }

func (s *Stub) listen() error {
	lis, err := net.Listen("unix", s.Socket())
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, s)
	ctx, cancel := context.WithCancel(context.Background())
	s.mu.Lock()
	s.srv, s.ctx, s.cancel = srv, ctx, cancel
	s.clients, s.endpoints = map[string][]*client{}, map[string]map[string]*client{}
	s.mu.Unlock()
	go func() { _ = srv.Serve(lis) }()
	return nil
}

// Stop stops serving, drops the plugin connections and removes kubelet.sock.
func (s *Stub) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		s.srv.Stop()
		s.srv = nil
	}
	if s.cancel != nil {
		s.cancel()
	}
	for _, eps := range s.endpoints {
		for _, c := range eps {
			_ = c.conn.Close()
		}
	}
	s.clients, s.endpoints = map[string][]*client{}, map[string]map[string]*client{}
	_ = os.Remove(s.Socket())
}

// Restart is a kubelet restart as the kubelet's device manager does it:
// kubelet.sock deleted, every other file of the directory (the plugins'
// sockets) but the checkpoint removed, then kubelet.sock created again.
func (s *Stub) Restart() error {
	s.Stop()
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	for _, e := range entries {
		if e.Name() == checkpointFile {
			continue
		}
		if err := os.RemoveAll(filepath.Join(s.dir, e.Name())); err != nil {
			return fmt.Errorf("restart: %w", err)
		}
	}
	return s.listen()
}

// checkpointFile is the one file the kubelet keeps in its device plugin
// directory across restarts.
const checkpointFile = "kubelet_internal_checkpoint"

// Registrations delivers every Register call of a resource.
func (s *Stub) Registrations(resource string) <-chan Registration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return channelFor(s.registrations, resource, registrationsBuffer)
}

// Refusals delivers every Register call of a resource the stub refused.
func (s *Stub) Refusals(resource string) <-chan Refusal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return channelFor(s.refusals, resource, registrationsBuffer)
}

// HoldTeardown makes the stub, like a busy kubelet, not yet notice that a
// plugin's stream ended: what it does then waits until release is called.
func (s *Stub) HoldTeardown() (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	gate := make(chan struct{})
	s.teardown = gate
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.teardown == gate {
				s.teardown = nil
			}
			s.mu.Unlock()
			close(gate)
		})
	}
}

// Connected lists the socket paths the stub holds an endpoint for, for a
// resource.
func (s *Stub) Connected(resource string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for p := range s.endpoints[resource] {
		out = append(out, p)
	}
	return out
}

// Lists delivers every ListAndWatch message for a resource, across
// re-registrations.
func (s *Stub) Lists(resource string) <-chan List {
	s.mu.Lock()
	defer s.mu.Unlock()
	return channelFor(s.lists, resource, listsBuffer)
}

// The channels hold this many Register calls and ListAndWatch messages of a
// resource that no test has read yet.
const (
	registrationsBuffer = 100
	listsBuffer         = 1000
)

// channelFor returns m's channel for resource, made with size on first use.
func channelFor[T any](m map[string]chan T, resource string, size int) chan T {
	ch, ok := m[resource]
	if !ok {
		ch = make(chan T, size)
		m[resource] = ch
	}
	return ch
}

// Client is a device plugin client for a registered resource.
func (s *Stub) Client(resource string) (pluginapi.DevicePluginClient, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := s.clients[resource]
	if len(cs) == 0 {
		return nil, fmt.Errorf("%s is not registered", resource)
	}
	return pluginapi.NewDevicePluginClient(cs[len(cs)-1].conn), nil
}

// Register implements the Registration API as the kubelet 1.37 does: it
// checks the version, lists a client for the socket path, dials the plugin
// and reads its options, then connects the endpoint unless one for that path
// is still connected, in which case it refuses and drops every client of the
// path (connectClient -> deregisterClient).
func (s *Stub) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if req.Version != pluginapi.Version {
		return nil, fmt.Errorf("unsupported version %q", req.Version)
	}
	path := filepath.Join(s.dir, req.Endpoint)
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	c := &client{path: path, conn: conn}
	s.mu.Lock()
	ctx := s.ctx
	s.clients[req.ResourceName] = append(s.clients[req.ResourceName], c)
	lists := channelFor(s.lists, req.ResourceName, listsBuffer)
	regs := channelFor(s.registrations, req.ResourceName, registrationsBuffer)
	refused := channelFor(s.refusals, req.ResourceName, registrationsBuffer)
	s.mu.Unlock()
	plugin := pluginapi.NewDevicePluginClient(conn)
	octx, cancel := context.WithTimeout(ctx, 5*time.Second)
	opts, err := plugin.GetDevicePluginOptions(octx, &pluginapi.Empty{}, grpc.WaitForReady(true))
	cancel()
	if err == nil {
		err = s.connect(req.ResourceName, c)
	}
	if err != nil {
		s.deregister(req.ResourceName, path)
		_ = conn.Close()
		refused <- Refusal{Request: req, Err: err}
		return nil, err
	}
	regs <- Registration{Request: req, Options: opts, At: time.Now()}
	go s.run(ctx, req.ResourceName, c, plugin, lists)
	return &pluginapi.Empty{}, nil
}

// connect is the manager's PluginConnected.
func (s *Stub) connect(resource string, c *client) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.endpoints[resource] == nil {
		s.endpoints[resource] = map[string]*client{}
	}
	if _, ok := s.endpoints[resource][c.path]; ok {
		return fmt.Errorf("device plugin already connected: %s", c.path)
	}
	s.endpoints[resource][c.path] = c
	return nil
}

// deregister is the handler's deregisterClient: it drops every client of
// the path.
func (s *Stub) deregister(resource, path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keep []*client
	for _, c := range s.clients[resource] {
		if c.path != path {
			keep = append(keep, c)
		}
	}
	s.clients[resource] = keep
}

// run follows a plugin's stream and, once it ends, disconnects its endpoint
// only if a client of its path is still listed (runClient).
func (s *Stub) run(ctx context.Context, resource string, c *client, plugin pluginapi.DevicePluginClient, lists chan List) {
	if stream, err := plugin.ListAndWatch(ctx, &pluginapi.Empty{}, grpc.WaitForReady(true)); err == nil {
		for {
			m, err := stream.Recv()
			if err != nil {
				break
			}
			lists <- List{Devices: m.Devices, At: time.Now()}
		}
	}
	s.mu.Lock()
	gate := s.teardown
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ctx != s.ctx {
		return // the kubelet restarted meanwhile: its books are new
	}
	listed := false
	for _, o := range s.clients[resource] {
		listed = listed || o.path == c.path
	}
	if !listed {
		return
	}
	var keep []*client
	for _, o := range s.clients[resource] {
		if o.path != c.path {
			keep = append(keep, o)
		}
	}
	s.clients[resource] = keep
	delete(s.endpoints[resource], c.path)
	_ = c.conn.Close()
}

// WaitList returns the next list of resource that satisfies ok.
func (s *Stub) WaitList(resource string, timeout time.Duration, ok func([]*pluginapi.Device) bool) (List, error) {
	ch := s.Lists(resource)
	deadline := time.After(timeout)
	for {
		select {
		case l := <-ch:
			if ok(l.Devices) {
				return l, nil
			}
		case <-deadline:
			return List{}, errors.New("timed out waiting for a matching device list of " + resource)
		}
	}
}

// WaitHealth waits for a list of resource in which device id has health
// (pluginapi.Healthy or pluginapi.Unhealthy).
func (s *Stub) WaitHealth(resource, id, health string, timeout time.Duration) (List, error) {
	return s.WaitList(resource, timeout, func(devs []*pluginapi.Device) bool { return HealthOf(devs, id) == health })
}

// HealthOf is the health of device id in devs, or "absent".
func HealthOf(devs []*pluginapi.Device, id string) string {
	for _, d := range devs {
		if d.ID == id {
			return d.Health
		}
	}
	return "absent"
}

// WaitRegistration returns the next registration of resource.
func (s *Stub) WaitRegistration(resource string, timeout time.Duration) (Registration, error) {
	select {
	case r := <-s.Registrations(resource):
		return r, nil
	case <-time.After(timeout):
		return Registration{}, errors.New("timed out waiting for registration of " + resource)
	}
}
