package deviceplugin

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/internal/testing/kubeletstub"
	"github.com/ibkube/ibkube/internal/testing/nodetest"
	"github.com/ibkube/ibkube/node/config"
	"github.com/ibkube/ibkube/node/resource"
)

const wait = 5 * time.Second

// testNode is an ND H100 v5-like node: eight InfiniBand HCAs, four on each
// NUMA node.
func testNode() inventory.Node { return nodetest.IBNode(8, 4) }

func specs(m *resource.Model) []Spec {
	var out []Spec
	for _, p := range m.Pools {
		out = append(out, Spec{Resource: p.Resource, Exclusive: p.Exclusive(), Pool: p})
	}
	return out
}

type counter struct {
	mu         sync.Mutex
	registered map[string]int
	failed     map[string]int
	allocated  map[string]int
}

func newCounter() *counter {
	return &counter{registered: map[string]int{}, failed: map[string]int{}, allocated: map[string]int{}}
}

func (c *counter) Registered(r string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.registered[r]++
	} else {
		c.failed[r]++
	}
}

func (c *counter) Allocated(r string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.allocated[r] += n
}

// start runs a Manager over the default pools of node against a stub kubelet.
func start(t *testing.T, node inventory.Node) (*kubeletstub.Stub, *Manager, *counter) {
	t.Helper()
	dir := t.TempDir()
	stub := kubeletstub.Start(t, dir)
	t.Cleanup(stub.Stop)
	obs := newCounter()
	m := NewManager(Options{SocketDir: dir, Logger: testr.New(t), Observer: obs},
		specs(resource.Build(config.Default(), node, resource.Options{HostDevRoot: "/dev"})))
	runForTest(t, m)
	return stub, m, obs
}

// runForTest runs m until the test ends and fails the test if Run fails;
// the context returned ends with the test.
func runForTest(t *testing.T, m *Manager) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return ctx
}

func TestRegistrationAndListAndWatch(t *testing.T) {
	t.Parallel()
	stub, _, _ := start(t, testNode())
	for _, tc := range []struct {
		resource  string
		preferred bool
		devices   int
	}{
		{"rdma/shared_ib", false, 63},
		{"rdma/ib", true, 8},
	} {
		r, err := stub.WaitRegistration(tc.resource, wait)
		if err != nil {
			t.Fatal(err)
		}
		if !IsSocketOf(tc.resource, r.Request.Endpoint) || r.Request.Version != "v1beta1" || r.Options.GetPreferredAllocationAvailable != tc.preferred {
			t.Errorf("%s registration = %v, options %v", tc.resource, r.Request, r.Options)
		}
		l, err := stub.WaitList(tc.resource, wait, func([]*pluginapi.Device) bool { return true })
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Devices) != tc.devices {
			t.Errorf("%s: first list has %d devices, want %d", tc.resource, len(l.Devices), tc.devices)
		}
	}
}

func TestAllocate(t *testing.T) {
	t.Parallel()
	stub, _, obs := start(t, testNode())
	ctx := context.Background()
	for _, tc := range []struct {
		resource, id, wantHCA string
		wantDevices           int
	}{
		{"rdma/ib", "mlx5_5", "=mlx5_5:1", 2},
		{"rdma/shared_ib", "slot-7", "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1", 9},
	} {
		if _, err := stub.WaitRegistration(tc.resource, wait); err != nil {
			t.Fatal(err)
		}
		c, err := stub.Client(tc.resource)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{tc.id}}}})
		if err != nil {
			t.Fatalf("%s Allocate: %v", tc.resource, err)
		}
		got := resp.ContainerResponses[0]
		if got.Envs["NCCL_IB_HCA"] != tc.wantHCA || len(got.Devices) != tc.wantDevices {
			t.Errorf("%s Allocate = env %v, %d devices; want NCCL_IB_HCA %q, %d devices", tc.resource, got.Envs, len(got.Devices), tc.wantHCA, tc.wantDevices)
		}
	}
	c, _ := stub.Client("rdma/ib")
	if _, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"mlx5_9"}}}}); err == nil {
		t.Error("Allocate of an unknown device succeeded")
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if d := cmp.Diff(map[string]int{"rdma/ib": 1, "rdma/shared_ib": 1}, obs.allocated); d != "" {
		t.Errorf("allocations observed (-want +got):\n%s", d)
	}
}

