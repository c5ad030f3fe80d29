package inventory

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDecideGIDIndex(t *testing.T) {
	t.Parallel()
	const (
		ll = "fe80:0000:0000:0000:0a00:17ff:fe1a:2b3c"
		v4 = "0000:0000:0000:0000:0000:ffff:c0a8:0105"
		v6 = "2603:c020:4008:b500:0000:0000:0000:0012"
	)
	connectX := []GIDEntry{{0, ll, GIDTypeRoCEv1, "rdma0"}, {1, ll, GIDTypeRoCEv2, "rdma0"}, {2, v4, GIDTypeRoCEv1, "rdma0"}, {3, v4, GIDTypeRoCEv2, "rdma0"}}
	roce := func(name string, gids ...GIDEntry) HCA {
		return HCA{Name: name, Ports: []Port{{Number: 1, LinkLayer: LinkLayerEthernet, GIDs: gids}}}
	}
	ib := HCA{Name: "mlx5_9", Ports: []Port{{Number: 1, LinkLayer: LinkLayerInfiniBand}}}
	for _, tc := range []struct {
		name string
		hcas []HCA
		want GIDDecision
	}{
		{"InfiniBand only: nothing to say", []HCA{ib}, GIDDecision{}},
		{"two OCI GPU ports agree on 3", []HCA{roce("mlx5_0", connectX...), roce("mlx5_1", connectX...)}, GIDDecision{Set: true, Index: 3, RoCE: true}},
		{"ports disagree", []HCA{roce("mlx5_0", connectX...), roce("mlx5_1", connectX[0], connectX[1], GIDEntry{4, v4, GIDTypeRoCEv1, "m"}, GIDEntry{5, v4, GIDTypeRoCEv2, "m"})},
			GIDDecision{RoCE: true, Reason: "the RoCE v2 IPv4 GID index differs between ports: 3 on mlx5_0/1; 5 on mlx5_1/1 (NCCL takes one index for all)"}},
		{"a port without an IPv4 GID", []HCA{roce("mlx5_0", connectX...), roce("mlx5_1", connectX[0], connectX[1], GIDEntry{2, v6, GIDTypeRoCEv1, "n"}, GIDEntry{3, v6, GIDTypeRoCEv2, "n"})},
			GIDDecision{RoCE: true, Reason: "no RoCE v2 GID of an IPv4 address on mlx5_1/1 (the port's netdev, or the pod's interface on it, holds no IPv4 address)"}},
		{"an unread table", []HCA{{Name: "mlx5_0", Ports: []Port{{Number: 1, LinkLayer: LinkLayerEthernet, GIDError: "GID table longer than 1024 entries"}}}},
			GIDDecision{RoCE: true, Reason: "GID table not read on mlx5_0/1 (GID table longer than 1024 entries)"}},
	} {
		if d := cmp.Diff(tc.want, DecideGIDIndex(tc.hcas)); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, d)
		}
	}
}
