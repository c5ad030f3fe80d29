package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/hca/selector"
	"github.com/ibkube/ibkube/internal/testing/golden"
)

// scanned caches fixture scans (JSON, so each caller gets its own copy).
var scanned sync.Map

// scanFixture builds the named node fixture and scans it with discovery.
func scanFixture(t *testing.T, name string) inventory.Node {
	t.Helper()
	if b, ok := scanned.Load(name); ok {
		var node inventory.Node
		if err := json.Unmarshal(b.([]byte), &node); err != nil {
			t.Fatal(err)
		}
		return node
	}
	dir := fixture.BuildTemp(t, name)
	node, err := discovery.NewScanner(discovery.Options{
		SysfsRoot: fixture.SysfsRoot(dir), DevRoot: fixture.DevRoot(dir),
	}).Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(node)
	if err != nil {
		t.Fatal(err)
	}
	scanned.Store(name, b)
	return node
}

func intp(i int) *int { return &i }

func TestResolveOnFixtures(t *testing.T) {
	t.Parallel()
	nodes := map[string]inventory.Node{}
	for _, n := range []string{fixture.NDv5, fixture.OCIH100, fixture.Broken} {
		nodes[n] = scanFixture(t, n)
	}
	ib := inventory.LinkLayerInfiniBand
	eth := inventory.LinkLayerEthernet
	tests := []struct {
		name      string
		node      string
		parent    ParentConf
		req       Request
		want      string // netdev
		wantHCA   string
		wantError string
		transient bool
	}{
		{name: "ndv5 first active IPoIB", node: fixture.NDv5, parent: ParentConf{LinkLayer: ib}, want: "ibP257p0s0", wantHCA: "mlx5_0"},
		{name: "ndv5 by index 7 is the last IB VF", node: fixture.NDv5, parent: ParentConf{Policy: PolicyIndex, Index: intp(7), LinkLayer: ib}, want: "ibP264p0s0", wantHCA: "mlx5_7"},
		{name: "ndv5 index 8 out of range (the Ethernet mlx5_8 is not a candidate)", node: fixture.NDv5, parent: ParentConf{Policy: PolicyIndex, Index: intp(8), LinkLayer: ib}, wantError: "parent index 8 is out of range: this node has 8 candidate(s)"},
		{name: "ndv5 allocated HCA from Multus deviceID", node: fixture.NDv5, parent: ParentConf{LinkLayer: ib}, req: Request{DeviceID: "mlx5_3"}, want: "ibP260p0s0", wantHCA: "mlx5_3"},
		{name: "ndv5 allocated by PCI address (SR-IOV device plugin IDs)", node: fixture.NDv5, parent: ParentConf{Policy: PolicyAllocated, LinkLayer: ib}, req: Request{DeviceID: "0106:00:00.0"}, want: "ibP262p0s0", wantHCA: "mlx5_5"},
		{name: "ndv5 allocated Ethernet device is not an IPoIB candidate", node: fixture.NDv5, parent: ParentConf{LinkLayer: ib}, req: Request{DeviceID: "mlx5_8"}, wantError: `allocated device "mlx5_8" has no candidate port`},
		{name: "ndv5 allocated policy without a device says how to get one", node: fixture.NDv5, parent: ParentConf{Policy: PolicyAllocated, LinkLayer: ib}, wantError: "k8s.v1.cni.cncf.io/resourceName"},
		{name: "ndv5 CNI arg index under auto", node: fixture.NDv5, parent: ParentConf{LinkLayer: ib}, req: Request{Index: intp(2)}, want: "ibP259p0s0", wantHCA: "mlx5_2"},
		{name: "ndv5 RoCE wanted: only the accelerated-networking port", node: fixture.NDv5, parent: ParentConf{LinkLayer: eth}, want: "enP23084s1", wantHCA: "mlx5_8"},
		{name: "oci first RoCE port", node: fixture.OCIH100, parent: ParentConf{LinkLayer: eth, Netdevs: []string{"rdma*"}}, want: "rdma0", wantHCA: "mlx5_0"},
		{name: "oci index 2 skips the front-end eth0 (netdev filter)", node: fixture.OCIH100, parent: ParentConf{Policy: PolicyIndex, Index: intp(2), Netdevs: []string{"rdma*"}}, want: "rdma2", wantHCA: "mlx5_3"},
		{name: "oci index 15 is the sixteenth GPU-fabric port", node: fixture.OCIH100, parent: ParentConf{Policy: PolicyIndex, Index: intp(15), Netdevs: []string{"rdma*"}}, want: "rdma15", wantHCA: "mlx5_17"},
		{
			name: "oci selector excludes the front-end HCAs by PCI address", node: fixture.OCIH100,
			parent: ParentConf{Policy: PolicyIndex, Index: intp(2), Selector: &selector.Selector{Exclude: []selector.Match{{PCIAddresses: []string{"0000:1f:00.0", "0000:9f:00.0"}}}}},
			want:   "rdma2", wantHCA: "mlx5_3",
		},
		{name: "oci has no IPoIB", node: fixture.OCIH100, parent: ParentConf{LinkLayer: ib}, wantError: "no candidate parent interface on this node: want a port with a netdev, link layer InfiniBand", transient: true},
		{name: "broken node: first active skips nothing (mlx5_0 is fine)", node: fixture.Broken, parent: ParentConf{LinkLayer: ib}, want: "ibP257p0s0", wantHCA: "mlx5_0"},
		{name: "broken node: index 1 is the DOWN port, retry later", node: fixture.Broken, parent: ParentConf{Policy: PolicyIndex, Index: intp(1), LinkLayer: ib}, wantError: "index 1 resolves to ibP258p0s0 (mlx5_1 port 1), whose port is DOWN, not ACTIVE", transient: true},
		{name: "broken node: index 1 with allowInactive", node: fixture.Broken, parent: ParentConf{Policy: PolicyIndex, Index: intp(1), LinkLayer: ib, AllowInactive: true}, want: "ibP258p0s0", wantHCA: "mlx5_1"},
		{name: "broken node: allocated DOWN HCA", node: fixture.Broken, parent: ParentConf{LinkLayer: ib}, req: Request{DeviceID: "mlx5_1"}, wantError: "whose port is DOWN", transient: true},
		{name: "broken node: missing uverbs does not matter for IPoIB", node: fixture.Broken, parent: ParentConf{LinkLayer: ib}, req: Request{DeviceID: "mlx5_2"}, want: "ibP259p0s0", wantHCA: "mlx5_2"},
		{name: "empty node", node: "", parent: ParentConf{}, wantError: "no RDMA device found", transient: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Resolve(nodes[tt.node], tt.parent, tt.req)
			if tt.wantError != "" {
				re, ok := err.(*ResolveError)
				if !ok || !strings.Contains(err.Error(), tt.wantError) {
					t.Fatalf("Resolve() error = %v, want a *ResolveError containing %q", err, tt.wantError)
				}
				if re.Transient != tt.transient {
					t.Errorf("Resolve() transient = %v, want %v", re.Transient, tt.transient)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve() error = %v", err)
			}
			if got.Netdev != tt.want || got.HCA != tt.wantHCA {
				t.Errorf("Resolve() = %s on %s, want %s on %s", got.Netdev, got.HCA, tt.want, tt.wantHCA)
			}
		})
	}
}