func TestGetPreferredAllocation(t *testing.T) {
	t.Parallel()
	stub, _, _ := start(t, testNode())
	if _, err := stub.WaitRegistration("rdma/ib", wait); err != nil {
		t.Fatal(err)
	}
	c, err := stub.Client("rdma/ib")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
		AvailableDeviceIDs:   []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"},
		MustIncludeDeviceIDs: []string{"mlx5_0"},
		AllocationSize:       4,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	// mlx5_0 pulls NUMA 0 (three left there), then the smallest group that
	// fits one more... NUMA 0 is exhausted, so NUMA 1 fills.
	if d := cmp.Diff([]string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_4"}, resp.ContainerResponses[0].DeviceIDs); d != "" {
		t.Errorf("preferred (-want +got):\n%s", d)
	}
}

func TestHealthFlipAndRecovery(t *testing.T) {
	t.Parallel()
	node := testNode()
	stub, m, _ := start(t, node)
	if _, err := stub.WaitHealth("rdma/ib", "mlx5_3", "Healthy", wait); err != nil {
		t.Fatal(err)
	}
	update := func(n inventory.Node) {
		for _, s := range specs(resource.Build(config.Default(), n, resource.Options{})) {
			m.Update(s.Resource, s.Pool)
		}
	}
	node.HCAs[3].Healthy, node.HCAs[3].HealthReason = false, "port 1 DOWN"
	update(node)
	l, err := stub.WaitHealth("rdma/ib", "mlx5_3", "Unhealthy", wait)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Devices) != 8 || kubeletstub.HealthOf(l.Devices, "mlx5_2") != "Healthy" {
		t.Errorf("list after flip is not the whole list: %v", l.Devices)
	}
	node.HCAs[3].Healthy = true
	update(node)
	if _, err := stub.WaitHealth("rdma/ib", "mlx5_3", "Healthy", wait); err != nil {
		t.Fatal(err)
	}
	// The shared pool stays healthy while any HCA is, and flips when none is.
	for i := range node.HCAs {
		node.HCAs[i].Healthy = false
	}
	update(node)
	if _, err := stub.WaitHealth("rdma/shared_ib", "slot-0", "Unhealthy", wait); err != nil {
		t.Fatal(err)
	}
}

func TestReregistrationAfterKubeletRestart(t *testing.T) {
	t.Parallel()
	node := testNode()
	stub, m, obs := start(t, node)
	for _, r := range []string{"rdma/ib", "rdma/shared_ib"} {
		if _, err := stub.WaitRegistration(r, wait); err != nil {
			t.Fatal(err)
		}
	}
	waitObserved(t, obs, "rdma/ib", 1)
	waitObserved(t, obs, "rdma/shared_ib", 1)
	// A change while the kubelet is away must be in the first list after.
	stub.Stop()
	node.HCAs[6].Healthy = false
	for _, s := range specs(resource.Build(config.Default(), node, resource.Options{})) {
		m.Update(s.Resource, s.Pool)
	}
	// Both registrations succeeded, so no retry is pending: only the new
	// kubelet.sock's creation event can bring the plugins back.
	if err := stub.Restart(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"rdma/ib", "rdma/shared_ib"} {
		if _, err := stub.WaitRegistration(r, wait); err != nil {
			t.Fatal(err)
		}
	}
	l, err := stub.WaitHealth("rdma/ib", "mlx5_6", "Unhealthy", wait)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Devices) != 8 {
		t.Errorf("new stream's list has %d devices, want 8", len(l.Devices))
	}
	waitObserved(t, obs, "rdma/ib", 2)
}

// waitObserved waits for the plugin to see n successful registrations: the
// stub records one before the plugin has its reply.
func waitObserved(t *testing.T, obs *counter, resource string, n int) {
	t.Helper()
	waitCount(t, obs, obs.registered, resource, n, "registrations")
}

// waitFailed waits for the plugin to see n failed registrations.
func waitFailed(t *testing.T, obs *counter, resource string, n int) {
	t.Helper()
	waitCount(t, obs, obs.failed, resource, n, "failed registrations")
}

func waitCount(t *testing.T, obs *counter, counts map[string]int, resource string, n int, what string) {
	t.Helper()
	for deadline := time.Now().Add(wait); ; time.Sleep(5 * time.Millisecond) {
		obs.mu.Lock()
		got := counts[resource]
		obs.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s of %s observed = %d, want %d", what, resource, got, n)
		}
	}
}

