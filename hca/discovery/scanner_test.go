package discovery_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/internal/testing/golden"
)

func newScanner(t testing.TB, dir string, nl discovery.Netlink) *discovery.Scanner {
	t.Helper()
	return treeScanner(t, dir, discovery.Options{Netlink: nl, Coalesce: 20 * time.Millisecond, PortPoll: 20 * time.Millisecond})
}

// treeScanner scans the fixture tree in dir with opts (logging to t unless
// opts has a logger).
func treeScanner(t testing.TB, dir string, opts discovery.Options) *discovery.Scanner {
	t.Helper()
	opts.SysfsRoot, opts.DevRoot = fixture.SysfsRoot(dir), fixture.DevRoot(dir)
	if opts.Logger.GetSink() == nil {
		opts.Logger = testr.NewWithInterface(t, testr.Options{})
	}
	return discovery.NewScanner(opts)
}

func TestScanFixtures(t *testing.T) {
	t.Parallel()
	for _, name := range fixture.Names() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := fixture.BuildTemp(t, name)
			node, err := newScanner(t, dir, nil).Scan(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.MarshalIndent(node, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			golden.Check(t, filepath.Join("testdata", name+".golden.json"), got)
		})
	}
}

// Facts a user relies on, checked directly so a careless -update cannot bless
// a regression.
func TestScanFacts(t *testing.T) {
	t.Parallel()
	scan := func(name string) inventory.Node {
		node, err := newScanner(t, fixture.BuildTemp(t, name), nil).Scan(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return node
	}

	ndv5 := scan(fixture.NDv5)
	if len(ndv5.HCAs) != 9 || ndv5.Source != discovery.SourceSysfs {
		t.Fatalf("ndv5: %d HCAs from %q, want 9 from sysfs", len(ndv5.HCAs), ndv5.Source)
	}
	numa := map[int]int{}
	for _, h := range ndv5.HCAs[:8] {
		numa[h.NUMANode]++
		if !h.Healthy || h.LinkLayer() != inventory.LinkLayerInfiniBand || h.Ports[0].Rate != "400 Gb/sec (4X NDR)" {
			t.Errorf("ndv5 %s: healthy=%v linkLayer=%s rate=%s", h.Name, h.Healthy, h.LinkLayer(), h.Ports[0].Rate)
		}
		if len(h.CharDevices) != 3 {
			t.Errorf("ndv5 %s: char devices %v, want uverbs, umad, issm", h.Name, h.CharDevices)
		}
	}
	if diff := cmp.Diff(map[int]int{0: 4, 1: 4}, numa); diff != "" {
		t.Errorf("ndv5 HCAs per NUMA node (-want +got):\n%s", diff)
	}
	h0 := ndv5.HCAs[0]
	if h0.PCIAddress != "0101:00:00.0" || h0.VendorID != "15b3" || h0.Ports[0].Netdev != "ibP257p0s0" || h0.Ports[0].GUID != h0.NodeGUID {
		t.Errorf("ndv5 mlx5_0: %+v", h0)
	}
	if an := ndv5.HCAs[8]; an.Name != "mlx5_8" || an.LinkLayer() != inventory.LinkLayerEthernet || an.Ports[0].Netdev != "enP23084s1" {
		t.Errorf("ndv5 ninth device: %+v", an)
	}
	if ndv5.RDMACM == nil || !ndv5.RDMACM.Present || ndv5.RDMACM.Major != 10 {
		t.Errorf("rdma_cm: %+v", ndv5.RDMACM)
	}

	oci := scan(fixture.OCIH100)
	var names []string
	for _, h := range oci.HCAs {
		names = append(names, h.Name)
		if h.LinkLayer() != inventory.LinkLayerEthernet {
			t.Errorf("oci %s link layer %s", h.Name, h.LinkLayer())
		}
	}
	if names[2] != "mlx5_2" || names[10] != "mlx5_10" || names[17] != "mlx5_17" {
		t.Errorf("oci names not in natural order: %v", names)
	}
	if got := oci.HCAs[3].Ports[0].Netdev; got != "rdma2" {
		t.Errorf("oci mlx5_3 netdev %q, want rdma2", got)
	}

	broken := scan(fixture.Broken)
	want := map[string]struct {
		healthy bool
		reason  string
		numa    int
	}{
		"mlx5_0": {true, "", 1},
		"mlx5_1": {false, "port 1 is DOWN (Polling)", 1},
		"mlx5_2": {false, "missing from /dev/infiniband: uverbs2", 0},
		"mlx5_3": {true, "", -1},
	}
	for _, h := range broken.HCAs {
		w := want[h.Name]
		if h.Healthy != w.healthy || h.HealthReason != w.reason || h.NUMANode != w.numa {
			t.Errorf("broken %s: healthy=%v reason=%q numa=%d, want %v %q %d", h.Name, h.Healthy, h.HealthReason, h.NUMANode, w.healthy, w.reason, w.numa)
		}
	}
}

func hcaByName(t *testing.T, node inventory.Node, name string) inventory.HCA {
	t.Helper()
	for _, h := range node.HCAs {
		if h.Name == name {
			return h
		}
	}
	t.Fatalf("%s not found", name)
	return inventory.HCA{}
}

func TestScanHealthFlip(t *testing.T) {
	t.Parallel()
	dir := fixture.BuildTemp(t, fixture.NDv5)
	s := newScanner(t, dir, nil)
	check := func(step string, healthy bool, reason string) {
		t.Helper()
		node, err := s.Scan(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		h := hcaByName(t, node, "mlx5_3")
		if h.Healthy != healthy || h.HealthReason != reason {
			t.Errorf("%s: healthy=%v reason=%q, want %v %q", step, h.Healthy, h.HealthReason, healthy, reason)
		}
	}
	check("start", true, "")
	if err := fixture.SetPortState(dir, "mlx5_3", 1, "DOWN"); err != nil {
		t.Fatal(err)
	}
	check("port down", false, "port 1 is DOWN (Polling)")
	if err := fixture.SetPortState(dir, "mlx5_3", 1, "INIT"); err != nil {
		t.Fatal(err)
	}
	check("port init", false, "port 1 is INIT")
	if err := fixture.SetPortState(dir, "mlx5_3", 1, "ACTIVE"); err != nil {
		t.Fatal(err)
	}
	check("port back", true, "")
	if err := fixture.RemoveCharDevice(dir, "uverbs3"); err != nil {
		t.Fatal(err)
	}
	if err := fixture.RemoveCharDevice(dir, "umad3"); err != nil {
		t.Fatal(err)
	}
	// umad and issm are opt-in management devices: their absence is the
	// business of the pools that hand them out, not the HCA's health.
	check("char devices gone", false, "missing from /dev/infiniband: uverbs3")
	for _, n := range []string{"uverbs3", "umad3"} {
		if err := fixture.AddCharDevice(dir, n); err != nil {
			t.Fatal(err)
		}
	}
	check("char devices back", true, "")
}

func TestScanRealCharDevices(t *testing.T) {
	t.Parallel()
	dir := fixture.BuildTempCharDevices(t, fixture.HB)
	s := newScanner(t, dir, nil)
	node, err := s.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !node.HCAs[0].Healthy {
		t.Fatalf("hb with real char devices unhealthy: %s", node.HCAs[0].HealthReason)
	}
	// A node with the wrong number is not the device sysfs announces.
	p := filepath.Join(fixture.DevRoot(dir), "infiniband", "uverbs0")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(231, 200))); err != nil {
		t.Fatal(err)
	}
	node, err = s.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if h := node.HCAs[0]; h.Healthy || !strings.Contains(h.HealthReason, "uverbs0") {
		t.Errorf("uverbs0 with the wrong number: healthy=%v reason=%q", h.Healthy, h.HealthReason)
	}
}

