// Package nodetest builds the inventories that the node agent's tests hand
// their packages: scanned from a fixture host, or made up where a test needs
// a node no fixture describes. Only tests import it.
package nodetest

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/hca/inventory"
)

// Scan reads the fixture host tree at dir (fixture.Build's layout) as the
// agent's scanner reads a host, so a test starts from what discovery makes
// of a real machine's sysfs rather than from a hand-built inventory.
func Scan(t testing.TB, dir string) inventory.Node {
	t.Helper()
	node, err := discovery.NewScanner(discovery.Options{SysfsRoot: fixture.SysfsRoot(dir), DevRoot: fixture.DevRoot(dir)}).Scan(context.Background())
	if err != nil {
		t.Fatalf("scan fixture %s: %v", dir, err)
	}
	return node
}

// IBNode is a node of hcas healthy InfiniBand HCAs (mlx5_0, mlx5_1, ...),
// perNUMA of them on each NUMA node in order, each with one active port and
// its uverbs device, and the rdma_cm device: what the resource model and the
// published devices are built from on an ND H100 v5-like host. down names
// HCAs whose port is down (Polling), which the scanner reports unhealthy.
func IBNode(hcas, perNUMA int, down ...string) inventory.Node {
	var n inventory.Node
	for i := range hcas {
		name := fmt.Sprintf("mlx5_%d", i)
		state, phys, healthy := inventory.PortStateActive, inventory.PortPhysStateUp, true
		if slices.Contains(down, name) {
			state, phys, healthy = "DOWN", "Polling", false
		}
		n.HCAs = append(n.HCAs, inventory.HCA{
			Name: name, VendorID: "15b3", NUMANode: i / perNUMA, Healthy: healthy,
			Ports:       []inventory.Port{{Number: 1, State: state, PhysState: phys, LinkLayer: inventory.LinkLayerInfiniBand}},
			CharDevices: []inventory.CharDevice{{Name: fmt.Sprintf("uverbs%d", i), Present: true}},
		})
	}
	n.RDMACM = &inventory.CharDevice{Name: inventory.RDMACMDeviceName, Present: true}
	return n
}

// IBPort is an active InfiniBand port 1 whose partition table holds keys,
// in order from index 0.
func IBPort(keys ...inventory.PKey) inventory.Port {
	p := inventory.Port{Number: 1, LinkLayer: inventory.LinkLayerInfiniBand, State: inventory.PortStateActive}
	for i, k := range keys {
		p.PKeys = append(p.PKeys, inventory.PKeyEntry{Index: i, Key: k})
	}
	return p
}
