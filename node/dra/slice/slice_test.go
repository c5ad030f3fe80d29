package slice

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/hca/selector"
	"github.com/ibkube/ibkube/internal/testing/nodetest"
	"github.com/ibkube/ibkube/node/config"
	"github.com/ibkube/ibkube/node/resource"
)

// node is an ND H100 v5-like node: eight InfiniBand HCAs, four on each
// NUMA node; down names HCAs whose port is down.
func node(down ...string) inventory.Node { return nodetest.IBNode(8, 4, down...) }

func published(t *testing.T, pools []config.Pool, n inventory.Node) (devices []resourceapi.Device, sets []resourceapi.CounterSet) {
	t.Helper()
	c := config.Default()
	if pools != nil {
		c.Pools = pools
	}
	for _, s := range Slices(resource.Build(c, n, resource.Options{HostDevRoot: "/dev"}), NodeFacts{Name: "node-0"}) {
		devices = append(devices, s.Devices...)
		sets = append(sets, s.SharedCounters...)
	}
	return devices, sets
}

// TestSlicesCountersOnlyWhereNeeded: an HCA has a counter only when it has
// an exclusive device and another device; each counter costs the
// scheduler a walk of the cluster's allocated shares, so a node whose HCAs
// are in one pool each schedules as cheaply with 40k sharers elsewhere as
// with none (BenchmarkAllocator's split-pools rows).
func TestSlicesCountersOnlyWhereNeeded(t *testing.T) {
	t.Parallel()
	shared, exclusive := config.DefaultPools()[0], config.DefaultPools()[1]
	sharedOn7, exclusiveBut7 := shared, exclusive
	sharedOn7.Selector.Names = []string{"mlx5_7"}
	exclusiveBut7.Selector.Exclude = []selector.Match{{Names: []string{"mlx5_7"}}}
	for _, tc := range []struct {
		name  string
		pools []config.Pool
		want  map[string]int64 // HCA counters and their units
	}{
		{"defaults: every HCA shared and exclusive", nil, map[string]int64{
			"mlx5-0": 1, "mlx5-1": 1, "mlx5-2": 1, "mlx5-3": 1, "mlx5-4": 1, "mlx5-5": 1, "mlx5-6": 1, "mlx5-7": 1,
		}},
		{"exclusive only", []config.Pool{exclusive}, map[string]int64{}},
		{"shared only", []config.Pool{shared}, map[string]int64{}},
		{"split: mlx5_7 shared, the others exclusive", []config.Pool{sharedOn7, exclusiveBut7}, map[string]int64{}},
		{"mlx5_7 in both", []config.Pool{sharedOn7, exclusive}, map[string]int64{"mlx5-7": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			devices, sets := published(t, tc.pools, node())
			got := map[string]int64{}
			for _, s := range sets {
				for name, c := range s.Counters {
					got[name] = c.Value.Value()
				}
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("counters (-want +got):\n%s", d)
			}
			for _, d := range devices {
				hca := CounterName(*d.Attributes[contract.DRAAttrRDMADevice].StringValue)
				_, counted := tc.want[hca]
				if counted != (len(d.ConsumesCounters) == 1) {
					t.Errorf("%s consumes %v; its HCA's counter: %v", d.Name, d.ConsumesCounters, counted)
				}
			}
		})
	}
}

// TestSlicesAllocatorOrder: the first exclusive HCA (an `rdma/ib: 1` fits
// on the first device the allocator evaluates), the sharers' first HCA,
// the other exclusive HCAs by NUMA node, the other shared devices, and the
// tainted devices last, where the allocator no longer evaluates the
// classes' CEL on them before a fit.
func TestSlicesAllocatorOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		down []string
		want []string
	}{
		{"healthy", nil, []string{
			"ib-mlx5-0", "shared-ib-mlx5-7",
			"ib-mlx5-1", "ib-mlx5-2", "ib-mlx5-3", "ib-mlx5-4", "ib-mlx5-5", "ib-mlx5-6", "ib-mlx5-7",
			"shared-ib-mlx5-6", "shared-ib-mlx5-5", "shared-ib-mlx5-4", "shared-ib-mlx5-3", "shared-ib-mlx5-2", "shared-ib-mlx5-1", "shared-ib-mlx5-0",
		}},
		// NUMA node 1 holds four untainted HCAs, so it comes first for
		// exclusive pods and last for sharers, whose first HCA is the last
		// of NUMA node 0; mlx5_1's devices go to the end.
		{"mlx5_1 down", []string{"mlx5_1"}, []string{
			"ib-mlx5-4", "shared-ib-mlx5-3",
			"ib-mlx5-5", "ib-mlx5-6", "ib-mlx5-7", "ib-mlx5-0", "ib-mlx5-2", "ib-mlx5-3",
			"shared-ib-mlx5-2", "shared-ib-mlx5-0", "shared-ib-mlx5-7", "shared-ib-mlx5-6", "shared-ib-mlx5-5", "shared-ib-mlx5-4",
			"shared-ib-mlx5-1", "ib-mlx5-1",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			devices, _ := published(t, nil, node(tc.down...))
			var got []string
			for _, d := range devices {
				got = append(got, d.Name)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("device order (-want +got):\n%s", d)
			}
		})
	}
}
