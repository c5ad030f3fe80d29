package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/internal/testing/kubeletstub"
	"github.com/ibkube/ibkube/node/config"
)

// fakeScanner returns whatever node the test set and hints on demand.
type fakeScanner struct {
	mu    sync.Mutex
	node  inventory.Node
	hints chan struct{}
}

func (f *fakeScanner) Scan(context.Context) (inventory.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.node, nil
}

func (f *fakeScanner) Watch(context.Context) (<-chan struct{}, error) { return f.hints, nil }

func (f *fakeScanner) set(n inventory.Node) {
	f.mu.Lock()
	f.node = n
	f.mu.Unlock()
	f.hints <- struct{}{}
}

func node(healthy ...bool) inventory.Node {
	var n inventory.Node
	for i, ok := range healthy {
		n.HCAs = append(n.HCAs, inventory.HCA{
			Name: fmt.Sprintf("mlx5_%d", i), VendorID: "15b3", NUMANode: 0, Healthy: ok,
			Ports:       []inventory.Port{{Number: 1, LinkLayer: "InfiniBand"}},
			CharDevices: []inventory.CharDevice{{Name: fmt.Sprintf("uverbs%d", i), Present: true}},
		})
	}
	return n
}

// listen opens a listener on a free port; the agent serves on it, so no
// other process can take the port between choosing and serving.
func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func get(t *testing.T, url string) string {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return string(b)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
	}
}

