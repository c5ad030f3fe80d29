package nad

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/ibkube/ibkube/cni/multus"
	"github.com/ibkube/ibkube/cni/plugin"
	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/hca/selector"
	"github.com/ibkube/ibkube/internal/golden"
)

func TestRenderGolden(t *testing.T) {
	t.Parallel()
	ipoibMTU := IPoIB("ibkube-system", DefaultIPoIBRange)
	ipoibMTU.DelegateOptions = map[string]any{"mtu": 4092}
	ipoibMTU.IPAM.Exclude = []string{"192.168.0.0/24"}

	roce, err := PerHCA(Network{
		Name: "ibkube-roce", Namespace: "ibkube-system", Delegate: "macvlan",
		DelegateOptions: map[string]any{"mode": "bridge"},
		Parent:          plugin.ParentConf{LinkLayer: inventory.LinkLayerEthernet, Netdevs: []string{"rdma*"}},
		IPAM:            IPAM{Range: "10.200.0.0/16"},
	}, 16)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		golden string
		n      Network
	}{
		{"ipoib-default", IPoIB("ibkube-system", DefaultIPoIBRange)},
		{"ipoib-mtu-exclude", ipoibMTU},
		{"rdma-exclusive-ipoib-allocated", Network{
			Name: "ibkube-ipoib-exclusive", Namespace: "ibkube-system", Delegate: "ipoib",
			Parent:       plugin.ParentConf{Policy: plugin.PolicyAllocated, LinkLayer: inventory.LinkLayerInfiniBand},
			IPAM:         IPAM{Range: "192.168.0.0/16"},
			ResourceName: "rdma/ib",
		}},
		{"roce-0", roce[0]},
		{"roce-15", roce[15]},
		{"roce-host-device-allocated", Network{
			Name: "ibkube-roce-exclusive", Namespace: "ibkube-system", Delegate: "host-device",
			Parent: plugin.ParentConf{
				Policy: plugin.PolicyAllocated, LinkLayer: inventory.LinkLayerEthernet,
				Selector: &selector.Selector{Match: selector.Match{Vendors: []string{"15b3"}}},
			},
			IPAM:         IPAM{Type: "none"},
			ResourceName: "rdma/roce",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			t.Parallel()
			obj, err := Render(tt.n)
			if err != nil {
				t.Fatalf("Render() error = %v", err)
			}
			got, err := yaml.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", tt.golden+".yaml"), got)
			// The config alone, as the chart's spec.config must render it.
			golden.Check(t, filepath.Join("testdata", tt.golden+".config.json"), []byte(obj.Spec.Config))
		})
	}
}

func TestRangeChecks(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cidr, wantErr string
	}{
		{"192.168.0.0/16", ""},
		{"10.200.0.0/16", ""},
		{"fd00:ib::/64", "not a CIDR"},
		{"fd00:1b::/64", ""},
		{"172.16.0.0/16", "overlaps 172.16.0.0/16: Azure reserves it"},
		{"172.16.5.0/24", "overlaps 172.16.0.0/16"},
		{"172.0.0.0/8", "overlaps 172.16.0.0/16"},
		{"172.17.0.0/16", ""},
		{"169.254.0.0/20", "link-local"},
		{"192.168.1.1/16", "has host bits set; did you mean 192.168.0.0/16?"},
		{"", "is not a CIDR"},
	} {
		err := CheckRange(tt.cidr)
		if (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("CheckRange(%q) = %v, want error containing %q", tt.cidr, err, tt.wantErr)
		}
	}
	if _, err := Render(IPoIB("ns", "172.16.0.0/12")); err == nil || !strings.Contains(err.Error(), "ipam.range") {
		t.Errorf("Render() with a reserved range: error = %v, want an ipam.range error", err)
	}
}

func TestSplitRange(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cidr string
		n    int
		want []string
	}{
		{"10.224.0.0/16", 1, []string{"10.224.0.0/16"}},
		{"10.224.0.0/16", 3, []string{"10.224.0.0/18", "10.224.64.0/18", "10.224.128.0/18"}},
		{"10.224.0.0/16", 16, nil},
		{"fd00:1b::/48", 2, []string{"fd00:1b::/49", "fd00:1b:0:8000::/49"}},
	} {
		got, err := SplitRange(tt.cidr, tt.n)
		if err != nil {
			t.Fatalf("SplitRange(%s, %d) error = %v", tt.cidr, tt.n, err)
		}
		if len(got) != tt.n {
			t.Fatalf("SplitRange(%s, %d) = %d ranges", tt.cidr, tt.n, len(got))
		}
		if tt.want != nil {
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("SplitRange(%s, %d) (-want +got):\n%s", tt.cidr, tt.n, diff)
			}
		}
	}
	got, _ := SplitRange("10.224.0.0/16", 16)
	if got[15] != "10.224.240.0/20" {
		t.Errorf("SplitRange(/16, 16)[15] = %s, want 10.224.240.0/20", got[15])
	}
	if _, err := SplitRange("10.0.0.0/30", 4); err == nil {
		t.Error("SplitRange(/30, 4) succeeded, want too small")
	}
}

func TestAttachmentsMergeInHCAOrder(t *testing.T) {
	t.Parallel()
	add := append([]multus.Network{{Namespace: "ibkube-system", Name: DefaultIPoIBName, Interface: "net1"}},
		Attachments("ibkube-system", "ibkube-roce", 3, "rdma")...)
	got, _, err := multus.Merge("team/storage", add, "team")
	if err != nil {
		t.Fatal(err)
	}
	want := "team/storage, ibkube-system/ibkube-ipoib@net1, ibkube-system/ibkube-roce-0@rdma0, ibkube-system/ibkube-roce-1@rdma1, ibkube-system/ibkube-roce-2@rdma2"
	if got != want {
		t.Errorf("Merge() = %q, want %q", got, want)
	}
}

func TestConfigRejectsBadNetworks(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		n       Network
		wantErr string
	}{
		{Network{Name: "x", Delegate: "bridge", IPAM: IPAM{Range: "10.1.0.0/16"}}, `delegate.type "bridge" is not supported`},
		{Network{Name: "x", Delegate: "ipoib", IPAM: IPAM{Type: "dhcp"}}, `ipam.type "dhcp"`},
		{Network{Name: "x", Delegate: "ipoib", IPAM: IPAM{Range: "10.1.0.0/16", Exclude: []string{"x"}}}, `ipam.exclude[0] "x" is not a CIDR`},
		{Network{Delegate: "ipoib"}, "name is empty"},
	} {
		if _, err := Config(tt.n); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("Config(%+v) error = %v, want %q", tt.n, err, tt.wantErr)
		}
	}
	if _, err := PerHCA(Network{Name: "r", Delegate: "macvlan", IPAM: IPAM{Range: "10.0.0.0/30"}}, 16); err == nil {
		t.Error("PerHCA() with a tiny range succeeded")
	}
}