// TestCandidateOrderIsHCAAligned: per-HCA networks (index 0..N-1) map to
// HCAs in PCI order whatever the kernel's mlx5_N numbering and port states.
func TestCandidateOrderIsHCAAligned(t *testing.T) {
	t.Parallel()
	node := scanFixture(t, fixture.NDv5)
	// Renumber as a boot where the accelerated-networking NIC came first.
	for i := range node.HCAs {
		node.HCAs[i].Name = map[bool]string{true: "mlx5_0", false: "mlx5_" + string(rune('1'+i))}[node.HCAs[i].PCIAddress == "5a2c:00:02.0"]
	}
	node.HCAs[3].Ports[0].State = "DOWN"
	var got []string
	for _, c := range Candidates(node, ParentConf{LinkLayer: inventory.LinkLayerInfiniBand}) {
		got = append(got, c.PCIAddress+"="+c.Netdev)
	}
	want := []string{
		"0101:00:00.0=ibP257p0s0", "0102:00:00.0=ibP258p0s0", "0103:00:00.0=ibP259p0s0", "0104:00:00.0=ibP260p0s0",
		"0105:00:00.0=ibP261p0s0", "0106:00:00.0=ibP262p0s0", "0107:00:00.0=ibP263p0s0", "0108:00:00.0=ibP264p0s0",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Candidates() order (-want +got):\n%s", diff)
	}
}