func TestAgentEndToEnd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	stub := kubeletstub.Start(t, dir)
	scanner := &fakeScanner{node: node(true, true), hints: make(chan struct{}, 1)}
	metrics, health := listen(t), listen(t)
	metricsAddr, healthAddr := metrics.Addr().String(), health.Addr().String()
	cfg := config.Default()
	cfg.Profile = "Standard_ND96isr_H100_v5"
	state := t.TempDir()
	a, err := New(Config{
		Agent: cfg, Scanner: scanner, KubeletSocketDir: dir, StateDir: state, HostDevRoot: "/dev",
		MetricsListener: metrics, HealthListener: health,
	}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer start(t, a)()

	if _, err := stub.WaitList("rdma/ib", 5*time.Second, func(d []*pluginapi.Device) bool { return len(d) == 2 }); err != nil {
		t.Fatal(err)
	}
	if got := len(a.Inventory().HCAs); got != 2 {
		t.Errorf("Inventory has %d HCAs", got)
	}
	// Allocate carries the node profile: topology file written and mounted.
	c, err := stub.Client("rdma/ib")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"mlx5_1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	cr := resp.ContainerResponses[0]
	// Node facts only, though ndv5 has tunings: those come from the pod's
	// profile conf file, below the user's settings.
	wantEnv := map[string]string{"NCCL_IB_HCA": "=mlx5_1:1", "UCX_NET_DEVICES": "mlx5_1:1", "NCCL_TOPO_FILE": "/etc/ibkube/nccl-topo.xml"}
	if d := cmp.Diff(wantEnv, cr.Envs); d != "" {
		t.Errorf("Allocate env on an ND H100 v5 node (-want +got):\n%s", d)
	}
	if len(cr.Mounts) != 1 {
		t.Fatalf("Allocate mounts = %v, want the topology file", cr.Mounts)
	}
	if b, err := os.ReadFile(cr.Mounts[0].HostPath); err != nil || !strings.Contains(string(b), "<system") {
		t.Errorf("topology file %s: %v", cr.Mounts[0].HostPath, err)
	}
	if !strings.HasPrefix(cr.Mounts[0].HostPath, state) || !cr.Mounts[0].ReadOnly {
		t.Errorf("mount = %v", cr.Mounts[0])
	}

	// A hint makes the agent rescan; the flip reaches the stream.
	scanner.set(node(true, false))
	if _, err := stub.WaitList("rdma/ib", 5*time.Second, func(d []*pluginapi.Device) bool { return d[1].Health == "Unhealthy" }); err != nil {
		t.Fatal(err)
	}
	scanner.set(node(true, true, true)) // a late HCA appears
	if _, err := stub.WaitList("rdma/ib", 5*time.Second, func(d []*pluginapi.Device) bool { return len(d) == 3 && d[1].Health == "Healthy" }); err != nil {
		t.Fatal(err)
	}

	if got := get(t, "http://"+healthAddr+"/healthz"); got != "ok\n" {
		t.Errorf("/healthz = %q", got)
	}
	if got := get(t, "http://"+healthAddr+"/inventory"); !strings.Contains(got, `"name":"mlx5_2"`) {
		t.Errorf("/inventory = %s", got)
	}
	// The stub records a registration before the plugin has the reply that
	// it counts: wait for the count rather than read it once.
	const registered = `ibkube_node_agent_kubelet_registrations_total{resource="rdma/ib",result="success"} 1`
	m := get(t, "http://"+metricsAddr+"/metrics")
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(m, registered) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		m = get(t, "http://"+metricsAddr+"/metrics")
	}
	for _, want := range []string{
		`ibkube_node_agent_devices{health="Healthy",resource="rdma/ib"} 3`,
		`ibkube_node_agent_devices{health="Healthy",resource="rdma/shared_ib"} 63`,
		`ibkube_node_agent_allocations_total{resource="rdma/ib"} 1`,
		registered,
		`ibkube_node_agent_hca_healthy{hca="mlx5_2",resource="rdma/shared_ib,rdma/ib"} 1`,
		`ibkube_node_agent_scans_total{result="success",trigger="event"} 2`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestResolveSKU(t *testing.T) {
	t.Parallel()
	tests := []struct {
		override, label, dmi string
		sku, source          string
	}{
		{"", "Standard_ND96isr_H100_v5", "Virtual Machine", "Standard_ND96isr_H100_v5", SKUFromLabel},
		{"", "", "BM.GPU.H100.8", "BM.GPU.H100.8", SKUFromDMI},
		{"Standard_ND96asr_v4", "Standard_ND96isr_H100_v5", "", "Standard_ND96asr_v4", SKUFromConfig},
		{"none", "Standard_ND96isr_H100_v5", "", "", SKUFromConfig},
		{"", "", "", "", ""},
	}
	for _, tc := range tests {
		sku, source := ResolveSKU(tc.override, tc.label, tc.dmi)
		if sku != tc.sku || source != tc.source {
			t.Errorf("ResolveSKU(%q, %q, %q) = %q, %q; want %q, %q", tc.override, tc.label, tc.dmi, sku, source, tc.sku, tc.source)
		}
	}
}

func TestNodeProfile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p, ok, err := NodeProfile("Standard_ND96isr_H100_v5", dir)
	if err != nil || !ok {
		t.Fatalf("NodeProfile = %v, %v", ok, err)
	}
	if want := filepath.Join(dir, "nccl", "ndv5-topo.xml"); p.TopologyFile != want {
		t.Errorf("topology file = %q, want %q", p.TopologyFile, want)
	}
	if _, err := os.Stat(p.TopologyFile); err != nil {
		t.Error(err)
	}
	if _, ok, _ := NodeProfile("Standard_D4s_v5", dir); ok {
		t.Error("a D-series VM got a profile")
	}
	if d := cmp.Diff("Virtual Machine", DMIProductName(writeDMI(t, "Virtual Machine\n"))); d != "" {
		t.Error(d)
	}
}

