package discovery_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/hca/inventory"
)

// TestGIDFixtures: the fixtures' GID tables give the RoCE v2 IPv4 GID index
// their sources document: 3 on every OCI BM.GPU.H100.8 GPU port (the
// index oci-hpc-oke sets, ConnectX layout 0/1 link-local v1/v2, 2/3 IPv4
// v1/v2), 3 on the front-end port that also holds an IPv6 address, 7 past a
// sparse table on the port whose IPv4 address is a macvlan's, none on
// Azure's accelerated-networking VF (link-local only).
func TestGIDFixtures(t *testing.T) {
	t.Parallel()
	want := map[string]map[string]string{
		fixture.OCIH100: {"mlx5_2": "3", "mlx5_11": "7"},
		fixture.NDv5:    {"mlx5_8": "none"},
	}
	for fx, special := range want {
		node, err := newScanner(t, fixture.BuildTemp(t, fx), nil).Scan(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		roce := 0
		for _, h := range node.HCAs {
			for _, p := range h.Ports {
				if p.LinkLayer != inventory.LinkLayerEthernet {
					continue
				}
				roce++
				got := "none"
				if i, ok := p.RoCEv2IPv4GIDIndex(); ok {
					got = fmt.Sprint(i)
					if p.RoCEv2IPv4GID == nil || *p.RoCEv2IPv4GID != i {
						t.Errorf("%s %s: the JSON field says %v, the table %d", fx, h.Name, p.RoCEv2IPv4GID, i)
					}
				}
				w, ok := special[h.Name]
				if !ok {
					w = "3"
				}
				if got != w || p.GIDError != "" {
					t.Errorf("%s %s/%d: RoCE v2 IPv4 GID index %s (error %q), want %s; table %+v", fx, h.Name, p.Number, got, p.GIDError, w, p.GIDs)
				}
			}
		}
		if fx == fixture.OCIH100 && roce != 18 {
			t.Errorf("%s: %d RoCE ports, want 18", fx, roce)
		}
	}
}

// gidRow is one entry of a test GID table; the zero value an unused one.
type gidRow struct{ gid, typ, ndev string }

// gidPort writes a port directory with a GID table; an unused entry reads
// as the zero GID and has no attributes.
func gidPort(t *testing.T, entries ...gidRow) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"gids", "gid_attrs/types", "gid_attrs/ndevs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, v string) {
		if err := os.WriteFile(filepath.Join(dir, p), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, e := range entries {
		if e.gid == "" {
			write(fmt.Sprintf("gids/%d", i), "0000:0000:0000:0000:0000:0000:0000:0000")
			continue
		}
		write(fmt.Sprintf("gids/%d", i), e.gid)
		write(fmt.Sprintf("gid_attrs/types/%d", i), e.typ)
		write(fmt.Sprintf("gid_attrs/ndevs/%d", i), e.ndev)
	}
	return dir
}

const (
	ll    = "fe80:0000:0000:0000:0a00:17ff:fe1a:2b3c"
	v4    = "0000:0000:0000:0000:0000:ffff:c0a8:0105" // ::ffff:192.168.1.5
	v6    = "2603:c020:4008:b500:0000:0000:0000:0012"
	v4b   = "0000:0000:0000:0000:0000:ffff:0a00:014d" // ::ffff:10.0.1.77
	roce1 = "IB/RoCE v1"
	roce2 = "RoCE v2"
)

// TestReadGIDs: GID tables as the kernel lays them out give the right
// index or none.
func TestReadGIDs(t *testing.T) {
	t.Parallel()
	e := func(gid, typ, ndev string) gidRow { return gidRow{gid, typ, ndev} }
	var u gidRow
	for _, tc := range []struct {
		name    string
		entries []gidRow
		want    string // the index, "none", or "error"
	}{
		{"ConnectX layout", []gidRow{e(ll, roce1, "rdma0"), e(ll, roce2, "rdma0"), e(v4, roce1, "rdma0"), e(v4, roce2, "rdma0"), u, u}, "3"},
		{"IPv6 before IPv4", []gidRow{e(ll, roce1, "eth0"), e(ll, roce2, "eth0"), e(v6, roce1, "eth0"), e(v6, roce2, "eth0"), e(v4, roce1, "eth0"), e(v4, roce2, "eth0")}, "5"},
		{"sparse, then a macvlan's IPv4", []gidRow{e(ll, roce1, "eth1"), e(ll, roce2, "eth1"), u, u, e(ll, roce1, "macvlan1"), e(ll, roce2, "macvlan1"), e(v4b, roce1, "macvlan1"), e(v4b, roce2, "macvlan1")}, "7"},
		{"no IPv4 address (no-IPAM interface)", []gidRow{e(ll, roce1, "net1"), e(ll, roce2, "net1"), e(v6, roce1, "net1"), e(v6, roce2, "net1"), u, u}, "none"},
		{"IPv4 as RoCE v1 only", []gidRow{e(ll, roce1, "eth0"), e(v4, roce1, "eth0"), u}, "none"},
		{"empty table", []gidRow{u, u, u, u}, "none"},
		{"garbage GID", []gidRow{e("not-a-gid", roce1, "eth0")}, "error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := inventory.Port{LinkLayer: inventory.LinkLayerEthernet}
			var reason string
			p.GIDs, reason = discovery.ReadGIDs(gidPort(t, tc.entries...))
			got := "none"
			if reason != "" {
				got = "error"
			} else if i, ok := p.RoCEv2IPv4GIDIndex(); ok {
				got = fmt.Sprint(i)
			}
			if got != tc.want {
				t.Errorf("index %s (reason %q), want %s; table %+v", got, reason, tc.want, p.GIDs)
			}
		})
	}
}

// TestReadGIDsBounded: a table longer than MaxGIDs is refused after
// MaxGIDs+1 lookups, not read to its end.
func TestReadGIDsBounded(t *testing.T) {
	t.Parallel()
	entries := make([]gidRow, discovery.MaxGIDs+5)
	gids, reason := discovery.ReadGIDs(gidPort(t, entries...))
	if want := fmt.Sprintf("GID table longer than %d entries", discovery.MaxGIDs); reason != want || gids != nil {
		t.Errorf("ReadGIDs = %v, %q; want nil, %q", gids, reason, want)
	}
	if d := cmp.Diff("no GID table (gids): no such file or directory", func() string { _, r := discovery.ReadGIDs(t.TempDir()); return r }()); d != "" {
		t.Errorf("missing table (-want +got):\n%s", d)
	}
}
