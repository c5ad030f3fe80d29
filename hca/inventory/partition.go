package inventory

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// PKey is an InfiniBand partition key as a port's partition table holds it
// (/sys/class/infiniband/<hca>/ports/<n>/pkeys/<i>, printed "0x%04x" by
// drivers/infiniband/core/sysfs.c show_port_pkey). The most significant bit
// is the membership bit (1: full member, 0: limited member, which cannot
// talk to other limited members); the low 15 bits name the partition.
type PKey uint16

const (
	// PKeyMembershipBit set means full membership (IBTA spec vol. 1, 10.9.1).
	PKeyMembershipBit PKey = 0x8000
	// PKeyPartitionMask is the partition's 15-bit number.
	PKeyPartitionMask PKey = 0x7fff
	// DefaultPartition is the default partition every port belongs to
	// (0x7fff limited, 0xffff full).
	DefaultPartition PKey = 0x7fff
)

// String is the key as the kernel prints it: "0x800b".
func (k PKey) String() string { return fmt.Sprintf("0x%04x", uint16(k)) }

// MarshalText writes the kernel's form so JSON says "0x800b", not 32779.
func (k PKey) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads the kernel's form.
func (k *PKey) UnmarshalText(b []byte) error {
	v, err := ParsePKey(string(b))
	if err != nil {
		return err
	}
	*k = v
	return nil
}

// ParsePKey reads a partition table entry as the kernel prints it: "0x"
// and four hex digits, surrounding space allowed.
func ParsePKey(s string) (PKey, error) {
	t := strings.TrimSpace(s)
	hex, ok := strings.CutPrefix(t, "0x")
	v, err := strconv.ParseUint(hex, 16, 16)
	if !ok || len(hex) != 4 || err != nil {
		return 0, fmt.Errorf("partition key %s: want 0x and four hex digits (0x800b), as the kernel prints it", quoteCut(t))
	}
	return PKey(v), nil
}