func writeDMI(t *testing.T, name string) string {
	t.Helper()
	root := t.TempDir()
	p := filepath.Join(root, "class", "dmi", "id")
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p, "product_name"), []byte(name), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestAgentOnFixture runs real discovery on the ND H100 v5 fixture: a port
// going down and up in the tree reaches the kubelet stub's stream through
// the port poll alone (no periodic rescan within the test's patience), and
// the Ethernet mlx5_8 is in no pool.
func TestAgentOnFixture(t *testing.T) {
	t.Parallel()
	dir, stub, a, stop := runOnFixture(t)
	defer stop()
	if got := len(a.Inventory().HCAs); got != 9 {
		t.Errorf("Inventory has %d HCAs, want 9", got)
	}
	if err := fixture.SetPortState(dir, "mlx5_5", 1, "DOWN"); err != nil {
		t.Fatal(err)
	}
	if _, err := stub.WaitHealth("rdma/ib", "mlx5_5", "Unhealthy", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := fixture.SetPortState(dir, "mlx5_5", 1, "ACTIVE"); err != nil {
		t.Fatal(err)
	}
	if _, err := stub.WaitHealth("rdma/ib", "mlx5_5", "Healthy", 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestAgentFollowsLateDriversAndCharDevices starts the agent on a node whose
// drivers have not loaded yet, with the periodic rescan out of reach, so
// only change events can move it: the HCAs appearing later are advertised,
// a char device that vanishes makes its HCA Unhealthy and its re-creation
// makes it Healthy again, and every update carries the whole list.
func TestAgentFollowsLateDriversAndCharDevices(t *testing.T) {
	t.Parallel()
	dir, sockets := t.TempDir(), t.TempDir()
	stub := kubeletstub.Start(t, sockets)
	cfg := config.Default()
	cfg.RescanPeriod.Duration = time.Hour
	scanner := discovery.NewScanner(discovery.Options{SysfsRoot: fixture.SysfsRoot(dir), DevRoot: fixture.DevRoot(dir), Logger: testr.New(t)})
	a, err := New(Config{Agent: cfg, Scanner: scanner, SysfsRoot: fixture.SysfsRoot(dir), KubeletSocketDir: sockets, StateDir: t.TempDir()}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer start(t, a)()
	if _, err := stub.WaitList("rdma/ib", 5*time.Second, func(d []*pluginapi.Device) bool { return len(d) == 0 }); err != nil {
		t.Fatal("before the drivers load: ", err)
	}

	healthyExcept := func(unhealthy string) func([]*pluginapi.Device) bool {
		return func(d []*pluginapi.Device) bool {
			if len(d) != 8 {
				return false
			}
			for _, dev := range d {
				if (dev.ID == unhealthy) != (dev.Health == pluginapi.Unhealthy) {
					return false
				}
			}
			return true
		}
	}
	if err := fixture.Build(dir, fixture.NDv5); err != nil {
		t.Fatal(err)
	}
	if _, err := stub.WaitList("rdma/ib", 5*time.Second, healthyExcept("")); err != nil {
		t.Fatal("drivers loaded after start: ", err)
	}
	if _, err := stub.WaitList("rdma/shared_ib", 5*time.Second, func(d []*pluginapi.Device) bool {
		return len(d) == 63 && d[0].Health == pluginapi.Healthy
	}); err != nil {
		t.Fatal("shared pool after the drivers loaded: ", err)
	}

	if err := fixture.RemoveCharDevice(dir, "uverbs3"); err != nil {
		t.Fatal(err)
	}
	if _, err := stub.WaitList("rdma/ib", 5*time.Second, healthyExcept("mlx5_3")); err != nil {
		t.Fatal("uverbs3 removed: ", err)
	}
	if err := fixture.AddCharDevice(dir, "uverbs3"); err != nil {
		t.Fatal(err)
	}
	if _, err := stub.WaitList("rdma/ib", 5*time.Second, healthyExcept("")); err != nil {
		t.Fatal("uverbs3 re-created: ", err)
	}
	if got := a.Inventory().HCAs[3]; got.Name != "mlx5_3" || !got.Healthy {
		t.Errorf("Inventory mlx5_3 = %s healthy=%v (%s)", got.Name, got.Healthy, got.HealthReason)
	}
}
