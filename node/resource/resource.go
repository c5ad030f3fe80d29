// Package resource is the node agent's pure resource model: it turns an
// inventory and the agent config into kubelet device lists per pool (shared
// slots or one device per HCA), with health and NUMA topology, and answers
// Allocate and GetPreferredAllocation. It does no I/O.
package resource

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/node/config"
)

// Profile is the node's part in Allocate: node facts only. It has no room
// for tunings on purpose: Allocate's environment outranks the NCCL conf file
// of the profile the pod resolved, so a tuning here would silently beat a
// site's override of a profile or a pod's choice of another one. Tunings
// reach a container only through that conf file (see README, precedence).
type Profile struct {
	// Name is the node's profile, for logs.
	Name string
	// TopologyFile is the host path of the NCCL topology XML (under the
	// agent's state dir), mounted read-only at TopologyContainerPath.
	TopologyFile string
}

// Options are the node facts the model needs besides the inventory.
type Options struct {
	// HostDevRoot is the dev tree as the kubelet sees it, the prefix of
	// every DeviceSpec.HostPath ("/dev").
	HostDevRoot string
	Profile     Profile
}

// Model is the resource view of one inventory.
type Model struct {
	Pools []*Pool
	// HCAs has one entry per inventory HCA, in inventory order.
	HCAs []HCAStatus
}

// HCAStatus says which pools an HCA feeds, or why none.
type HCAStatus struct {
	HCA inventory.HCA
	// Resources are the resource names of the pools that took the HCA.
	Resources []string
	// Excluded says, per pool that did not take it, which selector refused it.
	Excluded []string
	// PoolProblems say, per pool that took it, why that pool counts the HCA
	// unhealthy beyond the HCA's own health (a management device the pool
	// hands out is missing).
	PoolProblems []string
}

// Healthy is the HCA's health as its pools see it.
func (s HCAStatus) Healthy() bool { return s.HCA.Healthy && len(s.PoolProblems) == 0 }

// Reason is what a user reads about an HCA: why it is unhealthy first (an
// HCA whose attributes cannot be read is excluded by selectors too, and the
// cause is what helps), then per-pool problems, then why no pool takes it.
func (s HCAStatus) Reason() string {
	var parts []string
	if !s.HCA.Healthy && s.HCA.HealthReason != "" {
		parts = append(parts, s.HCA.HealthReason)
	}
	parts = append(parts, s.PoolProblems...)
	if len(s.Resources) == 0 && len(s.Excluded) > 0 {
		parts = append(parts, "excluded: "+strings.Join(s.Excluded, "; "))
	}
	return strings.Join(parts, "; ")
}

// Pool is one advertised resource with its HCAs.
type Pool struct {
	Resource string
	Mode     string
	Slots    int
	// HCAs are the selected HCAs in inventory order.
	HCAs []inventory.HCA
	// linkLayers are the selector's link layers: only such ports are named
	// in NCCL_IB_HCA (a VPI card may run one port InfiniBand, one Ethernet).
	linkLayers []string
	// charKinds are the kinds of per-HCA char devices a container gets:
	// uverbs, plus the pool's opt-in management devices.
	charKinds []string
	rdmaCM    *inventory.CharDevice
	opts      Options
}