func TestScanEmptyHost(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	node, err := newScanner(t, dir, nil).Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(node.HCAs) != 0 || node.RDMACM != nil {
		t.Errorf("empty host: %+v", node)
	}
}

// fakeNetlink plays the kernel's netlink side.
type fakeNetlink struct {
	links   []*netlink.RdmaLink
	listErr error
	subErr  error

	mu    sync.Mutex
	calls int
	subCh chan<- netlink.LinkUpdate
	ready chan struct{}
}

func (f *fakeNetlink) RdmaLinkList() ([]*netlink.RdmaLink, error) {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	return f.links, f.listErr
}

func (f *fakeNetlink) LinkSubscribe(ch chan<- netlink.LinkUpdate, done <-chan struct{}) error {
	if f.subErr != nil {
		return f.subErr
	}
	f.mu.Lock()
	f.subCh = ch
	f.mu.Unlock()
	close(f.ready)
	return nil
}

// send delivers l to Watch's subscription as the kernel would, once Watch
// has subscribed.
func (f *fakeNetlink) send(l netlink.Link) {
	<-f.ready
	f.mu.Lock()
	ch := f.subCh
	f.mu.Unlock()
	ch <- netlink.LinkUpdate{Link: l}
}

func TestScanNetlink(t *testing.T) {
	t.Parallel()
	dir := fixture.BuildTemp(t, fixture.HB)
	nl := &fakeNetlink{links: []*netlink.RdmaLink{
		// vishvananda prints the host-order GUID little-endian: byte-reversed.
		{Attrs: netlink.RdmaLinkAttrs{Index: 0, Name: "mlx5_0", FirmwareVersion: "20.31.1014", NodeGuid: "7f:ff:4b:fd:ff:5d:15:00", NumPorts: 1}},
		{Attrs: netlink.RdmaLinkAttrs{Index: 1, Name: "mlx5_9", FirmwareVersion: "1.0", NodeGuid: "01:00:00:00:00:00:00:00", NumPorts: 1}},
	}}
	node, err := newScanner(t, dir, nl).Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if node.Source != discovery.SourceNetlink || len(node.HCAs) != 2 {
		t.Fatalf("source %q, %d HCAs; want netlink, 2", node.Source, len(node.HCAs))
	}
	if h := node.HCAs[0]; !h.Healthy || h.NodeGUID != "0015:5dff:fd4b:ff7f" {
		t.Errorf("mlx5_0 %+v", h)
	}
	want := inventory.HCA{
		Name: "mlx5_9", NodeGUID: "0000:0000:0000:0001", Firmware: "1.0", NUMANode: -1,
		Ports: []inventory.Port{}, CharDevices: []inventory.CharDevice{},
		HealthReason: "listed by RDMA netlink but not in sysfs",
	}
	if diff := cmp.Diff(want, node.HCAs[1]); diff != "" {
		t.Errorf("netlink-only device (-want +got):\n%s", diff)
	}
}

