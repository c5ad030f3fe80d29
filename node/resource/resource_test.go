package resource

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/hca/selector"
	"github.com/ibkube/ibkube/node/config"
)

// ndv5 is an ND H100 v5-like node: eight IB VFs, four per NUMA node, and an
// Ethernet mlx5_8 with unknown NUMA node.
func ndv5() inventory.Node {
	var n inventory.Node
	for i := range 9 {
		h := inventory.HCA{
			Name: fmt.Sprintf("mlx5_%d", i), PCIAddress: fmt.Sprintf("01%02x:00:00.0", i+1),
			VendorID: "15b3", DeviceID: "101e", NUMANode: i / 4, Healthy: true,
			Ports: []inventory.Port{{Number: 1, State: "ACTIVE", PhysState: "LinkUp", LinkLayer: "InfiniBand", Netdev: fmt.Sprintf("ib%d", i)}},
			CharDevices: []inventory.CharDevice{
				{Name: fmt.Sprintf("uverbs%d", i), Present: true},
				{Name: fmt.Sprintf("umad%d", i), Port: 1, Present: true},
				{Name: fmt.Sprintf("issm%d", i), Port: 1, Present: true},
			},
		}
		if i == 8 {
			h.NUMANode = -1
			h.DeviceID = "1016"
			h.Ports[0].LinkLayer = "Ethernet"
			h.Ports[0].Netdev = "eth1"
		}
		n.HCAs = append(n.HCAs, h)
	}
	n.RDMACM = &inventory.CharDevice{Name: "rdma_cm", Present: true}
	return n
}

func numa(ids ...int64) *pluginapi.TopologyInfo {
	t := &pluginapi.TopologyInfo{}
	for _, id := range ids {
		t.Nodes = append(t.Nodes, &pluginapi.NUMANode{ID: id})
	}
	return t
}

func TestBuildDefaultPools(t *testing.T) {
	t.Parallel()
	m := Build(config.Default(), ndv5(), Options{HostDevRoot: "/dev"})
	shared, excl := m.Pool("rdma/shared_ib"), m.Pool("rdma/ib")
	if shared == nil || excl == nil {
		t.Fatalf("pools = %+v", m.Pools)
	}
	if got := len(shared.Devices()); got != 63 {
		t.Errorf("shared devices = %d, want 63", got)
	}
	if d := cmp.Diff(&pluginapi.Device{ID: "slot-0", Health: "Healthy", Topology: numa(0, 1)}, shared.Devices()[0], protocmp.Transform()); d != "" {
		t.Errorf("slot-0 (-want +got):\n%s", d)
	}
	devs := excl.Devices()
	if len(devs) != 8 {
		t.Fatalf("exclusive devices = %d, want 8 (mlx5_8 is Ethernet)", len(devs))
	}
	if d := cmp.Diff(&pluginapi.Device{ID: "mlx5_5", Health: "Healthy", Topology: numa(1)}, devs[5], protocmp.Transform()); d != "" {
		t.Errorf("mlx5_5 (-want +got):\n%s", d)
	}
	last := m.HCAs[8]
	if len(last.Resources) != 0 {
		t.Errorf("mlx5_8 resources = %v", last.Resources)
	}
	want := "excluded: rdma/shared_ib: pools[0].selector.linkLayers [InfiniBand] does not match Ethernet; rdma/ib: pools[1].selector.linkLayers [InfiniBand] does not match Ethernet"
	if got := last.Reason(); got != want {
		t.Errorf("mlx5_8 reason = %q, want %q", got, want)
	}
	if d := cmp.Diff([]string{"rdma/shared_ib", "rdma/ib"}, m.HCAs[0].Resources); d != "" {
		t.Errorf("mlx5_0 resources (-want +got):\n%s", d)
	}
}

