package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
)

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
	m.startRegistrars(ctx, &wg, kubelet)
	if _, err := os.Stat(kubelet); err != nil {
		m.opts.Logger.Info("kubelet.sock not there yet; registering when it appears", "dir", m.opts.SocketDir)
	}
	return m.watchSockets(ctx, w, kubelet)
}

// startRegistrars starts, for each plugin, the loop that registers it with
// the kubelet at socket kubelet and, for a shared pool, the loop that keeps
// its holds; each is counted in wg.
func (m *Manager) startRegistrars(ctx context.Context, wg *sync.WaitGroup, kubelet string) {
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
}

// watchSockets serves until ctx ends, answering each change in the socket
// directory that w watches: a new kubelet socket or a removed plugin socket.
func (m *Manager) watchSockets(ctx context.Context, w *fsnotify.Watcher, kubelet string) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-w.Errors:
			m.opts.Logger.Error(err, "watching kubelet socket dir")
		case ev := <-w.Events:
			if err := m.restartFor(socketChange(ev, kubelet)); err != nil {
				return err
			}
		}
	}
}

// socketChange decides what ev in the socket directory asks of the
// plugins: every plugin re-registers when the kubelet's socket is created
// (the kubelet restarted and forgot them); the one whose socket was removed
// or renamed serves again. The empty string asks nothing.
func socketChange(ev fsnotify.Event, kubelet string) (restartAll bool, removed string) {
	switch {
	case ev.Name == kubelet && ev.Has(fsnotify.Create):
		return true, ""
	case ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename):
		return false, ev.Name
	}
	return false, ""
}

// restartFor serves again and re-registers the plugins socketChange chose.
func (m *Manager) restartFor(restartAll bool, removed string) error {
	if restartAll {
		m.opts.Logger.Info("kubelet.sock created: kubelet restarted, re-registering")
	}
	for _, p := range m.plugins {
		if !restartAll && removed != p.socket {
			continue
		}
		if !restartAll {
			m.opts.Logger.Info("plugin socket removed, serving it again", "resource", p.resource)
		}
		if err := p.restartIfGone(); err != nil {
			return err
		}
		p.kickRegistration()
	}
	return nil
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