// servingPlugins waits until the manager serves its plugin sockets in dir:
// it watches the directory from before it creates them.
func servingPlugins(t *testing.T, dir string) {
	t.Helper()
	for deadline := time.Now().Add(wait); ; time.Sleep(5 * time.Millisecond) {
		served := map[string]bool{}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			for _, r := range []string{"rdma/ib", "rdma/shared_ib"} {
				served[r] = served[r] || IsSocketOf(r, e.Name())
			}
		}
		if served["rdma/ib"] && served["rdma/shared_ib"] {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("plugin sockets not served in %s: %v", dir, served)
		}
	}
}

func TestRegistersWhenKubeletAppearsLater(t *testing.T) {
	t.Parallel()
	// A retry period beyond the test's patience: only kubelet.sock's
	// creation event can bring the registration.
	dir, _ := servingBeforeKubelet(t)
	stub := kubeletstub.Start(t, dir)
	if _, err := stub.WaitRegistration("rdma/ib", wait); err != nil {
		t.Fatal(err)
	}
}

// TestNewStreamGetsCurrentList: a second ListAndWatch stream (a kubelet
// reconnecting) starts with the whole current list, changes included.
func TestNewStreamGetsCurrentList(t *testing.T) {
	t.Parallel()
	node := testNode()
	stub, m, _ := start(t, node)
	if _, err := stub.WaitRegistration("rdma/ib", wait); err != nil {
		t.Fatal(err)
	}
	node.HCAs[2].Healthy = false
	for _, s := range specs(resource.Build(config.Default(), node, resource.Options{})) {
		m.Update(s.Resource, s.Pool)
	}
	c, err := stub.Client("rdma/ib")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	stream, err := c.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Devices) != 8 || kubeletstub.HealthOf(first.Devices, "mlx5_2") != "Unhealthy" || kubeletstub.HealthOf(first.Devices, "mlx5_1") != "Healthy" {
		t.Errorf("first message of a new stream = %v", first.Devices)
	}
}