// quoteCut quotes at most 32 bytes of s: a garbage entry may be a page long.
func quoteCut(s string) string {
	const max = 32
	if len(s) <= max {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%q...[%d more bytes]", s[:max], len(s)-max)
}

// Full says whether the key grants full membership.
func (k PKey) Full() bool { return k&PKeyMembershipBit != 0 }

// Partition is the key without its membership bit: what UCX_IB_PKEY wants
// (openucx/ucx src/uct/ib/base/ib_iface.c: "Which pkey value to use. Should
// be between 0 and 0x7fff"; it compares against the table entry masked with
// 0x7fff).
func (k PKey) Partition() PKey { return k & PKeyPartitionMask }

// Empty says whether the entry is unused: the kernel prints 0x0000 for the
// table's free slots, and 0x8000 is no valid partition either.
func (k PKey) Empty() bool { return k.Partition() == 0 }

// Tenant says whether the key can be a tenant partition: a full member of a
// partition other than the default.
func (k PKey) Tenant() bool {
	return k.Full() && !k.Empty() && k.Partition() != DefaultPartition
}

// UCX is the value for UCX_IB_PKEY: the partition, "0x000b" for 0x800b
// (UCX parses it as "0x" and hex digits: ucs_config_sscanf_hex).
func (k PKey) UCX() string { return k.Partition().String() }

// PKeyEntry is one used entry of a port's partition table.
type PKeyEntry struct {
	Index int  `json:"index"`
	Key   PKey `json:"key"`
}

// TenantKeys are the port's tenant keys (full members, not the default),
// sorted, each once.
func (p Port) TenantKeys() []PKey {
	var out []PKey
	for _, e := range p.PKeys {
		if e.Key.Tenant() && !slices.Contains(out, e.Key) {
			out = append(out, e.Key)
		}
	}
	slices.Sort(out)
	return out
}

// PKeyIndex is the first index of key in the port's table.
func (p Port) PKeyIndex(key PKey) (int, bool) {
	for _, e := range p.PKeys {
		if e.Key == key {
			return e.Index, true
		}
	}
	return 0, false
}

// PartitionState says what a node's partition tables agree on.
type PartitionState string

// Partition states. Only PartitionOK carries a key; every other state
// carries none, so no key that is not certain reaches a label, NCCL or UCX.
const (
	// PartitionOK: every ACTIVE InfiniBand port holds the same one tenant key.
	PartitionOK PartitionState = "ok"
	// PartitionNoInfiniBand: no InfiniBand port at all (RoCE and Ethernet
	// have no partition keys).
	PartitionNoInfiniBand PartitionState = "no-infiniband"
	// PartitionNoActivePort: InfiniBand ports, none ACTIVE; a port that is
	// not ACTIVE has no table from the subnet manager yet.
	PartitionNoActivePort PartitionState = "no-active-port"
	// PartitionDefault: every port is a full member of the default
	// partition (0xffff) and of no other: a fabric without partitions, as a
	// subnet manager configures it out of the box. The node's partition is
	// the default one.
	PartitionDefault PartitionState = "default"
	// PartitionDefaultOnly: the ports hold no full-membership key at all
	// (Azure's 0x7fff without the tenant key): limited members cannot
	// reach each other.
	PartitionDefaultOnly PartitionState = "default-only"
	// PartitionDisagree: the ports share no tenant key.
	PartitionDisagree PartitionState = "disagree"
	// PartitionMultiple: the ports share more than one tenant key; which
	// one a job uses is not ibkube's to guess.
	PartitionMultiple PartitionState = "multiple"
	// PartitionUnreadable: a port's table could not be read whole.
	PartitionUnreadable PartitionState = "unreadable"
)

// Partition is a node's tenant partition as its ports' tables say.
type Partition struct {
	State PartitionState `json:"state"`
	// Key is the tenant key, set only in PartitionOK and PartitionDefault.
	Key PKey `json:"key,omitempty"`
	// Reason names the ports behind any state other than PartitionOK.
	Reason string `json:"reason,omitempty"`
}

// Label is the node label value: the key ("0x800b") in PartitionOK and
// PartitionDefault, else "".
func (p Partition) Label() string {
	if !p.Known() {
		return ""
	}
	return p.Key.String()
}

// Known says whether the state carries a key.
func (p Partition) Known() bool { return p.State == PartitionOK || p.State == PartitionDefault }

// PortName names a port in messages: "mlx5_0/1".
func PortName(hca string, port int) string { return hca + "/" + strconv.Itoa(port) }

// NodePartition derives the node's tenant partition: the tenant key every
// ACTIVE InfiniBand port holds. Azure's HPC guide ("Discover partition
// keys") has each VM's ports hold the default key and the one key of its
// scale set or availability set; a fabric managed by UFM or OpenSM gives a
// node's ports the keys of the partitions it is a full member of.
func NodePartition(n Node) Partition {
	return portsPartition(n.HCAs, nil)
}

// HCAsPartition is NodePartition over the named HCAs only (those a
// container holds).
func HCAsPartition(hcas []HCA, names []string) Partition {
	if names == nil {
		names = []string{}
	}
	return portsPartition(hcas, names)
}

// portKeys is one port's tenant keys, by the port's name.
type portKeys struct {
	name string
	keys []PKey
	// defaultFull: the port is a full member of the default partition.
	defaultFull bool
}

func portsPartition(hcas []HCA, only []string) Partition {
	ports, unreadable, ib := activePortKeys(hcas, only)
	switch {
	case ib == 0:
		return Partition{State: PartitionNoInfiniBand}
	case len(unreadable) > 0:
		return Partition{State: PartitionUnreadable, Reason: "partition table unreadable on " + strings.Join(unreadable, "; ")}
	case len(ports) == 0:
		return Partition{State: PartitionNoActivePort, Reason: "no InfiniBand port is ACTIVE"}
	}
	return sharedPartition(ports)
}

// activePortKeys reads the keys of the ACTIVE InfiniBand ports of hcas
// (those named in only, when only is not nil); it also names the ports
// whose table could not be read and counts the InfiniBand ports in all.
func activePortKeys(hcas []HCA, only []string) (ports []portKeys, unreadable []string, ib int) {
	for _, h := range hcas {
		if only != nil && !slices.Contains(only, h.Name) {
			continue
		}
		for _, p := range h.Ports {
			if p.LinkLayer != LinkLayerInfiniBand {
				continue
			}
			ib++
			if p.State != PortStateActive {
				continue
			}
			name := PortName(h.Name, p.Number)
			if p.PKeyError != "" {
				unreadable = append(unreadable, name+": "+p.PKeyError)
				continue
			}
			_, full := p.PKeyIndex(DefaultPartition | PKeyMembershipBit)
			ports = append(ports, portKeys{name: name, keys: p.TenantKeys(), defaultFull: full})
		}
	}
	return ports, unreadable, ib
}

// sharedPartition decides the partition of readable ports (at least one):
// the default one when no port has a tenant key, else the tenant key they
// all share.
func sharedPartition(ports []portKeys) Partition {
	var defaultOnly, limited []string
	shared := ports[0].keys
	for _, p := range ports {
		if len(p.keys) == 0 {
			defaultOnly = append(defaultOnly, p.name)
			if !p.defaultFull {
				limited = append(limited, p.name)
			}
		}
		shared = slices.DeleteFunc(slices.Clone(shared), func(k PKey) bool { return !slices.Contains(p.keys, k) })
	}
	if len(defaultOnly) == len(ports) {
		if len(limited) == 0 {
			return Partition{State: PartitionDefault, Key: DefaultPartition | PKeyMembershipBit}
		}
		return Partition{State: PartitionDefaultOnly, Reason: "only the default partition key, no full membership, on " + strings.Join(limited, ", ")}
	}
	switch len(shared) {
	case 1:
		return Partition{State: PartitionOK, Key: shared[0]}
	case 0:
		return Partition{State: PartitionDisagree, Reason: "ports share no tenant key: " + describeKeys(ports)}
	default:
		return Partition{State: PartitionMultiple, Reason: "ports share several tenant keys (" + joinKeys(shared) + ")"}
	}
}

func describeKeys(ports []portKeys) string {
	groups := map[string][]string{}
	var order []string
	for _, p := range ports {
		k := joinKeys(p.keys)
		if k == "" {
			k = "default only"
		}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], p.name)
	}
	var parts []string
	for _, k := range order {
		parts = append(parts, k+" on "+strings.Join(groups[k], ", "))
	}
	return strings.Join(parts, "; ")
}