func TestScanNetlinkUnavailableLogsOnce(t *testing.T) {
	t.Parallel()
	dir := fixture.BuildTemp(t, fixture.HB)
	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, args)
	}, funcr.Options{})
	nl := &fakeNetlink{listErr: unix.EPROTONOSUPPORT}
	s := treeScanner(t, dir, discovery.Options{Netlink: nl, Logger: log})
	for i := 0; i < 3; i++ {
		node, err := s.Scan(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if node.Source != discovery.SourceSysfs || len(node.HCAs) != 1 {
			t.Fatalf("scan %d: source %q, %d HCAs", i, node.Source, len(node.HCAs))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lines) != 1 || !strings.Contains(lines[0], "RDMA netlink unavailable") || !strings.Contains(lines[0], "protocol not supported") {
		t.Errorf("log lines %q, want one note that netlink is unavailable", lines)
	}
}

// hint waits for one change hint.
func hint(t *testing.T, ch <-chan struct{}, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case _, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed")
		}
		return time.Since(start)
	case <-time.After(within):
		t.Fatalf("no change hint within %v", within)
		return 0
	}
}

// hintAfter waits for the hint a change to the tree must give; err is the
// change's own error, which fails t first.
func hintAfter(t *testing.T, hints <-chan struct{}, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	hint(t, hints, 5*time.Second)
}

func noHint(t *testing.T, ch <-chan struct{}, during time.Duration) {
	t.Helper()
	select {
	case <-ch:
		t.Fatal("unexpected change hint")
	case <-time.After(during):
	}
}

