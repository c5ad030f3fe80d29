package resource_test

import (
	"testing"

	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/internal/testing/nodetest"
	"github.com/ibkube/ibkube/node/config"
	"github.com/ibkube/ibkube/node/resource"
)

// TestPartitionEnv: a container's HCAs get the partition of the fixtures'
// tables as NCCL and UCX want it: Azure's 0x800b at index 0 gives
// UCX_IB_PKEY=0x000b and no NCCL_IB_PKEY (NCCL's default index 0 is right);
// a table with the default key first gives NCCL_IB_PKEY=1; HCAs without one
// shared tenant key get neither, never a guess.
func TestPartitionEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fixture   string
		hcas      []string
		ucx, nccl string
	}{
		{fixture.NDv5, []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"}, "0x000b", ""},
		{fixture.NDv4, []string{"mlx5_0", "mlx5_7"}, "0x0012", "1"},
		{fixture.HB, []string{"mlx5_0"}, "0x0014", ""},
		{fixture.Broken, []string{"mlx5_0"}, "0x000b", ""},
		// mlx5_3 holds the default key only: no partition the two share.
		{fixture.Broken, []string{"mlx5_0", "mlx5_3"}, "", ""},
		{fixture.Broken, []string{"mlx5_3"}, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.fixture, func(t *testing.T) {
			t.Parallel()
			m := resource.Build(config.Default(), nodetest.Scan(t, fixture.BuildTemp(t, tc.fixture)), resource.Options{HostDevRoot: "/dev"})
			g, err := m.Pool("rdma/ib").AllocateHCAs(tc.hcas)
			if err != nil {
				t.Fatal(err)
			}
			env := map[string]string{}
			for _, e := range g.Env {
				env[e.Name] = e.Value
			}
			if env[resource.EnvUCXIBPKey] != tc.ucx || env[resource.EnvNCCLIBPKey] != tc.nccl {
				t.Errorf("%v: UCX_IB_PKEY=%q NCCL_IB_PKEY=%q, want %q %q", tc.hcas, env[resource.EnvUCXIBPKey], env[resource.EnvNCCLIBPKey], tc.ucx, tc.nccl)
			}
		})
	}
}
