package nri

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/internal/testing/nodetest"
	"github.com/ibkube/ibkube/node/imagefs"
)

type gidEvents struct {
	eventRecorder
	gid chan string
}

func (g gidEvents) GIDEvent(_ PodRef, _ string, reason string) { g.gid <- reason }

// uverbsOf is the container device of an HCA's uverbs node.
func uverbsOf(t *testing.T, n inventory.Node, hca string) *api.LinuxDevice {
	t.Helper()
	for _, h := range n.HCAs {
		if h.Name != hca {
			continue
		}
		for _, c := range h.CharDevices {
			if strings.HasPrefix(c.Name, "uverbs") {
				return &api.LinuxDevice{Path: "/dev/infiniband/" + c.Name, Type: "c", Major: int64(c.Major), Minor: int64(c.Minor)}
			}
		}
	}
	t.Fatalf("no uverbs device of %s", hca)
	return nil
}

// image is a container image as a map of paths to contents.
type image map[string]string

func (m image) ReadFile(_ context.Context, _, name string, max int64) ([]byte, error) {
	v, ok := m[name]
	if !ok {
		return nil, fmt.Errorf("%s: %w", name, imagefs.ErrNotExist)
	}
	return []byte(v)[:min(int64(len(v)), max)], nil
}

// withNCCL is an image holding NCCL v as the system's nccl.h says it.
func withNCCL(major, minor, patch int) image {
	return image{"/etc/passwd": "root:x:0:0:root:/root:/bin/bash\n", "/usr/include/nccl.h": fmt.Sprintf("#define NCCL_MAJOR %d\n#define NCCL_MINOR %d\n#define NCCL_PATCH %d\n", major, minor, patch)}
}

// gidFixture is the OCI BM.GPU.H100.8 fixture, scanned, and a plugin over
// it reading the image img.
type gidFixture struct {
	dir    string
	node   inventory.Node
	events gidEvents
	p      *Plugin
}

func newGIDFixture(t *testing.T, img ImageReader, gids GIDReader) gidFixture {
	t.Helper()
	dir, node := scanOCI(t)
	return pluginOn(t, dir, node, img, gids)
}

// scanOCI builds the OCI BM.GPU.H100.8 fixture and scans it.
func scanOCI(t *testing.T) (string, inventory.Node) {
	t.Helper()
	dir := fixture.BuildTemp(t, fixture.OCIH100)
	return dir, nodetest.Scan(t, dir)
}

// pluginOn is a plugin over a scanned fixture, reading the image img; one
// fixture may serve several plugins that do not change it.
func pluginOn(t *testing.T, dir string, node inventory.Node, img ImageReader, gids GIDReader) gidFixture {
	t.Helper()
	if gids == nil {
		gids = SysfsGIDs{Root: fixture.SysfsRoot(dir)}
	}
	events := gidEvents{eventRecorder{make(chan recordedEvent, 10)}, make(chan string, 10)}
	p, err := NewPlugin(Config{RankConfDir: t.TempDir(), GIDs: gids, Image: img}, staticInventory(node), testr.New(t), nil, events)
	if err != nil {
		t.Fatal(err)
	}
	return gidFixture{dir, node, events, p}
}

func (f gidFixture) ctr(t *testing.T, id string, env []string, hcas ...string) *api.Container {
	c := &api.Container{Id: id, Name: id, Env: env, User: &api.User{Uid: 0}, Linux: &api.LinuxContainer{}}
	for _, h := range hcas {
		c.Linux.Devices = append(c.Linux.Devices, uverbsOf(t, f.node, h))
	}
	return c
}

