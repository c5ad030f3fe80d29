package resource

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ibkube/ibkube/hca/inventory"
)

// TopologyContainerPath is where a container finds the node profile's NCCL
// topology file; NCCL_TOPO_FILE points at it.
const TopologyContainerPath = "/etc/ibkube/nccl-topo.xml"

// Env variable names the model sets.
const (
	EnvNCCLIBHCA     = "NCCL_IB_HCA"
	EnvUCXNetDevices = "UCX_NET_DEVICES"
	EnvNCCLTopoFile  = "NCCL_TOPO_FILE"
)

// envFact adds the variables one node fact gives a container holding hcas.
type envFact func(p *Pool, hcas []inventory.HCA, env map[string]string)

// envFacts are every node fact a grant carries, the one place where the
// node's environment for a container is decided. Node facts only: a tuning
// belongs to the pod's profile (see Profile). A new fact is a new entry
// here; where its values from two pools combine otherwise than "the first
// wins", mergeEnvValue says how.
func envFacts() []envFact {
	return []envFact{
		portsEnv,
		topologyEnv,
		pkeyEnv,
	}
}

// nodeEnv runs every envFact for hcas, sorted by name.
func (p *Pool) nodeEnv(hcas []inventory.HCA) []EnvVar {
	env := map[string]string{}
	for _, fact := range envFacts() {
		fact(p, hcas, env)
	}
	out := make([]EnvVar, 0, len(env))
	for name, value := range env {
		out = append(out, EnvVar{Name: name, Value: value})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// portsEnv names exactly the held ports to NCCL and UCX: NCCL_IB_HCA with a
// leading "=" (exact names, not prefixes: mlx5_1 must not take mlx5_10) and
// UCX_NET_DEVICES, both as "hca:port" lists.
func portsEnv(p *Pool, hcas []inventory.HCA, env map[string]string) {
	var ports []string
	for _, h := range hcas {
		for _, port := range p.Ports(h) {
			ports = append(ports, fmt.Sprintf("%s:%d", h.Name, port.Number))
		}
	}
	env[EnvNCCLIBHCA] = "=" + strings.Join(ports, ",")
	env[EnvUCXNetDevices] = strings.Join(ports, ",")
}

// topologyEnv points NCCL at the node profile's topology file, which the
// grant mounts.
func topologyEnv(p *Pool, _ []inventory.HCA, env map[string]string) {
	if p.opts.Profile.TopologyFile != "" {
		env[EnvNCCLTopoFile] = TopologyContainerPath
	}
}
