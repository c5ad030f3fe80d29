package resource

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ibkube/ibkube/hca/inventory"
)

// AllocateShared answers a shared pool's allocation of slots ids like
// Allocate, leaving out the HCAs in heldBy (HCA name to the container
// holding it exclusively): the kubelet counts a shared and an exclusive
// resource apart, so without this a shared container would also reach the
// HCAs other containers were promised alone. It returns the HCAs granted.
// When every healthy HCA is held, it refuses: a shared container would get
// no HCA at all, or another's.
func (p *Pool) AllocateShared(ids []string, heldBy map[string]string) (Grant, []string, error) {
	if p.Exclusive() {
		return Grant{}, nil, fmt.Errorf("%s: AllocateShared on an exclusive pool", p.Resource)
	}
	for _, id := range ids {
		if n, ok := slotIndex(id); !ok || n >= p.Slots {
			return Grant{}, nil, fmt.Errorf("%s: unknown device %q; this node offers %s to %s", p.Resource, id, SlotID(0), SlotID(p.Slots-1))
		}
	}
	hcas, held := p.sharable(heldBy)
	var names []string
	for _, h := range hcas {
		names = append(names, h.Name)
	}
	if len(hcas) == 0 {
		if len(held) == 0 {
			return Grant{}, nil, fmt.Errorf("%s: no healthy HCA on this node", p.Resource)
		}
		sort.Strings(held)
		return Grant{}, nil, fmt.Errorf("%s: every healthy HCA on this node is held exclusively (%s); a shared container would share them, so it is refused", p.Resource, strings.Join(held, ", "))
	}
	return p.allocate(hcas), names, nil
}

// SharedHCAs names the healthy HCAs of the pool that heldBy does not hold:
// what a shared slot allocated now would get.
func (p *Pool) SharedHCAs(heldBy map[string]string) []string {
	hcas, _ := p.sharable(heldBy)
	names := make([]string, 0, len(hcas))
	for _, h := range hcas {
		names = append(names, h.Name)
	}
	return names
}

// sharable splits the pool's healthy HCAs into those a shared slot may
// reach and those heldBy holds ("mlx5_0 by ns/pod/container").
func (p *Pool) sharable(heldBy map[string]string) (free []inventory.HCA, held []string) {
	for _, h := range p.HCAs {
		if !p.healthy(h) {
			continue
		}
		if holder, ok := heldBy[h.Name]; ok {
			held = append(held, h.Name+" by "+holder)
			continue
		}
		free = append(free, h)
	}
	return free, held
}
