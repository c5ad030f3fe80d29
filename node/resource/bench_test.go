package resource

import (
	"testing"

	"github.com/ibkube/ibkube/node/config"
)

// BenchmarkBuildAndAllocate is the pure model's cost: building the pools of
// an ND H100 v5 node (done on every rescan) and one exclusive Allocate.
func BenchmarkBuildAndAllocate(b *testing.B) {
	node, cfg := ndv5(), config.Default()
	b.Run("build", func(b *testing.B) {
		for b.Loop() {
			_ = Build(cfg, node, Options{HostDevRoot: "/dev"})
		}
	})
	pool := Build(cfg, node, Options{HostDevRoot: "/dev"}).Pool("rdma/ib")
	b.Run("allocate-exclusive-4", func(b *testing.B) {
		for b.Loop() {
			if _, err := pool.Allocate([]string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