// Build applies the config's pools to node. Pools are taken in config order;
// an HCA goes to at most one pool per mode (the first that selects it), and
// may feed one shared and one exclusive pool at once.
func Build(cfg *config.AgentConfig, node inventory.Node, opts Options) *Model {
	m := &Model{}
	claimed := map[string]map[string]string{} // mode -> hca -> resource
	status := make([]HCAStatus, len(node.HCAs))
	for i, h := range node.HCAs {
		status[i].HCA = h
	}
	for pi, pc := range cfg.Pools {
		p := &Pool{Resource: pc.ResourceName, Mode: pc.Mode, Slots: pc.Slots, linkLayers: pc.Selector.LinkLayers, rdmaCM: node.RDMACM, opts: opts,
			charKinds: append([]string{inventory.CharUverbs}, pc.ManagementDevices...)}
		if claimed[pc.Mode] == nil {
			claimed[pc.Mode] = map[string]string{}
		}
		field := fmt.Sprintf("pools[%d].selector", pi)
		for i, h := range node.HCAs {
			ok, why := pc.Selector.Select(field, h)
			if !ok {
				status[i].Excluded = append(status[i].Excluded, fmt.Sprintf("%s: %s", pc.ResourceName, why))
				continue
			}
			if other, taken := claimed[pc.Mode][h.Name]; taken {
				status[i].Excluded = append(status[i].Excluded, fmt.Sprintf("%s: already in %s pool %s", pc.ResourceName, pc.Mode, other))
				continue
			}
			claimed[pc.Mode][h.Name] = pc.ResourceName
			p.HCAs = append(p.HCAs, h)
			status[i].Resources = append(status[i].Resources, pc.ResourceName)
			if why := p.missing(h); why != "" {
				status[i].PoolProblems = append(status[i].PoolProblems, pc.ResourceName+": "+why)
			}
		}
		m.Pools = append(m.Pools, p)
	}
	m.HCAs = status
	return m
}

// Pool returns the pool advertising resource, or nil.
func (m *Model) Pool(resource string) *Pool {
	for _, p := range m.Pools {
		if p.Resource == resource {
			return p
		}
	}
	return nil
}

// missing says which of the char devices this pool hands out the HCA lacks
// beyond what discovery already counts in its health (uverbs): an opted-in
// management device not announced in sysfs, or announced but absent from
// the dev root. Empty when none.
func (p *Pool) missing(h inventory.HCA) string {
	var problems []string
	for _, kind := range p.charKinds[1:] {
		announced := false
		var absent []string
		for _, c := range h.CharDevices {
			if c.Kind() != kind {
				continue
			}
			announced = true
			if !c.Present {
				absent = append(absent, c.Name)
			}
		}
		switch {
		case !announced:
			problems = append(problems, fmt.Sprintf("no %s char device in sysfs (is ib_umad loaded?)", kind))
		case len(absent) > 0:
			problems = append(problems, "missing from /dev/infiniband: "+strings.Join(absent, ", "))
		}
	}
	return strings.Join(problems, "; ")
}

// healthy is h's health as this pool sees it: the HCA's own, and every char
// device the pool hands out present.
func (p *Pool) healthy(h inventory.HCA) bool { return h.Healthy && p.missing(h) == "" }

// Exclusive reports whether the pool hands out one device per HCA.
func (p *Pool) Exclusive() bool { return p.Mode == config.ModeExclusive }

// SlotID names shared slot i.
func SlotID(i int) string { return "slot-" + strconv.Itoa(i) }

// Devices is the kubelet device list: in shared mode Slots devices, all
// healthy iff any selected HCA is; in exclusive mode one device per HCA,
// named after it, with its health. Every device carries the NUMA nodes of
// its HCAs (unknown NUMA nodes are left out).
func (p *Pool) Devices() []*pluginapi.Device {
	if p.Exclusive() {
		out := make([]*pluginapi.Device, 0, len(p.HCAs))
		for _, h := range p.HCAs {
			out = append(out, &pluginapi.Device{ID: h.Name, Health: health(p.healthy(h)), Topology: topology(h.NUMANode)})
		}
		return out
	}
	healthy := slices.ContainsFunc(p.HCAs, p.healthy)
	var numa []int
	for _, h := range p.HCAs {
		numa = append(numa, h.NUMANode)
	}
	out := make([]*pluginapi.Device, 0, p.Slots)
	if len(p.HCAs) == 0 {
		return out // no HCA: advertise nothing rather than slots that cannot work
	}
	for i := range p.Slots {
		out = append(out, &pluginapi.Device{ID: SlotID(i), Health: health(healthy), Topology: topology(numa...)})
	}
	return out
}

func health(ok bool) string {
	if ok {
		return pluginapi.Healthy
	}
	return pluginapi.Unhealthy
}

