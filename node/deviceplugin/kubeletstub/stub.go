// Package kubeletstub is a stand-in kubelet for device plugin tests: it
// serves the real Registration API on kubelet.sock in a directory and, like
// the kubelet, connects back to each registered plugin, reads its options
// and follows its ListAndWatch stream.
package kubeletstub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
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
	lists         map[string]chan List
	clients       map[string]*grpc.ClientConn
	ctx           context.Context
	cancel        context.CancelFunc
}

// Start serves kubelet.sock in dir.
func Start(dir string) (*Stub, error) {
	s := &Stub{dir: dir, registrations: map[string]chan Registration{}, lists: map[string]chan List{}, clients: map[string]*grpc.ClientConn{}}
	return s, s.listen()
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
	for r, c := range s.clients {
		_ = c.Close()
		delete(s.clients, r)
	}
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
	c, ok := s.clients[resource]
	if !ok {
		return nil, fmt.Errorf("%s is not registered", resource)
	}
	return pluginapi.NewDevicePluginClient(c), nil
}

// Register implements the Registration API: like the kubelet it checks the
// version, then dials the plugin, reads its options and follows ListAndWatch.
func (s *Stub) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if req.Version != pluginapi.Version {
		return nil, fmt.Errorf("unsupported version %q", req.Version)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(s.dir, req.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	ctx := s.ctx
	if old := s.clients[req.ResourceName]; old != nil {
		_ = old.Close()
	}
	s.clients[req.ResourceName] = conn
	lists := channelFor(s.lists, req.ResourceName, listsBuffer)
	regs := channelFor(s.registrations, req.ResourceName, registrationsBuffer)
	s.mu.Unlock()
	client := pluginapi.NewDevicePluginClient(conn)
	octx, cancel := context.WithTimeout(ctx, 5*time.Second)
	opts, err := client.GetDevicePluginOptions(octx, &pluginapi.Empty{}, grpc.WaitForReady(true))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("get options of %s: %w", req.ResourceName, err)
	}
	regs <- Registration{Request: req, Options: opts, At: time.Now()}
	go func() {
		stream, err := client.ListAndWatch(ctx, &pluginapi.Empty{}, grpc.WaitForReady(true))
		if err != nil {
			return
		}
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			lists <- List{Devices: m.Devices, At: time.Now()}
		}
	}()
	return &pluginapi.Empty{}, nil
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

// WaitRegistration returns the next registration of resource.
func (s *Stub) WaitRegistration(resource string, timeout time.Duration) (Registration, error) {
	select {
	case r := <-s.Registrations(resource):
		return r, nil
	case <-time.After(timeout):
		return Registration{}, errors.New("timed out waiting for registration of " + resource)
	}
}