// writeGID sets entry i of a port's table of the fixture.
func (f gidFixture) writeGID(t *testing.T, hca string, i int, gid, typ string) {
	t.Helper()
	port := filepath.Join(fixture.SysfsRoot(f.dir), "class/infiniband", hca, "ports/1")
	must(t, os.WriteFile(filepath.Join(port, "gids", strconv.Itoa(i)), []byte(gid+"\n"), 0o644))
	must(t, os.MkdirAll(filepath.Join(port, "gid_attrs/types"), 0o755))
	must(t, os.WriteFile(filepath.Join(port, "gid_attrs/types", strconv.Itoa(i)), []byte(typ+"\n"), 0o644))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func envOf(adj *api.ContainerAdjustment) map[string]string {
	out := map[string]string{}
	for _, e := range adj.GetEnv() {
		out[e.Key] = e.Value
	}
	return out
}

// The OCI fixture's GPU-fabric ports hold their IPv4 RoCE v2 GID at 3:
// mlx5_0 192.168.0.22, mlx5_1 192.168.1.22 (a pod holding the ports'
// netdevs has these addresses).
var ociPodIPs = []string{"192.168.0.22", "192.168.1.22"}

// TestGIDIndexPerNCCLRelease: NCCL_IB_GID_INDEX is set only for an NCCL
// that does not pick the GID itself (before 2.21.5), never over a GID
// selector the user set, never when the version is unknown; UCX_IB_GID_INDEX
// never.
func TestGIDIndexPerNCCLRelease(t *testing.T) {
	t.Parallel()
	dir, node := scanOCI(t)
	for _, tc := range []struct {
		name string
		img  ImageReader
		env  []string
		want map[string]string
	}{
		{"NCCL 2.19.3", withNCCL(2, 19, 3), nil, map[string]string{EnvNCCLIBGIDIndex: "3"}},
		{"NCCL 2.21.5", withNCCL(2, 21, 5), nil, map[string]string{}},
		{"NCCL 2.23.4", withNCCL(2, 23, 4), nil, map[string]string{}},
		{"NCCL 2.26.2", withNCCL(2, 26, 2), nil, map[string]string{}},
		{"NCCL 2.30.3", withNCCL(2, 30, 3), nil, map[string]string{}},
		{"unknown version", nil, nil, map[string]string{}},
		{"image without NCCL", image{}, nil, map[string]string{}},
		{"NCCL 2.19.3, user's index", withNCCL(2, 19, 3), []string{"NCCL_IB_GID_INDEX=1"}, map[string]string{}},
		{"NCCL 2.19.3, user's range", withNCCL(2, 19, 3), []string{"NCCL_IB_ADDR_RANGE=10.0.0.0/8"}, map[string]string{}},
		{"NCCL 2.19.3, user's family", withNCCL(2, 19, 3), []string{"NCCL_IB_ADDR_FAMILY=AF_INET6"}, map[string]string{}},
		{"NCCL 2.19.3, user's RoCE version", withNCCL(2, 19, 3), []string{"NCCL_IB_ROCE_VERSION_NUM=1"}, map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := pluginOn(t, dir, node, tc.img, nil)
			pod := &api.PodSandbox{Id: "pod1", Name: "w", Namespace: "hpc", Uid: "u1", Ips: ociPodIPs}
			adj := f.p.createContainer(pod, f.ctr(t, "gpu", append([]string{"NCCL_IB_HCA==mlx5_0:1,mlx5_1:1"}, tc.env...), "mlx5_0", "mlx5_1"))
			got := envOf(adj)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("environment added (-want +got):\n%s", d)
			}
			if _, ucx := got["UCX_IB_GID_INDEX"]; ucx {
				t.Error("UCX_IB_GID_INDEX injected")
			}
			if tc.want[EnvNCCLIBGIDIndex] == "" {
				return
			}
			conf, err := os.ReadFile(filepath.Join(f.p.cfg.RankConfDir, "gpu"+rankConfSuffix))
			if err != nil || !strings.Contains(string(conf), "NCCL_IB_GID_INDEX=3\n") {
				t.Errorf("rank conf lacks the GID index: %q, %v", conf, err)
			}
		})
	}
}

