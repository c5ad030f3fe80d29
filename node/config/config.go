// Package config is the node agent's versioned configuration file
// (apiVersion ibkube.io/v1alpha1, kind AgentConfig): the resource pools it
// advertises to the kubelet, an optional node profile override and the
// health rescan period. Parse is strict and Validate names the bad field,
// its value and what is accepted.
package config

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/hca/selector"
)

// The file's type.
const (
	APIVersion = "ibkube.io/v1alpha1"
	Kind       = "AgentConfig"
)

// Pool modes.
const (
	// ModeShared advertises Slots devices that all stand for every selected
	// HCA; a container gets the char devices of every healthy one.
	ModeShared = "shared"
	// ModeExclusive advertises one device per HCA; a container sees only the
	// HCAs it was allocated.
	ModeExclusive = "exclusive"
)

// Defaults.
const (
	// DefaultSharedSlots is the AKS guide's rdmaHcaMax (aks-rdma-infiniband
	// configs/nicclusterpolicy/rdma-shared-device-plugin/rdma.yaml), so a node
	// moving from the RDMA shared device plugin keeps its capacity; 63 also
	// stays under the 128-GID table of a RoCE port (network-operator PR 580),
	// and above the pods a ND node runs in practice (AKS max-pods is 30..250,
	// but one pod per GPU is the norm).
	DefaultSharedSlots = 63
	// DefaultRescanPeriod backs up the change hints (discovery's port poll,
	// netlink link events, dev-root fsnotify) for what none of them covers,
	// such as a NUMA node or firmware version changing under a driver
	// reload without a new device node. A sysfs walk of nine HCAs costs a
	// few milliseconds.
	DefaultRescanPeriod = 10 * time.Second
	// MaxSlots bounds shared slots: the kubelet keeps every device ID in its
	// checkpoint.
	MaxSlots = 1000
	// MinRescanPeriod keeps the periodic rescan from spinning.
	MinRescanPeriod = time.Second
)

// AgentConfig is the node agent's configuration file.
type AgentConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Pools are the resources advertised to the kubelet, in priority order:
	// when two pools of the same mode select one HCA, the first one gets it.
	// Omitted = the default pools; an explicit empty list is an error.
	Pools []Pool `json:"pools,omitempty"`
	// Profile overrides the node's NCCL profile: an instance type such as
	// "Standard_ND96isr_H100_v5", or "none" for no profile. Empty = detect
	// (Node label node.kubernetes.io/instance-type, then DMI product name).
	Profile string `json:"profile,omitempty"`
	// RescanPeriod is the period of the full health rescan ("10s").
	RescanPeriod metav1.Duration `json:"rescanPeriod,omitempty"`
	// PartitionLabelFrom names a label of the agent's own Node whose value
	// becomes its partition label (infiniband.azure.com/partition) when the
	// node has no InfiniBand port: RoCE fabrics have no partition keys, and
	// the cloud's placement label (an OKE RDMA block, an AKS agent pool) is
	// the nearest truth. Empty: such nodes are labelled "roce".
	PartitionLabelFrom string `json:"partitionLabelFrom,omitempty"`
}

// Pool is one resource advertised to the kubelet.
type Pool struct {
	// ResourceName is the extended resource name, "<domain>/<name>".
	ResourceName string `json:"resourceName"`
	// Mode is shared or exclusive.
	Mode string `json:"mode"`
	// Slots is the number of devices a shared pool advertises (default 63);
	// not allowed for exclusive pools.
	Slots int `json:"slots,omitempty"`
	// Selector picks the pool's HCAs.
	Selector selector.Selector `json:"selector"`
	// ManagementDevices are the per-port management char devices a
	// container of this pool gets besides uverbsN and rdma_cm, which every
	// verbs workload needs and always gets: "umad" for MAD-based fabric
	// tools (perfquery, ibnetdiscover, iblinkinfo, ibdiagnet), "issm" only
	// for running a subnet manager. Default none: neither NCCL, UCX, MPI
	// over UCX, perftest, ibv_devinfo nor ibstat opens them (see
	// docs/node-agent.md), and issm lets its holder claim to be the fabric's
	// subnet manager. A pool that lists one is unhealthy on an HCA where it
	// is missing; other pools do not care.
	ManagementDevices []string `json:"managementDevices,omitempty"`
}

// Management devices a pool may opt into (Pool.ManagementDevices).
const (
	ManagementUmad = inventory.CharUmad
	ManagementIssm = inventory.CharIssm
)

// ProfileNone disables the node profile.
const ProfileNone = "none"

// DefaultSelector takes Mellanox/NVIDIA HCAs running InfiniBand, which leaves
// out the Ethernet-only mlx5 device of Azure ND nodes (accelerated
// networking), so nobody needs NCCL_IB_HCA=^mlx5_8.
func DefaultSelector() selector.Selector {
	return selector.Selector{Match: selector.Match{
		Vendors:    []string{"15b3"},
		LinkLayers: []string{inventory.LinkLayerInfiniBand},
	}}
}

