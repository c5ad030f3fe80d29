package discovery

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/vishvananda/netlink"

	"github.com/ibkube/ibkube/hca/inventory"
)

// Watch returns a channel of change hints: a value means "something may have
// changed, rescan". Event bursts are coalesced (Options.Coalesce) and a hint
// not yet taken absorbs later ones, so a slow consumer never blocks the
// watcher. The channel closes when ctx ends.
//
// Sources, each one a real host has:
//   - a poll of every port's state and phys_state (Options.PortPoll). The
//     port attributes are computed when read (state_show and
//     phys_state_show call ib_query_port, drivers/infiniband/core/sysfs.c)
//     and kernfs reports a change to inotify only when the kernel calls
//     sysfs_notify for that attribute (fs/kernfs/file.c kernfs_notify), which
//     nothing does for ports: reading the two small files of each port is
//     how a port without a netdev is seen at all. A change is hinted at
//     once, without the coalescing delay, since one poll already reads
//     every port at one instant;
//   - rtnetlink link events (Options.Netlink) for netdevs that belong to an
//     RDMA device: an IPoIB netdev's carrier follows its IB port and a RoCE
//     port's state follows its netdev, so a port going down or up shows here
//     within the kernel's event latency;
//   - fsnotify on the dev root and its infiniband directory: udev and
//     devtmpfs create and remove uverbsN, umadN, issmN and rdma_cm through
//     the VFS, which does emit inotify events, and the directory appears
//     when the drivers load after boot.
func (s *Scanner) Watch(ctx context.Context) (<-chan struct{}, error) {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	w := &watcher{s: s, fw: fw, out: make(chan struct{}, 1), ports: newPortPoller(s.opts.SysfsRoot, s.scannedPort)}
	w.sync()

	var links chan netlink.LinkUpdate
	done := make(chan struct{})
	if s.opts.Netlink != nil {
		links = make(chan netlink.LinkUpdate, 64)
		if err := s.opts.Netlink.LinkSubscribe(links, done); err != nil {
			s.log.Info("rtnetlink link events unavailable; relying on the port poll, device events and periodic rescans", "error", err.Error())
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
	s     *Scanner
	fw    *fsnotify.Watcher
	out   chan struct{}
	ports *portPoller
}

// coalescer gathers a burst of events into one hint, Coalesce after the
// first.
type coalescer struct {
	delay time.Duration
	timer *time.Timer
	fire  <-chan time.Time // nil while nothing is pending
}

func (c *coalescer) pending() {
	if c.timer == nil {
		c.timer = time.NewTimer(c.delay)
		c.fire = c.timer.C
	}
}

func (c *coalescer) stop() {
	if c.timer != nil {
		c.timer.Stop()
	}
	c.timer, c.fire = nil, nil
}

// hint resyncs the watches and offers one hint, ending any pending burst.
func (w *watcher) hint(c *coalescer) {
	c.stop()
	w.sync()
	select {
	case w.out <- struct{}{}:
	default: // a hint is already waiting
	}
}

// pollTicker ticks every PortPoll; nil when the poll is off.
func (w *watcher) pollTicker() (<-chan time.Time, func()) {
	if w.s.opts.PortPoll <= 0 {
		return nil, func() {}
	}
	t := time.NewTicker(w.s.opts.PortPoll)
	return t.C, t.Stop
}

func (w *watcher) run(ctx context.Context, links <-chan netlink.LinkUpdate) {
	c := &coalescer{delay: w.s.opts.Coalesce}
	defer c.stop()
	poll, stopPoll := w.pollTicker()
	defer stopPoll()
	for {
		select {
		case <-ctx.Done():
			return
		case <-poll:
			if w.ports.poll() {
				w.hint(c)
			}
		case ev, ok := <-w.fw.Events:
			if !ok {
				return
			}
			if ev.Op&(fsnotify.Create|fsnotify.Remove|fsnotify.Rename) != 0 {
				w.sync() // a directory may have appeared: watch it too
			}
			c.pending()
		case err, ok := <-w.fw.Errors:
			if !ok {
				return
			}
			w.s.log.Error(err, "filesystem watch error; rescanning")
			c.pending()
		case u, ok := <-links:
			if !ok {
				links = nil
				w.s.log.Info("rtnetlink link subscription closed; relying on the port poll, device events and periodic rescans")
				continue
			}
			if w.rdmaNetdev(u) {
				c.pending()
			}
		case <-c.fire:
			w.hint(c)
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

// sync adds watches for the dev directories that exist (fsnotify drops the
// watches of removed ones by itself) and re-lists the ports to poll, since
// an event may mean an HCA came or went.
func (w *watcher) sync() {
	w.ports.refresh()
	want := []string{
		w.s.opts.DevRoot,
		filepath.Join(w.s.opts.DevRoot, inventory.DevInfinibandPath),
	}
	// A dev root that does not exist yet (a test tree, a host path mounted
	// late): watch its parent so its creation is seen.
	if _, err := os.Stat(w.s.opts.DevRoot); err != nil {
		want = append(want, filepath.Dir(w.s.opts.DevRoot))
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

// portPoller remembers the state and phys_state of every port of every HCA
// under <sysfs>/class/infiniband and says when one changed. A poll reads
// only those two small files per port (bounded, non-blocking reads); the
// full scan is the consumer's, on the hint a change gives.
type portPoller struct {
	sysfsRoot string
	files     []string
	keys      []string // portKey of each file
	last      []string
	// scanned answers what the consumer's last Scan reported for a port
	// file (nil in tests of the poll alone).
	scanned func(key string) (string, bool)
}

func newPortPoller(sysfsRoot string, scanned func(string) (string, bool)) *portPoller {
	return &portPoller{sysfsRoot: sysfsRoot, scanned: scanned}
}

// refresh re-lists the port files and takes their current content as the
// baseline.
func (p *portPoller) refresh() {
	ports, _ := filepath.Glob(filepath.Join(p.sysfsRoot, "class", "infiniband", "*", "ports", "*"))
	p.files, p.keys = p.files[:0], p.keys[:0]
	for _, port := range ports {
		hca := filepath.Base(filepath.Dir(filepath.Dir(port)))
		n, err := strconv.Atoi(filepath.Base(port))
		if err != nil {
			n = -1 // not a port number: never matches a scanned port
		}
		for _, f := range []string{"state", "phys_state"} {
			p.files = append(p.files, filepath.Join(port, f))
			p.keys = append(p.keys, portKey(hca, n, f))
		}
	}
	p.last = make([]string, len(p.files))
	for i, f := range p.files {
		p.last[i] = readState(f)
	}
}

// poll reads every port file once and reports whether any differs from the
// last read, or from what the consumer's last Scan reported.
func (p *portPoller) poll() bool {
	changed := false
	for i, f := range p.files {
		v := readState(f)
		if v != p.last[i] {
			p.last[i] = v
			changed = true
		}
		if p.scanned != nil && !changed {
			if seen, ok := p.scanned(p.keys[i]); ok && seen != stateName(v) {
				changed = true
			}
		}
	}
	return changed
}

// stateName is the name Scan reports for a port file's content ("4:
// ACTIVE" is ACTIVE), "" when it does not parse, as Scan leaves it.
func stateName(v string) string {
	if _, name, err := ParseNumberedState(v); err == nil {
		return name
	}
	return ""
}

// readState is a port file's content, or a marker of why it cannot be read,
// so that a file becoming unreadable is a change too.
func readState(path string) string {
	v, err := readAttr(path)
	if err != nil {
		return "\x00" + cause(err)
	}
	return v
}
