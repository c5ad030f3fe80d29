package doctor

import (
	"strings"
	"testing"

	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/internal/testing/nodetest"
)

// TestCheckPartitionNamesPorts: the doctor fails on ports that hold the
// default key only or disagree, naming them, and passes a node on one
// tenant partition.
func TestCheckPartitionNamesPorts(t *testing.T) {
	t.Parallel()
	port := nodetest.IBPort
	node := func(ports ...inventory.Port) Facts {
		var f Facts
		for i, p := range ports {
			f.Node.HCAs = append(f.Node.HCAs, inventory.HCA{Name: "mlx5_" + string(rune('0'+i)), Ports: []inventory.Port{p}})
		}
		return f
	}
	tests := []struct {
		name   string
		facts  Facts
		status Status
		says   string
	}{
		{"one partition", node(port(0x800b, 0x7fff), port(0x800b, 0x7fff)), Pass, "tenant partition 0x800b"},
		{"default key only", node(port(0x7fff), port(0x7fff)), Fail, "default-only: only the default partition key, no full membership, on mlx5_0/1, mlx5_1/1"},
		{"disagree", node(port(0x800b, 0x7fff), port(0x8012, 0x7fff)), Fail, "disagree: ports share no tenant key: 0x800b on mlx5_0/1; 0x8012 on mlx5_1/1"},
		{"one port without the key", node(port(0x800b, 0x7fff), port(0x7fff)), Fail, "default only on mlx5_1/1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := checkPartition(tc.facts)
			if r.Status != tc.status || !strings.Contains(r.Message, tc.says) {
				t.Fatalf("got %s %q, want %s containing %q", r.Status, r.Message, tc.status, tc.says)
			}
		})
	}
}