// TestDelegateConfigGolden renders the delegate config for each fixture
// and delegate; the files under testdata/delegate are what the real
// plugin receives on stdin.
func TestDelegateConfigGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		fixture  string
		config   string
		deviceID string
	}{
		{name: "ndv5-ipoib-auto", fixture: fixture.NDv5, config: `{
			"cniVersion": "1.0.0", "name": "ibkube-ipoib", "type": "ibkube-cni",
			"parent": {"policy": "auto"},
			"delegate": {"type": "ipoib"},
			"ipam": {"type": "whereabouts", "range": "10.200.0.0/16"}}`},
		{name: "ndv5-ipoib-allocated", fixture: fixture.NDv5, deviceID: "mlx5_6", config: `{
			"cniVersion": "1.0.0", "name": "ibkube-ipoib", "type": "ibkube-cni",
			"parent": {"policy": "allocated"},
			"delegate": {"type": "ipoib", "mtu": 4092},
			"ipam": {"type": "whereabouts", "range": "10.200.0.0/16"},
			"runtimeConfig": {"mac": "00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:01"}}`},
		{name: "broken-ipoib-first-active", fixture: fixture.Broken, config: `{
			"cniVersion": "0.4.0", "name": "ibkube-ipoib", "type": "ibkube-cni",
			"delegate": {"type": "ipoib", "name": "renamed"},
			"ipam": {"type": "whereabouts", "range": "10.200.0.0/16", "exclude": ["10.200.0.0/24"]}}`},
		{name: "ndv5-ipoib-index-no-ipam", fixture: fixture.NDv5, config: `{
			"cniVersion": "1.0.0", "name": "ibkube-ipoib-4", "type": "ibkube-cni",
			"parent": {"policy": "index", "index": 4},
			"delegate": {"type": "ipoib"}}`},
		{name: "oci-macvlan-index-3", fixture: fixture.OCIH100, config: `{
			"cniVersion": "1.0.0", "name": "ibkube-roce-3", "type": "ibkube-cni",
			"parent": {"policy": "index", "index": 3, "netdevs": ["rdma*"]},
			"delegate": {"type": "macvlan", "mode": "bridge"},
			"ipam": {"type": "whereabouts", "range": "10.201.48.0/20"}}`},
		{name: "oci-host-device-allocated", fixture: fixture.OCIH100, deviceID: "0000:86:00.1", config: `{
			"cniVersion": "1.0.0", "name": "ibkube-roce-exclusive", "type": "ibkube-cni",
			"parent": {"policy": "allocated", "linkLayer": "Ethernet"},
			"delegate": {"type": "host-device"},
			"ipam": {"type": "whereabouts", "range": "10.202.0.0/16"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			raw := []byte(tt.config)
			if tt.deviceID != "" {
				var m map[string]any
				if err := json.Unmarshal(raw, &m); err != nil {
					t.Fatal(err)
				}
				m["deviceID"] = tt.deviceID // as Multus adds it
				raw, _ = json.Marshal(m)
			}
			conf, err := ParseConfig(raw)
			if err != nil {
				t.Fatalf("ParseConfig() error = %v", err)
			}
			req, err := conf.request()
			if err != nil {
				t.Fatal(err)
			}
			parent, err := Resolve(scanFixture(t, tt.fixture), conf.EffectiveParent(), req)
			if err != nil {
				t.Fatalf("Resolve() error = %v", err)
			}
			got, err := conf.DelegateConfig(parent, false)
			if err != nil {
				t.Fatalf("DelegateConfig() error = %v", err)
			}
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, got, "", "  "); err != nil {
				t.Fatal(err)
			}
			pretty.WriteByte('\n')
			golden.Check(t, filepath.Join("testdata", "delegate", tt.name+".json"), pretty.Bytes())
		})
	}
}