// TestGIDIndexPodsOnOneRoCEPort: two pods with macvlans on one RoCE port
// (mlx5_0) each get the entry of their own address, not the host's or the
// other pod's; a pod whose address has no entry gets none and an Event.
func TestGIDIndexPodsOnOneRoCEPort(t *testing.T) {
	t.Parallel()
	f := newGIDFixture(t, withNCCL(2, 19, 3), nil)
	// The host's netdev holds 192.168.0.22 at 2/3; pod A's macvlan
	// 10.1.0.5 at 4/5, pod B's 10.1.0.6 at 6/7.
	f.writeGID(t, "mlx5_0", 4, "0000:0000:0000:0000:0000:ffff:0a01:0005", inventory.GIDTypeRoCEv1)
	f.writeGID(t, "mlx5_0", 5, "0000:0000:0000:0000:0000:ffff:0a01:0005", inventory.GIDTypeRoCEv2)
	f.writeGID(t, "mlx5_0", 6, "0000:0000:0000:0000:0000:ffff:0a01:0006", inventory.GIDTypeRoCEv1)
	f.writeGID(t, "mlx5_0", 7, "0000:0000:0000:0000:0000:ffff:0a01:0006", inventory.GIDTypeRoCEv2)
	for _, tc := range []struct {
		pod, ip, want string
	}{
		{"a", "10.1.0.5", "5"},
		{"b", "10.1.0.6", "7"},
		{"c", "10.1.0.9", ""},
	} {
		pod := &api.PodSandbox{Id: tc.pod, Name: tc.pod, Namespace: "hpc", Uid: tc.pod, Ips: []string{tc.ip}}
		got := envOf(f.p.createContainer(pod, f.ctr(t, tc.pod, nil, "mlx5_0")))[EnvNCCLIBGIDIndex]
		if got != tc.want {
			t.Errorf("pod %s (%s): NCCL_IB_GID_INDEX=%q, want %q", tc.pod, tc.ip, got, tc.want)
		}
	}
	if r := <-f.events.gid; !strings.Contains(r, "no RoCE v2 GID of the pod's IPv4 addresses (10.1.0.9) on mlx5_0/1") {
		t.Errorf("event %q does not say what is missing", r)
	}
}

// TestGIDIndexPortsDisagree: ports whose pod entries sit at different
// indexes give nothing (NCCL takes one index for all) and an Event naming
// them.
func TestGIDIndexPortsDisagree(t *testing.T) {
	t.Parallel()
	f := newGIDFixture(t, withNCCL(2, 19, 3), nil)
	f.writeGID(t, "mlx5_1", 3, "0000:0000:0000:0000:0000:0000:0000:0000", inventory.GIDTypeRoCEv2)
	f.writeGID(t, "mlx5_1", 5, "0000:0000:0000:0000:0000:ffff:c0a8:0116", inventory.GIDTypeRoCEv2)
	pod := &api.PodSandbox{Id: "p", Name: "p", Namespace: "hpc", Uid: "p", Ips: ociPodIPs}
	if got := envOf(f.p.createContainer(pod, f.ctr(t, "mixed", nil, "mlx5_0", "mlx5_1"))); len(got) != 0 {
		t.Errorf("ports that disagree got %v", got)
	}
	if r := <-f.events.gid; !strings.Contains(r, "3 on mlx5_0/1; 5 on mlx5_1/1") {
		t.Errorf("event %q does not name the ports and their indexes", r)
	}
}

// flappingGIDs returns a table whose entry 3 changes type on every read
// for the first flips reads, as a table the kernel rewrites while it is
// read (GID and type are separate files).
type flappingGIDs struct {
	mu    sync.Mutex
	reads int
	flips int
}

func (g *flappingGIDs) ReadGIDs(string, int) ([]inventory.GIDEntry, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reads++
	typ := inventory.GIDTypeRoCEv2
	if g.reads <= g.flips && g.reads%2 == 1 {
		typ = inventory.GIDTypeRoCEv1
	}
	return []inventory.GIDEntry{{Index: 3, GID: "0000:0000:0000:0000:0000:ffff:c0a8:0016", Type: typ}}, ""
}

