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
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
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
