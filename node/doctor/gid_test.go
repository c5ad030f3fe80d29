package doctor

import (
	"strings"
	"testing"

	"github.com/ibkube/ibkube/hca/inventory"
)

func TestCheckGID(t *testing.T) {
	t.Parallel()
	const v4 = "0000:0000:0000:0000:0000:ffff:c0a8:0105"
	port := func(gids ...inventory.GIDEntry) []inventory.Port {
		return []inventory.Port{{Number: 1, LinkLayer: inventory.LinkLayerEthernet, GIDs: gids}}
	}
	at3 := port(inventory.GIDEntry{Index: 3, GID: v4, Type: inventory.GIDTypeRoCEv2})
	node := inventory.Node{HCAs: []inventory.HCA{
		{Name: "mlx5_0", Ports: at3}, {Name: "mlx5_1", Ports: at3},
		{Name: "mlx5_2", Ports: port()}, // front-end, not advertised
		{Name: "mlx5_3", Ports: port(inventory.GIDEntry{Index: 3, GID: "fe80:0000:0000:0000:0a00:17ff:fe1a:2b3c", Type: inventory.GIDTypeRoCEv2})},
	}}
	for _, tc := range []struct {
		name       string
		advertised []string
		status     Status
		message    string
	}{
		{"ports agree", []string{"mlx5_0", "mlx5_1"}, Pass, "GID at index 3: NCCL >= 2.21.5 and UCX pick it themselves"},
		{"a port without an IPv4 GID", []string{"mlx5_0", "mlx5_3"}, Warn, "no RoCE v2 GID of an IPv4 address on mlx5_3/1"},
		{"nothing advertised", nil, Pass, "no advertised RoCE port"},
	} {
		res := checkGID(Facts{Node: node, Advertised: []Advertised{{Resource: "rdma/roce", HCAs: tc.advertised}}})
		if res.Status != tc.status || !strings.Contains(res.Message, tc.message) {
			t.Errorf("%s: %s %q, want %s containing %q", tc.name, res.Status, res.Message, tc.status, tc.message)
		}
	}
}