func TestWatchHealthFlip(t *testing.T) {
	t.Parallel()
	dir := fixture.BuildTemp(t, fixture.NDv5)
	s := newScanner(t, dir, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hints, err := s.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	expect := func(step string, act func() error, healthy bool) {
		t.Helper()
		hintAfter(t, hints, act())
		node, err := s.Scan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if h := hcaByName(t, node, "mlx5_5"); h.Healthy != healthy {
			t.Errorf("%s: healthy=%v reason=%q", step, h.Healthy, h.HealthReason)
		}
	}
	// Port changes arrive through the port poll (the fixture has no
	// netlink), char device changes through fsnotify on the dev root.
	expect("port down", func() error { return fixture.SetPortState(dir, "mlx5_5", 1, "DOWN") }, false)
	expect("port up", func() error { return fixture.SetPortState(dir, "mlx5_5", 1, "ACTIVE") }, true)
	expect("uverbs gone", func() error { return fixture.RemoveCharDevice(dir, "uverbs5") }, false)
	expect("uverbs back", func() error { return fixture.AddCharDevice(dir, "uverbs5") }, true)

	cancel()
	select {
	case _, ok := <-hints:
		for ok {
			_, ok = <-hints
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch channel not closed after cancel")
	}
}

// TestWatchCoalescesBursts: a burst of device events gives one hint per
// coalescing window the burst spans (one, unless the machine stalls the
// burst itself), and the rescan on the last hint sees the whole burst.
func TestWatchCoalescesBursts(t *testing.T) {
	t.Parallel()
	const coalesce = 200 * time.Millisecond
	dir := fixture.BuildTemp(t, fixture.NDv5)
	s := treeScanner(t, dir, discovery.Options{Coalesce: coalesce, PortPoll: -1})
	hints := watch(t, s)
	start := time.Now()
	for i := range 8 {
		if err := fixture.RemoveCharDevice(dir, fmt.Sprintf("uverbs%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	burst := time.Since(start)
	// Every event of the burst is followed by a hint within one window;
	// three windows of quiet after the last hint mean the burst is over.
	hint(t, hints, 5*time.Second)
	n := 1
	for quiet := false; !quiet; {
		select {
		case <-hints:
			n++
		case <-time.After(3 * coalesce):
			quiet = true
		}
	}
	if max := 1 + int(burst/coalesce); n > max {
		t.Errorf("a burst of 8 events over %v gave %d hints, want at most %d", burst, n, max)
	}
	node, err := s.Scan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range node.HCAs[:8] {
		if h.Healthy {
			t.Errorf("%s healthy after its uverbs device went", h.Name)
		}
	}
}

func TestWatchLateHCA(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := newScanner(t, dir, nil)
	ctx := t.Context()
	hints := watch(t, s)
	// The drivers load after the agent started: sys and dev fill in.
	hintAfter(t, hints, fixture.Build(dir, fixture.HB))
	node, err := s.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(node.HCAs) != 1 || !node.HCAs[0].Healthy {
		t.Fatalf("after late driver load: %+v", node)
	}
	// The hint re-listed the ports to poll: a flip of the new device's
	// port is seen by the poll (the watcher does not watch sysfs at all).
	hintAfter(t, hints, fixture.SetPortState(dir, "mlx5_0", 1, "DOWN"))
	node, _ = s.Scan(ctx)
	if node.HCAs[0].Healthy {
		t.Error("port down not seen after late load")
	}
}

func TestWatchLinkEvents(t *testing.T) {
	t.Parallel()
	dir := fixture.BuildTemp(t, fixture.OCIH100)
	nl := &fakeNetlink{ready: make(chan struct{})}
	// Only link events can give a hint here: no port poll.
	s := treeScanner(t, dir, discovery.Options{Netlink: nl, Coalesce: 20 * time.Millisecond, PortPoll: -1})
	hints := watch(t, s)
	// A pod's veth: not ours.
	nl.send(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "veth1234", EncapType: "ether"}})
	noHint(t, hints, 200*time.Millisecond)
	// The RoCE netdev of mlx5_3 (found through sysfs).
	nl.send(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: "rdma2", EncapType: "ether"}})
	hint(t, hints, 5*time.Second)
	// Any IPoIB netdev, even one sysfs does not show (another namespace's view).
	nl.send(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: "ib0", EncapType: "infiniband"}})
	hint(t, hints, 5*time.Second)
}

func TestWatchWithoutLinkEvents(t *testing.T) {
	t.Parallel()
	dir := fixture.BuildTemp(t, fixture.HB)
	nl := &fakeNetlink{subErr: errors.New("operation not permitted")}
	s := newScanner(t, dir, nl)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hints, err := s.Watch(ctx)
	if err != nil {
		t.Fatalf("Watch must degrade, not fail, without rtnetlink: %v", err)
	}
	hintAfter(t, hints, fixture.RemoveCharDevice(dir, "issm0"))
}

// TestWatchPortPoll: a port change the kernel reports to nobody (no netdev,
// no inotify on sysfs attributes) is seen by the poll within a few periods,
// and each flip gives exactly one hint.
func TestWatchPortPoll(t *testing.T) {
	t.Parallel()
	dir := fixture.BuildTemp(t, fixture.NDv5)
	s := treeScanner(t, dir, discovery.Options{Coalesce: time.Hour, PortPoll: 10 * time.Millisecond})
	hints := watch(t, s)
	for _, step := range []struct{ dev, state string }{{"mlx5_7", "DOWN"}, {"mlx5_7", "ACTIVE"}, {"mlx5_8", "INIT"}} {
		// Coalesce is an hour: only the poll's immediate hint can arrive.
		hintAfter(t, hints, fixture.SetPortState(dir, step.dev, 1, step.state))
	}
	// A phys_state change alone (state unchanged) is a change too.
	p := filepath.Join(fixture.SysfsRoot(dir), "class", "infiniband", "mlx5_0", "ports", "1", "phys_state")
	hintAfter(t, hints, os.WriteFile(p, []byte("6: LinkErrorRecovery\n"), 0o644))
	// An attribute replaced by a FIFO is a change, and does not hang the poll.
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	hintAfter(t, hints, unix.Mkfifo(p, 0o644))
}