func joinKeys(keys []PKey) string {
	s := make([]string, len(keys))
	for i, k := range keys {
		s[i] = k.String()
	}
	return strings.Join(s, ",")
}

// TenantIndex is the index of key in the tables of the named HCAs' ACTIVE
// InfiniBand ports, when it is the same on all of them: NCCL takes one
// NCCL_IB_PKEY for every HCA (src/transport/net_ib.cc, ncclParamIbPkey
// becomes each QP's pkey_index).
func TenantIndex(hcas []HCA, names []string, key PKey) (int, bool) {
	idx, seen := 0, false
	for _, h := range hcas {
		if !slices.Contains(names, h.Name) {
			continue
		}
		for _, p := range h.Ports {
			if p.LinkLayer != LinkLayerInfiniBand || p.State != PortStateActive {
				continue
			}
			i, ok := p.PKeyIndex(key)
			if !ok || seen && i != idx {
				return 0, false
			}
			idx, seen = i, true
		}
	}
	return idx, seen
}

// HCAPartition is the tenant key every InfiniBand port of h holds, whatever
// their state, as "0x800b", or "" when they hold none or several: a
// device's own attribute, which must not come and go with its link (the
// node's label follows NodePartition, which counts ACTIVE ports only).
func HCAPartition(h HCA) string {
	var key PKey
	for _, p := range h.Ports {
		if p.LinkLayer != LinkLayerInfiniBand {
			continue
		}
		keys := p.TenantKeys()
		if p.PKeyError != "" || len(keys) != 1 || key != 0 && keys[0] != key {
			return ""
		}
		key = keys[0]
	}
	if key == 0 {
		return ""
	}
	return key.String()
}
