package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

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
