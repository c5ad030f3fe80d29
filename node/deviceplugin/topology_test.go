package deviceplugin

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/internal/testing/golden"
	"github.com/ibkube/ibkube/internal/testing/nodetest"
	"github.com/ibkube/ibkube/node/config"
	"github.com/ibkube/ibkube/node/resource"
)

// GPUResource is the extended resource NVIDIA's device plugin advertises
// GPUs as; its TopologyInfo is the GPU's numa_node from sysfs, none when
// the kernel does not know it, like the HCAs' here.
const gpuResource = "nvidia.com/gpu"

// kubeletView is what the kubelet's device manager sees of a fixture
// node: every exclusive device of every resource with the NUMA nodes of
// its TopologyInfo, the GPUs as a GPU device plugin advertises them, and
// each HCA's GPU partner by the machine's topology. It is the input of the
// Topology Manager measurement (hack/tools/k8s/topologymanager), which runs
// the kubelet's own policies on it.
type kubeletView struct {
	NUMANodes []int                            `json:"numaNodes"`
	Resources map[string][]viewDevice          `json:"resources"`
	Partners  map[string]*inventory.GPUPartner `json:"partners"`
}

type viewDevice struct {
	ID        string  `json:"id"`
	NUMA      []int64 `json:"numa"` // empty: no TopologyInfo
	Unhealthy bool    `json:"unhealthy,omitempty"`
}

// topologyConfigs are the agent configs the fixtures run with: the
// defaults (InfiniBand pools), and for OCI's RoCE ports the pool of
// cmd/ibkube's oci-h100-roce case.
func topologyConfig(t *testing.T, name string) *config.AgentConfig {
	if name != fixture.OCIH100 {
		return config.Default()
	}
	data, err := os.ReadFile(filepath.Join("..", "..", "cmd", "ibkube", "testdata", "node", "oci-h100-roce.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestTopologyFollowsGPUPartners: on every fixture, each exclusive device
// carries its HCA's NUMA node as TopologyInfo (none for numa_node -1, which
// the kubelet then never counts inside a NUMA mask), and that node is the
// NUMA node of the HCA's partner GPUs, so the Topology Manager's NUMA
// alignment of GPUs and HCAs is alignment with the partners. The view is
// kept as a golden file per fixture for the Topology Manager measurement.
func TestTopologyFollowsGPUPartners(t *testing.T) {
	t.Parallel()
	for _, name := range fixture.Names() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			node := nodetest.Scan(t, fixture.BuildTemp(t, name))
			view := viewOf(t, node, resource.Build(topologyConfig(t, name), node, resource.Options{}))
			got, err := json.MarshalIndent(view, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", "topology", name+".json"), append(got, '\n'))
		})
	}
}

// viewOf builds the kubelet's view and checks each device's topology
// against its HCA and its partners.
func viewOf(t *testing.T, node inventory.Node, m *resource.Model) kubeletView {
	numa := map[string]int{}
	v := kubeletView{Resources: map[string][]viewDevice{}, Partners: map[string]*inventory.GPUPartner{}}
	for _, g := range node.GPUs {
		numa[g.PCIAddress] = g.NUMANode
		v.Resources[gpuResource] = append(v.Resources[gpuResource], viewDevice{ID: g.PCIAddress, NUMA: known(g.NUMANode)})
	}
	byName := map[string]inventory.HCA{}
	for _, h := range node.HCAs {
		byName[h.Name] = h
	}
	for _, p := range m.Pools {
		if !p.Exclusive() {
			continue
		}
		for _, d := range p.Devices() {
			h := byName[d.ID]
			dev := viewDevice{ID: d.ID, Unhealthy: d.Health != pluginapi.Healthy}
			for _, n := range d.GetTopology().GetNodes() {
				dev.NUMA = append(dev.NUMA, n.ID)
			}
			if want := known(h.NUMANode); !slices.Equal(dev.NUMA, want) {
				t.Errorf("%s %s: TopologyInfo NUMA %v, want %v (the HCA's numa_node %d)", p.Resource, d.ID, dev.NUMA, want, h.NUMANode)
			}
			for _, g := range partnerGPUs(h) {
				if numa[g] != h.NUMANode {
					t.Errorf("%s %s on NUMA node %d: its partner GPU %s is on %d", p.Resource, d.ID, h.NUMANode, g, numa[g])
				}
			}
			v.Resources[p.Resource] = append(v.Resources[p.Resource], dev)
			v.Partners[d.ID] = h.GPUPartner
		}
	}
	for _, devs := range v.Resources {
		for _, d := range devs {
			for _, n := range d.NUMA {
				if !slices.Contains(v.NUMANodes, int(n)) {
					v.NUMANodes = append(v.NUMANodes, int(n))
				}
			}
		}
	}
	slices.Sort(v.NUMANodes)
	return v
}

func known(numa int) []int64 {
	if numa < 0 {
		return nil
	}
	return []int64{int64(numa)}
}

func partnerGPUs(h inventory.HCA) []string {
	if h.GPUPartner == nil {
		return nil
	}
	return h.GPUPartner.GPUs
}
