// Package discovery finds the RDMA devices (HCAs) of a node and their state:
// the device list from RDMA netlink when the kernel offers it, every other
// attribute (PCI address, IDs, NUMA node, ports, netdevs, char devices) from
// sysfs, and presence of the device nodes from the dev root.
//
// A Scanner reports the whole tree on every Scan, health included, so a
// consumer can diff successive scans and a device can become healthy again.
// Watch gives change hints; the consumer rescans on each hint and on its own
// timer. See docs/discovery.md.
package discovery

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"

	"github.com/ibkube/ibkube/hca/inventory"
)

// Sources of the device list, as reported in inventory.Node.Source.
const (
	SourceNetlink = "netlink"
	SourceSysfs   = "sysfs"
)

// Options configures a Scanner. Every host path is here; nothing is global.
type Options struct {
	// SysfsRoot stands for /sys (e.g. /host/sys in a pod). Default "/sys".
	SysfsRoot string
	// DevRoot stands for /dev. Default "/dev".
	DevRoot string
	// Netlink lists RDMA devices and delivers link events. Nil means sysfs
	// only and no link events: right for fixtures, whose devices the kernel
	// does not know. Pass SystemNetlink{} when SysfsRoot is the host's /sys.
	Netlink Netlink
	// Logger receives the one-time notes (netlink unavailable) and watch errors.
	Logger logr.Logger
	// Coalesce is how long Watch gathers a burst of events into one hint.
	// Default 100ms.
	Coalesce time.Duration
	// PortPoll is how often Watch reads every port's state and phys_state
	// to see a port change that no event reports. Default
	// DefaultPortPoll; negative turns the poll off.
	PortPoll time.Duration
}

// DefaultPortPoll keeps a port change within the agent's 1 s goal from the
// kernel to the kubelet: half a second of poll (250 ms on average) leaves
// room for the rescan and the ListAndWatch send. One poll of the ND H100 v5
// tree (nine HCAs, 18 files) costs tens of microseconds (make
// bench-discovery), under 0.01% of a core at this period.
const DefaultPortPoll = 500 * time.Millisecond

// Scanner discovers HCAs. It is safe for concurrent use.
type Scanner struct {
	opts Options
	log  logr.Logger

	mu sync.Mutex
	// netlinkState remembers what was last logged about RDMA netlink, so the
	// "unavailable, using sysfs" note is said once (and again only if it changes).
	netlinkState string
	// scanned holds the port states the last Scan reported, keyed by
	// portKey, so that Watch's port poll hints when the ports differ from
	// what the consumer last saw, not only from its own previous poll: a
	// rescan for another reason can see a port in a state the poll never
	// read (down and back up between two polls), and without this the
	// consumer would keep the stale state until its next periodic rescan.
	scanned map[string]string
}

// portKey names one port file ("state" or "phys_state") of one HCA.
func portKey(hca string, port int, file string) string {
	return fmt.Sprintf("%s/%d/%s", hca, port, file)
}

// noteScanned records the port states of a finished Scan.
func (s *Scanner) noteScanned(node inventory.Node) {
	m := make(map[string]string, 2*len(node.HCAs))
	for _, h := range node.HCAs {
		for _, p := range h.Ports {
			m[portKey(h.Name, p.Number, "state")] = p.State
			m[portKey(h.Name, p.Number, "phys_state")] = p.PhysState
		}
	}
	s.mu.Lock()
	s.scanned = m
	s.mu.Unlock()
}

// scannedPort returns the state the last Scan reported for a port file.
func (s *Scanner) scannedPort(key string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.scanned[key]
	return v, ok
}

// NewScanner returns a Scanner for the given host paths.
func NewScanner(opts Options) *Scanner {
	if opts.SysfsRoot == "" {
		opts.SysfsRoot = "/sys"
	}
	if opts.DevRoot == "" {
		opts.DevRoot = "/dev"
	}
	if opts.Coalesce <= 0 {
		opts.Coalesce = 100 * time.Millisecond
	}
	if opts.PortPoll == 0 {
		opts.PortPoll = DefaultPortPoll
	}
	return &Scanner{opts: opts, log: opts.Logger.WithName("discovery")}
}

func (s *Scanner) sys(elem ...string) string {
	return filepath.Join(append([]string{s.opts.SysfsRoot}, elem...)...)
}