func topology(nodes ...int) *pluginapi.TopologyInfo {
	var ids []int
	for _, n := range nodes {
		if n >= 0 && !slices.Contains(ids, n) {
			ids = append(ids, n)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	sort.Ints(ids)
	t := &pluginapi.TopologyInfo{}
	for _, id := range ids {
		t.Nodes = append(t.Nodes, &pluginapi.NUMANode{ID: int64(id)})
	}
	return t
}

// Allocate answers one container's allocation: the uverbs devices (and the
// pool's opted-in umad/issm) of the allocated HCAs (exclusive) or of every
// healthy selected HCA (shared), plus rdma_cm; NCCL_IB_HCA and
// UCX_NET_DEVICES naming exactly those HCAs and ports; and the node
// profile's topology file (NCCL_TOPO_FILE). Node facts only: tunings come
// from the pod's profile.
func (p *Pool) Allocate(ids []string) (Grant, error) {
	if p.Exclusive() {
		return p.AllocateHCAs(ids)
	}
	for _, id := range ids {
		if n, ok := slotIndex(id); !ok || n >= p.Slots {
			return Grant{}, fmt.Errorf("%s: unknown device %q; this node offers %s to %s", p.Resource, id, SlotID(0), SlotID(p.Slots-1))
		}
	}
	var hcas []inventory.HCA
	for _, h := range p.HCAs {
		if p.healthy(h) {
			hcas = append(hcas, h)
		}
	}
	if len(hcas) == 0 {
		return Grant{}, fmt.Errorf("%s: no healthy HCA on this node", p.Resource)
	}
	return p.allocate(hcas), nil
}

// AllocateHCAs answers for the named HCAs of the pool whatever its mode, as
// Allocate does for an exclusive pool: the DRA driver hands out a shared
// pool's HCAs one by one too.
func (p *Pool) AllocateHCAs(names []string) (Grant, error) {
	hcas := make([]inventory.HCA, 0, len(names))
	for _, id := range names {
		i := slices.IndexFunc(p.HCAs, func(h inventory.HCA) bool { return h.Name == id })
		if i < 0 {
			return Grant{}, fmt.Errorf("%s: unknown device %q; this node offers %s", p.Resource, id, strings.Join(p.deviceIDs(), ", "))
		}
		hcas = append(hcas, p.HCAs[i])
	}
	return p.allocate(hcas), nil
}

// Health is h's health as this pool sees it and, when unhealthy, why.
func (p *Pool) Health(h inventory.HCA) (healthy bool, reason string) {
	var parts []string
	if !h.Healthy {
		parts = append(parts, h.HealthReason)
	}
	if why := p.missing(h); why != "" {
		parts = append(parts, why)
	}
	return len(parts) == 0, strings.Join(parts, "; ")
}

// Ports are h's ports that this pool's link layers take: the ones named in
// NCCL_IB_HCA.
func (p *Pool) Ports(h inventory.HCA) []inventory.Port {
	var out []inventory.Port
	for _, port := range h.Ports {
		if len(p.linkLayers) == 0 || slices.Contains(p.linkLayers, port.LinkLayer) {
			out = append(out, port)
		}
	}
	return out
}

// allocate is the grant for hcas: their char devices of the kinds this
// pool hands out, rdma_cm, the node profile's topology file and the node
// facts (nodeEnv).
func (p *Pool) allocate(hcas []inventory.HCA) Grant {
	var g Grant
	for _, h := range hcas {
		for _, c := range h.CharDevices {
			if c.Present && slices.Contains(p.charKinds, c.Kind()) {
				g.Devices = append(g.Devices, p.deviceNode(c.Name))
			}
		}
	}
	if p.rdmaCM != nil && p.rdmaCM.Present {
		g.Devices = append(g.Devices, p.deviceNode(p.rdmaCM.Name))
	}
	if f := p.opts.Profile.TopologyFile; f != "" {
		g.Mounts = append(g.Mounts, Mount{ContainerPath: TopologyContainerPath, HostPath: f})
	}
	g.Env = p.nodeEnv(hcas)
	return g
}

func (p *Pool) deviceNode(name string) DeviceNode {
	return DeviceNode{
		ContainerPath: "/dev/" + inventory.DevInfinibandPath + "/" + name,
		HostPath:      filepath.Join(p.opts.HostDevRoot, inventory.DevInfinibandPath, name),
		Permissions:   "rw",
	}
}

func slotIndex(id string) (int, bool) {
	s, ok := strings.CutPrefix(id, "slot-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 0 && strconv.Itoa(n) == s
}

func (p *Pool) deviceIDs() []string {
	out := make([]string, 0, len(p.HCAs))
	for _, h := range p.HCAs {
		out = append(out, h.Name)
	}
	return out
}

// Preferred picks size devices out of available for an exclusive pool,
// keeping mustInclude and packing the rest onto as few NUMA nodes as
// possible: first the NUMA nodes mustInclude already uses, then the
// smallest NUMA node that fits what is left (leaving larger ones whole for
// later pods), else the largest and repeat. HCAs with unknown NUMA node come
// last. Shared pools have no preference: the first size available.
func (p *Pool) Preferred(available, mustInclude []string, size int) ([]string, error) {
	if size < len(mustInclude) || size > len(available) {
		return nil, fmt.Errorf("%s: cannot pick %d devices from %d available with %d required", p.Resource, size, len(available), len(mustInclude))
	}
	out := slices.Clone(mustInclude)
	rest := slices.DeleteFunc(slices.Clone(available), func(id string) bool { return slices.Contains(mustInclude, id) })
	if !p.Exclusive() {
		return append(out, rest[:size-len(out)]...), nil
	}
	k := p.numaGroups(rest)
	for _, n := range k.nodesOf(mustInclude) {
		if len(out) < size {
			out = k.take(out, n, size)
		}
	}
	for len(out) < size {
		n := k.next(size - len(out))
		if len(k.groups[n]) == 0 {
			break
		}
		out = k.take(out, n, size)
	}
	return out, nil
}

// numaPacker holds the devices left to pick, grouped by NUMA node.
type numaPacker struct {
	numa   map[string]int   // device -> its NUMA node
	groups map[int][]string // NUMA node -> devices left, in pool order
}

// numaGroups groups ids by NUMA node (unknown devices under
// UnknownNUMANode), each group in pool order.
func (p *Pool) numaGroups(ids []string) *numaPacker {
	order := map[string]int{}
	k := &numaPacker{numa: map[string]int{}, groups: map[int][]string{}}
	for i, h := range p.HCAs {
		order[h.Name] = i
		k.numa[h.Name] = h.NUMANode
	}
	for _, id := range ids {
		n, ok := k.numa[id]
		if !ok {
			n = inventory.UnknownNUMANode
		}
		k.groups[n] = append(k.groups[n], id)
	}
	for _, g := range k.groups {
		sort.Slice(g, func(i, j int) bool { return order[g[i]] < order[g[j]] })
	}
	return k
}

// nodesOf are the known NUMA nodes of ids, sorted.
func (k *numaPacker) nodesOf(ids []string) []int {
	used := map[int]bool{}
	for _, id := range ids {
		if n, ok := k.numa[id]; ok && n >= 0 {
			used[n] = true
		}
	}
	return slices.Sorted(maps.Keys(used))
}

// take appends to out what group n holds, up to size in all, and drops the
// group.
func (k *numaPacker) take(out []string, n, size int) []string {
	g := k.groups[n]
	out = append(out, g[:min(size-len(out), len(g))]...)
	delete(k.groups, n)
	return out
}

// next is the group to take need more devices from: the smallest known
// NUMA node that fits them (leaving larger ones whole for later pods), else
// the largest known one, else the devices of unknown NUMA node.
func (k *numaPacker) next(need int) int {
	best, bestLen := inventory.UnknownNUMANode, -1
	for _, n := range slices.Sorted(maps.Keys(k.groups)) {
		if l := len(k.groups[n]); n >= 0 && l >= need && (bestLen < 0 || l < bestLen) {
			best, bestLen = n, l
		}
	}
	if bestLen >= 0 {
		return best
	}
	for _, n := range slices.Sorted(maps.Keys(k.groups)) {
		if l := len(k.groups[n]); n >= 0 && l > bestLen {
			best, bestLen = n, l
		}
	}
	return best
}
