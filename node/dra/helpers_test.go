package dra

import (
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"

	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/hca/selector"
	goldenfile "github.com/ibkube/ibkube/internal/testing/golden"
	"github.com/ibkube/ibkube/internal/testing/nodetest"
	"github.com/ibkube/ibkube/node/config"
	"github.com/ibkube/ibkube/node/resource"
)

// host is a fixture tree and what the agent makes of it.
type host struct {
	dir string
	cfg *config.AgentConfig
	// topology is the NCCL topology file the node profile hands out, "" for none.
	topology string
	// hostDevRoot is the dev tree as the runtime sees it ("/dev").
	hostDevRoot string
}

// newHost builds fixture name in a temp dir.
func newHost(t testing.TB, name string, cfg *config.AgentConfig, opts ...fixture.Option) *host {
	t.Helper()
	dir := fixture.BuildTemp(t, name, opts...)
	if cfg == nil {
		cfg = config.Default()
	}
	return &host{dir: dir, cfg: cfg, hostDevRoot: "/dev"}
}

// scan reads the fixture as the agent does, without netlink.
func (h *host) scan(t testing.TB) inventory.Node {
	t.Helper()
	return nodetest.Scan(t, h.dir)
}

func (h *host) model(t testing.TB) *resource.Model {
	t.Helper()
	return resource.Build(h.cfg, h.scan(t), resource.Options{
		HostDevRoot: h.hostDevRoot, Profile: resource.Profile{Name: "test", TopologyFile: h.topology},
	})
}

// facts are the node's facts besides the model, as the agent has them
// (the PCIe roots come with the model's inventory).
func (h *host) facts(t testing.TB, m *resource.Model) NodeFacts {
	t.Helper()
	return NodeFacts{Name: "node-0"}
}

// roceConfig is an OCI node's config: its ConnectX-7 ports run RoCEv2.
func roceConfig() *config.AgentConfig {
	c := config.Default()
	c.Pools = []config.Pool{{
		ResourceName: "rdma/roce", Mode: config.ModeExclusive,
		Selector: selector.Selector{Match: selector.Match{Vendors: []string{"15b3"}, LinkLayers: []string{inventory.LinkLayerEthernet}}},
	}}
	return c
}

// golden compares got, as indented JSON, with testdata/name; -update
// (make update-golden) rewrites the file.
func golden(t *testing.T, name string, got any) {
	t.Helper()
	goldenfile.CheckJSON(t, filepath.Join("testdata", name), got)
}

func discardLogger() logr.Logger { return logr.Discard() }