// Scan reads the whole device tree. HCAs come sorted by name in natural
// order (mlx5_2 before mlx5_10). An HCA whose attributes cannot be read is
// reported unhealthy with the reason, not dropped; Scan fails only when the
// device list itself cannot be read.
func (s *Scanner) Scan(ctx context.Context) (inventory.Node, error) {
	if err := ctx.Err(); err != nil {
		return inventory.Node{}, err
	}
	names, links, source, err := s.deviceList()
	if err != nil {
		return inventory.Node{}, err
	}
	chars, err := s.charDevices()
	if err != nil {
		return inventory.Node{}, err
	}
	node := inventory.Node{Source: source, HCAs: make([]inventory.HCA, 0, len(names))}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return inventory.Node{}, err
		}
		h, ok := s.readHCA(name, links[name], chars[name])
		if ok {
			node.HCAs = append(node.HCAs, h)
		}
	}
	sort.Slice(node.HCAs, func(i, j int) bool { return inventory.NaturalLess(node.HCAs[i].Name, node.HCAs[j].Name) })
	node.RDMACM = s.rdmaCM()
	s.placeHCAs(&node)
	s.noteScanned(node)
	return node, nil
}

// deviceList returns the RDMA device names, from netlink when it answers,
// else from /sys/class/infiniband.
func (s *Scanner) deviceList() ([]string, map[string]*netlinkAttrs, string, error) {
	if s.opts.Netlink != nil {
		links, err := s.opts.Netlink.RdmaLinkList()
		if err == nil {
			s.noteNetlink("available", nil)
			attrs := make(map[string]*netlinkAttrs, len(links))
			names := make([]string, 0, len(links))
			for _, l := range links {
				if l == nil || l.Attrs.Name == "" {
					continue
				}
				a := &netlinkAttrs{fw: l.Attrs.FirmwareVersion}
				if g, err := netlinkGUID(l.Attrs.NodeGuid); err == nil {
					a.nodeGUID = g
				}
				attrs[l.Attrs.Name] = a
				names = append(names, l.Attrs.Name)
			}
			return names, attrs, SourceNetlink, nil
		}
		s.noteNetlink("unavailable", err)
	}
	entries, err := os.ReadDir(s.sys("class", "infiniband"))
	if errors.Is(err, fs.ErrNotExist) {
		// ib_core not loaded (yet): no devices, not an error.
		return nil, nil, SourceSysfs, nil
	}
	if err != nil {
		return nil, nil, "", fmt.Errorf("list RDMA devices: %w", err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, nil, SourceSysfs, nil
}

type netlinkAttrs struct {
	nodeGUID, fw string
}

func (s *Scanner) noteNetlink(state string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.netlinkState == state {
		return
	}
	prev := s.netlinkState
	s.netlinkState = state
	switch {
	case state == "unavailable":
		s.log.Info("RDMA netlink unavailable, listing devices from sysfs instead", "error", err.Error(), "sysfsRoot", s.opts.SysfsRoot)
	case prev != "":
		s.log.Info("RDMA netlink available again, listing devices from netlink")
	}
}

// charDevices indexes the uverbs/umad/issm devices sysfs announces, by the
// RDMA device they belong to.
func (s *Scanner) charDevices() (map[string][]inventory.CharDevice, error) {
	out := map[string][]inventory.CharDevice{}
	for _, class := range []string{"infiniband_verbs", "infiniband_mad"} {
		entries, err := os.ReadDir(s.sys("class", class))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", class, err)
		}
		for _, e := range entries {
			name := e.Name()
			if !strings.HasPrefix(name, "uverbs") && !strings.HasPrefix(name, "umad") && !strings.HasPrefix(name, "issm") {
				continue // abi_version and friends
			}
			dir := s.sys("class", class, name)
			ibdev, err := readAttr(filepath.Join(dir, "ibdev"))
			if err != nil {
				continue // vanished while we looked
			}
			cd := inventory.CharDevice{Name: name}
			if dev, err := readAttr(filepath.Join(dir, "dev")); err == nil {
				cd.Major, cd.Minor, _ = ParseDevNumber(dev)
			}
			if class == "infiniband_mad" {
				if p, err := readAttr(filepath.Join(dir, "port")); err == nil {
					cd.Port, _ = strconv.Atoi(p)
				}
			}
			cd.Present = s.devPresent(cd)
			out[ibdev] = append(out[ibdev], cd)
		}
	}
	for _, list := range out {
		sort.Slice(list, func(i, j int) bool { return charLess(list[i], list[j]) })
	}
	return out, nil
}

// charLess orders uverbs first, then umad and issm by port.
func charLess(a, b inventory.CharDevice) bool {
	rank := func(c inventory.CharDevice) int {
		switch c.Kind() {
		case inventory.CharUverbs:
			return 0
		case inventory.CharUmad:
			return 1
		default:
			return 2
		}
	}
	if a.Port != b.Port {
		return a.Port < b.Port
	}
	if rank(a) != rank(b) {
		return rank(a) < rank(b)
	}
	return inventory.NaturalLess(a.Name, b.Name)
}

// devPresent says whether the node for cd exists under the dev root. A real
// char device must carry the number sysfs announces; a regular file (fixtures
// in unit tests) counts as present.
func (s *Scanner) devPresent(cd inventory.CharDevice) bool {
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(s.opts.DevRoot, inventory.DevInfinibandPath, cd.Name), &st); err != nil {
		return false
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || cd.Major == 0 && cd.Minor == 0 {
		return true
	}
	return int(unix.Major(st.Rdev)) == cd.Major && int(unix.Minor(st.Rdev)) == cd.Minor
}

func (s *Scanner) rdmaCM() *inventory.CharDevice {
	cd := inventory.CharDevice{Name: inventory.RDMACMDeviceName}
	dev, err := readAttr(s.sys("class", "misc", inventory.RDMACMDeviceName, "dev"))
	announced := err == nil
	if announced {
		cd.Major, cd.Minor, _ = ParseDevNumber(dev)
	}
	path := filepath.Join(s.opts.DevRoot, inventory.DevInfinibandPath, inventory.RDMACMDeviceName)
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err == nil {
		cd.Present = true
		if !announced && st.Mode&unix.S_IFMT == unix.S_IFCHR {
			cd.Major, cd.Minor = int(unix.Major(st.Rdev)), int(unix.Minor(st.Rdev))
		}
	}
	if !announced && !cd.Present {
		return nil
	}
	return &cd
}

// ValidDeviceName says whether an RDMA device name can be handed out as is:
// it becomes a kubelet device ID and an entry of NCCL_IB_HCA and
// UCX_NET_DEVICES ("mlx5_0:1,mlx5_1:1"), so separators, spaces and control
// characters would corrupt those lists. Kernel names (mlx5_0, irdma0,
// bnxt_re0, rxe0, efa_0) are letters, digits and underscores.
func ValidDeviceName(name string) bool {
	if name == "" || len(name) > 64 { // IB_DEVICE_NAME_MAX (include/rdma/ib_verbs.h)
		return false
	}
	for _, c := range []byte(name) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '.', c == '-':
		default:
			return false
		}
	}
	return true
}

