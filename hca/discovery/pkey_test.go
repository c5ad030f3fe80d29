package discovery_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/hca/inventory"
)

// TestPartitionFixtures: the fixtures' partition tables give the tenant key,
// the NCCL_IB_PKEY index and the UCX_IB_PKEY value their sources document.
// ND H100 v5 is Azure's example ("Discover partition keys": pkeys/0 = 0x800b,
// pkeys/1 = 0x7fff; UCX takes 0x000b, the key without its membership bit).
func TestPartitionFixtures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fixture string
		state   inventory.PartitionState
		key     string
		index   int
		ucx     string
		reason  string
	}{
		{fixture: fixture.NDv5, state: inventory.PartitionOK, key: "0x800b", index: 0, ucx: "0x000b"},
		{fixture: fixture.NDv4, state: inventory.PartitionOK, key: "0x8012", index: 1, ucx: "0x0012"},
		{fixture: fixture.HB, state: inventory.PartitionOK, key: "0x8014", index: 0, ucx: "0x0014"},
		{fixture: fixture.OCIH100, state: inventory.PartitionNoInfiniBand},
		// mlx5_1's port is DOWN and does not count; mlx5_3 holds the default key only.
		{fixture: fixture.Broken, state: inventory.PartitionDisagree,
			reason: "ports share no tenant key: 0x800b on mlx5_0/1, mlx5_2/1; default only on mlx5_3/1"},
	}
	for _, tc := range tests {
		t.Run(tc.fixture, func(t *testing.T) {
			t.Parallel()
			node, err := newScanner(t, fixture.BuildTemp(t, tc.fixture), nil).Scan(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			p := inventory.NodePartition(node)
			if p.State != tc.state || p.Reason != tc.reason {
				t.Fatalf("partition = %+v, want state %s reason %q", p, tc.state, tc.reason)
			}
			if tc.key == "" {
				if p.Label() != "" {
					t.Fatalf("label %q for a node without a tenant key", p.Label())
				}
				return
			}
			if p.Label() != tc.key || p.Key.UCX() != tc.ucx {
				t.Errorf("label %q UCX %q, want %q %q", p.Label(), p.Key.UCX(), tc.key, tc.ucx)
			}
			var names []string
			for _, h := range node.HCAs {
				names = append(names, h.Name)
			}
			if i, ok := inventory.TenantIndex(node.HCAs, names, p.Key); !ok || i != tc.index {
				t.Errorf("index = %d, %t; want %d", i, ok, tc.index)
			}
		})
	}
}

// TestPartitionHostileTables: a table that cannot be trusted gives a clear
// state and never a key, and the reads stay bounded.
func TestPartitionHostileTables(t *testing.T) {
	t.Parallel()
	// The HB fixture has one InfiniBand port: mlx5_0/1.
	pkeys := func(dir string) string {
		return filepath.Join(fixture.SysfsRoot(dir), "class", "infiniband", "mlx5_0", "ports", "1", "pkeys")
	}
	table := func(keys ...string) func(string) error {
		return func(dir string) error {
			d := pkeys(dir)
			if err := os.RemoveAll(d); err != nil {
				return err
			}
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
			for i, k := range keys {
				if err := os.WriteFile(filepath.Join(d, fmt.Sprint(i)), []byte(k+"\n"), 0o644); err != nil {
					return err
				}
			}
			return nil
		}
	}
	entries := func(n int, at map[int]string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = "0x0000"
			if k, ok := at[i]; ok {
				out[i] = k
			}
		}
		return out
	}
	tests := []struct {
		name   string
		mutate func(string) error
		state  inventory.PartitionState
		key    string
		reason string
	}{
		{name: "only the default key", mutate: table("0x7fff"), state: inventory.PartitionDefaultOnly,
			reason: "only the default partition key, no full membership, on mlx5_0/1"},
		// A fabric without partitions: the default partition, full members.
		{name: "default key with full membership", mutate: table("0xffff"), state: inventory.PartitionDefault, key: "0xffff"},
		{name: "limited membership tenant key", mutate: table("0x000b", "0x7fff"), state: inventory.PartitionDefaultOnly,
			reason: "only the default partition key, no full membership, on mlx5_0/1"},
		{name: "invalid keys only", mutate: table("0x8000", "0x0000", "0x7fff"), state: inventory.PartitionDefaultOnly,
			reason: "only the default partition key, no full membership, on mlx5_0/1"},
		{name: "two tenant keys", mutate: table("0x800b", "0x800c", "0x7fff"), state: inventory.PartitionMultiple,
			reason: "ports share several tenant keys (0x800b,0x800c)"},
		{name: "128 entries, the key last", mutate: table(entries(128, map[int]string{0: "0x7fff", 127: "0x8021"})...),
			state: inventory.PartitionOK, key: "0x8021"},
		{name: "129 entries", mutate: table(entries(129, map[int]string{0: "0x7fff", 1: "0x8021"})...),
			state: inventory.PartitionUnreadable, reason: "partition table unreadable on mlx5_0/1: partition table longer than 128 entries"},
		{name: "garbage entry", mutate: table("0x800b", "banana"), state: inventory.PartitionUnreadable,
			reason: `partition table unreadable on mlx5_0/1: pkeys/1: partition key "banana": want 0x and four hex digits (0x800b), as the kernel prints it`},
		{name: "decimal entry", mutate: table("32779"), state: inventory.PartitionUnreadable,
			reason: `partition table unreadable on mlx5_0/1: pkeys/0: partition key "32779": want 0x and four hex digits (0x800b), as the kernel prints it`},
		{name: "long garbage is cut", mutate: table(strings.Repeat("A", 3000)), state: inventory.PartitionUnreadable,
			reason: `partition table unreadable on mlx5_0/1: pkeys/0: partition key "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"...[2968 more bytes]: want 0x and four hex digits (0x800b), as the kernel prints it`},
		{name: "entry is a FIFO", mutate: func(dir string) error {
			if err := table("0x800b")(dir); err != nil {
				return err
			}
			return unix.Mkfifo(filepath.Join(pkeys(dir), "1"), 0o644)
		}, state: inventory.PartitionUnreadable,
			reason: "partition table unreadable on mlx5_0/1: cannot read pkeys/1: not a regular file (a FIFO)"},
		{name: "entry too long", mutate: func(dir string) error {
			if err := table("0x800b")(dir); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(pkeys(dir), "1"), make([]byte, discovery.MaxAttrSize+10), 0o644)
		}, state: inventory.PartitionUnreadable,
			reason: "partition table unreadable on mlx5_0/1: cannot read pkeys/1: longer than 4096 bytes"},
		{name: "no table", mutate: func(dir string) error { return os.RemoveAll(pkeys(dir)) }, state: inventory.PartitionUnreadable,
			reason: "partition table unreadable on mlx5_0/1: no partition table (pkeys): no such file or directory"},
		{name: "empty table", mutate: table(), state: inventory.PartitionUnreadable,
			reason: "partition table unreadable on mlx5_0/1: empty partition table (no pkeys/0)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			node := scanBrokenHB(t, tc.mutate)
			p := inventory.NodePartition(node)
			if p.State != tc.state || p.Label() != tc.key || p.Reason != tc.reason {
				t.Fatalf("partition = %+v (label %q)\nwant state %s, label %q, reason %q", p, p.Label(), tc.state, tc.key, tc.reason)
			}
			if !node.HCAs[0].Healthy {
				t.Errorf("a partition table made the HCA unhealthy: %s", node.HCAs[0].HealthReason)
			}
		})
	}
}
