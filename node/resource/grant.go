package resource

import (
	"slices"
	"strings"
)

// Grant is what one container receives for the HCAs allocated to it: device
// nodes, read-only mounts and node-fact environment. It names no kubelet or
// CDI type on purpose: the device plugin turns it into its Allocate answer,
// the DRA driver into CDI container edits, and both hand out the same thing.
type Grant struct {
	Devices []DeviceNode
	Mounts  []Mount
	// Env is sorted by name; each name appears once.
	Env []EnvVar
}

// DeviceNode is a char device the container gets, read-write.
type DeviceNode struct {
	// ContainerPath is where the container sees it (/dev/infiniband/uverbs0).
	ContainerPath string
	// HostPath is the node as the runtime sees it, under Options.HostDevRoot.
	HostPath string
	// Permissions are cgroup device permissions ("rw").
	Permissions string
}

// Mount is a host file bind-mounted read-only into the container.
type Mount struct {
	ContainerPath string
	HostPath      string
}

// EnvVar is one environment variable of a grant.
type EnvVar struct {
	Name, Value string
}

// EnvMap is the grant's environment as a map.
func (g Grant) EnvMap() map[string]string {
	out := make(map[string]string, len(g.Env))
	for _, e := range g.Env {
		out[e.Name] = e.Value
	}
	return out
}

// Merge adds other's devices and mounts not already in g (by container
// path) and merges its environment variable by variable (mergeEnvValue);
// a name new to g is appended in other's order. A DRA request drawing on
// several pools gets one grant this way.
func (g *Grant) Merge(other Grant) {
	for _, d := range other.Devices {
		if !slices.ContainsFunc(g.Devices, func(x DeviceNode) bool { return x.ContainerPath == d.ContainerPath }) {
			g.Devices = append(g.Devices, d)
		}
	}
	for _, m := range other.Mounts {
		if !slices.ContainsFunc(g.Mounts, func(x Mount) bool { return x.ContainerPath == m.ContainerPath }) {
			g.Mounts = append(g.Mounts, m)
		}
	}
	for _, e := range other.Env {
		i := slices.IndexFunc(g.Env, func(x EnvVar) bool { return x.Name == e.Name })
		if i < 0 {
			g.Env = append(g.Env, e)
			continue
		}
		g.Env[i].Value = mergeEnvValue(e.Name, g.Env[i].Value, e.Value)
	}
}

// mergeEnvValue combines two grants' values of one variable: the port lists
// concatenate without repeats (NCCL_IB_HCA keeps its leading "=", exact
// match), any other variable keeps the first value.
func mergeEnvValue(name, first, second string) string {
	switch name {
	case EnvNCCLIBHCA, EnvUCXNetDevices:
		return mergeList(first, second)
	default:
		return first
	}
}

func mergeList(vals ...string) string {
	prefix := ""
	var items []string
	for _, v := range vals {
		if rest, ok := strings.CutPrefix(v, "="); ok {
			prefix, v = "=", rest
		}
		for _, it := range strings.Split(v, ",") {
			if it != "" && !slices.Contains(items, it) {
				items = append(items, it)
			}
		}
	}
	return prefix + strings.Join(items, ",")
}