// TestWatchNoSysfsEventPath: with the poll off, a port change in the tree
// gives no hint. Watch has no path that only a fixture has (inotify on
// sysfs attribute files); the poll above is the one a host uses.
func TestWatchNoSysfsEventPath(t *testing.T) {
	t.Parallel()
	dir := fixture.BuildTemp(t, fixture.HB)
	s := treeScanner(t, dir, discovery.Options{Coalesce: 10 * time.Millisecond, PortPoll: -1})
	hints := watch(t, s)
	if err := fixture.SetPortState(dir, "mlx5_0", 1, "DOWN"); err != nil {
		t.Fatal(err)
	}
	noHint(t, hints, 300*time.Millisecond)
	// The dev root is watched: udev removing a node is an event on a host.
	hintAfter(t, hints, fixture.RemoveCharDevice(dir, "uverbs0"))
}

// TestWatchIPoIBCarrier: the rtnetlink path alone (no poll) turns an IPoIB
// carrier loss into a hint, and the rescan then sees the port down.
func TestWatchIPoIBCarrier(t *testing.T) {
	t.Parallel()
	dir := fixture.BuildTemp(t, fixture.HB)
	// The kernel does not know the fixture's devices: list them from sysfs.
	nl := &fakeNetlink{ready: make(chan struct{}), listErr: unix.EPROTONOSUPPORT}
	s := treeScanner(t, dir, discovery.Options{Netlink: nl, Coalesce: 10 * time.Millisecond, PortPoll: -1})
	hints := watch(t, s)
	if err := fixture.SetPortState(dir, "mlx5_0", 1, "DOWN"); err != nil {
		t.Fatal(err)
	}
	// What the kernel sends when ib0 loses its carrier (RTM_NEWLINK without IFF_RUNNING).
	nl.send(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: "ib0", EncapType: "infiniband", OperState: netlink.OperDown}})
	hint(t, hints, 5*time.Second)
	node, err := s.Scan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if h := node.HCAs[0]; h.Healthy || h.HealthReason != "port 1 is DOWN (Polling)" {
		t.Errorf("after the carrier event: healthy=%v reason=%q", h.Healthy, h.HealthReason)
	}
}

// An IPoIB P_Key child interface shares its parent's PCI function and
// dev_port; the port's netdev must stay the parent.
func TestScanPKeyChildLosesToParent(t *testing.T) {
	t.Parallel()
	dir := fixture.BuildTemp(t, fixture.HB)
	net := filepath.Join(fixture.SysfsRoot(dir), "class", "infiniband", "mlx5_0", "device", "net")
	write := func(ifname, file, v string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(net, ifname), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(net, ifname, file), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("ib0", "ifindex", "4")
	write("ib0", "iflink", "4")
	// Named to sort before its parent.
	for f, v := range map[string]string{"dev_port": "0", "ifindex": "9", "iflink": "4"} {
		write("a-pkey8001", f, v)
	}
	node, err := newScanner(t, dir, nil).Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := node.HCAs[0].Ports[0].Netdev; got != "ib0" {
		t.Errorf("port 1 netdev %q, want the parent ib0", got)
	}
}

// On a host without NETLINK_RDMA (this CI machine) the real netlink handle
// must fall back to sysfs rather than report no devices.
func TestSystemNetlinkFallback(t *testing.T) {
	t.Parallel()
	if _, err := (discovery.SystemNetlink{}).RdmaLinkList(); err == nil {
		t.Skip("this host answers RDMA netlink; the fallback is covered by TestScanNetlinkUnavailableLogsOnce")
	}
	dir := fixture.BuildTemp(t, fixture.NDv4)
	node, err := newScanner(t, dir, discovery.SystemNetlink{}).Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if node.Source != discovery.SourceSysfs || len(node.HCAs) != 8 {
		t.Errorf("source %q with %d HCAs, want sysfs with 8", node.Source, len(node.HCAs))
	}
}

// watch follows s's change hints until the test ends.
func watch(tb testing.TB, s *discovery.Scanner) <-chan struct{} {
	tb.Helper()
	hints, err := s.Watch(tb.Context())
	if err != nil {
		tb.Fatal(err)
	}
	return hints
}
