package agent

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/internal/testing/nodetest"
	"github.com/ibkube/ibkube/node/config"
)

// recordingPatcher records each partition label patch; failures makes the
// first patches fail.
type recordingPatcher struct {
	mu       sync.Mutex
	failures int
	node     string
	got      chan string // the value patched, "<removed>" for a removal
}

func (p *recordingPatcher) PatchNodeLabels(_ context.Context, node string, labels map[string]*string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failures > 0 {
		p.failures--
		return errors.New("API server unavailable")
	}
	p.node = node
	v, ok := labels[contract.LabelPartition]
	switch {
	case !ok || len(labels) != 1:
		p.got <- "<other labels>"
	case v == nil:
		p.got <- "<removed>"
	default:
		p.got <- *v
	}
	return nil
}

func waitLabel(t *testing.T, got <-chan string, want string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case v := <-got:
			if v == want {
				return
			}
			t.Logf("label %q while waiting for %q", v, want)
		case <-deadline:
			t.Fatalf("no partition label %q within 10s", want)
		}
	}
}

// TestAgentLabelsPartition: the agent labels its own Node with the
// partition its ports' tables name, follows a table the subnet manager
// reprograms (sysfs sends no event: the periodic rescan sees it), removes
// the label when the ports no longer agree, and retries a failed patch.
func TestAgentLabelsPartition(t *testing.T) {
	t.Parallel()
	dir := fixture.BuildTemp(t, fixture.NDv5)
	cfg := config.Default()
	cfg.RescanPeriod.Duration = config.MinRescanPeriod
	patcher := &recordingPatcher{failures: 1, got: make(chan string, 16)}
	scanner := discovery.NewScanner(discovery.Options{SysfsRoot: fixture.SysfsRoot(dir), DevRoot: fixture.DevRoot(dir), Logger: testr.New(t)})
	a, err := New(Config{Agent: cfg, Scanner: scanner, SysfsRoot: fixture.SysfsRoot(dir), KubeletSocketDir: t.TempDir(),
		StateDir: t.TempDir(), NodeName: "nd-0", Labels: patcher}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer start(t, a)()
	waitLabel(t, patcher.got, "0x800b")
	if patcher.node != "nd-0" {
		t.Errorf("patched node %q, want its own, nd-0", patcher.node)
	}

	for i := 0; i < 8; i++ {
		if err := fixture.SetPKeys(dir, "mlx5_"+string(rune('0'+i)), 1, "0x7fff", "0x8021"); err != nil {
			t.Fatal(err)
		}
	}
	waitLabel(t, patcher.got, "0x8021")

	if err := fixture.SetPKeys(dir, "mlx5_3", 1, "0x7fff"); err != nil {
		t.Fatal(err)
	}
	waitLabel(t, patcher.got, "<removed>")
}

func TestPartitionLabelValue(t *testing.T) {
	t.Parallel()
	ib := func(keys ...inventory.PKey) inventory.HCA {
		return inventory.HCA{Name: "mlx5_0", Ports: []inventory.Port{nodetest.IBPort(keys...)}}
	}
	roce := inventory.HCA{Name: "mlx5_0", Ports: []inventory.Port{{Number: 1, LinkLayer: inventory.LinkLayerEthernet, State: inventory.PortStateActive}}}
	own := map[string]string{"oci.oraclecloud.com/rdma.hpc_island_id": "island-7"}
	tests := []struct {
		name string
		node inventory.Node
		from string
		want string
	}{
		{"tenant key", inventory.Node{HCAs: []inventory.HCA{ib(0x800b, 0x7fff)}}, "", "0x800b"},
		{"fabric without partitions", inventory.Node{HCAs: []inventory.HCA{ib(0xffff)}}, "", "0xffff"},
		{"default key only: none", inventory.Node{HCAs: []inventory.HCA{ib(0x7fff)}}, "", ""},
		{"RoCE without a configured label", inventory.Node{HCAs: []inventory.HCA{roce}}, "", PartitionRoCE},
		{"RoCE with the cloud's label", inventory.Node{HCAs: []inventory.HCA{roce}}, "oci.oraclecloud.com/rdma.hpc_island_id", "island-7"},
		{"RoCE, the cloud's label absent", inventory.Node{HCAs: []inventory.HCA{roce}}, "kubernetes.azure.com/agentpool", ""},
		{"InfiniBand ignores the cloud's label", inventory.Node{HCAs: []inventory.HCA{ib(0x800b)}}, "oci.oraclecloud.com/rdma.hpc_island_id", "0x800b"},
		{"no RDMA devices", inventory.Node{}, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := partitionLabel(tc.node, tc.from, own); got != tc.want {
				t.Errorf("partitionLabel = %q, want %q", got, tc.want)
			}
		})
	}
}