// DefaultPools are rdma/shared_ib (shared, 63 slots) and rdma/ib (exclusive),
// both over the default selector, so the webhook's two modes work on an AKS
// ND node without a config file.
func DefaultPools() []Pool {
	return []Pool{
		{ResourceName: contract.ResourceSharedIB, Mode: ModeShared, Slots: DefaultSharedSlots, Selector: DefaultSelector()},
		{ResourceName: contract.ResourceExclusiveIB, Mode: ModeExclusive, Selector: DefaultSelector()},
	}
}

// Default returns the configuration used when there is no file.
func Default() *AgentConfig {
	c := &AgentConfig{APIVersion: APIVersion, Kind: Kind}
	c.setDefaults()
	return c
}

// Parse decodes and validates a config file. Unknown fields are errors.
func Parse(data []byte) (*AgentConfig, error) {
	var c AgentConfig
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("decode agent config: %w", err)
	}
	c.setDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Load reads path; a missing file gives Default().
func Load(path string) (*AgentConfig, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Default(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read agent config: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func (c *AgentConfig) setDefaults() {
	if c.Pools == nil {
		c.Pools = DefaultPools()
	}
	for i := range c.Pools {
		if c.Pools[i].Mode == ModeShared && c.Pools[i].Slots == 0 {
			c.Pools[i].Slots = DefaultSharedSlots
		}
	}
	if c.RescanPeriod.Duration == 0 {
		c.RescanPeriod.Duration = DefaultRescanPeriod
	}
}

// resourceName is "<DNS subdomain>/<name>" as Kubernetes accepts for extended
// resources.
var resourceName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)

// Validate checks every field; the error names the first bad one.
func (c *AgentConfig) Validate() error {
	if c.APIVersion != APIVersion {
		return fmt.Errorf("apiVersion: %q is not supported; accepted: %s", c.APIVersion, APIVersion)
	}
	if c.Kind != Kind {
		return fmt.Errorf("kind: %q is not supported; accepted: %s", c.Kind, Kind)
	}
	if len(c.Pools) == 0 {
		return errors.New("pools: at least one pool is required; omit the field for the defaults (rdma/shared_ib shared, rdma/ib exclusive)")
	}
	seen := map[string]int{}
	for i, p := range c.Pools {
		if err := p.validate(fmt.Sprintf("pools[%d]", i), seen); err != nil {
			return err
		}
		seen[p.ResourceName] = i
	}
	if c.RescanPeriod.Duration < MinRescanPeriod {
		return fmt.Errorf("rescanPeriod: %s is too short; accepted: %s or more", c.RescanPeriod.Duration, MinRescanPeriod)
	}
	if k := c.PartitionLabelFrom; k != "" {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("partitionLabelFrom: %q is not a label key (%s); accepted: a Node label key such as kubernetes.azure.com/agentpool", k, strings.Join(errs, "; "))
		}
	}
	return nil
}

// validate checks one pool, named f in errors; seen maps the resource
// names of the pools before it to their index.
func (p Pool) validate(f string, seen map[string]int) error {
	switch {
	case !resourceName.MatchString(p.ResourceName):
		return fmt.Errorf("%s.resourceName: %q is not an extended resource name; accepted: <domain>/<name> such as rdma/ib", f, p.ResourceName)
	case strings.HasSuffix(strings.SplitN(p.ResourceName, "/", 2)[0], "kubernetes.io"):
		return fmt.Errorf("%s.resourceName: %q is in a reserved kubernetes.io domain; accepted: another domain such as rdma/ib", f, p.ResourceName)
	}
	if j, dup := seen[p.ResourceName]; dup {
		return fmt.Errorf("%s.resourceName: %q is already used by pools[%d]; accepted: a name no other pool uses", f, p.ResourceName, j)
	}
	switch p.Mode {
	case ModeShared:
		if p.Slots < 1 || p.Slots > MaxSlots {
			return fmt.Errorf("%s.slots: %d is out of range; accepted: 1 to %d", f, p.Slots, MaxSlots)
		}
	case ModeExclusive:
		if p.Slots != 0 {
			return fmt.Errorf("%s.slots: %d is not allowed in mode exclusive (one device per HCA); accepted: omit slots, or mode shared", f, p.Slots)
		}
	default:
		return fmt.Errorf("%s.mode: %q is not a mode; accepted: %s, %s", f, p.Mode, ModeShared, ModeExclusive)
	}
	if err := p.Selector.Validate(f + ".selector"); err != nil {
		return err
	}
	return p.validateManagementDevices(f)
}

// validateManagementDevices accepts umad and issm, each at most once.
func (p Pool) validateManagementDevices(f string) error {
	for j, d := range p.ManagementDevices {
		field := fmt.Sprintf("%s.managementDevices[%d]", f, j)
		if d != ManagementUmad && d != ManagementIssm {
			return fmt.Errorf("%s: %q is not a management device; accepted: %s, %s (uverbs and rdma_cm are always given)", field, d, ManagementUmad, ManagementIssm)
		}
		for _, prev := range p.ManagementDevices[:j] {
			if prev == d {
				return fmt.Errorf("%s: %q is listed twice; accepted: each of %s, %s at most once", field, d, ManagementUmad, ManagementIssm)
			}
		}
	}
	return nil
}