func TestOverlapSameMode(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.Pools = []config.Pool{
		{ResourceName: "rdma/a", Mode: "exclusive", Selector: config.DefaultSelector()},
		{ResourceName: "rdma/b", Mode: "exclusive"},
	}
	m := Build(cfg, ndv5(), Options{})
	if got := len(m.Pool("rdma/b").HCAs); got != 1 {
		t.Errorf("rdma/b took %d HCAs, want only mlx5_8", got)
	}
	if got, want := m.HCAs[0].Excluded, []string{"rdma/b: already in exclusive pool rdma/a"}; !cmp.Equal(got, want) {
		t.Errorf("mlx5_0 excluded = %q, want %q", got, want)
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	n := ndv5()
	for i := range n.HCAs {
		n.HCAs[i].Healthy = false
		n.HCAs[i].HealthReason = "port 1 DOWN"
	}
	n.HCAs[3].Healthy = true
	m := Build(config.Default(), n, Options{})
	for _, d := range m.Pool("rdma/shared_ib").Devices() {
		if d.Health != "Healthy" {
			t.Fatalf("shared %s = %s with one healthy HCA", d.ID, d.Health)
		}
	}
	for i, d := range m.Pool("rdma/ib").Devices() {
		if want := health(i == 3); d.Health != want {
			t.Errorf("exclusive %s = %s, want %s", d.ID, d.Health, want)
		}
	}
	n.HCAs[3].Healthy = false
	m = Build(config.Default(), n, Options{})
	if d := m.Pool("rdma/shared_ib").Devices()[0]; d.Health != "Unhealthy" {
		t.Errorf("shared with no healthy HCA = %s", d.Health)
	}
	if _, err := m.Pool("rdma/shared_ib").Allocate([]string{"slot-0"}); err == nil || err.Error() != "rdma/shared_ib: no healthy HCA on this node" {
		t.Errorf("Allocate with no healthy HCA: %v", err)
	}
}

func TestAllocate(t *testing.T) {
	t.Parallel()
	n := ndv5()
	n.HCAs[2].Healthy = false
	n.HCAs[1].CharDevices[1].Present = false // umad1 missing
	opts := Options{HostDevRoot: "/host/dev", Profile: Profile{
		Name: "ndv5", TopologyFile: "/var/lib/ibkube/topology/ndv5.xml",
	}}
	m := Build(config.Default(), n, opts)
	spec := func(name string) DeviceNode {
		return DeviceNode{ContainerPath: "/dev/infiniband/" + name, HostPath: "/host/dev/infiniband/" + name, Permissions: "rw"}
	}
	mount := []Mount{{ContainerPath: TopologyContainerPath, HostPath: "/var/lib/ibkube/topology/ndv5.xml"}}
	tests := []struct {
		name     string
		resource string
		ids      []string
		want     Grant
		wantErr  string
	}{
		{
			name: "exclusive gets only its HCAs", resource: "rdma/ib", ids: []string{"mlx5_1", "mlx5_0"},
			want: Grant{
				Env: []EnvVar{
					{"NCCL_IB_HCA", "=mlx5_1:1,mlx5_0:1"}, {"NCCL_TOPO_FILE", TopologyContainerPath}, {"UCX_NET_DEVICES", "mlx5_1:1,mlx5_0:1"},
				},
				// Least privilege: verbs and rdma_cm only, no umad/issm.
				Devices: []DeviceNode{spec("uverbs1"), spec("uverbs0"), spec("rdma_cm")},
				Mounts:  mount,
			},
		},
		{
			name: "shared gets every healthy selected HCA", resource: "rdma/shared_ib", ids: []string{"slot-62"},
			want: Grant{
				Env: []EnvVar{
					{"NCCL_IB_HCA", "=mlx5_0:1,mlx5_1:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1"},
					{"NCCL_TOPO_FILE", TopologyContainerPath},
					{"UCX_NET_DEVICES", "mlx5_0:1,mlx5_1:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1"},
				},
				// mlx5_1 lacks umad1, which this pool does not hand out:
				// it stays in.
				Devices: []DeviceNode{
					spec("uverbs0"), spec("uverbs1"), spec("uverbs3"), spec("uverbs4"),
					spec("uverbs5"), spec("uverbs6"), spec("uverbs7"), spec("rdma_cm"),
				},
				Mounts: mount,
			},
		},
		{name: "exclusive unknown device", resource: "rdma/ib", ids: []string{"mlx5_8"}, wantErr: `rdma/ib: unknown device "mlx5_8"; this node offers mlx5_0, mlx5_1, mlx5_2, mlx5_3, mlx5_4, mlx5_5, mlx5_6, mlx5_7`},
		{name: "shared unknown slot", resource: "rdma/shared_ib", ids: []string{"slot-63"}, wantErr: `rdma/shared_ib: unknown device "slot-63"; this node offers slot-0 to slot-62`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := m.Pool(tc.resource).Allocate(tc.ids)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("Allocate error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("Allocate (-want +got):\n%s", d)
			}
		})
	}
}