// netdevsByPort maps port numbers to the netdev bound to each, from the PCI
// function's net/ directory: dev_port is the 0-based port (IPoIB sets it,
// Ethernet PFs have 0). Child interfaces (IPoIB P_Key children, whose iflink
// differs from their ifindex) lose to their parent.
func (s *Scanner) netdevsByPort(netDir string) map[int]string {
	entries, err := os.ReadDir(netDir)
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Slice(names, func(i, j int) bool { return inventory.NaturalLess(names[i], names[j]) })
	out := map[int]string{}
	child := map[int]bool{}
	for _, name := range names {
		d := filepath.Join(netDir, name)
		port := 1
		if v, err := readAttr(filepath.Join(d, "dev_port")); err == nil {
			if n, err := strconv.Atoi(v); err == nil && n >= 0 {
				port = n + 1
			}
		}
		isChild := false
		idx, err1 := readAttr(filepath.Join(d, "ifindex"))
		link, err2 := readAttr(filepath.Join(d, "iflink"))
		if err1 == nil && err2 == nil && idx != link {
			isChild = true
		}
		if cur, ok := out[port]; ok && cur != "" && !(child[port] && !isChild) {
			continue
		}
		out[port] = name
		child[port] = isChild
	}
	return out
}

// health decides whether an HCA is usable for verbs: every port ACTIVE and
// LinkUp, a uverbs device announced and present under the dev root. The
// management devices (umad, issm) do not count here: a workload gets them
// only where a pool opts in, and that pool judges their presence
// (resource.Pool), so a node without ib_umad still serves verbs.
func health(h inventory.HCA, problems []string) (bool, string) {
	for _, p := range h.Ports {
		switch {
		case p.State == "" || p.PhysState == "":
			// Unreadable: already in problems.
		case p.State != inventory.PortStateActive && p.PhysState != inventory.PortPhysStateUp:
			problems = append(problems, fmt.Sprintf("port %d is %s (%s)", p.Number, p.State, p.PhysState))
		case p.State != inventory.PortStateActive:
			problems = append(problems, fmt.Sprintf("port %d is %s", p.Number, p.State))
		case p.PhysState != inventory.PortPhysStateUp:
			problems = append(problems, fmt.Sprintf("port %d physical state is %s", p.Number, p.PhysState))
		}
	}
	hasUverbs := false
	var missing []string
	for _, c := range h.CharDevices {
		if c.Kind() != inventory.CharUverbs {
			continue
		}
		hasUverbs = true
		if !c.Present {
			missing = append(missing, c.Name)
		}
	}
	if !hasUverbs {
		problems = append(problems, "no uverbs char device in sysfs (is ib_uverbs loaded?)")
	}
	if len(missing) > 0 {
		problems = append(problems, "missing from /dev/infiniband: "+strings.Join(missing, ", "))
	}
	if len(problems) == 0 {
		return true, ""
	}
	return false, strings.Join(problems, "; ")
}
