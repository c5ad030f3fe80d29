package inventory

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// RoCE GID types as the kernel prints them in
// ports/<n>/gid_attrs/types/<index> (Documentation/ABI/stable/sysfs-class-infiniband).
const (
	GIDTypeRoCEv1 = "IB/RoCE v1"
	GIDTypeRoCEv2 = "RoCE v2"
)

// GIDEntry is one used entry of a RoCE port's GID table.
type GIDEntry struct {
	Index int    `json:"index"`
	GID   string `json:"gid"`
	// Type is "IB/RoCE v1" or "RoCE v2"; Netdev the interface whose address
	// the entry is (a macvlan or VLAN upper device has entries of its own).
	Type   string `json:"type,omitempty"`
	Netdev string `json:"netdev,omitempty"`
}

// IPv4 returns the IPv4 address of an IPv4-mapped GID
// (::ffff:a.b.c.d), the form a RoCE GID of an IPv4 address takes.
func (e GIDEntry) IPv4() (netip.Addr, bool) {
	a, err := netip.ParseAddr(strings.TrimSpace(e.GID))
	if err != nil || !a.Is4In6() {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// RoCEv2IPv4GIDIndex is the index of the port's first RoCE v2 entry holding
// an IPv4 address, the entry NCCL >= 2.21.5 picks itself with its defaults
// (NVIDIA/nccl src/transport/net_ib ncclIbGetGidIndex, ncclUpdateGidIndex:
// NCCL_IB_ADDR_FAMILY=AF_INET, NCCL_IB_ROCE_VERSION_NUM=2), and the one
// NCCL <= 2.20 and UCX need named (NCCL_IB_GID_INDEX, UCX_IB_GID_INDEX).
// ok is false when the table has none (the netdev holds no IPv4 address).
func (p Port) RoCEv2IPv4GIDIndex() (index int, ok bool) {
	for _, e := range p.GIDs {
		if _, v4 := e.IPv4(); v4 && e.Type == GIDTypeRoCEv2 {
			return e.Index, true
		}
	}
	return 0, false
}

// GIDDecision is the one GID index a container's RoCE ports agree on.
type GIDDecision struct {
	// Set is true when every RoCE port has a RoCE v2 IPv4 entry at the
	// same index, Index.
	Set   bool
	Index int
	// RoCE is false when the container holds no RoCE port (nothing to say).
	RoCE bool
	// Reason names the ports and what is missing when Set is false.
	Reason string
}

// DecideGIDIndex finds the RoCE v2 IPv4 GID index of the RoCE ports of
// hcas. NCCL takes one index for every HCA (NVIDIA/nccl issue 890 asks for
// one per HCA), so ports that disagree, or one without such an entry, give
// no index and the reason.
func DecideGIDIndex(hcas []HCA) GIDDecision {
	byIndex := map[int][]string{}
	var missing, unread []string
	roce := false
	for _, h := range hcas {
		for _, p := range h.Ports {
			if p.LinkLayer != LinkLayerEthernet {
				continue
			}
			roce = true
			name := fmt.Sprintf("%s/%d", h.Name, p.Number)
			switch i, ok := p.RoCEv2IPv4GIDIndex(); {
			case p.GIDError != "":
				unread = append(unread, name+" ("+p.GIDError+")")
			case !ok:
				missing = append(missing, name)
			default:
				byIndex[i] = append(byIndex[i], name)
			}
		}
	}
	if !roce {
		return GIDDecision{}
	}
	var why []string
	if len(unread) > 0 {
		why = append(why, "GID table not read on "+strings.Join(unread, ", "))
	}
	if len(missing) > 0 {
		why = append(why, "no RoCE v2 GID of an IPv4 address on "+strings.Join(missing, ", ")+" (the port's netdev, or the pod's interface on it, holds no IPv4 address)")
	}
	if len(byIndex) > 1 {
		why = append(why, "the RoCE v2 IPv4 GID index differs between ports: "+IndexList(byIndex)+" (NCCL takes one index for all)")
	}
	if len(why) > 0 {
		return GIDDecision{RoCE: true, Reason: strings.Join(why, "; ")}
	}
	for i := range byIndex {
		return GIDDecision{RoCE: true, Set: true, Index: i}
	}
	return GIDDecision{RoCE: true, Reason: "no RoCE port"}
}

// IndexList names each GID index with the ports it was found on, in index
// order ("3 on mlx5_0:1; 5 on mlx5_1:1"), for a message saying the ports
// disagree.
func IndexList(byIndex map[int][]string) string {
	parts := make([]string, 0, len(byIndex))
	for _, i := range slices.Sorted(maps.Keys(byIndex)) {
		parts = append(parts, fmt.Sprintf("%d on %s", i, strings.Join(byIndex[i], ", ")))
	}
	return strings.Join(parts, "; ")
}
