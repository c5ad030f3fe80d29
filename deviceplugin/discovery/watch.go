package discovery

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/vishvananda/netlink"

	"github.com/ibkube/ibkube/deviceplugin/inventory"
)

// Watch returns a channel of change hints: a value means "something may have
// changed, rescan". Bursts are coalesced (Options.Coalesce) and a hint not
// yet taken absorbs later ones, so a slow consumer never blocks the watcher.
// The channel closes when ctx ends.
//
// Sources:
//   - rtnetlink link events (Options.Netlink) for netdevs that belong to an
//     RDMA device: an IPoIB netdev's carrier follows its IB port, so a port
//     going down or up shows here on a real host;
//   - fsnotify on the dev root and its infiniband directory (udev creating or
//     removing uverbsN, umadN, issmN, rdma_cm; the directory appearing when
//     the drivers load after boot);
//   - fsnotify on the sysfs class directories and every port directory. On a
//     real sysfs inotify reports nothing for kernel-side changes (sysfs does
//     not generate fsnotify events for attribute or kobject changes), so these
//     serve fixture trees and tmpfs-backed test roots; on hosts the consumer's
//     periodic rescan covers what rtnetlink does not.
func (s *Scanner) Watch(ctx context.Context) (<-chan struct{}, error) {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	w := &watcher{s: s, fw: fw, out: make(chan struct{}, 1)}
	w.sync()

	var links chan netlink.LinkUpdate
	done := make(chan struct{})
	if s.opts.Netlink != nil {
		links = make(chan netlink.LinkUpdate, 64)
		if err := s.opts.Netlink.LinkSubscribe(links, done); err != nil {
			s.log.Info("rtnetlink link events unavailable; relying on filesystem events and periodic rescans", "error", err.Error())
			links = nil
		}
	}
	go func() {
		defer close(w.out)
		defer close(done)
		defer fw.Close()
		w.run(ctx, links)
	}()
	return w.out, nil
}

type watcher struct {
	s   *Scanner
	fw  *fsnotify.Watcher
	out chan struct{}
}

func (w *watcher) run(ctx context.Context, links <-chan netlink.LinkUpdate) {
	var timer *time.Timer
	var fire <-chan time.Time
	pending := func() {
		if timer == nil {
			timer = time.NewTimer(w.s.opts.Coalesce)
			fire = timer.C
		}
	}
	for {
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case ev, ok := <-w.fw.Events:
			if !ok {
				return
			}
			if ev.Op&fsnotify.Create != 0 || ev.Op&fsnotify.Remove != 0 || ev.Op&fsnotify.Rename != 0 {
				w.sync() // a directory may have appeared: watch it too
			}
			pending()
		case err, ok := <-w.fw.Errors:
			if !ok {
				return
			}
			w.s.log.Error(err, "filesystem watch error; rescanning")
			pending()
		case u, ok := <-links:
			if !ok {
				links = nil
				w.s.log.Info("rtnetlink link subscription closed; relying on filesystem events and periodic rescans")
				continue
			}
			if w.rdmaNetdev(u) {
				pending()
			}
		case <-fire:
			timer, fire = nil, nil
			w.sync()
			select {
			case w.out <- struct{}{}:
			default: // a hint is already waiting
			}
		}
	}
}

// rdmaNetdev says whether a link event concerns a netdev of an RDMA device:
// IPoIB (ARPHRD_INFINIBAND), or a netdev whose PCI function has an RDMA
// device (RoCE). Pod veths and bridges churn constantly and are ignored.
func (w *watcher) rdmaNetdev(u netlink.LinkUpdate) bool {
	if u.Link == nil {
		return false
	}
	a := u.Attrs()
	if a == nil {
		return false
	}
	if a.EncapType == "infiniband" {
		return true
	}
	_, err := os.Stat(w.s.sys("class", "net", a.Name, "device", "infiniband"))
	return err == nil
}

// sync adds watches for every directory that should be watched and exists.
// fsnotify drops watches of removed directories by itself.
func (w *watcher) sync() {
	want := []string{
		w.s.opts.DevRoot,
		filepath.Join(w.s.opts.DevRoot, inventory.DevInfinibandPath),
		w.s.opts.SysfsRoot,
		w.s.sys("class"),
		w.s.sys("class", "infiniband"),
		w.s.sys("class", "infiniband_verbs"),
		w.s.sys("class", "infiniband_mad"),
		w.s.sys("class", "misc"),
		w.s.sys("class", "net"),
	}
	ports, _ := filepath.Glob(w.s.sys("class", "infiniband", "*", "ports", "*"))
	want = append(want, ports...)
	// A root that does not exist yet (a test tree, a host path mounted
	// late): watch its parent so its creation is seen.
	for _, root := range []string{w.s.opts.DevRoot, w.s.opts.SysfsRoot} {
		if _, err := os.Stat(root); err != nil {
			want = append(want, filepath.Dir(root))
		}
	}
	have := map[string]bool{}
	for _, p := range w.fw.WatchList() {
		have[p] = true
	}
	for _, p := range want {
		if have[p] {
			continue
		}
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			continue
		}
		if err := w.fw.Add(p); err != nil {
			w.s.log.V(1).Info("cannot watch", "path", p, "error", err.Error())
		}
	}
}