// TestGIDReadConsistent: a table is taken only once two reads in a row
// agree; one that never settles gives no index.
func TestGIDReadConsistent(t *testing.T) {
	t.Parallel()
	settles := &flappingGIDs{flips: 2}
	got, why := readGIDsConsistent(settles, "mlx5_0", 1)
	if why != "" || len(got) != 1 || got[0].Type != inventory.GIDTypeRoCEv2 {
		t.Errorf("a table that settles: %+v, %q", got, why)
	}
	never := &flappingGIDs{flips: 1 << 30}
	if got, why := readGIDsConsistent(never, "mlx5_0", 1); got != nil || !strings.Contains(why, "changed on each of 5 reads") {
		t.Errorf("a table that never settles: %+v, %q", got, why)
	}
}

// podFibTrie is /proc/<pid>/net/fib_trie of a pod with eth0 10.244.1.7/24
// and a macvlan net1 10.1.0.5/24 on a RoCE port, in the kernel's format
// (net/ipv4/fib_trie.c fib_trie_seq_show): the local addresses are the
// "/32 host LOCAL" leaves; network and broadcast leaves are not.
const podFibTrie = `Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 10.1.0.0/24 2 0 2
        |-- 10.1.0.0
           /24 link UNICAST
        |-- 10.1.0.5
           /32 host LOCAL
        |-- 10.1.0.255
           /32 link BROADCAST
     +-- 10.244.1.0/24 2 0 2
        |-- 10.244.1.0
           /24 link UNICAST
        |-- 10.244.1.7
           /32 host LOCAL
     +-- 127.0.0.0/8 2 0 2
        |-- 127.0.0.1
           /32 host LOCAL
Local:
  +-- 0.0.0.0/0 3 0 5
     |-- 10.1.0.5
        /32 host LOCAL
     |-- 10.244.1.7
        /32 host LOCAL
`

func TestLocalAddrs(t *testing.T) {
	t.Parallel()
	want := []netip.Addr{netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("10.244.1.7"), netip.MustParseAddr("127.0.0.1")}
	if d := cmp.Diff(want, localAddrs(podFibTrie), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
		t.Errorf("local addresses (-want +got):\n%s", d)
	}
}

// TestSysfsGIDsPodAddrs: the addresses of a sandbox's network namespace,
// read through <proc>/<pid>/net/fib_trie as the agent reads a pod's, with
// no capability: a namespace the test makes, whose address is the pod's
// and not the test's own. Making the namespace needs root.
func TestSysfsGIDsPodAddrs(t *testing.T) {
	t.Parallel()
	own, err := SysfsGIDs{ProcRoot: "/proc"}.PodAddrs(&api.PodSandbox{Pid: uint32(os.Getpid())})
	if err != nil || !slices.Contains(own, netip.MustParseAddr("127.0.0.1")) {
		t.Errorf("the test's own namespace: %v, %v; want 127.0.0.1 among them", own, err)
	}
	if _, err := (SysfsGIDs{}).PodAddrs(&api.PodSandbox{}); err == nil || !strings.Contains(err.Error(), "sandbox's process") {
		t.Errorf("a sandbox without pid: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("making a network namespace needs root")
	}
	podAddr := netip.MustParseAddr("10.99.0.1")
	tid := threadInNetnsWithAddr(t, podAddr.String()+"/32")
	pod, err := SysfsGIDs{}.PodAddrs(&api.PodSandbox{Pid: uint32(tid)})
	if err != nil || !slices.Contains(pod, podAddr) || slices.Contains(own, podAddr) {
		t.Errorf("the pod's namespace: %v, %v; the test's own: %v; want %s in the pod's only", pod, err, own, podAddr)
	}
}

// threadInNetnsWithAddr parks a thread in a new network namespace holding
// addr on its loopback until the test ends, and returns its id, which
// /proc resolves like a process id.
func threadInNetnsWithAddr(t *testing.T, addr string) int {
	t.Helper()
	ready, done := make(chan int), make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if _, err := netns.New(); err != nil {
			t.Error(err)
			ready <- 0
			return
		}
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		var a *netlink.Addr
		if err == nil {
			a, err = netlink.ParseAddr(addr)
		}
		if err == nil {
			err = netlink.AddrAdd(lo, a)
		}
		if err != nil {
			t.Error(err)
		}
		ready <- unix.Gettid()
		<-done
	}()
	tid := <-ready
	if tid == 0 {
		t.FailNow()
	}
	return tid
}