func TestPreferred(t *testing.T) {
	t.Parallel()
	n := ndv5()
	// Make it NDv4-like for some cases: 4 NUMA nodes with 2 HCAs each.
	n4 := ndv5()
	for i := range 8 {
		n4.HCAs[i].NUMANode = i / 2
	}
	n4.HCAs[7].NUMANode = -1
	all := []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"}
	tests := []struct {
		name      string
		node      inventory.Node
		available []string
		must      []string
		size      int
		want      []string
	}{
		{"four fit on one NUMA node", n, all, nil, 4, []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"}},
		{"best fit leaves the whole NUMA node", n, []string{"mlx5_0", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_1"}, nil, 2, []string{"mlx5_0", "mlx5_1"}},
		{"must-include pulls its NUMA node first", n, all, []string{"mlx5_6"}, 3, []string{"mlx5_6", "mlx5_4", "mlx5_5"}},
		{"spill to the largest group", n, []string{"mlx5_0", "mlx5_4", "mlx5_5", "mlx5_6"}, nil, 4, []string{"mlx5_4", "mlx5_5", "mlx5_6", "mlx5_0"}},
		{"all", n, all, nil, 8, all},
		{"unknown NUMA last", n4, []string{"mlx5_7", "mlx5_6", "mlx5_0"}, nil, 2, []string{"mlx5_0", "mlx5_6"}},
		{"ndv4 pairs", n4, all, nil, 2, []string{"mlx5_0", "mlx5_1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := Build(config.Default(), tc.node, Options{})
			got, err := m.Pool("rdma/ib").Preferred(tc.available, tc.must, tc.size)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("Preferred (-want +got):\n%s", d)
			}
		})
	}
}

// TestAllocateVPIPorts: on a card running port 1 InfiniBand and port 2
// Ethernet, the IB pool names only port 1 to NCCL.
func TestAllocateVPIPorts(t *testing.T) {
	t.Parallel()
	n := ndv5()
	n.HCAs[0].Ports = append(n.HCAs[0].Ports, inventory.Port{Number: 2, State: "ACTIVE", PhysState: "LinkUp", LinkLayer: "Ethernet"})
	cfg := config.Default()
	cfg.Pools = append(cfg.Pools[1:], config.Pool{ResourceName: "rdma/any", Mode: "shared", Slots: 1, Selector: selector.Selector{Match: selector.Match{Names: []string{"mlx5_0"}}}})
	m := Build(cfg, n, Options{})
	got, err := m.Pool("rdma/ib").Allocate([]string{"mlx5_0"})
	if err != nil {
		t.Fatal(err)
	}
	if got.EnvMap()["NCCL_IB_HCA"] != "=mlx5_0:1" {
		t.Errorf("NCCL_IB_HCA = %q, want =mlx5_0:1", got.EnvMap()["NCCL_IB_HCA"])
	}
	got, err = m.Pool("rdma/any").Allocate([]string{"slot-0"})
	if err != nil {
		t.Fatal(err)
	}
	if got.EnvMap()["NCCL_IB_HCA"] != "=mlx5_0:1,mlx5_0:2" {
		t.Errorf("pool without linkLayers: NCCL_IB_HCA = %q, want both ports", got.EnvMap()["NCCL_IB_HCA"])
	}
}

// TestManagementDevices: umad and issm reach a container only from a pool
// that opts into them, and only such a pool counts an HCA unhealthy when one
// is missing.
func TestManagementDevices(t *testing.T) {
	t.Parallel()
	n := ndv5()
	n.HCAs[1].CharDevices[1].Present = false          // umad1 missing from the dev root
	n.HCAs[2].CharDevices = n.HCAs[2].CharDevices[:1] // ib_umad announces nothing for mlx5_2
	cfg := config.Default()
	cfg.Pools = []config.Pool{
		{ResourceName: "rdma/shared_ib", Mode: config.ModeShared, Slots: 2, Selector: config.DefaultSelector()},
		{ResourceName: "example.com/ib-diag", Mode: config.ModeExclusive, Selector: config.DefaultSelector(), ManagementDevices: []string{"umad"}},
	}
	m := Build(cfg, n, Options{HostDevRoot: "/dev"})
	spec := func(name string) DeviceNode {
		return DeviceNode{ContainerPath: "/dev/infiniband/" + name, HostPath: "/dev/infiniband/" + name, Permissions: "rw"}
	}

	diag := m.Pool("example.com/ib-diag")
	got, err := diag.Allocate([]string{"mlx5_0"})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]DeviceNode{spec("uverbs0"), spec("umad0"), spec("rdma_cm")}, got.Devices); d != "" {
		t.Errorf("opted-in pool devices (-want +got):\n%s", d)
	}
	health := map[string]string{}
	for _, d := range diag.Devices() {
		health[d.ID] = d.Health
	}
	for id, want := range map[string]string{"mlx5_0": "Healthy", "mlx5_1": "Unhealthy", "mlx5_2": "Unhealthy", "mlx5_3": "Healthy"} {
		if health[id] != want {
			t.Errorf("ib-diag %s = %s, want %s", id, health[id], want)
		}
	}
	if d := m.Pool("rdma/shared_ib").Devices()[0]; d.Health != "Healthy" {
		t.Errorf("shared pool without umad: %s", d.Health)
	}
	wantReason := map[int]string{
		1: "example.com/ib-diag: missing from /dev/infiniband: umad1",
		2: "example.com/ib-diag: no umad char device in sysfs (is ib_umad loaded?)",
	}
	for i, want := range wantReason {
		if s := m.HCAs[i]; s.Healthy() || s.Reason() != want {
			t.Errorf("%s: healthy=%v reason=%q, want false %q", s.HCA.Name, s.Healthy(), s.Reason(), want)
		}
	}
	if s := m.HCAs[0]; !s.Healthy() || s.Reason() != "" {
		t.Errorf("mlx5_0: healthy=%v reason=%q", s.Healthy(), s.Reason())
	}
}

// TestReasonNamesTheCause: an HCA whose attributes could not be read is also
// refused by the selectors (its vendor is empty); the cause comes first.
func TestReasonNamesTheCause(t *testing.T) {
	t.Parallel()
	n := inventory.Node{HCAs: []inventory.HCA{{
		Name: "mlx5_0", NUMANode: -1, HealthReason: "cannot read device/vendor: permission denied",
	}}}
	m := Build(config.Default(), n, Options{})
	want := "cannot read device/vendor: permission denied; excluded: " +
		`rdma/shared_ib: pools[0].selector.vendors [15b3] does not match ""; rdma/ib: pools[1].selector.vendors [15b3] does not match ""`
	if got := m.HCAs[0].Reason(); got != want {
		t.Errorf("reason = %q, want %q", got, want)
	}
}