// TestStaleKubeletSocket: a kubelet.sock nobody listens on (the kubelet is
// down) must not hold up registration once the kubelet comes back.
func TestStaleKubeletSocket(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	lis, err := net.Listen("unix", filepath.Join(dir, KubeletSocket))
	if err != nil {
		t.Fatal(err)
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	lis.Close()
	// A retry period beyond the test's patience: once the registrations
	// have failed against the stale socket, only the new kubelet.sock's
	// creation event can bring them.
	obs := newCounter()
	m := NewManager(Options{SocketDir: dir, Logger: testr.New(t), Observer: obs, RetryPeriod: time.Hour},
		specs(resource.Build(config.Default(), testNode(), resource.Options{})))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFailed(t, obs, "rdma/ib", 1)
	waitFailed(t, obs, "rdma/shared_ib", 1)
	if err := os.Remove(filepath.Join(dir, KubeletSocket)); err != nil {
		t.Fatal(err)
	}
	stub := kubeletstub.Start(t, dir)
	for _, r := range []string{"rdma/ib", "rdma/shared_ib"} {
		if _, err := stub.WaitRegistration(r, wait); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNoSecondRegistrationForOneServer: a kick while this kubelet already
// holds this server (a kubelet restart both removes the plugin sockets and
// creates kubelet.sock, two kicks) sends no second Register. The kubelet
// 1.37 refuses one as "already connected" and, in refusing, loses track of
// the live connection, which leaves the resource stuck until it restarts.
func TestNoSecondRegistrationForOneServer(t *testing.T) {
	t.Parallel()
	stub, m, obs := start(t, testNode())
	if _, err := stub.WaitRegistration("rdma/ib", wait); err != nil {
		t.Fatal(err)
	}
	// A skipped registration is reported to the observer as a success.
	waitCount(t, obs, obs.registered, "rdma/ib", 1, "registrations")
	obs.mu.Lock()
	before := obs.registered["rdma/ib"]
	obs.mu.Unlock()
	for _, p := range m.plugins {
		if p.resource == "rdma/ib" {
			p.kickRegistration()
		}
	}
	waitCount(t, obs, obs.registered, "rdma/ib", before+1, "registrations after the kick")
	select {
	case r := <-stub.Registrations("rdma/ib"):
		t.Fatalf("a second Register reached the kubelet for the same kubelet and server: %v", r.Request)
	default:
	}
}

// TestRestartIsNeverRefused: the plugin's socket disappears and the plugin
// serves and registers again while the kubelet has not yet torn down the
// old stream. The kubelet 1.37 refuses a Register for a socket path it still
// holds and, refusing, drops the live client, after which every Register on
// that path is refused until the kubelet restarts. A fresh path per server
// start is accepted at once, and the old endpoint goes once its teardown
// runs.
func TestRestartIsNeverRefused(t *testing.T) {
	t.Parallel()
	stub, _, _ := start(t, testNode())
	first, err := stub.WaitRegistration("rdma/ib", wait)
	if err != nil {
		t.Fatal(err)
	}
	// The old stream must be open before its socket goes: the stub, unlike
	// the kubelet, waits for a server to come ready before it opens
	// ListAndWatch, and would wait on a removed socket for ever.
	if _, err := stub.WaitList("rdma/ib", wait, func([]*pluginapi.Device) bool { return true }); err != nil {
		t.Fatal(err)
	}
	release := stub.HoldTeardown()
	defer release()
	old := filepath.Join(filepath.Dir(stub.Socket()), first.Request.Endpoint)
	if err := os.Remove(old); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-stub.Refusals("rdma/ib"):
		t.Fatalf("the restarted server's registration was refused: %v", r.Err)
	case r := <-stub.Registrations("rdma/ib"):
		if r.Request.Endpoint == first.Request.Endpoint {
			t.Errorf("the restarted server registered the old socket name %s", r.Request.Endpoint)
		}
	case <-time.After(wait):
		t.Fatal("the restarted server did not register")
	}
	release()
	// The old stream's teardown now disconnects the old endpoint, leaving
	// only the new one, which the kubelet keeps following.
	for deadline := time.Now().Add(wait); ; time.Sleep(5 * time.Millisecond) {
		if c := stub.Connected("rdma/ib"); len(c) == 1 && c[0] != old {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubelet endpoints of rdma/ib = %v, want only the new server's", stub.Connected("rdma/ib"))
		}
	}
	if _, err := stub.WaitList("rdma/ib", wait, func(d []*pluginapi.Device) bool { return len(d) == 8 }); err != nil {
		t.Fatal(err)
	}
}

func TestIsSocketOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		resource, name string
		want           bool
	}{
		{"rdma/ib", "ibkube-rdma_ib.sock", true},
		{"rdma/ib", SocketFile("rdma/ib", "x1-2"), true},
		{"rdma/ib", "ibkube-rdma_ib_x.abc.sock", false},
		{"rdma/ib_x", "ibkube-rdma_ib_x.abc.sock", true},
		{"rdma/ib", "ibkube-rdma_ib..sock", false},
		{"rdma/ib", "ibkube-rdma_ib.a.b.sock", false},
		{"rdma/shared_ib", "ibkube-rdma_ib.abc.sock", false},
	} {
		if got := IsSocketOf(tc.resource, tc.name); got != tc.want {
			t.Errorf("IsSocketOf(%q, %q) = %v, want %v", tc.resource, tc.name, got, tc.want)
		}
	}
}

// TestPublishedOnceTheKubeletHasTheLists: until a kubelet has been sent
// every plugin's device list the manager is not published (the agent's
// readiness waits on it); once the kubelet has them it is.
func TestPublishedOnceTheKubeletHasTheLists(t *testing.T) {
	t.Parallel()
	dir, m := servingBeforeKubelet(t)
	gone, stop := context.WithCancel(context.Background())
	stop()
	if err := m.Published(gone); err == nil {
		t.Fatal("published while no kubelet has been sent a device list")
	}
	stub := kubeletstub.Start(t, dir)
	for _, r := range []string{"rdma/ib", "rdma/shared_ib"} {
		if _, err := stub.WaitList(r, wait, func([]*pluginapi.Device) bool { return true }); err != nil {
			t.Fatal(err)
		}
	}
	within, cancelWithin := context.WithTimeout(context.Background(), wait)
	defer cancelWithin()
	if err := m.Published(within); err != nil {
		t.Errorf("the kubelet has both lists: %v", err)
	}
}

// servingBeforeKubelet runs a Manager over the default pools in a fresh
// socket dir where no kubelet is yet, its retry period beyond any test's
// patience, and returns once every plugin serves; it stops with the test.
func servingBeforeKubelet(t *testing.T) (string, *Manager) {
	t.Helper()
	dir := t.TempDir()
	m := NewManager(Options{SocketDir: dir, Logger: testr.New(t), RetryPeriod: time.Hour},
		specs(resource.Build(config.Default(), testNode(), resource.Options{})))
	runForTest(t, m)
	servingPlugins(t, dir)
	return dir, m
}
