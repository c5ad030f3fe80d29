package dra

import (
	"context"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/internal/testing/dratest"
)

// runningDriver is a driver that runDriver started, with what a test
// reaches it through as the kubelet and the API server do.
type runningDriver struct {
	*Driver
	client      *fake.Clientset
	cdi         string // the directory of the claims' CDI specs
	pluginDir   string // the kubelet plugin's dra.sock
	registryDir string // the kubelet's registration sockets
	stop        func() // returns once Run has; the test's end calls it too
}

// runDriver runs a driver for node-0 of fixture ND H100 v5 against a fake
// API server holding the node and objs until stop is called. It returns
// once Published has, so that every caller starts from the slices the API
// server holds.
func runDriver(t *testing.T, podUID string, objs ...runtime.Object) runningDriver {
	t.Helper()
	h := newHost(t, fixture.NDv5, nil)
	client := fake.NewClientset(append([]runtime.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0", UID: "node-uid"}}}, objs...)...)
	dratest.GenerateNames(client)
	sockets := dratest.SocketDir(t, "dra")
	r := runningDriver{client: client, cdi: t.TempDir(), pluginDir: filepath.Join(sockets, "plugin"), registryDir: filepath.Join(sockets, "registry")}
	d, err := New(Config{NodeName: "node-0", CDIDir: r.cdi, Plugin: PluginOptions{
		Client: client, PodUID: podUID, PluginDir: r.pluginDir, RegistryDir: r.registryDir,
		// A loaded machine running every package's tests at once may take
		// a while.
		ExitTimeout: 30 * time.Second,
	}}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	d.Update(h.model(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	stopped := false
	r.Driver, r.stop = d, func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(r.stop)
	published, pCancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer pCancel()
	if err := d.Published(published); err != nil {
		t.Fatalf("Published: %v", err)
	}
	return r
}

func taintKeys(t *testing.T, client *fake.Clientset) map[string][]string {
	t.Helper()
	pool := dratest.Pool(context.Background(), t, client, 20*time.Second, nil)
	out := map[string][]string{}
	for _, dev := range pool.Devices {
		for _, tn := range dev.Taints {
			out[dev.Name] = append(out[dev.Name], tn.Key)
		}
	}
	return out
}

// TestPublishedWaitsForTheAPI: Published returns only once the API server
// holds every device of the model, which is what the agent's readiness
// waits on.
func TestPublishedWaitsForTheAPI(t *testing.T) {
	t.Parallel()
	d := runDriver(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	list, err := d.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	devices := 0
	for _, s := range list.Items {
		devices += len(s.Spec.Devices)
	}
	if want := len(Devices(d.snapshot())); devices != want || want == 0 {
		t.Fatalf("after Published the API holds %d devices in %d slices; want the model's %d", devices, len(list.Items), want)
	}
	// A driver whose slices never reached the API is not published.
	idle, err := New(Config{NodeName: "node-0", CDIDir: t.TempDir(), Plugin: PluginOptions{Client: fake.NewClientset()}}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	idle.Update(d.snapshot())
	short, sCancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer sCancel()
	if err := idle.Published(short); err == nil {
		t.Error("Published returned nil while the API holds no slice of the node")
	}
}

// TestPublishedFromTheInformer: Published learns that the slices are stored
// from the slice controller's own informer, so waiting for readiness sends
// the API server no request: the only ResourceSlice list is the informer's
// one (at 1,000 nodes the lists by field selector of each waiting agent
// were what delayed Ready).
func TestPublishedFromTheInformer(t *testing.T) {
	t.Parallel()
	d := runDriver(t, "")
	lists := 0
	for _, a := range d.client.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "resourceslices" {
			lists++
		}
	}
	if lists > 1 {
		t.Errorf("%d lists of ResourceSlices until Published returned; want at most the slice controller informer's one", lists)
	}
	got, _ := d.view.snapshot()
	d.mu.Lock()
	want := publishedDevices(*d.published)
	d.mu.Unlock()
	if !slices.Equal(got, want) {
		t.Fatalf("the informer's view %v, want what was handed %v", got, want)
	}
}

// TestSliceView: the view keeps this node's slices of this driver from a
// list and watch events, and forgets deleted ones.
func TestSliceView(t *testing.T) {
	t.Parallel()
	mk := func(name, node, driver string, devices ...string) resourceapi.ResourceSlice {
		s := resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.ResourceSliceSpec{
			Driver: driver, NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node},
		}}
		for _, d := range devices {
			s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: d})
		}
		return s
	}
	v := newSliceView("node-0")
	_, changed := v.snapshot()
	v.replace([]resourceapi.ResourceSlice{
		mk("a", "node-0", contract.DRADriverName, "ib-mlx5-1", "ib-mlx5-0"),
		mk("b", "node-1", contract.DRADriverName, "ib-mlx5-0"),
		mk("c", "node-0", "gpu.example.com", "gpu-0"),
	})
	select {
	case <-changed:
	default:
		t.Error("a list did not signal a change")
	}
	check := func(step string, want ...string) {
		t.Helper()
		if got, _ := v.snapshot(); !slices.Equal(got, want) {
			t.Errorf("%s: view %v, want %v", step, got, want)
		}
	}
	check("after the list", "ib-mlx5-0", "ib-mlx5-1")
	// A list in pages counts once its last page is in.
	v.page([]resourceapi.ResourceSlice{mk("a", "node-0", contract.DRADriverName, "ib-mlx5-2")}, true, false)
	check("after a first page", "ib-mlx5-0", "ib-mlx5-1")
	v.page([]resourceapi.ResourceSlice{mk("e", "node-0", contract.DRADriverName, "ib-mlx5-3")}, false, true)
	check("after the last page", "ib-mlx5-2", "ib-mlx5-3")
	v.replace([]resourceapi.ResourceSlice{mk("a", "node-0", contract.DRADriverName, "ib-mlx5-1", "ib-mlx5-0")})
	second := mk("d", "node-0", contract.DRADriverName, "shared-ib-mlx5-0")
	v.event(watch.Event{Type: watch.Added, Object: &second})
	check("after an add", "ib-mlx5-0", "ib-mlx5-1", "shared-ib-mlx5-0")
	first := mk("a", "node-0", contract.DRADriverName, "ib-mlx5-0")
	first.Spec.Devices[0].Taints = []resourceapi.DeviceTaint{{Key: contract.DRATaintUnhealthy, Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	v.event(watch.Event{Type: watch.Modified, Object: &first})
	check("after a modify", "ib-mlx5-0 "+contract.DRATaintUnhealthy, "shared-ib-mlx5-0")
	v.event(watch.Event{Type: watch.Deleted, Object: &second})
	check("after a delete", "ib-mlx5-0 "+contract.DRATaintUnhealthy)
	v.event(watch.Event{Type: watch.Bookmark, Object: &resourceapi.ResourceSlice{}})
	check("after a bookmark", "ib-mlx5-0 "+contract.DRATaintUnhealthy)
}

// TestPlannedExitTaintsDevices: a driver that stops with no successor
// leaves every device tainted agent-stopped (NoSchedule), so that the
// scheduler sends no pod to the node while no driver serves it.
func TestPlannedExitTaintsDevices(t *testing.T) {
	t.Parallel()
	d := runDriver(t, "")
	if got := taintKeys(t, d.client); len(got) != 0 {
		t.Fatalf("taints while running: %v", got)
	}
	d.stop()
	got := taintKeys(t, d.client)
	devs := Devices(d.snapshot())
	for _, dev := range devs {
		if !slices.Contains(got[dev.Name], contract.DRATaintAgentStopped) {
			t.Errorf("device %s after a planned exit has taints %v; want %s", dev.Name, got[dev.Name], contract.DRATaintAgentStopped)
		}
	}
}

// TestPlannedExitLeavesSlicesToSuccessor: during a rolling update the next
// instance already serves the node (its registration socket answers), so
// the old one leaves the slices as they are.
func TestPlannedExitLeavesSlicesToSuccessor(t *testing.T) {
	t.Parallel()
	d := runDriver(t, "old-pod")
	succ := filepath.Join(d.registryDir, kubeletplugin.RollingUpdateRegistrarSocketFile(d.registryDir, contract.DRADriverName, types.UID("new-pod")))
	l, err := net.Listen("unix", succ)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	d.stop()
	if got := taintKeys(t, d.client); len(got) != 0 {
		t.Errorf("a successor serves the node, yet the exit tainted %v", got)
	}
}
