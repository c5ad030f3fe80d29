package resource

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/node/config"
)

// TestAllocateHCAsShared: the DRA driver hands a shared pool's HCAs out one
// by one, so AllocateHCAs gives exactly the named HCAs whatever the mode,
// where Allocate on a shared slot gives every healthy one.
func TestAllocateHCAsShared(t *testing.T) {
	t.Parallel()
	m := Build(config.Default(), ndv5(), Options{HostDevRoot: "/host/dev"})
	shared := m.Pool("rdma/shared_ib")
	resp, err := shared.AllocateHCAs([]string{"mlx5_5"})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, d := range resp.Devices {
		paths = append(paths, d.HostPath)
	}
	if d := cmp.Diff([]string{"/host/dev/infiniband/uverbs5", "/host/dev/infiniband/rdma_cm"}, paths); d != "" {
		t.Errorf("devices (-want +got):\n%s", d)
	}
	if got := resp.EnvMap()[EnvNCCLIBHCA]; got != "=mlx5_5:1" {
		t.Errorf("%s = %q, want =mlx5_5:1", EnvNCCLIBHCA, got)
	}
	if _, err := shared.AllocateHCAs([]string{"mlx5_8"}); err == nil || !strings.Contains(err.Error(), `unknown device "mlx5_8"`) {
		t.Errorf("AllocateHCAs of the Ethernet mlx5_8, in no pool: %v", err)
	}
}

func TestPoolHealth(t *testing.T) {
	t.Parallel()
	n := ndv5()
	n.HCAs[1].Healthy, n.HCAs[1].HealthReason = false, "port 1 is DOWN (Polling)"
	n.HCAs[2].CharDevices[1].Present = false // umad2
	cfg := config.Default()
	cfg.Pools[1].ManagementDevices = []string{config.ManagementUmad}
	m := Build(cfg, n, Options{HostDevRoot: "/dev"})
	byName := map[string]inventory.HCA{}
	for _, h := range n.HCAs {
		byName[h.Name] = h
	}
	for _, tc := range []struct {
		pool, hca string
		ok        bool
		reason    string
	}{
		{"rdma/ib", "mlx5_0", true, ""},
		{"rdma/ib", "mlx5_1", false, "port 1 is DOWN (Polling)"},
		{"rdma/ib", "mlx5_2", false, "missing from /dev/infiniband: umad2"},
		{"rdma/shared_ib", "mlx5_2", true, ""}, // this pool hands out no umad
	} {
		p := m.Pool(tc.pool)
		ok, reason := p.Health(byName[tc.hca])
		if ok != tc.ok || reason != tc.reason {
			t.Errorf("%s %s: %v %q, want %v %q", tc.pool, tc.hca, ok, reason, tc.ok, tc.reason)
		}
	}
}
